// What sysfs says of the node's PCI devices: where each sits (the PCIe
// bridges above it, its NUMA node and CPUs), the InfiniBand HCAs and their
// character devices, a GPU's DRM nodes, the NVMe controllers. Read under a
// sys root (Roots::sys, "/sys" on a host, <node>/sys on a simulated one);
// links are resolved inside that root, files read bounded. Nothing here
// throws for what a node may lack: an absent class directory is no devices.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpubind/node/node.hpp"

namespace gpubind::node::sysfs {

// Where the PCI device `bus_id` ("0000:18:00.0") sits: <sys>/bus/pci/devices/<id>
// is a link into <sys>/devices/pci<domain>:<bus>/<bridge>/.../<id>; the
// bridges are the path's PCI components above the device; numa_node and
// local_cpulist are the device's files. nullopt when the device is absent.
std::optional<PciPlace> pci_place(const std::filesystem::path& sys, std::string_view bus_id);

// A class device of the kernel ("uverbs0"), with the numbers of its node
// (its "dev" file, "231:192").
struct ClassDevice {
    std::string name;
    unsigned major = 0;
    unsigned minor = 0;
};

// An InfiniBand (or RoCE) HCA: <sys>/class/infiniband/<name>, whose "device"
// link names its PCI device; its verbs node (class infiniband_verbs: the
// entry whose "ibdev" is the HCA), its umad and issm nodes (class
// infiniband_mad: umad<N>, issm<N>, by "ibdev").
struct Hca {
    std::string name;        // "mlx5_0"
    std::string pci_bus_id;  // "0000:19:00.0"
    std::optional<PciPlace> place;
    std::vector<ClassDevice> verbs;  // uverbs<N> (one)
    std::vector<ClassDevice> umad;   // umad<N>, one a port
    std::vector<ClassDevice> issm;   // issm<N>, one a port
};
// Every HCA, sorted by name (name_less). An HCA whose "device" link leads to no
// PCI device (a software one) has an empty pci_bus_id and no place.
std::vector<Hca> hcas(const std::filesystem::path& sys);

// The DRM nodes of the PCI device `bus_id`: <sys>/bus/pci/devices/<id>/drm/
// card<N> and renderD<N>, sorted by name (card first).
std::vector<ClassDevice> drm_nodes(const std::filesystem::path& sys, std::string_view bus_id);

// An NVMe controller: <sys>/class/nvme/<name> and its "device" link (none for
// one over a fabric: an empty pci_bus_id, no place).
struct Nvme {
    std::string name;        // "nvme0"
    std::string pci_bus_id;  // "0000:1a:00.0"
    std::optional<PciPlace> place;
};
std::vector<Nvme> nvmes(const std::filesystem::path& sys);  // sorted by name (name_less)

// How near the nearest of some devices are to one device.
enum class Nearness { Switch, Numa, None };
std::string_view to_string(Nearness n);  // "switch", "numa", "none"

struct Nearest {
    Nearness how = Nearness::None;
    std::vector<std::size_t> which;  // indices into `others`, in order
};
// The devices of `others` nearest to `to`: those sharing a PCI bridge with it
// (the same PCIe switch or root port), else those on its NUMA node (when it
// has one), else none. Pure. A null or placeless entry of `others` is never near.
Nearest nearest(const PciPlace& to, const std::vector<const PciPlace*>& others);

// The checks every value read above passes; pure.
// A PCI address as sysfs names one: "dddd:bb:dd.f", lower-case hex, a domain
// of 4 to 8 digits (a VMD domain is "10000"), device below 0x20, function 0-7.
bool is_pci_address(std::string_view s) noexcept;
// A device name sysfs may give: [A-Za-z0-9_.-], 1 to 255 of them, not "." or "..".
bool is_name(std::string_view s) noexcept;
// A "dev" file's "MAJOR:MINOR" (a trailing newline allowed), each in the
// kernel's range (major below 4096, minor below 2^20); nullopt otherwise.
std::optional<std::pair<unsigned, unsigned>> parse_dev(std::string_view text) noexcept;
// Names in natural order: runs of digits compared as numbers ("mlx5_2" before
// "mlx5_10", "uverbs9" before "uverbs10").
bool name_less(std::string_view a, std::string_view b) noexcept;

}  // namespace gpubind::node::sysfs
