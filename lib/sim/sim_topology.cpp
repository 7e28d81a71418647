// The simulated node's NVLink topology (Spec::topology): the facts file the
// fake NVML answers from and the manifest's known matrix.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fake_node.h"
#include "sim_writer.hpp"

namespace gpubind::sim {

namespace {

constexpr unsigned kGpuType = 0;     // NVML_NVLINK_DEVICE_TYPE_GPU
constexpr unsigned kSwitchType = 2;  // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr unsigned kHgxLinks = 18;
constexpr unsigned kPairLinks = 12;
constexpr unsigned kGh200Clique = 7;

// HGX: link l of a GPU goes to switch kHgxSwitchOf[l].
constexpr unsigned kHgxSwitchOf[kHgxLinks] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3};
constexpr const char* kHgxSwitches[] = {"0000:05:00.0", "0000:06:00.0", "0000:07:00.0",
                                        "0000:08:00.0"};
constexpr const char* kGh200Switches[] = {"0000:0a:00.0", "0000:0b:00.0"};

// DGX-1's hybrid cube mesh: the links between each pair (a < b).
struct Pair {
    unsigned a, b, links;
};
constexpr Pair kDgx1[] = {{0, 1, 1}, {0, 2, 1}, {0, 3, 2}, {0, 4, 2}, {1, 2, 2}, {1, 3, 1},
                          {1, 5, 2}, {2, 3, 2}, {2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1},
                          {4, 7, 2}, {5, 6, 2}, {5, 7, 1}, {6, 7, 2}};

struct Link {
    unsigned gpu, link, type;
    std::string remote;
};

bool hgx(const std::string& t) {
    return t == "hgx8" || t == "hgx8-degraded";
}

// Whether link l of GPU g is up on the degraded board.
bool hgx_link_up(const std::string& t, unsigned g, unsigned l) {
    if (t != "hgx8-degraded") return true;
    if (g == 2 || g == 5) return kHgxSwitchOf[l] != 0;
    if (g == 6) return l >= 2;
    return true;
}

}  // namespace

unsigned topology_gpus(const std::string& topology) {
    if (hgx(topology) || topology == "dgx1") return 8;
    if (topology == "gh200") return 1;
    return 0;
}

namespace detail {

void check_topology(const Spec& spec) {
    const std::string& t = spec.topology;
    if (t.empty()) return;
    if (std::find(std::begin(kTopologies), std::end(kTopologies), t) == std::end(kTopologies))
        util::throw_invalid(
            "simulate", "simulated node spec",
            fmt::format("no topology \"{}\" (one of {})", t,
                        fmt::join(std::begin(kTopologies), std::end(kTopologies), ", ")));
    const unsigned need = topology_gpus(t);
    if (need != 0 && spec.gpus != need)
        util::throw_invalid("simulate", "simulated node spec",
                            fmt::format("topology {} has {} GPU{}, not {}", t, need,
                                        need == 1 ? "" : "s", spec.gpus));
    if (t == "pcie-pairs" && spec.gpus < 2)
        util::throw_invalid("simulate", "simulated node spec",
                            "topology pcie-pairs needs 2 GPUs or more");
}

void Writer::topology() {
    const std::string& t = manifest_.spec.topology;
    const auto& gpus = manifest_.gpus;
    const std::size_t n = gpus.size();
    ManifestTopology& top = manifest_.topology;
    top.nvlinks.assign(n, std::vector<unsigned>(n, 0));
    top.fabric.assign(n, "");
    std::vector<Link> links;
    std::string facts;

    if (hgx(t)) {
        // Each pair: the links both have to each switch, the smaller count.
        std::vector<std::map<unsigned, unsigned>> per_switch(n);
        for (unsigned g = 0; g < n; ++g)
            for (unsigned l = 0; l < kHgxLinks; ++l)
                if (hgx_link_up(t, g, l)) {
                    links.push_back({g, l, kSwitchType, kHgxSwitches[kHgxSwitchOf[l]]});
                    ++per_switch[g][kHgxSwitchOf[l]];
                }
        for (unsigned a = 0; a < n; ++a)
            for (unsigned b = 0; b < n; ++b)
                if (a != b)
                    for (unsigned s = 0; s < 4; ++s)
                        top.nvlinks[a][b] += std::min(per_switch[a][s], per_switch[b][s]);
        std::vector<unsigned> all;
        for (unsigned g = 0; g < n; ++g) all.push_back(g);
        top.cliques = {all};
    } else if (t == "pcie-pairs") {
        for (unsigned a = 0; a + 1 < n; a += 2) {
            for (unsigned l = 0; l < kPairLinks; ++l) {
                links.push_back({a, l, kGpuType, gpus[a + 1].pci_bus_id});
                links.push_back({a + 1, l, kGpuType, gpus[a].pci_bus_id});
            }
            top.nvlinks[a][a + 1] = top.nvlinks[a + 1][a] = kPairLinks;
            top.cliques.push_back({a, a + 1});
        }
    } else if (t == "dgx1") {
        std::vector<unsigned> next(n, 0);
        for (const Pair& p : kDgx1) {
            for (unsigned k = 0; k < p.links; ++k) {
                links.push_back({p.a, next[p.a]++, kGpuType, gpus[p.b].pci_bus_id});
                links.push_back({p.b, next[p.b]++, kGpuType, gpus[p.a].pci_bus_id});
            }
            top.nvlinks[p.a][p.b] = top.nvlinks[p.b][p.a] = p.links;
        }
        top.cliques = {{0, 1, 2, 3}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {4, 5, 6, 7}};
    } else if (t == "gh200") {
        for (unsigned l = 0; l < kHgxLinks; ++l)
            links.push_back({0, l, kSwitchType, kGh200Switches[l % 2]});
        const std::string key = "gpubind-sim-fabric:" + manifest_.spec.driver_version;
        const std::string uuid =
            fmt::format("{:016x}{:016x}", fake_hash64(key.c_str(), 5), fake_hash64(key.c_str(), 6));
        facts += fmt::format("fabric {} {} {}\n", gpus[0].pci_bus_id, uuid, kGh200Clique);
        top.fabric[0] = fmt::format("{}.{}", uuid, kGh200Clique);
    } else if (t == "nvml-without-nvlink") {
        facts += "unsupported\n";
        top.nvlink_known = false;
    }

    for (const Link& l : links)
        facts +=
            fmt::format("link {} {} {} {}\n", gpus[l.gpu].pci_bus_id, l.link, l.type, l.remote);
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = a + 1; b < n; ++b)
            if (top.nvlinks[a][b] > 0)
                facts += fmt::format("p2p {} {}\n", gpus[a].pci_bus_id, gpus[b].pci_bus_id);
    if (!t.empty()) write(at("gpubind-fake-nvml/nvlink"), facts, 0644);

    // The matrix: NVLinks, else the PCIe path as this layout makes it (each
    // switch under a host bridge of its own, on NUMA node k for switch k).
    auto pcie = [](const std::string& sw_a, int numa_a, const std::string& sw_b, int numa_b) {
        if (sw_a == sw_b) return std::string("PIX");
        return std::string(numa_a == numa_b ? "NODE" : "SYS");
    };
    for (unsigned a = 0; a < n; ++a) {
        std::vector<std::string> row;
        for (unsigned b = 0; b < n; ++b) {
            if (a == b)
                row.push_back("X");
            else if (top.nvlinks[a][b] > 0)
                row.push_back(fmt::format("NV{}", top.nvlinks[a][b]));
            else
                row.push_back(pcie(gpus[a].switch_port, gpus[a].numa_node, gpus[b].switch_port,
                                   gpus[b].numa_node));
        }
        for (const auto& h : manifest_.hcas)
            row.push_back(pcie(gpus[a].switch_port, gpus[a].numa_node, h.switch_port, h.numa_node));
        top.matrix.push_back(std::move(row));
    }
}

}  // namespace detail
}  // namespace gpubind::sim
