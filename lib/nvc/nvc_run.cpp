// gpubind-nvc's commands: info and list printed as nvidia-container-cli
// prints them, configure carried out by gpubind's decision and executor.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

#include "gpubind/decide/inject.hpp"
#include "gpubind/nvc/nvc.hpp"
#include "gpubind/start/configure.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/platform.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::nvc {

namespace {

// nvidia-container-cli's brand names for NVML's (gpubind keeps
// NVIDIA_REQUIRE_BRAND's spelling, lower case).
std::string brand_text(const std::string& brand) {
    static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
        {"quadro", "Quadro"},
        {"tesla", "Tesla"},
        {"nvs", "NVS"},
        {"grid", "GRID"},
        {"geforce", "GeForce"},
        {"titan", "TITAN"},
        {"vapps", "VApps"},
        {"vpc", "VPC"},
        {"vcs", "VCS"},
        {"vws", "VWS"},
        {"cloudgaming", "CloudGaming"},
        {"quadrortx", "QuadroRTX"},
        {"nvidiartx", "NvidiaRTX"},
        {"nvidia", "Nvidia"},
        {"geforcertx", "GeForceRTX"},
        {"titanrtx", "TitanRTX"}};
    for (auto [key, name] : kNames)
        if (brand == key) return std::string(name);
    return "Unknown";
}

// "0000:3b:00.0" as nvidia-container-cli prints a bus location: an 8-digit
// domain, function 0.
std::string bus_location(const std::string& bus_id) {
    unsigned domain = 0, bus = 0, device = 0;
    if (std::sscanf(bus_id.c_str(), "%x:%x:%x", &domain, &bus, &device) != 3) return bus_id;
    return fmt::format("{:08x}:{:02x}:{:02x}.0", domain, bus, device);
}

// `path` (under `root`) as seen from the root: "/usr/lib/...".
std::string relative_to(const std::string& path, const std::filesystem::path& root) {
    const std::string r = root.string();
    if (r.empty() || r == "/") return path;
    const std::string prefix = r.back() == '/' ? r.substr(0, r.size() - 1) : r;
    if (path.size() > prefix.size() && path.starts_with(prefix) && path[prefix.size()] == '/')
        return path.substr(prefix.size());
    return path;
}

// The kinds of IPC `select` leaves out.
bool left_out(const node::DriverFile& f, const Selection& select) {
    if (f.kind == node::FileKind::Firmware) return select.no_gsp_firmware;
    if (f.kind != node::FileKind::Ipc) return false;
    return (select.no_persistenced &&
            f.host_path.find("/nvidia-persistenced/") != std::string::npos) ||
           (select.no_fabricmanager &&
            f.host_path.find("/nvidia-fabricmanager/") != std::string::npos);
}

std::vector<std::string> imex_channels(const Selection& select) {
    return decide::parse_imex_channels(select.imex_channels, "--imex-channel", "command line");
}

node::DeviceIds mig_ids(const std::string& value, const char* option) {
    const node::DeviceIds ids = node::parse_device_ids(value);
    if (ids.kind == node::DeviceIdsKind::List)
        util::throw_invalid("select MIG devices", option,
                            "only \"all\" is supported, as by nvidia-container-cli");
    return ids;
}

decide::Request make_request(const ConfigureArgs& a) {
    decide::Request r;
    r.source = decide::RequestSource::Explicit;
    r.devices = node::parse_device_ids(a.select.devices.empty() ? "none" : a.select.devices);
    if (r.devices.kind == node::DeviceIdsKind::Void) r.devices.kind = node::DeviceIdsKind::None;
    config::Capabilities caps = 0;
    if (a.select.compat32) caps |= config::kCapCompat32;
    for (const auto& name : a.capabilities) caps |= *config::parse_capabilities(name);
    r.caps = caps;
    for (const auto& expr : a.requires_) r.requirements.push_back({"--require", expr});
    if (!a.select.mig_config.empty()) r.mig_config = mig_ids(a.select.mig_config, "--mig-config");
    if (!a.select.mig_monitor.empty())
        r.mig_monitor = mig_ids(a.select.mig_monitor, "--mig-monitor");
    r.imex_channels = imex_channels(a.select);
    return r;
}

int configure(const ConfigureArgs& a, const Global& g, const config::Config& config, bool store,
              os::System* sys) {
    if (g.user) util::logger().debug("--user: acting as this process's own ids");
    for (const auto& word : g.ignored) util::logger().debug("{}: accepted, nothing to do", word);
    config::Config decided = config;
    if (a.no_cntlibs || a.cuda_compat_mode == "disabled") decided.policy.cuda_compat = false;
    start::ConfigureCall call{.request = make_request(a),
                              .rootfs = a.rootfs,
                              .pid = a.pid,
                              .no_cgroups = a.no_cgroups,
                              .no_devbind = a.no_devbind,
                              .store = store,
                              .sys = sys};
    if (a.ldconfig.starts_with('@'))
        call.ldconfig = a.ldconfig.substr(1);
    else if (!a.ldconfig.empty())
        util::logger().debug(
            "--ldconfig={}: a program of the image; not run (gpubind writes the cache)",
            a.ldconfig);
    // The IPCs and firmware the options name.
    call.leave_out = [&a](decide::Plan& plan, const node::Node& node) {
        std::vector<std::string> dropped;
        for (const auto& f : node.files)
            if (left_out(f, a.select)) {
                dropped.push_back(f.host_path);
                dropped.push_back(f.real_path);
            }
        std::erase_if(plan.mounts, [&](const decide::PlannedMount& m) {
            return std::find(dropped.begin(), dropped.end(), m.source) != dropped.end();
        });
    };
    start::configure(decided, call);
    return util::kExitOk;
}

}  // namespace

std::string help_text(const std::string& program, Command command) {
    switch (command) {
        case Command::Info:
            return fmt::format(
                "Usage: {} info [--csv]\n"
                "The driver and its GPUs, as nvidia-container-cli prints them.\n"
                "      --csv               comma-separated output\n",
                program);
        case Command::List:
            return fmt::format(
                "Usage: {} list [OPTION...]\n"
                "The host files a container would get, one path a line (all without options).\n"
                "  -d, --device=ID          devices: all, none, indexes, UUIDs, G:M, bus ids\n"
                "  -l, --libraries          the driver's libraries\n"
                "  -b, --binaries           its programs\n"
                "  -i, --ipcs               its sockets and IPC directories\n"
                "  -f, --firmwares          its GSP firmware\n"
                "      --compat32           the 32-bit libraries too\n"
                "      --mig-config=all, --mig-monitor=all, --imex-channel=N[,N...]\n"
                "      --no-persistenced, --no-fabricmanager, --no-gsp-firmware\n",
                program);
        case Command::Configure:
            return fmt::format(
                "Usage: {} configure [OPTION...] ROOTFS\n"
                "Give the container at ROOTFS its GPUs and driver files.\n"
                "  -p, --pid=PID            the container's process (default: the parent)\n"
                "  -d, --device=ID          devices: all, none, indexes, UUIDs, G:M, bus ids\n"
                "  -r, --require=EXPR       a requirement (NVIDIA_REQUIRE_* syntax)\n"
                "  -l, --ldconfig=@PATH     the host's ldconfig (a container path is not run)\n"
                "  -c, --compute  -u, --utility  -v, --video  -g, --graphics  -D, --display\n"
                "  -n, --ngx  --compat32    driver capabilities\n"
                "      --mig-config=all, --mig-monitor=all, --imex-channel=N[,N...]\n"
                "      --no-cgroups         leave the device cgroup alone (needed unprivileged)\n"
                "      --no-devbind         device cgroup access only, no device nodes\n"
                "      --no-persistenced, --no-fabricmanager, --no-gsp-firmware\n"
                "      --no-cntlibs, --cuda-compat-mode=mount|ldconfig|disabled\n",
                program);
        default:
            return fmt::format(
                "Usage: {} [OPTION...] COMMAND [ARG...]\n"
                "nvidia-container-cli's commands, by gpubind.\n\n"
                "  -d, --debug=FILE         debug log appended to FILE\n"
                "  -r, --root=PATH          the driver root\n"
                "  -l, --ldcache=FILE       the driver root's loader cache\n"
                "  -u, --user[=UID[:GID]]   run as the caller (unprivileged: see configure)\n"
                "  -k, --load-kmods, -n, --no-pivot, --no-create-imex-channels: accepted\n"
                "  -V, --version            print the version\n\n"
                "Commands:\n"
                "  info                     the driver and its GPUs\n"
                "  list                     the files a container would get\n"
                "  configure                give a container its GPUs\n",
                program);
    }
}

std::string version_text(const std::string& version) {
    return fmt::format("cli-version: {0}\nlib-version: {0}\nbuild platform: {1}\n", version,
                       util::platform::kMachine);
}

std::string info_text(const node::Node& node, bool csv) {
    std::string out;
    if (csv) {
        out += fmt::format("NVRM version,CUDA version\n{},{}\n", node.driver_version,
                           node.cuda_version);
        out += "\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n";
    } else {
        out += fmt::format("{:<15} {}\n{:<15} {}\n", "NVRM version:", node.driver_version,
                           "CUDA version:", node.cuda_version);
    }
    std::size_t i = 0;
    for (const auto& gpu : node.gpus) {
        const std::string brand = brand_text(gpu.brand), bus = bus_location(gpu.pci_bus_id);
        if (csv)
            out += fmt::format("{},{},{},{},{},{},{}\n", i, gpu.minor, gpu.model, brand, gpu.uuid,
                               bus, gpu.compute_capability);
        else
            out += fmt::format(
                "\n{:<15} {}\n{:<15} {}\n{:<15} {}\n{:<15} {}\n{:<15} {}\n{:<15} {}\n{:<15} {}\n",
                "Device Index:", i, "Device Minor:", gpu.minor, "Model:", gpu.model,
                "Brand:", brand, "GPU UUID:", gpu.uuid, "Bus Location:", bus,
                "Architecture:", gpu.compute_capability);
        ++i;
    }
    return out;
}

std::string list_text(const node::Node& node, const ListArgs& args) {
    const Selection& s = args.select;
    const bool all = args.everything;
    std::string out;
    auto line = [&](const std::string& path) { out += path + "\n"; };
    if (all || !s.devices.empty()) {
        const gpubind::node::Selection sel =
            node::select_devices(node, node::parse_device_ids(all ? "all" : s.devices));
        for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"})
            if (const node::DeviceNode* n = node.control_node(name)) line(n->path);
        std::vector<const node::Gpu*> gpus = sel.gpus;
        for (const node::MigDevice* mig : sel.migs) {
            const node::Gpu* parent = &node.gpus[mig->gpu_index];
            if (std::find(gpus.begin(), gpus.end(), parent) == gpus.end()) gpus.push_back(parent);
        }
        for (const node::Gpu* gpu : gpus) line(gpu->node.path);
        if (s.mig_config.empty() && s.mig_monitor.empty())
            for (const node::MigDevice* mig : sel.migs) {
                line("/proc" + relative_to(mig->gi_access, node.roots.proc));
                line(mig->gi_cap.path);
                line("/proc" + relative_to(mig->ci_access, node.roots.proc));
                line(mig->ci_cap.path);
            }
    }
    for (const node::DeviceNode* c : node::select_imex_channels(node, imex_channels(s)))
        line(c->path);
    // The MIG config and monitor capabilities (node.mig_control's order).
    const struct {
        const std::string& value;
        const char* option;
        const char* file;
    } mig_caps[] = {{s.mig_config, "--mig-config", "config"},
                    {s.mig_monitor, "--mig-monitor", "monitor"}};
    for (std::size_t i = 0; i < std::size(mig_caps); ++i) {
        if (mig_caps[i].value.empty()) continue;
        mig_ids(mig_caps[i].value, mig_caps[i].option);  // only "all"
        if (i >= node.mig_control.size()) continue;
        line(std::string("/proc/driver/nvidia/capabilities/mig/") + mig_caps[i].file);
        line(node.mig_control[i].path);
    }
    const bool compat32 = all || s.compat32;
    // Each kind in the node's order; libraries 64-bit first, then 32-bit.
    auto files = [&](node::FileKind kind, bool wanted, bool lib32 = false) {
        if (!wanted) return;
        for (const auto& f : node.files) {
            if (f.kind != kind || f.compat32 != lib32 || left_out(f, s)) continue;
            line(relative_to(kind == node::FileKind::Library ? f.real_path : f.host_path,
                             node.roots.driver));
        }
    };
    files(node::FileKind::Binary, all || args.binaries);
    files(node::FileKind::Library, all || args.libraries);
    files(node::FileKind::Library, (all || args.libraries) && compat32, true);
    files(node::FileKind::Ipc, all || args.ipcs);
    files(node::FileKind::Firmware, all || args.firmwares);
    return out;
}

config::Config with_global(config::Config config, const Global& global) {
    if (!global.root.empty()) {
        const std::filesystem::path root = std::filesystem::absolute(global.root);
        config.roots.driver = root;
        if (!global.ldcache.empty())
            config.ldcache = root / std::filesystem::path(global.ldcache).relative_path();
    } else if (!global.ldcache.empty()) {
        config.ldcache = std::filesystem::absolute(global.ldcache);
    }
    return config;
}

int run(const Args& args, const config::Config& config, os::System* sys) {
    // Another driver root is another node, whose knowledge is not stored.
    const bool store = args.global.root.empty() && args.global.ldcache.empty();
    switch (args.command) {
        case Command::Info: {
            node::LoadOptions load;
            load.write = store;
            load.need_nvml = true;
            fmt::print("{}", info_text(start::know_node(config, load).node, args.csv));
            return util::kExitOk;
        }
        case Command::List: {
            node::LoadOptions load;
            load.write = store;
            load.need_nvml = args.list.select.devices.find("MIG-") != std::string::npos;
            fmt::print("{}", list_text(start::know_node(config, load).node, args.list));
            return util::kExitOk;
        }
        case Command::Configure:
            return configure(args.configure, args.global, config, store, sys);
        default:
            return util::kExitOk;
    }
}

}  // namespace gpubind::nvc
