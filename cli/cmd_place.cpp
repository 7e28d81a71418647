// gpubind place: choose N GPUs of a free set by NVLink, PCIe and NUMA
// (node/placement.hpp holds the choice and its order).
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/placement.hpp"
#include "gpubind/node/sysfs.hpp"
#include "gpubind/node/topology.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cli {

namespace {

// No set satisfies --nvlink required.
constexpr int kExitUnplaceable = 5;

struct PlaceOptions {
    NodeOptions node;
    unsigned gpus = 0;
    std::string from, must_include, nvlink = "preferred";
    bool with_hcas = false;
    bool json = false;
};

// "0,2,5" (GPU indices) as positions in the node's order.
std::vector<unsigned> positions(const node::Node& node, const std::string& ids,
                                const char* option) {
    std::vector<unsigned> out;
    if (ids.empty()) return out;
    for (auto word : util::split(ids, ',')) {
        const auto id = util::parse_unsigned(util::trim(word));
        if (!id)
            util::throw_invalid("place", option, fmt::format("\"{}\" is not a GPU index", word));
        bool found = false;
        for (unsigned p = 0; p < node.gpus.size(); ++p)
            if (node.gpus[p].index == *id) {
                out.push_back(p);
                found = true;
            }
        if (!found)
            util::throw_invalid("place", option,
                                fmt::format("no GPU {} (the node has {})", *id, node.gpus.size()));
    }
    return out;
}

node::NvlinkNeed need_of(const std::string& s) {
    if (s == "required") return node::NvlinkNeed::Required;
    if (s == "ignore") return node::NvlinkNeed::Ignore;
    return node::NvlinkNeed::Preferred;
}

int run_place(const PlaceOptions& o) {
    node::LoadOptions load = load_options(o.node);
    load.need_nvml = true;
    const config::Config config = node_config(o.node);
    const node::NodeKnowledge k = start::know_node(config, load);
    const node::Node& node = k.node;
    const node::NvlinkGraph graph = node::nvlink_graph(node.gpus);
    if (!graph.unknown.empty() && o.nvlink != "ignore")
        fmt::print(stderr, "gpubind: warning: NVLink unknown ({}): placing by PCIe and NUMA\n",
                   graph.unknown);

    // The places discovery left empty come from sysfs, with the nearest HCAs.
    std::vector<node::sysfs::Hca> hcas;
    if (o.with_hcas) hcas = node::sysfs::hcas(config.roots.sys);
    const std::vector<node::GpuTopology> topo =
        node::read_topology(node, config.roots.sys, hcas, {});
    std::vector<node::Gpu> gpus = node.gpus;
    for (std::size_t i = 0; i < gpus.size(); ++i) gpus[i].place = topo[i].place;

    node::PlaceRequest r;
    r.count = o.gpus;
    r.from = positions(node, o.from, "--from");
    r.must_include = positions(node, o.must_include, "--must-include");
    r.nvlink = need_of(o.nvlink);
    const node::Placement p = node::place_gpus(node::place_topology(gpus, graph), r);

    std::vector<unsigned> indices;
    std::vector<std::string> uuids, near;
    for (unsigned pos : p.gpus) {
        indices.push_back(node.gpus[pos].index);
        uuids.push_back(node.gpus[pos].uuid);
    }
    if (o.with_hcas)
        for (const auto& h : hcas)
            for (unsigned pos : p.gpus)
                if (std::find(topo[pos].hcas.begin(), topo[pos].hcas.end(), h.name) !=
                    topo[pos].hcas.end()) {
                    near.push_back(h.name);
                    break;
                }

    if (o.json) {
        nlohmann::json j = {{"schema", "gpubind.place/v1"},
                            {"satisfied", p.satisfied},
                            {"gpus", indices},
                            {"uuids", uuids},
                            {"score",
                             {{"nvlinks", p.score.nvlink},
                              {"linked_pairs", p.score.linked_pairs},
                              {"pairs", p.score.pairs},
                              {"pcie_distance", p.score.pcie},
                              {"numa_nodes", p.score.numa_nodes}}},
                            {"why", p.why}};
        if (o.with_hcas) j["hcas"] = near;
        fmt::print("{}\n", j.dump(2));
    } else if (p.satisfied) {
        fmt::print("GPUs: {}\n", fmt::join(indices, ","));
        if (o.with_hcas)
            fmt::print("HCAs: {}\n",
                       near.empty() ? "none" : fmt::format("{}", fmt::join(near, ",")));
        fmt::print("Why:  {}\n", p.why);
    }
    if (!p.satisfied) {
        fmt::print(stderr, "gpubind: place: {}\n", p.why);
        return kExitUnplaceable;
    }
    return 0;
}

}  // namespace

void register_place(CLI::App& app, Action& action) {
    auto o = std::make_shared<PlaceOptions>();
    auto* cmd = app.add_subcommand(
        "place",
        "Choose GPUs for a container: NVLink first, then PCIe distance, NUMA spread, "
        "lowest indices (docs/topology.md)");
    add_node_options(*cmd, o->node);
    cmd->add_option("--gpus", o->gpus, "How many GPUs")->required()->check(CLI::Range(1u, 1024u));
    cmd->add_option("--from", o->from, "The free GPUs' indices (default: all), e.g. 0,2,3,5");
    cmd->add_option("--must-include", o->must_include, "GPU indices that must be chosen");
    cmd->add_option("--nvlink", o->nvlink,
                    "required: only GPUs all linked by NVLink (exit 5 when none are); "
                    "preferred: the most NVLinks; ignore: PCIe and NUMA only")
        ->check(CLI::IsMember({"required", "preferred", "ignore"}))
        ->default_str("preferred");
    cmd->add_flag("--with-hcas", o->with_hcas, "Also the HCAs nearest to the chosen GPUs");
    cmd->add_flag("--json", o->json, "JSON output (schema gpubind.place/v1)");
    cmd->callback([o, &action] { action = [o] { return run_place(*o); }; });
}

}  // namespace gpubind::cli
