// The device plugin's settings ([device-plugin] in config.toml), read by the
// project's config reader with the rest of the file (parse_config_with_plugin).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/config/config.hpp"

namespace gpubind::config {

// How Allocate tells the runtime which devices a container gets (NVIDIA's
// plugin's names): CDI names in the response's CDI field, CDI names in
// cdi.k8s.io annotations, NVIDIA_VISIBLE_DEVICES, or /dev/null mounts under
// /var/run/nvidia-container-devices/<id>.
enum class DeviceListStrategy { CdiCri, CdiAnnotations, Envvar, VolumeMounts };
// How devices are named to the kubelet: by UUID ("GPU-...") or by index ("0").
enum class IdStrategy { Uuid, Index };
// MIG: none (whole GPUs only, MIG or not), single (every GPU has MIG on with
// one profile: its MIG devices are the resource), mixed (a resource
// "<domain>/mig-<profile>" per MIG profile, whole GPUs without MIG as the
// resource). plugin.hpp's resources() has the rules.
enum class MigStrategy { None, Single, Mixed };
// RDMA with the GPUs: none, or affine (Allocate also names the HCAs of the
// rdma family nearest the allocated GPUs: their CDI names, or GPUBIND_RDMA).
enum class RdmaStrategy { None, Affine };
// GPU shares (issue 48): none (one device per GPU); replicas (each GPU offered
// as `replicas` devices, each an equal part of its memory and compute); memory
// (one device per GiB of each GPU's memory, the resource memory_resource_name).
// plugin.hpp's resources() and allocate() have the rules.
enum class SharingMode { None, Replicas, Memory };

struct DevicePluginConfig {
    std::string resource_name = "nvidia.com/gpu";
    std::vector<DeviceListStrategy> device_list = {DeviceListStrategy::CdiCri};
    IdStrategy id_strategy = IdStrategy::Uuid;
    MigStrategy mig_strategy = MigStrategy::None;
    // The kubelet's directory: kubelet.sock and the plugin's own socket.
    std::filesystem::path plugin_dir = "/var/lib/kubelet/device-plugins";
    std::string socket_name = "gpubind.sock";  // the plugin's socket in plugin_dir
    unsigned health_interval_ms = 5000;        // how often device health is checked
    // Xids that never make a GPU unhealthy: by default those NVIDIA's plugin
    // ignores, errors of an application rather than of the GPU.
    std::vector<unsigned> ignored_xids = {13, 31, 43, 45, 68, 109};
    RdmaStrategy rdma = RdmaStrategy::None;
    SharingMode sharing = SharingMode::None;
    unsigned replicas = 0;  // sharing replicas: devices per GPU, 2 to 100
    // sharing memory: the resource, one device per GiB
    std::string memory_resource_name = "gpubind.io/gpu-memory";

    bool operator==(const DevicePluginConfig&) const = default;
};

// "cdi-cri", "cdi-annotations", "envvar", "volume-mounts"; "uuid", "index";
// "none", "single", "mixed"; "none", "affine"; "none", "replicas", "memory".
std::string_view strategy_name(DeviceListStrategy s);
std::string_view strategy_name(IdStrategy s);
std::string_view strategy_name(MigStrategy s);
std::string_view strategy_name(RdmaStrategy s);
std::string_view strategy_name(SharingMode s);

struct ConfigWithPlugin {
    Config config;
    DevicePluginConfig plugin;
};
// parse_config, also keeping the [device-plugin] table (its keys are checked
// by parse_config too: an unknown key or bad value is an Error naming it).
ConfigWithPlugin parse_config_with_plugin(std::string_view toml, const std::string& what);
// The config the plugin uses: as load_effective_config picks the file, read once.
ConfigWithPlugin load_effective_config_with_plugin(const std::filesystem::path& explicit_path);

}  // namespace gpubind::config
