// What the node holds: the driver, its GPUs, device nodes and files.
// Discovery reads the configured roots only; it never writes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpubind/config/capabilities.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/node/nvlink_facts.hpp"

namespace gpubind::node {

// NVIDIA's fixed major and minors; the others are dynamic (proc/devices).
inline constexpr unsigned kNvidiaMajor = 195;
inline constexpr unsigned kNvidiactlMinor = 255;
inline constexpr unsigned kModesetMinor = 254;

struct DeviceNode {
    std::string path;       // where it appears in a container: "/dev/nvidia0"
    std::string host_path;  // where it is on this host (under the dev root)
    unsigned major = 0;
    unsigned minor = 0;
    mode_t mode = 0666;  // permission bits of the host node
};

// Where a PCI device sits, from sysfs (node/sysfs.hpp).
struct PciPlace {
    // The PCI bridges above the device, from the root port down
    // ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0"); two devices that share
    // one sit under the same PCIe switch (or root port).
    std::vector<std::string> bridges;
    int numa_node = -1;   // -1: the kernel does not know (one node, or no NUMA)
    std::string cpulist;  // local_cpulist as sysfs has it ("0-15,32-47"), "" if absent

    bool operator==(const PciPlace&) const = default;
};

struct MigDevice {
    unsigned gpu_index = 0;  // parent GPU's index
    unsigned index = 0;      // position among the parent's MIG devices ("G:M")
    unsigned gi = 0;         // GPU instance id
    unsigned ci = 0;         // compute instance id
    std::string uuid;        // "MIG-..." (from NVML; empty without it)
    std::string gi_access;   // proc .../gpu<minor>/mig/gi<G>/access
    std::string ci_access;   // proc .../gpu<minor>/mig/gi<G>/ci<C>/access
    DeviceNode gi_cap;       // /dev/nvidia-caps/nvidia-cap<N>
    DeviceNode ci_cap;
};

struct Gpu {
    unsigned index = 0;  // enumeration order (PCI bus id order, as NVML)
    unsigned minor = 0;  // /dev/nvidia<minor>
    std::string model;
    std::string uuid;        // "GPU-..."
    std::string pci_bus_id;  // "0000:3b:00.0"
    std::string vbios;
    std::string bus_type;
    bool excluded = false;
    std::string proc_dir;  // proc/driver/nvidia/gpus/<bus id>
    DeviceNode node;
    std::vector<MigDevice> mig;
    // From NVML, empty when it is not available.
    std::string brand;
    std::string compute_capability;   // "9.0"
    std::uint64_t memory = 0;         // bytes (NVML's total); 0: unknown
    std::optional<PciPlace> place;    // from the sys root; empty when sysfs lacks it
    std::optional<GpuNvlink> nvlink;  // from NVML; empty when NVML was not asked or failed
};
// "GPU 0 (GPU-<uuid>)", "GPU 0" without a UUID: how logs and errors name one.
std::string gpu_name(const Gpu& gpu);

// One device of a family ([family.<name>] in the config): an HCA with its
// uverbs node, a GPU's DRM nodes, one nvidia-fs node.
struct FamilyDevice {
    std::string name;                // "mlx5_0", "card1", "nvidia-fs3", "gdrdrv"
    std::string pci_bus_id;          // HCAs and DRM: the PCI device; "" otherwise
    std::optional<PciPlace> place;   // HCAs: where it sits (affine selection)
    std::vector<DeviceNode> nodes;   // given with the device
    std::vector<DeviceNode> extras;  // given only when asked (an HCA's umad nodes)
    // Links made beside the nodes in a container: path -> target, relative
    // ("/dev/dri/by-path/pci-0000:18:00.0-card" -> "../card1").
    std::vector<std::pair<std::string, std::string>> links;
};

// What the node has of one family.
struct FamilyNodes {
    std::string name;                   // the family's name in the config
    std::vector<FamilyDevice> devices;  // in a stable order (name, or the GPUs' order)
    std::vector<DeviceNode> shared;     // given with any of its devices ("rdma_cm")
    std::vector<std::string>
        files;  // its files that exist under the driver root ("/etc/cufile.json")
};

enum class FileKind { Library, Binary, Ipc, Firmware };

struct DriverFile {
    FileKind kind = FileKind::Library;
    std::string name;       // soname (libraries) or file name
    std::string host_path;  // as found: the cache's path, the binary, the socket
    std::string real_path;  // host_path with every symlink resolved (within the driver root)
    config::Capabilities caps = 0;  // what brings it
    bool compat32 = false;          // a 32-bit library
};

struct Node {
    config::Roots roots;
    std::string driver_version;  // "550.54.15"
    std::string cuda_version;    // "12.4" from NVML, empty without it
    std::vector<Gpu> gpus;
    std::vector<DeviceNode>
        control;  // nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset (those present)
    std::vector<DeviceNode>
        mig_control;  // nvidia-caps config and monitor nodes (when MIG is present)
    // IMEX channels: /dev/nvidia-caps-imex-channels/channel<n> (the minor is n,
    // the major "nvidia-caps-imex-channels" in proc/devices), by channel number.
    std::vector<DeviceNode> imex_channels;
    // The device families of config.families the node has (node/families.hpp).
    std::vector<FamilyNodes> families;
    std::vector<DriverFile> files;
    std::vector<std::string> warnings;  // optional things that were missing or odd
    // The driver's per-cgroup GPU memory limit (NVML's nvmlDeviceSetMemoryLimits_v1, CUDA
    // 13.4+ drivers): whether NVML offers it, else why not ("" before NVML is asked).
    bool memory_limits = false;
    std::string memory_limits_why;

    const DeviceNode* control_node(std::string_view name) const;  // "nvidiactl", "nvidia-uvm", ...
};

// Whether root's own stored description vouches for the node's file at
// `host_path` as it is now (an IPC, a family's file): asked only for one
// whose owner, or a directory's above it, this process cannot tell from
// another user's (host_owner: Unknown). Unset: nothing is vouched for.
using Vouch = std::function<bool(const std::string& host_path)>;

struct DiscoverOptions {
    bool nvml = true;  // ask NVML for what procfs lacks
    std::chrono::milliseconds nvml_timeout{5000};
    Vouch vouched;  // load_node: the stored description's (issue 44, F1)
};

// Reads the node through config.roots. Missing required pieces (no driver
// version, a GPU whose node is missing or has the wrong type or numbers, a
// corrupt cache) throw Error naming the path; missing optional files are
// recorded in warnings. IMEX channels are the channel<n> entries of
// dev/nvidia-caps-imex-channels that are character devices with the driver's
// major and minor n; any other entry there is a warning and left out.
Node discover(const config::Config& config, const DiscoverOptions& options = {});

// Asks NVML (the node's libnvidia-ml.so.1, in a child with `timeout`) for the
// CUDA version, each GPU's brand and compute capability and the MIG devices'
// UUIDs, and fills them in. Returns "" when NVML answered, else why not (also
// added to node.warnings); never throws for NVML's failures.
std::string apply_nvml(Node& node, std::chrono::milliseconds timeout);

// The host's /proc/driver/nvidia files a container's proc view copies, read
// apart so that make_plan stays pure.
struct ProcFiles {
    std::string version;                             // driver/nvidia/version
    std::string params;                              // driver/nvidia/params (empty if missing)
    std::map<std::string, std::string> information;  // gpus/<bus id>/information, by <bus id>
};
// Reads them under node.roots.proc (size capped); a missing version file
// throws Error, a missing params or information file reads as empty.
ProcFiles read_proc_files(const Node& node);
// A GPU's directory name under proc/driver/nvidia/gpus.
std::string proc_dir_name(const Gpu& gpu);

}  // namespace gpubind::node
