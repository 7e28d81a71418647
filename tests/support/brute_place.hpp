// Choosing N GPUs by trying every subset: the order placement.hpp documents,
// written out again for the tests to judge place_gpus (and the device
// plugin's GetPreferredAllocation) by. NVLinks summed over the chosen pairs
// (more is better; not counted with Ignore, and with Required every pair
// must be linked), then the pairs' PCIe ranks summed (less), then the NUMA
// nodes (fewer), then the indices (lowest first).
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "gpubind/node/placement.hpp"

namespace gpubind::test {

// What the search reads of a node, by GPU index: from the simulator's
// manifest, or from a hand-made topology.
struct PlaceFacts {
    std::function<unsigned(unsigned, unsigned)> nvlinks;  // links between two GPUs
    std::function<long(unsigned, unsigned)> pcie;         // their PCIe path's rank
    std::function<int(unsigned)> numa;                    // a GPU's NUMA node
};

struct BestPlace {
    bool found = false;  // false: no subset qualifies
    std::vector<unsigned> gpus;
    std::tuple<long, long, long> key{};
};

// The best `n` of `free` that hold `must` (when given).
inline BestPlace brute_place(const PlaceFacts& f, const std::vector<unsigned>& free, unsigned n,
                             node::NvlinkNeed need, std::optional<unsigned> must = std::nullopt) {
    BestPlace best;
    for (unsigned mask = 0; mask < (1u << free.size()); ++mask) {
        if (static_cast<unsigned>(__builtin_popcount(mask)) != n) continue;
        std::vector<unsigned> set;
        for (unsigned i = 0; i < free.size(); ++i)
            if (mask >> i & 1) set.push_back(free[i]);
        std::sort(set.begin(), set.end());
        if (must && std::find(set.begin(), set.end(), *must) == set.end()) continue;
        long nv = 0, pcie = 0;
        bool all = true;
        std::set<int> numa;
        for (std::size_t i = 0; i < set.size(); ++i) {
            numa.insert(f.numa(set[i]));
            for (std::size_t j = i + 1; j < set.size(); ++j) {
                const unsigned links = f.nvlinks(set[i], set[j]);
                nv += links;
                all &= links > 0;
                pcie += f.pcie(set[i], set[j]);
            }
        }
        if (need == node::NvlinkNeed::Required && !all) continue;
        if (need == node::NvlinkNeed::Ignore) nv = 0;
        const std::tuple<long, long, long> key{-nv, pcie, static_cast<long>(numa.size())};
        if (!best.found || key < best.key || (key == best.key && set < best.gpus))
            best = {true, set, key};
    }
    return best;
}

// The manifest's facts on the simulator's layout: PIX (1) on one switch
// port, NODE (4) on one NUMA node, else SYS (5).
template <class Manifest>
PlaceFacts manifest_facts(const Manifest& m) {
    return {[&m](unsigned a, unsigned b) { return m.topology.nvlinks[a][b]; },
            [&m](unsigned a, unsigned b) -> long {
                if (m.gpus[a].switch_port == m.gpus[b].switch_port) return 1;
                return m.gpus[a].numa_node == m.gpus[b].numa_node ? 4 : 5;
            },
            [&m](unsigned a) { return m.gpus[a].numa_node; }};
}

}  // namespace gpubind::test
