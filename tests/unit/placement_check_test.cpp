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
oci::Spec spec_with(const std::vector<std::string>& env, const json& annotations = nullptr) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", env}}},
                {"mounts", json::array()}};
    doc["process"]["env"].push_back("NVIDIA_VISIBLE_DEVICES=0,1");
    doc["process"]["capabilities"]["bounding"] = {"CAP_SYS_ADMIN"};
    if (!annotations.is_null()) doc["annotations"] = annotations;
    return oci::parse_spec(doc.dump(), "/bundles/c1");
}

Request read(const std::vector<std::string>& env, const json& annotations = nullptr) {
    return read_request(spec_with(env, annotations), Policy{});
}

TEST(ReadPlacement, NothingDeclaredIsNone) {
    const Request r = read({"PATH=/bin"}, {{"other.io/x", "nvlink"}});
    EXPECT_EQ(r.placement, PlacementNeed::None);
    EXPECT_EQ(r.placement_asked_by, "");
    EXPECT_FALSE(node_needs(r, true).need_nvml);
    // Empty values declare nothing.
    EXPECT_EQ(read({"GPUBIND_PLACEMENT="}, {{"gpubind.io/placement", ""}}).placement,
              PlacementNeed::None);
}

TEST(ReadPlacement, ByVariableOrAnnotation) {
    const Request by_env = read({"GPUBIND_PLACEMENT=nvlink"});
    EXPECT_EQ(by_env.placement, PlacementNeed::Nvlink);
    EXPECT_EQ(by_env.placement_asked_by, "GPUBIND_PLACEMENT=nvlink");
    const Request by_annotation = read({}, {{"gpubind.io/placement", "nvlink"}});
    EXPECT_EQ(by_annotation.placement, PlacementNeed::Nvlink);
    EXPECT_EQ(by_annotation.placement_asked_by, "annotation gpubind.io/placement=nvlink");
    // The last value of the variable counts, as the container's process sees it.
    EXPECT_EQ(read({"GPUBIND_PLACEMENT=nvlink", "GPUBIND_PLACEMENT="}).placement,
              PlacementNeed::None);
    // A declared placement needs NVML's NVLink facts.
    EXPECT_TRUE(node_needs(by_env, true).need_nvml);
    EXPECT_TRUE(node_needs(by_annotation, true).need_nvml);
}

TEST(ReadPlacement, AnotherValueIsMalformed) {
    const Error env = error_of([] { read({"GPUBIND_PLACEMENT=nvswitch"}); });
    EXPECT_EQ(env.kind(), ErrorKind::Invalid);
    EXPECT_STREQ(env.what(),
                 "read request /bundles/c1/config.json: GPUBIND_PLACEMENT: 'nvswitch' is not a "
                 "placement (nvlink)");
    const Error annotation = error_of([] { read({}, {{"gpubind.io/placement", "NVLink"}}); });
    EXPECT_EQ(annotation.kind(), ErrorKind::Invalid);
    EXPECT_THAT(annotation.what(),
                HasSubstr("annotation gpubind.io/placement: 'NVLink' is not a placement"));
    // Both given: each must be nvlink.
    EXPECT_EQ(error_of([] {
                  read({"GPUBIND_PLACEMENT=pcie"}, {{"gpubind.io/placement", "nvlink"}});
              }).kind(),
              ErrorKind::Invalid);
    EXPECT_THAT(error_of([] {
                    read({}, {{"gpubind.io/placement", 1}});
                }).what(),
                HasSubstr("annotations.gpubind.io/placement: not a string"));
}

TEST(ReadPlacement, NotReadForAContainerWithoutGpus) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", {"GPUBIND_PLACEMENT=bogus"}}}}};
    const Request r = read_request(oci::parse_spec(doc.dump(), "/bundles/c1"), Policy{});
    EXPECT_FALSE(r.gpu_container());
    EXPECT_EQ(r.placement, PlacementNeed::None);
}

// ---- the check -----------------------------------------------------------------------------

std::string bus(unsigned i) {
    return fmt::format("0000:{:02x}:00.0", 0x10 + i);
}

// `n` GPUs bridged in pairs (0-1, 2-3, ...) by 12 links, each pair under
// its own root port of one host bridge (PHB between pairs).
Node pcie_pairs(unsigned n) {
    Node node;
    for (unsigned i = 0; i < n; ++i) {
        Gpu g;
        g.index = g.minor = i;
        g.pci_bus_id = bus(i);
        g.place = PciPlace{{fmt::format("0000:00:{:02x}.0", 1 + i / 2), bus(i)}, 0, ""};
        g.nvlink = GpuNvlink{};
        for (unsigned l = 0; l < 12; ++l)
            g.nvlink->links.push_back({l, kNvlinkRemoteGpu, bus(i ^ 1u)});
        node.gpus.push_back(std::move(g));
    }
    return node;
}

Selection handed(const Node& node, const std::vector<unsigned>& gpus) {
    Selection s;
    for (unsigned i : gpus) s.gpus.push_back(&node.gpus[i]);
    return s;
}

Request declared() {
    Request r;
    r.source = RequestSource::Env;
    r.placement = PlacementNeed::Nvlink;
    r.placement_asked_by = "GPUBIND_PLACEMENT=nvlink";
    return r;
}

TEST(NvlinkPlacement, ALinkedPairIsOneClique) {
    const Node node = pcie_pairs(4);
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {0, 1})), "");
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {2, 3})), "");
    EXPECT_NO_THROW(check_placement(declared(), node, handed(node, {2, 3}), Config{}));
}

TEST(NvlinkPlacement, OneGpuOrNoneIsAClique) {
    const Node node = pcie_pairs(4);
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {2})), "");
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {})), "");
}

TEST(NvlinkPlacement, GpusOfDifferentPairsAreRefusedInOneLine) {
    const Node node = pcie_pairs(4);
    const std::string why = nvlink_placement_failure(node, handed(node, {1, 2}));
    EXPECT_EQ(why,
              "GPUs 1, 2 are not one NVLink clique (GPU 1-2: PHB); this node's NVLink cliques: "
              "GPUs 0, 1; GPUs 2, 3");
    const Error e = error_of([&] { check_placement(declared(), node, handed(node, {1, 2}), {}); });
    EXPECT_EQ(e.kind(), ErrorKind::Refused);
    EXPECT_EQ(std::string(e.what()), "check placement GPUBIND_PLACEMENT=nvlink: " + why);
    // Three GPUs, one pair linked: every pair named with its path.
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {0, 1, 2})),
              "GPUs 0, 1, 2 are not one NVLink clique (GPU 0-1: NV12, GPU 0-2: PHB, GPU 1-2: "
              "PHB); this node's NVLink cliques: GPUs 0, 1; GPUs 2, 3");
}

TEST(NvlinkPlacement, OnRefusedWarnStartsIt) {
    const Node node = pcie_pairs(4);
    Config warn;
    warn.policy.on_refused = OnRefused::Warn;
    EXPECT_NO_THROW(check_placement(declared(), node, handed(node, {1, 2}), warn));
}

TEST(NvlinkPlacement, NothingDeclaredIsNotChecked) {
    const Node node = pcie_pairs(4);
    Request r = declared();
    r.placement = PlacementNeed::None;
    EXPECT_NO_THROW(check_placement(r, node, handed(node, {1, 2}), Config{}));
}

TEST(NvlinkPlacement, UnknownNvlinkIsNotAClique) {
    Node node = pcie_pairs(4);
    node.gpus[2].nvlink->unknown = "this NVML has no nvmlDeviceGetNvLinkState";
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {2, 3})),
              "GPUs 2, 3 are not known to be one NVLink clique: the NVLink of GPU 2 is unknown "
              "(this NVML has no nvmlDeviceGetNvLinkState)");
    node.gpus[3].nvlink.reset();  // NVML not asked, or failed
    EXPECT_THAT(nvlink_placement_failure(node, handed(node, {0, 3})),
                HasSubstr("the NVLink of GPU 3 is unknown (NVML did not answer)"));
    // GPUs whose NVLink is known are checked as ever.
    EXPECT_EQ(nvlink_placement_failure(node, handed(node, {0, 1})), "");
}

TEST(NvlinkPlacement, MigDevicesCountByTheirParents) {
    Node node = pcie_pairs(4);
    node.gpus[0].mig.push_back(MigDevice{});
    node.gpus[2].mig.push_back(MigDevice{});
    node.gpus[2].mig.back().gpu_index = 2;
    Selection s = handed(node, {1});
    s.migs.push_back(&node.gpus[0].mig.back());
    EXPECT_EQ(nvlink_placement_failure(node, s), "");
    s.migs.push_back(&node.gpus[2].mig.back());
    EXPECT_THAT(nvlink_placement_failure(node, s), HasSubstr("GPUs 0, 1, 2 are not one"));
}

}  // namespace
}  // namespace gpubind
