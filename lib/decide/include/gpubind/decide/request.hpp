// What a container asks for, read from its spec the way device plugins and
// docker write it, and whether the node can give it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/config/capabilities.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::decide {

enum class RequestSource {
    None,          // not a GPU container: leave it alone
    Env,           // NVIDIA_VISIBLE_DEVICES
    VolumeMounts,  // /dev/null mounts under /var/run/nvidia-container-devices/
    LegacyCuda,    // CUDA_VERSION set, NVIDIA_REQUIRE_CUDA unset, no NVIDIA_VISIBLE_DEVICES
    Explicit,      // gpubind configure --device
};

struct Requirement {
    std::string variable;    // "NVIDIA_REQUIRE_CUDA"
    std::string expression;  // "cuda>=12.0 brand=tesla,driver>=535"
};

// What a container asks of one device family ([family.<name>]).
struct FamilyRequest {
    std::string family;              // its name
    bool all = false;                // every device (DRM: those of the container's GPUs)
    bool affine = false;             // the devices nearest to the container's GPUs
    std::vector<std::string> names;  // devices by name ("mlx5_0")
    bool extras = false;             // with their extras (an HCA's umad nodes)
    bool by_capability = false;      // asked only by a driver capability: never refused
    std::string asked_by;            // "NVIDIA_GDS=enabled", for messages

    bool operator==(const FamilyRequest&) const = default;
};

// A placement the container was promised (decide/placement_check.hpp).
enum class PlacementNeed : unsigned char { None, Nvlink };

struct Request {
    RequestSource source = RequestSource::None;
    node::DeviceIds devices;
    config::Capabilities caps = config::kCapDefault;
    std::vector<Requirement> requirements;   // empty when disabled
    node::DeviceIds mig_config;              // NVIDIA_MIG_CONFIG_DEVICES (privileged only)
    node::DeviceIds mig_monitor;             // NVIDIA_MIG_MONITOR_DEVICES (privileged only)
    std::vector<std::string> imex_channels;  // NVIDIA_IMEX_CHANNELS / imex/<n> mounts:
                                             // {"all"} or channel numbers ("7"), no duplicates
    std::vector<FamilyRequest> families;     // in the config's order
    PlacementNeed placement = PlacementNeed::None;  // gpubind.io/placement, GPUBIND_PLACEMENT
    std::string placement_asked_by;                 // "GPUBIND_PLACEMENT=nvlink", for messages
    ShareRequest share;                             // a part of each GPU (decide/share.hpp)

    bool gpu_container() const { return source != RequestSource::None; }
};

// Reads the request from the spec under the policy, with what it asks of
// `families` (each family's variables, its selecting variable, its device
// mounts, its capabilities) and, for a GPU container, the placement it
// declares (read_placement, placement_check.hpp). A request that policy refuses throws
// Error(ECANCELED, "refuse request", <container>, <why>); a malformed one
// Error(EINVAL, ...).
Request read_request(const oci::Spec& spec, const config::Policy& policy,
                     const std::vector<config::Family>& families);
// The same without device families.
inline Request read_request(const oci::Spec& spec, const config::Policy& policy) {
    return read_request(spec, policy, {});
}

// The largest IMEX channel number: a channel is a device minor (20 bits).
inline constexpr unsigned long kMaxImexChannel = (1ul << 20) - 1;

// NVIDIA_IMEX_CHANNELS's syntax: a comma list of decimal channel numbers
// (0 to kMaxImexChannel; "007" means 7 and is returned as "7"), "all" (every
// channel the node has; it wins over numbers: the result is {"all"}), and
// "none", "void" or empty fields, which add nothing. Duplicates are dropped,
// the first order kept. Anything else throws Error(EINVAL, "read request",
// `where`, "<what>: '<field>' is not an IMEX channel number (0 to 1048575)").
std::vector<std::string> parse_imex_channels(std::string_view value, std::string_view what,
                                             const std::string& where);

// Checks every requirement against the node for each selected GPU (space
// separates alternatives, comma joins conditions, separate variables must all
// hold). Throws Error(ECANCELED, "check requirement", <variable>, <why>).
void check_requirements(const Request& request, const node::Node& node,
                        const node::Selection& selection);

// Whether deciding for `request` needs a fact only NVML has: a requirement on
// cuda, arch or brand, or a device named by MIG UUID. A malformed requirement
// throws as check_requirements does.
bool needs_nvml_facts(const Request& request);

}  // namespace gpubind::decide
