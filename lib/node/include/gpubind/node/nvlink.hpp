// The node's NVLink graph and the paths between its GPUs, as `nvidia-smi topo
// -m` names them: built from what the node description keeps (NVML's answer,
// node/nvlink_facts.hpp, and sysfs's PCI places), never from a new question.
//
// NVLinks between two GPUs: the links of one whose remote end is the other
// (NVML's remote type GPU, or an unknown type at the other's bus id), counted
// from both ends and the smaller count taken; plus, for each NVSwitch both
// reach (remote type NVSwitch, same remote bus id), the smaller of their
// numbers of links to it: GPUs on NVSwitches are linked all-to-all, with the
// links they both have to each switch. A pair NVML's P2P status says cannot
// use NVLink (p2p_known and the other not in p2p_ok) counts no link.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpubind/node/node.hpp"

namespace gpubind::node {

// The strongest path between two devices, best first.
enum class PathKind : std::uint8_t {
    Self,     // X: the same device
    Nvlink,   // NV<n>: n NVLinks
    Pix,      // PIX: at most one PCIe switch (their bridges differ in the last at most)
    Pxb,      // PXB: several PCIe switches, below one root port (no host bridge)
    Phb,      // PHB: two root ports of one host bridge
    Node,     // NODE: two host bridges of one NUMA node
    Sys,      // SYS: across NUMA nodes
    Unknown,  // N/A: a device not in sysfs
};

struct Path {
    PathKind kind = PathKind::Unknown;
    unsigned links = 0;  // NVLinks when kind is Nvlink
};

// The PCIe path between two places (never Self or Nvlink). Two root ports
// belong to one host bridge when they sit on the same bus (domain:bus); the
// NUMA node decides NODE or SYS, an unknown one (-1) on either side is SYS.
PathKind pcie_path(const std::optional<PciPlace>& a, const std::optional<PciPlace>& b);
// nvidia-smi's name: "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A".
std::string path_name(const Path& path);
// PCIe distance for placement: PIX 1, PXB 2, PHB 3, NODE 4, SYS 5, unknown 6.
unsigned pcie_rank(PathKind kind);
// "pci<domain>:<bus>" of the host bridge above a place (its root port's
// domain and bus), as Kubernetes' pcieRoot attribute names it; "" when the
// device sits on no root port.
std::string pcie_root(const PciPlace& place);

struct NvlinkGraph {
    std::size_t size = 0;                      // GPUs, in the node's order (positions)
    std::vector<bool> known;                   // per position: NVML answered for its NVLinks
    std::string unknown;                       // why not, for the first GPU unknown ("" if none)
    std::vector<std::vector<unsigned>> links;  // [a][b] NVLinks (0: none, or unknown)
    // The maximal NVLink cliques (every member linked to every other), two
    // members or more, each ascending, the list in lexicographic order; a
    // clique's id is its position here.
    std::vector<std::vector<unsigned>> cliques;
    std::vector<std::vector<unsigned>> cliques_of;  // per position: the ids of its cliques
    std::vector<std::string> fabric;  // per position: "<cluster uuid>.<clique id>", "" if none
};

// The graph of `gpus` (a node's GPUs, in its order).
NvlinkGraph nvlink_graph(const std::vector<Gpu>& gpus);

// The strongest path between the GPUs at positions a and b.
Path gpu_path(const NvlinkGraph& graph, const std::vector<Gpu>& gpus, std::size_t a, std::size_t b);

// The maximal cliques of the undirected graph `adjacent` ([a][b] true when
// linked; the diagonal ignored), two members or more, sorted as above.
std::vector<std::vector<unsigned>> maximal_cliques(const std::vector<std::vector<bool>>& adjacent);

}  // namespace gpubind::node
