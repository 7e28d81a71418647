// gpubind-device-plugin's decisions as plain functions of the node and the
// settings, testable without gRPC (the service glue is server.hpp): the
// devices the kubelet is told of, their health, the preferred allocation
// (placement.hpp's order: NVLink, then PCIe, then NUMA) and what Allocate
// answers for each device-list strategy.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/placement.hpp"

namespace gpubind::plugin {

inline constexpr const char* kHealthy = "Healthy";
inline constexpr const char* kUnhealthy = "Unhealthy";
inline constexpr const char* kApiVersion = "v1beta1";
inline constexpr const char* kKubeletSocket = "kubelet.sock";
// Where the volume-mounts strategy mounts /dev/null, one file per device id.
inline constexpr const char* kDeviceMountDir = "/var/run/nvidia-container-devices";
// Where a share's /dev/null mounts go (decide::kShareMountDir, which the hook
// reads): <dir>/memory/<bytes>, <dir>/compute/<percent>.
inline constexpr const char* kShareMountDir = "/var/run/gpubind/share";
// The annotation the cdi-annotations strategy writes (CDI's "cdi.k8s.io/" prefix).
inline constexpr const char* kCdiAnnotation = "cdi.k8s.io/gpubind-device-plugin";

// One device the kubelet is told of: a whole GPU, or one MIG device.
struct Device {
    std::string id;         // by the id strategy: the GPU's UUID or its index; a MIG
                            // device's UUID ("MIG-...") or "<GPU index>:<MIG index>"
    unsigned position = 0;  // the GPU's (a MIG device's parent's) position in the node's list
    int mig = -1;           // a MIG device's position among its GPU's; -1: a whole GPU
    int numa_node = -1;     // -1: unknown (no TopologyInfo)
    // A share of a GPU ([device-plugin] sharing): "<GPU id>::<part>", the
    // GPU's replica or GiB unit `part`, giving `memory` bytes and `compute`
    // percent of it (0: not a part of that).
    config::SharingMode sharing = config::SharingMode::None;
    std::string gpu_id;  // the GPU's id (by the id strategy)
    int part = -1;       // -1: not a share
    std::uint64_t memory = 0;
    unsigned compute = 0;
    bool healthy = true;
    std::string why;  // why it is unhealthy ("" when healthy)

    bool operator==(const Device&) const = default;
};

// MIG profiles as NVML names them ("1g.10gb"), by MIG device UUID.
using MigProfiles = std::map<std::string, std::string>;

// One resource the plugin registers, on a socket of its own.
struct Resource {
    std::string name;    // "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    std::string socket;  // its socket's file name in the plugin directory
    std::vector<Device> devices;

    bool operator==(const Resource&) const = default;
};

// The resources to register and their devices, in the node's order, by the
// MIG strategy:
//  - none: settings.resource_name with one device per GPU, MIG on or not.
//  - single: without MIG devices anywhere, as none; else every GPU must have
//    MIG devices (MIG on), all of one profile: they are settings.resource_name's
//    devices. Anything else is refused (Error, bad input, naming the GPU or the
//    profiles), as NVIDIA's plugin refuses such a node.
//  - mixed: settings.resource_name with the GPUs that have no MIG devices,
//    then, by profile name, "<resource's domain>/mig-<profile>" (socket
//    "<socket's stem>-mig-<profile>.sock") with that profile's MIG devices.
// With settings.sharing (MIG strategy none, whole GPUs only):
//  - replicas: settings.resource_name with settings.replicas devices per GPU,
//    "<GPU id>::<r>" (r from 0), each 1/replicas of the GPU's memory (NVML's,
//    in whole MiB) and 100/replicas % of its compute;
//  - memory: settings.memory_resource_name with a device "<GPU id>::<i>" per
//    GiB of the GPU's memory (i from 0), 1 GiB each.
// A GPU whose memory NVML did not report, or with MIG devices, is an Error
// (bad input) naming it.
// A MIG device's profile comes from `profiles` (by its UUID); one without a
// profile, or with a profile that is not [a-z0-9.+-] (1 to 32), is an Error.
// Throws Error (bad input) for the id strategy "uuid" on a device without a UUID.
std::vector<Resource> resources(const node::Node& node, const config::DevicePluginConfig& settings,
                                const MigProfiles& profiles = {});

// A critical Xid on a GPU (by its device minor): the Xid and its device
// node's identity then (0, 0 when it was missing). The GPU stays unhealthy
// until that node is made anew (another inode: the driver reloaded or the GPU
// reset), which is how a GPU comes back.
struct XidMark {
    unsigned xid = 0;  // the last critical one
    // The whole GPU, or only these MIG instances (GPU instance, compute
    // instance) of it, each with its Xid.
    bool whole = false;
    std::map<std::pair<unsigned, unsigned>, unsigned> instances;
    dev_t dev = 0;
    ino_t ino = 0;
};
using XidMarks = std::map<unsigned, XidMark>;  // by GPU minor

// Records an Xid event of the GPU of `minor`: of the MIG instance
// `instance` (GPU instance, compute instance) when the GPU has a MIG device
// of that instance, else of the whole GPU (an Xid NVML could not attribute
// to one instance, or on a GPU without MIG). Returns false (nothing
// recorded) for an Xid in settings.ignored_xids or a minor that is no GPU of
// the node.
bool record_xid(XidMarks& marks, const node::Node& node, unsigned minor, unsigned xid,
                const config::DevicePluginConfig& settings,
                std::optional<std::pair<unsigned, unsigned>> instance = std::nullopt);
// Drops the marks of GPUs whose device node is a new one now. Returns whether
// any was dropped.
bool clear_recovered_xids(XidMarks& marks, const node::Node& node);

// Marks each device healthy or not as the node is now: Unhealthy when the
// driver is gone (no driver/nvidia/version under the proc root), its GPU's
// device node is missing or no longer the driver's character device (checked
// without following links), or an Xid mark covers it: a whole GPU any mark
// of its GPU, a MIG device a mark of its GPU as a whole or of its own
// instance. Returns whether any device's health changed.
bool update_health(std::vector<Device>& devices, const node::Node& node,
                   const XidMarks& marks = {});

// The preferred `size` devices of `available`, holding `must_include`, as
// place_gpus chooses them (MIG devices: must_include, then the others in the
// order given; shares: see below). Throws Error (bad input) naming an id that is not
// a device, a size that is not 1..available, must_include not in available or
// more than size.
// Shares, each of a GPU of its own for replicas, all of one GPU for memory
// units (the GPU of must_include, else the one with most free units that has
// `size`); a share is the lowest free part of its GPU. Replicas of one GPU
// are chosen for size 1 where most are free, else by place_gpus among the
// GPUs with a free one. What cannot be so is an Error (bad input).
std::vector<std::string> preferred_allocation(const node::Node& node,
                                              const std::vector<Device>& devices,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size);

struct Mount {
    std::string container_path;
    std::string host_path;
    bool read_only = true;

    bool operator==(const Mount&) const = default;
};

// What Allocate answers for one container.
struct Allocation {
    std::map<std::string, std::string> envs;
    std::map<std::string, std::string> annotations;
    std::vector<Mount> mounts;
    std::vector<std::string> cdi_devices;  // qualified CDI names
    // Not for the kubelet: lines for the log, each worth saying once (a GPU
    // no HCA is near, with rdma = "affine").
    std::vector<std::string> notes;

    bool operator==(const Allocation&) const = default;
};

// The answer for `ids` under the settings' device-list strategies (CDI names
// of config.cdi.kind: "<kind>=<id>", the names `gpubind cdi generate` writes
// for a GPU's index and UUID). With settings.rdma affine, also the HCAs of
// the node's rdma family nearest the devices' GPUs (node::affine), after the
// GPUs: as CDI names of [family.rdma]'s cdi-kind ("<kind>=mlx5_0", the names
// `gpubind cdi generate` writes) for the CDI strategies, GPUBIND_RDMA=<names>
// for envvar, and /dev/null mounted at <kDeviceMountDir>/rdma/<name> for
// volume-mounts (the family mounts the hook reads when it honours the
// mounts, and then not the variable); none for a GPU no HCA is near (a note). Throws Error
// (refused) naming every id that is unknown or unhealthy, and (bad input) for an empty or repeated
// list. Shares name their GPUs (each once) by the strategies and add the share
// request decide/share.hpp reads: replicas GPUBIND_GPU_MEMORY=<MiB>MiB and
// GPUBIND_GPU_COMPUTE=<percent> (the smallest replica's, each GPU's limit),
// memory units GPUBIND_GPU_MEMORY=<units>GiB. Two replicas of one GPU, or
// memory units of two GPUs, are refused (Error, refused) naming them.
Allocation allocate(const config::Config& config, const config::DevicePluginConfig& settings,
                    const node::Node& node, const std::vector<Device>& devices,
                    const std::vector<std::string>& ids);

}  // namespace gpubind::plugin
