// The placement a container declares (gpubind.io/placement, GPUBIND_PLACEMENT)
// read with its request, and checked against the GPUs it is handed (issue 46):
// specs parsed as the hook parses config.json, nodes built by hand with
// NVML's NVLink facts as the node description keeps them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/inject.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/placement_check.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using test::error_of;
using ::testing::HasSubstr;

// A privileged container asking for GPUs 0,1 by variable, with `env` more and
// `annotations`.
decide::oci::Spec spec_with(const std::vector<std::string>& env,
                            const json& annotations = nullptr) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", env}}},
                {"mounts", json::array()}};
    doc["process"]["env"].push_back("NVIDIA_VISIBLE_DEVICES=0,1");
    doc["process"]["capabilities"]["bounding"] = {"CAP_SYS_ADMIN"};
    if (!annotations.is_null()) doc["annotations"] = annotations;
    return decide::oci::parse_spec(doc.dump(), "/bundles/c1");
}

decide::Request read(const std::vector<std::string>& env, const json& annotations = nullptr) {
    return decide::read_request(spec_with(env, annotations), config::Policy{});
}

TEST(ReadPlacement, NothingDeclaredIsNone) {
    const decide::Request r = read({"PATH=/bin"}, {{"other.io/x", "nvlink"}});
    EXPECT_EQ(r.placement, decide::PlacementNeed::None);
    EXPECT_EQ(r.placement_asked_by, "");
    EXPECT_FALSE(decide::node_needs(r, true).need_nvml);
    // Empty values declare nothing.
    EXPECT_EQ(read({"GPUBIND_PLACEMENT="}, {{"gpubind.io/placement", ""}}).placement,
              decide::PlacementNeed::None);
}

TEST(ReadPlacement, ByVariableOrAnnotation) {
    const decide::Request by_env = read({"GPUBIND_PLACEMENT=nvlink"});
    EXPECT_EQ(by_env.placement, decide::PlacementNeed::Nvlink);
    EXPECT_EQ(by_env.placement_asked_by, "GPUBIND_PLACEMENT=nvlink");
    const decide::Request by_annotation = read({}, {{"gpubind.io/placement", "nvlink"}});
    EXPECT_EQ(by_annotation.placement, decide::PlacementNeed::Nvlink);
    EXPECT_EQ(by_annotation.placement_asked_by, "annotation gpubind.io/placement=nvlink");
    // The last value of the variable counts, as the container's process sees it.
    EXPECT_EQ(read({"GPUBIND_PLACEMENT=nvlink", "GPUBIND_PLACEMENT="}).placement,
              decide::PlacementNeed::None);
    // A declared placement needs NVML's NVLink facts.
    EXPECT_TRUE(decide::node_needs(by_env, true).need_nvml);
    EXPECT_TRUE(decide::node_needs(by_annotation, true).need_nvml);
}

TEST(ReadPlacement, AnotherValueIsMalformed) {
    const util::Error env = error_of([] { read({"GPUBIND_PLACEMENT=nvswitch"}); });
    EXPECT_EQ(env.kind(), util::ErrorKind::Invalid);
    EXPECT_STREQ(env.what(),
                 "read request /bundles/c1/config.json: GPUBIND_PLACEMENT: 'nvswitch' is not a "
                 "placement (nvlink)");
    const util::Error annotation = error_of([] { read({}, {{"gpubind.io/placement", "NVLink"}}); });
    EXPECT_EQ(annotation.kind(), util::ErrorKind::Invalid);
    EXPECT_THAT(annotation.what(),
                HasSubstr("annotation gpubind.io/placement: 'NVLink' is not a placement"));
    // Both given: each must be nvlink.
    EXPECT_EQ(error_of([] {
                  read({"GPUBIND_PLACEMENT=pcie"}, {{"gpubind.io/placement", "nvlink"}});
              }).kind(),
              util::ErrorKind::Invalid);
    EXPECT_THAT(error_of([] {
                    read({}, {{"gpubind.io/placement", 1}});
                }).what(),
                HasSubstr("annotations.gpubind.io/placement: not a string"));
}

TEST(ReadPlacement, NotReadForAContainerWithoutGpus) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", {"GPUBIND_PLACEMENT=bogus"}}}}};
    const decide::Request r =
        decide::read_request(decide::oci::parse_spec(doc.dump(), "/bundles/c1"), config::Policy{});
    EXPECT_FALSE(r.gpu_container());
    EXPECT_EQ(r.placement, decide::PlacementNeed::None);
}

// ---- the check -----------------------------------------------------------------------------

std::string bus(unsigned i) {
    return fmt::format("0000:{:02x}:00.0", 0x10 + i);
}

// `n` GPUs bridged in pairs (0-1, 2-3, ...) by 12 links, each pair under
// its own root port of one host bridge (PHB between pairs).
node::Node pcie_pairs(unsigned n) {
    node::Node node;
    for (unsigned i = 0; i < n; ++i) {
        node::Gpu g;
        g.index = g.minor = i;
        g.pci_bus_id = bus(i);
        g.place = node::PciPlace{{fmt::format("0000:00:{:02x}.0", 1 + i / 2), bus(i)}, 0, ""};
        g.nvlink = node::GpuNvlink{};
        for (unsigned l = 0; l < 12; ++l)
            g.nvlink->links.push_back({l, node::kNvlinkRemoteGpu, bus(i ^ 1u)});
        node.gpus.push_back(std::move(g));
    }
    return node;
}

node::Selection handed(const node::Node& node, const std::vector<unsigned>& gpus) {
    node::Selection s;
    for (unsigned i : gpus) s.gpus.push_back(&node.gpus[i]);
    return s;
}

decide::Request declared() {
    decide::Request r;
    r.source = decide::RequestSource::Env;
    r.placement = decide::PlacementNeed::Nvlink;
    r.placement_asked_by = "GPUBIND_PLACEMENT=nvlink";
    return r;
}

TEST(NvlinkPlacement, ALinkedPairIsOneClique) {
    const node::Node node = pcie_pairs(4);
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {0, 1})), "");
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {2, 3})), "");
    EXPECT_NO_THROW(
        decide::check_placement(declared(), node, handed(node, {2, 3}), config::Config{}));
}

TEST(NvlinkPlacement, OneGpuOrNoneIsAClique) {
    const node::Node node = pcie_pairs(4);
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {2})), "");
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {})), "");
}

TEST(NvlinkPlacement, GpusOfDifferentPairsAreRefusedInOneLine) {
    const node::Node node = pcie_pairs(4);
    const std::string why = decide::nvlink_placement_failure(node, handed(node, {1, 2}));
    EXPECT_EQ(why,
              "GPUs 1, 2 are not one NVLink clique (GPU 1-2: PHB); this node's NVLink cliques: "
              "GPUs 0, 1; GPUs 2, 3");
    const util::Error e = error_of([&] {
        decide::check_placement(declared(), node, handed(node, {1, 2}), {});
    });
    EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
    EXPECT_EQ(std::string(e.what()), "check placement GPUBIND_PLACEMENT=nvlink: " + why);
    // Three GPUs, one pair linked: every pair named with its path.
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {0, 1, 2})),
              "GPUs 0, 1, 2 are not one NVLink clique (GPU 0-1: NV12, GPU 0-2: PHB, GPU 1-2: "
              "PHB); this node's NVLink cliques: GPUs 0, 1; GPUs 2, 3");
}

TEST(NvlinkPlacement, OnRefusedWarnStartsIt) {
    const node::Node node = pcie_pairs(4);
    config::Config warn;
    warn.policy.on_refused = config::OnRefused::Warn;
    EXPECT_NO_THROW(decide::check_placement(declared(), node, handed(node, {1, 2}), warn));
}

TEST(NvlinkPlacement, NothingDeclaredIsNotChecked) {
    const node::Node node = pcie_pairs(4);
    decide::Request r = declared();
    r.placement = decide::PlacementNeed::None;
    EXPECT_NO_THROW(decide::check_placement(r, node, handed(node, {1, 2}), config::Config{}));
}

TEST(NvlinkPlacement, UnknownNvlinkIsNotAClique) {
    node::Node node = pcie_pairs(4);
    node.gpus[2].nvlink->unknown = "this NVML has no nvmlDeviceGetNvLinkState";
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {2, 3})),
              "GPUs 2, 3 are not known to be one NVLink clique: the NVLink of GPU 2 is unknown "
              "(this NVML has no nvmlDeviceGetNvLinkState)");
    node.gpus[3].nvlink.reset();  // NVML not asked, or failed
    EXPECT_THAT(decide::nvlink_placement_failure(node, handed(node, {0, 3})),
                HasSubstr("the NVLink of GPU 3 is unknown (NVML did not answer)"));
    // GPUs whose NVLink is known are checked as ever.
    EXPECT_EQ(decide::nvlink_placement_failure(node, handed(node, {0, 1})), "");
}

TEST(NvlinkPlacement, MigDevicesCountByTheirParents) {
    node::Node node = pcie_pairs(4);
    node.gpus[0].mig.push_back(node::MigDevice{});
    node.gpus[2].mig.push_back(node::MigDevice{});
    node.gpus[2].mig.back().gpu_index = 2;
    node::Selection s = handed(node, {1});
    s.migs.push_back(&node.gpus[0].mig.back());
    EXPECT_EQ(decide::nvlink_placement_failure(node, s), "");
    s.migs.push_back(&node.gpus[2].mig.back());
    EXPECT_THAT(decide::nvlink_placement_failure(node, s), HasSubstr("GPUs 0, 1, 2 are not one"));
}

}  // namespace
}  // namespace gpubind
