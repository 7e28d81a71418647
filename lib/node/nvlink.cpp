// The NVLink graph and the paths between GPUs: see node/nvlink.hpp.
#include "gpubind/node/nvlink.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace gpubind::node {

namespace {

// "0000:10" of a bus id "0000:10:01.0": its domain and bus.
std::string domain_bus(const std::string& bus_id) {
    const auto colon = bus_id.rfind(':');
    return colon == std::string::npos ? bus_id : bus_id.substr(0, colon);
}

// A GPU's links, counted by remote: to GPUs by their bus id, to NVSwitches by theirs.
struct LinkCounts {
    std::map<std::string, unsigned> gpus, switches;
};

LinkCounts count_links(const GpuNvlink& nv, const std::vector<Gpu>& gpus) {
    LinkCounts c;
    for (const auto& l : nv.links) {
        const bool to_gpu_bus = std::any_of(gpus.begin(), gpus.end(), [&](const Gpu& g) {
            return g.pci_bus_id == l.remote_bus_id;
        });
        if (l.remote_type == kNvlinkRemoteSwitch)
            ++c.switches[l.remote_bus_id];
        else if (l.remote_type == kNvlinkRemoteGpu ||
                 (l.remote_type == kNvlinkRemoteUnknown && to_gpu_bus))
            ++c.gpus[l.remote_bus_id];
    }
    return c;
}

unsigned count_of(const std::map<std::string, unsigned>& m, const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? 0u : it->second;
}

// Whether NVML's P2P status lets `a` use NVLink to `b` (true when it did not say).
bool p2p_allows(const Gpu& a, const Gpu& b) {
    const GpuNvlink& nv = *a.nvlink;
    return !nv.p2p_known ||
           std::find(nv.p2p_ok.begin(), nv.p2p_ok.end(), b.minor) != nv.p2p_ok.end();
}

// Bron–Kerbosch with a pivot: every maximal clique containing `r`, with
// candidates `p` and excluded `x`.
void bron_kerbosch(const std::vector<std::vector<bool>>& adj, std::vector<unsigned>& r,
                   std::vector<unsigned> p, std::vector<unsigned> x,
                   std::vector<std::vector<unsigned>>& out) {
    if (p.empty()) {
        if (x.empty() && r.size() >= 2) {
            out.push_back(r);
            std::sort(out.back().begin(), out.back().end());
        }
        return;
    }
    // The pivot: the vertex of p or x with the most neighbours in p.
    unsigned pivot = p.front();
    std::size_t best = 0;
    for (const auto* set : {&p, &x})
        for (unsigned u : *set) {
            const auto n = static_cast<std::size_t>(
                std::count_if(p.begin(), p.end(), [&](unsigned v) { return adj[u][v]; }));
            if (n >= best) {
                best = n;
                pivot = u;
            }
        }
    const std::vector<unsigned> candidates = p;
    for (unsigned v : candidates) {
        if (adj[pivot][v]) continue;
        std::vector<unsigned> np, nx;
        for (unsigned u : p)
            if (adj[v][u]) np.push_back(u);
        for (unsigned u : x)
            if (adj[v][u]) nx.push_back(u);
        r.push_back(v);
        bron_kerbosch(adj, r, np, nx, out);
        r.pop_back();
        p.erase(std::find(p.begin(), p.end(), v));
        x.push_back(v);
    }
}

}  // namespace

PathKind pcie_path(const std::optional<PciPlace>& a, const std::optional<PciPlace>& b) {
    if (!a || !b) return PathKind::Unknown;
    const auto& ba = a->bridges;
    const auto& bb = b->bridges;
    std::size_t common = 0;
    while (common < ba.size() && common < bb.size() && ba[common] == bb[common]) ++common;
    // One switch: each sits right below a downstream port of the same switch
    // (their bridges differ in the last one at most), or on the same root port.
    if (common > 0)
        return common + 1 >= ba.size() && common + 1 >= bb.size() ? PathKind::Pix : PathKind::Pxb;
    if (!ba.empty() && !bb.empty() && domain_bus(ba[0]) == domain_bus(bb[0])) return PathKind::Phb;
    if (a->numa_node >= 0 && a->numa_node == b->numa_node) return PathKind::Node;
    return PathKind::Sys;
}

std::string path_name(const Path& path) {
    switch (path.kind) {
        case PathKind::Self:
            return "X";
        case PathKind::Nvlink:
            return fmt::format("NV{}", path.links);
        case PathKind::Pix:
            return "PIX";
        case PathKind::Pxb:
            return "PXB";
        case PathKind::Phb:
            return "PHB";
        case PathKind::Node:
            return "NODE";
        case PathKind::Sys:
            return "SYS";
        case PathKind::Unknown:
            break;
    }
    return "N/A";
}

unsigned pcie_rank(PathKind kind) {
    switch (kind) {
        case PathKind::Self:
        case PathKind::Nvlink:
            return 0;
        case PathKind::Pix:
            return 1;
        case PathKind::Pxb:
            return 2;
        case PathKind::Phb:
            return 3;
        case PathKind::Node:
            return 4;
        case PathKind::Sys:
            return 5;
        case PathKind::Unknown:
            break;
    }
    return 6;
}

std::string pcie_root(const PciPlace& place) {
    if (place.bridges.empty()) return {};
    return "pci" + domain_bus(place.bridges[0]);
}

std::vector<std::vector<unsigned>> maximal_cliques(const std::vector<std::vector<bool>>& adjacent) {
    std::vector<std::vector<unsigned>> out;
    std::vector<unsigned> r, p;
    for (unsigned i = 0; i < adjacent.size(); ++i) p.push_back(i);
    bron_kerbosch(adjacent, r, p, {}, out);
    std::sort(out.begin(), out.end());
    return out;
}

NvlinkGraph nvlink_graph(const std::vector<Gpu>& gpus) {
    NvlinkGraph g;
    const std::size_t n = gpus.size();
    g.size = n;
    g.known.assign(n, false);
    g.links.assign(n, std::vector<unsigned>(n, 0));
    g.cliques_of.assign(n, {});
    g.fabric.assign(n, {});
    std::vector<LinkCounts> counts(n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& nv = gpus[i].nvlink;
        if (!nv || !nv->unknown.empty()) {
            if (g.unknown.empty())
                g.unknown = fmt::format("{}: {}", gpu_name(gpus[i]),
                                        nv ? nv->unknown : std::string("NVML did not answer"));
            continue;
        }
        g.known[i] = true;
        counts[i] = count_links(*nv, gpus);
        if (!nv->fabric_cluster.empty())
            g.fabric[i] = fmt::format("{}.{}", nv->fabric_cluster, nv->fabric_clique);
    }
    std::vector<std::vector<bool>> adjacent(n, std::vector<bool>(n, false));
    for (std::size_t a = 0; a < n; ++a)
        for (std::size_t b = a + 1; b < n; ++b) {
            if (!g.known[a] || !g.known[b]) continue;
            if (!p2p_allows(gpus[a], gpus[b]) || !p2p_allows(gpus[b], gpus[a])) continue;
            unsigned links = std::min(count_of(counts[a].gpus, gpus[b].pci_bus_id),
                                      count_of(counts[b].gpus, gpus[a].pci_bus_id));
            for (const auto& [sw, k] : counts[a].switches)
                links += std::min(k, count_of(counts[b].switches, sw));
            g.links[a][b] = g.links[b][a] = links;
            adjacent[a][b] = adjacent[b][a] = links > 0;
        }
    g.cliques = maximal_cliques(adjacent);
    for (unsigned id = 0; id < g.cliques.size(); ++id)
        for (unsigned member : g.cliques[id]) g.cliques_of[member].push_back(id);
    return g;
}

Path gpu_path(const NvlinkGraph& graph, const std::vector<Gpu>& gpus, std::size_t a,
              std::size_t b) {
    if (a == b) return {PathKind::Self, 0};
    if (graph.links[a][b] > 0) return {PathKind::Nvlink, graph.links[a][b]};
    return {pcie_path(gpus[a].place, gpus[b].place), 0};
}

}  // namespace gpubind::node
