// The plan: a pure function from the request, the node and the image to the
// devices, mounts, links and proc view a container gets (rules in plan.hpp).
#include "gpubind/decide/plan.hpp"

#include <algorithm>
#include <array>
#include <cerrno>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/version.hpp"

namespace gpubind::decide {

namespace {

namespace fs = std::filesystem;

constexpr unsigned kReadOnlyFlags = util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev;
constexpr unsigned kIpcFlags = util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec;
constexpr unsigned kFirmwareFlags = kReadOnlyFlags | util::kMountNoExec;

// Development links made beside the library whose soname is "<name>.1".
constexpr std::array<std::string_view, 2> kDevLinks = {"libcuda.so", "libnvidia-ml.so"};

// The params file with ModifyDeviceFiles set to 0 (added when missing), so
// that nothing in the container makes device nodes.
std::string params_without_device_files(std::string_view params) {
    constexpr std::string_view kKey = "ModifyDeviceFiles:";
    std::string out;
    bool found = false;
    while (!params.empty()) {
        auto nl = params.find('\n');
        std::string_view line = params.substr(0, nl);
        params.remove_prefix(nl == std::string_view::npos ? params.size() : nl + 1);
        if (line.starts_with(kKey)) {
            out += "ModifyDeviceFiles: 0\n";
            found = true;
        } else {
            out.append(line).push_back('\n');
        }
    }
    if (!found) out += "ModifyDeviceFiles: 0\n";
    return out;
}

// The MPS pipe directory is the one IPC that is a directory, not a socket.
bool is_directory_ipc(const node::DriverFile& f) {
    return util::base_name(f.host_path) == "nvidia-mps";
}

class Builder {
  public:
    Plan plan;

    void device(const node::DeviceNode& node, std::string why) {
        if (node.path.empty()) return;
        for (const auto& d : plan.devices)
            if (d.node.path == node.path) return;
        plan.devices.push_back({node, std::move(why)});
    }

    void mount(const node::DriverFile& f, std::string target, unsigned flags, std::string why,
               bool directory = false) {
        for (const auto& m : plan.mounts)
            if (m.target == target) return;
        const std::string& source = f.real_path.empty() ? f.host_path : f.real_path;
        plan.mounts.push_back({source, std::move(target), directory, flags, std::move(why)});
    }

    void symlink(std::string path, std::string target) {
        if (util::base_name(path) == target) return;
        for (const auto& s : plan.symlinks)
            if (s.path == path) return;
        for (const auto& m : plan.mounts)
            if (m.target == path) return;  // a mounted file is already there
        plan.symlinks.push_back({std::move(path), std::move(target)});
    }

    // The loader cache's entry for `soname` at dir/soname, once.
    void cache_entry(const std::string& soname, const std::string& dir, bool compat32) {
        const ldcache::Arch arch = compat32 ? ldcache::kCompat32Arch : ldcache::kNativeArch;
        std::string path = util::join_path(dir, soname);
        for (const auto& l : plan.ldcache_libraries)
            if (l.path == path && l.arch == arch) return;
        plan.ldcache_libraries.push_back({soname, std::move(path), arch});
    }

    void library(const node::DriverFile& f, const std::string& dir, config::Capabilities caps) {
        const std::string file(util::base_name(f.real_path.empty() ? f.host_path : f.real_path));
        mount(f, util::join_path(dir, file), kReadOnlyFlags,
              fmt::format("{}{} library", config::capability_names(caps),
                          f.compat32 ? " 32-bit" : ""));
        symlink(util::join_path(dir, f.name), file);
        cache_entry(f.name, dir, f.compat32);
        for (std::string_view link : kDevLinks)
            if (f.name.size() == link.size() + 2 && f.name.starts_with(link) &&
                f.name.ends_with(".1")) {
                symlink(util::join_path(dir, link), f.name);
                cache_entry(std::string(link), dir, f.compat32);
            }
        if (std::find(plan.library_dirs.begin(), plan.library_dirs.end(), dir) ==
            plan.library_dirs.end())
            plan.library_dirs.push_back(dir);
        plan.refresh_ldcache = true;
    }
};

// The driver's names in the image's library and binary directories, from
// every file of the node (any capability): what an earlier start may have
// left there.
void owned_names(Plan& plan, const node::Node& node, const Image& image) {
    auto add = [](std::vector<std::string>& v, std::string s) {
        if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
    };
    OwnedDir lib{image.lib_dir, {}, {}, {}}, lib32{image.lib32_dir, {}, {}, {}};
    OwnedDir bin{image.bin_dir, {}, {}, {}};
    const std::string& version = node.driver_version;
    for (const auto& f : node.files) {
        const std::string file(util::base_name(f.real_path.empty() ? f.host_path : f.real_path));
        if (f.kind == node::FileKind::Binary) {
            add(bin.files, std::string(util::base_name(f.host_path)));
            continue;
        }
        if (f.kind != node::FileKind::Library) continue;
        OwnedDir& d = f.compat32 ? lib32 : lib;
        if (!version.empty() && file.size() > version.size() + 1 && file.ends_with(version) &&
            file[file.size() - version.size() - 1] == '.')
            add(d.stems, file.substr(0, file.size() - version.size()));
        if (f.name != file) add(d.links, f.name);
        for (std::string_view link : kDevLinks)
            if (f.name.size() == link.size() + 2 && f.name.starts_with(link) &&
                f.name.ends_with(".1"))
                add(d.links, std::string(link));
    }
    for (OwnedDir* d : {&lib, &lib32, &bin})
        if (!d->dir.empty() && (!d->stems.empty() || !d->links.empty() || !d->files.empty()))
            plan.owned.push_back(std::move(*d));
}

// MIG capability files the proc view binds, in the order first asked, once each.
class CapabilityFiles {
  public:
    void add(const std::string& p) {
        if (!p.empty() && std::find(files_.begin(), files_.end(), p) == files_.end())
            files_.push_back(p);
    }
    std::vector<std::string> take() { return std::move(files_); }

  private:
    std::vector<std::string> files_;
};

// Control nodes.
void add_control_nodes(Builder& b, const node::Node& node, config::Capabilities caps) {
    auto control = [&](const char* name, const char* why) {
        if (const node::DeviceNode* n = node.control_node(name)) b.device(*n, why);
    };
    control("nvidiactl", "driver control");
    if (caps & config::kCapCompute) {
        control("nvidia-uvm", "compute (unified memory)");
        control("nvidia-uvm-tools", "compute (unified memory tools)");
    }
    if (caps & config::kCapDisplay) control("nvidia-modeset", "display");
}

// GPUs, whole or as the parents of MIG devices, in node order.
std::vector<const node::Gpu*> add_gpus(Builder& b, const node::Node& node,
                                       const node::Selection& selection) {
    std::vector<const node::Gpu*> gpus;
    for (const auto& gpu : node.gpus) {
        bool whole =
            std::find(selection.gpus.begin(), selection.gpus.end(), &gpu) != selection.gpus.end();
        bool parent =
            std::any_of(selection.migs.begin(), selection.migs.end(),
                        [&](const node::MigDevice* m) { return m->gpu_index == gpu.index; });
        if (!whole && !parent) continue;
        gpus.push_back(&gpu);
        b.device(gpu.node,
                 whole ? node::gpu_name(gpu) : node::gpu_name(gpu) + ", parent of MIG devices");
    }
    return gpus;
}

// The selected MIG devices: their GPU and compute instance capabilities.
void add_mig_devices(Builder& b, const node::Selection& selection,
                     CapabilityFiles& capability_files) {
    for (const node::MigDevice* m : selection.migs) {
        std::string name = fmt::format("MIG {}:{}{}", m->gpu_index, m->index,
                                       m->uuid.empty() ? "" : " (" + m->uuid + ")");
        b.device(m->gi_cap, name + " GPU instance");
        b.device(m->ci_cap, name + " compute instance");
        capability_files.add(m->gi_access);
        capability_files.add(m->ci_access);
    }
}

// NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES: the node lists the
// MIG config capability, then the monitor one.
void add_mig_control(Builder& b, const node::Node& node, const Request& request,
                     CapabilityFiles& capability_files) {
    auto mig_control = [&](const node::DeviceIds& ids, std::size_t index, const char* what,
                           const char* variable) {
        if (ids.kind == node::DeviceIdsKind::Void || ids.kind == node::DeviceIdsKind::None) return;
        if (index >= node.mig_control.size())
            util::throw_refused("plan", variable,
                                fmt::format("the node has no MIG {} capability device", what));
        b.device(node.mig_control[index], fmt::format("MIG {} ({})", what, variable));
        capability_files.add(node.roots.proc / "driver/nvidia/capabilities/mig" / what);
    };
    mig_control(request.mig_config, 0, "config", "NVIDIA_MIG_CONFIG_DEVICES");
    mig_control(request.mig_monitor, 1, "monitor", "NVIDIA_MIG_MONITOR_DEVICES");
}

// Driver files of the asked capabilities.
void add_driver_files(Builder& b, const node::Node& node, const Image& image,
                      config::Capabilities caps) {
    for (const auto& f : node.files) {
        const config::Capabilities brings =
            f.caps & caps & ~config::Capabilities{config::kCapCompat32};
        if (!brings) continue;
        const std::string names = config::capability_names(brings);
        switch (f.kind) {
            case node::FileKind::Library:
                if (!f.compat32)
                    b.library(f, image.lib_dir, brings);
                else if ((caps & config::kCapCompat32) && !image.lib32_dir.empty())
                    b.library(f, image.lib32_dir, brings);
                break;
            case node::FileKind::Binary:
                b.mount(f, util::join_path(image.bin_dir, util::base_name(f.host_path)),
                        kReadOnlyFlags, names + " binary");
                break;
            case node::FileKind::Ipc: {
                // The catalog names IPCs by their path under the driver root,
                // which is where the container's programs look for them.
                const fs::path target = fs::path("/") / f.name;
                // A socket works on a read-only mount; the MPS directory is
                // where clients create their pipes.
                const bool directory = is_directory_ipc(f);
                b.mount(f, target.lexically_normal().string(),
                        directory ? kIpcFlags : kIpcFlags | util::kMountReadOnly, names + " IPC",
                        directory);
                break;
            }
            case node::FileKind::Firmware:
                b.mount(
                    f,
                    util::join_path(util::join_path("/lib/firmware/nvidia", node.driver_version),
                                    util::base_name(f.host_path)),
                    kFirmwareFlags, names + " firmware");
                break;
        }
    }
}

// CUDA forward compatibility: the image's newer libcuda comes first. Where it
// does not apply, the loader entry an earlier start wrote goes.
void add_cuda_compat(Plan& plan, const node::Node& node, const Image& image,
                     const config::Config& config, config::Capabilities caps) {
    if ((caps & config::kCapCompute) && config.policy.cuda_compat &&
        !image.cuda_compat_version.empty() && is_version(image.cuda_compat_version) &&
        is_version(node.driver_version) &&
        util::compare_versions(image.cuda_compat_version, node.driver_version) > 0) {
        plan.files.push_back(
            {kCudaCompatConf, std::string(kCudaCompatDir) + "\n",
             fmt::format("CUDA forward compatibility: the image's libcuda.so.{} is newer than "
                         "the driver {}",
                         image.cuda_compat_version, node.driver_version)});
        auto& dirs = plan.library_dirs;
        dirs.erase(std::remove(dirs.begin(), dirs.end(), kCudaCompatDir), dirs.end());
        dirs.insert(dirs.begin(), kCudaCompatDir);
        plan.refresh_ldcache = true;
        auto& libs = plan.ldcache_libraries;
        std::vector<ldcache::Library> compat;
        for (const auto& name : image.cuda_compat_sonames)
            compat.push_back({name, util::join_path(kCudaCompatDir, name), ldcache::kNativeArch});
        libs.insert(libs.begin(), compat.begin(), compat.end());
    }
    // Without a cache, directories the image's ld.so.conf names are known
    // only to a scan.
    plan.ldcache_scan = plan.refresh_ldcache && !image.has_ldcache && image.ld_so_conf;
    if (plan.files.empty())
        plan.stale_files.push_back({kCudaCompatConf, std::string(kCudaCompatDir) + "\n",
                                    "CUDA forward compatibility no longer applies"});
}

// The /proc/driver/nvidia view: the node's files, the selected GPUs' directories.
ProcView proc_view(const node::ProcFiles& proc_files, const std::vector<const node::Gpu*>& gpus,
                   std::vector<std::string> capability_files) {
    ProcView proc;
    proc.version = proc_files.version;
    proc.params = params_without_device_files(proc_files.params);
    for (const node::Gpu* gpu : gpus) {
        auto name = node::proc_dir_name(*gpu);
        auto info = proc_files.information.find(name);
        proc.gpus.push_back({name, info == proc_files.information.end() ? "" : info->second});
    }
    proc.capability_files = std::move(capability_files);
    return proc;
}

}  // namespace

Plan make_plan(const Request& request, const node::Node& node, const node::Selection& selection,
               const Image& image, const config::Config& config,
               const node::ProcFiles& proc_files) {
    Builder b;
    if (!request.gpu_container()) return std::move(b.plan);
    const config::Capabilities caps = request.caps;
    const bool no_gpu = request.devices.kind == node::DeviceIdsKind::None;

    add_control_nodes(b, node, caps);
    std::vector<const node::Gpu*> gpus;
    CapabilityFiles capability_files;
    if (!no_gpu) {
        gpus = add_gpus(b, node, selection);
        add_mig_devices(b, selection, capability_files);
    }
    add_mig_control(b, node, request, capability_files);
    for (const node::DeviceNode* channel : node::select_imex_channels(node, request.imex_channels))
        b.device(*channel, fmt::format("IMEX channel {}", channel->minor));
    if (!request.families.empty()) {
        auto items = plan_families(request, node, gpus, config);
        for (auto& d : items.devices) b.device(d.node, std::move(d.why));
        for (auto& m : items.files)
            if (std::none_of(b.plan.mounts.begin(), b.plan.mounts.end(),
                             [&](const PlannedMount& x) { return x.target == m.target; }))
                b.plan.mounts.push_back(std::move(m));
        for (auto& l : items.links) b.symlink(std::move(l.path), std::move(l.target));
    }

    add_driver_files(b, node, image, caps);
    add_cuda_compat(b.plan, node, image, config, caps);
    owned_names(b.plan, node, image);
    b.plan.proc = proc_view(proc_files, gpus, capability_files.take());
    return std::move(b.plan);
}

namespace {

std::vector<std::string> flag_names(unsigned flags) {
    std::vector<std::string> out;
    if (flags & util::kMountReadOnly) out.emplace_back("ro");
    if (flags & util::kMountNoSuid) out.emplace_back("nosuid");
    if (flags & util::kMountNoDev) out.emplace_back("nodev");
    if (flags & util::kMountNoExec) out.emplace_back("noexec");
    return out;
}

}  // namespace

void to_json(nlohmann::json& j, const Plan& plan) {
    using nlohmann::json;
    j = json::object();
    json& devices = j["devices"] = json::array();
    for (const auto& d : plan.devices)
        devices.push_back({{"path", d.node.path},
                           {"host_path", d.node.host_path},
                           {"major", d.node.major},
                           {"minor", d.node.minor},
                           {"why", d.why}});
    json& mounts = j["mounts"] = json::array();
    for (const auto& m : plan.mounts)
        mounts.push_back({{"source", m.source},
                          {"target", m.target},
                          {"directory", m.directory},
                          {"flags", flag_names(m.flags)},
                          {"why", m.why}});
    json& links = j["symlinks"] = json::array();
    for (const auto& s : plan.symlinks) links.push_back({{"path", s.path}, {"target", s.target}});
    json& planned_files = j["files"] = json::array();
    for (const auto& f : plan.files)
        planned_files.push_back({{"path", f.path}, {"content", f.content}, {"why", f.why}});
    if (plan.proc) {
        json gpus = json::array();
        for (const auto& g : plan.proc->gpus) gpus.push_back(g.bus_id);
        j["proc"] = {{"target", plan.proc->target},
                     {"gpus", std::move(gpus)},
                     {"capability_files", plan.proc->capability_files}};
    } else {
        j["proc"] = nullptr;
    }
    j["library_dirs"] = plan.library_dirs;
    j["refresh_ldcache"] = plan.refresh_ldcache;
}

std::string describe(const Plan& plan) {
    if (plan.empty()) return "nothing to do: not a GPU container\n";
    std::string out;
    for (const auto& d : plan.devices)
        out += fmt::format("device  {} ({}:{}) from {}: {}\n", d.node.path, d.node.major,
                           d.node.minor, d.node.host_path, d.why);
    for (const auto& m : plan.mounts) {
        auto flags = flag_names(m.flags);
        if (!(m.flags & util::kMountReadOnly)) flags.insert(flags.begin(), "rw");
        out += fmt::format("mount   {}{} from {} [{}]: {}\n", m.target, m.directory ? "/" : "",
                           m.source, fmt::join(flags, ","), m.why);
    }
    for (const auto& s : plan.symlinks) out += fmt::format("symlink {} -> {}\n", s.path, s.target);
    for (const auto& f : plan.files) out += fmt::format("file    {}: {}\n", f.path, f.why);
    if (plan.proc) {
        std::vector<std::string> gpus;
        for (const auto& g : plan.proc->gpus) gpus.push_back(g.bus_id);
        out += fmt::format("proc    {}: GPUs [{}], ModifyDeviceFiles: 0\n", plan.proc->target,
                           fmt::join(gpus, ", "));
        for (const auto& f : plan.proc->capability_files)
            out += fmt::format("proc    MIG capability file {}\n", f);
    }
    if (plan.refresh_ldcache) {
        out += fmt::format("ldcache refresh for {}\n", fmt::join(plan.library_dirs, ", "));
    }
    return out;
}

}  // namespace gpubind::decide
