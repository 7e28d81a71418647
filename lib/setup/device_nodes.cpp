// `gpubind setup --device-nodes`: see setup.hpp.
#include <fcntl.h>
#include <linux/magic.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "gpubind/node/node.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/process.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::setup {

namespace fs = std::filesystem;

namespace {

using Fields = std::map<std::string, std::string, std::less<>>;

// A "Key: N" field; nullopt when absent or not a minor number (20 bits).
std::optional<unsigned> minor_field(const Fields& fields, std::string_view key) {
    const auto it = fields.find(key);
    if (it == fields.end()) return std::nullopt;
    const auto n = util::parse_unsigned(it->second);
    if (!n || *n > 0xfffff) return std::nullopt;
    return static_cast<unsigned>(*n);
}

void add_gpus(DriverNodes& out, const fs::path& proc) {
    const fs::path gpus = proc / "driver/nvidia/gpus";
    for (const auto& bus_id : gpubind::node::detail::list_dir(gpus)) {
        const fs::path info = gpus / bus_id / "information";
        const auto [minor, excluded] =
            gpubind::node::detail::gpu_node_fields(gpubind::node::detail::read_fields(info));
        if (excluded) {
            out.notes.push_back("GPU " + bus_id + " is excluded by the driver: no node");
            continue;
        }
        if (!minor) {
            out.notes.push_back(info.string() + ": no usable \"Device Minor\": no node");
            continue;
        }
        out.nodes.push_back(
            {"/dev/nvidia" + std::to_string(*minor), node::kNvidiaMajor, *minor, "GPU " + bus_id});
    }
}

// Each MIG capability's node: the DeviceFileMinor of its access file.
void add_mig_caps(DriverNodes& out, const fs::path& proc,
                  const std::map<std::string, unsigned, std::less<>>& majors) {
    const auto access =
        gpubind::node::detail::mig_access_files(proc / "driver/nvidia/capabilities");
    if (access.empty()) return;
    const auto major = majors.find("nvidia-caps");
    if (major == majors.end()) {
        out.notes.push_back("the driver exposes MIG capabilities but " +
                            (proc / "devices").string() + " has no nvidia-caps: no MIG node");
        return;
    }
    for (const auto& file : access) {
        const auto minor = minor_field(gpubind::node::detail::read_fields(file), "DeviceFileMinor");
        if (!minor) {
            out.notes.push_back(file.string() + ": no usable DeviceFileMinor: no node");
            continue;
        }
        out.nodes.push_back({"/dev/nvidia-caps/nvidia-cap" + std::to_string(*minor), major->second,
                             *minor, "MIG capability " + file.string()});
    }
}

// The directory `rel` under dev (made 0755 when missing unless dry_run),
// opened without following links, owned by this user and writable by nobody
// else. An invalid Fd when it is missing in a dry run.
util::Fd open_dir(int dev_fd, const fs::path& dev, const std::string& rel, bool dry_run) {
    const fs::path path = rel.empty() ? dev : dev / rel;
    int fd = rel.empty()
                 ? ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                 : ::openat(dev_fd, rel.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !rel.empty()) {
        if (dry_run) return util::Fd();
        if (::mkdirat(dev_fd, rel.c_str(), 0755) != 0 && errno != EEXIST)
            util::throw_errno("mkdir", path.string());
        fd = ::openat(dev_fd, rel.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) util::throw_errno("open directory", path.string());
    util::Fd dir(fd);
    struct stat st {};
    if (::fstat(dir.get(), &st) != 0) util::throw_errno("stat", path.string());
    if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
        throw util::Error(EPERM, "make device nodes", path.string(),
                          fmt::format("the directory is owned by uid {} with mode {:04o}: only one "
                                      "owned by this user and writable by nobody else is used",
                                      st.st_uid, st.st_mode & 07777));
    return dir;
}

// Sets the umask to 0 while it lives: the nodes get exactly the mode asked.
class NoUmask {
  public:
    NoUmask() : old_(::umask(0)) {}
    ~NoUmask() { ::umask(old_); }
    NoUmask(const NoUmask&) = delete;
    NoUmask& operator=(const NoUmask&) = delete;

  private:
    mode_t old_;
};

std::string what_is(const struct stat& st) {
    if (S_ISCHR(st.st_mode))
        return fmt::format("character device {}:{}", ::major(st.st_rdev), ::minor(st.st_rdev));
    if (S_ISLNK(st.st_mode)) return "a symbolic link";
    if (S_ISDIR(st.st_mode)) return "a directory";
    if (S_ISREG(st.st_mode)) return "a regular file";
    if (S_ISBLK(st.st_mode)) return "a block device";
    return "a special file";
}

// One node in the directory `dir` (its host path `host`); `dir` is -1 in a
// dry run whose directory is not there yet (nothing in it exists).
void make_one(int dir, const std::string& name, const fs::path& host, const DriverNode& node,
              const DeviceNodeOptions& o, DeviceNodeReport& report) {
    const dev_t want = ::makedev(node.major, node.minor);
    const std::string numbers = fmt::format("c {}:{}", node.major, node.minor);
    struct stat st {};
    const bool exists = dir >= 0 && ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && dir >= 0 && errno != ENOENT) util::throw_errno("stat", host.string());
    if (exists && S_ISCHR(st.st_mode) && st.st_rdev == want) {
        report.lines.push_back(
            fmt::format("unchanged {} {} ({})", host.string(), numbers, node.why));
        return;
    }
    if (exists && (!S_ISCHR(st.st_mode) || !o.force)) {
        ++report.left;
        report.lines.push_back(fmt::format("left {}: {}, the driver's is {} ({}){}", host.string(),
                                           what_is(st), numbers, node.why,
                                           S_ISCHR(st.st_mode) ? "; --force replaces it" : ""));
        return;
    }
    const std::string verb = exists ? "replaced" : "created";
    if (o.dry_run) {
        report.lines.push_back(fmt::format("would be {} {} {} mode {:04o} ({})", verb,
                                           host.string(), numbers, o.mode, node.why));
        return;
    }
    const NoUmask no_umask;
    if (!exists) {
        if (::mknodat(dir, name.c_str(), S_IFCHR | o.mode, want) != 0)
            util::throw_errno("mknod", host.string());
    } else {  // a new node renamed over the old one: never a moment without one
        // The directory is this user's and no one else's (open_dir): a
        // temporary left by a run that died is ours to take away.
        const std::string temp = name + ".gpubind-new";
        if (::unlinkat(dir, temp.c_str(), 0) != 0 && errno != ENOENT)
            util::throw_errno("unlink", (host.parent_path() / temp).string());
        if (::mknodat(dir, temp.c_str(), S_IFCHR | o.mode, want) != 0)
            util::throw_errno("mknod", (host.parent_path() / temp).string());
        if (::renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
            const int err = errno;
            ::unlinkat(dir, temp.c_str(), 0);
            throw util::Error(err, "rename", host.string());
        }
    }
    report.lines.push_back(fmt::format("{} {} {} mode {:04o} ({}){}", verb, host.string(), numbers,
                                       o.mode, node.why, exists ? ", was " + what_is(st) : ""));
}

using Majors = std::map<std::string, unsigned, std::less<>>;

// <proc_root>/devices' character majors, read through a descriptor of a file
// on procfs (one the kernel writes) unless `simulated` allows another file
// system: a simulated node's, or nothing else.
Majors majors_from_proc(const fs::path& proc_root, bool simulated) {
    const fs::path path = proc_root / "devices";
    const util::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) util::throw_errno("open", path.string());
    struct statfs on {};
    if (::fstatfs(fd.get(), &on) != 0) util::throw_errno("statfs", path.string());
    if (on.f_type != PROC_SUPER_MAGIC && !simulated)
        throw util::Error(util::ErrorKind::Refused, EPERM, "make device nodes", path.string(),
                          "is not on procfs, so not the kernel's word on the majors; for a "
                          "simulated node add --simulated-proc");
    // The same file again, through its descriptor: never another put at the path.
    return gpubind::node::detail::read_majors("/proc/self/fd/" + std::to_string(fd.get()));
}

// The character majors the kernel fixes for its own devices (its
// devices.txt): a node on one of these is never the NVIDIA driver's.
constexpr std::pair<unsigned, std::string_view> kFixedMajors[] = {
    {1, "mem"},    {4, "tty"},      {5, "tty, console, ptmx"},
    {7, "vcs"},    {10, "misc"},    {13, "input"},
    {21, "sg"},    {29, "fb"},      {89, "i2c"},
    {116, "alsa"}, {128, "ptm"},    {136, "pts"},
    {180, "usb"},  {188, "ttyUSB"}, {189, "usb_device"},
    {202, "msr"},  {203, "cpuid"},  {226, "drm"},
};

// Refuses `node` unless its major is the driver's: one an NVIDIA driver
// holds in `majors` (or 195), that no other driver there holds and that
// is not one of the kernel's fixed majors.
void check_drivers_major(const DriverNode& node, const fs::path& where, const Majors& majors,
                         const fs::path& devices) {
    const auto refuse = [&](const std::string& why) {
        throw util::Error(util::ErrorKind::Refused, EPERM, "make device nodes", where.string(),
                          fmt::format("major {} is {}, not the driver's: no node is made on it",
                                      node.major, why));
    };
    bool drivers = node.major == node::kNvidiaMajor;
    for (const auto& [name, major] : majors) {
        if (major != node.major) continue;
        if (!name.starts_with("nvidia")) refuse(name + "'s in " + devices.string());
        drivers = true;
    }
    for (const auto& [major, name] : kFixedMajors)
        if (major == node.major) refuse(fmt::format("a fixed major of the kernel's ({})", name));
    if (!drivers) refuse("no NVIDIA driver's in " + devices.string());
}

}  // namespace

void load_modules(const std::string& modprobe, const std::vector<std::string>& modules) {
    for (const auto& module : modules) {
        std::vector<char*> argv = {const_cast<char*>(modprobe.c_str()),
                                   const_cast<char*>(module.c_str()), nullptr};
        char path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
        char* envp[] = {path, nullptr};
        pid_t pid = -1;
        if (const int err =
                ::posix_spawn(&pid, modprobe.c_str(), nullptr, nullptr, argv.data(), envp);
            err != 0)
            throw util::Error(err, "run", modprobe);
        const int status = util::reap(pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            throw util::Error(
                EIO, "load module", module,
                WIFEXITED(status)
                    ? fmt::format("{} exited with {}", modprobe, WEXITSTATUS(status))
                    : fmt::format("{} was killed by signal {}", modprobe, WTERMSIG(status)));
    }
}

DriverNodes driver_nodes(const fs::path& proc_root, NodeSet which,
                         const std::vector<unsigned>& imex_channels) {
    DriverNodes out;
    // The module must be there: its version file says so (throws when missing).
    (void)gpubind::node::detail::read_driver_version(proc_root / "driver/nvidia/version");
    const auto majors = gpubind::node::detail::read_majors(proc_root / "devices");
    out.nodes.push_back({"/dev/nvidiactl", node::kNvidiaMajor, node::kNvidiactlMinor, "nvidiactl"});
    if (const auto uvm = majors.find("nvidia-uvm"); uvm != majors.end()) {
        out.nodes.push_back({"/dev/nvidia-uvm", uvm->second, 0, "nvidia-uvm"});
        out.nodes.push_back({"/dev/nvidia-uvm-tools", uvm->second, 1, "nvidia-uvm-tools"});
    } else {
        out.notes.push_back("nvidia-uvm is not loaded (no major in " +
                            (proc_root / "devices").string() +
                            "): no nvidia-uvm nodes; modprobe nvidia-uvm first");
    }
    if (!imex_channels.empty()) {
        const auto imex = majors.find("nvidia-caps-imex-channels");
        if (imex == majors.end())
            out.notes.push_back("the driver registered no nvidia-caps-imex-channels in " +
                                (proc_root / "devices").string() + ": no IMEX channel node");
        else
            for (const unsigned n : imex_channels)
                out.nodes.push_back({"/dev/nvidia-caps-imex-channels/channel" + std::to_string(n),
                                     imex->second, n, "IMEX channel " + std::to_string(n)});
    }
    if (which == NodeSet::Control) return out;
    add_gpus(out, proc_root);
    if (which == NodeSet::Gpus) return out;
    out.nodes.push_back(
        {"/dev/nvidia-modeset", node::kNvidiaMajor, node::kModesetMinor, "nvidia-modeset"});
    add_mig_caps(out, proc_root, majors);
    return out;
}

DeviceNodeReport make_device_nodes(const fs::path& dev_root, const fs::path& proc_root,
                                   const DeviceNodeOptions& options) {
    if ((options.mode & ~mode_t{0777}) != 0)
        throw util::Error(
            EINVAL, "make device nodes", {},
            fmt::format("mode {:o} is not a permission mode (0 to 0777)", options.mode));
    for (const unsigned n : options.imex_channels)
        if (n >= kMaxImexChannel)
            throw util::Error(EINVAL, "make device nodes", {},
                              fmt::format("IMEX channel {} is not one the driver makes (0 to {})",
                                          n, kMaxImexChannel - 1));
    const Majors majors = majors_from_proc(proc_root, options.simulated_proc);
    const DriverNodes wanted = driver_nodes(proc_root, options.which, options.imex_channels);
    const fs::path dev = dev_root / "dev";
    // Every node's major checked before any node is made.
    for (const auto& node : wanted.nodes)
        check_drivers_major(node, dev / fs::path(node.path).lexically_relative("/dev"), majors,
                            proc_root / "devices");
    DeviceNodeReport report;
    for (const auto& note : wanted.notes) report.lines.push_back("note: " + note);
    const util::Fd dev_fd = open_dir(-1, dev, "", options.dry_run);
    std::map<std::string, util::Fd> subdirs;  // nvidia-caps/, nvidia-caps-imex-channels/
    for (const auto& node : wanted.nodes) {
        const fs::path rel = fs::path(node.path).lexically_relative("/dev");
        const std::string sub = rel.parent_path().string();
        int dir = dev_fd.get();
        if (!sub.empty()) {
            auto it = subdirs.find(sub);
            if (it == subdirs.end())
                it = subdirs.emplace(sub, open_dir(dev_fd.get(), dev, sub, options.dry_run)).first;
            dir = it->second.get();
        }
        make_one(dir, rel.filename().string(), dev / rel, node, options, report);
    }
    return report;
}

}  // namespace gpubind::setup
