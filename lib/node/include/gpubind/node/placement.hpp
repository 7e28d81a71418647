// Choosing N GPUs of a free set (`gpubind place`, and a device plugin's
// allocator): a pure function of the node's NVLink graph and PCI places.
//
// The order a choice is optimal under, criterion by criterion (the first that
// differs decides):
//   1. NVLink bandwidth: the NVLinks of every chosen pair, summed (more is
//      better; not counted with NvlinkNeed::Ignore). With Required only sets
//      whose every pair is linked are eligible.
//   2. PCIe distance: every chosen pair's pcie_rank (PIX 1, PXB 2, PHB 3,
//      NODE 4, SYS 5, unknown 6), summed (less is better).
//   3. NUMA spread: the distinct NUMA nodes of the chosen GPUs (an unknown
//      node counts as one; fewer is better).
//   4. The lowest indices: the chosen positions, ascending, compared
//      lexicographically.
// The search is exhaustive over the subsets that hold must_include (pruned
// where Required rules a GPU out), so the choice is the optimum and the same
// for the same input.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpubind/node/node.hpp"
#include "gpubind/node/nvlink.hpp"

namespace gpubind::node {

enum class NvlinkNeed { Required, Preferred, Ignore };

// What placement reads of the node, by GPU position.
struct PlaceTopology {
    std::vector<std::vector<unsigned>> nvlinks;  // [a][b] NVLinks
    std::vector<std::vector<unsigned>> pcie;     // [a][b] pcie_rank of their PCIe path
    std::vector<int> numa;                       // NUMA node, -1 unknown
};
PlaceTopology place_topology(const std::vector<Gpu>& gpus, const NvlinkGraph& graph);

struct PlaceRequest {
    unsigned count = 1;                  // N
    std::vector<unsigned> from;          // the free GPUs' positions; empty: every GPU
    std::vector<unsigned> must_include;  // positions that must be chosen (free or not)
    NvlinkNeed nvlink = NvlinkNeed::Preferred;
};

struct PlaceScore {
    unsigned nvlink = 0;        // criterion 1 (0 with Ignore)
    unsigned pcie = 0;          // criterion 2
    unsigned numa_nodes = 0;    // criterion 3
    unsigned linked_pairs = 0;  // pairs joined by NVLink (reported, not a criterion)
    unsigned pairs = 0;
};

struct Placement {
    std::vector<unsigned> gpus;  // the chosen positions, ascending
    PlaceScore score;
    // With Required: false when no eligible set exists; `gpus` is then the
    // best set under Preferred (what there is), or empty when none.
    bool satisfied = true;
    std::string why;  // one line: the score and what the runner-up lost on
};

// Chooses. Throws Error (bad input, exit 3) for a count of 0 or above the
// free GPUs, positions out of range, a must_include beyond the count.
Placement place_gpus(const PlaceTopology& topology, const PlaceRequest& request);

// The score of a given set under `need` (exposed for tests).
PlaceScore score_of(const PlaceTopology& topology, const std::vector<unsigned>& gpus,
                    NvlinkNeed need);
// Whether `a` comes before `b` in the order above (a is the better choice).
bool better(const PlaceScore& a, const std::vector<unsigned>& a_gpus, const PlaceScore& b,
            const std::vector<unsigned>& b_gpus);

}  // namespace gpubind::node
