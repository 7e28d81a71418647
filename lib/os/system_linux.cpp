// LinuxSystem: one system call (or so) per method. The mount API and pidfd
// calls go through syscall(2) so that the build does not depend on glibc
// wrappers (2.36+) or on <linux/mount.h>, which clashes with <sys/mount.h>.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpubind/os/safe_path.hpp"
#include "gpubind/os/sandbox.hpp"
#include "gpubind/os/system.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/id_map.hpp"

#include "gpubind/util/dir_entries.hpp"
#include "mount_api.hpp"

namespace gpubind::os {

namespace {

using mount_api::MountAttr;

constexpr std::size_t kMaxHostFile = 16u << 20;  // mountinfo on a busy node can be large

int sys_int(long r) {
    return static_cast<int>(r);
}

std::string proc_path(pid_t pid, const std::string& name) {
    return "/proc/" + std::to_string(pid) + "/" + name;
}

// The pinned process is still alive, so /proc/<pid> was it.
void verify_alive(int pidfd, pid_t pid) {
    if (::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0)
        throw util::Error(errno, "check process", "pid " + std::to_string(pid),
                          "the process exited while being opened");
}

FileInfo info_of(const struct stat& st) {
    FileInfo info;
    switch (st.st_mode & S_IFMT) {
        case S_IFREG:
            info.type = FileInfo::Type::Regular;
            break;
        case S_IFDIR:
            info.type = FileInfo::Type::Directory;
            break;
        case S_IFLNK:
            info.type = FileInfo::Type::Symlink;
            break;
        case S_IFCHR:
            info.type = FileInfo::Type::CharDevice;
            break;
        case S_IFBLK:
            info.type = FileInfo::Type::BlockDevice;
            break;
        case S_IFIFO:
            info.type = FileInfo::Type::Fifo;
            break;
        case S_IFSOCK:
            info.type = FileInfo::Type::Socket;
            break;
        default:
            break;
    }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        info.major = ::major(st.st_rdev);
        info.minor = ::minor(st.st_rdev);
    }
    info.size = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    return info;
}

void write_all(int fd, const std::string& data, const std::string& what) {
    std::size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            util::throw_errno("write", what);
        }
        done += static_cast<std::size_t>(n);
    }
}

}  // namespace

std::string_view to_string(FileInfo::Type type) {
    switch (type) {
        case FileInfo::Type::Missing:
            return "missing";
        case FileInfo::Type::Regular:
            return "a regular file";
        case FileInfo::Type::Directory:
            return "a directory";
        case FileInfo::Type::Symlink:
            return "a symbolic link";
        case FileInfo::Type::CharDevice:
            return "a character device";
        case FileInfo::Type::BlockDevice:
            return "a block device";
        case FileInfo::Type::Fifo:
            return "a FIFO";
        case FileInfo::Type::Socket:
            return "a socket";
    }
    return "unknown";
}

std::optional<unsigned> map_id(std::string_view id_map, unsigned id, const std::string& what) {
    for (const util::IdRange& r : util::id_ranges(id_map, what))
        if (id >= r.inside && id - r.inside < r.count) {
            if (r.outside + (id - r.inside) > 0xffffffffull)
                util::throw_invalid("read id map", what, "maps outside the 32-bit id range");
            return static_cast<unsigned>(r.outside + (id - r.inside));
        }
    return std::nullopt;  // not mapped (an empty map maps nothing)
}

util::Fd LinuxSystem::open_process(pid_t pid) {
    int fd = sys_int(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) util::throw_errno("pidfd_open", "pid " + std::to_string(pid));
    return util::Fd(fd);
}

util::Fd LinuxSystem::open_mount_ns(int pidfd, pid_t pid) {
    util::Fd ns = util::open_or_throw(proc_path(pid, "ns/mnt"), O_RDONLY);
    verify_alive(pidfd, pid);
    return ns;
}

std::string LinuxSystem::read_proc(int pidfd, pid_t pid, const std::string& name) {
    std::string text = util::read_file(proc_path(pid, name), kMaxHostFile);
    verify_alive(pidfd, pid);
    return text;
}

util::Fd LinuxSystem::open_user_ns(int pidfd, pid_t pid) {
    util::Fd ns = util::open_or_throw(proc_path(pid, "ns/user"), O_RDONLY);
    verify_alive(pidfd, pid);
    return ns;
}

void LinuxSystem::enter_user_ns(int ns_fd) {
    if (::setns(ns_fd, CLONE_NEWUSER) != 0) util::throw_errno("enter user namespace");
}

util::Fd LinuxSystem::open_own_mount_ns() {
    return util::open_or_throw("/proc/self/ns/mnt", O_RDONLY);
}

util::Fd LinuxSystem::open_cwd() {
    return util::open_or_throw(".", O_PATH | O_DIRECTORY);
}

bool LinuxSystem::same_file(int fd_a, int fd_b) {
    struct stat a {
    }, b{};
    if (::fstat(fd_a, &a) != 0 || ::fstat(fd_b, &b) != 0) util::throw_errno("stat", "namespace");
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string LinuxSystem::read_host_file(const std::filesystem::path& path) {
    return util::read_file(path, kMaxHostFile);
}

util::Fd LinuxSystem::open_tree(const std::filesystem::path& host_path) {
    int fd = sys_int(
        ::syscall(SYS_open_tree, AT_FDCWD, host_path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (fd < 0) util::throw_errno("open mount source", host_path.string());
    return util::Fd(fd);
}

util::Fd LinuxSystem::open_executable(const std::filesystem::path& path) {
    return sandbox::seal_executable(path);
}

util::Fd LinuxSystem::clone_tree(int tree_fd) {
    int fd = sys_int(
        ::syscall(SYS_open_tree, tree_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    if (fd < 0) util::throw_errno("clone mount", "descriptor " + std::to_string(tree_fd));
    return util::Fd(fd);
}

util::Fd LinuxSystem::open_cgroup_file(const std::filesystem::path& dir, const std::string& name) {
    util::Fd d = util::open_or_throw(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    return util::openat_or_throw(d.get(), name.c_str(), O_WRONLY | O_NOFOLLOW,
                                 (dir / name).string());
}

void LinuxSystem::write_rule(int fd, const std::string& rule, const std::string& what) {
    ssize_t n = ::write(fd, rule.data(), rule.size());
    if (n < 0) throw util::Error(errno, "write '" + rule + "' to", what);
    if (static_cast<std::size_t>(n) != rule.size())
        throw util::Error(EIO, "write '" + rule + "' to", what, "short write");
}

FileInfo LinuxSystem::stat_fd(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) util::throw_errno("stat", "descriptor " + std::to_string(fd));
    return info_of(st);
}

util::Fd LinuxSystem::open_cgroup_dir(const std::filesystem::path& dir) {
    return util::open_or_throw(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

void LinuxSystem::enter_mount_ns(int ns_fd) {
    if (::setns(ns_fd, CLONE_NEWNS) != 0) util::throw_errno("enter mount namespace");
}

void LinuxSystem::change_dir(int dir_fd) {
    if (::fchdir(dir_fd) != 0) util::throw_errno("change directory");
}

util::Fd LinuxSystem::open_root(const std::filesystem::path& rootfs) {
    return util::open_or_throw(rootfs, O_PATH | O_DIRECTORY);
}

util::Fd LinuxSystem::open_dir_in_root(int root_fd, const std::filesystem::path& path) {
    return try_open_in_root(root_fd, path, O_PATH | O_DIRECTORY);
}

FileInfo LinuxSystem::stat_at(int dir_fd, const std::string& name) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return {};
        util::throw_errno("stat", name);
    }
    return info_of(st);
}

FileInfo LinuxSystem::stat_in_root(int root_fd, const std::filesystem::path& path) {
    util::Fd fd;
    try {
        fd = try_open_in_root(root_fd, path, O_PATH);
    } catch (const util::Error& e) {
        if (e.code().value() == ENOTDIR) return {};
        throw;
    }
    return fd ? stat_fd(fd.get()) : FileInfo{};
}

std::string LinuxSystem::read_link_at(int dir_fd, const std::string& name) {
    char buf[PATH_MAX];
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof buf);
    if (n < 0) util::throw_errno("readlink", name);
    if (static_cast<std::size_t>(n) >= sizeof buf)
        throw util::Error(ENAMETOOLONG, "readlink", name);
    return std::string(buf, static_cast<std::size_t>(n));
}

DirNames LinuxSystem::list_dir(int dir_fd, std::size_t max_entries, const NameFilter& keep) {
    // The descriptor may be O_PATH: a readable one of the same directory.
    const util::Fd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) util::throw_errno("open directory", "descriptor " + std::to_string(dir_fd));
    DirNames out;
    std::size_t read = 0;
    const bool ok =
        util::detail::for_each_entry(fd.get(), [&](std::string_view name, const dirent64&) {
            if (++read > max_entries) {
                out.more = true;
                return false;
            }
            if (!keep || keep(name)) out.names.emplace_back(name);
            return true;
        });
    if (!ok) util::throw_errno("read directory", "descriptor " + std::to_string(dir_fd));
    return out;
}

util::Fd LinuxSystem::make_dir(int dir_fd, const std::string& name, unsigned mode) {
    if (::mkdirat(dir_fd, name.c_str(), static_cast<mode_t>(mode)) != 0)
        util::throw_errno("create directory", name);
    return open_made_dir(dir_fd, name);
}

util::Fd LinuxSystem::try_make_dir(int dir_fd, const std::string& name, unsigned mode) {
    if (::mkdirat(dir_fd, name.c_str(), static_cast<mode_t>(mode)) != 0) {
        if (errno == EEXIST) return {};
        util::throw_errno("create directory", name);
    }
    return open_made_dir(dir_fd, name);
}

util::Fd LinuxSystem::open_made_dir(int dir_fd, const std::string& name) {
    int fd = ::openat(dir_fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);  // not left behind unrecorded
        throw util::Error(err, "open", name);
    }
    return util::Fd(fd);
}

// A new empty file at `name`, never through a link; none (errno set) if taken.
static util::Fd create_file(int dir_fd, const std::string& name, unsigned mode) {
    return util::Fd(::openat(dir_fd, name.c_str(),
                             O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             static_cast<mode_t>(mode)));
}

util::Fd LinuxSystem::make_file(int dir_fd, const std::string& name, unsigned mode) {
    util::Fd fd = create_file(dir_fd, name, mode);
    if (!fd) util::throw_errno("create file", name);
    return fd;
}

util::Fd LinuxSystem::try_make_file(int dir_fd, const std::string& name, unsigned mode) {
    util::Fd fd = create_file(dir_fd, name, mode);
    if (!fd && errno != EEXIST) util::throw_errno("create file", name);
    return fd;
}

void LinuxSystem::write_file_at(int dir_fd, const std::string& name, const std::string& data,
                                unsigned mode) {
    util::Fd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         static_cast<mode_t>(mode)));
    if (!fd) util::throw_errno("create file", name);
    write_all(fd.get(), data, name);
}

RegularFile LinuxSystem::read_regular_at(int dir_fd, const std::string& name,
                                         std::size_t max_size) {
    // O_NONBLOCK: a FIFO swapped in after the caller's check does not block the
    // open; fstat then refuses it before any read.
    util::Fd fd(
        ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        if (errno == ELOOP)
            throw util::Error(ELOOP, "read", name, "is a symbolic link (not followed)");
        util::throw_errno("open", name);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", name);
    RegularFile file;
    file.uid = st.st_uid;
    file.gid = st.st_gid;
    file.mode = st.st_mode & 07777;
    file.data = util::read_fd(fd.get(), max_size, name);  // regular and size-capped
    return file;
}

void LinuxSystem::replace_file_at(int dir_fd, const std::string& temp, const std::string& name,
                                  const std::string& data, unsigned mode,
                                  const std::optional<Owner>& chown_to) {
    util::Fd fd(::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         static_cast<mode_t>(mode & 0777)));
    if (!fd) util::throw_errno("create file", temp);
    try {
        write_all(fd.get(), data, temp);
        if (chown_to && ::fchown(fd.get(), static_cast<uid_t>(chown_to->uid),
                                 static_cast<gid_t>(chown_to->gid)) != 0)
            util::throw_errno("change the owner of", temp);
        // After fchown, which clears set-id bits; the umask does not apply.
        if (::fchmod(fd.get(), static_cast<mode_t>(mode & 07777)) != 0)
            util::throw_errno("change the mode of", temp);
        if (::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0)
            util::throw_errno("rename " + temp + " to", name);
    } catch (...) {
        ::unlinkat(dir_fd, temp.c_str(), 0);
        throw;
    }
}

void LinuxSystem::make_symlink(const std::string& target, int dir_fd, const std::string& name) {
    if (::symlinkat(target.c_str(), dir_fd, name.c_str()) != 0)
        util::throw_errno("create symlink", name);
}

bool LinuxSystem::try_make_symlink(const std::string& target, int dir_fd, const std::string& name) {
    if (::symlinkat(target.c_str(), dir_fd, name.c_str()) == 0) return true;
    if (errno != EEXIST) util::throw_errno("create symlink", name);
    return false;
}

util::Fd LinuxSystem::open_at(int dir_fd, const std::string& name) {
    return util::openat_or_throw(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW, name);
}

void LinuxSystem::remove(int dir_fd, const std::string& name, bool directory) {
    if (::unlinkat(dir_fd, name.c_str(), directory ? AT_REMOVEDIR : 0) != 0)
        util::throw_errno("remove", name);
}

void LinuxSystem::set_fs_ids(unsigned uid, unsigned gid) {
    // Both calls return the previous id and cannot report an error: check.
    ::setfsgid(static_cast<gid_t>(gid));
    ::setfsuid(static_cast<uid_t>(uid));
    if (static_cast<unsigned>(::setfsgid(static_cast<gid_t>(-1))) != gid ||
        static_cast<unsigned>(::setfsuid(static_cast<uid_t>(-1))) != uid)
        throw util::Error(EPERM, "set file system ids",
                          std::to_string(uid) + ":" + std::to_string(gid));
}

void LinuxSystem::set_mount_flags(int mount_fd, unsigned flags) {
    MountAttr attr{};
    if (flags & util::kMountReadOnly) attr.attr_set |= MOUNT_ATTR_RDONLY;
    if (flags & util::kMountNoSuid) attr.attr_set |= MOUNT_ATTR_NOSUID;
    if (flags & util::kMountNoDev) attr.attr_set |= MOUNT_ATTR_NODEV;
    if (flags & util::kMountNoExec) attr.attr_set |= MOUNT_ATTR_NOEXEC;
    if (::syscall(SYS_mount_setattr, mount_fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        util::throw_errno("set mount flags");
}

void LinuxSystem::attach(int mount_fd, int target_fd) {
    if (::syscall(SYS_move_mount, mount_fd, "", target_fd, "",
                  MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0)
        return;
    // Both ends are held open: ENOENT means one was unlinked since it was
    // opened (a driver upgraded during the start replaces its files).
    if (errno == ENOENT)
        throw util::Error(ENOENT, "attach mount", {},
                          "the file it mounts or its mount point was removed meanwhile");
    util::throw_errno("attach mount");
}

void LinuxSystem::detach(int dir_fd, const std::string& name) {
    // umount2 takes a path: the name, relative to the directory made current.
    if (::fchdir(dir_fd) != 0) util::throw_errno("change directory", name);
    if (::umount2(name.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
        util::throw_errno("unmount", name);
}

util::Fd LinuxSystem::make_tmpfs() {
    return mount_api::make_tmpfs({{"mode", "0555"}}, "tmpfs");
}

void LinuxSystem::rename_at(int dir_fd, const std::string& from, const std::string& to) {
    if (::renameat(dir_fd, from.c_str(), dir_fd, to.c_str()) != 0) util::throw_errno("rename", to);
}

void LinuxSystem::exchange_at(int dir_fd, const std::string& a, const std::string& b) {
    if (::renameat2(dir_fd, a.c_str(), dir_fd, b.c_str(), RENAME_EXCHANGE) != 0)
        util::throw_errno("exchange", b);
}

std::uint64_t LinuxSystem::mount_id(int fd) {
    struct statx stx {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0)
        util::throw_errno("statx", "descriptor " + std::to_string(fd));
    if ((stx.stx_mask & STATX_MNT_ID) == 0)
        throw util::Error(ENOSYS, "statx", "descriptor " + std::to_string(fd), "no mount id");
    return stx.stx_mnt_id;
}

bool mount_is_shared(std::string_view mountinfo, std::uint64_t id) {
    const std::string want = std::to_string(id) + " ";
    while (!mountinfo.empty()) {
        const auto end = mountinfo.find('\n');
        std::string_view line = mountinfo.substr(0, end);
        mountinfo = end == std::string_view::npos ? std::string_view{} : mountinfo.substr(end + 1);
        if (!line.starts_with(want)) continue;
        // "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER"
        const auto dash = line.find(" - ");
        std::string_view fields = line.substr(0, dash);
        for (int skip = 0; skip < 6; ++skip) {
            const auto space = fields.find(' ');
            fields =
                space == std::string_view::npos ? std::string_view{} : fields.substr(space + 1);
        }
        while (!fields.empty()) {
            const auto space = fields.find(' ');
            if (fields.substr(0, space).starts_with("shared:")) return true;
            fields =
                space == std::string_view::npos ? std::string_view{} : fields.substr(space + 1);
        }
        return false;
    }
    return false;
}

std::string_view mountinfo_device(std::string_view line) {
    // "ID PARENT MAJ:MIN ...": between the second and third spaces.
    const auto first = line.find(' ');
    if (first == std::string_view::npos) return {};
    const auto second = line.find(' ', first + 1);
    if (second == std::string_view::npos) return {};
    const auto third = line.find(' ', second + 1);
    return line.substr(
        second + 1, third == std::string_view::npos ? std::string_view::npos : third - second - 1);
}

namespace {

// statmount(2) (Linux 6.8), not in Debian 12's headers: the request and the
// fixed part of the answer as include/uapi/linux/mount.h lays them out.
constexpr long kSysStatmount = 457;  // x86-64, arm64 and the generic table alike
constexpr unsigned kStatxMntIdUnique = 0x4000;
constexpr std::uint64_t kStatmountMntBasic = 0x2;
constexpr std::uint64_t kStatmountMntRoot = 0x8;
constexpr std::uint64_t kStatmountMntPoint = 0x10;
constexpr std::uint64_t kStatmountFsType = 0x20;
struct MntIdReq {
    std::uint32_t size = sizeof(MntIdReq);  // MNT_ID_REQ_SIZE_VER0
    std::uint32_t spare = 0;
    std::uint64_t mnt_id = 0;
    std::uint64_t param = 0;
};
struct StatmountBasic {
    std::uint32_t size, mnt_opts;
    std::uint64_t mask;
    std::uint32_t sb_dev_major, sb_dev_minor;
    std::uint64_t sb_magic;
    std::uint32_t sb_flags, fs_type;
    std::uint64_t mnt_id, mnt_parent_id;
    std::uint32_t mnt_id_old, mnt_parent_id_old;
    std::uint64_t mnt_attr, mnt_propagation, mnt_peer_group, mnt_master, propagate_from;
    std::uint32_t mnt_root, mnt_point;
    std::uint64_t spare[50];
};
static_assert(sizeof(MntIdReq) == 24);
static_assert(offsetof(StatmountBasic, mnt_propagation) == 72);
static_assert(offsetof(StatmountBasic, mnt_root) == 104);

// What statmount says of the mount the descriptor's file is on (looked up
// in this thread's mount namespace), `want` a STATMOUNT_* mask; nullopt where
// the kernel cannot answer (before 6.8, ENOSYS, a seccomp filter, ...).
struct StatmountAnswer {
    StatmountBasic fixed;
    char strings[4096];
    std::string text(std::uint32_t offset) const {
        if (offset >= sizeof strings) return {};
        return std::string(strings + offset, ::strnlen(strings + offset, sizeof strings - offset));
    }
};
std::optional<StatmountAnswer> statmount_of(int fd, std::uint64_t want) {
    struct statx stx {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, kStatxMntIdUnique, &stx) != 0)
        util::throw_errno("statx", "descriptor " + std::to_string(fd));
    if ((stx.stx_mask & kStatxMntIdUnique) == 0) return std::nullopt;
    MntIdReq req;
    req.mnt_id = stx.stx_mnt_id;
    req.param = want;
    StatmountAnswer answer{};
    if (::syscall(kSysStatmount, &req, &answer, sizeof answer, 0) != 0 ||
        (answer.fixed.mask & want) != want)
        return std::nullopt;
    return answer;
}

// mountinfo's octal escapes for what would break its fields.
std::string mountinfo_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\\')
            out += fmt::format("\\{:03o}", static_cast<unsigned char>(c));
        else
            out += c;
    }
    return out;
}

}  // namespace

std::optional<std::pair<unsigned, unsigned>> LinuxSystem::tmpfs_device(int fd) {
    struct statfs fs {};
    if (::fstatfs(fd, &fs) != 0) util::throw_errno("statfs", "descriptor " + std::to_string(fd));
    if (fs.f_type != TMPFS_MAGIC) return std::nullopt;
    struct stat st {};
    if (::fstat(fd, &st) != 0) util::throw_errno("stat", "descriptor " + std::to_string(fd));
    return std::pair{::major(st.st_dev), ::minor(st.st_dev)};
}

std::optional<bool> LinuxSystem::mount_shared(int fd) {
    const auto answer = statmount_of(fd, kStatmountMntBasic);
    if (!answer) return std::nullopt;  // mountinfo answers
    return (answer->fixed.mnt_propagation & MS_SHARED) != 0;
}

std::optional<std::string> LinuxSystem::cgroup_mounts(bool v1_devices) {
    static constexpr const char* kV1[] = {"/sys/fs/cgroup/devices"};
    static constexpr const char* kV2[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    std::string out;
    for (const char* candidate :
         v1_devices ? std::span<const char* const>(kV1) : std::span<const char* const>(kV2)) {
        util::Fd fd(::open(candidate, O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!fd) continue;
        const auto m = statmount_of(fd.get(), kStatmountMntBasic | kStatmountMntRoot |
                                                  kStatmountMntPoint | kStatmountFsType);
        if (!m) return std::nullopt;
        const std::string type = m->text(m->fixed.fs_type);
        if (type != "cgroup" && type != "cgroup2") continue;  // the tmpfs holding v1 hierarchies
        // A v1 hierarchy with the devices controller has devices.list at its root.
        const bool devices =
            type == "cgroup" && ::faccessat(fd.get(), "devices.list", F_OK, 0) == 0;
        out += fmt::format("{} {} 0:0 {} {} rw - {} {} rw{}\n", m->fixed.mnt_id_old,
                           m->fixed.mnt_parent_id_old, mountinfo_escape(m->text(m->fixed.mnt_root)),
                           mountinfo_escape(m->text(m->fixed.mnt_point)), type, type,
                           devices ? ",devices" : "");
    }
    return out;
}

std::string LinuxSystem::read_mountinfo() {
    // thread-self resolves to the reader: this thread's mount namespace.
    const char* what = "/proc/thread-self/mountinfo";
    util::Fd fd(proc_ ? ::openat(proc_.get(), "thread-self/mountinfo", O_RDONLY | O_CLOEXEC)
                      : ::open(what, O_RDONLY | O_CLOEXEC));
    if (!fd) util::throw_errno("open", what);
    return util::read_fd(fd.get(), kMaxHostFile, what);
}

util::Fd LinuxSystem::open_mountinfo() {
    const char* what = "/proc/thread-self/mountinfo";
    util::Fd fd(proc_ ? ::openat(proc_.get(), "thread-self/mountinfo", O_RDONLY | O_CLOEXEC)
                      : ::open(what, O_RDONLY | O_CLOEXEC));
    if (!fd) util::throw_errno("open", what);
    return fd;
}

std::vector<bool> LinuxSystem::mountinfo_shows(
    int mountinfo_fd, const std::vector<std::pair<unsigned, unsigned>>& devices) {
    std::vector<std::string> wanted;
    for (const auto& [major, minor] : devices) wanted.push_back(fmt::format("{}:{}", major, minor));
    std::vector<bool> shown(devices.size(), false);
    auto look_at = [&](std::string_view line) {
        const std::string_view device = mountinfo_device(line);
        for (std::size_t i = 0; i < wanted.size(); ++i)
            if (device == wanted[i]) shown[i] = true;
    };
    // Line by line through one buffer: a host's mountinfo may be megabytes.
    std::string buffer(64 * 1024, '\0');
    std::size_t held = 0;  // the start of a line read in part
    for (;;) {
        if (held == buffer.size()) buffer.resize(buffer.size() * 2);  // a line that long
        const ssize_t n = ::read(mountinfo_fd, buffer.data() + held, buffer.size() - held);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) util::throw_errno("read", "the runtime's mountinfo");
        const std::size_t end = held + static_cast<std::size_t>(n);
        std::string_view text(buffer.data(), end);
        std::size_t start = 0;
        for (std::size_t nl; (nl = text.find('\n', start)) != std::string_view::npos;
             start = nl + 1)
            look_at(text.substr(start, nl - start));
        if (n == 0) {
            if (start < end) look_at(text.substr(start));
            return shown;
        }
        std::memmove(buffer.data(), buffer.data() + start, end - start);
        held = end - start;
    }
}

LinuxSystem::LinuxSystem() : proc_(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) {}

std::string LinuxSystem::run(int exe_fd, const std::string& what,
                             const std::vector<std::string>& args,
                             std::chrono::milliseconds timeout) {
    sandbox::Options defaults;
    return run_as(Owner{defaults.uid, defaults.gid}, exe_fd, what, args, timeout);
}

std::string LinuxSystem::run_as(const Owner& owner, int exe_fd, const std::string& what,
                                const std::vector<std::string>& args,
                                std::chrono::milliseconds timeout) {
    // ldconfig's "-r ROOT" becomes the sandbox's root (pivot_root, not the
    // program's own chroot); the rest of the arguments are passed on.
    if (args.size() < 2 || args[0] != "-r")
        util::throw_invalid("run", what, "a program runs only confined to a root (-r ROOT first)");
    if (!proc_)
        throw util::Error(ENOENT, "run", what, "no /proc to map the sandbox's user namespace");
    sandbox::Options options;
    options.root = args[1];
    options.timeout = timeout;
    options.uid = owner.uid;
    options.gid = owner.gid;
    options.scratch = std::string(kLdconfigScratch);
    options.output = std::string(kLdconfigOutput);
    options.proc_fd = proc_.get();
    return sandbox::run(exe_fd, what, std::vector<std::string>(args.begin() + 2, args.end()),
                        options);
}

}  // namespace gpubind::os
