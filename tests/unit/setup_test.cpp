// gpubind setup: each engine's files, set up from nothing, from an empty file and from a
// file with other settings; applied twice equals applied once; --remove gives back the
// original; --dry-run writes nothing; bad files are refused with nothing changed.
//
// Checked by the engines' own parsers where Debian 12 ships the engine:
//   containerd (1.6): `containerd --config FILE config dump` merges config.toml and the
//     drop-in it imports;
//   podman (4.3): `podman --hooks-dir DIR run` loads the hooks.d file and runs the hook.
// Not checkable here: dockerd (Debian's docker.io 20.10 has no `--validate`, which came
// with Docker 23, and no daemon runs here) and CRI-O (not packaged in Debian 12): their
// files are checked for the shape their documentation gives, parsed by nlohmann_json and
// toml++.
#include <sys/wait.h>

#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <filesystem>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/toml.hpp"  // toml++ as the library includes it
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;
using namespace gpubind::setup;
using gpubind::test::TempDir;
using testing::HasSubstr;
using Json = nlohmann::ordered_json;
using Files = std::map<std::string, std::string>;

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void put(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

// Every regular file under `dir`, by relative path.
Files snapshot(const fs::path& dir) {
    Files out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = slurp(e.path());
    return out;
}

struct Result {
    int rc = -1;
    std::string out;
};

Result sh(const std::string& cmd) {
    auto o = test::run(cmd + " 2>&1");
    return {o.status, std::move(o.text)};
}

std::vector<std::string> run(const fs::path& prefix, Engine e, bool remove = false,
                             bool set_default = false, bool dry_run = false) {
    Request r;
    r.engine = e;
    r.prefix = prefix;
    r.remove = remove;
    r.options.set_default = set_default;
    return apply_setup(plan_setup(r), dry_run);
}

// The file each engine edits (containerd: its config.toml; the drop-in comes with it).
fs::path main_file(Engine e) {
    switch (e) {
        case Engine::Docker:
            return kDockerConfig;
        case Engine::Containerd:
            return kContainerdConfig;
        case Engine::Crio:
            return kCrioDropIn;
        case Engine::Podman:
            return kHooksFile;
        case Engine::Runc:
            break;
    }
    return {};
}

// containerd's config.toml as Debian 12 ships it, with a comment and another setting.
const std::string kDebianContainerd = R"(# local changes below
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9" # pinned
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
)";

// daemon.json as an admin might have it (2-space indentation, keys in no order).
const std::string kDockerOther = R"({
  "log-driver": "journald",
  "runtimes": {
    "crun": {
      "path": "/usr/bin/crun"
    }
  },
  "data-root": "/srv/docker",
  "default-runtime": "crun"
}
)";

std::string other_settings(Engine e) {
    switch (e) {
        case Engine::Docker:
            return kDockerOther;
        case Engine::Containerd:
            return kDebianContainerd;
        // Drop-ins are gpubind's own files: "other settings" are whatever an admin left there.
        case Engine::Crio:
            return "[crio.runtime]\nlog_level = \"debug\"\n";
        case Engine::Podman:
            return "{\"version\": \"1.0.0\"}\n";
        case Engine::Runc:
            break;
    }
    return {};
}

enum class Start { Absent, Empty, Other };

struct Case {
    Engine engine;
    Start start;
};

std::string name_of(const testing::TestParamInfo<Case>& info) {
    const char* engines[] = {"docker", "containerd", "crio", "podman", "runc"};
    const char* starts[] = {"absent", "empty", "other"};
    return std::string(engines[static_cast<int>(info.param.engine)]) + "_" +
           starts[static_cast<int>(info.param.start)];
}

class SetupRoundTrip : public testing::TestWithParam<Case> {};

TEST_P(SetupRoundTrip, TwiceIsOnceAndRemoveRestores) {
    const auto [engine, start] = GetParam();
    TempDir dir;
    if (start != Start::Absent)
        put(dir / main_file(engine), start == Start::Empty ? "" : other_settings(engine));
    const Files original = snapshot(dir.path());

    for (bool set_default : {false, true}) {
        SCOPED_TRACE(set_default ? "--set-default" : "");
        const auto first = run(dir.path(), engine, false, set_default);
        const Files once = snapshot(dir.path());
        EXPECT_NE(once, original);
        for (const auto& line : first) EXPECT_THAT(line, testing::StartsWith("wrote ")) << line;
        if (start != Start::Absent) {  // the original is kept, once
            EXPECT_EQ(once.at(main_file(engine).string() + ".gpubind-backup"),
                      original.at(main_file(engine).string()));
        }

        const auto second = run(dir.path(), engine, false, set_default);
        EXPECT_EQ(snapshot(dir.path()), once);
        for (const auto& line : second)
            EXPECT_THAT(line, testing::StartsWith("unchanged ")) << line;

        run(dir.path(), engine, true);
        EXPECT_EQ(snapshot(dir.path()), original);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Engines, SetupRoundTrip,
    testing::Values(Case{Engine::Docker, Start::Absent}, Case{Engine::Docker, Start::Empty},
                    Case{Engine::Docker, Start::Other}, Case{Engine::Containerd, Start::Absent},
                    Case{Engine::Containerd, Start::Empty}, Case{Engine::Containerd, Start::Other},
                    Case{Engine::Crio, Start::Absent}, Case{Engine::Crio, Start::Empty},
                    Case{Engine::Crio, Start::Other}, Case{Engine::Podman, Start::Absent},
                    Case{Engine::Podman, Start::Empty}, Case{Engine::Podman, Start::Other}),
    name_of);

// --- docker ---

TEST(SetupDocker, KeepsEveryOtherKeyInItsOrder) {
    TempDir dir;
    put(dir / kDockerConfig, kDockerOther);
    run(dir.path(), Engine::Docker);
    const Json j = Json::parse(slurp(dir / kDockerConfig));
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    EXPECT_THAT(keys,
                testing::ElementsAre("log-driver", "runtimes", "data-root", "default-runtime"));
    EXPECT_EQ(j["runtimes"]["crun"], Json::parse(R"({"path": "/usr/bin/crun"})"));
    // Docker's documented form: "runtimes": {"<name>": {"path": ..., "runtimeArgs": [...]}}.
    EXPECT_EQ(j["runtimes"]["gpubind"],
              Json::parse(R"({"path": "/usr/bin/gpubind-runtime", "runtimeArgs": []})"));
    EXPECT_EQ(j["default-runtime"], "crun");  // not ours to change without --set-default

    run(dir.path(), Engine::Docker, false, true);
    const Json d = Json::parse(slurp(dir / kDockerConfig));
    EXPECT_EQ(d["default-runtime"], "gpubind");
    EXPECT_EQ(d.size(), 4u);
    EXPECT_EQ(d["data-root"], "/srv/docker");
}

TEST(SetupDocker, RemoveWithoutBackupTakesOutOnlyGpubindsKeys) {
    TempDir dir;
    put(dir / kDockerConfig, kDockerOther);
    run(dir.path(), Engine::Docker);
    fs::remove(dir / "etc/docker/daemon.json.gpubind-backup");
    const auto report = run(dir.path(), Engine::Docker, true);
    // Same indentation, same order: the original bytes.
    EXPECT_EQ(slurp(dir / kDockerConfig), kDockerOther);
    ASSERT_EQ(report.size(), 1u);
    EXPECT_THAT(report[0], HasSubstr("wrote " + (dir / kDockerConfig).string()));
}

TEST(SetupDocker, RemoveOfAFileGpubindCreatedDeletesIt) {
    TempDir dir;
    run(dir.path(), Engine::Docker, false, true);
    ASSERT_TRUE(fs::exists(dir / kDockerConfig));
    EXPECT_FALSE(fs::exists(dir / "etc/docker/daemon.json.gpubind-backup"));
    run(dir.path(), Engine::Docker, true);
    EXPECT_FALSE(fs::exists(dir / kDockerConfig));
}

// --- containerd ---

const std::string kImport = "/etc/containerd/conf.d/gpubind.toml";

TEST(SetupContainerd, ConfigTomlGetsOneImportLineAndNothingElse) {
    TempDir dir;
    put(dir / kContainerdConfig, kDebianContainerd);
    const auto report = run(dir.path(), Engine::Containerd);
    std::string edited = slurp(dir / kContainerdConfig);
    const std::string line = "imports = [\"" + kImport + "\"]\n";
    const auto at = edited.find(line);
    ASSERT_NE(at, std::string::npos) << edited;
    EXPECT_EQ(edited.substr(at - 12, 12), "version = 2\n");
    EXPECT_EQ(edited.erase(at, line.size()), kDebianContainerd);
    ASSERT_EQ(report.size(), 2u);
    EXPECT_THAT(report[0], HasSubstr("wrote " + (dir / kContainerdDropIn).string()));
    EXPECT_THAT(report[1], HasSubstr("wrote " + (dir / kContainerdConfig).string()));
}

TEST(SetupContainerd, ExistingImportsAreExtendedAndRestoredWithoutBackup) {
    TempDir dir;
    const std::string original =
        "version = 2\nroot = \"/srv/ctd\"\nimports = [\"/etc/containerd/a.toml\"]  # keep\n";
    put(dir / kContainerdConfig, original);
    run(dir.path(), Engine::Containerd);
    EXPECT_EQ(slurp(dir / kContainerdConfig),
              "version = 2\nroot = \"/srv/ctd\"\nimports = [\"/etc/containerd/a.toml\", \"" +
                  kImport + "\"]  # keep\n");
    fs::remove(dir / "etc/containerd/config.toml.gpubind-backup");
    run(dir.path(), Engine::Containerd, true);
    EXPECT_EQ(slurp(dir / kContainerdConfig), original);
    EXPECT_FALSE(fs::exists(dir / kContainerdDropIn));
}

TEST(SetupContainerd, AnImportLineGpubindAddedIsTakenOutWhole) {
    TempDir dir;
    put(dir / kContainerdConfig, kDebianContainerd);
    run(dir.path(), Engine::Containerd);
    fs::remove(dir / "etc/containerd/config.toml.gpubind-backup");
    run(dir.path(), Engine::Containerd, true);
    EXPECT_EQ(slurp(dir / kContainerdConfig), kDebianContainerd);
}

TEST(SetupContainerd, AGlobThatAlreadyImportsTheDropInIsEnough) {
    TempDir dir;
    const std::string original = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
    put(dir / kContainerdConfig, original);
    run(dir.path(), Engine::Containerd);
    EXPECT_EQ(slurp(dir / kContainerdConfig), original);
    EXPECT_TRUE(fs::exists(dir / kContainerdDropIn));
}

TEST(SetupContainerd, OtherConfigVersionsAreRefusedNamingTheFile) {
    for (const std::string text :
         {"[plugins.cri]\n  sandbox_image = \"x\"\n", "version = 3\n", "version = \"2\"\n"}) {
        TempDir dir;
        put(dir / kContainerdConfig, text);
        const Files before = snapshot(dir.path());
        try {
            run(dir.path(), Engine::Containerd);
            ADD_FAILURE() << "accepted " << text;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
            EXPECT_THAT(e.what(), HasSubstr((dir / kContainerdConfig).string()));
            EXPECT_THAT(e.what(), HasSubstr("version"));
        }
        EXPECT_EQ(snapshot(dir.path()), before);
    }
}

// The drop-in with config.toml's import pointed at where the test wrote it.
fs::path containerd_config_for_dump(const TempDir& dir) {
    std::string text = slurp(dir / kContainerdConfig);
    const auto at = text.find(kImport);
    if (at != std::string::npos)
        text.replace(at, kImport.size(), (dir / kContainerdDropIn).string());
    const fs::path out = dir / "for-dump.toml";
    put(out, text);
    return out;
}

toml::table containerd_dump(const fs::path& config) {
    const Result r = sh("containerd --config " + config.string() + " config dump");
    EXPECT_EQ(r.rc, 0) << r.out;
    return toml::parse(r.out);
}

TEST(SetupContainerd, ContainerdsOwnParserSeesTheRuntimeAndKeepsTheOtherSettings) {
    ASSERT_EQ(sh("containerd --version").rc, 0)
        << "containerd is not installed (scripts/deps installs Debian's containerd)";
    TempDir dir;
    put(dir / kContainerdConfig, kDebianContainerd);
    run(dir.path(), Engine::Containerd, false, true);
    const toml::table merged = containerd_dump(containerd_config_for_dump(dir));
    const auto cri = merged["plugins"]["io.containerd.grpc.v1.cri"];
    const auto runtime = cri["containerd"]["runtimes"]["gpubind"];
    EXPECT_EQ(runtime["runtime_type"].value_or(std::string()), "io.containerd.runc.v2");
    EXPECT_EQ(runtime["options"]["BinaryName"].value_or(std::string()), "/usr/bin/gpubind-runtime");
    EXPECT_EQ(cri["containerd"]["default_runtime_name"].value_or(std::string()), "gpubind");
    // containerd 1.x replaces the whole cri section with the imported one: these survive
    // only because the drop-in carries them.
    EXPECT_EQ(cri["cni"]["bin_dir"].value_or(std::string()), "/usr/lib/cni");
    EXPECT_EQ(cri["sandbox_image"].value_or(std::string()), "registry.k8s.io/pause:3.9");
    EXPECT_EQ(cri["containerd"]["runtimes"]["runc"]["runtime_type"].value_or(std::string()),
              "io.containerd.runc.v2");
    EXPECT_EQ(merged["plugins"]["io.containerd.internal.v1.opt"]["path"].value_or(std::string()),
              "/var/lib/containerd/opt");

    run(dir.path(), Engine::Containerd, true);
    const toml::table after = containerd_dump(dir / kContainerdConfig);
    EXPECT_FALSE(
        after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpubind"]);
    EXPECT_EQ(after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
                  .value_or(std::string()),
              "runc");
}

TEST(SetupContainerd, ContainerdAcceptsWhatSetupCreatesFromNothing) {
    ASSERT_EQ(sh("containerd --version").rc, 0)
        << "containerd is not installed (scripts/deps installs Debian's containerd)";
    TempDir dir;
    run(dir.path(), Engine::Containerd);
    const toml::table merged = containerd_dump(containerd_config_for_dump(dir));
    const auto ctd = merged["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
    EXPECT_EQ(ctd["runtimes"]["gpubind"]["options"]["BinaryName"].value_or(std::string()),
              "/usr/bin/gpubind-runtime");
    EXPECT_EQ(ctd["default_runtime_name"].value_or(std::string()), "runc");
    // containerd's built-in runc, the default, is still there.
    EXPECT_EQ(ctd["runtimes"]["runc"]["runtime_type"].value_or(std::string()),
              "io.containerd.runc.v2");
}

// --- CRI-O (not packaged in Debian 12: the shape its crio.conf(5) gives) ---

TEST(SetupCrio, DropInHasTheRuntimeAndTheDefault) {
    TempDir dir;
    put(dir / "etc/crio/crio.conf.d/10-admin.conf", "[crio.runtime]\nlog_level = \"debug\"\n");
    run(dir.path(), Engine::Crio, false, true);
    const toml::table t = toml::parse(slurp(dir / kCrioDropIn));
    EXPECT_EQ(t["crio"]["runtime"]["runtimes"]["gpubind"]["runtime_path"].value_or(std::string()),
              "/usr/bin/gpubind-runtime");
    EXPECT_EQ(t["crio"]["runtime"]["runtimes"]["gpubind"]["runtime_type"].value_or(std::string()),
              "oci");
    EXPECT_EQ(t["crio"]["runtime"]["default_runtime"].value_or(std::string()), "gpubind");
    EXPECT_EQ(slurp(dir / "etc/crio/crio.conf.d/10-admin.conf"),
              "[crio.runtime]\nlog_level = \"debug\"\n");
    run(dir.path(), Engine::Crio);
    EXPECT_FALSE(toml::parse(slurp(dir / kCrioDropIn))["crio"]["runtime"]["default_runtime"]);
}

// --- podman (hooks.d) ---

TEST(SetupPodman, HooksFileHasTheSchemaShape) {
    TempDir dir;
    run(dir.path(), Engine::Podman);
    const Json j = Json::parse(slurp(dir / kHooksFile));
    EXPECT_EQ(j["version"], "1.0.0");
    EXPECT_EQ(j["hook"]["path"], "/usr/bin/gpubind-hook");
    EXPECT_EQ(j["hook"]["args"], Json::parse(R"(["gpubind-hook", "prestart"])"));
    EXPECT_EQ(j["when"]["always"], true);
    EXPECT_EQ(j["stages"], Json::parse(R"(["prestart"])"));
}

TEST(SetupPodman, PodmanLoadsTheHooksFileAndRunsTheHook) {
    ASSERT_EQ(sh("podman --version").rc, 0)
        << "podman is not installed (scripts/deps installs Debian's podman)";
    TempDir dir;
    // A stand-in hook that records how podman ran it.
    const fs::path record = dir / "hook-ran";
    put(dir / "hook.sh",
        "#!/bin/sh\necho \"$0 $*\" > " + record.string() + "\ncat >> " + record.string() + "\n");
    fs::permissions(dir / "hook.sh", fs::perms::owner_all);
    fs::create_directories(dir / "rootfs/bin");
    fs::copy_file("/bin/busybox", dir / "rootfs/bin/busybox");
    fs::create_symlink("busybox", dir / "rootfs/bin/true");

    Request r;
    r.engine = Engine::Podman;
    r.prefix = dir / "prefix";
    r.options.hook_path = (dir / "hook.sh").string();
    apply_setup(plan_setup(r), false);

    // The container itself may fail to start in a restricted sandbox; what matters is that
    // podman accepted the hooks file and ran the hook at prestart with gpubind's arguments.
    // Storage, run state, events and libpod's database private to the test (its own
    // containers.conf), never the host's /var/lib/containers.
    const fs::path state = dir / "podman";
    put(dir / "containers.conf", "[engine]\nstatic_dir = \"" + (state / "libpod").string() +
                                     "\"\nvolume_path = \"" + (state / "volumes").string() +
                                     "\"\n");
    const Result out =
        // runc: crun, podman's first choice, refuses this host's hybrid cgroups.
        sh("CONTAINERS_CONF=" + (dir / "containers.conf").string() + " podman --root " +
           (state / "storage").string() + " --runroot " + (state / "run").string() + " --tmpdir " +
           (state / "tmp").string() +
           " --storage-driver vfs --cgroup-manager cgroupfs --events-backend file" +
           " --runtime runc --hooks-dir " + (dir / "prefix" / kHooksFile).parent_path().string() +
           " run --rm --network none --rootfs " + (dir / "rootfs").string() + " /bin/true");
    ASSERT_TRUE(fs::exists(record)) << out.out;
    const std::string ran = slurp(record);
    EXPECT_THAT(ran, testing::StartsWith(r.options.hook_path + " prestart\n")) << ran;
    EXPECT_THAT(ran, HasSubstr("\"status\":\"creating\"")) << ran;
}

// --- runc (a bundle's config.json) ---

TEST(SetupRunc, BundleGetsThePrestartHookOnceAndLosesItAgain) {
    TempDir dir;
    ASSERT_EQ(sh("runc spec --bundle " + dir.path().string()).rc, 0);
    const std::string original = slurp(dir / "config.json");
    Request r;
    r.engine = Engine::Runc;
    r.bundle = dir.path();
    apply_setup(plan_setup(r), false);
    const std::string once = slurp(dir / "config.json");
    const Json j = Json::parse(once);
    ASSERT_EQ(j["hooks"]["prestart"].size(), 1u);
    EXPECT_EQ(j["hooks"]["prestart"][0]["path"], "/usr/bin/gpubind-hook");
    EXPECT_EQ(j["hooks"]["prestart"][0]["args"], Json::parse(R"(["gpubind-hook", "prestart"])"));
    // Everything else is runc's spec as it was, in its order.
    Json rest = j;
    rest.erase("hooks");
    EXPECT_EQ(rest, Json::parse(original));

    apply_setup(plan_setup(r), false);
    EXPECT_EQ(slurp(dir / "config.json"), once);

    // Without the backup only the hook goes; runc's own tab-indented layout comes back.
    fs::remove(dir / "config.json.gpubind-backup");
    r.remove = true;
    apply_setup(plan_setup(r), false);
    EXPECT_EQ(Json::parse(slurp(dir / "config.json")), Json::parse(original));
    EXPECT_EQ(slurp(dir / "config.json"), original);
}

// --- dry run, bad files ---

TEST(Setup, DryRunWritesNothing) {
    for (Engine e : {Engine::Docker, Engine::Containerd, Engine::Crio, Engine::Podman}) {
        TempDir dir;
        if (e == Engine::Docker) put(dir / kDockerConfig, kDockerOther);
        if (e == Engine::Containerd) put(dir / kContainerdConfig, kDebianContainerd);
        const Files before = snapshot(dir.path());
        const auto report = run(dir.path(), e, false, true, true);
        EXPECT_EQ(snapshot(dir.path()), before);
        ASSERT_FALSE(report.empty());
        for (const auto& line : report) EXPECT_THAT(line, testing::StartsWith("would write "));

        run(dir.path(), e);
        const Files set_up = snapshot(dir.path());
        for (const auto& line : run(dir.path(), e, true, false, true))
            EXPECT_THAT(line, testing::StartsWith("would ")) << line;
        EXPECT_EQ(snapshot(dir.path()), set_up);
    }
}

TEST(Setup, BadFilesAreRefusedNamingThemAndNothingChanges) {
    struct Bad {
        Engine engine;
        std::string text;
        bool remove_refuses;  // --remove has to read it too
    };
    const Bad cases[] = {
        {Engine::Docker, "{\"runtimes\": {", true},
        {Engine::Docker, "[1, 2]", true},
        {Engine::Docker, "{\"runtimes\": []}", false},  // nothing of gpubind's to take out
        {Engine::Containerd, "version = 2\n[plugins\n", true},
        {Engine::Containerd, "version = 2\nimports = \"/etc/x.toml\"\n", true},
    };
    for (const auto& bad : cases) {
        for (bool remove : {false, true}) {
            TempDir dir;
            put(dir / main_file(bad.engine), bad.text);
            const Files before = snapshot(dir.path());
            try {
                run(dir.path(), bad.engine, remove);
                if (!remove || bad.remove_refuses) ADD_FAILURE() << "accepted " << bad.text;
            } catch (const util::Error& e) {
                EXPECT_EQ(e.code().value(), EINVAL);
                EXPECT_THAT(e.what(), HasSubstr((dir / main_file(bad.engine)).string()));
            }
            EXPECT_EQ(snapshot(dir.path()), before) << bad.text;
        }
    }
}

// Issue 21 (7): a backup that is a link to a 0600 secret was taken for a
// backup: setup believed one existed, and --remove wrote the secret into
// daemon.json as 0644 and lost the original. A config or backup that is a
// link, not a regular file, another user's or writable by others is
// refused, naming it, and nothing changes; the secret stays unread.
TEST(Setup, ABackupOrConfigThatIsALinkOrAnothersIsRefusedNamingIt) {
    const fs::path backup_name = fs::path(kDockerConfig).string() + ".gpubind-backup";
    struct Bad {
        const char* name;
        fs::path at;  // what is planted there (relative to the prefix)
        std::function<void(const fs::path&, const fs::path&)> plant;  // (file, secret)
        const char* why;
    };
    const Bad cases[] = {
        {"a backup linked to a secret", backup_name,
         [](const fs::path& f, const fs::path& secret) { fs::create_symlink(secret, f); },
         "symbolic link"},
        {"a config linked to a secret", kDockerConfig,
         [](const fs::path& f, const fs::path& secret) {
             fs::remove(f);
             fs::create_symlink(secret, f);
         },
         "symbolic link"},
        {"a backup of another user", backup_name,
         [](const fs::path& f, const fs::path&) {
             put(f, kDockerOther);
             ASSERT_EQ(::chown(f.c_str(), 65534, 65534), 0);
         },
         "another user"},
        {"a backup others may write", backup_name,
         [](const fs::path& f, const fs::path&) {
             put(f, kDockerOther);
             ASSERT_EQ(::chmod(f.c_str(), 0666), 0);
         },
         "writable by others"},
        {"a backup that is a directory", backup_name,
         [](const fs::path& f, const fs::path&) { fs::create_directories(f); },
         "not a regular file"},
    };
    for (const auto& bad : cases) {
        for (const bool remove : {true, false}) {
            SCOPED_TRACE(std::string(bad.name) + (remove ? ", --remove" : ", setup"));
            TempDir dir;
            const std::string secret_text = "{\"secret\": \"root's only\"}\n";
            put(dir / "secret", secret_text);
            ASSERT_EQ(::chmod((dir / "secret").c_str(), 0600), 0);
            put(dir / kDockerConfig, kDockerOther);
            bad.plant(dir / bad.at, dir / "secret");
            const Files before = snapshot(dir.path());
            try {
                run(dir.path(), Engine::Docker, remove);
                ADD_FAILURE() << "accepted";
            } catch (const util::Error& e) {
                EXPECT_THAT(e.what(), HasSubstr((dir / bad.at).string()));
                EXPECT_THAT(e.what(), HasSubstr(bad.why));
                EXPECT_THAT(e.what(), testing::Not(HasSubstr("root's only")));
            }
            EXPECT_EQ(snapshot(dir.path()), before);
            struct stat st {};
            ASSERT_EQ(::stat((dir / "secret").c_str(), &st), 0);
            EXPECT_EQ(st.st_mode & 0777, 0600u);
        }
    }
}

// The directories setup makes are 0755 whatever the umask: its own write
// would refuse one that group or others may write.
TEST(Setup, DirectoriesItMakesAre0755UnderAnyUmask) {
    TempDir dir;
    const mode_t old = ::umask(002);
    std::vector<std::string> report;
    try {
        report = run(dir.path(), Engine::Crio);
    } catch (...) {
        ::umask(old);
        throw;
    }
    ::umask(old);
    ASSERT_TRUE(fs::exists(dir / kCrioDropIn));
    for (fs::path d = (dir / kCrioDropIn).parent_path(); d != dir.path(); d = d.parent_path()) {
        struct stat st {};
        ASSERT_EQ(::stat(d.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0755u) << d;
    }
}

// A backup is made only where nothing is (never over a file planted between
// the check and the write: the final link fails, the config is not written).
TEST(Setup, TheBackupIsCreatedBesideTheConfigWithItsMode) {
    TempDir dir;
    put(dir / kDockerConfig, kDockerOther);
    ASSERT_EQ(::chmod((dir / kDockerConfig).c_str(), 0640), 0);
    run(dir.path(), Engine::Docker);
    const fs::path backup = (dir / kDockerConfig).string() + ".gpubind-backup";
    EXPECT_EQ(slurp(backup), kDockerOther);
    struct stat st {};
    ASSERT_EQ(::lstat(backup.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    ASSERT_EQ(::lstat((dir / kDockerConfig).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
}

// --- the examples in config/ are what setup writes ---

TEST(Setup, ExamplesAreWhatSetupWritesForTheDefaultPaths) {
    TempDir dir;
    for (Engine e : {Engine::Docker, Engine::Containerd, Engine::Crio, Engine::Podman})
        run(dir.path(), e);
    const fs::path config = fs::path(GPUBIND_SOURCE_DIR) / "config";
    EXPECT_EQ(slurp(config / "docker-daemon.json"), slurp(dir / kDockerConfig));
    EXPECT_EQ(slurp(config / "containerd-gpubind.toml"), slurp(dir / kContainerdDropIn));
    EXPECT_EQ(slurp(config / "crio-gpubind.conf"), slurp(dir / kCrioDropIn));
    EXPECT_EQ(slurp(config / "oci-hooks-gpubind.json"), slurp(dir / kHooksFile));
}

// --- the command ---

TEST(SetupCli, ReportsEachFileAndMapsBadFilesToExitCode3) {
    const char* cli = std::getenv("GPUBIND_CLI");
    ASSERT_NE(cli, nullptr);
    TempDir dir;
    const std::string cmd = std::string(cli) + " setup --prefix " + dir.path().string();
    const fs::path daemon = dir / kDockerConfig;

    Result r = sh(cmd + " --engine docker --engine crio");
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(r.out, "wrote " + daemon.string() + " (runtime gpubind)\nwrote " +
                         (dir / kCrioDropIn).string() + " (runtime gpubind)\n");
    r = sh(cmd + " --engine docker");
    EXPECT_EQ(r.out, "unchanged " + daemon.string() + "\n");
    r = sh(cmd + " --engine docker --remove");
    EXPECT_EQ(r.out, "removed " + daemon.string() + " (runtime gpubind taken out)\n");

    put(daemon, "{not json");
    r = sh(cmd + " --engine docker --engine crio --remove");
    EXPECT_EQ(r.rc, 3) << r.out;
    EXPECT_THAT(r.out, HasSubstr(daemon.string()));
    EXPECT_THAT(r.out, HasSubstr("invalid JSON"));
    EXPECT_TRUE(fs::exists(dir / kCrioDropIn)) << "crio's file changed though docker's was bad";

    r = sh(cmd + " --engine runc");
    EXPECT_EQ(r.rc, 0);
    EXPECT_THAT(r.out, HasSubstr("\"prestart\""));
    r = sh(cmd + " --engine lxc");
    EXPECT_EQ(r.rc, 2);
}

}  // namespace

namespace {

// --cdi: each engine's own CDI settings, in the files gpubind owns (docker:
// its daemon.json). containerd 1.6 (Debian 12) parses the drop-in and ignores
// the keys 1.7 reads.
TEST(SetupCdi, EachEngineGetsItsCdiSettings) {
    TempDir dir;
    for (Engine e : {Engine::Docker, Engine::Containerd, Engine::Crio}) {
        Request r;
        r.engine = e;
        r.prefix = dir.path();
        r.options.cdi = true;
        apply_setup(plan_setup(r), false);
    }
    const auto docker = nlohmann::json::parse(slurp(dir / kDockerConfig));
    EXPECT_EQ(docker["features"]["cdi"], true);
    const toml::table ctd = toml::parse(slurp(dir / kContainerdDropIn));
    const auto cri = ctd["plugins"]["io.containerd.grpc.v1.cri"];
    EXPECT_EQ(cri["enable_cdi"].value_or(false), true);
    EXPECT_EQ(cri["cdi_spec_dirs"][0].value_or(std::string()), "/etc/cdi");
    EXPECT_EQ(cri["cdi_spec_dirs"][1].value_or(std::string()), "/var/run/cdi");
    const toml::table crio = toml::parse(slurp(dir / kCrioDropIn));
    EXPECT_EQ(crio["crio"]["runtime"]["cdi_spec_dirs"][1].value_or(std::string()), "/var/run/cdi");
    ASSERT_EQ(sh("containerd --version").rc, 0);
    const toml::table merged = containerd_dump(containerd_config_for_dump(dir));
    EXPECT_EQ(merged["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpubind"]
                    ["options"]["BinaryName"]
                        .value_or(std::string()),
              "/usr/bin/gpubind-runtime");
    // Without --cdi nothing of it.
    TempDir plain;
    run(plain.path(), Engine::Containerd);
    EXPECT_EQ(slurp(plain / kContainerdDropIn).find("cdi"), std::string::npos);
}

}  // namespace

namespace {

// docs/kubernetes.md's code blocks: the TOML ones are what setup --cdi writes
// (and containerd's own parser loads the containerd one), the YAML ones parse,
// the RuntimeClass names the runtime setup registers, and the device plugin's
// strategy is one it has.
TEST(DocsKubernetes, EveryConfigurationIsWhatSetupWritesOrParses) {
    const std::string doc = slurp(fs::path(GPUBIND_SOURCE_DIR) / "docs/kubernetes.md");
    std::vector<std::pair<std::string, std::string>> blocks;  // language, text
    for (std::size_t at = doc.find("```"); at != std::string::npos;) {
        const auto nl = doc.find('\n', at);
        const auto end = doc.find("```", nl);
        ASSERT_NE(end, std::string::npos);
        // A block shown as "<!-- file: PATH -->" is that file (manifests_test.cpp).
        const auto line = doc.rfind('\n', at - 2) + 1;
        if (!std::string_view(doc).substr(line, at - line).starts_with("<!-- file: "))
            blocks.emplace_back(doc.substr(at + 3, nl - at - 3), doc.substr(nl + 1, end - nl - 1));
        at = doc.find("```", end + 3);
    }
    Options o;
    o.cdi = true;
    auto without_comments = [](const std::string& text) {
        std::string out;
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);)
            if (!line.starts_with("#") && !(out.empty() && line.empty())) out += line + "\n";
        return out;
    };
    int toml_blocks = 0;
    std::vector<std::string> pod_limits;  // each Pod's containers' resource limits
    for (const auto& [lang, text] : blocks) {
        if (lang == "toml") {
            ++toml_blocks;
            const std::string containerd =
                without_comments(containerd_drop_in(std::nullopt, o, "doc"));
            const std::string crio = without_comments(crio_drop_in(o));
            EXPECT_TRUE(text == containerd || text == crio) << text;
            if (text == containerd) {
                TempDir dir;
                put(dir / "config.toml", text);
                const toml::table merged = containerd_dump(dir / "config.toml");
                EXPECT_EQ(merged["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
                                ["gpubind"]["options"]["BinaryName"]
                                    .value_or(std::string()),
                          "/usr/bin/gpubind-runtime");
            }
        } else if (lang == "yaml") {
            const nlohmann::json y = gpubind::cdi::yaml::parse(text, "docs/kubernetes.md");
            if (y.is_object() && y.value("kind", "") == "RuntimeClass") {
                EXPECT_EQ(y["handler"], std::string(kRuntimeName));
            }
            if (y.is_object() && y.value("kind", "") == "Pod")
                for (const auto& c : y["spec"]["containers"])
                    for (const auto& [name, value] : c["resources"]["limits"].items())
                        pod_limits.push_back(
                            name + "=" +
                            (value.is_string() ? value.get<std::string>() : value.dump()));
            if (!y.is_object() || !y.contains("env")) continue;
            for (const auto& e : y["env"]) {
                if (e["name"] != "DEVICE_LIST_STRATEGY") continue;
                EXPECT_THAT((std::vector<std::string>{"envvar", "volume-mounts", "cdi-annotations",
                                                      "cdi-cri"}),
                            ::testing::Contains(e["value"].get<std::string>()));
            }
        }
    }
    EXPECT_EQ(toml_blocks, 2);
    // The GPU shares section's pod asks for 10 GiB of a GPU, by the resource
    // the plugin offers with sharing = "memory" (its default name).
    EXPECT_THAT(pod_limits,
                ::testing::Contains(config::DevicePluginConfig{}.memory_resource_name + "=10"));
}

}  // namespace

// --- nvidia-container-cli (`gpubind setup --nvidia-container-cli`) ---
//
// A prefix standing for the host: usr/bin with an executable gpubind-nvc, and
// what each case puts at usr/bin/nvidia-container-cli. Every expectation is
// the tree as `ls -l` shows it (test::tree: types, link texts, bytes, modes).
namespace {

const std::string kNvcText = "/usr/bin/gpubind-nvc";

struct NvcHost {
    TempDir dir;
    fs::path bin = dir / "usr/bin";
    fs::path link = bin / "nvidia-container-cli";
    fs::path backup = bin / "nvidia-container-cli.gpubind-backup";
    NvcHost() {
        put(bin / "gpubind-nvc", "#!/bin/sh\necho gpubind-nvc\n");
        fs::permissions(bin / "gpubind-nvc", fs::perms(0755));
    }
    std::vector<std::string> run(bool remove = false, bool dry_run = false) const {
        return nvc_link({.prefix = dir.path(), .nvc = kNvcText, .remove = remove}, dry_run);
    }
};

bool is_link(const fs::path& p) {
    return fs::is_symlink(fs::symlink_status(p));
}

// libnvidia-container-tools' program: binary bytes (a NUL among them), 0755.
const std::string kRealCli = std::string(
    "\x7f"
    "ELF\0\x02\x01 libnvidia-container",
    27);

TEST(SetupNvc, FreshInstallCreatesTheLinkAndRemoveTakesItOut) {
    NvcHost h;
    const Files before = test::tree(h.dir.path());
    const auto report = h.run();
    ASSERT_TRUE(is_link(h.link));
    EXPECT_EQ(fs::read_symlink(h.link), kNvcText);
    EXPECT_FALSE(fs::exists(fs::symlink_status(h.backup)));
    EXPECT_EQ(report, std::vector<std::string>{"created " + h.link.string() + " -> " + kNvcText});

    h.run(true);
    EXPECT_EQ(test::tree(h.dir.path()), before);
}

TEST(SetupNvc, ARealFileIsKeptAsTheBackupAndPutBackByteForByte) {
    NvcHost h;
    put(h.link, kRealCli);
    fs::permissions(h.link, fs::perms(0755));
    struct stat orig {};
    ASSERT_EQ(::lstat(h.link.c_str(), &orig), 0);
    const Files before = test::tree(h.dir.path());

    const auto report = h.run();
    ASSERT_TRUE(is_link(h.link));
    EXPECT_EQ(fs::read_symlink(h.link), kNvcText);
    ASSERT_FALSE(is_link(h.backup));
    EXPECT_EQ(slurp(h.backup), kRealCli);
    ASSERT_EQ(report.size(), 1u);
    EXPECT_THAT(report[0], HasSubstr(h.link.string()));
    EXPECT_THAT(report[0], HasSubstr(h.backup.string()));

    h.run(true);
    EXPECT_EQ(test::tree(h.dir.path()), before);
    struct stat now {};
    ASSERT_EQ(::lstat(h.link.c_str(), &now), 0);
    EXPECT_EQ(now.st_ino, orig.st_ino) << "not the original file put back";
}

// update-alternatives' link (to another program) is kept the same way; one
// that already leads to gpubind-nvc is left as it is.
TEST(SetupNvc, AnotherLinkIsKeptAsTheBackupAndOneLeadingToGpubindNvcIsLeft) {
    NvcHost h;
    const fs::path alt = h.dir / "etc/alternatives/nvidia-container-cli";
    put(h.bin / "other-cli", "#!/bin/sh\n");
    fs::permissions(h.bin / "other-cli", fs::perms(0755));
    fs::create_directories(alt.parent_path());
    fs::create_symlink("/usr/bin/other-cli", alt);
    fs::create_symlink("/etc/alternatives/nvidia-container-cli", h.link);
    const Files before = test::tree(h.dir.path());

    h.run();
    EXPECT_EQ(fs::read_symlink(h.link), kNvcText);
    ASSERT_TRUE(is_link(h.backup));
    EXPECT_EQ(fs::read_symlink(h.backup), "/etc/alternatives/nvidia-container-cli");
    h.run(true);
    EXPECT_EQ(test::tree(h.dir.path()), before);

    // The alternative now selects gpubind-nvc: nothing to change, nor to remove.
    fs::remove(alt);
    fs::create_symlink(kNvcText, alt);
    const Files selected = test::tree(h.dir.path());
    for (const bool remove : {false, true}) {
        const auto report = h.run(remove);
        EXPECT_EQ(test::tree(h.dir.path()), selected);
        ASSERT_EQ(report.size(), 1u);
        EXPECT_THAT(report[0], testing::StartsWith("unchanged " + h.link.string()));
    }
}

TEST(SetupNvc, TheSecondRunChangesNothing) {
    for (const bool real : {false, true}) {
        SCOPED_TRACE(real ? "over a real file" : "fresh");
        NvcHost h;
        if (real) put(h.link, kRealCli);
        h.run();
        const Files once = test::tree(h.dir.path());
        const auto report = h.run();
        EXPECT_EQ(test::tree(h.dir.path()), once);
        EXPECT_EQ(report,
                  std::vector<std::string>{"unchanged " + h.link.string() + " -> " + kNvcText});
    }
}

TEST(SetupNvc, DryRunWritesNothing) {
    for (const int start : {0, 1, 2}) {  // nothing, a real file, another link
        SCOPED_TRACE(start);
        NvcHost h;
        if (start == 1) put(h.link, kRealCli);
        if (start == 2) fs::create_symlink("/usr/bin/gpubind-hook", h.link);
        const Files before = test::tree(h.dir.path());
        auto report = h.run(false, true);
        EXPECT_EQ(test::tree(h.dir.path()), before);
        ASSERT_EQ(report.size(), 1u);
        EXPECT_THAT(report[0], testing::StartsWith("would "));

        h.run();
        const Files set_up = test::tree(h.dir.path());
        ASSERT_NE(set_up, before);
        report = h.run(true, true);
        EXPECT_EQ(test::tree(h.dir.path()), set_up);
        ASSERT_EQ(report.size(), 1u);
        EXPECT_THAT(report[0], testing::StartsWith("would "));
    }
}

// --remove takes out only gpubind's link: another program's is left, and
// where a backup waits too nothing is put back (it would lose what is there).
TEST(SetupNvc, RemoveLeavesWhatIsNotGpubindsLink) {
    NvcHost h;
    fs::create_symlink("/usr/bin/gpubind-hook", h.link);
    Files before = test::tree(h.dir.path());
    auto report = h.run(true);
    EXPECT_EQ(test::tree(h.dir.path()), before);
    ASSERT_EQ(report.size(), 1u);
    EXPECT_THAT(report[0], testing::StartsWith("unchanged " + h.link.string()));

    // Set up over a real file, then the package put its file back over the link.
    fs::remove(h.link);
    put(h.link, kRealCli);
    h.run();
    fs::remove(h.link);
    put(h.link, kRealCli + " 2.0");
    before = test::tree(h.dir.path());
    try {
        h.run(true);
        ADD_FAILURE() << "put the backup back over another file";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
        EXPECT_THAT(e.what(), HasSubstr(h.link.string()));
    }
    EXPECT_EQ(test::tree(h.dir.path()), before);
}

// A directory (or anything but a file or a link) at the path is refused,
// naming it, and nothing changes; so is a second backup, and a missing gpubind-nvc.
TEST(SetupNvc, ADirectoryAtThePathIsRefusedAndNothingChanges) {
    NvcHost h;
    fs::create_directories(h.link);
    put(h.link / "inside", "x");
    Files before = test::tree(h.dir.path());
    for (const bool dry_run : {false, true}) {
        try {
            h.run(false, dry_run);
            ADD_FAILURE() << "replaced a directory";
        } catch (const util::Error& e) {
            EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
            EXPECT_THAT(e.what(), HasSubstr(h.link.string()));
            EXPECT_THAT(e.what(), HasSubstr("directory"));
        }
        EXPECT_EQ(test::tree(h.dir.path()), before);
    }

    fs::remove_all(h.link);
    put(h.link, kRealCli);
    put(h.backup, "an older backup");
    before = test::tree(h.dir.path());
    EXPECT_THROW(h.run(), util::Error);
    EXPECT_EQ(test::tree(h.dir.path()), before);

    fs::remove(h.backup);
    before = test::tree(h.dir.path());
    try {
        nvc_link({.prefix = h.dir.path(), .nvc = "/usr/bin/not-there"}, false);
        ADD_FAILURE() << "linked to a missing program";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr((h.bin / "not-there").string()));
    }
    EXPECT_EQ(test::tree(h.dir.path()), before);
}

// The prefix's own links resolve inside it: usr -> /real lands in PREFIX/real.
TEST(SetupNvc, ThePrefixsLinksResolveInsideIt) {
    TempDir dir;
    put(dir / "real/bin/gpubind-nvc", "#!/bin/sh\n");
    fs::permissions(dir / "real/bin/gpubind-nvc", fs::perms(0755));
    fs::create_symlink("/real", dir / "usr");
    nvc_link({.prefix = dir.path()}, false);
    const fs::path link = dir / "real/bin/nvidia-container-cli";
    ASSERT_TRUE(is_link(link));
    EXPECT_EQ(fs::read_symlink(link), kNvcText);
}

TEST(SetupNvcCli, NeedsNoEngineAndRefusesADirectoryInOneLine) {
    const char* cli = std::getenv("GPUBIND_CLI");
    ASSERT_NE(cli, nullptr);
    NvcHost h;
    const std::string cmd =
        std::string(cli) + " setup --nvidia-container-cli --prefix " + h.dir.path().string();
    Result r = sh(cmd);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(r.out, "created " + h.link.string() + " -> " + kNvcText + "\n");
    EXPECT_EQ(fs::read_symlink(h.link), kNvcText);
    r = sh(cmd + " --remove");
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_FALSE(fs::exists(fs::symlink_status(h.link)));

    // --nvc names the program; the link's text is exactly it.
    put(h.bin / "nvc2", "#!/bin/sh\n");
    fs::permissions(h.bin / "nvc2", fs::perms(0755));
    r = sh(cmd + " --nvc /usr/bin/nvc2");
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(fs::read_symlink(h.link), "/usr/bin/nvc2");
    r = sh(cmd + " --nvc /usr/bin/nvc2 --remove");
    EXPECT_EQ(r.rc, 0) << r.out;

    fs::create_directories(h.link);
    const Files before = test::tree(h.dir.path());
    r = sh(cmd);
    EXPECT_EQ(r.rc, 4) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(h.link.string()));
    EXPECT_EQ(test::tree(h.dir.path()), before);

    r = sh(std::string(cli) + " setup --nvc /usr/bin/nvc2");
    EXPECT_EQ(r.rc, 2) << "--nvc without --nvidia-container-cli";
}

}  // namespace
