// The node's topology: see node/topology.hpp.
#include "gpubind/node/topology.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpubind {

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

}  // namespace gpubind
