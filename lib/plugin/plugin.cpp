// The device plugin's decisions: see plugin/plugin.hpp.
#include "gpubind/plugin/plugin.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/node/nvlink.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::plugin {

namespace {

constexpr const char* kAllocate = "allocate devices";
constexpr const char* kPrefer = "prefer devices";

// Why the GPU's node is not usable now, or "".
std::string node_problem(const Gpu& gpu) {
    struct stat st {};
    if (::lstat(gpu.node.host_path.c_str(), &st) != 0)
        return fmt::format("its device node {} is missing", gpu.node.host_path);
    if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != gpu.node.major ||
        minor(st.st_rdev) != gpu.node.minor)
        return fmt::format("{} is not the character device {}:{}", gpu.node.host_path,
                           gpu.node.major, gpu.node.minor);
    return {};
}

// The device's position in `devices` for `id`, or nullptr.
const Device* find(const std::vector<Device>& devices, const std::string& id) {
    auto it =
        std::find_if(devices.begin(), devices.end(), [&](const Device& d) { return d.id == id; });
    return it == devices.end() ? nullptr : &*it;
}

}  // namespace

std::string_view strategy_name(DeviceListStrategy s);

std::vector<Device> device_list(const Node& node, const DevicePluginConfig& settings) {
    if (settings.mig_strategy != MigStrategy::None)
        throw_invalid("list devices", "",
                      fmt::format("mig-strategy \"{}\" is not served yet (only \"none\")",
                                  strategy_name(settings.mig_strategy)));
    std::vector<Device> out;
    for (std::size_t i = 0; i < node.gpus.size(); ++i) {
        const Gpu& gpu = node.gpus[i];
        Device d;
        d.position = static_cast<unsigned>(i);
        if (settings.id_strategy == IdStrategy::Uuid) {
            if (gpu.uuid.empty())
                throw_invalid("list devices", gpu.proc_dir,
                              gpu_name(gpu) + " has no UUID (id-strategy \"uuid\")");
            d.id = gpu.uuid;
        } else {
            d.id = std::to_string(gpu.index);
        }
        d.numa_node = gpu.place ? gpu.place->numa_node : -1;
        out.push_back(std::move(d));
    }
    return out;
}

bool update_health(std::vector<Device>& devices, const Node& node) {
    const std::string version = (node.roots.proc / "driver/nvidia/version").string();
    struct stat st {};
    const bool driver = ::lstat(version.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    bool changed = false;
    for (Device& d : devices) {
        std::string why;
        if (!driver)
            why = fmt::format("the driver is gone ({} is missing)", version);
        else if (d.position >= node.gpus.size())
            why = "its GPU is no longer on the node";
        else
            why = node_problem(node.gpus[d.position]);
        const bool healthy = why.empty();
        if (healthy != d.healthy) changed = true;
        d.healthy = healthy;
        d.why = std::move(why);
    }
    return changed;
}

std::vector<std::string> preferred_allocation(const Node& node, const std::vector<Device>& devices,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size) {
    auto position = [&](const std::string& id) {
        const Device* d = find(devices, id);
        if (!d) throw_invalid(kPrefer, "", fmt::format("no device \"{}\"", id));
        return d->position;
    };
    if (size <= 0 || static_cast<std::size_t>(size) > available.size())
        throw_invalid(kPrefer, "",
                      fmt::format("allocation_size {} is not 1..{} (the available devices)", size,
                                  available.size()));
    if (must_include.size() > static_cast<std::size_t>(size))
        throw_invalid(kPrefer, "",
                      fmt::format("{} devices must be included in an allocation of {}",
                                  must_include.size(), size));
    PlaceRequest request;
    request.count = static_cast<unsigned>(size);
    request.nvlink = NvlinkNeed::Preferred;
    std::set<std::string> seen;
    for (const auto& id : available) {
        if (!seen.insert(id).second)
            throw_invalid(kPrefer, "", fmt::format("device \"{}\" is available twice", id));
        request.from.push_back(position(id));
    }
    for (const auto& id : must_include) {
        if (!seen.count(id))
            throw_invalid(kPrefer, "",
                          fmt::format("device \"{}\" must be included but is not available", id));
        const unsigned p = position(id);
        if (std::find(request.must_include.begin(), request.must_include.end(), p) ==
            request.must_include.end())
            request.must_include.push_back(p);
    }
    std::sort(request.from.begin(), request.from.end());
    const auto topology = place_topology(node.gpus, nvlink_graph(node.gpus));
    const Placement placement = place_gpus(topology, request);
    std::vector<std::string> out;
    for (unsigned p : placement.gpus)
        for (const Device& d : devices)
            if (d.position == p) out.push_back(d.id);
    return out;
}

Allocation allocate(const Config& config, const DevicePluginConfig& settings,
                    const std::vector<Device>& devices, const std::vector<std::string>& ids) {
    if (ids.empty()) throw_invalid(kAllocate, "", "no device ids");
    std::vector<std::string> unknown, unhealthy;
    std::set<std::string> seen;
    for (const auto& id : ids) {
        if (!seen.insert(id).second)
            throw_invalid(kAllocate, "", fmt::format("device \"{}\" is asked for twice", id));
        const Device* d = find(devices, id);
        if (!d)
            unknown.push_back(id);
        else if (!d->healthy)
            unhealthy.push_back(id);
    }
    if (!unknown.empty() || !unhealthy.empty()) {
        std::vector<std::string> parts;
        if (!unknown.empty())
            parts.push_back(fmt::format("unknown device{} {}", unknown.size() == 1 ? "" : "s",
                                        fmt::join(unknown, ", ")));
        if (!unhealthy.empty())
            parts.push_back(fmt::format("unhealthy device{} {}", unhealthy.size() == 1 ? "" : "s",
                                        fmt::join(unhealthy, ", ")));
        throw_refused(kAllocate, settings.resource_name, fmt::format("{}", fmt::join(parts, "; ")));
    }
    Allocation a;
    std::vector<std::string> names;
    for (const auto& id : ids) names.push_back(config.cdi.kind + "=" + id);
    for (DeviceListStrategy s : settings.device_list) {
        switch (s) {
            case DeviceListStrategy::CdiCri:
                a.cdi_devices = names;
                break;
            case DeviceListStrategy::CdiAnnotations:
                a.annotations[kCdiAnnotation] = fmt::format("{}", fmt::join(names, ","));
                break;
            case DeviceListStrategy::Envvar:
                a.envs["NVIDIA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(ids, ","));
                break;
            case DeviceListStrategy::VolumeMounts:
                for (const auto& id : ids)
                    a.mounts.push_back(
                        {std::string(kDeviceMountDir) + "/" + id, "/dev/null", true});
                break;
        }
    }
    return a;
}

}  // namespace gpubind::plugin
