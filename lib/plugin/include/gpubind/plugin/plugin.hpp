// gpubind-device-plugin's decisions as plain functions of the node and the
// settings, testable without gRPC (the service glue is server.hpp): the
// devices the kubelet is told of, their health, the preferred allocation
// (placement.hpp's order: NVLink, then PCIe, then NUMA) and what Allocate
// answers for each device-list strategy.
#pragma once

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
// The annotation the cdi-annotations strategy writes (CDI's "cdi.k8s.io/" prefix).
inline constexpr const char* kCdiAnnotation = "cdi.k8s.io/gpubind-device-plugin";

// One device the kubelet is told of: a whole GPU.
struct Device {
    std::string id;         // by the id strategy: the GPU's UUID or its index
    unsigned position = 0;  // the GPU's position in the node's list
    int numa_node = -1;     // -1: unknown (no TopologyInfo)
    bool healthy = true;
    std::string why;  // why it is unhealthy ("" when healthy)

    bool operator==(const Device&) const = default;
};

// The node's GPUs as devices, in the node's order. Throws Error (bad input)
// for the id strategy "uuid" on a GPU without a UUID, and for a MIG strategy
// other than "none" (not served yet).
std::vector<Device> device_list(const Node& node, const DevicePluginConfig& settings);

// Marks each device healthy or not as the node is now: Unhealthy when the
// driver is gone (no driver/nvidia/version under the proc root) or its GPU's
// device node is missing or no longer the driver's character device (checked
// without following links). Returns whether any device's health changed.
bool update_health(std::vector<Device>& devices, const Node& node);

// The preferred `size` devices of `available`, holding `must_include`, as
// place_gpus chooses them. Throws Error (bad input) naming an id that is not
// a device, a size that is not 1..available, must_include not in available or
// more than size.
std::vector<std::string> preferred_allocation(const Node& node, const std::vector<Device>& devices,
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

    bool operator==(const Allocation&) const = default;
};

// The answer for `ids` under the settings' device-list strategies (CDI names
// of config.cdi.kind: "<kind>=<id>", the names `gpubind cdi generate` writes
// for a GPU's index and UUID). Throws Error (refused) naming every id that is
// unknown or unhealthy, and (bad input) for an empty or repeated list.
Allocation allocate(const Config& config, const DevicePluginConfig& settings,
                    const std::vector<Device>& devices, const std::vector<std::string>& ids);

}  // namespace gpubind::plugin
