#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "built.hpp"
#include "config_builtin.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

std::string shipped_config() {
    return std::string(GPUBIND_SOURCE_DIR) + "/config/config.toml";
}

const config::CatalogEntry* find(const std::vector<config::CatalogEntry>& list,
                                 const std::string& name) {
    for (const auto& e : list)
        if (e.name == name) return &e;
    return nullptr;
}

std::string error_of(std::string_view toml) {
    try {
        config::parse_config(toml, "test.toml");
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        return e.what();
    }
    return "no error";
}

TEST(Config, DefaultsAreTheShippedFile) {
    // The shipped config/config.toml parses to exactly the built-in defaults.
    config::Config shipped = config::load_config(shipped_config());
    config::Config builtin = config::default_config();
    EXPECT_EQ(shipped.roots.driver, builtin.roots.driver);
    EXPECT_EQ(shipped.catalog.libraries.size(), builtin.catalog.libraries.size());
    EXPECT_EQ(builtin.roots.proc, "/proc");
    EXPECT_TRUE(builtin.policy.accept_envvar_unprivileged);
    EXPECT_FALSE(builtin.policy.accept_volume_mounts);
    EXPECT_EQ(builtin.policy.supported, config::kCapAll);
    EXPECT_EQ(builtin.ldcache_path(), "/etc/ld.so.cache");
}

TEST(Config, GeneratedDefaultsAreWhatTheShippedFileSays) {
    // The built-in config is generated at build time from config/config.toml;
    // reading that file now, the way the generator does (over Config{}), gives
    // the same config, every field: the two cannot drift apart.
    const std::string text = util::read_file(shipped_config(), 1u << 20);
    const config::Config parsed = config::detail::parse_builtin_config(text, "config.toml");
    const config::Config builtin = config::default_config();
    // Written out as the generator writes them, a difference reads as a diff.
    EXPECT_EQ(config::detail::builtin_config_source(builtin, text),
              config::detail::builtin_config_source(parsed, text));
    // Config's defaulted operator== compares every member, present and future.
    EXPECT_TRUE(builtin == parsed);
    EXPECT_TRUE(builtin.source.empty());
    // Not vacuous: the file does set what the C++ members alone do not.
    EXPECT_FALSE(parsed == config::Config{});
    EXPECT_FALSE(builtin.catalog.libraries.empty());
}

TEST(Config, ThePackagedFileIsTakenAsTheDefaultsWithoutAParse) {
    // The packages install config/config.toml as is; parse_config() knows its
    // bytes (built in) and takes the defaults. That shortcut must give what a
    // parse of the file over the defaults gives, and nothing else may take it.
    const std::string text = util::read_file(shipped_config(), 1u << 20);
    EXPECT_EQ(config::detail::builtin_config_text(), text);
    const config::Config quick = config::parse_config(text, "/etc/gpubind/config.toml");
    config::Config parsed =
        config::detail::parse_config_over(config::default_config(), text, "config.toml");
    parsed.source = "/etc/gpubind/config.toml";
    EXPECT_TRUE(quick == parsed);
    EXPECT_EQ(quick.source, "/etc/gpubind/config.toml");
    // One key changed: parsed, not the defaults.
    std::string edited = text;
    const std::size_t at = edited.find("level = \"info\"");
    ASSERT_NE(at, std::string::npos);
    edited.replace(at, 14, "level = \"debug\"");
    const config::Config changed = config::parse_config(edited, "x");
    EXPECT_EQ(changed.log.level, "debug");
    EXPECT_EQ(config::default_config().log.level, "info");
}

TEST(Config, CudaCompatIsOnByDefaultAndCanBeTurnedOff) {
    EXPECT_TRUE(config::default_config().policy.cuda_compat);
    EXPECT_TRUE(config::load_config(shipped_config()).policy.cuda_compat);
    EXPECT_FALSE(
        config::parse_config("[policy]\ncuda-compat = false\n", "t.toml").policy.cuda_compat);
    EXPECT_TRUE(
        config::parse_config("[policy]\ncuda-compat = true\n", "t.toml").policy.cuda_compat);
    EXPECT_THROW(config::parse_config("[policy]\ncuda-compat = \"no\"\n", "t.toml"), util::Error);
}

TEST(Config, OnRefusedFailsByDefaultAndTakesFailOrWarn) {
    EXPECT_EQ(config::default_config().policy.on_refused, config::OnRefused::Fail);
    EXPECT_EQ(config::load_config(shipped_config()).policy.on_refused, config::OnRefused::Fail);
    EXPECT_EQ(config::parse_config("[policy]\non-refused = \"warn\"\n", "t.toml").policy.on_refused,
              config::OnRefused::Warn);
    EXPECT_EQ(config::parse_config("[policy]\non-refused = \"fail\"\n", "t.toml").policy.on_refused,
              config::OnRefused::Fail);
    EXPECT_EQ(error_of("[policy]\non-refused = \"ignore\"\n"),
              "load config test.toml: policy.on-refused: expected \"fail\" or \"warn\", not "
              "\"ignore\"");
    EXPECT_EQ(error_of("[policy]\non-refused = true\n"),
              "load config test.toml: policy.on-refused: expected a string");
}

TEST(Config, SharesAreStrictByDefaultOrSoft) {
    EXPECT_EQ(config::default_config().policy.shares, config::SharesPolicy::Strict);
    EXPECT_EQ(config::load_config(shipped_config()).policy.shares, config::SharesPolicy::Strict);
    EXPECT_EQ(config::parse_config("[policy]\nshares = \"soft\"\n", "t.toml").policy.shares,
              config::SharesPolicy::Soft);
    EXPECT_EQ(config::parse_config("[policy]\nshares = \"strict\"\n", "t.toml").policy.shares,
              config::SharesPolicy::Strict);
    EXPECT_EQ(error_of("[policy]\nshares = \"warn\"\n"),
              "load config test.toml: policy.shares: expected \"strict\" or \"soft\", not "
              "\"warn\"");
}

TEST(Config, LdcacheIsGpubindsWriterByDefaultOrLdconfig) {
    EXPECT_EQ(config::default_config().policy.ldcache, config::LdcacheMethod::Gpubind);
    EXPECT_EQ(config::load_config(shipped_config()).policy.ldcache, config::LdcacheMethod::Gpubind);
    EXPECT_EQ(config::parse_config("[policy]\nldcache = \"ldconfig\"\n", "t.toml").policy.ldcache,
              config::LdcacheMethod::Ldconfig);
    EXPECT_EQ(config::parse_config("[policy]\nldcache = \"gpubind\"\n", "t.toml").policy.ldcache,
              config::LdcacheMethod::Gpubind);
    EXPECT_EQ(error_of("[policy]\nldcache = \"none\"\n"),
              "load config test.toml: policy.ldcache: expected \"gpubind\" or \"ldconfig\", not "
              "\"none\"");
    // [node] ldcache stays the host's cache path.
    EXPECT_EQ(config::parse_config("[node]\nldcache = \"/x/ld.so.cache\"\n", "t.toml").ldcache,
              "/x/ld.so.cache");
}

TEST(Config, DeviceProgramsAreKeptOnTheSystemsBpffsByDefaultOrNowhere) {
    EXPECT_EQ(config::default_config().bpf_dir, "/sys/fs/bpf/gpubind");
    EXPECT_EQ(config::load_config(shipped_config()).bpf_dir, "/sys/fs/bpf/gpubind");
    EXPECT_EQ(config::parse_config("[node]\nbpf-dir = \"/run/bpf/x\"\n", "t.toml").bpf_dir,
              "/run/bpf/x");
    EXPECT_EQ(config::parse_config("[node]\nbpf-dir = \"\"\n", "t.toml").bpf_dir, "");
    EXPECT_EQ(error_of("[node]\nbpf-dir = \"bpf\"\n"),
              "load config test.toml: node.bpf-dir: expected an absolute path");
    // The hook's target takes it as it is.
    EXPECT_EQ(exec::make_target(config::parse_config("[node]\nbpf-dir = \"\"\n", "t.toml"), 7, "/r")
                  .bpf_dir,
              "");
    EXPECT_EQ(exec::make_target(config::default_config(), 7, "/r").bpf_dir, "/sys/fs/bpf/gpubind");
}

TEST(Config, CatalogMapsFilesToCapabilities) {
    config::Config c = config::default_config();
    const auto* cuda = find(c.catalog.libraries, "libcuda.so");
    ASSERT_NE(cuda, nullptr);
    EXPECT_EQ(cuda->caps, config::kCapCompute);
    const auto* smi = find(c.catalog.binaries, "nvidia-smi");
    ASSERT_NE(smi, nullptr);
    EXPECT_EQ(smi->caps, config::kCapUtility);
    // Listed under utility and compute: one entry bringing both.
    const auto* socket = find(c.catalog.ipcs, "/run/nvidia-persistenced/socket");
    ASSERT_NE(socket, nullptr);
    EXPECT_EQ(socket->caps, config::kCapUtility | config::kCapCompute);
}

TEST(Config, FileOverridesDefaults) {
    config::Config c = config::parse_config(R"(
[node]
driver-root = "/run/nvidia/driver"
ldcache = "/run/nvidia/driver/etc/ld.so.cache"
[policy]
accept-volume-mounts = true
supported-capabilities = "utility,compute"
[log]
file = "/var/log/gpubind.log"
level = "debug"
[catalog.compute]
libraries = ["libcuda.so"]
)",
                                            "test.toml");
    EXPECT_EQ(c.roots.driver, "/run/nvidia/driver");
    EXPECT_EQ(c.roots.dev, "/");
    EXPECT_EQ(c.ldcache_path(), "/run/nvidia/driver/etc/ld.so.cache");
    EXPECT_TRUE(c.policy.accept_volume_mounts);
    EXPECT_EQ(c.policy.supported, config::kCapUtility | config::kCapCompute);
    EXPECT_EQ(c.log.level, "debug");
    EXPECT_EQ(find(c.catalog.libraries, "libnvidia-opencl.so"), nullptr);
    ASSERT_NE(find(c.catalog.libraries, "libcuda.so"), nullptr);
    ASSERT_NE(find(c.catalog.libraries, "libnvidia-ml.so"), nullptr);  // utility untouched
    EXPECT_EQ(c.source, "test.toml");
}

TEST(Config, AcceptsNvidiaContainerRuntimeKeys) {
    config::Config c = config::parse_config(R"(
disable-require = true
supported-driver-capabilities = "compute,utility,video"
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
[nvidia-container-cli]
root = "/run/nvidia/driver"
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
no-cgroups = true
[nvidia-container-runtime]
log-level = "info"
runtimes = ["docker-runc", "runc"]
mode = "auto"
[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
)",
                                            "nvidia.toml");
    EXPECT_TRUE(c.policy.disable_require);
    EXPECT_EQ(c.policy.supported, config::kCapCompute | config::kCapUtility | config::kCapVideo);
    EXPECT_FALSE(c.policy.accept_envvar_unprivileged);
    EXPECT_TRUE(c.policy.accept_volume_mounts);
    EXPECT_EQ(c.roots.driver, "/run/nvidia/driver");
    EXPECT_EQ(c.ldconfig, "/sbin/ldconfig.real");
    EXPECT_FALSE(c.policy.cgroups);
    EXPECT_EQ(c.runtimes, (std::vector<std::string>{"docker-runc", "runc"}));
}

TEST(Config, ErrorsNameTheKey) {
    EXPECT_EQ(error_of("[node]\nflavour = 1\n"),
              "load config test.toml: node.flavour: unknown key");
    EXPECT_EQ(error_of("colour = 1\n"), "load config test.toml: colour: unknown key");
    EXPECT_EQ(error_of("[policy]\naccept-volume-mounts = \"yes\"\n"),
              "load config test.toml: policy.accept-volume-mounts: expected true or false");
    EXPECT_EQ(error_of("[node]\ndriver-root = \"relative\"\n"),
              "load config test.toml: node.driver-root: expected an absolute path");
    EXPECT_EQ(error_of("[policy]\nsupported-capabilities = \"compute,warp\"\n"),
              "load config test.toml: policy.supported-capabilities: unknown capability \"warp\"");
    EXPECT_EQ(error_of("[catalog.turbo]\nlibraries = []\n"),
              "load config test.toml: catalog.turbo: not a capability (utility, compute, video, "
              "graphics, display, ngx)");
    EXPECT_EQ(error_of("[catalog.compute]\nlibraries = [\"../libcuda.so\"]\n"),
              "load config test.toml: catalog.compute.libraries: \"../libcuda.so\" must be a file "
              "name, not a path");
    EXPECT_EQ(error_of("[log]\nlevel = \"loud\"\n"),
              "load config test.toml: log.level: unknown level \"loud\" (trace, debug, info, warn, "
              "error, off)");
    EXPECT_NE(error_of("[node\n").find("load config test.toml: line 1: "), std::string::npos);
}

TEST(Config, CharactersTomlPlusPlusCannotParseSafelyAreAnErrorNotUndefinedBehaviour) {
    // U+00A1 after a value, and U+00E9 in a multi-line string after a
    // line-ending backslash: toml++ 3.3 takes an "unreachable" branch on both.
    EXPECT_EQ(error_of("[policy]\ndisable-require = true\xc2\xa1\n"),
              "load config test.toml: line 2: character U+00A1 is not supported here; inside a "
              "string write it as \\u00A1");
    EXPECT_EQ(error_of("[log]\nfile = \"\"\"/var/log/\\\n  \xc3\xa9.log\"\"\"\n"),
              "load config test.toml: line 3: character U+00E9 is not supported here; inside a "
              "string write it as \\u00E9");
    // Written as an escape it is fine, and so are the characters toml++ handles.
    config::Config c = config::parse_config(
        "# \xe4\xb8\xad\n[log]\nfile = \"/var/log/caf\\u00e9.log\"\n", "ok.toml");
    EXPECT_EQ(c.log.file, "/var/log/caf\xc3\xa9.log");
}

TEST(Config, LoadsFromFileAndEnvironment) {
    test::TempDir dir;
    std::ofstream(dir / "c.toml") << "[policy]\ndisable-require = true\n";
    EXPECT_TRUE(config::load_effective_config(dir / "c.toml").policy.disable_require);
    ::setenv("GPUBIND_CONFIG", (dir / "c.toml").c_str(), 1);
    EXPECT_TRUE(config::load_effective_config({}).policy.disable_require);
    ::unsetenv("GPUBIND_CONFIG");
    EXPECT_THROW(config::load_config(dir / "missing.toml"), util::Error);
}

// What load_trusted_config refused, or "" when it loaded.
std::string trusted_error(const std::filesystem::path& path) {
    try {
        config::load_trusted_config(path);
        return "";
    } catch (const util::Error& e) {
        return e.what();
    }
}

TEST(Config, TheHooksConfigMustBeRootsRegularFileNoOneElseMayWrite) {
    // The hook and the runtime run as root for every container: a config
    // another user could write would let them choose what gets mounted.
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown)";
    test::TempDir dir;
    const auto file = dir / "c.toml";
    std::ofstream(file) << "[policy]\ndisable-require = true\n";
    ::chmod(file.c_str(), 0644);
    EXPECT_EQ(trusted_error(file), "");
    EXPECT_TRUE(config::load_trusted_config(file).policy.disable_require);

    ::chmod(file.c_str(), 0666);
    EXPECT_EQ(trusted_error(file),
              "load config " + file.string() + ": writable by other users; refusing");
    ::chmod(file.c_str(), 0620);  // group-writable, the group not root's
    ASSERT_EQ(::chown(file.c_str(), ::geteuid(), 1234), 0);
    EXPECT_NE(trusted_error(file).find("writable by other users; refusing"), std::string::npos);
    ::chmod(file.c_str(), 0644);
    ASSERT_EQ(::chown(file.c_str(), 4321, 0), 0) << "the tests run as root";
    EXPECT_NE(trusted_error(file).find("owned by uid 4321, not root; refusing"), std::string::npos);

    std::filesystem::create_symlink("c.toml", dir / "link.toml");
    EXPECT_NE(trusted_error(dir / "link.toml").find("open config " + (dir / "link.toml").string()),
              std::string::npos);
    EXPECT_NE(trusted_error(dir.path()).find("not a regular file; refusing"), std::string::npos);
    EXPECT_NE(trusted_error(dir / "missing.toml").find("No such file"), std::string::npos);

    // By the environment: an absolute path (this one names a good file), and
    // a named file must exist.
    ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);
    ASSERT_EQ(trusted_error(file), "");
    ::setenv("GPUBIND_CONFIG",
             std::filesystem::relative(file, std::filesystem::current_path()).c_str(), 1);
    EXPECT_THROW(config::load_trusted_config(), util::Error);
    ::setenv("GPUBIND_CONFIG", (dir / "missing.toml").c_str(), 1);
    EXPECT_THROW(config::load_trusted_config(), util::Error);
    ::unsetenv("GPUBIND_CONFIG");
}

}  // namespace
}  // namespace gpubind
