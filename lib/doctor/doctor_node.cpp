// `gpubind doctor`, the node: the driver's module, libraries, device nodes,
// capabilities, daemons, ldconfig and /dev/char links, read through the
// configured roots (gather_node) and judged by pure functions (check_node).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "gpubind/decide/mps.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::doctor {

namespace fs = std::filesystem;
using node::detail::under;

namespace {

constexpr const char* kNodeGroup = "node";
constexpr const char* kPersistencedSocket = "/run/nvidia-persistenced/socket";
constexpr const char* kImexDir = "/dev/nvidia-caps-imex-channels";

std::string gpu_node(unsigned minor) {
    return "/dev/nvidia" + std::to_string(minor);
}

std::string cap_node(unsigned minor) {
    return "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
}

// The version a library's file name carries: "libcuda.so.550.54.15" -> "550.54.15".
std::string version_of(std::string_view real_path) {
    const std::string name = fs::path(real_path).filename().string();
    const auto so = name.find(".so.");
    return so == std::string::npos ? std::string() : name.substr(so + 4);
}

void add_mig_caps(NodeFacts& f, const fs::path& access) {
    std::optional<unsigned> minor;
    try {
        auto fields = node::detail::read_fields(access);
        if (auto it = fields.find("DeviceFileMinor"); it != fields.end())
            if (auto n = util::parse_unsigned(it->second)) minor = static_cast<unsigned>(*n);
    } catch (const util::Error&) {
    }
    f.mig_caps.emplace(access.string(), minor);
    if (minor) f.dev.emplace(cap_node(*minor), FileFact{});
}

// What the driver's procfs says: its version, the device majors, its
// parameters and its GPUs (each GPU's node named in f.dev).
void read_driver_proc(NodeFacts& f, const fs::path& proc) {
    try {
        f.module_version = node::detail::read_driver_version(proc / "driver/nvidia/version");
    } catch (const util::Error& e) {
        f.version_error = e.what();
    }
    try {
        f.majors = node::detail::read_majors(proc / "devices");
    } catch (const util::Error&) {
    }
    try {
        f.params = node::detail::read_fields(proc / "driver/nvidia/params");
    } catch (const util::Error&) {
    }
    const fs::path gpus_dir = proc / "driver/nvidia/gpus";
    for (const auto& bus_id : node::detail::list_dir(gpus_dir)) {
        NodeFacts::ProcGpu g;
        g.bus_id = bus_id;
        try {
            const auto node_fields = node::detail::gpu_node_fields(
                node::detail::read_fields(gpus_dir / bus_id / "information"));
            g.minor = node_fields.minor;
            g.excluded = node_fields.excluded;
        } catch (const util::Error&) {
        }
        if (g.minor) f.dev.emplace(gpu_node(*g.minor), FileFact{});
        f.gpus.push_back(std::move(g));
    }
}

// Libraries: the catalog's, as the host's ld.so.cache resolves them.
void read_libraries(NodeFacts& f, const config::Config& config) {
    f.ldcache_path = config.ldcache_path().string();
    try {
        const auto cache = ldcache::load(config.ldcache_path());
        for (const auto& entry : config.catalog.libraries) {
            const std::string prefix = entry.name + ".";
            for (const auto& e : cache.entries) {
                const auto arch = ldcache::arch_of(e.flags);
                if (e.soname.rfind(prefix, 0) != 0) continue;
                if (arch != ldcache::kNativeArch && arch != ldcache::kCompat32Arch) continue;
                const bool compat32 = arch == ldcache::kCompat32Arch;
                auto known = std::find_if(f.libraries.begin(), f.libraries.end(), [&](auto& l) {
                    return l.soname == e.soname && l.compat32 == compat32;
                });
                if (known != f.libraries.end()) {
                    known->caps |= entry.caps;
                    continue;
                }
                const auto* chosen = ldcache::lookup(cache, e.soname, arch);
                LibraryFact lib{e.soname, entry.caps, compat32, chosen->path, std::nullopt};
                if (auto real = node::detail::resolve_in(config.roots.driver, chosen->path))
                    lib.real = real->string();
                f.libraries.push_back(std::move(lib));
            }
        }
    } catch (const util::Error& e) {
        f.ldcache_error = e.what();
    }
}

// The /dev/char/<major>:<minor> link of each character device found, and
// where it leads.
void read_dev_char(NodeFacts& f, const config::Config& config) {
    for (const auto& [path, fact] : f.dev) {
        if (fact.type != FileFact::Type::CharDevice) continue;
        const std::string link = fmt::format("/dev/char/{}:{}", fact.major, fact.minor);
        f.dev_char.emplace(link, stat_path(under(config.roots.dev, link)));
        auto target = node::detail::resolve_in(config.roots.dev, link);
        f.dev_char_target.emplace(link, target ? std::optional(target->string()) : std::nullopt);
    }
}

}  // namespace

NodeFacts gather_node(const config::Config& config) {
    NodeFacts f;
    f.roots = config.roots;
    const fs::path& proc = config.roots.proc;
    read_driver_proc(f, proc);
    for (const char* name : {"nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"})
        f.dev.emplace(std::string("/dev/") + name, FileFact{});
    for (const auto& access : node::detail::mig_access_files(proc / "driver/nvidia/capabilities"))
        add_mig_caps(f, access);
    for (const auto& name : node::detail::list_dir(under(config.roots.dev, kImexDir))) {
        f.imex_names.push_back(name);
        f.dev.emplace(std::string(kImexDir) + "/" + name, FileFact{});
    }
    for (auto& [path, fact] : f.dev) fact = stat_path(under(config.roots.dev, path));

    read_libraries(f, config);

    f.persistenced_socket = under(config.roots.driver, kPersistencedSocket).string();
    f.persistenced = stat_path(f.persistenced_socket);
    f.ldconfig = config.ldconfig.string();
    f.ldcache_method = config.policy.ldcache;
    f.shares = config.policy.shares;
    try {
        // NVML says whether the driver limits cgroups' GPU memory; nothing is stored.
        const node::Node node = node::load_node(config, {.need_nvml = true, .write = false}).node;
        const auto enforcement = decide::share_enforcement(node);
        f.share_by = enforcement.by;
        if (f.share_by == decide::kMps)
            f.mps_daemons = decide::mps_daemon_lines(node, config.mps.root);
        f.share_lacks = enforcement.lacks;
    } catch (const util::Error& e) {
        f.share_lacks = std::string("the node could not be read: ") + e.what();
    }
    std::error_code ec;
    const fs::path real_ldconfig = fs::canonical(config.ldconfig, ec);
    f.ldconfig_fact = ec ? FileFact{} : stat_path(real_ldconfig);

    read_dev_char(f, config);
    gather_families(f, config);
    return f;
}

namespace {

Check node_check(std::string name) {
    Check c;
    c.group = kNodeGroup;
    c.name = std::move(name);
    return c;
}

bool modify_device_files_off(const NodeFacts& f) {
    auto it = f.params.find("ModifyDeviceFiles");
    return it != f.params.end() && it->second == "0";
}

// What is wrong with the node at `path` that must be major:minor; "" when nothing.
std::string node_problem(const NodeFacts& f, const std::string& path, unsigned major,
                         unsigned minor) {
    auto it = f.dev.find(path);
    const FileFact fact = it == f.dev.end() ? FileFact{} : it->second;
    if (fact.type == FileFact::Type::CharDevice && fact.major == major && fact.minor == minor)
        return {};
    return fmt::format("{}: {}, the driver's is character device {}:{}",
                       under(f.roots.dev, path).string(), describe(fact), major, minor);
}

using BadNodes = std::vector<std::tuple<std::string, unsigned, unsigned>>;

// `gpubind setup --device-nodes` for the nodes in `bad` (`extra`: "--all"
// for those beyond the GPUs and control nodes): --force when one exists with
// other numbers, --root for a node that is not the host's (a simulated one:
// its proc is no procfs, which setup reads only when told). "" when the node's
// proc root is not <dev root>/proc, which --root cannot say, or when one is
// there and is not a character device, which setup never replaces.
std::string setup_command(const NodeFacts& f, const BadNodes& bad, std::string_view extra) {
    const bool host = f.roots.dev == "/" && f.roots.proc == "/proc";
    if (!host && f.roots.proc != f.roots.dev / "proc") return {};
    bool force = false;
    for (const auto& node : bad) {
        const auto it = f.dev.find(std::get<0>(node));
        if (it == f.dev.end() || !it->second.exists()) continue;
        if (it->second.type != FileFact::Type::CharDevice) return {};
        force = true;
    }
    return fmt::format("gpubind setup --device-nodes{}{}{}", extra.empty() ? "" : " ", extra,
                       force ? " --force" : "") +
           (host ? "" : " --root " + f.roots.dev.string() + " --simulated-proc");
}

// How to create (or recreate) the nodes in `bad` ((path, major, minor)): the
// setup command (with `setup_extra`; none for the nodes it does not make),
// and the same by hand.
std::string nodes_fix(const NodeFacts& f, const BadNodes& bad,
                      std::optional<std::string_view> setup_extra = std::nullopt) {
    std::string cmds;
    for (const auto& [path, major, minor] : bad) {
        const std::string host = under(f.roots.dev, path).string();
        auto it = f.dev.find(path);
        const bool exists = it != f.dev.end() && it->second.exists();
        cmds += fmt::format("{}{}mknod -m 666 {} c {} {}", cmds.empty() ? "" : "; ",
                            exists ? "rm " + host + " && " : "", host, major, minor);
    }
    if (const std::string setup = setup_extra ? setup_command(f, bad, *setup_extra) : "";
        !setup.empty())
        cmds = setup + " (or by hand: " + cmds + ")";
    if (modify_device_files_off(f))
        return "the driver does not create its device files here (ModifyDeviceFiles: 0): " + cmds +
               " (or nvidia-modprobe with the node's options, at boot)";
    return cmds + " (or run nvidia-modprobe / nvidia-smi once as root, which creates them)";
}

// Adds the node at `path` to `bad` (and its problem to c's evidence) unless
// it is major:minor.
void expect_node(const NodeFacts& f, Check& c, BadNodes& bad, const std::string& path,
                 unsigned major, unsigned minor, const std::string& note = {}) {
    if (auto p = node_problem(f, path, major, minor); !p.empty()) {
        c.evidence.push_back(p + note);
        bad.emplace_back(path, major, minor);
    }
}

// c with a verdict other than ok: what, why, how to fix.
Check said(Check c, Verdict v, std::string summary, std::vector<std::string> evidence,
           std::string fix) {
    c.verdict = v;
    c.summary = std::move(summary);
    c.evidence = std::move(evidence);
    c.fix = std::move(fix);
    return c;
}

std::vector<std::string> params_evidence(const NodeFacts& f) {
    auto it = f.params.find("ModifyDeviceFiles");
    if (it == f.params.end()) return {};
    return {(f.roots.proc / "driver/nvidia/params").string() +
            ": ModifyDeviceFiles: " + it->second};
}

Check check_module(const NodeFacts& f) {
    Check c = node_check("kernel-module");
    const std::string file = (f.roots.proc / "driver/nvidia/version").string();
    if (!f.version_error.empty())
        return said(c, Verdict::Problem,
                    "the NVIDIA kernel module is not loaded (or its version cannot be read)",
                    {f.version_error},
                    "load it (modprobe nvidia), or reboot after installing the driver");
    c.summary = "loaded, version " + f.module_version;
    c.evidence = {file + ": " + f.module_version};
    return c;
}

Check check_driver_libraries(const NodeFacts& f) {
    Check c = node_check("driver-libraries");
    if (!f.ldcache_error.empty())
        return said(c, Verdict::Problem, "the host's loader cache cannot be read",
                    {f.ldcache_error},
                    "run ldconfig on the host (as root) to rebuild " + f.ldcache_path);
    std::vector<std::string> mismatched, missing;
    for (const char* soname : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
        auto lib = std::find_if(f.libraries.begin(), f.libraries.end(),
                                [&](const auto& l) { return l.soname == soname && !l.compat32; });
        if (lib == f.libraries.end() || !lib->real) {
            missing.push_back(soname);
            c.evidence.push_back(fmt::format("{}: {}", soname,
                                             lib == f.libraries.end()
                                                 ? "not in " + f.ldcache_path
                                                 : lib->path + " leads to no file"));
            continue;
        }
        const std::string v = version_of(*lib->real);
        c.evidence.push_back(fmt::format("{} => {} (version {})", soname, *lib->real, v));
        if (!f.module_version.empty() && v != f.module_version) mismatched.push_back(soname);
    }
    if (!f.module_version.empty())
        c.evidence.push_back("kernel module version " + f.module_version);
    if (!mismatched.empty()) {
        c.verdict = Verdict::Problem;
        c.summary = fmt::format(
            "driver/library version mismatch: the kernel module is {}, the libraries are not "
            "(NVML: \"Driver/library version mismatch\")",
            f.module_version);
        c.fix =
            "reboot (or unload and reload the nvidia modules) so the module matches the "
            "installed libraries, or install the libraries of version " +
            f.module_version;
    } else if (!missing.empty()) {
        c.verdict = Verdict::Problem;
        c.summary = "the driver's user-space libraries are missing from the loader cache";
        c.fix = "install the driver's user-space libraries (version " + f.module_version +
                ") and run ldconfig";
    } else {
        c.summary = "libcuda.so.1 and libnvidia-ml.so.1 match the kernel module";
    }
    return c;
}

Check check_gpu_nodes(const NodeFacts& f) {
    Check c = node_check("gpu-device-nodes");
    BadNodes bad;
    unsigned gpus = 0;
    for (const auto& g : f.gpus) {
        if (g.excluded) {
            c.evidence.push_back("GPU " + g.bus_id + " is excluded by the driver");
            continue;
        }
        if (!g.minor) {
            c.evidence.push_back("GPU " + g.bus_id + ": no Device Minor in its information file");
            continue;
        }
        ++gpus;
        expect_node(f, c, bad, gpu_node(*g.minor), node::kNvidiaMajor, *g.minor);
    }
    if (gpus > 0)
        expect_node(f, c, bad, "/dev/nvidiactl", node::kNvidiaMajor, node::kNvidiactlMinor);
    if (!bad.empty()) {
        c.verdict = Verdict::Problem;
        c.summary = fmt::format("{} of the GPU and control nodes are missing or wrong", bad.size());
        for (auto& e : params_evidence(f)) c.evidence.push_back(e);
        c.fix = nodes_fix(f, bad, "");
    } else if (gpus == 0) {
        c.verdict = f.version_error.empty() ? Verdict::Warning : Verdict::Problem;
        c.summary = "the driver lists no GPU";
        c.evidence.push_back((f.roots.proc / "driver/nvidia/gpus").string() + " is empty");
        c.fix = "check that the GPUs are bound to the nvidia driver (lspci -k, dmesg)";
    } else {
        c.summary = fmt::format("{} GPU nodes and nvidiactl have the driver's numbers ({}:N)", gpus,
                                node::kNvidiaMajor);
    }
    return c;
}

Check check_uvm_nodes(const NodeFacts& f) {
    Check c = node_check("uvm-device-nodes");
    auto major = f.majors.find("nvidia-uvm");
    if (major == f.majors.end())
        return said(c, Verdict::Warning, "nvidia-uvm is not loaded: CUDA in containers will fail",
                    {(f.roots.proc / "devices").string() + " has no nvidia-uvm"},
                    "modprobe nvidia-uvm (nvidia-modprobe -u -c=0 also creates its nodes)");
    BadNodes bad;
    for (auto [name, minor] :
         {std::pair{"/dev/nvidia-uvm", 0u}, std::pair{"/dev/nvidia-uvm-tools", 1u}})
        expect_node(f, c, bad, name, major->second, minor);
    c.evidence.push_back(fmt::format("{}: nvidia-uvm is major {}",
                                     (f.roots.proc / "devices").string(), major->second));
    if (bad.empty()) {
        c.summary = "nvidia-uvm and nvidia-uvm-tools have the driver's numbers";
        return c;
    }
    for (auto& e : params_evidence(f)) c.evidence.push_back(e);
    c.verdict = Verdict::Problem;
    c.summary = "the nvidia-uvm nodes are missing or wrong: CUDA fails in containers";
    c.fix = nodes_fix(f, bad, "");
    return c;
}

Check check_mig(const NodeFacts& f) {
    Check c = node_check("mig-capability-nodes");
    if (f.mig_caps.empty()) {
        c.summary = "MIG is off (the driver exposes no MIG capability)";
        return c;
    }
    auto major = f.majors.find("nvidia-caps");
    if (major == f.majors.end())
        return said(c, Verdict::Problem,
                    "the driver exposes MIG capabilities but nvidia-caps has no major",
                    {(f.roots.proc / "devices").string() + " has no nvidia-caps"},
                    "reload the nvidia module (nvidia-caps is part of it), or reboot");
    BadNodes bad;
    for (const auto& [access, minor] : f.mig_caps) {
        if (!minor) {
            c.evidence.push_back(access + ": no DeviceFileMinor");
            continue;
        }
        expect_node(f, c, bad, cap_node(*minor), major->second, *minor, " (" + access + ")");
    }
    if (bad.empty()) {
        c.summary =
            fmt::format("{} MIG capability nodes have the driver's numbers", f.mig_caps.size());
        return c;
    }
    for (auto& e : params_evidence(f)) c.evidence.push_back(e);
    c.verdict = Verdict::Problem;
    c.summary = fmt::format(
        "{} MIG capability nodes are missing or wrong: MIG devices cannot be "
        "given to containers",
        bad.size());
    c.fix = "nvidia-modprobe -f " + (f.roots.proc / "driver/nvidia/capabilities").string() +
            "/... for each, or: " + nodes_fix(f, bad, "--all");
    return c;
}

Check check_imex(const NodeFacts& f) {
    Check c = node_check("imex-channels");
    auto major = f.majors.find("nvidia-caps-imex-channels");
    if (f.imex_names.empty()) {
        c.summary = major == f.majors.end() ? "no IMEX channels (the driver has none)"
                                            : "no IMEX channel nodes created";
        return c;
    }
    if (major == f.majors.end())
        return said(c, Verdict::Problem,
                    "IMEX channel nodes exist but the driver has no IMEX channels",
                    {(f.roots.proc / "devices").string() + " has no nvidia-caps-imex-channels"},
                    "remove " + under(f.roots.dev, kImexDir).string() +
                        " (left by another driver), or load a driver with IMEX support");
    BadNodes bad;
    for (const auto& name : f.imex_names) {
        const std::string path = std::string(kImexDir) + "/" + name;
        auto n =
            name.rfind("channel", 0) == 0 ? util::parse_unsigned(name.substr(7)) : std::nullopt;
        if (!n) {
            c.evidence.push_back(under(f.roots.dev, path).string() + " is not a channel name");
            continue;
        }
        expect_node(f, c, bad, path, major->second, static_cast<unsigned>(*n));
    }
    if (bad.empty()) {
        c.summary =
            fmt::format("{} IMEX channel nodes, major {}", f.imex_names.size(), major->second);
        if (!c.evidence.empty()) c.verdict = Verdict::Warning;
        return c;
    }
    c.verdict = Verdict::Problem;
    c.summary = "IMEX channel nodes with the wrong numbers";
    c.fix = nodes_fix(f, bad);
    return c;
}

// A capability's libraries: each catalog library in the cache must lead to a
// file of the module's version; utility and compute need NVML and CUDA.
Check check_capability(const NodeFacts& f, config::Capabilities cap) {
    const std::string name = config::capability_names(cap);
    Check c = node_check("capability-" + name);
    std::vector<std::string> bad;
    unsigned found = 0;
    for (const auto& lib : f.libraries) {
        if (!(lib.caps & cap)) continue;
        const std::string what = lib.soname + (lib.compat32 ? " (32-bit)" : "");
        if (!lib.real) {
            bad.push_back(what);
            c.evidence.push_back(fmt::format("{} => {}: no such file", what, lib.path));
            continue;
        }
        if (!f.module_version.empty() && version_of(*lib.real) != f.module_version) continue;
        ++found;
    }
    const char* need = cap == config::kCapUtility   ? "libnvidia-ml.so.1"
                       : cap == config::kCapCompute ? "libcuda.so.1"
                                                    : nullptr;
    if (need) {
        const bool have = std::any_of(f.libraries.begin(), f.libraries.end(), [&](const auto& l) {
            return l.soname == need && !l.compat32 && l.real;
        });
        if (!have && std::find(bad.begin(), bad.end(), need) == bad.end()) {
            bad.push_back(need);
            c.evidence.push_back(std::string(need) + ": not in " + f.ldcache_path);
        }
    }
    if (!bad.empty()) {
        c.verdict = Verdict::Problem;
        c.summary = fmt::format("{} of the {} capability's libraries are missing: {}", bad.size(),
                                name, fmt::format("{}", fmt::join(bad, ", ")));
        c.fix = "reinstall the driver's user-space libraries (version " + f.module_version +
                "), then run ldconfig";
        return c;
    }
    c.summary = found ? fmt::format("{} libraries of version {}", found, f.module_version)
                      : "not installed (containers asking for it get no libraries)";
    return c;
}

Check check_persistenced(const NodeFacts& f) {
    Check c = node_check("persistence-daemon");
    c.evidence = {f.persistenced_socket + ": " + describe(f.persistenced)};
    if (f.persistenced.type == FileFact::Type::Socket) {
        c.summary = "nvidia-persistenced is running";
        return c;
    }
    c.verdict = Verdict::Warning;
    c.summary =
        "nvidia-persistenced is not running: every NVML and CUDA start in a container "
        "initializes the GPUs again (seconds each)";
    c.fix = "systemctl enable --now nvidia-persistenced";
    return c;
}

// GPU shares (issue 48): the driver's per-cgroup memory limit where NVML
// offers it; else what a container asking for one gets follows [policy] shares.
Check check_shares(const NodeFacts& f) {
    Check c = node_check("gpu-shares");
    c.evidence = {"enforced by: " + (f.share_by.empty() ? "nothing (" + f.share_lacks + ")"
                                                        : f.share_by + " (memory only)"),
                  std::string("[policy] shares = ") +
                      (f.shares == config::SharesPolicy::Soft ? "\"soft\"" : "\"strict\"")};
    if (f.share_by == decide::kMps) {
        for (const auto& line : f.mps_daemons) c.evidence.push_back(line);
        const bool all = std::all_of(f.mps_daemons.begin(), f.mps_daemons.end(), [](const auto& l) {
            return l.find("daemon runs (") != std::string::npos;
        });
        c.summary =
            "a container's GPU memory and compute share is enforced by MPS: the "
            "GPU's daemon's ceiling holds, the container's own lower share only for "
            "clients that keep their CUDA_MPS_* variables";
        if (!all) {
            c.verdict = Verdict::Warning;
            c.summary += "; a GPU's daemon does not run, and shares of it are refused";
            c.fix = "run `gpubind mps` (the gpubind-mps unit, or the DaemonSet's container)";
        }
        return c;
    }
    if (!f.share_by.empty()) {
        c.summary = "a container's GPU memory share is enforced by " + f.share_by +
                    ", set on its cgroup at its start; a compute share is not enforced";
        return c;
    }
    if (f.shares == config::SharesPolicy::Strict) {
        c.summary =
            "no GPU share is enforced here: a container asking for one (GPUBIND_GPU_MEMORY, "
            "NVIDIA_GPU_MEMORY_LIMIT, HAMi's or gpushare's variables) is refused";
        return c;
    }
    c.verdict = Verdict::Warning;
    c.summary =
        "a container asking for a GPU share starts with its whole GPUs, unenforced: its "
        "neighbours on the GPU are not protected from it";
    c.fix = "set [policy] shares = \"strict\" to refuse such containers";
    return c;
}

Check check_ldconfig(const NodeFacts& f) {
    Check c = node_check("ldconfig");
    c.evidence = {"[node] ldconfig = " + f.ldconfig + " (a leading @ means a host path)",
                  f.ldconfig + ": " + describe(f.ldconfig_fact)};
    if (f.ldconfig_fact.type == FileFact::Type::Regular && f.ldconfig_fact.executable) {
        c.summary = f.ldconfig + " is executable";
        return c;
    }
    const bool needed = f.ldcache_method == config::LdcacheMethod::Ldconfig;
    c.verdict = needed ? Verdict::Problem : Verdict::Warning;
    c.summary = needed ? "the configured ldconfig cannot run: every GPU container fails"
                       : "the configured ldconfig cannot run: images without a loader cache fail";
    c.fix =
        "set [node] ldconfig in the config to the host's ldconfig (e.g. \"@/sbin/ldconfig\", "
        "or \"@/sbin/ldconfig.real\" on Ubuntu)";
    return c;
}

Check check_dev_char(const NodeFacts& f) {
    Check c = node_check("dev-char-links");
    unsigned ok = 0;
    for (const auto& [path, fact] : f.dev) {
        if (fact.type != FileFact::Type::CharDevice) continue;
        const std::string link = fmt::format("/dev/char/{}:{}", fact.major, fact.minor);
        auto t = f.dev_char_target.find(link);
        if (t != f.dev_char_target.end() && t->second == path) {
            ++ok;
            continue;
        }
        auto l = f.dev_char.find(link);
        c.evidence.push_back(fmt::format("{}: {}", under(f.roots.dev, link).string(),
                                         l == f.dev_char.end() ? "missing" : describe(l->second)) +
                             " (for " + path + ")");
    }
    if (c.evidence.empty()) {
        c.summary = fmt::format("{} links in /dev/char lead to the NVIDIA nodes", ok);
        return c;
    }
    c.verdict = Verdict::Warning;
    c.summary = fmt::format(
        "{} NVIDIA nodes have no /dev/char link: systemd drops their device rules at "
        "`systemctl daemon-reload`",
        c.evidence.size());
    c.fix = "gpubind setup --dev-char-links" +
            (f.roots.dev == "/" ? std::string() : " --root " + f.roots.dev.string()) +
            " (the package's udev rule keeps them)";
    return c;
}

}  // namespace

std::vector<Check> check_node(const NodeFacts& f) {
    std::vector<Check> out = {check_module(f)};
    if (!f.version_error.empty()) return out;
    out.push_back(check_driver_libraries(f));
    out.push_back(check_gpu_nodes(f));
    out.push_back(check_uvm_nodes(f));
    out.push_back(check_mig(f));
    out.push_back(check_imex(f));
    for (config::Capabilities cap : {config::kCapUtility, config::kCapCompute, config::kCapVideo,
                                     config::kCapGraphics, config::kCapDisplay, config::kCapNgx})
        out.push_back(check_capability(f, cap));
    out.push_back(check_persistenced(f));
    out.push_back(check_shares(f));
    out.push_back(check_ldconfig(f));
    out.push_back(check_dev_char(f));
    for (auto& c : check_families(f)) out.push_back(std::move(c));
    return out;
}

}  // namespace gpubind::doctor
