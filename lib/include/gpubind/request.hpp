// What a container asks for, read from its spec the way device plugins and
// docker write it, and whether the node can give it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/capabilities.hpp"
#include "gpubind/config.hpp"
#include "gpubind/devices.hpp"
#include "gpubind/node.hpp"
#include "gpubind/oci.hpp"

namespace gpubind {

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

struct Request {
    RequestSource source = RequestSource::None;
    DeviceIds devices;
    Capabilities caps = kCapDefault;
    std::vector<Requirement> requirements;   // empty when disabled
    DeviceIds mig_config;                    // NVIDIA_MIG_CONFIG_DEVICES (privileged only)
    DeviceIds mig_monitor;                   // NVIDIA_MIG_MONITOR_DEVICES (privileged only)
    std::vector<std::string> imex_channels;  // NVIDIA_IMEX_CHANNELS / imex/<n> mounts

    bool gpu_container() const { return source != RequestSource::None; }
};

// Reads the request from the spec under the policy. A request that policy
// refuses throws Error(ECANCELED, "refuse request", <container>, <why>);
// a malformed one Error(EINVAL, ...).
Request read_request(const oci::Spec& spec, const Policy& policy);

// Checks every requirement against the node for each selected GPU (space
// separates alternatives, comma joins conditions, separate variables must all
// hold). Throws Error(ECANCELED, "check requirement", <variable>, <why>).
void check_requirements(const Request& request, const Node& node, const Selection& selection);

// How the image lays out its libraries, read from the rootfs by descriptor.
// The defaults are the lib64 layout.
struct Image {
    std::filesystem::path lib_dir = "/usr/lib64";  // or "/usr/lib/x86_64-linux-gnu"
    std::filesystem::path lib32_dir = "/usr/lib";  // or "/usr/lib/i386-linux-gnu"; empty: none
    std::filesystem::path bin_dir = "/usr/bin";
};
// Debian multiarch layout when the image has /etc/debian_version or a
// /usr/lib/<triplet> directory, else lib64. Lookups stay inside the rootfs
// (safe_path). Throws Error when the rootfs cannot be opened.
Image inspect_image(const std::filesystem::path& rootfs);

}  // namespace gpubind
