// gpubind setup --host-root (issue 25): what the Kubernetes node installer
// does, into a directory that stands for the host's "/": a simulated 2-GPU
// node (its device nodes, procfs, driver files and ld.so.cache) with a
// containerd config and Debian's absolute /var/run -> /run link. Installed,
// installed again (nothing changes), removed (the tree is as it was, byte
// for byte); what it writes is read by containerd 1.6's own parser and by
// gpubind-runtime; bad host roots and bad host files are refused with
// nothing written.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/setup/host.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;
using gpubind::test::TempDir;
using json = nlohmann::json;
using testing::HasSubstr;
using testing::Not;

using test::slurp;

void put(const fs::path& p, const std::string& text, fs::perms mode = fs::perms(0644)) {
    fs::create_directories(p.parent_path());
    test::write(p, text, mode);
}

using test::tree;
using Tree = std::map<std::string, std::string>;

const char* const kContainerdConfig =
    "version = 2\n"
    "# the node's own settings\n"
    "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
    "  sandbox_image = \"registry.k8s.io/pause:3.9\"\n";

const char* const kInstallConfig =
    "# the cluster's gpubind config\n"
    "[log]\n"
    "level = \"debug\"\n"
    "\n"
    "[cdi]\n"
    "kind = \"nvidia.com/gpu\"\n";

class HostInstall : public test::SimNodeTest {
  protected:
    HostInstall() : test::SimNodeTest("gpubind-host") { node_options().gpus(2); }
    void SetUp() override {
        test::SimNodeTest::SetUp();
        put(host() / "etc/containerd/config.toml", kContainerdConfig);
        fs::create_directories(host() / "var");
        fs::create_directory_symlink("/run", host() / "var/run");
        put(dir() / "config.toml", kInstallConfig);
    }

    // The directory that stands for the host's "/": the simulated node.
    fs::path host() const { return root(); }
    static fs::path programs() { return fs::path(GPUBIND_HOOK_PATH).parent_path(); }
    fs::path installed(const std::string& name) const {
        return host() / "usr/local/gpubind" / name;
    }
    fs::path spec_file() const { return host() / "run/cdi/nvidia.com-gpu.json"; }

    // gpubind setup --host-root HOST -e containerd --cdi ARGS; stderr too.
    test::Output setup(const std::string& args = "", const std::string& env = "") const {
        return test::run(env + " " + std::string(GPUBIND_CLI_PATH) + " setup --host-root " +
                         host().string() + " -e containerd --cdi --programs " +
                         programs().string() + " --install-config " +
                         (dir() / "config.toml").string() + " " + args + " 2>&1");
    }
};

TEST_F(HostInstall, InstallsOnceRegistersAndRemoveLeavesTheHostAsItWas) {
    const Tree before = tree(host());
    const auto first = setup();
    ASSERT_EQ(first.status, 0) << first.text;

    // The programs, byte for byte, executable; the list of what it wrote.
    for (const char* name : {"gpubind-hook", "gpubind-runtime", "gpubind-nvml"}) {
        EXPECT_EQ(slurp(installed(name)), slurp(programs() / name)) << name;
        EXPECT_EQ(fs::status(installed(name)).permissions(), fs::perms(0755)) << name;
        EXPECT_THAT(first.text, HasSubstr("wrote " + installed(name).string())) << name;
    }
    // The cluster's config, its bytes kept, with the installed hook.
    const std::string config = slurp(installed("config.toml"));
    std::string want = kInstallConfig;
    want.insert(want.find("[cdi]\n") + 6, "hook = \"/usr/local/gpubind/gpubind-hook\"\n");
    EXPECT_EQ(config, want);
    const config::Config parsed = config::parse_config(config, "installed");
    EXPECT_EQ(parsed.cdi.hook, "/usr/local/gpubind/gpubind-hook");
    EXPECT_EQ(parsed.log.level, "debug");
    // containerd: the drop-in names the installed runtime; config.toml imports it.
    const std::string drop_in = slurp(host() / "etc/containerd/conf.d/gpubind.toml");
    EXPECT_THAT(drop_in, HasSubstr("BinaryName = \"/usr/local/gpubind/gpubind-runtime\""));
    EXPECT_THAT(drop_in, HasSubstr("sandbox_image = \"registry.k8s.io/pause:3.9\""));
    EXPECT_THAT(slurp(host() / "etc/containerd/config.toml"),
                HasSubstr("imports = [\"/etc/containerd/conf.d/gpubind.toml\"]"));
    // The CDI spec went where the host's /var/run/cdi is (its /run/cdi), and
    // names what the host sees: nothing under the directory it was read from.
    ASSERT_TRUE(fs::exists(spec_file())) << first.text;
    EXPECT_FALSE(fs::exists("/run/cdi/nvidia.com-gpu.json"));
    const std::string spec_text = slurp(spec_file());
    EXPECT_THAT(spec_text, Not(HasSubstr(host().string())));
    const json spec = json::parse(spec_text);
    // The node's GPUs, as the simulated node says it has them, by index and
    // UUID; every path the spec names is there on the host.
    const auto names = cdi::device_names(spec);
    for (const auto& gpu : manifest().gpus)
        for (const std::string& id : {std::to_string(gpu.index), gpu.uuid})
            EXPECT_THAT(names, testing::Contains("nvidia.com/gpu=" + id));
    EXPECT_THAT(names, testing::Contains("nvidia.com/gpu=all"));
    for (const json* edits : cdi::all_edits(spec)) {
        for (const auto& m : edits->value("mounts", json::array()))
            EXPECT_TRUE(fs::exists(host() / m["hostPath"].get<std::string>().substr(1))) << m;
        for (const auto& n : edits->value("deviceNodes", json::array()))
            EXPECT_TRUE(fs::exists(host() / n["path"].get<std::string>().substr(1))) << n;
    }
    const json& hook = spec["containerEdits"]["hooks"][0];
    EXPECT_EQ(hook["path"], "/usr/local/gpubind/gpubind-hook");
    EXPECT_EQ(hook["env"][0], "GPUBIND_CONFIG=/usr/local/gpubind/config.toml");
    EXPECT_THAT(first.text, HasSubstr("restart containerd"));

    // Again: nothing to do, and it says so for every file.
    const Tree once = tree(host());
    const auto second = setup();
    ASSERT_EQ(second.status, 0) << second.text;
    EXPECT_EQ(tree(host()), once);
    EXPECT_THAT(second.text, Not(HasSubstr("wrote")));
    EXPECT_THAT(second.text, HasSubstr("unchanged " + spec_file().string()));

    // Removed: the host as it was, byte for byte, modes and links too.
    const auto removed = setup("--remove");
    ASSERT_EQ(removed.status, 0) << removed.text;
    EXPECT_EQ(tree(host()), before) << removed.text;
    EXPECT_THAT(removed.text,
                HasSubstr("removed directory " + installed("").parent_path().string()));
}

// CRI-O: its drop-in names the installed runtime; --remove takes it out.
TEST_F(HostInstall, CrioGetsItsDropInAndLosesItAgain) {
    const Tree before = tree(host());
    const auto r =
        test::run(std::string(GPUBIND_CLI_PATH) + " setup --host-root " + host().string() +
                  " -e crio --programs " + programs().string() + " 2>&1");
    ASSERT_EQ(r.status, 0) << r.text;
    const std::string drop_in = slurp(host() / "etc/crio/crio.conf.d/99-gpubind.conf");
    EXPECT_THAT(drop_in, HasSubstr("runtime_path = \"/usr/local/gpubind/gpubind-runtime\""));
    EXPECT_THAT(r.text, HasSubstr("restart it on the host (systemctl restart crio)"));
    EXPECT_FALSE(fs::exists(spec_file()));  // no --cdi: no spec
    const auto removed = test::run(std::string(GPUBIND_CLI_PATH) + " setup --remove --host-root " +
                                   host().string() + " -e crio 2>&1");
    ASSERT_EQ(removed.status, 0) << removed.text;
    EXPECT_EQ(tree(host()), before) << removed.text;
    // Removed again: nothing there, nothing to do.
    const auto again = test::run(std::string(GPUBIND_CLI_PATH) + " setup --remove --host-root " +
                                 host().string() + " -e crio 2>&1");
    EXPECT_EQ(again.status, 0) << again.text;
    EXPECT_THAT(again.text, Not(HasSubstr("removed")));
    EXPECT_EQ(tree(host()), before);
}

// The spec is the node's as gpubind reads it through the host root, with
// only the root taken off: put back, it is what `cdi generate --root` says.
TEST_F(HostInstall, TheSpecIsTheNodesWithOnlyTheRootTakenOff) {
    ASSERT_EQ(setup().status, 0);
    json got = json::parse(slurp(spec_file()));
    const auto gen = test::run(std::string(GPUBIND_CLI_PATH) + " cdi generate --root " +
                               host().string() + " --config " + installed("config.toml").string() +
                               " --hook-path /usr/local/gpubind/gpubind-hook");
    ASSERT_EQ(gen.status, 0);
    json want = json::parse(gen.text);
    EXPECT_EQ(got["cdiVersion"], cdi::minimum_version(got));
    const std::string root = host().string();
    std::size_t nodes = 0, mounts = 0;
    for (json* edits : {&got["containerEdits"]}) {
        for (auto& n : (*edits)["deviceNodes"]) {
            ASSERT_FALSE(n.contains("hostPath")) << n;  // the host's own /dev
            n["hostPath"] = root + n["path"].get<std::string>();
            ++nodes;
        }
        for (auto& m : (*edits)["mounts"]) {
            m["hostPath"] = root + m["hostPath"].get<std::string>();
            ++mounts;
        }
    }
    for (auto& d : got["devices"])
        for (auto& n : d["containerEdits"]["deviceNodes"]) {
            n["hostPath"] = root + n["path"].get<std::string>();
            ++nodes;
        }
    EXPECT_GT(nodes, 3u);
    EXPECT_GT(mounts, 10u);
    // Each hook's config (the cdi stage's, poststop's) is the installed one,
    // as the host names it.
    ASSERT_EQ(got["containerEdits"]["hooks"].size(), want["containerEdits"]["hooks"].size());
    for (std::size_t i = 0; i < got["containerEdits"]["hooks"].size(); ++i) {
        EXPECT_EQ(got["containerEdits"]["hooks"][i]["env"],
                  json::array({"GPUBIND_CONFIG=/usr/local/gpubind/config.toml"}));
        want["containerEdits"]["hooks"][i]["env"] = got["containerEdits"]["hooks"][i]["env"];
    }
    got.erase("cdiVersion");
    want.erase("cdiVersion");
    EXPECT_EQ(got, want);
}

// A spec that was there (the device plugin's) is kept aside and put back.
TEST_F(HostInstall, AFileThatWasThereIsKeptAndPutBack) {
    put(host() / "run/cdi/nvidia.com-gpu.json", "{\"cdiVersion\":\"0.5.0\",\"kind\":\"x/y\"}");
    const Tree before = tree(host());
    const auto r = setup();
    ASSERT_EQ(r.status, 0) << r.text;
    EXPECT_THAT(r.text,
                HasSubstr("the original is in " + spec_file().string() + ".gpubind-backup"));
    ASSERT_EQ(setup("--remove").status, 0);
    EXPECT_EQ(tree(host()), before);
}

TEST_F(HostInstall, ADryRunWritesNothingAndPrintsNoProgram) {
    const Tree before = tree(host());
    const auto r = setup("--dry-run");
    ASSERT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(tree(host()), before);
    EXPECT_THAT(r.text, HasSubstr("would write " + installed("gpubind-hook").string() + " (from"));
    EXPECT_THAT(r.text, Not(HasSubstr("ELF")));
    EXPECT_LT(r.text.size(), 64u << 10);
}

// Bad host roots and bad host files: one line naming what, nothing written.
TEST_F(HostInstall, RefusesWhatIsNotAHostWithNothingWritten) {
    put(dir() / "file", "x");
    fs::create_directory_symlink(host(), dir() / "link");
    const struct {
        std::string root, env, why;
    } cases[] = {
        {(dir() / "missing").string(), "", "No such file or directory"},
        {(dir() / "file").string(), "", "is not a directory"},
        {(dir() / "link").string(), "", "is a symbolic link"},
        {"relative/host", "", "is not an absolute path"},
        {"/", "container=podman", "is this container's own root, not the host's"},
    };
    const Tree before = tree(dir());
    for (const auto& c : cases) {
        SCOPED_TRACE(c.root);
        const auto r =
            test::run(c.env + " " + std::string(GPUBIND_CLI_PATH) + " setup --host-root " + c.root +
                      " -e containerd --programs " + programs().string() + " 2>&1");
        EXPECT_NE(r.status, 0);
        EXPECT_THAT(r.text, HasSubstr(c.root));
        EXPECT_THAT(r.text, HasSubstr(c.why));
        EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), 1) << r.text;
    }
    EXPECT_EQ(tree(dir()), before);
}

TEST_F(HostInstall, RefusesBadHostFilesWithNothingWritten) {
    const struct {
        std::string file, text, why;
    } cases[] = {
        {"etc/containerd/config.toml", "version = 2\n[plugins\n", "invalid TOML at line 2"},
        {"usr/local/gpubind/installed", "f relative/path\n", "line 1 is not"},
        {"usr/local/gpubind/installed", "f /usr/../etc/passwd\n", "line 1 is not"},
        {"usr/local/gpubind/installed", "f /etc/passwd\n", "which no install writes"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.file + ": " + c.text);
        const std::string was = slurp(host() / "etc/containerd/config.toml");
        put(host() / c.file, c.text);
        const Tree before = tree(host());
        const auto r = setup();
        EXPECT_NE(r.status, 0);
        EXPECT_THAT(r.text, HasSubstr((host() / c.file).string()));
        EXPECT_THAT(r.text, HasSubstr(c.why));
        EXPECT_EQ(tree(host()), before);
        put(host() / "etc/containerd/config.toml", was);
        fs::remove_all(host() / "usr/local");
    }
    // A host file others may write is never replaced.
    put(host() / "etc/containerd/config.toml", kContainerdConfig, fs::perms(0666));
    const auto r = setup();
    EXPECT_NE(r.status, 0);
    EXPECT_THAT(r.text, HasSubstr("writable by others"));
    EXPECT_FALSE(fs::exists(installed("gpubind-hook")));
    // runc has no host config to register in.
    const auto runc = test::run(std::string(GPUBIND_CLI_PATH) + " setup --host-root " +
                                host().string() + " -e runc 2>&1");
    EXPECT_NE(runc.status, 0);
    EXPECT_THAT(runc.text, HasSubstr("--engine runc"));
}

// Issue 44, F3: every directory an install writes is checked before
// anything is written, and its own files go before any engine's: an install
// dir another user owns registers nothing that user could plant a runtime for.
TEST_F(HostInstall, ADirectoryAnotherUserCouldWriteIsRefusedBeforeAnythingIsWritten) {
    const fs::path drop_in = host() / "etc/containerd/conf.d/gpubind.toml";
    fs::create_directories(installed(""));
    ASSERT_EQ(::chown(installed("").c_str(), 1000, 1000), 0);
    Tree before = tree(host());
    auto r = setup();
    EXPECT_EQ(r.status, 4) << r.text;
    EXPECT_THAT(r.text, HasSubstr(installed("").parent_path().string()));
    EXPECT_THAT(r.text, HasSubstr("owned by another user"));
    EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), 1) << r.text;
    EXPECT_FALSE(fs::exists(drop_in)) << r.text;
    EXPECT_TRUE(tree(host()) == before) << "the host changed";
    fs::remove_all(host() / "usr/local");

    // The engine's directory others may write: not even the programs.
    fs::create_directories(drop_in.parent_path());
    fs::permissions(drop_in.parent_path(), fs::perms(0777));
    before = tree(host());
    r = setup();
    EXPECT_EQ(r.status, 4) << r.text;
    EXPECT_THAT(r.text, HasSubstr(drop_in.parent_path().string()));
    EXPECT_THAT(r.text, HasSubstr("writable by others"));
    EXPECT_FALSE(fs::exists(installed("gpubind-runtime"))) << r.text;
    EXPECT_TRUE(tree(host()) == before) << "the host changed";
}

// Issue 44, F4: a link that leads nowhere inside the host root is refused,
// never followed by path in the installer's own file system.
TEST_F(HostInstall, ALinkThatDanglesInTheHostIsRefusedNotFollowedHere) {
    const fs::path outside = dir() / "outside";  // here, not in the host
    fs::create_directories(outside);
    fs::remove_all(host() / "usr/local");
    fs::create_directories(host() / "usr");
    fs::create_directory_symlink(outside, host() / "usr/local");
    const Tree before = tree(host());
    const auto r = setup();
    EXPECT_NE(r.status, 0) << r.text;
    EXPECT_THAT(r.text, HasSubstr((host() / "usr/local").string() + ": is a symbolic link to " +
                                  outside.string()));
    EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), 1) << r.text;
    EXPECT_TRUE(fs::is_empty(outside)) << r.text;
    EXPECT_TRUE(tree(host()) == before) << "the host changed";
    EXPECT_THROW(setup::host_path(host(), "/usr/local/gpubind/installed"), util::Error);
}

// Issue 44, F5: --remove takes out only files it can show it wrote: in the
// install dir itself or a CDI spec directory, a regular file of root's; a
// link or another's file is left and named, a list naming anything else is
// refused with nothing taken out.
TEST_F(HostInstall, RemoveTakesOutOnlyWhatItWrote) {
    ASSERT_EQ(setup().status, 0);
    const fs::path list = installed("installed");
    const std::string listed = slurp(list);
    put(host() / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    put(host() / "home/user/cdi/mine.json", "{}\n");
    fs::create_directory_symlink("/etc", installed("sub"));
    for (const char* line :
         {"f /usr/local/gpubind/sub/passwd\n", "f /home/user/cdi/mine.json\n", "d /home/user\n"}) {
        SCOPED_TRACE(line);
        put(list, listed + line);
        const Tree before = tree(host());
        const auto r = setup("--remove");
        EXPECT_NE(r.status, 0) << r.text;
        EXPECT_THAT(r.text, HasSubstr(list.string() + ": line "));
        EXPECT_TRUE(fs::exists(host() / "etc/passwd"));
        EXPECT_TRUE(tree(host()) == before) << "the host changed";
    }
    fs::remove(installed("sub"));
    put(list, listed);

    // A link at a name it wrote, and a file another user put there: left.
    fs::remove(installed("gpubind-nvml"));
    fs::create_symlink("/etc/passwd", installed("gpubind-nvml"));
    ASSERT_EQ(::chown(installed("gpubind-hook").c_str(), 1000, 1000), 0);
    const auto r = setup("--remove");
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(slurp(host() / "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n");
    EXPECT_TRUE(fs::is_symlink(installed("gpubind-nvml")));
    EXPECT_TRUE(fs::exists(installed("gpubind-hook")));
    EXPECT_THAT(r.text, HasSubstr("left " + installed("gpubind-nvml").string() +
                                  ": a symbolic link, not a file gpubind wrote"));
    EXPECT_THAT(r.text, HasSubstr("left " + installed("gpubind-hook").string() +
                                  ": owned by uid 1000, not a file gpubind wrote"));
    // What it did write is gone: the other program, the spec, the registration.
    EXPECT_FALSE(fs::exists(installed("gpubind-runtime"))) << r.text;
    EXPECT_FALSE(fs::exists(spec_file())) << r.text;
    EXPECT_FALSE(fs::exists(host() / "etc/containerd/conf.d/gpubind.toml")) << r.text;
    EXPECT_THAT(r.text, HasSubstr("left directory " + installed("").parent_path().string() +
                                  " (not empty)"));
}

// containerd 1.6 reads what the install wrote: config.toml with its import,
// the runtime gpubind, and the node's own cri settings kept.
TEST_F(HostInstall, ContainerdParsesTheInstalledConfig) {
    ASSERT_EQ(setup().status, 0);
    // In a mount namespace of its own, the host's /etc is where containerd
    // looks for the import.
    const auto dump = test::run("unshare --mount --propagation private sh -c 'mount --bind " +
                                (host() / "etc").string() +
                                " /etc && containerd --config /etc/containerd/config.toml "
                                "config dump' 2>&1");
    ASSERT_EQ(dump.status, 0) << dump.text;
    EXPECT_THAT(dump.text, HasSubstr("/etc/containerd/conf.d/gpubind.toml"));
    EXPECT_THAT(dump.text, HasSubstr("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes."
                                     "gpubind.options]"));
    EXPECT_THAT(dump.text, HasSubstr("BinaryName = \"/usr/local/gpubind/gpubind-runtime\""));
    EXPECT_THAT(dump.text, HasSubstr("sandbox_image = \"registry.k8s.io/pause:3.9\""));
}

// gpubind-runtime reads the config.toml beside it (engines hand it no
// environment of its own); $GPUBIND_CONFIG still wins, and a config there
// others may write is refused.
TEST_F(HostInstall, TheRuntimeReadsTheConfigBesideIt) {
    const fs::path bin = dir() / "bin";
    fs::create_directories(bin);
    fs::copy_file(GPUBIND_RUNTIME_PATH, bin / "gpubind-runtime");
    const auto recorder = [&](const std::string& name) {
        put(dir() / name,
            "#!/bin/sh\necho " + name + " \"$@\" > " + (dir() / "ran").string() + "\n",
            fs::perms(0755));
        return "[runtime]\nruntimes = [\"" + (dir() / name).string() + "\"]\n";
    };
    put(bin / "config.toml", recorder("beside"));
    put(dir() / "env.toml", recorder("named"));
    const std::string runtime = (bin / "gpubind-runtime").string() + " state c1 2>&1";

    auto r = test::run("env -u GPUBIND_CONFIG " + runtime);
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(slurp(dir() / "ran"), "beside state c1\n");
    r = test::run("GPUBIND_CONFIG=" + (dir() / "env.toml").string() + " " + runtime);
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(slurp(dir() / "ran"), "named state c1\n");
    fs::permissions(bin / "config.toml", fs::perms(0666));
    r = test::run("env -u GPUBIND_CONFIG " + runtime);
    EXPECT_NE(r.status, 0);
    EXPECT_THAT(r.text, HasSubstr((bin / "config.toml").string()));
}

// --- the pure parts ---

TEST(HostConfig, TheHookIsSetAndEveryOtherByteKept) {
    const std::string hook = "/usr/local/gpubind/gpubind-hook";
    const std::string line = "hook = \"" + hook + "\"\n";
    EXPECT_EQ(setup::config_with_hook("", hook, "c"), "[cdi]\n" + line);
    EXPECT_EQ(setup::config_with_hook("[log]\nlevel = \"warn\"", hook, "c"),
              "[log]\nlevel = \"warn\"\n\n[cdi]\n" + line);
    EXPECT_EQ(setup::config_with_hook("# c\n[cdi] # x\nkind = \"a/b\"\n", hook, "c"),
              "# c\n[cdi] # x\n" + line + "kind = \"a/b\"\n");
    EXPECT_EQ(setup::config_with_hook("[cdi]\nhook = '/usr/bin/gpubind-hook' # ours\n", hook, "c"),
              "[cdi]\nhook = \"" + hook + "\" # ours\n");
    // The package's config (what the image has): one line changes.
    const std::string package = slurp(fs::path(GPUBIND_SOURCE_DIR) / "config/config.toml");
    std::string want = package;
    const std::string old_line = "hook = \"/usr/bin/gpubind-hook\"\n";
    ASSERT_NE(want.find(old_line), std::string::npos);
    want.replace(want.find(old_line), old_line.size(), line);
    EXPECT_EQ(setup::config_with_hook(package, hook, "config.toml"), want);
    for (const char* bad : {"cdi = { kind = \"a/b\" }\n", "cdi.kind = \"a/b\"\n",
                            "[cdi]\nhook = 3\n", "[cdi.x]\ny = 1\n", "[cdi\n"}) {
        SCOPED_TRACE(bad);
        EXPECT_THROW(setup::config_with_hook(bad, hook, "c"), util::Error);
    }
}

TEST(HostSpec, TheRootIsTakenOffAndTheVersionLowered) {
    const json spec = {
        {"cdiVersion", "0.5.0"},
        {"kind", "nvidia.com/gpu"},
        {"devices",
         {{{"name", "gpu0"},
           {"containerEdits",
            {{"deviceNodes", {{{"path", "/dev/nvidia0"}, {"hostPath", "/host/dev/nvidia0"}}}}}}}}},
        {"containerEdits",
         {{"deviceNodes", {{{"path", "/dev/x"}, {"hostPath", "/hostile/dev/x"}}}},
          {"mounts", {{{"hostPath", "/host/usr/lib/libcuda.so.1"}, {"containerPath", "/l"}}}},
          {"hooks", {{{"hookName", "createRuntime"}, {"path", "/host"}}}}}}};
    const json got = setup::spec_for_host(spec, "/host/");
    EXPECT_FALSE(got["devices"][0]["containerEdits"]["deviceNodes"][0].contains("hostPath"));
    // Only whole components: /hostile is not under /host.
    EXPECT_EQ(got["containerEdits"]["deviceNodes"][0]["hostPath"], "/hostile/dev/x");
    EXPECT_EQ(got["containerEdits"]["mounts"][0]["hostPath"], "/usr/lib/libcuda.so.1");
    EXPECT_EQ(got["containerEdits"]["hooks"][0]["path"], "/");
    EXPECT_EQ(got["cdiVersion"], "0.5.0");  // the hostPath left needs it
    json plain = spec;
    plain["containerEdits"]["deviceNodes"][0]["hostPath"] = "/host/dev/x";
    EXPECT_EQ(setup::spec_for_host(plain, "/host")["cdiVersion"], "0.3.0");
}

TEST_F(HostInstall, HostPathsResolveInsideTheHost) {
    // /var/run -> /run (absolute) is the host's /run, never this machine's.
    EXPECT_EQ(setup::host_path(host(), "/var/run/cdi/x.json"), host() / "run/cdi/x.json");
    EXPECT_EQ(setup::host_path(host(), "/var/run/../../../etc/y"), host() / "etc/y");
    EXPECT_EQ(setup::host_path(host(), "/"), host());
    fs::create_directory_symlink("../../..", host() / "etc/up");
    EXPECT_EQ(setup::host_path(host(), "/etc/up/dev/nvidia0"), host() / "dev/nvidia0");
}

}  // namespace
