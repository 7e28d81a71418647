// What NVML says of a GPU's NVLinks, as the node description keeps it (the
// NVML helper asks once per driver state; node/nvlink.hpp builds the graph).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpubind::node {

// NVML's remote device types (nvmlIntNvLinkDeviceType_t).
inline constexpr std::uint8_t kNvlinkRemoteGpu = 0;
inline constexpr std::uint8_t kNvlinkRemoteNpu = 1;
inline constexpr std::uint8_t kNvlinkRemoteSwitch = 2;
inline constexpr std::uint8_t kNvlinkRemoteUnknown = 0xff;

// One active link.
struct NvlinkLink {
    unsigned link = 0;                                // the GPU's link number
    std::uint8_t remote_type = kNvlinkRemoteUnknown;  // kNvlinkRemote*
    std::string remote_bus_id;                        // "0000:18:00.0" (lower case, as procfs)

    bool operator==(const NvlinkLink&) const = default;
};

struct GpuNvlink {
    std::string unknown;            // why NVML could not say ("" when it answered)
    std::vector<NvlinkLink> links;  // the active links, by link number
    // NVML's P2P status over NVLink with the other GPUs: the minors it is OK
    // with, when NVML answered for every other GPU (p2p_known).
    bool p2p_known = false;
    std::vector<unsigned> p2p_ok;
    // The multi-node NVLink fabric (nvmlDeviceGetGpuFabricInfo), once the GPU
    // has registered: the cluster's UUID (32 hex digits) and the clique id;
    // "" when there is none.
    std::string fabric_cluster;
    unsigned fabric_clique = 0;

    bool operator==(const GpuNvlink&) const = default;
};

}  // namespace gpubind::node
