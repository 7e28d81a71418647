// The share of a GPU a container asks for (issue 48): read from its
// environment by gpubind's own variables and the hints of NVIDIA's hook, HAMi
// and gpushare, refused when malformed or contradictory, and checked against
// the GPUs it is handed and what the node can enforce.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/inject.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/util/error.hpp"

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

std::string refusal(const ShareRequest& share, const Selection& s, const Config& config = {}) {
    const Error e = error_of([&] { check_share(share, s, config); });
    EXPECT_EQ(e.kind(), ErrorKind::Refused) << e.what();
    return e.what();
}

TEST(CheckShare, NoShareIsNeverChecked) {
    const Node node = node_of_three();
    EXPECT_NO_THROW(check_share(ShareRequest{}, handed(node, {0, 1, 2}), Config{}));
}

TEST(CheckShare, ThisNodeEnforcesNoShareSoStrictRefusesAndSoftStarts) {
    const Node node = node_of_three();
    const ShareRequest share = share_of({"GPUBIND_GPU_MEMORY=4GiB"});
    EXPECT_EQ(refusal(share, handed(node, {0})),
              "check share GPUBIND_GPU_MEMORY=4GiB: this node cannot enforce a GPU share: " +
                  share_enforcement() + "; [policy] shares = soft starts it unenforced");
    EXPECT_NO_THROW(check_share(share, handed(node, {0, 1}), soft()));
    // A GPU whose memory is unknown is not judged by it.
    EXPECT_NO_THROW(check_share(share_of({"GPUBIND_GPU_MEMORY=64GiB"}), handed(node, {2}), soft()));
}

TEST(CheckShare, WhatNoMechanismCouldGiveIsRefusedEvenWhenSoft) {
    Node node = node_of_three();
    EXPECT_EQ(refusal(share_of({"GPUBIND_GPU_MEMORY=20GiB"}), handed(node, {0, 1}), soft()),
              "check share GPUBIND_GPU_MEMORY=20GiB: a limit of 20 GiB on GPU 0 (GPU-0), which "
              "has 16 GiB");
    EXPECT_THAT(
        refusal(share_of({"CUDA_DEVICE_MEMORY_LIMIT_0=1g", "CUDA_DEVICE_MEMORY_LIMIT_1=17g"}),
                handed(node, {0, 1}), soft()),
        HasSubstr("a limit of 17 GiB on GPU 1 (GPU-1), which has 16 GiB"));
    EXPECT_THAT(refusal(share_of({"CUDA_DEVICE_MEMORY_LIMIT_2=1g"}), handed(node, {0, 1}), soft()),
                HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_2 names the container's GPU 2, but it is "
                          "given 2"));
    EXPECT_THAT(refusal(share_of({"ALIYUN_COM_GPU_MEM_CONTAINER=2", "ALIYUN_COM_GPU_MEM_IDX=2"}),
                        handed(node, {0}), soft()),
                HasSubstr("the share is on GPU 2, which the container is not given"));

    node.gpus[1].mig.push_back(MigDevice{});
    node.gpus[1].mig.back().gpu_index = 1;
    node.gpus[1].mig.back().uuid = "MIG-1";
    Selection mig;
    mig.migs.push_back(&node.gpus[1].mig.back());
    EXPECT_THAT(refusal(share_of({"GPUBIND_GPU_COMPUTE=50"}), mig, soft()),
                HasSubstr("a share of MIG device MIG-1: a MIG device is already a fixed part of "
                          "its GPU"));
}

TEST(ShareSize, AsMessagesSayIt) {
    EXPECT_EQ(size_text(10 * kGiB), "10 GiB");
    EXPECT_EQ(size_text(1536 * kMiB), "1536 MiB");
    EXPECT_EQ(size_text(100), "100 B");
}

}  // namespace
}  // namespace gpubind
