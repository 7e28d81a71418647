// End to end: gpubind-nvc reached as nvidia-container-cli, called the way
// its users call it. NVIDIA's legacy hook (root, --pid, from a runc prestart
// hook); enroot's hook (a user without privileges, in the user and mount
// namespaces it made, no --pid: the parent's namespace, in place), then a
// chroot into the rootfs as enroot's switchroot does; `info` and `list`
// against the simulated node's manifest; and every refusal: one line, the
// documented exit code, nothing mounted, the rootfs unchanged.
// Expectations come from the manifest and the system's tools.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "files.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr unsigned kUser = 4343;  // a user without privileges; no passwd entry needed

class NvcTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 3;
        spec.imex_channels = 2;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-nvc-node");
        // The user reaches the node through it, as the host's driver files.
        fs::permissions(node_->root(), fs::perms(0755));
        bin_ = std::make_unique<TempDir>("gpubind-e2e-nvc-bin");
        fs::permissions(bin_->path(), fs::perms(0755));
        // Installed as a package installs it beside its config (the program's
        // own directory, as for gpubind-runtime), reached through the name
        // the tools run.
        const fs::path built = env_or("GPUBIND_NVC", GPUBIND_NVC_PATH);
        fs::copy_file(built, bin_->path() / "gpubind-nvc");
        fs::copy_file(built.parent_path() / "gpubind-nvml", bin_->path() / "gpubind-nvml");
        fs::copy_file(node_->config(), bin_->path() / "config.toml");
        fs::create_symlink("gpubind-nvc", bin_->path() / "nvidia-container-cli");
    }
    static void TearDownTestSuite() {
        bin_.reset();
        node_.reset();
    }
    void SetUp() override { fs::permissions(dir_.path(), fs::perms(0755)); }

    static const sim::Manifest& m() { return node_->manifest(); }
    static std::string cli() { return (bin_->path() / "nvidia-container-cli").string(); }

    static RunResult nvc(std::vector<std::string> args) {
        args.insert(args.begin(), cli());
        return run_command(args);
    }

    Bundle bundle() { return Bundle(dir_.path() / ("b" + std::to_string(count_++))); }

    static inline std::unique_ptr<SimNode> node_;
    static inline std::unique_ptr<TempDir> bin_;
    TempDir dir_{"gpubind-e2e-nvc"};
    int count_ = 0;
};

// --- info and list: the node as nvidia-container-cli prints it ---

TEST_F(NvcTest, InfoPrintsEachGpuOfTheNode) {
    auto r = nvc({"info"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto text = lines_of(r.out);
    EXPECT_TRUE(contains(text, "NVRM version:   " + m().spec.driver_version)) << r.out;
    EXPECT_TRUE(contains(text, "CUDA version:   " + m().cuda_version)) << r.out;
    for (const auto& g : m().gpus) {
        unsigned domain = 0, bus = 0, dev = 0;
        ASSERT_EQ(std::sscanf(g.pci_bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev), 3);
        EXPECT_TRUE(contains(text, "Device Minor:   " + std::to_string(g.minor))) << r.out;
        EXPECT_TRUE(contains(text, "GPU UUID:       " + g.uuid)) << r.out;
        EXPECT_TRUE(contains(text, "Model:          " + g.model)) << r.out;
        EXPECT_TRUE(contains(text, "Architecture:   " + g.compute_capability)) << r.out;
        EXPECT_TRUE(
            contains(text, fmt::format("Bus Location:   {:08x}:{:02x}:{:02x}.0", domain, bus, dev)))
            << r.out;
    }
    r = nvc({"info", "--csv"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto csv = lines_of(r.out);
    ASSERT_EQ(csv.size(), 4 + m().gpus.size()) << r.out;
    EXPECT_EQ(csv[1], m().spec.driver_version + "," + m().cuda_version);
    EXPECT_EQ(csv[3], "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture");
    for (std::size_t i = 0; i < m().gpus.size(); ++i)
        EXPECT_THAT(csv[4 + i], HasSubstr("," + m().gpus[i].uuid + ",")) << r.out;
}

TEST_F(NvcTest, ListPrintsWhatTheNodeHolds) {
    // Everything, without options: the control and GPU nodes, then each
    // driver file (libraries by their real file), paths as on the node, in
    // nvidia-container-cli's order of groups: the driver's control nodes, the
    // GPUs' nodes, IMEX channels, binaries, 64-bit libraries, 32-bit ones,
    // IPCs, firmware (its src/cli/list.c). Each path's group, from the manifest:
    std::map<std::string, int> group;
    enum { kControl, kGpu, kImex, kBinary, kLibrary, kLibrary32, kIpc, kFirmware };
    for (const auto& n : m().nodes) {
        // IMEX channels are listed when asked for (--imex-channel), MIG's
        // capabilities with a MIG device.
        if (n.path.starts_with("/dev/nvidia-caps")) continue;
        const bool gpu = std::any_of(m().gpus.begin(), m().gpus.end(), [&](const auto& g) {
            return n.path == "/dev/nvidia" + std::to_string(g.minor);
        });
        group[n.path] = gpu ? kGpu : kControl;
    }
    for (const auto& f : m().files) {
        if (f.name == "nvidia-mps") continue;  // given only where [catalog] names it
        const int g = f.kind == "binary"    ? kBinary
                      : f.kind == "library" ? (f.compat32 ? kLibrary32 : kLibrary)
                      : f.kind == "ipc"     ? kIpc
                                            : kFirmware;
        group[f.kind == "library" ? f.real_path : f.path] = g;
    }
    std::set<std::string> want;
    for (const auto& [path, g] : group) want.insert(path);
    auto r = nvc({"list"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto all = lines_of(r.out);
    EXPECT_EQ(std::set<std::string>(all.begin(), all.end()), want) << r.out;
    EXPECT_EQ(all.size(), want.size()) << "a path printed twice:\n" << r.out;
    // Each group whole and in its place: the groups printed, in order.
    std::vector<int> order;
    for (const auto& line : all)
        if (auto it = group.find(line); it != group.end())
            if (order.empty() || order.back() != it->second) order.push_back(it->second);
    std::vector<int> groups_held;
    for (const auto& [path, g] : group) groups_held.push_back(g);
    std::sort(groups_held.begin(), groups_held.end());
    groups_held.erase(std::unique(groups_held.begin(), groups_held.end()), groups_held.end());
    EXPECT_EQ(order, groups_held) << r.out;
    for (int g : {kControl, kGpu, kBinary, kLibrary, kIpc, kFirmware})  // no 32-bit ones on arm64
        EXPECT_TRUE(std::count(groups_held.begin(), groups_held.end(), g))
            << "the simulated node has no file of group " << g << ": the order is not tested";

    // Libraries only, 64-bit ones first: the node's, none of its 32-bit copies.
    r = nvc({"list", "--libraries"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> libs;
    for (const auto& f : m().files)
        if (f.kind == "library" && !f.compat32) libs.insert(f.real_path);
    const auto listed = lines_of(r.out);
    EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), libs) << r.out;

    // One GPU by UUID, and IMEX channel 1.
    r = nvc({"list", "--device=" + m().gpus[1].uuid, "--imex-channel=1", "--no-persistenced"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto one = lines_of(r.out);
    EXPECT_TRUE(contains(one, "/dev/nvidia" + std::to_string(m().gpus[1].minor))) << r.out;
    EXPECT_FALSE(contains(one, "/dev/nvidia" + std::to_string(m().gpus[0].minor))) << r.out;
    EXPECT_TRUE(contains(one, "/dev/nvidiactl")) << r.out;
    EXPECT_TRUE(contains(one, "/dev/nvidia-caps-imex-channels/channel1")) << r.out;
    EXPECT_EQ(one.size(), 6u) << r.out;  // ctl, uvm, uvm-tools, modeset, the GPU, the channel
    if (one.size() == 6u) {              // the GPU after the control nodes, the channel last
        EXPECT_EQ(one[4], "/dev/nvidia" + std::to_string(m().gpus[1].minor)) << r.out;
        EXPECT_EQ(one[5], "/dev/nvidia-caps-imex-channels/channel1") << r.out;
    }

    // --root names another driver root: the same node seen through it.
    r = nvc({"--root=" + node_->root().string(), "list", "-b"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& f : m().files)
        if (f.kind == "binary") {
            EXPECT_TRUE(contains(lines_of(r.out), f.path)) << r.out;
        }
}

// A MIG device: its parent's node, then each capability's access file and
// node; --mig-config=all: the config capability's file and node.
TEST_F(NvcTest, ListNamesAMigDevicesCapabilities) {
    sim::Spec spec;
    spec.gpus = 2;
    spec.mig = {{1, 1, 0}, {1, 2, 0}};
    const SimNode node(spec, "gpubind-e2e-nvc-mig");
    fs::copy_file(node.config(), bin_->path() / "config.toml",
                  fs::copy_options::overwrite_existing);
    struct Restore {
        ~Restore() {
            fs::copy_file(node_->config(), bin_->path() / "config.toml",
                          fs::copy_options::overwrite_existing);
        }
    } restore;
    const sim::ManifestMig& mig = node.manifest().migs[1];  // GPU 1's second: "1:1"
    const unsigned minor = node.manifest().gpus[1].minor;
    auto r = nvc({"list", "--device=1:1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = lines_of(r.out);
    const std::string gi =
        fmt::format("/proc/driver/nvidia/capabilities/gpu{}/mig/gi{}", minor, mig.gi);
    const std::vector<std::string> tail = {
        "/dev/nvidia" + std::to_string(minor), gi + "/access",
        "/dev/nvidia-caps/nvidia-cap" + std::to_string(mig.gi_cap_minor),
        fmt::format("{}/ci{}/access", gi, mig.ci),
        "/dev/nvidia-caps/nvidia-cap" + std::to_string(mig.ci_cap_minor)};
    ASSERT_GE(lines.size(), tail.size()) << r.out;
    EXPECT_EQ(std::vector<std::string>(lines.end() - tail.size(), lines.end()), tail) << r.out;
    EXPECT_FALSE(contains(lines, "/dev/nvidia-caps/nvidia-cap" +
                                     std::to_string(node.manifest().migs[0].gi_cap_minor)))
        << r.out;

    r = nvc({"list", "--device=0", "--mig-config=all"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(lines_of(r.out), "/proc/driver/nvidia/capabilities/mig/config")) << r.out;
    r = nvc({"list", "--mig-config=0"});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_THAT(r.err, HasSubstr("--mig-config: only \"all\" is supported"));
}

// --- configure, as NVIDIA's legacy hook runs it: root, --pid, at prestart ---

TEST_F(NvcTest, LegacyHookFormGivesTheContainerItsGpu) {
    Bundle b = bundle();
    const fs::path script = dir_.path() / "nvidia-container-runtime-hook";
    // The hook's argv, in its order (nvidia-container-toolkit 1.17).
    std::ofstream(script) << "#!/bin/sh\n"
                          << "pid=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p')\n"
                          << "exec " << cli() << " --load-kmods --debug=" << dir_.path().string()
                          << "/nvc.log configure --cuda-compat-mode=disabled "
                          << "--ldconfig=@/sbin/ldconfig --device=" << m().gpus[1].uuid
                          << " --compute --utility '--require=cuda>=12.0' --pid=\"$pid\" "
                          << b.rootfs().string() << "\n";
    fs::permissions(script, fs::perms::owner_all);
    b.spec()["hooks"]["prestart"] = {{{"path", script.string()}, {"args", {"hook"}}}};
    for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
    b.command(gpu_script(m()));
    auto r = b.run();
    std::ifstream log(dir_.path() / "nvc.log");
    std::stringstream debug;
    debug << log.rdbuf();
    ASSERT_EQ(r.exit_code, 0) << r.err << debug.str();
    EXPECT_EQ(expect_gpus(m(), r.out, {1}), "") << r.out;
    EXPECT_THAT(debug.str(), HasSubstr("--load-kmods: accepted"));
}

// --- configure, as enroot's hook runs it: a user, in place ---

void chown_tree(const fs::path& root, unsigned id) {
    ASSERT_EQ(::lchown(root.c_str(), id, id), 0);
    for (const auto& e : fs::recursive_directory_iterator(root))
        ASSERT_EQ(::lchown(e.path().c_str(), id, id), 0) << e.path();
}

// The container's setup as a tool that runs the CLI in place makes it: the
// rootfs bound on itself and the host's /proc and /dev/null bound in, in a
// mount namespace of its own; then the CLI, then `script` in a chroot of the
// rootfs. `prefix` runs all that: enroot's user and mount namespaces, or
// Apptainer's mount namespace as root.
RunResult run_in_place(std::vector<std::string> prefix, const fs::path& rootfs,
                       const std::string& cli_args, const std::string& script) {
    const std::string r = rootfs.string();
    const std::string inner = "set -e; mount --bind " + r + " " + r + "; mount --rbind /proc " + r +
                              "/proc; mount --bind /dev/null " + r + "/dev/null; set +e; " +
                              cli_args + " " + r + "; echo \"== nvc $?\"; chroot " + r +
                              " /bin/sh -c \"$1\"";
    for (const char* word : {"sh", "-c"}) prefix.emplace_back(word);
    prefix.push_back(inner);
    prefix.emplace_back("sh");
    prefix.push_back(script);
    return run_command(prefix);
}

// In place, root's call is refused where pid 1's mount namespace cannot be
// compared with its own, as where these tests run (pid 1 hidden from root):
// `argv` run by a shell in a mount namespace of its own, in a pid namespace
// whose init, in another mount namespace, stands for the host's.
std::vector<std::string> beside_an_init(std::vector<std::string> argv) {
    std::vector<std::string> out = {"unshare",
                                    "--pid",
                                    "--fork",
                                    "--mount-proc",
                                    "--",
                                    "sh",
                                    "-c",
                                    "\"$@\"; exit $?",
                                    "sh",
                                    "unshare",
                                    "--mount",
                                    "--propagation",
                                    "private",
                                    "--",
                                    "sh",
                                    "-c",
                                    "\"$@\"; exit $?",
                                    "sh"};  // its parent, not pid 1
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
}

// enroot: the user's own user and mount namespaces (its uid mapped to
// itself, the capabilities kept for its hooks, as enroot-unshare does), the
// CLI as its 98-nvidia.sh hook runs it.
RunResult run_as_enroot(const fs::path& rootfs, const std::string& cli_args,
                        const std::string& script) {
    return run_in_place({"setpriv", "--reuid=" + std::to_string(kUser),
                         "--regid=" + std::to_string(kUser), "--clear-groups", "--", "unshare",
                         "--user", "--map-current-user", "--mount", "--keep-caps"},
                        rootfs, cli_args, script);
}

// An image as enroot unpacks it: the user's, with a /dev/null to bind over.
void enroot_rootfs(const fs::path& rootfs) {
    std::ofstream(rootfs / "dev/null").flush();
    chown_tree(rootfs, kUser);
}

TEST_F(NvcTest, EnrootFormGivesAUserItsGpuInItsOwnNamespaces) {
    Bundle b = bundle();
    enroot_rootfs(b.rootfs());
    // The node's description as root keeps it (any root start writes it).
    ASSERT_EQ(nvc({"list"}).exit_code, 0);
    const std::string mounts_before = host_mounts();
    auto r = run_as_enroot(b.rootfs(),
                           cli() +
                               " --user --debug=/dev/stderr configure --no-cgroups "
                               "--ldconfig=@/sbin/ldconfig --device=2 --compute --utility",
                           gpu_script(m(), {.cgroup = false}));
    ASSERT_TRUE(contains(lines_of(r.out), "== nvc 0")) << r.out << r.err;
    // Read, not discovered again: root's files, seen from the user's
    // namespace as the overflow uid's, are the same driver state.
    EXPECT_THAT(r.err, HasSubstr("checked and read"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("discovering the node")));
    EXPECT_EQ(expect_gpus(m(), r.out, {2}, {.cgroup = false}), "") << r.out << r.err;
    // Its namespaces went with it: nothing reached this one.
    EXPECT_EQ(host_mounts(), mounts_before);
    // What it made in the rootfs is the user's.
    struct stat st {};
    ASSERT_EQ(::lstat((b.rootfs() / "etc/ld.so.cache").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kUser);
}

// Issue 44, F1: in enroot's namespace root's files and another user's show
// alike, as the overflow uid. Another user's MPS directory, made after root
// described the node (no MPS daemon running), is not given to the user's
// container, though the node is discovered again there; root's persistenced
// socket, which root's description gave, still is (it vouches for it).
TEST_F(NvcTest, EnrootFormGivesNoOtherUsersIpcForRoots) {
    constexpr unsigned kOther = 4444;  // another user without privileges
    // A copy of the program beside a config whose compute names the MPS
    // directory, as config.toml says to do for MPS.
    const fs::path bin = dir_.path() / "mps-bin";
    fs::create_directories(bin);
    fs::permissions(bin, fs::perms(0755));
    fs::copy_file(bin_->path() / "gpubind-nvc", bin / "gpubind-nvc");
    fs::copy_file(bin_->path() / "gpubind-nvml", bin / "gpubind-nvml");
    const std::string root = node_->root().string();
    std::ofstream(bin / "config.toml")
        << "[node]\ndriver-root = \"" << root << "\"\ndev-root = \"" << root << "\"\nproc-root = \""
        << root << "/proc\"\nstate-dir = \"" << (dir_.path() / "mps-state").string()
        << "\"\n[cdi]\ndir = \"" << (dir_.path() / "mps-cdi").string() << "\"\n[catalog.compute]\n"
        << "libraries = [\"libcuda.so\", \"libnvidia-ptxjitcompiler.so\"]\n"
        << "binaries = []\nipcs = [\"/tmp/nvidia-mps\"]\nfirmware = []\n";
    fs::permissions(bin / "config.toml", fs::perms(0644));
    // The node's tmp as a host's /tmp (anyone may make a name there), and no
    // MPS daemon: no directory.
    const fs::path tmp = node_->root() / "tmp";
    const fs::path mps = tmp / "nvidia-mps";
    const fs::path saved = tmp / "nvidia-mps.saved";
    fs::rename(mps, saved);
    const fs::perms tmp_mode = fs::status(tmp).permissions();
    struct Restore {
        fs::path tmp, mps, saved;
        fs::perms mode;
        ~Restore() {
            std::error_code ec;
            fs::remove_all(mps, ec);
            fs::rename(saved, mps, ec);
            fs::permissions(tmp, mode, ec);
        }
    } restore{tmp, mps, saved, tmp_mode};
    ASSERT_EQ(::chmod(tmp.c_str(), 01777), 0);
    // Root describes the node.
    ASSERT_EQ(run_command({(bin / "gpubind-nvc").string(), "list"}).exit_code, 0);
    // Another user makes the MPS directory.
    fs::create_directories(mps);
    std::ofstream(mps / "planted-by-other") << "x\n";
    ASSERT_EQ(::chown(mps.c_str(), kOther, kOther), 0);
    ASSERT_EQ(::chown((mps / "planted-by-other").c_str(), kOther, kOther), 0);
    ASSERT_EQ(::chmod(mps.c_str(), 0777), 0);

    Bundle b = bundle();
    enroot_rootfs(b.rootfs());
    auto r = run_as_enroot(b.rootfs(),
                           (bin / "gpubind-nvc").string() +
                               " --user --debug=/dev/stderr configure --no-cgroups "
                               "--ldconfig=@/sbin/ldconfig --device=0 --compute --utility",
                           "echo '== mps'; ls -a /tmp/nvidia-mps; echo '== socket'; "
                           "ls -l /run/nvidia-persistenced/socket");
    ASSERT_TRUE(contains(lines_of(r.out), "== nvc 0")) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("discovering the node"));  // the MPS directory is new
    auto out = sections(r.out);
    EXPECT_FALSE(contains(out["mps"], "planted-by-other")) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(mps.string() + " has an owner"));
    ASSERT_EQ(out["socket"].size(), 1u) << r.out << r.err;
    EXPECT_TRUE(out["socket"][0].starts_with("s")) << r.out;
}

TEST_F(NvcTest, EnrootFormWithoutNoCgroupsIsRefusedBeforeAnythingIsDone) {
    Bundle b = bundle();
    enroot_rootfs(b.rootfs());
    const std::string before = snapshot_tree(b.rootfs());
    auto r = run_as_enroot(b.rootfs(), cli() + " --user configure --device=0 --utility",
                           "echo '== dev'; ls /dev");
    EXPECT_TRUE(contains(lines_of(r.out), "== nvc 4")) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("nvidia-container-cli: configure " + b.rootfs().string() +
                                 ": device cgroups cannot be changed without privileges"));
    EXPECT_FALSE(contains(sections(r.out)["dev"], "nvidia0")) << r.out;
    EXPECT_EQ(snapshot_tree(b.rootfs()), before);
}

// Apptainer run by root (--nvccli without a user namespace): root, in place
// in the container's own mount namespace, no --pid.
TEST_F(NvcTest, ApptainerFormAsRootActsInItsMountNamespace) {
    Bundle b = bundle();
    std::ofstream(b.rootfs() / "dev/null").flush();
    const std::string mounts_before = host_mounts();
    auto r = run_in_place(beside_an_init({}), b.rootfs(),
                          cli() +
                              " configure --no-cgroups --device=0,2 --compute --utility "
                              "--ldconfig=@/sbin/ldconfig",
                          gpu_script(m(), {.cgroup = false}));
    ASSERT_TRUE(contains(lines_of(r.out), "== nvc 0")) << r.out << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 2}, {.cgroup = false}), "") << r.out << r.err;
    EXPECT_EQ(host_mounts(), mounts_before);
}

// --- refusals: one line, the exit code, nothing mounted, nothing changed ---

TEST_F(NvcTest, BadInputIsOneLineAndChangesNothing) {
    Bundle b = bundle();
    const std::string rootfs = b.rootfs().string();
    // A directory where the driver's library goes: found midway, after the
    // devices and mounts are in, so everything done must be undone.
    fs::create_directories(b.rootfs() / "usr/lib/x86_64-linux-gnu/libcuda.so.1");
    // Every entry as it was (times left out: a directory that held a
    // new entry for a while has a new mtime).
    const auto before = tree(b.rootfs());
    const std::string mounts = host_mounts();
    struct Case {
        std::vector<std::string> args;
        int code;
        std::string says;
    };
    const std::vector<Case> cases = {
        {{"configure", "--no-cgroups", "/"}, 3, "absolute path other than /"},
        {{"configure", "--no-cgroups", "relative/rootfs"}, 3, "absolute path other than /"},
        {{"configure", "--no-mig", rootfs}, 2, "unrecognized option '--no-mig'"},
        {{"-u", "5", "configure", rootfs}, 2, "unknown command '5'"},
        {{"configure", "--no-cgroups", "--device=7", rootfs}, 3, "select device 7"},
        {{"configure", "--no-cgroups", "--device=0", "--compute", "--require=cuda>=99.0", rootfs},
         4,
         "cuda>=99.0"},
        {{"configure", "--no-cgroups", "--mig-config=0", rootfs}, 3, "only \"all\""},
        {{"configure", "--no-cgroups", "--pid=2147483", rootfs}, 3, "no such process"},
        // A --pid in the caller's own mount namespace (here, the test's).
        {{"configure", "--no-cgroups", "--pid=" + std::to_string(::getpid()), rootfs},
         1,
         "shares this process's mount namespace"},
        {{"configure", "--no-cgroups", "--device=0", "--compute", rootfs}, 1, "libcuda.so.1"},
    };
    for (const auto& c : cases) {
        // The last acts in place (and fails midway): beside an init it can
        // be told from.
        std::vector<std::string> argv = c.args;
        argv.insert(argv.begin(), cli());
        auto r = run_command(&c == &cases.back() ? beside_an_init(argv) : argv);
        const std::string what = c.args.back() + " after " + c.args[c.args.size() - 2];
        EXPECT_EQ(r.exit_code, c.code) << what << ": " << r.err;
        EXPECT_THAT(r.err, HasSubstr(c.says)) << what;
        EXPECT_TRUE(r.err.starts_with("nvidia-container-cli: ")) << r.err;
        EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(host_mounts(), mounts) << what;
        EXPECT_EQ(tree(b.rootfs()), before) << what;
    }
}

// The image's environment never reaches it nor what it starts: enroot runs
// its hooks with the container's variables. A config named there is not
// read, and a library preloaded there is not loaded into the NVML helper it
// runs (the description removed, so NVML is asked now).
TEST_F(NvcTest, TheCallersEnvironmentReachesNothing) {
    const fs::path bad = dir_.path() / "config.toml";
    std::ofstream(bad) << "this is not toml [";
    const fs::path marker = dir_.path() / "preloaded";
    const std::vector<std::string> env = {
        "env", "GPUBIND_CONFIG=" + bad.string(),
        "LD_PRELOAD=" + env_or("GPUBIND_TEST_PRELOAD", GPUBIND_TEST_PRELOAD),
        "GPUBIND_TEST_MARKER=" + marker.string()};
    // The control: the helper itself, given that environment, loads it.
    auto with_env = [&](std::vector<std::string> argv) {
        argv.insert(argv.begin(), env.begin(), env.end());
        return run_command(argv);
    };
    with_env({(bin_->path() / "gpubind-nvml").string(), "--help"});
    ASSERT_TRUE(fs::exists(marker)) << "the preload marker does not work";
    fs::remove(marker);

    fs::remove(node_->state_dir() / "node.desc");
    auto r = with_env({cli(), "info", "--csv"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 4 + m().gpus.size()) << r.out;
    EXPECT_EQ(lines[1], m().spec.driver_version + "," + m().cuda_version);  // NVML answered
    EXPECT_FALSE(fs::exists(marker));
}

}  // namespace
}  // namespace gpubind::test
