// The node's topology: see node/topology.hpp.
#include "gpubind/node/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace gpubind::node {

namespace fs = std::filesystem;

namespace {

// The nearest of `devices` (HCAs or NVMe controllers) to `place`.
template <typename Device>
void nearest_of(const PciPlace& place, const std::vector<Device>& devices, sysfs::Nearness& how,
                std::vector<std::string>& names) {
    std::vector<const PciPlace*> places;
    places.reserve(devices.size());
    for (const auto& d : devices) places.push_back(d.place ? &*d.place : nullptr);
    const sysfs::Nearest near = sysfs::nearest(place, places);
    how = near.how;
    for (const std::size_t i : near.which) names.push_back(devices[i].name);
}

// A place's fields, null where there is none.
void topology_place_json(nlohmann::json& j, const std::optional<PciPlace>& place) {
    if (!place) {
        j["numa_node"] = nullptr;
        j["cpulist"] = nullptr;
        j["bridges"] = nullptr;
        j["switch"] = nullptr;
        return;
    }
    j["numa_node"] = place->numa_node;
    j["cpulist"] = place->cpulist;
    j["bridges"] = place->bridges;
    const std::string sw = switch_of(*place);
    if (sw.empty())
        j["switch"] = nullptr;
    else
        j["switch"] = sw;
}

nlohmann::json topology_nearest_json(sysfs::Nearness how, const std::vector<std::string>& names) {
    return {{"by", std::string(sysfs::to_string(how))}, {"names", names}};
}

std::string topology_join(const std::vector<std::string>& names, std::string_view sep) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : std::string(sep)) + n;
    return out;
}

// "mlx5_0, mlx5_1 (under the same PCIe switch)", or why none is near.
std::string topology_nearest_text(sysfs::Nearness how, const std::vector<std::string>& names,
                                  std::size_t count, std::string_view what) {
    switch (how) {
        case sysfs::Nearness::Switch:
            return topology_join(names, ", ") + " (under the same PCIe switch or root port)";
        case sysfs::Nearness::Numa:
            return topology_join(names, ", ") + " (on the same NUMA node)";
        case sysfs::Nearness::None:
            break;
    }
    if (count == 0) return fmt::format("none (no {})", what);
    return fmt::format("none (no {} under its PCIe switch or on its NUMA node)", what);
}

std::string topology_place_line(const std::string& bus_id, const std::optional<PciPlace>& place) {
    if (bus_id.empty()) return "no PCI device";
    if (!place) return bus_id + ", not in sysfs";
    std::string line = bus_id;
    line += place->numa_node >= 0 ? fmt::format(", NUMA node {}", place->numa_node)
                                  : std::string(", NUMA node unknown");
    const std::string sw = switch_of(*place);
    line += sw.empty() ? std::string(", on the root complex") : ", switch " + sw;
    return line;
}

}  // namespace

std::vector<GpuTopology> read_topology(const Node& node, const fs::path& sys,
                                       const std::vector<sysfs::Hca>& hcas,
                                       const std::vector<sysfs::Nvme>& nvmes) {
    std::vector<GpuTopology> out;
    out.reserve(node.gpus.size());
    for (const auto& gpu : node.gpus) {
        GpuTopology t;
        t.index = gpu.index;
        t.uuid = gpu.uuid;
        t.pci_bus_id = gpu.pci_bus_id;
        t.place = gpu.place ? gpu.place : sysfs::pci_place(sys, gpu.pci_bus_id);
        if (t.place) {
            nearest_of(*t.place, hcas, t.hca_nearness, t.hcas);
            nearest_of(*t.place, nvmes, t.nvme_nearness, t.nvmes);
        }
        out.push_back(std::move(t));
    }
    return out;
}

std::vector<GpuTopology> read_topology(const Node& node, const fs::path& sys) {
    return read_topology(node, sys, sysfs::hcas(sys), sysfs::nvmes(sys));
}

std::string switch_of(const PciPlace& place) {
    if (place.bridges.size() >= 2) return place.bridges[1];
    if (place.bridges.size() == 1) return place.bridges[0];
    return {};
}

nlohmann::json to_json(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                       const std::vector<sysfs::Nvme>& nvmes) {
    nlohmann::json jg = nlohmann::json::array();
    for (const auto& g : gpus) {
        nlohmann::json j = {{"index", g.index}, {"uuid", g.uuid}, {"pci_bus_id", g.pci_bus_id}};
        topology_place_json(j, g.place);
        j["nearest_hcas"] = topology_nearest_json(g.hca_nearness, g.hcas);
        j["nearest_nvmes"] = topology_nearest_json(g.nvme_nearness, g.nvmes);
        jg.push_back(std::move(j));
    }
    nlohmann::json jh = nlohmann::json::array();
    for (const auto& h : hcas) {
        nlohmann::json j = {{"name", h.name}, {"pci_bus_id", h.pci_bus_id}};
        topology_place_json(j, h.place);
        if (h.verbs.empty())
            j["uverbs"] = nullptr;
        else
            j["uverbs"] = h.verbs.front().name;
        jh.push_back(std::move(j));
    }
    nlohmann::json jn = nlohmann::json::array();
    for (const auto& n : nvmes) {
        nlohmann::json j = {{"name", n.name}, {"pci_bus_id", n.pci_bus_id}};
        topology_place_json(j, n.place);
        jn.push_back(std::move(j));
    }
    return {{"schema", "gpubind.topology/v1"}, {"gpus", jg}, {"hcas", jh}, {"nvmes", jn}};
}

std::string to_text(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                    const std::vector<sysfs::Nvme>& nvmes, const fs::path& sys) {
    std::string out;
    for (const auto& g : gpus) {
        if (!out.empty()) out += "\n";
        out += g.uuid.empty() ? fmt::format("GPU {}\n", g.index)
                              : fmt::format("GPU {} ({})\n", g.index, g.uuid);
        if (!g.place) {
            out += fmt::format("  Bus location:   {}, not in {}\n", g.pci_bus_id,
                               (sys / "bus/pci/devices").string());
            continue;
        }
        const PciPlace& p = *g.place;
        out += fmt::format("  Bus location:   {}\n", g.pci_bus_id);
        out += fmt::format("  NUMA node:      {}\n",
                           p.numa_node >= 0 ? std::to_string(p.numa_node) : "unknown");
        out += fmt::format("  CPUs:           {}\n", p.cpulist.empty() ? "unknown" : p.cpulist);
        std::vector<std::string> path = p.bridges;
        path.push_back(g.pci_bus_id);
        out += fmt::format("  PCIe path:      {}{}\n", topology_join(path, " > "),
                           p.bridges.empty() ? " (on the root complex)" : "");
        out += fmt::format("  Nearest HCAs:   {}\n",
                           topology_nearest_text(g.hca_nearness, g.hcas, hcas.size(), "HCA"));
        out += fmt::format("  Nearest NVMe:   {}\n",
                           topology_nearest_text(g.nvme_nearness, g.nvmes, nvmes.size(), "NVMe"));
    }
    if (!out.empty()) out += "\n";
    out += hcas.empty() ? "HCAs:             none\n" : "HCAs:\n";
    for (const auto& h : hcas)
        out += fmt::format("  {}: {}{}\n", h.name, topology_place_line(h.pci_bus_id, h.place),
                           h.verbs.empty() ? ", no verbs node" : ", " + h.verbs.front().name);
    out += nvmes.empty() ? "NVMe:             none\n" : "NVMe:\n";
    for (const auto& n : nvmes)
        out += fmt::format("  {}: {}\n", n.name, topology_place_line(n.pci_bus_id, n.place));
    return out;
}

namespace {

// Row `a` of the matrix: the GPUs, then the HCAs.
std::vector<std::string> matrix_row(const std::vector<GpuTopology>& gpus,
                                    const std::vector<sysfs::Hca>& hcas, const Node& node,
                                    const NvlinkGraph& graph, std::size_t a) {
    std::vector<std::string> row;
    for (std::size_t b = 0; b < gpus.size(); ++b) {
        const Path p = a == b                  ? Path{PathKind::Self, 0}
                       : graph.links[a][b] > 0 ? Path{PathKind::Nvlink, graph.links[a][b]}
                                               : Path{pcie_path(gpus[a].place, gpus[b].place), 0};
        row.push_back(path_name(p));
    }
    for (const auto& h : hcas) row.push_back(path_name({pcie_path(gpus[a].place, h.place), 0}));
    (void)node;
    return row;
}

std::vector<unsigned> clique_members(const NvlinkGraph& graph, const Node& node, unsigned id) {
    std::vector<unsigned> out;
    for (unsigned m : graph.cliques[id]) out.push_back(node.gpus[m].index);
    return out;
}

}  // namespace

nlohmann::json to_json(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                       const std::vector<sysfs::Nvme>& nvmes, const Node& node,
                       const NvlinkGraph& graph) {
    nlohmann::json j = to_json(gpus, hcas, nvmes);
    j["schema"] = "gpubind.topology/v2";
    nlohmann::json columns = nlohmann::json::array();
    for (const auto& g : gpus) columns.push_back(fmt::format("GPU{}", g.index));
    for (const auto& h : hcas) columns.push_back(h.name);
    j["columns"] = columns;
    nlohmann::json cliques = nlohmann::json::array();
    for (unsigned id = 0; id < graph.cliques.size(); ++id)
        cliques.push_back(clique_members(graph, node, id));
    j["nvlink"] = {{"known", graph.unknown.empty()},
                   {"unknown", graph.unknown.empty() ? nlohmann::json(nullptr)
                                                     : nlohmann::json(graph.unknown)},
                   {"cliques", cliques}};
    for (std::size_t a = 0; a < gpus.size(); ++a) {
        nlohmann::json& g = j["gpus"][a];
        g["matrix"] = matrix_row(gpus, hcas, node, graph, a);
        nlohmann::json attrs;
        const auto& place = gpus[a].place;
        const std::string root = place ? pcie_root(*place) : std::string();
        attrs["pcieRoot"] = root.empty() ? nlohmann::json(nullptr) : nlohmann::json(root);
        attrs["numaNode"] = place && place->numa_node >= 0
                                ? nlohmann::json::array({place->numa_node})
                                : nlohmann::json::array();
        attrs["nvlinkCliques"] =
            graph.known[a] ? nlohmann::json(graph.cliques_of[a]) : nlohmann::json(nullptr);
        attrs["fabricClique"] =
            graph.fabric[a].empty() ? nlohmann::json(nullptr) : nlohmann::json(graph.fabric[a]);
        g["attributes"] = std::move(attrs);
    }
    return j;
}

std::string matrix_text(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                        const Node& node, const NvlinkGraph& graph) {
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> header = {""};
    for (const auto& g : gpus) header.push_back(fmt::format("GPU{}", g.index));
    for (const auto& h : hcas) header.push_back(h.name);
    header.push_back("CPU Affinity");
    header.push_back("NUMA Affinity");
    rows.push_back(header);
    for (std::size_t a = 0; a < gpus.size(); ++a) {
        std::vector<std::string> row = {fmt::format("GPU{}", gpus[a].index)};
        for (auto& cell : matrix_row(gpus, hcas, node, graph, a)) row.push_back(std::move(cell));
        const auto& place = gpus[a].place;
        row.push_back(place && !place->cpulist.empty() ? place->cpulist : "N/A");
        row.push_back(place && place->numa_node >= 0 ? std::to_string(place->numa_node) : "N/A");
        rows.push_back(std::move(row));
    }
    std::string out;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            const std::size_t width = c == 0 ? 8 : std::max<std::size_t>(8, row[c].size() + 2);
            line += row[c] + std::string(width > row[c].size() ? width - row[c].size() : 1, ' ');
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out += line + "\n";
    }
    out +=
        "\nLegend:\n"
        "  X    = Self\n"
        "  SYS  = PCIe and the interconnect between NUMA nodes\n"
        "  NODE = PCIe and the interconnect between host bridges of one NUMA node\n"
        "  PHB  = PCIe and a host bridge\n"
        "  PXB  = several PCIe switches, no host bridge\n"
        "  PIX  = at most one PCIe switch\n"
        "  NV#  = # NVLinks\n";
    if (!graph.unknown.empty()) {
        out += fmt::format("\nNVLink: unknown ({})\n", graph.unknown);
    } else if (graph.cliques.empty()) {
        out += "\nNVLink cliques: none\n";
    } else {
        out += "\nNVLink cliques:\n";
        for (unsigned id = 0; id < graph.cliques.size(); ++id)
            out += fmt::format("  {}: GPUs {}\n", id,
                               fmt::join(clique_members(graph, node, id), ", "));
    }
    bool any_fabric = false;
    for (std::size_t a = 0; a < gpus.size(); ++a)
        if (!graph.fabric[a].empty()) {
            if (!any_fabric) out += "\nNVLink fabric:\n";
            any_fabric = true;
            out += fmt::format("  GPU{}: clique {}\n", gpus[a].index, graph.fabric[a]);
        }
    return out;
}

}  // namespace gpubind::node
