// End to end (issue 48): a container asking for a share of a GPU
// (GPUBIND_GPU_MEMORY, or the hint of another scheduler) started through
// runc, by gpubind-hook and by gpubind-runtime, on a simulated node whose fake
// NVML reports each GPU's memory. Where the driver offers no per-cgroup memory
// limit the start is refused with one line saying so, nothing left in the
// rootfs, and with [policy] shares = "soft" it starts with the whole GPUs and
// a warning. A limit above a GPU's memory is refused either way. Where the
// driver offers it (gpubind simulate --memory-limits), the hook sets it on the
// container's cgroup: the fake CUDA's allocations inside stop at it, and it
// is gone once the container is. Expectations come from
// the simulated node's manifest and the simulator's documented memory (the
// model's "<N>GB").
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <csignal>
#include <fstream>
#include <functional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "files.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ShareE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 2;
        spec.model = "NVIDIA A100-SXM4-40GB";  // the fake NVML's memory: 40 GiB
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-share");
    }
    static void TearDownTestSuite() { node_.reset(); }
    void TearDown() override {
        node_->write_config();
        ::unsetenv("GPUBIND_CONFIG");
    }
    static const sim::Manifest& m() { return node_->manifest(); }

    // A container asking for `gpus` with `share` (one variable), with the hook
    // registered unless `with_hook` is false (for the shim), and every GPU's
    // node at /hostdev unless `hostdev` is false (runc makes those mount points
    // before any hook: a refused start's rootfs would change).
    Bundle bundle(const std::string& gpus, const std::string& share, bool with_hook = true,
                  bool hostdev = true) {
        Bundle b(work_.path() / ("b" + std::to_string(count_++)));
        if (with_hook) b.hook(hook(), node_->config());
        // Every GPU's node at /hostdev: the device cgroup must refuse those not given.
        if (hostdev)
            for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
        b.env("NVIDIA_VISIBLE_DEVICES=" + gpus).env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        b.env(share);
        b.command(gpu_script(m()));
        return b;
    }
    static void use_shim(const std::string& extra = {}) {
        node_->write_config(fmt::format("[runtime]\nruntimes = [\"{}\"]\n{}",
                                        env_or("GPUBIND_RUNC", "runc"), extra));
        ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    }
    // Runs `b` (through `runtime`, "" for runc with the hook): refused with
    // `message`, nothing changed in the rootfs, the spec or the host's mounts.
    static void expect_refused(Bundle& b, const std::string& runtime, const std::string& message) {
        b.write_spec();
        const std::string spec = slurp(b.dir() / "config.json"), rootfs = snapshot_tree(b.rootfs()),
                          mounts = host_mounts();
        auto r = runtime.empty() ? b.run() : b.run_with(runtime);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("== dev"))) << "the container ran";
        EXPECT_THAT(r.err, HasSubstr(message));
        if (!runtime.empty()) {  // the shim's line alone: runc never ran
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        }
        EXPECT_EQ(slurp(b.dir() / "config.json"), spec);
        EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs);
        EXPECT_EQ(host_mounts(), mounts);
    }
    static std::string cannot_enforce(const std::string& asked_by) {
        // The fake NVML's answer where the node was made without the limit.
        return fmt::format(
            "check share {}: this node cannot enforce a GPU share: the driver offers no "
            "per-cgroup memory limit (nvmlDeviceGetMemoryLimits_v1(/sys/fs/cgroup) returned 3: "
            "the driver does not offer it), and has no MPS (nvidia-cuda-mps-control); [policy] "
            "shares = soft starts it unenforced",
            asked_by);
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-share"};
    int count_ = 0;
};

TEST_F(ShareE2e, TheHookRefusesAShareItCannotEnforce) {
    for (const std::string share : {"GPUBIND_GPU_MEMORY=10GiB", "NVIDIA_GPU_MEMORY_LIMIT=10Gi",
                                    "CUDA_DEVICE_SM_LIMIT=50", "ALIYUN_COM_GPU_MEM_CONTAINER=10"}) {
        Bundle b = bundle("0", share, /*with_hook=*/true, /*hostdev=*/false);
        expect_refused(b, "", "gpubind-hook: " + cannot_enforce(share));
    }
}

TEST_F(ShareE2e, SoftStartsItWithTheWholeGpuAndAWarning) {
    node_->write_config("[policy]\nshares = \"soft\"\n");
    std::ofstream(node_->log(), std::ios::trunc).flush();
    Bundle b = bundle("0,1", "GPUBIND_GPU_MEMORY=10GiB");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 1}), "") << r.out;
    EXPECT_THAT(slurp(node_->log()),
                HasSubstr("GPUBIND_GPU_MEMORY=10GiB: the share is not enforced: the driver offers "
                          "no per-cgroup memory limit"));
    EXPECT_THAT(slurp(node_->log()), HasSubstr("; starting it anyway (shares = soft)"));
}

TEST_F(ShareE2e, ALimitAboveTheGpusMemoryIsRefusedEvenWhenSoft) {
    node_->write_config("[policy]\nshares = \"soft\"\n");
    Bundle b = bundle("1", "GPUBIND_GPU_MEMORY=48GiB", /*with_hook=*/true, /*hostdev=*/false);
    expect_refused(b, "",
                   fmt::format("gpubind-hook: check share GPUBIND_GPU_MEMORY=48GiB: a limit of 48 "
                               "GiB on GPU 1 ({}), which has 40 GiB",
                               m().gpus[1].uuid));
}

TEST_F(ShareE2e, AMalformedShareIsOneLine) {
    Bundle b = bundle("0", "GPUBIND_GPU_MEMORY=lots", /*with_hook=*/true, /*hostdev=*/false);
    expect_refused(b, "",
                   "gpubind-hook: read request " + (b.dir() / "config.json").string() +
                       ": GPUBIND_GPU_MEMORY=lots: not a size");
}

TEST_F(ShareE2e, TheShimRefusesBeforeRuncAndStartsWhenSoft) {
    use_shim();
    Bundle refused = bundle("0", "GPUBIND_GPU_COMPUTE=25", /*with_hook=*/false, /*hostdev=*/false);
    expect_refused(refused, runtime(),
                   "gpubind-runtime: " + cannot_enforce("GPUBIND_GPU_COMPUTE=25"));

    use_shim("[policy]\nshares = \"soft\"\n");
    Bundle soft = bundle("1", "GPUBIND_GPU_COMPUTE=25", /*with_hook=*/false);
    auto r = soft.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {1}), "") << r.out;
    EXPECT_THAT(slurp(node_->log()), HasSubstr("starting it anyway (shares = soft)"));
}

// A node whose driver offers the per-cgroup memory limit.
class MemoryLimitE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 2;
        spec.model = "NVIDIA A100-SXM4-40GB";
        spec.memory_limits = true;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-memlimit");
    }
    static void TearDownTestSuite() { node_.reset(); }
    static const sim::Manifest& m() { return node_->manifest(); }
    static std::string limits() { return slurp(node_->root() / "gpubind-fake-nvml/memory-limits"); }

    // A container given GPU `gpu` with `share`, the hook at createRuntime and
    // poststop, the fake driver's state where its fake CUDA reads it; it
    // prints its cgroup, the limits the driver holds, then allocates 80 % and
    // 120 % of 1 GiB (two processes).
    Bundle bundle(const std::string& gpu, const std::string& share, bool poststop = true) {
        Bundle b(work_.path() / ("b" + std::to_string(count_++)));
        b.hook(hook(), node_->config(), "createRuntime");
        if (poststop) b.hook(hook(), node_->config(), "poststop");
        b.bind(node_->root() / "gpubind-fake-nvml", "/gpubind-fake-nvml");
        b.env("NVIDIA_VISIBLE_DEVICES=" + gpu).env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        if (!share.empty()) b.env(share);
        b.command(
            fmt::format("echo \"cgroup $(grep '^0::' /proc/self/cgroup)\"; "
                        "cat /gpubind-fake-nvml/memory-limits; probe alloc {}; probe alloc {}",
                        kGiB * 8 / 10, kGiB * 12 / 10));
        return b;
    }

    static constexpr std::uint64_t kGiB = 1ull << 30;
    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-memlimit"};
    int count_ = 0;
};

TEST_F(MemoryLimitE2e, ALimitOf1GiBStopsAllocationsAboveItAndGoesWithTheContainer) {
    Bundle b = bundle("1", "GPUBIND_GPU_MEMORY=1GiB");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    // Set on the container's own cgroup, for its GPU only, as the kernel names it.
    const auto at = r.out.find("cgroup 0::/");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string cgroup = r.out.substr(at + 10, r.out.find('\n', at) - at - 10);
    EXPECT_THAT(r.out, HasSubstr(fmt::format("{} 0 {} {}\n", m().gpus[1].minor, kGiB, cgroup)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)))
        << "120 % of the share was allocated";
    // The container is gone, and its limit with it (poststop).
    EXPECT_EQ(limits(), "");
}

// The limit is the cgroup's, whoever the container's process is: uid 1000
// allocates no more than root would.
TEST_F(MemoryLimitE2e, ANonRootContainerUserIsHeldToTheSameLimit) {
    Bundle b = bundle("1", "GPUBIND_GPU_MEMORY=1GiB");
    b.spec()["process"]["user"] = {{"uid", 1000}, {"gid", 1000}};
    b.command(fmt::format("id -u; probe alloc {}; probe alloc {}", kGiB * 8 / 10, kGiB * 12 / 10));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, testing::StartsWith("1000\n"));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)));
    EXPECT_EQ(limits(), "");
}

// The device plugin's answer with volume mounts: GPU 1 and a share of 1 GiB
// by /dev/null mounts; the pod's own variable asks for 20 GiB. The driver
// holds 1 GiB for the container, and 1.2 GiB is out of its reach.
TEST_F(MemoryLimitE2e, APodsVariableDoesNotRaiseTheShareItsMountsCarry) {
    node_->write_config("[policy]\naccept-volume-mounts = true\n");
    Bundle b = bundle("void", "GPUBIND_GPU_MEMORY=20GiB");
    b.volume_device("1");
    b.bind("/dev/null", fmt::format("/var/run/gpubind/share/memory/{}", kGiB));
    auto r = b.run();
    node_->write_config();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, HasSubstr(fmt::format("{} 0 {} ", m().gpus[1].minor, kGiB)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)))
        << "the pod's variable raised its share";
    EXPECT_THAT(slurp(node_->log()), HasSubstr("GPUBIND_GPU_MEMORY=20GiB"))
        << "the variable not obeyed is not logged";
    EXPECT_EQ(limits(), "");
}

TEST_F(MemoryLimitE2e, WithoutAShareTheWholeGpuIsAllocatable) {
    Bundle b = bundle("0", "");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 12 / 10)));
    EXPECT_EQ(limits(), "");
}

TEST_F(MemoryLimitE2e, ALimitReadBackOtherwiseIsRefusedAndCleared) {
    const auto skew = node_->root() / "gpubind-fake-nvml/memory-limits-skewed";
    std::ofstream(skew).flush();
    Bundle b = bundle("1", "GPUBIND_GPU_MEMORY=1GiB");
    auto r = b.run();
    std::filesystem::remove(skew);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, Not(HasSubstr("alloc"))) << "the container ran";
    EXPECT_THAT(r.err, HasSubstr(fmt::format("GPU minor {} reads back a limit of {} bytes (soft "
                                             "0), not {} (soft 0)",
                                             m().gpus[1].minor, kGiB / 2, kGiB)));
    EXPECT_EQ(limits(), "");
}

TEST_F(MemoryLimitE2e, AStartThatFailsAfterSettingTheLimitClearsIt) {
    // No poststop hook (runc runs it for a container it could not start): the
    // start's own failure clears what it set.
    Bundle b = bundle("1", "GPUBIND_GPU_MEMORY=1GiB", /*poststop=*/false);
    // A directory where the driver's link goes: the start fails after the limit was set.
    std::filesystem::create_directories(b.rootfs() / "usr/lib/x86_64-linux-gnu/libcuda.so.1/x");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, Not(HasSubstr("alloc"))) << "the container ran";
    EXPECT_THAT(r.err, HasSubstr("libcuda.so.1: is a directory where the driver's link goes"))
        << "it failed another way";
    EXPECT_EQ(limits(), "");
}

// Through gpubind-runtime: its finish hook sets the limit, and the poststop
// hook it adds for a share (only then) clears it when the container goes.
TEST_F(MemoryLimitE2e, ThroughTheShimTheShareHoldsAndGoesWithTheContainer) {
    node_->write_config(
        fmt::format("[runtime]\nruntimes = [\"{}\"]\n", env_or("GPUBIND_RUNC", "runc")));
    ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    Bundle b(work_.path() / ("b" + std::to_string(count_++)));
    b.bind(node_->root() / "gpubind-fake-nvml", "/gpubind-fake-nvml");
    b.env("NVIDIA_VISIBLE_DEVICES=1").env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
    b.env("GPUBIND_GPU_MEMORY=1GiB");
    b.command(fmt::format("cat /gpubind-fake-nvml/memory-limits; probe alloc {}; probe alloc {}",
                          kGiB * 8 / 10, kGiB * 12 / 10));
    auto r = b.run_with(runtime());
    const std::string spec = slurp(b.dir() / "config.json");
    // The same container without a share: no poststop hook in its spec.
    Bundle plain(work_.path() / ("b" + std::to_string(count_++)));
    plain.env("NVIDIA_VISIBLE_DEVICES=1").command("true");
    auto r2 = plain.run_with(runtime());
    node_->write_config();
    ::unsetenv("GPUBIND_CONFIG");
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, HasSubstr(fmt::format("{} 0 {} /", m().gpus[1].minor, kGiB)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)));
    EXPECT_EQ(limits(), "") << "the limit outlived the container";
    EXPECT_THAT(spec, HasSubstr("\"poststop\""));
    ASSERT_EQ(r2.exit_code, 0) << r2.err;
    EXPECT_THAT(slurp(plain.dir() / "config.json"), Not(HasSubstr("poststop")));
}

// Through CDI (gpubind-runtime applies a cdi.k8s.io annotation; the spec's
// hooks run gpubind-hook's "cdi" stage at createRuntime and poststop): the
// share holds as through the hook, and goes with the container.
TEST_F(MemoryLimitE2e, ThroughCdiTheShareHoldsAndGoesWithTheContainer) {
    const auto cdi_dir = node_->cdi_dir().string();
    node_->write_config(fmt::format(
        "[runtime]\nruntimes = [\"{}\"]\n[cdi]\nhook = \"{}\"\ndir = \"{}\"\nspec-dirs = "
        "[\"{}\"]\n",
        env_or("GPUBIND_RUNC", "runc"), hook(), cdi_dir, cdi_dir));
    ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    ASSERT_EQ(
        run_command({cli(), "cdi", "refresh", "--config", node_->config().string()}).exit_code, 0);
    Bundle b(work_.path() / ("b" + std::to_string(count_++)));
    b.bind(node_->root() / "gpubind-fake-nvml", "/gpubind-fake-nvml");
    b.env("GPUBIND_GPU_MEMORY=1GiB");
    b.spec()["annotations"] = {{"cdi.k8s.io/share", "nvidia.com/gpu=1"}};
    b.command(fmt::format("cat /gpubind-fake-nvml/memory-limits; probe alloc {}; probe alloc {}",
                          kGiB * 8 / 10, kGiB * 12 / 10));
    auto r = b.run_with(runtime());
    node_->write_config();
    ::unsetenv("GPUBIND_CONFIG");
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, HasSubstr(fmt::format("{} 0 {} /", m().gpus[1].minor, kGiB)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)))
        << "120 % of the share was allocated through CDI";
    EXPECT_EQ(limits(), "") << "the limit outlived the container";
}

TEST_F(MemoryLimitE2e, AComputeShareIsStillRefused) {
    Bundle b = bundle("0", "GPUBIND_GPU_COMPUTE=50");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("holds memory only, and a compute share needs MPS"));
    EXPECT_EQ(limits(), "");
}

// A node whose driver has MPS but no per-cgroup memory limit (gpubind
// simulate --mps): GPU 0's control daemon (the fake one) runs under the
// config's [mps] root with a ceiling of 4 GiB, GPU 1's does not.
class MpsE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 2;
        spec.model = "NVIDIA A100-SXM4-40GB";
        spec.mps = true;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-mps");
        const auto gpu = mps_root() / m().gpus[0].uuid;
        for (const char* d : {"pipe", "log", "shm"}) {
            std::filesystem::create_directories(gpu / d);
            ::chmod((gpu / d).c_str(), 0755);
        }
        for (auto p = gpu; p != node_->root(); p = p.parent_path()) ::chmod(p.c_str(), 0755);
        ::chmod(node_->root().c_str(), 0755);
        const std::string env = "CUDA_MPS_PIPE_DIRECTORY=" + (gpu / "pipe").string();
        const std::string control = (node_->root() / "usr/bin/nvidia-cuda-mps-control").string();
        auto r = run_command({"/usr/bin/env", "-i", env, control, "-d"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        r = run_command(
            {"/bin/sh", "-c",
             fmt::format("echo 'set_default_device_pinned_mem_limit 0 4G' | env -i {} {}", env,
                         control)});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        std::ofstream(gpu / "limits") << "memory " << 4 * kGiB << "\ncompute 100\n";
    }
    static void TearDownTestSuite() {
        const auto gpu = mps_root() / m().gpus[0].uuid;
        run_command({"/bin/sh", "-c",
                     fmt::format("echo quit | env -i CUDA_MPS_PIPE_DIRECTORY={} {}",
                                 (gpu / "pipe").string(),
                                 (node_->root() / "usr/bin/nvidia-cuda-mps-control").string())});
        node_.reset();
    }
    void SetUp() override {
        node_->write_config(fmt::format("[runtime]\nruntimes = [\"{}\"]\n[mps]\nroot = \"{}\"\n",
                                        env_or("GPUBIND_RUNC", "runc"), mps_root().string()));
        ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    }
    void TearDown() override {
        node_->write_config();
        ::unsetenv("GPUBIND_CONFIG");
    }
    static const sim::Manifest& m() { return node_->manifest(); }
    static std::filesystem::path mps_root() { return node_->root() / "mps"; }

    // A container given GPU `gpu` with `share`, through gpubind-runtime (which
    // sets the client's variables), that allocates 80 % and 120 % of `share_bytes`.
    Bundle bundle(const std::string& gpu, const std::string& share, std::uint64_t share_bytes) {
        Bundle b(work_.path() / ("b" + std::to_string(count_++)));
        b.env("NVIDIA_VISIBLE_DEVICES=" + gpu).env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        b.env(share);
        b.command(
            fmt::format("id -u; env | grep ^CUDA_MPS_ | sort; ls /tmp/nvidia-mps; probe alloc {}; "
                        "probe alloc {}",
                        share_bytes * 8 / 10, share_bytes * 12 / 10));
        return b;
    }

    static constexpr std::uint64_t kGiB = 1ull << 30;
    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-mps"};
    int count_ = 0;
};

TEST_F(MpsE2e, AShareBelowTheCeilingHoldsForRootAndANonRootUser) {
    for (unsigned uid : {0u, 1000u}) {
        SCOPED_TRACE(uid);
        Bundle b = bundle("0", "GPUBIND_GPU_MEMORY=1GiB", kGiB);
        b.spec()["process"]["user"] = {{"uid", uid}, {"gid", uid}};
        auto r = b.run_with(runtime());
        ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
        EXPECT_THAT(r.out, HasSubstr(fmt::format("{}\n", uid)));
        EXPECT_THAT(r.out, HasSubstr("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M\n"));
        EXPECT_THAT(r.out, HasSubstr("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\n"));
        EXPECT_THAT(r.out, HasSubstr("control\n")) << "GPU 0's pipe directory is not there";
        EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", kGiB * 8 / 10)));
        EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", kGiB * 12 / 10)))
            << "120 % of the share was allocated";
    }
}

TEST_F(MpsE2e, TheDaemonsCeilingHoldsWhateverTheClientsVariableSays) {
    // A client raising its own variable stays under the daemon's 4 GiB.
    Bundle b = bundle("0", "GPUBIND_GPU_MEMORY=4GiB", 4 * kGiB);
    b.command(fmt::format("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40G probe alloc {}; probe alloc {}",
                          4 * kGiB * 8 / 10, 4 * kGiB * 12 / 10));
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", 4 * kGiB * 8 / 10)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", 4 * kGiB * 12 / 10)));
}

// Through the hook alone, run after the process's environment is made, the
// share's variables cannot be set: the daemon's ceiling alone holds, and the
// log says so.
TEST_F(MpsE2e, ThroughTheHookAloneTheCeilingHoldsAndAWarningSaysWhy) {
    std::ofstream(node_->log(), std::ios::trunc).flush();
    Bundle b = bundle("0", "GPUBIND_GPU_MEMORY=1GiB", kGiB);
    b.hook(hook(), node_->config(), "createRuntime");
    b.command(fmt::format("ls /tmp/nvidia-mps; probe alloc {}; probe alloc {}", 2 * kGiB,
                          4 * kGiB * 12 / 10));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, HasSubstr("control\n"));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=0\n", 2 * kGiB)));
    EXPECT_THAT(r.out, HasSubstr(fmt::format("alloc {} result=2\n", 4 * kGiB * 12 / 10)));
    EXPECT_THAT(slurp(node_->log()),
                HasSubstr("GPUBIND_GPU_MEMORY=1GiB: the container's own share is not in its "
                          "environment (only gpubind-runtime sets CUDA_MPS_* there): the GPU's "
                          "MPS ceiling alone holds"));
}

TEST_F(MpsE2e, RefusedWithOneLineAboveTheCeilingOrWithoutTheDaemon) {
    for (const auto& [gpu, share, message] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"1", "GPUBIND_GPU_MEMORY=1GiB",
              fmt::format("the MPS control daemon for {} is not running: start `gpubind mps`",
                          m().gpus[1].uuid)},
             {"0", "GPUBIND_GPU_MEMORY=8GiB",
              fmt::format("a share of 8 GiB is above the MPS ceiling of 4 GiB on {}",
                          m().gpus[0].uuid)},
             {"0,1", "GPUBIND_GPU_MEMORY=1GiB",
              "an MPS share is of exactly one GPU, and the container is given 2"}}) {
        Bundle b = bundle(gpu, share, kGiB);
        b.write_spec();
        auto r = b.run_with(runtime());
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("alloc"))) << "the container ran";
        EXPECT_THAT(r.err, HasSubstr("gpubind-runtime: check share " + share + ": " + message));
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
}

// `gpubind mps` on the simulated node: a daemon per GPU with the config's
// ceilings, a killed one started again, SIGTERM quits them all.
TEST_F(MpsE2e, GpubindMpsSupervisesADaemonPerGpu) {
    const auto root = node_->root() / "mps-supervised";
    node_->write_config(
        fmt::format("[mps]\nroot = \"{}\"\nmemory = \"10G\"\ncompute = 50\n", root.string()));
    const std::string config = node_->config().string();
    const pid_t mps = ::fork();
    ASSERT_GE(mps, 0);
    const std::string said = (root.parent_path() / "mps-supervised.err").string();
    if (mps == 0) {
        const int err = ::open(said.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (err < 0 || ::dup2(err, 2) < 0) ::_exit(126);
        ::execl(cli().c_str(), "gpubind", "mps", "--config", config.c_str(), nullptr);
        ::_exit(127);
    }
    const std::string control = (node_->root() / "usr/bin/nvidia-cuda-mps-control").string();
    auto ask = [&](const std::string& uuid, const std::string& command) {
        return run_command({"/bin/sh", "-c",
                            fmt::format("echo '{}' | env -i CUDA_MPS_PIPE_DIRECTORY={} {}", command,
                                        (root / uuid / "pipe").string(), control)})
            .out;
    };
    auto wait_for = [](const std::function<bool()>& ready) {
        for (int i = 0; i < 500; ++i) {
            if (ready()) return true;
            ::usleep(20000);
        }
        return false;
    };
    // Each GPU's compute mode as the fake NVML last had it set (none: default, 0).
    auto mode_of = [&](unsigned minor) {
        std::istringstream in(slurp(node_->root() / "gpubind-fake-nvml/compute-mode"));
        unsigned m = 0, mode = 0, found = 0;
        while (in >> m >> mode)
            if (m == minor) found = mode;
        return found;
    };
    for (const auto& gpu : m().gpus) {
        SCOPED_TRACE(gpu.uuid);
        const auto limits = root / gpu.uuid / "limits";
        ASSERT_TRUE(wait_for([&] { return std::filesystem::exists(limits); }));
        EXPECT_EQ(mode_of(gpu.minor), 3u) << "not exclusive-process";
        EXPECT_EQ(slurp(limits), fmt::format("memory {}\ncompute 50\n", 10 * kGiB));
        EXPECT_EQ(ask(gpu.uuid, "get_default_device_pinned_mem_limit 0"), "10G\n");
        EXPECT_EQ(ask(gpu.uuid, "get_default_active_thread_percentage"), "50.0\n");
        struct stat st {};
        ASSERT_EQ(::stat((root / gpu.uuid / "pipe").c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0755u);
        EXPECT_EQ(st.st_uid, 0u);
    }
    // A daemon killed is started again, with its ceilings.
    const auto pidfile = root / m().gpus[0].uuid / "pipe/nvidia-cuda-mps-control.pid";
    const std::string first = slurp(pidfile);
    ASSERT_EQ(::kill(std::stoi(first), SIGKILL), 0);
    EXPECT_TRUE(wait_for([&] {
        return std::filesystem::exists(pidfile) && slurp(pidfile) != first &&
               std::filesystem::exists(root / m().gpus[0].uuid / "limits");
    })) << slurp(said);
    EXPECT_EQ(ask(m().gpus[0].uuid, "get_default_device_pinned_mem_limit 0"), "10G\n");
    // SIGTERM: each daemon quits, the ceilings go, gpubind mps exits 0.
    ASSERT_EQ(::kill(mps, SIGTERM), 0);
    int status = -1;
    ASSERT_EQ(::waitpid(mps, &status, 0), mps);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    for (const auto& gpu : m().gpus) {
        EXPECT_FALSE(std::filesystem::exists(root / gpu.uuid / "pipe/control"));
        EXPECT_FALSE(std::filesystem::exists(root / gpu.uuid / "limits"));
        EXPECT_EQ(mode_of(gpu.minor), 0u) << "the compute mode was not put back";
    }
    EXPECT_THAT(slurp(said), HasSubstr("killed by signal 9; starting it again in 1 s"));
}

}  // namespace
}  // namespace gpubind::test
