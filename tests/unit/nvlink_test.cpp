// node/nvlink.hpp and node/placement.hpp as pure functions: the PCIe path
// rules, the NVLink graph from NVML's facts, maximal cliques against an
// enumeration of every subset, and placement against a brute-force search.
#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "brute_place.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/placement.hpp"
#include "gpubind/util/error.hpp"
#include "nvml.hpp"

namespace gpubind {
namespace {

node::PciPlace place(std::vector<std::string> bridges, int numa) {
    return {std::move(bridges), numa, ""};
}

TEST(PciePath, NamesAsNvidiaSmiDoes) {
    const auto a = place({"0000:10:01.0", "0000:11:00.0", "0000:12:00.0"}, 0);
    const auto same_switch = place({"0000:10:01.0", "0000:11:00.0", "0000:12:01.0"}, 0);
    const auto deeper =
        place({"0000:10:01.0", "0000:11:00.0", "0000:12:02.0", "0000:13:00.0", "0000:14:00.0"}, 0);
    const auto other_port_same_bridge = place({"0000:10:02.0", "0000:20:00.0"}, 0);
    const auto other_bridge_same_numa = place({"0000:40:01.0", "0000:41:00.0"}, 0);
    const auto other_numa = place({"0000:80:01.0", "0000:81:00.0"}, 1);
    const auto unknown_numa = place({"0000:90:01.0"}, -1);
    EXPECT_EQ(node::pcie_path(a, same_switch), node::PathKind::Pix);
    EXPECT_EQ(node::pcie_path(a, deeper), node::PathKind::Pxb);
    EXPECT_EQ(node::pcie_path(a, other_port_same_bridge), node::PathKind::Phb);
    EXPECT_EQ(node::pcie_path(a, other_bridge_same_numa), node::PathKind::Node);
    EXPECT_EQ(node::pcie_path(a, other_numa), node::PathKind::Sys);
    EXPECT_EQ(node::pcie_path(unknown_numa, place({"0000:a0:01.0"}, -1)), node::PathKind::Sys);
    EXPECT_EQ(node::pcie_path(a, std::nullopt), node::PathKind::Unknown);
    EXPECT_EQ(node::path_name({node::PathKind::Nvlink, 18}), "NV18");
    EXPECT_EQ(node::path_name({node::PathKind::Unknown, 0}), "N/A");
    EXPECT_EQ(node::pcie_root(a), "pci0000:10");
}

node::Gpu gpu(unsigned i, std::vector<node::NvlinkLink> links) {
    node::Gpu g;
    g.index = g.minor = i;
    g.pci_bus_id = fmt::format("0000:{:02x}:00.0", 0x10 + i);
    g.nvlink = node::GpuNvlink{};
    g.nvlink->links = std::move(links);
    return g;
}

node::NvlinkLink to_gpu(unsigned link, unsigned peer) {
    return {link, node::kNvlinkRemoteGpu, fmt::format("0000:{:02x}:00.0", 0x10 + peer)};
}
node::NvlinkLink to_switch(unsigned link, unsigned sw) {
    return {link, node::kNvlinkRemoteSwitch, fmt::format("0000:0{}:00.0", sw)};
}

TEST(NvlinkGraph, DirectLinksCountFromBothEnds) {
    std::vector<node::Gpu> gpus = {gpu(0, {to_gpu(0, 1), to_gpu(1, 1), to_gpu(2, 2)}),
                                   gpu(1, {to_gpu(0, 0), to_gpu(1, 0)}), gpu(2, {})};
    const auto g = node::nvlink_graph(gpus);
    EXPECT_EQ(g.links[0][1], 2u);
    EXPECT_EQ(g.links[1][0], 2u);
    EXPECT_EQ(g.links[0][2], 0u);  // GPU 2 does not see the link
    EXPECT_EQ(g.cliques, (std::vector<std::vector<unsigned>>{{0, 1}}));
    EXPECT_EQ(g.cliques_of[2], std::vector<unsigned>{});
    EXPECT_TRUE(g.unknown.empty());
}

TEST(NvlinkGraph, NvswitchPairsShareTheLinksBothHaveToEachSwitch) {
    // GPU 0: 2 links to switch 1, 1 to switch 2; GPU 1: 1 to switch 1, 3 to
    // switch 2; GPU 2: only switch 3.
    std::vector<node::Gpu> gpus = {
        gpu(0, {to_switch(0, 1), to_switch(1, 1), to_switch(2, 2)}),
        gpu(1, {to_switch(0, 1), to_switch(1, 2), to_switch(2, 2), to_switch(3, 2)}),
        gpu(2, {to_switch(0, 3)})};
    const auto g = node::nvlink_graph(gpus);
    EXPECT_EQ(g.links[0][1], 2u);  // min(2,1) + min(1,3)
    EXPECT_EQ(g.links[0][2], 0u);
    EXPECT_EQ(g.links[1][2], 0u);
}

TEST(NvlinkGraph, P2pRefusedCutsTheLink) {
    std::vector<node::Gpu> gpus = {gpu(0, {to_switch(0, 1)}), gpu(1, {to_switch(0, 1)}),
                                   gpu(2, {to_switch(0, 1)})};
    gpus[0].nvlink->p2p_known = true;
    gpus[0].nvlink->p2p_ok = {2};  // NVML: no NVLink P2P with GPU 1
    const auto g = node::nvlink_graph(gpus);
    EXPECT_EQ(g.links[0][1], 0u);
    EXPECT_EQ(g.links[0][2], 1u);
    EXPECT_EQ(g.links[1][2], 1u);
    EXPECT_EQ(g.cliques, (std::vector<std::vector<unsigned>>{{0, 2}, {1, 2}}));
}

TEST(NvlinkGraph, UnknownIsSaidForTheFirstGpuAndLinksNothing) {
    std::vector<node::Gpu> gpus = {gpu(0, {to_gpu(0, 1)}), gpu(1, {to_gpu(0, 0)}), gpu(2, {})};
    gpus[1].nvlink->unknown = "this NVML has no nvmlDeviceGetNvLinkState";
    gpus[2].nvlink.reset();
    const auto g = node::nvlink_graph(gpus);
    EXPECT_THAT(g.unknown, ::testing::HasSubstr("this NVML has no nvmlDeviceGetNvLinkState"));
    EXPECT_THAT(g.unknown, ::testing::StartsWith("GPU 1"));
    EXPECT_EQ(g.known, (std::vector<bool>{true, false, false}));
    EXPECT_EQ(g.links[0][1], 0u);
    EXPECT_TRUE(g.cliques.empty());
}

// Every maximal clique of a random graph, against every subset checked.
TEST(NvlinkGraph, MaximalCliquesAreEverySubsetThatIsOne) {
    std::mt19937 rng(46);
    for (int round = 0; round < 200; ++round) {
        const unsigned n = static_cast<unsigned>(2 + rng() % 8);
        std::vector<std::vector<bool>> adj(n, std::vector<bool>(n, false));
        for (unsigned a = 0; a < n; ++a)
            for (unsigned b = a + 1; b < n; ++b) adj[a][b] = adj[b][a] = rng() % 3 != 0;
        auto is_clique = [&](unsigned mask) {
            for (unsigned a = 0; a < n; ++a)
                for (unsigned b = a + 1; b < n; ++b)
                    if ((mask >> a & 1) && (mask >> b & 1) && !adj[a][b]) return false;
            return true;
        };
        std::vector<std::vector<unsigned>> want;
        for (unsigned mask = 1; mask < (1u << n); ++mask) {
            if (__builtin_popcount(mask) < 2 || !is_clique(mask)) continue;
            bool maximal = true;
            for (unsigned v = 0; v < n && maximal; ++v)
                if (!(mask >> v & 1) && is_clique(mask | 1u << v)) maximal = false;
            if (!maximal) continue;
            std::vector<unsigned> c;
            for (unsigned v = 0; v < n; ++v)
                if (mask >> v & 1) c.push_back(v);
            want.push_back(c);
        }
        std::sort(want.begin(), want.end());
        EXPECT_EQ(node::maximal_cliques(adj), want) << "round " << round;
    }
}

TEST(NvmlReport, NvlinkLinesParse) {
    const auto facts = node::parse_nvml_report(
        "gpu 0 nvidia 9.0\n"
        "fabric 0 00112233445566778899aabbccddeeff 7\n"
        "link 0 0 2 0000:05:00.0\n"
        "link 0 3 0 0000:18:00.0\n"
        "nvlink 0 known\n"
        "gpu 1 nvidia 9.0\n"
        "nvlink 1 unknown nvmlDeviceGetNvLinkState(link 0) returned 4\n"
        "gpu 2 nvidia 9.0\n"
        "p2p 0 1,2\n"
        "p2p 2 -\n",
        "test");
    ASSERT_TRUE(facts.gpus.at(0).nvlink);
    const node::GpuNvlink& n0 = *facts.gpus.at(0).nvlink;
    EXPECT_TRUE(n0.unknown.empty());
    EXPECT_EQ(n0.links,
              (std::vector<node::NvlinkLink>{{0, node::kNvlinkRemoteSwitch, "0000:05:00.0"},
                                             {3, node::kNvlinkRemoteGpu, "0000:18:00.0"}}));
    EXPECT_EQ(n0.fabric_cluster, "00112233445566778899aabbccddeeff");
    EXPECT_EQ(n0.fabric_clique, 7u);
    EXPECT_TRUE(n0.p2p_known);
    EXPECT_EQ(n0.p2p_ok, (std::vector<unsigned>{1, 2}));
    EXPECT_EQ(facts.gpus.at(1).nvlink->unknown, "nvmlDeviceGetNvLinkState(link 0) returned 4");
    EXPECT_TRUE(facts.gpus.at(2).nvlink->p2p_known);
    EXPECT_TRUE(facts.gpus.at(2).nvlink->p2p_ok.empty());
}

TEST(NvmlReport, GpuLinesCarryTheMemoryWhenNvmlSaidIt) {
    const auto facts = node::parse_nvml_report(
        "gpu 0 tesla 8.0 42949672960\n"
        "gpu 1 nvidia 9.0 0\n"  // nvmlDeviceGetMemoryInfo failed
        "gpu 2 nvidia 9.0\n",   // a helper from before memory was asked
        "test");
    EXPECT_EQ(facts.gpus.at(0).memory, 40ull << 30);
    EXPECT_EQ(facts.gpus.at(0).brand, "tesla");
    EXPECT_EQ(facts.gpus.at(0).compute_capability, "8.0");
    EXPECT_EQ(facts.gpus.at(1).memory, 0u);
    EXPECT_EQ(facts.gpus.at(2).memory, 0u);
    EXPECT_EQ(facts.gpus.at(2).brand, "nvidia");
}

// ---- placement against brute force ----------------------------------------

// Checks place_gpus against brute force for every free set of `t`'s GPUs
// (all subsets), N = 2, 3, 4 and every NVLink need.
void expect_optimal(const node::PlaceTopology& t, const std::string& what) {
    const test::PlaceFacts facts{[&t](unsigned a, unsigned b) { return t.nvlinks[a][b]; },
                                 [&t](unsigned a, unsigned b) -> long { return t.pcie[a][b]; },
                                 [&t](unsigned a) { return t.numa[a]; }};
    const unsigned gpus = static_cast<unsigned>(t.numa.size());
    for (unsigned mask = 1; mask < (1u << gpus); ++mask) {
        std::vector<unsigned> free;
        for (unsigned i = 0; i < gpus; ++i)
            if (mask >> i & 1) free.push_back(i);
        for (unsigned n = 2; n <= 4 && n <= free.size(); ++n)
            for (node::NvlinkNeed need : {node::NvlinkNeed::Required, node::NvlinkNeed::Preferred,
                                          node::NvlinkNeed::Ignore}) {
                const test::BestPlace want = test::brute_place(facts, free, n, need);
                const node::Placement got = node::place_gpus(t, {n, free, {}, need});
                const std::string ctx =
                    fmt::format("{}: free {} n {} need {}", what, fmt::join(free, ","), n,
                                static_cast<int>(need));
                if (need == node::NvlinkNeed::Required) {
                    ASSERT_EQ(got.satisfied, want.found) << ctx;
                    if (!want.found) {
                        const test::BestPlace any =
                            test::brute_place(facts, free, n, node::NvlinkNeed::Preferred);
                        ASSERT_EQ(got.gpus, any.gpus) << ctx << " (the best there is)";
                        continue;
                    }
                }
                ASSERT_TRUE(got.satisfied) << ctx;
                ASSERT_EQ(got.gpus, want.gpus) << ctx << ": " << got.why;
            }
    }
}

TEST(Placement, OptimalOnRandomTopologies) {
    std::mt19937 rng(4646);
    for (int round = 0; round < 12; ++round) {
        const unsigned n = static_cast<unsigned>(6 + round % 3);
        node::PlaceTopology t;
        t.nvlinks.assign(n, std::vector<unsigned>(n, 0));
        t.pcie.assign(n, std::vector<unsigned>(n, 0));
        for (unsigned a = 0; a < n; ++a) {
            t.numa.push_back(static_cast<int>(rng() % 3) - 1);
            for (unsigned b = a + 1; b < n; ++b) {
                t.nvlinks[a][b] = t.nvlinks[b][a] =
                    static_cast<unsigned>(rng() % 2 ? rng() % 4 : 0);
                t.pcie[a][b] = t.pcie[b][a] = static_cast<unsigned>(1 + rng() % 6);
            }
        }
        expect_optimal(t, fmt::format("round {}", round));
    }
}

TEST(Placement, RefusesBadRequests) {
    node::PlaceTopology t;
    t.nvlinks.assign(2, std::vector<unsigned>(2, 0));
    t.pcie.assign(2, std::vector<unsigned>(2, 1));
    t.numa = {0, 0};
    EXPECT_THROW(node::place_gpus(t, {3, {}, {}, node::NvlinkNeed::Preferred}), util::Error);
    EXPECT_THROW(node::place_gpus(t, {1, {2}, {}, node::NvlinkNeed::Preferred}), util::Error);
    EXPECT_THROW(node::place_gpus(t, {0, {}, {}, node::NvlinkNeed::Preferred}), util::Error);
    const node::Placement p = node::place_gpus(t, {1, {0, 1}, {1}, node::NvlinkNeed::Preferred});
    EXPECT_EQ(p.gpus, std::vector<unsigned>{1});  // must_include wins over the lower index
    const node::Placement r = node::place_gpus(t, {2, {}, {}, node::NvlinkNeed::Required});
    EXPECT_FALSE(r.satisfied);
    EXPECT_THAT(r.why, ::testing::HasSubstr("no 2 of the free GPUs are all linked by NVLink"));
}

}  // namespace
}  // namespace gpubind
