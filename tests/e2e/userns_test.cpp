// End to end: containers with a user namespace. runc, run by root, gives the
// container a user namespace whose root is host 100000 (a rootfs chowned to
// it, as engines with user-namespace remapping prepare it); gpubind-hook is
// registered as users register it. Inside: the selected GPU's nodes open
// (ENXIO: no driver behind them), every other NVIDIA node is refused (EPERM),
// the driver libraries load through the refreshed cache, nvidia-smi lists the
// GPU; on the host: whatever gpubind created in the rootfs belongs to the
// container's root. Expectations come from the simulated node's manifest and
// the host's own stat; the checks also run without the hook and must fail.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr unsigned kHostRoot = 100000;  // the container's uid/gid 0 on the host
constexpr unsigned kRange = 65536;
constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu";

// Every entry under `root` (not following links): path -> "uid:gid".
std::map<std::string, std::string> owners_under(const fs::path& root) {
    std::map<std::string, std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        out["/" + it->path().lexically_relative(root).string()] =
            std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
    }
    return out;
}

void chown_tree(const fs::path& root, unsigned id) {
    ASSERT_EQ(::lchown(root.c_str(), id, id), 0);
    for (const auto& [path, ids] : owners_under(root))
        ASSERT_EQ(::lchown((root.string() + path).c_str(), id, id), 0) << path;
}

class UsernsTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 3;
        spec.memory_limits = true;  // the driver's per-cgroup limit, which needs host root
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-userns-node");
        // The container's root (host 100000) reaches the GPU nodes runc binds
        // at /hostdev through it.
        fs::permissions(node_->root(), fs::perms(0755));
    }
    static void TearDownTestSuite() { node_.reset(); }
    void SetUp() override { fs::permissions(dir_.path(), fs::perms(0711)); }

    static const sim::Manifest& m() { return node_->manifest(); }

    // A bundle whose container has a user namespace: 0..65535 -> 100000..
    Bundle bundle(bool with_hook = true) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)));
        auto& linux_ = b.spec()["linux"];
        linux_["namespaces"].push_back({{"type", "user"}});
        const nlohmann::json map = {{{"containerID", 0}, {"hostID", kHostRoot}, {"size", kRange}}};
        linux_["uidMappings"] = map;
        linux_["gidMappings"] = map;
        chown_tree(b.rootfs(), kHostRoot);
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        for (const auto& g : m().gpus)
            b.bind(node_->root() / ("dev/nvidia" + std::to_string(g.minor)),
                   "/hostdev/nvidia" + std::to_string(g.minor));
        return b;
    }

    static std::string inspect_script() {
        std::string s = "echo '== dev'; probe stat";
        for (const auto& n : m().nodes) s += " " + n.path;
        s += "; echo '== open'; probe open";
        for (const auto& g : m().gpus) s += " /hostdev/nvidia" + std::to_string(g.minor);
        s += "; echo '== cuda'; probe cuda; probe nvml";
        s += "; echo '== smi'; nvidia-smi -L";
        s += "; echo '== mounts'; cat /proc/self/mountinfo";
        s += "; echo '== owners'; stat -c '%u:%g %n' $(find /lib /lib64 /usr /etc /var /run /dev "
             "/bin /sbin /hostdev 2>/dev/null)";
        return s + "; true";
    }

    // Problems by check for a container given exactly GPU `index`.
    static std::map<std::string, std::vector<std::string>> check_given(const RunResult& r,
                                                                       unsigned index) {
        std::map<std::string, std::vector<std::string>> problems;
        auto s = sections(r.out);
        auto expect = [&](const std::string& check, const std::string& section,
                          const std::string& line) {
            if (!contains(s[section], line))
                problems[check].push_back("missing line in " + section + ": " + line);
        };
        for (const auto& g : m().gpus) {
            const std::string path = "/dev/nvidia" + std::to_string(g.minor);
            expect(
                "devices", "dev",
                g.index == index ? path + " c 195:" + std::to_string(g.minor) : path + " ENOENT");
            expect("cgroup", "open",
                   "/hostdev/nvidia" + std::to_string(g.minor) +
                       (g.index == index ? " ENXIO" : " EPERM"));
        }
        expect("devices", "dev", "/dev/nvidiactl c 195:255");
        bool cuda = false;
        for (const auto& line : s["cuda"])
            if (line.rfind("cuda init=0 ", 0) == 0 && line.ends_with(" count=1(0)")) cuda = true;
        if (!cuda) problems["loader"].push_back("libcuda did not load or did not see one GPU");
        expect("loader", "cuda", "nvml init=0 count=1(0)");
        std::set<std::string> uuids;
        for (const auto& line : s["smi"])
            if (auto p = line.find("(UUID: "); p != std::string::npos)
                uuids.insert(line.substr(p + 7, line.find(')', p) - p - 7));
        if (uuids != std::set<std::string>{m().gpus[index].uuid})
            problems["nvidia-smi"].push_back("nvidia-smi -L does not list exactly the GPU");
        return problems;
    }

    static std::string describe(const std::map<std::string, std::vector<std::string>>& problems) {
        std::string out;
        for (const auto& [check, list] : problems)
            for (const auto& p : list) out += check + ": " + p + "\n";
        return out;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-userns"};
    int count_ = 0;
};

TEST_F(UsernsTest, ContainerRootOwnsWhatGpubindCreatesAndGetsItsGpu) {
    Bundle b = bundle();
    const auto before = owners_under(b.rootfs());
    b.env("NVIDIA_VISIBLE_DEVICES=1").command(inspect_script());
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, 1)), "") << r.out;

    // In the user namespace: uid 0 is host 100000, as the kernel says.
    auto s = sections(r.out);
    const std::string owner = std::to_string(kHostRoot) + ":" + std::to_string(kHostRoot);
    std::set<std::string> mount_points;
    for (const auto& line : s["mounts"]) {
        std::istringstream in(line);
        std::string f[5];
        for (auto& x : f) in >> x;
        mount_points.insert(f[4]);
    }
    std::map<std::string, std::string> inside;  // path -> "uid:gid" as the container sees it
    for (const auto& line : s["owners"])
        if (auto sp = line.find(' '); sp != std::string::npos)
            inside[line.substr(sp + 1)] = line.substr(0, sp);

    // What the run created in the rootfs (the mount points and their
    // directories stay after the container is gone) is the container root's.
    const auto after = owners_under(b.rootfs());
    int created = 0, created_dirs = 0;
    for (const auto& [path, ids] : after) {
        if (before.count(path)) continue;
        ++created;
        EXPECT_EQ(ids, owner) << path << " created for the container, owned by the host's " << ids;
        if (!fs::is_directory(fs::symlink_status(b.rootfs().string() + path)) ||
            mount_points.count(path))
            continue;
        ++created_dirs;
        EXPECT_EQ(inside[path], "0:0") << path << " as seen inside";
    }
    EXPECT_GT(created, 0);
    EXPECT_GT(created_dirs, 0) << "no directory created outside a mount: nothing checked inside";
    // The loader cache the confined ldconfig rewrote is the container root's too.
    EXPECT_EQ(after.at("/etc/ld.so.cache"), owner);
    EXPECT_EQ(inside["/etc/ld.so.cache"], "0:0");
}

TEST_F(UsernsTest, ChecksFailWithoutTheHook) {
    Bundle b = bundle(/*with_hook=*/false);
    b.env("NVIDIA_VISIBLE_DEVICES=1").command(inspect_script());
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto problems = check_given(r, 1);
    for (const char* check : {"devices", "loader", "nvidia-smi", "cgroup"})
        EXPECT_TRUE(problems.count(check)) << check << " passed without the hook:\n" << r.out;
}

// OCI conformance (issue 21): through gpubind-runtime, a container with a
// user namespace on a node whose dev root is not "/" (the simulated node's).
// runc cannot make a device node in a user namespace: it binds the host's
// file at the device's container path, which the shim named alone, so runc
// looked for the host's /dev/nvidia1 and the container did not start. The
// shim now gives runc the node's file as a bind mount from the dev root.
TEST_F(UsernsTest, ThroughTheRuntimeTheDevicesComeFromTheDevRoot) {
    node_->write_config("[runtime]\nruntimes = [\"" + env_or("GPUBIND_RUNC", "runc") + "\"]\n");
    ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    struct Unset {
        ~Unset() { ::unsetenv("GPUBIND_CONFIG"); }
    } unset;
    Bundle b = bundle(/*with_hook=*/false);
    b.env("NVIDIA_VISIBLE_DEVICES=1").command(inspect_script());
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, 1)), "") << r.out;
}

// Issue 21 (2): a root-owned host directory bound at /usr/lib/i386-linux-gnu
// holding a driver's names of an earlier version (empty libraries, a
// libcuda.so.1 link to one), in a container with a user namespace whose
// root cannot change it: the hook's restart cleanup removed them as host
// root. A directory on another mount than the rootfs's is left alone; the
// container starts with its GPU.
TEST_F(UsernsTest, AHostVolumeAtALibraryDirectoryIsLeftAsItIs) {
    const fs::path volume = dir_.path() / "i386-volume";
    fs::create_directories(volume);
    fs::permissions(volume, fs::perms(0755));
    for (const char* lib : {"libcuda.so.535.104.05", "libnvidia-ml.so.535.104.05"})
        std::ofstream(volume / lib).flush();
    fs::create_symlink("libcuda.so.535.104.05", volume / "libcuda.so.1");
    const std::string before = snapshot_tree(volume);
    Bundle b = bundle();
    b.bind(volume, "/usr/lib/i386-linux-gnu");
    b.env("NVIDIA_VISIBLE_DEVICES=1").command(inspect_script());
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, 1)), "") << r.out;
    EXPECT_EQ(snapshot_tree(volume), before) << "the host's directory was changed";
}

// --- Rootless: runc run by a user without privileges (`runc --rootless true`) ---
//
// The user is the container's only id (a single-id mapping, as `runc spec
// --rootless` writes it: no subordinate ids or newuidmap needed); the hook runs
// as the user too. It joins the container's user namespace, then its mount
// namespace, and binds the GPU's nodes and the driver files from there. What it
// cannot do is write device cgroup rules: the container stays in the user's
// devices cgroup. Where that cgroup allows the GPU's nodes, the container gets
// everything; where it does not, `[policy] on-refused` decides: "fail" (the
// default) refuses the container naming the step, "warn" starts it with the
// files and nodes and logs a warning, the nodes then refused by that cgroup.

constexpr unsigned kUser = 4343;  // a user without privileges; no passwd entry needed

class RootlessTest : public UsernsTest {
  protected:
    // A bundle as `runc spec --rootless` makes it; the hook's config logs to a
    // file the user may write.
    Bundle rootless_bundle(const std::string& policy, bool with_hook = true) {
        Bundle b(dir_.path() / ("r" + std::to_string(count_++)));
        auto& linux_ = b.spec()["linux"];
        linux_.erase("resources");  // a rootless runtime cannot write them
        linux_["namespaces"].push_back({{"type", "user"}});
        const nlohmann::json map = {{{"containerID", 0}, {"hostID", kUser}, {"size", 1}}};
        linux_["uidMappings"] = map;
        linux_["gidMappings"] = map;
        chown_tree(b.rootfs(), kUser);
        fs::create_directories(b.state_root());
        EXPECT_EQ(::chown(b.state_root().c_str(), kUser, kUser), 0);
        log_ = b.dir() / "hook.log";
        std::ofstream(log_).flush();
        EXPECT_EQ(::chown(log_.c_str(), kUser, kUser), 0);
        const fs::path config = b.dir() / "config.toml";
        const std::string root = node_->root().string();
        std::ofstream(config) << "[node]\ndriver-root = \"" << root << "\"\ndev-root = \"" << root
                              << "\"\nproc-root = \"" << root << "/proc\"\nstate-dir = \""
                              << (b.dir() / "state").string() << "\"\n[log]\nfile = \""
                              << log_.string() << "\"\nlevel = \"debug\"\n[cdi]\ndir = \""
                              << (b.dir() / "cdi").string() << "\"\n[policy]\n"
                              << policy;
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
        for (const auto& g : m().gpus)
            b.bind(node_->root() / ("dev/nvidia" + std::to_string(g.minor)),
                   "/hostdev/nvidia" + std::to_string(g.minor));
        return b;
    }

    // runc run by the user, from the v1 devices cgroup `cgroup` (a host
    // directory) or, when empty, from this process's.
    static RunResult run_rootless(Bundle& b, const fs::path& cgroup = {}) {
        const fs::path script = b.dir() / "runc-as-user";
        std::ofstream out(script);
        out << "#!/bin/sh\n";
        if (!cgroup.empty())
            out << "echo $$ > " << (cgroup / "cgroup.procs").string() << " || exit 99\n";
        out << "exec setpriv --reuid=" << kUser << " --regid=" << kUser << " --clear-groups -- "
            << runtime_binary() << " --rootless true \"$@\"\n";
        out.close();
        fs::permissions(script, fs::perms(0755));
        return b.run_with(script.string());
    }

    static std::string read_text(const fs::path& p) {
        std::ifstream in(p);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

    // This process's v1 devices cgroup directory on the host.
    static fs::path own_devices_cgroup() {
        std::istringstream in(read_text("/proc/self/cgroup"));
        for (std::string line; std::getline(in, line);)
            if (auto p = line.find(":devices:"); p != std::string::npos)
                return fs::path("/sys/fs/cgroup/devices") /
                       fs::path(line.substr(p + 9)).relative_path();
        return {};
    }

    fs::path log_;
};

TEST_F(RootlessTest, GetsItsGpuFilesAndNodesOwnedByTheUser) {
    const fs::path cgroup = own_devices_cgroup();
    ASSERT_FALSE(cgroup.empty()) << "no v1 devices cgroup";
    // Precondition (the CI runs the suite from the devices root): the user's
    // cgroup allows the GPU nodes, so nothing needs writing there.
    ASSERT_THAT(read_text(cgroup / "devices.list"), HasSubstr("a *:* rwm"));
    Bundle b = rootless_bundle("");
    const auto before = owners_under(b.rootfs());
    const unsigned index = 2;
    b.env("NVIDIA_VISIBLE_DEVICES=" + std::to_string(index)).command(inspect_script());
    auto r = run_rootless(b);
    ASSERT_EQ(r.exit_code, 0) << r.err << read_text(log_);
    auto problems = check_given(r, index);
    // The device cgroup is the user's: gpubind wrote nothing there, so the
    // nodes the container was not given but can reach (runc's /hostdev binds)
    // open too. Every other check holds.
    auto s = sections(r.out);
    for (const auto& g : m().gpus)
        EXPECT_TRUE(contains(s["open"], "/hostdev/nvidia" + std::to_string(g.minor) + " ENXIO"))
            << r.out;
    problems.erase("cgroup");
    EXPECT_EQ(describe(problems), "") << r.out << read_text(log_);
    EXPECT_THAT(read_text(log_), HasSubstr("rootless: joining the container's user namespace"));

    // Created by the user (the container's root), not by anyone else.
    const std::string owner = std::to_string(kUser) + ":" + std::to_string(kUser);
    const auto after = owners_under(b.rootfs());
    int created = 0;
    for (const auto& [path, ids] : after)
        if (!before.count(path)) {
            ++created;
            EXPECT_EQ(ids, owner) << path;
        }
    EXPECT_GT(created, 0);
    EXPECT_EQ(after.at("/etc/ld.so.cache"), owner);
}

// A GPU share (issue 48): NVML sets the driver's per-cgroup limit for the
// host's root only, which a rootless engine's hook is not: refused in one
// line naming why, nothing set; with [policy] shares = "soft", started
// unenforced with a warning.
TEST_F(RootlessTest, AGpuShareIsRefusedWithoutHostRootOrStartedUnenforcedWhenSoft) {
    const fs::path limits = node_->root() / "gpubind-fake-nvml/memory-limits";
    {
        Bundle b = rootless_bundle("");
        b.env("NVIDIA_VISIBLE_DEVICES=2").env("GPUBIND_GPU_MEMORY=1GiB").command("echo started");
        auto r = run_rootless(b);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
        EXPECT_THAT(r.err,
                    HasSubstr("gpubind-hook: set GPU memory limit GPUBIND_GPU_MEMORY=1GiB: the "
                              "driver's per-cgroup memory limit is set by root on the host, and "
                              "this start runs as uid " +
                              std::to_string(kUser) +
                              " (a rootless engine); [policy] shares = "
                              "soft starts it unenforced"));
    }
    EXPECT_EQ(read_text(limits), "");
    {
        Bundle b = rootless_bundle("shares = \"soft\"\n");
        b.env("NVIDIA_VISIBLE_DEVICES=2").env("GPUBIND_GPU_MEMORY=1GiB").command("echo started");
        auto r = run_rootless(b);
        ASSERT_EQ(r.exit_code, 0) << r.err << read_text(log_);
        EXPECT_THAT(r.out, HasSubstr("started"));
        EXPECT_THAT(read_text(log_), HasSubstr("the share is not enforced: the driver's per-cgroup "
                                               "memory limit is set by root on the host"));
    }
    EXPECT_EQ(read_text(limits), "");
}

// In a devices cgroup that does not allow the GPU, the rule the container
// needs cannot be written by the user: refused by default, a warning with
// on-refused = "warn".
TEST_F(RootlessTest, DevicesCgroupWithoutTheGpuFollowsOnRefused) {
    const fs::path cgroup =
        fs::path("/sys/fs/cgroup/devices") / ("gpubind-e2e-rootless-" + std::to_string(::getpid()));
    ASSERT_TRUE(fs::create_directory(cgroup));
    struct Remove {
        fs::path dir;
        ~Remove() {
            for (int i = 0; i < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i)
                ::usleep(20000);
        }
    } remove{cgroup};
    auto write = [&](const char* file, const std::string& rule) {
        std::ofstream(cgroup / file) << rule << std::flush;
    };
    write("devices.deny", "a");
    for (const char* rule : {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                             "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm"})
        write("devices.allow", rule);
    ASSERT_THAT(read_text(cgroup / "devices.list"), ::testing::Not(HasSubstr("195")));

    const unsigned index = 1;
    const std::string node = "/hostdev/nvidia" + std::to_string(m().gpus[index].minor);
    {
        Bundle b = rootless_bundle("");  // on-refused = "fail", the default
        b.env("NVIDIA_VISIBLE_DEVICES=" + std::to_string(index)).command("echo started");
        auto r = run_rootless(b, cgroup);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
        EXPECT_THAT(r.err, HasSubstr("gpubind-hook: "));
        EXPECT_THAT(r.err, HasSubstr("on-refused"));
    }
    {
        Bundle b = rootless_bundle("on-refused = \"warn\"\n");
        // The driver's files by their real names (the manifest's), mounted.
        std::string libs;
        for (const auto& f : m().files)
            if (f.name == "libcuda.so.1" || f.name == "libnvidia-ml.so.1")
                libs +=
                    std::string(" ") + kLibDir + "/" + fs::path(f.real_path).filename().string();
        ASSERT_FALSE(libs.empty());
        b.env("NVIDIA_VISIBLE_DEVICES=" + std::to_string(index))
            .command(inspect_script() + "; echo '== libs'; probe stat" + libs);
        auto r = run_rootless(b, cgroup);
        ASSERT_EQ(r.exit_code, 0) << r.err << read_text(log_);
        auto problems = check_given(r, index);
        // The files and nodes are there; the node is refused by the user's
        // cgroup, so the driver libraries load but find no usable GPU.
        auto s = sections(r.out);
        EXPECT_TRUE(contains(s["open"], node + " EPERM")) << r.out;
        std::istringstream want(libs);
        for (std::string lib; want >> lib;) EXPECT_TRUE(contains(s["libs"], lib + " f")) << r.out;
        EXPECT_FALSE(problems.count("devices")) << describe(problems) << r.out;
        EXPECT_THAT(read_text(log_), HasSubstr("going on without device rules"));
    }
}

TEST_F(RootlessTest, ChecksFailWithoutTheHook) {
    Bundle b = rootless_bundle("", /*with_hook=*/false);
    b.env("NVIDIA_VISIBLE_DEVICES=2").command(inspect_script());
    auto r = run_rootless(b);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto problems = check_given(r, 2);
    for (const char* check : {"devices", "loader", "nvidia-smi"})
        EXPECT_TRUE(problems.count(check)) << check << " passed without the hook:\n" << r.out;
}

}  // namespace
}  // namespace gpubind::test
