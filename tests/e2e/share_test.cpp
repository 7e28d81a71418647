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
#include <algorithm>
#include <fstream>

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
            "the driver does not offer it), and gpubind applies no MPS yet; [policy] shares = "
            "soft starts it unenforced",
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

TEST_F(MemoryLimitE2e, AComputeShareIsStillRefused) {
    Bundle b = bundle("0", "GPUBIND_GPU_COMPUTE=50");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("holds memory only, and a compute share needs MPS"));
    EXPECT_EQ(limits(), "");
}

}  // namespace
}  // namespace gpubind::test
