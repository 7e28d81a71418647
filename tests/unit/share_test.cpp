// The share of a GPU a container asks for (issue 48): read from its
// environment by gpubind's own variables and the hints of NVIDIA's hook, HAMi
// and gpushare, refused when malformed or contradictory, and checked against
// the GPUs it is handed and what the node can enforce.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/inject.hpp"
#include "gpubind/decide/mps.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/start/share_limit.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/mount_flags.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using config::Config;
using config::Policy;
using config::SharesPolicy;
using decide::check_share;
using decide::read_request;
using decide::Request;
using decide::share_enforcement;
using decide::ShareRequest;
using decide::size_text;
using nlohmann::json;
using node::Gpu;
using node::MigDevice;
using node::Node;
using node::Selection;
using test::error_of;
using ::testing::HasSubstr;
using util::Error;
using util::ErrorKind;
namespace oci = decide::oci;

constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

// A privileged container asking for GPUs 0,1 by variable, with `env` more.
oci::Spec spec_with(const std::vector<std::string>& env) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", json::array({"NVIDIA_VISIBLE_DEVICES=0,1"})}}},
                {"mounts", json::array()}};
    for (const auto& e : env) doc["process"]["env"].push_back(e);
    doc["process"]["capabilities"]["bounding"] = {"CAP_SYS_ADMIN"};
    return oci::parse_spec(doc.dump(), "/bundles/c1");
}

ShareRequest share_of(const std::vector<std::string>& env) {
    return read_request(spec_with(env), Policy{}).share;
}

std::string malformed(const std::vector<std::string>& env) {
    const Error e = error_of([&] { share_of(env); });
    EXPECT_EQ(e.kind(), ErrorKind::Invalid) << e.what();
    return e.what();
}

TEST(ReadShare, NoVariableAsksNothingAndNeedsNoNvml) {
    const Request r = read_request(spec_with({"PATH=/bin", "CUDA_VISIBLE_DEVICES=0"}), Policy{});
    EXPECT_FALSE(r.share.asked());
    EXPECT_EQ(r.share, ShareRequest{});
    EXPECT_FALSE(decide::node_needs(r, true).need_nvml);
    // Empty values ask nothing either.
    EXPECT_FALSE(share_of({"GPUBIND_GPU_MEMORY=", "NVIDIA_GPU_MEMORY_LIMIT= "}).asked());
}

TEST(ReadShare, EachVariableInItsOwnUnit) {
    struct Case {
        std::string env;
        std::uint64_t memory;
        unsigned compute;
    };
    for (const Case& c : std::vector<Case>{
             {"GPUBIND_GPU_MEMORY=10GiB", 10 * kGiB, 0},
             {"GPUBIND_GPU_MEMORY=10G", 10 * kGiB, 0},
             {"GPUBIND_GPU_MEMORY=10gi", 10 * kGiB, 0},
             {"GPUBIND_GPU_MEMORY=1536", 1536 * kMiB, 0},  // bare: MiB
             {"GPUBIND_GPU_MEMORY=512 MiB", 512 * kMiB, 0},
             {"NVIDIA_GPU_MEMORY_LIMIT=4096", 4096, 0},  // bare: bytes
             {"NVIDIA_GPU_MEMORY_LIMITS=2Gi", 2 * kGiB, 0},
             {"CUDA_DEVICE_MEMORY_LIMIT=1000m", 1000 * kMiB, 0},
             {"ALIYUN_COM_GPU_MEM_CONTAINER=3", 3 * kGiB, 0},  // bare: GiB
             {"GPUBIND_GPU_COMPUTE=50", 0, 50},
             {"GPUBIND_GPU_COMPUTE=25%", 0, 25},
             {"CUDA_DEVICE_SM_LIMIT=100", 0, 100},
         }) {
        const ShareRequest s = share_of({c.env});
        EXPECT_TRUE(s.asked()) << c.env;
        EXPECT_EQ(s.memory, c.memory) << c.env;
        EXPECT_EQ(s.compute, c.compute) << c.env;
        EXPECT_EQ(s.asked_by, c.env) << c.env;
    }
}

TEST(ReadShare, PerDeviceLimitsRequestsAndTheGpushareIndex) {
    const ShareRequest hami =
        share_of({"CUDA_DEVICE_MEMORY_LIMIT_1=2g", "CUDA_DEVICE_MEMORY_LIMIT_0=1g"});
    EXPECT_EQ(hami.memory, 0u);
    EXPECT_EQ(hami.device_memory, (std::map<unsigned, std::uint64_t>{{0, kGiB}, {1, 2 * kGiB}}));
    EXPECT_TRUE(hami.asked());
    EXPECT_EQ(hami.asked_by, "CUDA_DEVICE_MEMORY_LIMIT_1=2g");

    const ShareRequest nvidia =
        share_of({"NVIDIA_GPU_MEMORY_REQUEST=4Gi", "NVIDIA_GPU_MEMORY_LIMIT=8Gi"});
    EXPECT_EQ(nvidia.memory, 8 * kGiB);
    EXPECT_EQ(nvidia.memory_request, 4 * kGiB);
    EXPECT_EQ(nvidia.asked_by, "NVIDIA_GPU_MEMORY_LIMIT=8Gi");
    // A request alone asks for a share of that much.
    const ShareRequest request = share_of({"NVIDIA_GPU_MEMORY_REQUEST=6Gi"});
    EXPECT_EQ(request.memory, 6 * kGiB);
    EXPECT_EQ(request.asked_by, "NVIDIA_GPU_MEMORY_REQUEST=6Gi");

    const ShareRequest gpushare =
        share_of({"ALIYUN_COM_GPU_MEM_IDX=1", "ALIYUN_COM_GPU_MEM_CONTAINER=5"});
    EXPECT_EQ(gpushare.memory, 5 * kGiB);
    EXPECT_EQ(gpushare.gpu, 1u);
    EXPECT_EQ(gpushare.asked_by, "ALIYUN_COM_GPU_MEM_CONTAINER=5");
    // The last value of a variable counts, as the container's process sees it.
    EXPECT_EQ(share_of({"GPUBIND_GPU_MEMORY=1G", "GPUBIND_GPU_MEMORY=2G"}).memory, 2 * kGiB);
    EXPECT_FALSE(share_of({"GPUBIND_GPU_MEMORY=1G", "GPUBIND_GPU_MEMORY="}).asked());
    // Agreeing hints are one share.
    const ShareRequest agreed = share_of(
        {"GPUBIND_GPU_MEMORY=10GiB", "CUDA_DEVICE_MEMORY_LIMIT=10240m",
         "NVIDIA_GPU_MEMORY_LIMIT=10Gi", "GPUBIND_GPU_COMPUTE=30", "CUDA_DEVICE_SM_LIMIT=30"});
    EXPECT_EQ(agreed.memory, 10 * kGiB);
    EXPECT_EQ(agreed.compute, 30u);
    EXPECT_EQ(agreed.asked_by, "GPUBIND_GPU_MEMORY=10GiB");
}

TEST(ReadShare, MalformedOrContradictoryIsOneLine) {
    EXPECT_EQ(malformed({"GPUBIND_GPU_MEMORY=lots"}),
              "read request /bundles/c1/config.json: GPUBIND_GPU_MEMORY=lots: not a size (a "
              "number with B, K, M, G or T: \"10GiB\", \"512Mi\")");
    for (const char* bad :
         {"GPUBIND_GPU_MEMORY=10PB", "GPUBIND_GPU_MEMORY=-1G", "GPUBIND_GPU_MEMORY=1.5G",
          "GPUBIND_GPU_MEMORY=G", "CUDA_DEVICE_MEMORY_LIMIT=10gig", "NVIDIA_GPU_MEMORY_LIMIT=0x10"})
        EXPECT_THAT(malformed({bad}), HasSubstr(std::string(bad) + ": not a size")) << bad;
    EXPECT_THAT(malformed({"GPUBIND_GPU_MEMORY=0"}), HasSubstr("a share of no memory"));
    EXPECT_THAT(malformed({"GPUBIND_GPU_MEMORY=99999999999999999999T"}), HasSubstr("not a size"));
    EXPECT_THAT(malformed({"GPUBIND_GPU_MEMORY=18014398509481984T"}),
                HasSubstr("larger than any GPU's memory"));
    for (const char* bad : {"GPUBIND_GPU_COMPUTE=0", "GPUBIND_GPU_COMPUTE=101",
                            "CUDA_DEVICE_SM_LIMIT=half", "GPUBIND_GPU_COMPUTE=-5"})
        EXPECT_THAT(malformed({bad}), HasSubstr(std::string(bad) + ": not a percent of a GPU"));
    EXPECT_THAT(malformed({"ALIYUN_COM_GPU_MEM_CONTAINER=1", "ALIYUN_COM_GPU_MEM_IDX=first"}),
                HasSubstr("ALIYUN_COM_GPU_MEM_IDX=first: not a GPU index"));

    EXPECT_EQ(malformed({"GPUBIND_GPU_MEMORY=10GiB", "NVIDIA_GPU_MEMORY_LIMIT=20Gi"}),
              "read request /bundles/c1/config.json: GPUBIND_GPU_MEMORY=10GiB and "
              "NVIDIA_GPU_MEMORY_LIMIT=20Gi ask for different shares (10 GiB and 20 GiB)");
    EXPECT_THAT(malformed({"GPUBIND_GPU_COMPUTE=50", "CUDA_DEVICE_SM_LIMIT=40"}),
                HasSubstr("ask for different shares (50% and 40%)"));
    EXPECT_THAT(malformed({"NVIDIA_GPU_MEMORY_LIMIT=4Gi", "NVIDIA_GPU_MEMORY_REQUEST=8Gi"}),
                HasSubstr("NVIDIA_GPU_MEMORY_REQUEST=8Gi is above the limit "
                          "NVIDIA_GPU_MEMORY_LIMIT=4Gi"));
    EXPECT_THAT(malformed({"ALIYUN_COM_GPU_MEM_IDX=0"}),
                HasSubstr("ALIYUN_COM_GPU_MEM_IDX=0 names a GPU for a share, but no variable "
                          "asks for one"));
}

// Two 16 GiB GPUs as NVML reports them, and one whose memory NVML did not say.
Node node_of_three() {
    Node node;
    for (unsigned i = 0; i < 3; ++i) {
        Gpu g;
        g.index = g.minor = i;
        g.uuid = fmt::format("GPU-{}", i);
        g.memory = i < 2 ? 16 * kGiB : 0;
        node.gpus.push_back(std::move(g));
    }
    return node;
}

Selection handed(const Node& node, const std::vector<unsigned>& gpus) {
    Selection s;
    for (unsigned i : gpus) s.gpus.push_back(&node.gpus[i]);
    return s;
}

Config soft() {
    Config c;
    c.policy.shares = SharesPolicy::Soft;
    return c;
}

std::string refusal(const ShareRequest& share, const Node& node, const Selection& s,
                    const Config& config = {}) {
    const Error e = error_of([&] { check_share(share, node, s, config); });
    EXPECT_EQ(e.kind(), ErrorKind::Refused) << e.what();
    return e.what();
}

TEST(CheckShare, NoShareIsNeverChecked) {
    const Node node = node_of_three();
    EXPECT_NO_THROW(check_share(ShareRequest{}, node, handed(node, {0, 1, 2}), Config{}));
}

TEST(CheckShare, ThisNodeEnforcesNoShareSoStrictRefusesAndSoftStarts) {
    const Node node = node_of_three();
    const ShareRequest share = share_of({"GPUBIND_GPU_MEMORY=4GiB"});
    EXPECT_EQ(refusal(share, node, handed(node, {0})),
              "check share GPUBIND_GPU_MEMORY=4GiB: this node cannot enforce a GPU share: "
              "the driver offers no per-cgroup memory limit (NVML was not asked), and has no "
              "MPS (nvidia-cuda-mps-control); [policy] shares = soft starts it unenforced");
    EXPECT_NO_THROW(check_share(share, node, handed(node, {0, 1}), soft()));
    // A GPU whose memory is unknown is not judged by it.
    EXPECT_NO_THROW(
        check_share(share_of({"GPUBIND_GPU_MEMORY=64GiB"}), node, handed(node, {2}), soft()));
}

TEST(CheckShare, WhatNoMechanismCouldGiveIsRefusedEvenWhenSoft) {
    Node node = node_of_three();
    EXPECT_EQ(refusal(share_of({"GPUBIND_GPU_MEMORY=20GiB"}), node, handed(node, {0, 1}), soft()),
              "check share GPUBIND_GPU_MEMORY=20GiB: a limit of 20 GiB on GPU 0 (GPU-0), which "
              "has 16 GiB");
    EXPECT_THAT(
        refusal(share_of({"CUDA_DEVICE_MEMORY_LIMIT_0=1g", "CUDA_DEVICE_MEMORY_LIMIT_1=17g"}), node,
                handed(node, {0, 1}), soft()),
        HasSubstr("a limit of 17 GiB on GPU 1 (GPU-1), which has 16 GiB"));
    EXPECT_THAT(
        refusal(share_of({"CUDA_DEVICE_MEMORY_LIMIT_2=1g"}), node, handed(node, {0, 1}), soft()),
        HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_2 names the container's GPU 2, but it is "
                  "given 2"));
    EXPECT_THAT(refusal(share_of({"ALIYUN_COM_GPU_MEM_CONTAINER=2", "ALIYUN_COM_GPU_MEM_IDX=2"}),
                        node, handed(node, {0}), soft()),
                HasSubstr("the share is on GPU 2, which the container is not given"));

    node.gpus[1].mig.push_back(MigDevice{});
    node.gpus[1].mig.back().gpu_index = 1;
    node.gpus[1].mig.back().uuid = "MIG-1";
    Selection mig;
    mig.migs.push_back(&node.gpus[1].mig.back());
    EXPECT_THAT(refusal(share_of({"GPUBIND_GPU_COMPUTE=50"}), node, mig, soft()),
                HasSubstr("a share of MIG device MIG-1: a MIG device is already a fixed part of "
                          "its GPU"));
}

TEST(CheckShare, TheDriversMemoryLimitEnforcesMemoryButNoComputeShare) {
    Node node = node_of_three();
    node.memory_limits_why = "this NVML has no nvmlDeviceSetMemoryLimits_v1";
    EXPECT_EQ(share_enforcement(node).by, "");
    EXPECT_EQ(share_enforcement(node).lacks,
              "the driver offers no per-cgroup memory limit (this NVML has no "
              "nvmlDeviceSetMemoryLimits_v1), and has no MPS (nvidia-cuda-mps-control)");
    EXPECT_THAT(refusal(share_of({"GPUBIND_GPU_MEMORY=4GiB"}), node, handed(node, {0})),
                HasSubstr("this NVML has no nvmlDeviceSetMemoryLimits_v1"));

    node.memory_limits = true;
    node.memory_limits_why.clear();
    EXPECT_EQ(share_enforcement(node).by, "the driver's per-cgroup memory limit");
    EXPECT_EQ(share_enforcement(node).lacks, "");
    EXPECT_NO_THROW(
        check_share(share_of({"GPUBIND_GPU_MEMORY=4GiB"}), node, handed(node, {0, 1}), Config{}));
    EXPECT_EQ(refusal(share_of({"GPUBIND_GPU_COMPUTE=50"}), node, handed(node, {0})),
              "check share GPUBIND_GPU_COMPUTE=50: this node cannot enforce a GPU share: the "
              "driver's per-cgroup memory limit holds memory only, and a compute share needs MPS, "
              "which gpubind uses only where the driver offers no such limit; [policy] shares = "
              "soft starts it unenforced");
    // A limit above the GPU's memory stays refused where the driver would take it.
    EXPECT_THAT(refusal(share_of({"GPUBIND_GPU_MEMORY=20GiB"}), node, handed(node, {0})),
                HasSubstr("a limit of 20 GiB on GPU 0 (GPU-0), which has 16 GiB"));
}

// node_of_three whose driver has MPS but no per-cgroup memory limit.
Node mps_node() {
    Node node = node_of_three();
    node::DriverFile control;
    control.kind = node::FileKind::Binary;
    control.name = "nvidia-cuda-mps-control";
    control.host_path = control.real_path = "/usr/bin/nvidia-cuda-mps-control";
    node.files.push_back(control);
    return node;
}

decide::MpsDaemon daemon(std::uint64_t memory, unsigned compute) {
    return {"/run/gpubind/mps/GPU-0", true, memory, compute};
}

std::string mps_refusal(const ShareRequest& share, const Selection& s, const decide::MpsDaemon& d) {
    const Error e = error_of([&] { decide::plan_mps(share, s, d); });
    EXPECT_EQ(e.kind(), ErrorKind::Refused) << e.what();
    return e.what();
}

TEST(MpsShare, TheMechanismWhereTheDriverHasMpsButNoLimit) {
    Node node = mps_node();
    EXPECT_EQ(share_enforcement(node).by, decide::kMps);
    EXPECT_EQ(share_enforcement(node).lacks, "");
    // Memory and compute shares both pass the node's check; MIG stays refused.
    EXPECT_NO_THROW(check_share(share_of({"GPUBIND_GPU_MEMORY=4GiB", "GPUBIND_GPU_COMPUTE=25"}),
                                node, handed(node, {0}), Config{}));
    node.gpus[1].mig.push_back(MigDevice{});
    node.gpus[1].mig.back().gpu_index = 1;
    node.gpus[1].mig.back().uuid = "MIG-1";
    Selection mig;
    mig.migs.push_back(&node.gpus[1].mig.back());
    EXPECT_THAT(refusal(share_of({"GPUBIND_GPU_MEMORY=1GiB"}), node, mig),
                HasSubstr("a share of MIG device MIG-1"));
    // The driver's limit, where there is one, comes first.
    node.memory_limits = true;
    EXPECT_EQ(share_enforcement(node).by, decide::kDriverMemoryLimit);
}

TEST(MpsShare, ThePlanMountsOnlyThatGpusPipeAndShmAndSetsTheShare) {
    const Node node = mps_node();
    const decide::MpsPlan p =
        decide::plan_mps(share_of({"GPUBIND_GPU_MEMORY=4GiB", "GPUBIND_GPU_COMPUTE=25"}),
                         handed(node, {0}), daemon(8 * kGiB, 50));
    ASSERT_EQ(p.mounts.size(), 2u);
    EXPECT_EQ(p.mounts[0].source, "/run/gpubind/mps/GPU-0/pipe");
    EXPECT_EQ(p.mounts[0].target, "/tmp/nvidia-mps");
    EXPECT_TRUE(p.mounts[0].directory);
    EXPECT_EQ(p.mounts[1].source, "/run/gpubind/mps/GPU-0/shm");
    EXPECT_EQ(p.mounts[1].target, "/dev/shm");
    for (const auto& m : p.mounts)
        EXPECT_EQ(m.flags, util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec);
    EXPECT_THAT(p.env, ::testing::ElementsAre("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
                                              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"));
    // The node's own /tmp/nvidia-mps is replaced, not mounted beside it.
    decide::Plan plan;
    plan.mounts.push_back({"/tmp/nvidia-mps", "/tmp/nvidia-mps", true, 0, "compute IPC"});
    decide::add_mps(plan, p);
    ASSERT_EQ(plan.mounts.size(), 2u);
    EXPECT_EQ(plan.mounts[0].source, "/run/gpubind/mps/GPU-0/pipe");
    EXPECT_EQ(plan.env, p.env);
    // A whole-GPU ceiling (0) takes a share up to the GPU's memory.
    EXPECT_NO_THROW(decide::plan_mps(share_of({"GPUBIND_GPU_MEMORY=16GiB"}), handed(node, {0}),
                                     daemon(0, 100)));
}

TEST(MpsShare, RefusedWithoutItsDaemonAboveItsCeilingOrOnTwoGpus) {
    const Node node = mps_node();
    const ShareRequest four = share_of({"GPUBIND_GPU_MEMORY=4GiB"});
    EXPECT_EQ(mps_refusal(four, handed(node, {0}), decide::MpsDaemon{}),
              "check share GPUBIND_GPU_MEMORY=4GiB: the MPS control daemon for GPU-0 is not "
              "running: start `gpubind mps`");
    EXPECT_EQ(mps_refusal(four, handed(node, {0}), daemon(2 * kGiB, 100)),
              "check share GPUBIND_GPU_MEMORY=4GiB: a share of 4 GiB is above the MPS ceiling of "
              "2 GiB on GPU-0");
    EXPECT_EQ(mps_refusal(share_of({"GPUBIND_GPU_COMPUTE=60"}), handed(node, {0}), daemon(0, 50)),
              "check share GPUBIND_GPU_COMPUTE=60: a compute share of 60% is above the MPS "
              "ceiling of 50% on GPU-0");
    EXPECT_EQ(mps_refusal(four, handed(node, {0, 1}), daemon(0, 100)),
              "check share GPUBIND_GPU_MEMORY=4GiB: an MPS share is of exactly one GPU, and the "
              "container is given 2");
}

TEST(MpsDaemonFiles, ReadWithoutFollowingLinksOnlyWhenRootsOwn) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (root-owned files)";
    test::TempDir tmp;
    const auto root = tmp.path() / "mps";
    const auto gpu = root / "GPU-0";
    EXPECT_FALSE(decide::read_mps_daemon(root, "GPU-0").running);  // nothing there
    std::filesystem::create_directories(gpu / "pipe");
    EXPECT_FALSE(decide::read_mps_daemon(root, "GPU-0").running);  // no socket
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", (gpu / "pipe/control").c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
    EXPECT_FALSE(decide::read_mps_daemon(root, "GPU-0").running);  // no limits yet
    std::ofstream(gpu / "limits") << "memory 8589934592\ncompute 50\n";
    const decide::MpsDaemon d = decide::read_mps_daemon(root, "GPU-0");
    EXPECT_TRUE(d.running);
    EXPECT_EQ(d.memory, 8 * kGiB);
    EXPECT_EQ(d.compute, 50u);
    EXPECT_EQ(d.dir, gpu.string());
    // Not root's, or a link anywhere: refused.
    ASSERT_EQ(::chown((gpu / "limits").c_str(), 1000, 1000), 0);
    EXPECT_THAT(error_of([&] { decide::read_mps_daemon(root, "GPU-0"); }).what(),
                HasSubstr("limits: not a regular file of root's"));
    ASSERT_EQ(::chown((gpu / "limits").c_str(), 0, 0), 0);
    std::filesystem::rename(gpu, root / "real");
    std::filesystem::create_directory_symlink("real", gpu);
    EXPECT_THAT(error_of([&] { decide::read_mps_daemon(root, "GPU-0"); }).what(),
                HasSubstr("GPU-0: a symbolic link, never followed"));
}

TEST(ShareLimits, EachGpusLimitWithTheRequestAsItsSoftLimit) {
    const Node node = node_of_three();
    using L = node::MemoryLimit;
    EXPECT_EQ(
        decide::share_limits(share_of({"GPUBIND_GPU_MEMORY=4GiB"}), handed(node, {0, 1})),
        (std::vector<L>{{node.gpus[0].minor, 0, 4 * kGiB}, {node.gpus[1].minor, 0, 4 * kGiB}}));
    EXPECT_EQ(decide::share_limits(
                  share_of({"NVIDIA_GPU_MEMORY_LIMIT=8Gi", "NVIDIA_GPU_MEMORY_REQUEST=2Gi"}),
                  handed(node, {1})),
              (std::vector<L>{{node.gpus[1].minor, 2 * kGiB, 8 * kGiB}}));
    EXPECT_EQ(
        decide::share_limits(
            share_of({"CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=3g"}),
            handed(node, {0, 1})),
        (std::vector<L>{{node.gpus[0].minor, 0, 2 * kGiB}, {node.gpus[1].minor, 0, 3 * kGiB}}));
    EXPECT_TRUE(
        decide::share_limits(share_of({"GPUBIND_GPU_COMPUTE=50"}), handed(node, {0})).empty());
}

// The container's actual cgroup, where the driver's memory limit is set: its
// /proc/<pid>/cgroup under the cgroup2 mount that reaches it.
constexpr const char* kUnified = "90 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
constexpr const char* kHybrid =
    "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "41 30 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    "42 30 0:39 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "43 30 0:40 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n";

std::string cgroup_dir(const std::string& proc_cgroup, const std::string& mountinfo = kUnified) {
    return start::share_cgroup_dir(proc_cgroup, mountinfo, "container c1");
}

TEST(ShareCgroup, SystemdCgroupfsRootlessAndNestedPathsAsTheKernelSaysThem) {
    // systemd's cgroup driver (docker, containerd, CRI-O with systemd)
    EXPECT_EQ(cgroup_dir("0::/system.slice/docker-0123abcd.scope\n"),
              "/sys/fs/cgroup/system.slice/docker-0123abcd.scope");
    EXPECT_EQ(cgroup_dir("0::/kubepods.slice/kubepods-burstable.slice/"
                         "kubepods-burstable-pod1.slice/cri-containerd-abc.scope\n"),
              "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
              "kubepods-burstable-pod1.slice/cri-containerd-abc.scope");
    // cgroupfs' (runc's default, docker with cgroupfs, Kubernetes' cgroupfs driver)
    EXPECT_EQ(cgroup_dir("0::/docker/0123abcd\n"), "/sys/fs/cgroup/docker/0123abcd");
    EXPECT_EQ(cgroup_dir("0::/kubepods/besteffort/pod1/abc\n"),
              "/sys/fs/cgroup/kubepods/besteffort/pod1/abc");
    // A rootless engine's, under the user's systemd
    EXPECT_EQ(cgroup_dir("0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
                         "libpod-abc.scope/container\n"),
              "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/user.slice/"
              "libpod-abc.scope/container");
    // Nested: a runtime in a container whose cgroup tree is mounted from its
    // own cgroup down (the path the kernel shows starts above the mount's root).
    EXPECT_EQ(cgroup_dir("0::/kubepods/pod1/node/docker/inner\n",
                         "90 31 0:38 /kubepods/pod1/node /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
              "/sys/fs/cgroup/docker/inner");
    // ... and in a cgroup namespace of its own (its paths start at its root).
    EXPECT_EQ(cgroup_dir("0::/docker/inner\n"), "/sys/fs/cgroup/docker/inner");
}

TEST(ShareCgroup, AHybridHostsUnifiedTreeAndAV1OnlyHostRefused) {
    // v1 controllers beside the unified tree: the limit is the unified tree's.
    EXPECT_EQ(cgroup_dir("12:memory:/docker/abc\n4:devices:/docker/abc\n0::/docker/abc\n", kHybrid),
              "/sys/fs/cgroup/unified/docker/abc");
    // v1 only: the memory and devices lines are no cgroup the driver limits.
    const Error v1 = error_of([] {
        cgroup_dir("12:memory:/docker/abc\n4:devices:/docker/abc\n1:name=systemd:/docker/abc\n");
    });
    EXPECT_EQ(v1.kind(), ErrorKind::Refused);
    EXPECT_STREQ(v1.what(),
                 "set GPU memory limit container c1: the driver's per-cgroup memory limit needs a "
                 "cgroup v2 cgroup, and the container is in cgroup v1 hierarchies only");
    // A cgroup outside every mount this process reaches (another cgroup
    // namespace's, "/.."), or no cgroup2 mount at all: refused, never guessed.
    const Error outside = error_of([] { cgroup_dir("0::/../../other/abc\n"); });
    EXPECT_EQ(outside.kind(), ErrorKind::Refused);
    EXPECT_THAT(outside.what(), ::testing::StartsWith("set GPU memory limit container c1: "));
    const Error unmounted = error_of([] {
        cgroup_dir("0::/docker/abc\n",
                   "42 30 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    });
    EXPECT_EQ(unmounted.kind(), ErrorKind::Refused);
}

TEST(ShareSize, AsMessagesSayIt) {
    EXPECT_EQ(size_text(10 * kGiB), "10 GiB");
    EXPECT_EQ(size_text(1536 * kMiB), "1536 MiB");
    EXPECT_EQ(size_text(100), "100 B");
}

}  // namespace
}  // namespace gpubind
