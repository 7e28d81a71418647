// The NVLink topologies of `gpubind simulate --topology`, read back as users
// read them: `gpubind info --topology` (text and JSON) cell by cell against
// the manifest's matrix, the JSON's cliques against the manifest's maximal
// cliques, and `place` against a brute-force search over the manifest's facts.
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "brute_place.hpp"
#include "built.hpp"
#include "command.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/placement.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/strings.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

struct Output {
    int code;
    std::string out;
};

Output cli(const std::string& args) {
    const char* exe = std::getenv("GPUBIND_CLI");
    auto o = test::run(std::string(exe ? exe : GPUBIND_CLI_PATH) + " " + args);
    return {o.status, std::move(o.text)};
}

class Topology : public test::SimNodeTestWithParam<std::string> {
  protected:
    Topology() : test::SimNodeTestWithParam<std::string>("gpubind-topology") {
        node_options().topology(GetParam()).hcas(2);
    }
    std::string root_arg() const { return "--root " + root().string(); }
    node::Node discover_node() const { return node::discover(config()); }
};

TEST_P(Topology, InfoJsonMatchesTheKnownMatrixAndCliques) {
    const auto o = cli("info --topology --json " + root_arg());
    ASSERT_EQ(o.code, 0) << o.out;
    const json j = json::parse(o.out);
    EXPECT_EQ(j["schema"], "gpubind.topology/v2");
    const auto& top = manifest().topology;
    ASSERT_EQ(j["gpus"].size(), manifest().gpus.size());
    for (std::size_t i = 0; i < manifest().gpus.size(); ++i) {
        EXPECT_EQ(j["gpus"][i]["matrix"], json(top.matrix[i])) << "GPU " << i;
        const json& attrs = j["gpus"][i]["attributes"];
        EXPECT_EQ(attrs["numaNode"], json::array({manifest().gpus[i].numa_node}));
        EXPECT_EQ(attrs["pcieRoot"], "pci" + manifest().gpus[i].bridges.at(0).substr(0, 7));
        if (!top.nvlink_known) {
            EXPECT_TRUE(attrs["nvlinkCliques"].is_null());
        } else {
            std::vector<unsigned> ids;
            for (unsigned id = 0; id < top.cliques.size(); ++id)
                if (std::count(top.cliques[id].begin(), top.cliques[id].end(), i))
                    ids.push_back(id);
            EXPECT_EQ(attrs["nvlinkCliques"], json(ids)) << "GPU " << i;
        }
        if (top.fabric[i].empty())
            EXPECT_TRUE(attrs["fabricClique"].is_null());
        else
            EXPECT_EQ(attrs["fabricClique"], top.fabric[i]);
    }
    EXPECT_EQ(j["nvlink"]["known"], top.nvlink_known);
    EXPECT_EQ(j["nvlink"]["cliques"], json(top.cliques));
}

TEST_P(Topology, InfoTextShowsTheMatrixCellByCell) {
    const auto o = cli("info --topology " + root_arg());
    ASSERT_EQ(o.code, 0) << o.out;
    const auto lines = util::split(o.out, '\n');
    for (std::size_t i = 0; i < manifest().gpus.size(); ++i) {
        const std::string label = fmt::format("GPU{}", i);
        auto row = std::find_if(lines.begin(), lines.end(),
                                [&](std::string_view l) { return l.starts_with(label + " "); });
        ASSERT_NE(row, lines.end()) << o.out;
        std::vector<std::string> cells;
        for (auto w : util::split(*row, ' '))
            if (!w.empty()) cells.emplace_back(w);
        const auto& want = manifest().topology.matrix[i];
        ASSERT_GE(cells.size(), want.size() + 3) << *row;
        EXPECT_EQ(std::vector<std::string>(cells.begin() + 1, cells.begin() + 1 + want.size()),
                  want)
            << *row;
        EXPECT_EQ(cells[want.size() + 1], manifest().gpus[i].cpulist);
        EXPECT_EQ(cells[want.size() + 2], std::to_string(manifest().gpus[i].numa_node));
    }
    const std::string unknown = "NVLink: unknown (";
    const auto said = [&] {
        std::size_t n = 0;
        for (auto at = o.out.find(unknown); at != std::string::npos;
             at = o.out.find(unknown, at + 1))
            ++n;
        return n;
    }();
    EXPECT_EQ(said, manifest().topology.nvlink_known ? 0u : 1u) << o.out;
}

// Against the documented order over the manifest's facts (brute_place.hpp).
TEST_P(Topology, PlaceIsNeverWorseThanBruteForce) {
    const node::Node node = discover_node();
    const auto graph = node::nvlink_graph(node.gpus);
    const auto t = node::place_topology(node.gpus, graph);
    const auto& m = manifest();
    const unsigned n_gpus = static_cast<unsigned>(m.gpus.size());
    const auto facts = test::manifest_facts(m);
    unsigned compared = 0;
    for (unsigned mask = 1; mask < (1u << std::min(n_gpus, 8u)); ++mask) {
        std::vector<unsigned> free;
        for (unsigned i = 0; i < n_gpus; ++i)
            if (mask >> i & 1) free.push_back(i);
        for (unsigned n = 2; n <= 4 && n <= free.size(); ++n)
            for (node::NvlinkNeed need : {node::NvlinkNeed::Required, node::NvlinkNeed::Preferred,
                                          node::NvlinkNeed::Ignore}) {
                const test::BestPlace want = test::brute_place(facts, free, n, need);
                const node::Placement got = node::place_gpus(t, {n, free, {}, need});
                const std::string ctx = fmt::format("free {} n {} need {}", fmt::join(free, ","), n,
                                                    static_cast<int>(need));
                ++compared;
                if (need == node::NvlinkNeed::Required) {
                    ASSERT_EQ(got.satisfied, want.found) << ctx;
                    if (!want.found) continue;
                }
                ASSERT_EQ(got.gpus, want.gpus) << ctx << ": " << got.why;
            }
    }
    if (n_gpus >= 2) {
        EXPECT_GT(compared, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Simulated, Topology,
                         ::testing::Values("hgx8", "hgx8-degraded", "pcie-pairs", "dgx1", "gh200",
                                           "nvml-without-nvlink"),
                         [](const auto& p) {
                             std::string s = p.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// The command line: a choice that unequal links decide, and a refusal.
TEST(PlaceCli, ChoosesByLinksAndRefusesRequiredWithOneLine) {
    test::TempDir dir("gpubind-place");
    sim::Spec spec;
    spec.topology = "hgx8-degraded";
    spec.hcas = 2;
    sim::simulate(dir.path(), spec);
    const std::string root = " --root " + dir.path().string();
    auto o = cli("place --gpus 2 --from 2,5,6,7 --with-hcas" + root);
    ASSERT_EQ(o.code, 0) << o.out;
    EXPECT_THAT(o.out, HasSubstr("GPUs: 6,7\n"));  // 16 links; 2 and 5 have 13
    EXPECT_THAT(o.out, HasSubstr("HCAs: mlx5_1\n"));
    EXPECT_THAT(o.out, HasSubstr("Why:  GPUs 6,7: 16 NVLinks over 1 of 1 pairs"));

    test::TempDir pairs("gpubind-place-pairs");
    spec.topology = "pcie-pairs";
    spec.gpus = 4;
    spec.hcas = 0;
    sim::simulate(pairs.path(), spec);
    o = cli("place --gpus 2 --from 1,2 --nvlink required --root " + pairs.path().string() +
            " 2>&1");
    EXPECT_EQ(o.code, 5) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
    EXPECT_THAT(o.out, HasSubstr("gpubind: place: no 2 of the free GPUs are all linked by "
                                 "NVLink; the best there is: GPUs 1,2"));
    o = cli("place --gpus 2 --json --root " + pairs.path().string());
    ASSERT_EQ(o.code, 0) << o.out;
    EXPECT_EQ(json::parse(o.out)["gpus"], json::array({0, 1}));
}

}  // namespace
}  // namespace gpubind
