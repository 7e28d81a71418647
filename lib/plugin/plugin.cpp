// The device plugin's decisions: see plugin/plugin.hpp.
#include "gpubind/plugin/plugin.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/node/families.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"
#include "share.hpp"

namespace gpubind::plugin {

namespace {

constexpr const char* kAllocate = "allocate devices";
constexpr const char* kRdmaFamily = "rdma";
constexpr const char* kRdmaVariable = "GPUBIND_RDMA";
constexpr const char* kPrefer = "prefer devices";

// Why the GPU's node is not usable now, or "".
std::string node_problem(const node::Gpu& gpu) {
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

namespace {

constexpr const char* kList = "list devices";

Device whole_gpu(const node::Node& node, std::size_t i,
                 const config::DevicePluginConfig& settings) {
    const node::Gpu& gpu = node.gpus[i];
    Device d;
    d.position = static_cast<unsigned>(i);
    if (settings.id_strategy == config::IdStrategy::Uuid) {
        if (gpu.uuid.empty())
            util::throw_invalid(kList, gpu.proc_dir,
                                node::gpu_name(gpu) + " has no UUID (id-strategy \"uuid\")");
        d.id = gpu.uuid;
    } else {
        d.id = std::to_string(gpu.index);
    }
    d.numa_node = gpu.place ? gpu.place->numa_node : -1;
    return d;
}

Device mig_device(const node::Node& node, std::size_t i, std::size_t m,
                  const config::DevicePluginConfig& settings) {
    const node::Gpu& gpu = node.gpus[i];
    const node::MigDevice& mig = gpu.mig[m];
    Device d = whole_gpu(node, i, settings);
    d.mig = static_cast<int>(m);
    if (settings.id_strategy == config::IdStrategy::Uuid) {
        if (mig.uuid.empty())
            util::throw_invalid(
                kList, mig.gi_access,
                fmt::format("MIG device {}:{} of {} has no UUID (id-strategy \"uuid\")", gpu.index,
                            mig.index, node::gpu_name(gpu)));
        d.id = mig.uuid;
    } else {
        d.id = fmt::format("{}:{}", gpu.index, mig.index);
    }
    return d;
}

// The MIG device's profile, checked.
std::string profile_of(const node::Gpu& gpu, const node::MigDevice& mig,
                       const MigProfiles& profiles) {
    auto it = mig.uuid.empty() ? profiles.end() : profiles.find(mig.uuid);
    if (it == profiles.end())
        util::throw_invalid(
            kList, mig.gi_access,
            fmt::format("the profile of MIG device {}:{} of {} is unknown (NVML did not "
                        "name it)",
                        gpu.index, mig.index, node::gpu_name(gpu)));
    const std::string& p = it->second;
    const bool ok = !p.empty() && p.size() <= 32 && std::all_of(p.begin(), p.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+' || c == '-';
    });
    if (!ok)
        util::throw_invalid(
            kList, mig.gi_access,
            fmt::format("MIG device {}:{} of {} has a profile that is not one: \"{}\"", gpu.index,
                        mig.index, node::gpu_name(gpu), p));
    return p;
}

}  // namespace

std::string_view strategy_name(config::DeviceListStrategy s);

std::vector<Resource> resources(const node::Node& node, const config::DevicePluginConfig& settings,
                                const MigProfiles& profiles) {
    Resource plain{settings.resource_name, settings.socket_name, {}};
    const bool any_mig = std::any_of(node.gpus.begin(), node.gpus.end(),
                                     [](const node::Gpu& g) { return !g.mig.empty(); });
    if (settings.mig_strategy == config::MigStrategy::None || !any_mig) {
        for (std::size_t i = 0; i < node.gpus.size(); ++i)
            plain.devices.push_back(whole_gpu(node, i, settings));
        if (settings.sharing == config::SharingMode::Memory)
            plain.name = settings.memory_resource_name;
        if (settings.sharing != config::SharingMode::None)
            plain.devices = detail::share_devices(node, settings, plain.devices);
        return {plain};
    }
    if (settings.sharing != config::SharingMode::None)
        util::throw_invalid(kList, "",
                            fmt::format("sharing \"{}\" needs mig-strategy \"none\"",
                                        config::strategy_name(settings.sharing)));
    if (settings.mig_strategy == config::MigStrategy::Single) {
        std::set<std::string> seen;
        for (std::size_t i = 0; i < node.gpus.size(); ++i) {
            const node::Gpu& gpu = node.gpus[i];
            if (gpu.mig.empty())
                util::throw_invalid(
                    kList, gpu.proc_dir,
                    fmt::format("mig-strategy \"single\": {} has no MIG devices while "
                                "other GPUs have (every GPU must have MIG on, with one "
                                "profile)",
                                node::gpu_name(gpu)));
            for (std::size_t m = 0; m < gpu.mig.size(); ++m) {
                seen.insert(profile_of(gpu, gpu.mig[m], profiles));
                plain.devices.push_back(mig_device(node, i, m, settings));
            }
        }
        if (seen.size() > 1)
            util::throw_invalid(kList, "",
                                fmt::format("mig-strategy \"single\": the MIG devices are of {} "
                                            "profiles ({}), not one",
                                            seen.size(), fmt::join(seen, ", ")));
        return {plain};
    }
    // Mixed.
    const auto slash = settings.resource_name.find('/');
    const std::string domain = settings.resource_name.substr(0, slash);
    std::string stem = settings.socket_name;
    if (stem.size() > 5 && stem.ends_with(".sock")) stem.resize(stem.size() - 5);
    std::map<std::string, Resource> by_profile;
    for (std::size_t i = 0; i < node.gpus.size(); ++i) {
        const node::Gpu& gpu = node.gpus[i];
        if (gpu.mig.empty()) plain.devices.push_back(whole_gpu(node, i, settings));
        for (std::size_t m = 0; m < gpu.mig.size(); ++m) {
            const std::string profile = profile_of(gpu, gpu.mig[m], profiles);
            Resource& r = by_profile[profile];
            if (r.name.empty()) {
                r.name = domain + "/mig-" + profile;
                r.socket = stem + "-mig-" + profile + ".sock";
            }
            r.devices.push_back(mig_device(node, i, m, settings));
        }
    }
    std::vector<Resource> out{plain};
    for (auto& [profile, r] : by_profile) out.push_back(std::move(r));
    return out;
}

bool record_xid(XidMarks& marks, const node::Node& node, unsigned minor, unsigned xid,
                const config::DevicePluginConfig& settings,
                std::optional<std::pair<unsigned, unsigned>> instance) {
    if (std::find(settings.ignored_xids.begin(), settings.ignored_xids.end(), xid) !=
        settings.ignored_xids.end())
        return false;
    for (const node::Gpu& gpu : node.gpus) {
        if (gpu.minor != minor) continue;
        XidMark& mark = marks[minor];
        mark.xid = xid;
        const bool of_instance =
            instance && std::any_of(gpu.mig.begin(), gpu.mig.end(), [&](const node::MigDevice& m) {
                return m.gi == instance->first && m.ci == instance->second;
            });
        if (of_instance)
            mark.instances[*instance] = xid;
        else
            mark.whole = true;
        struct stat st {};
        if (::lstat(gpu.node.host_path.c_str(), &st) == 0) {
            mark.dev = st.st_dev;
            mark.ino = st.st_ino;
        }
        return true;
    }
    return false;
}

namespace {

// Why the Xid marks make device `d` (of `gpu`) unhealthy, or "".
std::string xid_problem(const Device& d, const node::Gpu& gpu, const XidMark& mark) {
    if (d.mig < 0 || mark.whole) {
        if (mark.whole)
            return fmt::format("{} reported the critical Xid {}", node::gpu_name(gpu), mark.xid);
        const auto& [instance, xid] = *mark.instances.begin();
        return fmt::format(
            "{} reported the critical Xid {} in its GPU instance {}, compute "
            "instance {}",
            node::gpu_name(gpu), xid, instance.first, instance.second);
    }
    if (static_cast<std::size_t>(d.mig) >= gpu.mig.size()) return {};  // gone: the list changes
    const node::MigDevice& m = gpu.mig[static_cast<std::size_t>(d.mig)];
    const auto it = mark.instances.find({m.gi, m.ci});
    if (it == mark.instances.end()) return {};
    return fmt::format(
        "MIG device {} (GPU instance {}, compute instance {} of {}) reported the "
        "critical Xid {}",
        m.uuid.empty() ? fmt::format("{}:{}", gpu.index, m.index) : m.uuid, m.gi, m.ci,
        node::gpu_name(gpu), it->second);
}

}  // namespace

bool clear_recovered_xids(XidMarks& marks, const node::Node& node) {
    bool cleared = false;
    for (const node::Gpu& gpu : node.gpus) {
        auto it = marks.find(gpu.minor);
        if (it == marks.end() || !node_problem(gpu).empty()) continue;
        struct stat st {};
        if (::lstat(gpu.node.host_path.c_str(), &st) != 0) continue;
        if (st.st_dev == it->second.dev && st.st_ino == it->second.ino) continue;
        marks.erase(it);
        cleared = true;
    }
    return cleared;
}

bool update_health(std::vector<Device>& devices, const node::Node& node, const XidMarks& marks) {
    const std::string version = (node.roots.proc / "driver/nvidia/version").string();
    struct stat st {};
    const bool driver = ::lstat(version.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    bool changed = false;
    for (Device& d : devices) {
        std::string why;
        if (!driver) {
            why = fmt::format("the driver is gone ({} is missing)", version);
        } else if (d.position >= node.gpus.size()) {
            why = "its GPU is no longer on the node";
        } else {
            const node::Gpu& gpu = node.gpus[d.position];
            why = node_problem(gpu);
            if (auto it = marks.find(gpu.minor); why.empty() && it != marks.end())
                why = xid_problem(d, gpu, it->second);
        }
        const bool healthy = why.empty();
        if (healthy != d.healthy) changed = true;
        d.healthy = healthy;
        d.why = std::move(why);
    }
    return changed;
}

std::vector<std::string> preferred_allocation(const node::Node& node,
                                              const std::vector<Device>& devices,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size) {
    auto position = [&](const std::string& id) {
        const Device* d = find(devices, id);
        if (!d) util::throw_invalid(kPrefer, "", fmt::format("no device \"{}\"", id));
        return d->position;
    };
    if (size <= 0 || static_cast<std::size_t>(size) > available.size())
        util::throw_invalid(kPrefer, "",
                            fmt::format("allocation_size {} is not 1..{} (the available devices)",
                                        size, available.size()));
    if (must_include.size() > static_cast<std::size_t>(size))
        util::throw_invalid(kPrefer, "",
                            fmt::format("{} devices must be included in an allocation of {}",
                                        must_include.size(), size));
    node::PlaceRequest request;
    request.count = static_cast<unsigned>(size);
    request.nvlink = node::NvlinkNeed::Preferred;
    std::set<std::string> seen;
    for (const auto& id : available) {
        if (!seen.insert(id).second)
            util::throw_invalid(kPrefer, "", fmt::format("device \"{}\" is available twice", id));
        request.from.push_back(position(id));
    }
    for (const auto& id : must_include) {
        if (!seen.count(id))
            util::throw_invalid(
                kPrefer, "",
                fmt::format("device \"{}\" must be included but is not available", id));
        const unsigned p = position(id);
        if (std::find(request.must_include.begin(), request.must_include.end(), p) ==
            request.must_include.end())
            request.must_include.push_back(p);
    }
    if (find(devices, available.front())->part >= 0)
        return detail::preferred_shares(node, devices, available, must_include,
                                        static_cast<unsigned>(size));
    const bool mig = std::any_of(available.begin(), available.end(), [&](const std::string& id) {
        return find(devices, id)->mig >= 0;
    });
    if (mig) {  // MIG devices: no placement among them; must_include first
        std::vector<std::string> out;
        for (const auto& list : {must_include, available})
            for (const auto& id : list)
                if (out.size() < static_cast<std::size_t>(size) &&
                    std::find(out.begin(), out.end(), id) == out.end())
                    out.push_back(id);
        return out;
    }
    std::sort(request.from.begin(), request.from.end());
    const auto topology = node::place_topology(node.gpus, node::nvlink_graph(node.gpus));
    const node::Placement placement = node::place_gpus(topology, request);
    std::vector<std::string> out;
    for (unsigned p : placement.gpus)
        for (const Device& d : devices)
            if (d.position == p) out.push_back(d.id);
    return out;
}

namespace {

// The names of the rdma family's HCAs nearest the GPUs of `ids` (a MIG
// device's: its GPU's), in the family's order; a note for each GPU none is
// near, or for a node without the family.
std::vector<std::string> affine_hcas(const node::Node& node, const std::vector<Device>& devices,
                                     const std::vector<std::string>& ids,
                                     std::vector<std::string>& notes) {
    const node::FamilyNodes* f = node::find_family(node, kRdmaFamily);
    if (!f) {
        notes.push_back(
            fmt::format("rdma = \"affine\": the node has no {} devices: none given", kRdmaFamily));
        return {};
    }
    std::vector<const node::Gpu*> gpus;
    for (const auto& id : ids) {
        const Device* d = find(devices, id);
        if (!d || d->position >= node.gpus.size()) continue;
        const node::Gpu* gpu = &node.gpus[d->position];
        if (std::find(gpus.begin(), gpus.end(), gpu) == gpus.end()) gpus.push_back(gpu);
    }
    const node::AffineChoice near = node::affine(*f, gpus);
    notes.insert(notes.end(), near.notes.begin(), near.notes.end());
    std::vector<std::string> out;
    for (std::size_t i = 0; i < f->devices.size(); ++i)
        if (near.chosen[i]) out.push_back(f->devices[i].name);
    return out;
}

}  // namespace

Allocation allocate(const config::Config& config, const config::DevicePluginConfig& settings,
                    const node::Node& node, const std::vector<Device>& devices,
                    const std::vector<std::string>& ids) {
    if (ids.empty()) util::throw_invalid(kAllocate, "", "no device ids");
    std::vector<std::string> unknown, unhealthy;
    std::set<std::string> seen;
    std::vector<const Device*> shares;
    for (const auto& id : ids) {
        if (!seen.insert(id).second)
            util::throw_invalid(kAllocate, "", fmt::format("device \"{}\" is asked for twice", id));
        const Device* d = find(devices, id);
        if (!d)
            unknown.push_back(id);
        else if (!d->healthy)
            unhealthy.push_back(id);
        else if (d->part >= 0)
            shares.push_back(d);
    }
    if (!unknown.empty() || !unhealthy.empty()) {
        std::vector<std::string> parts;
        if (!unknown.empty())
            parts.push_back(fmt::format("unknown device{} {}", unknown.size() == 1 ? "" : "s",
                                        fmt::join(unknown, ", ")));
        if (!unhealthy.empty())
            parts.push_back(fmt::format("unhealthy device{} {}", unhealthy.size() == 1 ? "" : "s",
                                        fmt::join(unhealthy, ", ")));
        util::throw_refused(kAllocate, settings.resource_name,
                            fmt::format("{}", fmt::join(parts, "; ")));
    }
    Allocation a;
    // The devices named: the GPUs of shares, else those asked for.
    const std::vector<std::string> named =
        shares.empty() ? ids : detail::allocate_shares(a, settings.resource_name, shares);
    std::vector<std::string> names;
    for (const auto& id : named) names.push_back(config.cdi.kind + "=" + id);
    std::vector<std::string> hcas;
    if (settings.rdma == config::RdmaStrategy::Affine)
        hcas = affine_hcas(node, devices, ids, a.notes);
    const auto cdi_names = [&] {
        std::vector<std::string> out = names;
        const config::Family* rdma = config.family(kRdmaFamily);
        if (!hcas.empty() && (!rdma || rdma->cdi_kind.empty()))
            a.notes.push_back(fmt::format(
                "rdma = \"affine\": [family.{}] has no cdi-kind: its HCAs are not named by CDI",
                kRdmaFamily));
        else
            for (const auto& h : hcas) out.push_back(rdma->cdi_kind + "=" + h);
        return out;
    };
    for (config::DeviceListStrategy s : settings.device_list) {
        switch (s) {
            case config::DeviceListStrategy::CdiCri:
                a.cdi_devices = cdi_names();
                break;
            case config::DeviceListStrategy::CdiAnnotations:
                a.annotations[kCdiAnnotation] = fmt::format("{}", fmt::join(cdi_names(), ","));
                break;
            case config::DeviceListStrategy::Envvar:
                a.envs["NVIDIA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(named, ","));
                break;
            case config::DeviceListStrategy::VolumeMounts:
                for (const auto& id : named)
                    a.mounts.push_back(
                        {std::string(kDeviceMountDir) + "/" + id, "/dev/null", true});
                // A family's devices by mounts: <dir>/<family>/<device>, as
                // the hook reads them where it honours the mounts.
                for (const auto& h : hcas)
                    a.mounts.push_back({fmt::format("{}/{}/{}", kDeviceMountDir, kRdmaFamily, h),
                                        "/dev/null", true});
                break;
        }
        if (!hcas.empty() && s == config::DeviceListStrategy::Envvar)
            a.envs[kRdmaVariable] = fmt::format("{}", fmt::join(hcas, ","));
    }
    std::sort(a.notes.begin(), a.notes.end());
    a.notes.erase(std::unique(a.notes.begin(), a.notes.end()), a.notes.end());
    return a;
}

}  // namespace gpubind::plugin
