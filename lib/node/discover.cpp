// Node discovery: procfs for the driver and its GPUs, stat for device nodes,
// the ld.so.cache and the catalog for driver files, NVML for the rest.
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/node/families.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "nvml.hpp"

namespace gpubind::node {

namespace fs = std::filesystem;

namespace {

using detail::gpu_node_fields;
using detail::list_dir;
using detail::program_dirs;
using detail::read_fields;
using detail::resolve_in;
using detail::under;

// Checks that a character device with the expected numbers sits at `path`.
std::optional<DeviceNode> stat_node(const fs::path& dev_root, const fs::path& path, unsigned major,
                                    unsigned minor, bool required) {
    DeviceNode node{path, under(dev_root, path), major, minor, 0};
    struct stat st {};
    if (::stat(node.host_path.c_str(), &st) != 0) {
        if (errno == ENOENT && !required) return std::nullopt;
        util::throw_errno("stat device node", node.host_path);
    }
    if (!S_ISCHR(st.st_mode))
        util::throw_invalid("check device node", node.host_path, "not a character device");
    if (::major(st.st_rdev) != major || ::minor(st.st_rdev) != minor)
        util::throw_invalid("check device node", node.host_path,
                            "is " + std::to_string(::major(st.st_rdev)) + ":" +
                                std::to_string(::minor(st.st_rdev)) + ", expected " +
                                std::to_string(major) + ":" + std::to_string(minor));
    node.mode = st.st_mode & 07777;
    return node;
}

unsigned access_minor(const fs::path& access) {
    auto fields = read_fields(access);
    auto it = fields.find("DeviceFileMinor");
    auto minor = it == fields.end() ? std::nullopt : util::parse_unsigned(it->second);
    if (!minor) util::throw_invalid("read MIG capability", access.string(), "no DeviceFileMinor");
    return static_cast<unsigned>(*minor);
}

void discover_gpus(Node& node, const std::map<std::string, unsigned, std::less<>>& majors) {
    const fs::path gpus_dir = node.roots.proc / "driver/nvidia/gpus";
    for (const auto& bus_id : list_dir(gpus_dir)) {
        const fs::path info = gpus_dir / bus_id / "information";
        auto fields = read_fields(info);
        auto get = [&](std::string_view key, bool required) -> std::string {
            auto it = fields.find(key);
            if (it != fields.end()) return it->second;
            if (required)
                util::throw_invalid("read GPU information", info.string(),
                                    "no \"" + std::string(key) + "\" field");
            return {};
        };
        Gpu gpu;
        gpu.pci_bus_id = util::to_lower(bus_id);
        gpu.proc_dir = gpus_dir / bus_id;
        gpu.model = get("Model", true);
        gpu.uuid = get("GPU UUID", true);
        gpu.vbios = get("Video BIOS", false);
        gpu.bus_type = get("Bus Type", false);
        get("Device Minor", true);  // there, else an error saying so
        const auto node_fields = gpu_node_fields(fields);
        gpu.excluded = node_fields.excluded;
        if (!node_fields.minor)
            util::throw_invalid("read GPU information", info.string(), "bad \"Device Minor\"");
        gpu.minor = *node_fields.minor;
        if (gpu.excluded) {
            node.warnings.push_back("GPU " + gpu.pci_bus_id + " is excluded by the driver");
            continue;
        }
        gpu.node = *stat_node(node.roots.dev, "/dev/nvidia" + std::to_string(gpu.minor),
                              kNvidiaMajor, gpu.minor, true);
        node.gpus.push_back(std::move(gpu));
    }
    std::sort(node.gpus.begin(), node.gpus.end(),
              [](const Gpu& a, const Gpu& b) { return a.pci_bus_id < b.pci_bus_id; });
    for (unsigned i = 0; i < node.gpus.size(); ++i) node.gpus[i].index = i;

    // MIG: proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access.
    const fs::path caps_dir = node.roots.proc / "driver/nvidia/capabilities";
    auto caps_major = majors.find("nvidia-caps");
    auto cap_node = [&](const fs::path& access) {
        if (caps_major == majors.end())
            util::throw_invalid(
                "read MIG capability", access.string(),
                "no nvidia-caps major in " + (node.roots.proc / "devices").string());
        unsigned minor = access_minor(access);
        return *stat_node(node.roots.dev, "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor),
                          caps_major->second, minor, true);
    };
    for (auto& gpu : node.gpus) {
        const fs::path mig_dir = caps_dir / ("gpu" + std::to_string(gpu.minor)) / "mig";
        for (const auto& gi_name : list_dir(mig_dir)) {
            auto gi = gi_name.rfind("gi", 0) == 0 ? util::parse_unsigned(gi_name.substr(2))
                                                  : std::nullopt;
            if (!gi) continue;
            for (const auto& ci_name : list_dir(mig_dir / gi_name)) {
                auto ci = ci_name.rfind("ci", 0) == 0 ? util::parse_unsigned(ci_name.substr(2))
                                                      : std::nullopt;
                if (!ci) continue;
                MigDevice mig;
                mig.gpu_index = gpu.index;
                mig.gi = static_cast<unsigned>(*gi);
                mig.ci = static_cast<unsigned>(*ci);
                mig.gi_access = mig_dir / gi_name / "access";
                mig.ci_access = mig_dir / gi_name / ci_name / "access";
                mig.gi_cap = cap_node(mig.gi_access);
                mig.ci_cap = cap_node(mig.ci_access);
                gpu.mig.push_back(std::move(mig));
            }
        }
        std::sort(gpu.mig.begin(), gpu.mig.end(), [](const MigDevice& a, const MigDevice& b) {
            return std::tie(a.gi, a.ci) < std::tie(b.gi, b.ci);
        });
        for (unsigned i = 0; i < gpu.mig.size(); ++i) gpu.mig[i].index = i;
    }
    for (const char* which : {"config", "monitor"}) {
        const fs::path access = caps_dir / "mig" / which;
        struct stat st {};
        if (::stat(access.c_str(), &st) == 0) node.mig_control.push_back(cap_node(access));
    }
}

void discover_control_nodes(Node& node,
                            const std::map<std::string, unsigned, std::less<>>& majors) {
    if (auto ctl = stat_node(node.roots.dev, "/dev/nvidiactl", kNvidiaMajor, kNvidiactlMinor,
                             !node.gpus.empty()))
        node.control.push_back(*ctl);
    if (auto uvm = majors.find("nvidia-uvm"); uvm != majors.end()) {
        for (auto [name, minor] :
             {std::pair{"nvidia-uvm", 0u}, std::pair{"nvidia-uvm-tools", 1u}}) {
            if (auto n = stat_node(node.roots.dev, std::string("/dev/") + name, uvm->second, minor,
                                   false))
                node.control.push_back(*n);
            else
                node.warnings.push_back(std::string("no /dev/") + name);
        }
    } else {
        node.warnings.push_back("nvidia-uvm is not loaded (no major in " +
                                (node.roots.proc / "devices").string() + ")");
    }
    if (auto modeset =
            stat_node(node.roots.dev, "/dev/nvidia-modeset", kNvidiaMajor, kModesetMinor, false))
        node.control.push_back(*modeset);
}

// IMEX channels: dev/nvidia-caps-imex-channels/channel<n>, char devices of the
// driver's "nvidia-caps-imex-channels" major with minor n.
void discover_imex_channels(Node& node,
                            const std::map<std::string, unsigned, std::less<>>& majors) {
    const fs::path rel_dir = "/dev/nvidia-caps-imex-channels";
    const fs::path dir = under(node.roots.dev, rel_dir);
    std::vector<std::string> names;
    try {
        names = list_dir(dir);
    } catch (const util::Error& e) {
        node.warnings.push_back(std::string("no IMEX channel: ") + e.what());
        return;
    }
    if (names.empty()) return;
    auto major = majors.find("nvidia-caps-imex-channels");
    if (major == majors.end()) {
        node.warnings.push_back(dir.string() + " exists but " +
                                (node.roots.proc / "devices").string() +
                                " has no nvidia-caps-imex-channels major: no IMEX channel");
        return;
    }
    for (const auto& name : names) {
        std::string_view digits =
            std::string_view(name).substr(name.rfind("channel", 0) == 0 ? 7 : name.size());
        auto n = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
                         (digits.size() == 1 || digits.front() != '0')
                     ? util::parse_unsigned(digits)
                     : std::nullopt;
        if (!n || *n >= (1ul << 20)) {
            node.warnings.push_back((dir / name).string() + " is not an IMEX channel name");
            continue;
        }
        try {
            if (auto dev = stat_node(node.roots.dev, rel_dir / name, major->second,
                                     static_cast<unsigned>(*n), false))
                node.imex_channels.push_back(*dev);
        } catch (const util::Error& e) {
            node.warnings.push_back(std::string("IMEX channel left out: ") + e.what());
        }
    }
    std::sort(node.imex_channels.begin(), node.imex_channels.end(),
              [](const DeviceNode& a, const DeviceNode& b) { return a.minor < b.minor; });
}

void discover_libraries(Node& node, const config::Config& config) {
    const auto cache = ldcache::load(config.ldcache_path());
    const std::string suffix = ".so." + node.driver_version;
    for (const auto& entry : config.catalog.libraries) {
        const std::string prefix = entry.name + ".";
        std::set<std::pair<std::string, ldcache::Arch>> seen;
        for (const auto& e : cache.entries) {
            auto arch = ldcache::arch_of(e.flags);
            if (e.soname.rfind(prefix, 0) != 0) continue;
            if (arch != ldcache::kNativeArch && arch != ldcache::kCompat32Arch) continue;
            if (!seen.emplace(e.soname, arch).second) continue;
            const auto* chosen = ldcache::lookup(cache, e.soname, arch);
            auto real = resolve_in(node.roots.driver, chosen->path);
            if (!real) {
                node.warnings.push_back("cache entry " + e.soname + " => " + chosen->path +
                                        " does not resolve");
                continue;
            }
            const std::string file = real->filename().string();
            if (file.size() < suffix.size() ||
                file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
                continue;  // another driver version's library
            DriverFile f;
            f.kind = FileKind::Library;
            f.name = e.soname;
            f.host_path = under(node.roots.driver, chosen->path);
            f.real_path = under(node.roots.driver, *real);
            f.caps = entry.caps;
            f.compat32 = arch == ldcache::kCompat32Arch;
            node.files.push_back(std::move(f));
        }
    }
}

// Why an IPC of the node (a socket, the MPS pipe directory), which containers
// get read-write, must not be given them; "" when it may. Walked from "/" one
// component at a time without following links: every directory on the way
// is root's and no one else can replace what is in it (not writable by
// others, or sticky), and the IPC itself is a socket or a directory of root's.
// "missing" when it is not there. Where an owner on the way shows as Unknown
// (a user namespace that does not map the host's root: root's and any other
// unmapped user's files look alike), the IPC is given only where root's own
// stored description vouches for it (issue 44, F1: another user's
// /tmp/nvidia-mps passed for root's there).
std::string unsafe_ipc(const fs::path& p, const std::vector<unsigned>& owners,
                       const Vouch& vouched) {
    bool unknown = false;
    auto trusted = [&](uid_t uid) {
        switch (util::host_owner(uid)) {
            case util::HostOwner::Root:
                return true;
            case util::HostOwner::Unknown:  // never an ipc-owners user: any unmapped one shows so
                unknown = true;
                return true;
            case util::HostOwner::Other:
                break;
        }
        return std::find(owners.begin(), owners.end(), uid) != owners.end();
    };
    if (!p.is_absolute()) return "is not an absolute path";
    // A call that fails for another reason than the IPC's absence or this
    // caller's permissions (EIO) is an Error naming the path: a node that
    // cannot be read is not one without the IPC.
    const auto failed = [&](const char* op, const fs::path& at) -> std::string {
        if (errno == EACCES) return "cannot be checked (" + at.string() + ")";
        util::throw_errno(op, at.string());
    };
    util::Fd dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return failed("open", "/");
    fs::path at = "/";
    std::vector<std::string> parts;
    for (const auto& c : p.relative_path()) parts.push_back(c.string());
    for (std::size_t i = 0; i < parts.size(); ++i) {
        struct stat st {};
        if (::fstat(dir.get(), &st) != 0) return failed("stat", at);
        if (!trusted(st.st_uid))
            return "is in a directory not owned by root (or [policy] ipc-owners)";
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
            return "is in a directory other users may write";
        at /= parts[i];
        util::Fd next(::openat(dir.get(), parts[i].c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (!next) return errno == ENOENT || errno == ENOTDIR ? "missing" : failed("open", at);
        if (::fstat(next.get(), &st) != 0) return failed("stat", at);
        const bool last = i + 1 == parts.size();
        if (S_ISLNK(st.st_mode)) return "is reached through a symbolic link";
        if (!last && !S_ISDIR(st.st_mode)) return "is under something not a directory";
        if (last) {
            if (!S_ISSOCK(st.st_mode) && !S_ISDIR(st.st_mode))
                return "is neither a socket nor a directory";
            if (!trusted(st.st_uid)) return "is not owned by root (or [policy] ipc-owners)";
        }
        dir = std::move(next);
    }
    if (unknown && !(vouched && vouched(p.string())))
        return "has an owner (or a directory above it has) that this user namespace does not "
               "map, and root's stored description does not vouch for it as it is";
    return {};
}

// A driver program is an executable ELF file. A script is not: GPU sandboxes
// put shell wrappers in /usr/bin that run the real program from the driver's
// own prefix, a path a container does not have.
// Missing is what is not there for this caller (no such file, a path
// through a non-directory, a loop, no permission); a read that fails
// otherwise (EIO) is an Error naming it, not a program the node lacks.
enum class Program { Missing, Elf, Other };
Program program_at(const fs::path& p) {
    util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!fd) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EACCES ||
            errno == ENAMETOOLONG)
            return Program::Missing;
        util::throw_errno("open", p.string());
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", p.string());
    if (!S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0) return Program::Missing;
    char magic[4] = {};
    const ssize_t n = ::pread(fd.get(), magic, sizeof magic, 0);
    if (n < 0) util::throw_errno("read", p.string());
    return n == sizeof magic && std::memcmp(magic, "\177ELF", sizeof magic) == 0 ? Program::Elf
                                                                                 : Program::Other;
}

void discover_other_files(Node& node, const config::Config& config, const Vouch& vouched) {
    const auto dirs = program_dirs(node);
    for (const auto& entry : config.catalog.binaries) {
        std::optional<fs::path> skipped;
        bool found = false;
        for (const auto& dir : dirs) {
            const fs::path p = under(node.roots.driver, dir / entry.name);
            const Program kind = program_at(p);
            if (kind == Program::Missing) continue;
            if (kind == Program::Other) {
                if (!skipped) skipped = p;
                continue;
            }
            const auto real = resolve_in(node.roots.driver, dir / entry.name);
            node.files.push_back({FileKind::Binary, entry.name, p,
                                  real ? under(node.roots.driver, *real) : p, entry.caps, false});
            found = true;
            break;
        }
        if (!found && skipped)
            node.warnings.push_back(
                skipped->string() +
                " is not an ELF program (a wrapper script?) and no driver program "
                "of that name was found beside the driver's libraries; not given");
    }
    for (const auto& entry : config.catalog.ipcs) {
        fs::path p = under(node.roots.driver, entry.name);
        if (std::string why = unsafe_ipc(p, config.policy.ipc_owners, vouched); !why.empty()) {
            if (why != "missing") node.warnings.push_back(p.string() + " " + why + "; not given");
            continue;
        }
        node.files.push_back({FileKind::Ipc, entry.name, p, p, entry.caps, false});
    }
    for (const auto& entry : config.catalog.firmware) {
        std::string pattern = entry.name;
        if (auto v = pattern.find("{version}"); v != std::string::npos)
            pattern.replace(v, 9, node.driver_version);
        fs::path glob(pattern);
        fs::path dir = under(node.roots.driver, glob.parent_path());
        for (const auto& name : list_dir(dir)) {
            if (::fnmatch(glob.filename().c_str(), name.c_str(), FNM_PERIOD) != 0) continue;
            struct stat st {};
            if (::stat((dir / name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            auto rel = glob.parent_path() / name;
            bool dup = std::any_of(node.files.begin(), node.files.end(), [&](const DriverFile& f) {
                return f.kind == FileKind::Firmware && f.name == rel.string();
            });
            if (dup) continue;
            node.files.push_back(
                {FileKind::Firmware, rel.string(), dir / name, dir / name, entry.caps, false});
        }
    }
    // A file listed under several capabilities is one entry bringing all of them.
    std::map<std::pair<FileKind, std::string>, std::size_t> first;
    std::vector<DriverFile> merged;
    for (auto& f : node.files) {
        auto key = std::pair{f.kind, f.name + (f.compat32 ? "#32" : "")};
        if (auto it = first.find(key); it != first.end()) {
            merged[it->second].caps |= f.caps;
        } else {
            first.emplace(key, merged.size());
            merged.push_back(std::move(f));
        }
    }
    node.files = std::move(merged);
}

}  // namespace

namespace detail {

std::vector<fs::path> program_dirs(const Node& node) {
    std::vector<fs::path> dirs = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
    for (const auto& f : node.files) {
        if (f.kind != FileKind::Library || f.compat32) continue;
        const fs::path lib =
            "/" / fs::path(f.host_path).parent_path().lexically_relative(node.roots.driver);
        for (fs::path d = lib; d.has_relative_path(); d = d.parent_path()) {
            const std::string name = d.filename().string();
            if (name != "lib" && name != "lib64") continue;
            fs::path bin = d.parent_path() / "bin";
            if (std::find(dirs.begin(), dirs.end(), bin) == dirs.end()) dirs.push_back(bin);
            break;
        }
    }
    return dirs;
}

}  // namespace detail

const DeviceNode* Node::control_node(std::string_view name) const {
    for (const auto& n : control)
        if (util::base_name(n.path) == name) return &n;
    return nullptr;
}

std::string apply_nvml(Node& node, std::chrono::milliseconds timeout) {
    auto lib = std::find_if(node.files.begin(), node.files.end(), [](const DriverFile& f) {
        return f.kind == FileKind::Library && !f.compat32 && f.name == "libnvidia-ml.so.1";
    });
    if (lib == node.files.end()) {
        const std::string why =
            "no libnvidia-ml.so.1: CUDA version, brand and compute "
            "capability are unknown";
        node.warnings.push_back(why);
        node.memory_limits_why = "no libnvidia-ml.so.1";
        return why;
    }
    NvmlFacts facts;
    try {
        facts = query_nvml(lib->host_path, timeout);
    } catch (const util::Error& e) {
        node.warnings.push_back(std::string("NVML: ") + e.what());
        node.memory_limits_why = std::string("NVML failed: ") + e.what();
        return e.what();
    }
    node.cuda_version = facts.cuda_version;
    node.memory_limits = facts.memory_limits;
    node.memory_limits_why = facts.memory_limits ? std::string()
                             : facts.memory_limits_why.empty()
                                 ? std::string("NVML said nothing of it (an older helper)")
                                 : facts.memory_limits_why;
    for (auto& gpu : node.gpus) {
        auto it = facts.gpus.find(gpu.minor);
        if (it == facts.gpus.end()) continue;
        gpu.brand = it->second.brand;
        gpu.compute_capability = it->second.compute_capability;
        gpu.memory = it->second.memory;
        gpu.nvlink = it->second.nvlink;
        for (auto& mig : gpu.mig) {
            auto m = it->second.mig_uuids.find({mig.gi, mig.ci});
            if (m != it->second.mig_uuids.end()) mig.uuid = m->second;
        }
    }
    return {};
}

Node discover(const config::Config& config, const DiscoverOptions& options) {
    Node node;
    node.roots = config.roots;
    node.driver_version =
        node::detail::read_driver_version(node.roots.proc / "driver/nvidia/version");
    const auto majors = node::detail::read_majors(node.roots.proc / "devices");
    discover_gpus(node, majors);
    discover_control_nodes(node, majors);
    discover_imex_channels(node, majors);
    discover_families(node, config, majors, options.vouched);
    discover_libraries(node, config);
    discover_other_files(node, config, options.vouched);
    if (options.nvml && !node.gpus.empty()) apply_nvml(node, options.nvml_timeout);
    for (const auto& w : node.warnings) util::logger().debug("discover: {}", w);
    return node;
}

}  // namespace gpubind::node
