// The node's topology as `gpubind info --topology` shows it: where each GPU
// sits on PCIe and NUMA, and which HCAs and NVMe controllers are nearest to
// it (node/sysfs.hpp's nearest()).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/node/node.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/sysfs.hpp"

namespace gpubind::node {

struct GpuTopology {
    unsigned index = 0;
    std::string uuid, pci_bus_id;
    std::optional<PciPlace> place;  // empty: not in <sys>/bus/pci/devices
    sysfs::Nearness hca_nearness = sysfs::Nearness::None;
    std::vector<std::string> hcas;  // the nearest HCAs' names, in the HCAs' order
    sysfs::Nearness nvme_nearness = sysfs::Nearness::None;
    std::vector<std::string> nvmes;  // the nearest NVMe controllers' names
};

// Each GPU of the node, in the node's order: its place (Gpu::place where
// discovery filled it, else sysfs::pci_place under `sys`) and the nearest of
// `hcas` and of `nvmes`. Reads sysfs only for the places discovery left empty.
std::vector<GpuTopology> read_topology(const Node& node, const std::filesystem::path& sys,
                                       const std::vector<sysfs::Hca>& hcas,
                                       const std::vector<sysfs::Nvme>& nvmes);
// The same with the node's HCAs and NVMe controllers read under `sys`.
std::vector<GpuTopology> read_topology(const Node& node, const std::filesystem::path& sys);

// The bridge that names a device's PCIe switch: the second bridge (the
// switch's upstream port) when there are two or more, else the root port,
// else "" (a device on the root complex).
std::string switch_of(const PciPlace& place);

// The topology as JSON (`gpubind info --topology --json`), a stable shape:
//   {"schema": "gpubind.topology/v1",
//    "gpus": [{"index": 0, "uuid": "GPU-...", "pci_bus_id": "0000:18:00.0",
//              "numa_node": 0, "cpulist": "0-15", "bridges": ["0000:15:01.0", ...],
//              "switch": "0000:16:00.0",
//              "nearest_hcas": {"by": "switch", "names": ["mlx5_0"]},
//              "nearest_nvmes": {"by": "numa", "names": ["nvme0"]}}],
//    "hcas": [{"name": "mlx5_0", "pci_bus_id": "0000:19:00.0", "numa_node": 0,
//              "bridges": [...], "switch": "0000:16:00.0", "uverbs": "uverbs0"}],
//    "nvmes": [{"name": "nvme0", "pci_bus_id": "0000:1a:00.0", "numa_node": 0,
//               "bridges": [...], "switch": "0000:16:00.0"}]}
// numa_node is -1 when the kernel does not know it; "cpulist" is "" when
// sysfs has none. A device not in sysfs (no place) has numa_node, cpulist,
// bridges and switch null, "switch" is null too for a device on the root
// complex; "by" is "switch", "numa" or "none" (names then []); "uverbs" is
// null for an HCA without a verbs node, pci_bus_id "" for one without a PCI
// device.
nlohmann::json to_json(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                       const std::vector<sysfs::Nvme>& nvmes);

// The topology as text: one block per GPU (NUMA node, CPU list, PCIe path
// from the root port down, nearest HCAs and NVMe and how they are near),
// then the HCAs and NVMe controllers, one line each. `sys` names the sys
// root in "not in <sys>/bus/pci/devices".
std::string to_text(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                    const std::vector<sysfs::Nvme>& nvmes, const std::filesystem::path& sys);

// Version 2 (`gpubind info --topology --json`): version 1's fields, with
// "schema": "gpubind.topology/v2" and
//   "columns": ["GPU0", ..., "mlx5_0", ...]  (the matrix's columns: GPUs, then HCAs)
//   "nvlink": {"known": true, "unknown": null | "GPU 0 (...): why",
//              "cliques": [[0, 1, ...], ...]}  (maximal NVLink cliques, GPU indices;
//              a clique's id is its position)
// and in each GPU
//   "matrix": ["X", "NV18", ..., "PIX", ...]  (its row: nvidia-smi topo -m's cells)
//   "attributes": {"pcieRoot": "pci0000:10" | null, "numaNode": [0] | [],
//                  "nvlinkCliques": [0, ...] | null (NVLink unknown),
//                  "fabricClique": "<cluster uuid>.<clique id>" | null}
// "attributes" are what a DRA driver publishes for the GPU in a ResourceSlice
// (docs/topology.md).
nlohmann::json to_json(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                       const std::vector<sysfs::Nvme>& nvmes, const Node& node,
                       const NvlinkGraph& graph);

// The matrix as `nvidia-smi topo -m` prints it: a header row (GPU<i>, then
// the HCAs, "CPU Affinity", "NUMA Affinity"), a row per GPU, the legend, the
// NVLink cliques, and why NVLink is unknown where it is.
std::string matrix_text(const std::vector<GpuTopology>& gpus, const std::vector<sysfs::Hca>& hcas,
                        const Node& node, const NvlinkGraph& graph);

}  // namespace gpubind::node
