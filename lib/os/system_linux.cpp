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

#include "gpubind/util/dir_entries.hpp"
#include "mount_api.hpp"

namespace gpubind {

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
        throw Error(errno, "check process", "pid " + std::to_string(pid),
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

long bpf_call(int cmd, union bpf_attr* attr) {
    return ::syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

std::uint64_t pointer(const void* p) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

static_assert(sizeof(bpf::Insn) == sizeof(struct bpf_insn));

void write_all(int fd, const std::string& data, const std::string& what) {
    std::size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("write", what);
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
    constexpr std::string_view kBlank = " \t";
    std::size_t line_no = 0;
    while (!id_map.empty()) {
        const std::size_t nl = id_map.find('\n');
        std::string_view line = id_map.substr(0, nl);
        id_map.remove_prefix(nl == std::string_view::npos ? id_map.size() : nl + 1);
        ++line_no;
        auto bad = [&](const char* detail) {
            throw_invalid("read id map", what, "line " + std::to_string(line_no) + ": " + detail);
        };
        std::vector<unsigned long long> v;
        while (true) {
            const std::size_t start = line.find_first_not_of(kBlank);
            if (start == std::string_view::npos) break;
            line.remove_prefix(start);
            const std::string_view word = line.substr(0, line.find_first_of(kBlank));
            unsigned long long n = 0;
            const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), n);
            if (ec != std::errc() || ptr != word.data() + word.size() || n > 0xffffffffull)
                bad("not a 32-bit unsigned number");
            v.push_back(n);
            line.remove_prefix(word.size());
        }
        if (v.empty()) continue;
        if (v.size() != 3) bad("not three numbers (inside, outside, count)");
        if (id >= v[0] && id - v[0] < v[2]) {
            if (v[1] + (id - v[0]) > 0xffffffffull) bad("maps outside the 32-bit id range");
            return static_cast<unsigned>(v[1] + (id - v[0]));
        }
    }
    return std::nullopt;  // not mapped (an empty map maps nothing)
}

Fd LinuxSystem::open_process(pid_t pid) {
    int fd = sys_int(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) throw_errno("pidfd_open", "pid " + std::to_string(pid));
    return Fd(fd);
}

Fd LinuxSystem::open_mount_ns(int pidfd, pid_t pid) {
    Fd ns = open_or_throw(proc_path(pid, "ns/mnt"), O_RDONLY);
    verify_alive(pidfd, pid);
    return ns;
}

std::string LinuxSystem::read_proc(int pidfd, pid_t pid, const std::string& name) {
    std::string text = read_file(proc_path(pid, name), kMaxHostFile);
    verify_alive(pidfd, pid);
    return text;
}

Fd LinuxSystem::open_user_ns(int pidfd, pid_t pid) {
    Fd ns = open_or_throw(proc_path(pid, "ns/user"), O_RDONLY);
    verify_alive(pidfd, pid);
    return ns;
}

void LinuxSystem::enter_user_ns(int ns_fd) {
    if (::setns(ns_fd, CLONE_NEWUSER) != 0) throw_errno("enter user namespace");
}

Fd LinuxSystem::open_own_mount_ns() {
    return open_or_throw("/proc/self/ns/mnt", O_RDONLY);
}

Fd LinuxSystem::open_cwd() {
    return open_or_throw(".", O_PATH | O_DIRECTORY);
}

bool LinuxSystem::same_file(int fd_a, int fd_b) {
    struct stat a {
    }, b{};
    if (::fstat(fd_a, &a) != 0 || ::fstat(fd_b, &b) != 0) throw_errno("stat", "namespace");
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string LinuxSystem::read_host_file(const std::filesystem::path& path) {
    return read_file(path, kMaxHostFile);
}

Fd LinuxSystem::open_tree(const std::filesystem::path& host_path) {
    int fd = sys_int(
        ::syscall(SYS_open_tree, AT_FDCWD, host_path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    if (fd < 0) throw_errno("open mount source", host_path.string());
    return Fd(fd);
}

Fd LinuxSystem::open_executable(const std::filesystem::path& path) {
    return sandbox::seal_executable(path);
}

Fd LinuxSystem::clone_tree(int tree_fd) {
    int fd = sys_int(
        ::syscall(SYS_open_tree, tree_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    if (fd < 0) throw_errno("clone mount", "descriptor " + std::to_string(tree_fd));
    return Fd(fd);
}

Fd LinuxSystem::open_cgroup_file(const std::filesystem::path& dir, const std::string& name) {
    Fd d = open_or_throw(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    return openat_or_throw(d.get(), name.c_str(), O_WRONLY | O_NOFOLLOW, (dir / name).string());
}

void LinuxSystem::write_rule(int fd, const std::string& rule, const std::string& what) {
    ssize_t n = ::write(fd, rule.data(), rule.size());
    if (n < 0) throw Error(errno, "write '" + rule + "' to", what);
    if (static_cast<std::size_t>(n) != rule.size())
        throw Error(EIO, "write '" + rule + "' to", what, "short write");
}

FileInfo LinuxSystem::stat_fd(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("stat", "descriptor " + std::to_string(fd));
    return info_of(st);
}

Fd LinuxSystem::open_cgroup_dir(const std::filesystem::path& dir) {
    return open_or_throw(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

DevicePrograms LinuxSystem::query_device_programs(int cgroup_fd) {
    std::vector<std::uint32_t> ids(64);
    for (;;) {
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.query.target_fd = static_cast<std::uint32_t>(cgroup_fd);
        attr.query.attach_type = BPF_CGROUP_DEVICE;
        attr.query.prog_ids = pointer(ids.data());
        attr.query.prog_cnt = static_cast<std::uint32_t>(ids.size());
        if (bpf_call(BPF_PROG_QUERY, &attr) != 0) {
            if (errno == ENOSPC && attr.query.prog_cnt > ids.size()) {
                ids.resize(attr.query.prog_cnt);
                continue;
            }
            throw_errno("query device programs", "cgroup descriptor " + std::to_string(cgroup_fd));
        }
        ids.resize(attr.query.prog_cnt);
        return {attr.query.attach_flags, ids};
    }
}

Fd LinuxSystem::open_program(std::uint32_t id) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.prog_id = id;
    int fd = sys_int(bpf_call(BPF_PROG_GET_FD_BY_ID, &attr));
    if (fd < 0) throw_errno("open device program", "id " + std::to_string(id));
    return Fd(fd);
}

std::vector<bpf::Insn> LinuxSystem::program_instructions(int prog_fd) {
    auto info_of_prog = [&](struct bpf_prog_info& info) {
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.info.bpf_fd = static_cast<std::uint32_t>(prog_fd);
        attr.info.info_len = sizeof info;
        attr.info.info = pointer(&info);
        if (bpf_call(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0)
            throw_errno("read device program", "descriptor " + std::to_string(prog_fd));
    };
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof info);
    info_of_prog(info);
    const std::string what = "program " + std::to_string(info.id);
    if (info.type != BPF_PROG_TYPE_CGROUP_DEVICE)
        throw Error(ErrorKind::Invalid, EINVAL, "read device program", what,
                    "not a cgroup device program");
    // The kernel shows the instructions only to a caller with CAP_BPF (or CAP_SYS_ADMIN).
    if (info.xlated_prog_len == 0)
        throw Error(EPERM, "read device program", what,
                    "the kernel does not show its instructions");
    std::vector<bpf::Insn> insns(info.xlated_prog_len / sizeof(bpf::Insn));
    const std::uint32_t len = info.xlated_prog_len;
    std::memset(&info, 0, sizeof info);
    info.xlated_prog_len = len;
    info.xlated_prog_insns = pointer(insns.data());
    info_of_prog(info);
    if (info.xlated_prog_len != len)
        throw Error(EAGAIN, "read device program", what, "changed while being read");
    return insns;
}

Fd LinuxSystem::load_device_program(const std::vector<bpf::Insn>& insns, const std::string& name) {
    static const char kLicense[] = "GPL";
    auto load = [&](char* log, std::uint32_t log_size) {
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
        attr.insns = pointer(insns.data());
        attr.insn_cnt = static_cast<std::uint32_t>(insns.size());
        attr.license = pointer(kLicense);
        std::strncpy(attr.prog_name, name.c_str(), sizeof attr.prog_name - 1);
        if (log) {
            attr.log_level = 1;
            attr.log_buf = pointer(log);
            attr.log_size = log_size;
        }
        return sys_int(bpf_call(BPF_PROG_LOAD, &attr));
    };
    int fd = load(nullptr, 0);
    if (fd >= 0) return Fd(fd);
    const int err = errno;
    if (err != EINVAL && err != EACCES) throw Error(err, "load device program", name);
    // The verifier's reason: the last line of its log.
    std::vector<char> log(1u << 16, '\0');
    fd = load(log.data(), static_cast<std::uint32_t>(log.size()));
    if (fd >= 0) return Fd(fd);
    std::string text(log.data());
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::size_t nl = text.rfind('\n');
    std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
    throw Error(err, "load device program", name,
                last.empty() ? std::string(std::strerror(err)) : "verifier: " + last);
}

void LinuxSystem::replace_device_program(int cgroup_fd, int new_prog, int old_prog, unsigned flags,
                                         const std::string& what) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.target_fd = static_cast<std::uint32_t>(cgroup_fd);
    attr.attach_bpf_fd = static_cast<std::uint32_t>(new_prog);
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = flags & (BPF_F_ALLOW_OVERRIDE | BPF_F_ALLOW_MULTI);
    if (flags & BPF_F_ALLOW_MULTI) {
        attr.attach_flags |= BPF_F_REPLACE;
        attr.replace_bpf_fd = static_cast<std::uint32_t>(old_prog);
    }
    if (bpf_call(BPF_PROG_ATTACH, &attr) != 0) throw_errno("attach device program", what);
}

Fd LinuxSystem::open_program_dir(const std::filesystem::path& dir, std::string& why, bool& taken) {
    taken = false;
    auto unusable = [&](const std::string& path, const std::string& what) {
        why = path + ": " + what;
        return Fd();
    };
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    Fd fd(::open(dir.c_str(), flags));
    struct statfs fs {};
    if (!fd && errno == ENOENT) {
        // Made only on a bpffs parent: never a directory of some other file system.
        const std::filesystem::path parent = dir.parent_path();
        if (::statfs(parent.c_str(), &fs) != 0) return unusable(parent, std::strerror(errno));
        if (fs.f_type != BPF_FS_MAGIC) return unusable(parent, "not a bpffs");
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
            return unusable(dir, std::string("mkdir: ") + std::strerror(errno));
        fd = Fd(::open(dir.c_str(), flags));
    }
    if (!fd && (errno == ELOOP || errno == ENOTDIR)) {
        // Something other than a directory holds the name (a link, a pinned
        // object): put there by someone else, as a directory of theirs would be.
        const int err = errno;
        struct stat st {};
        if (::lstat(dir.c_str(), &st) != 0) return unusable(dir, std::strerror(err));
        taken = true;
        return unusable(
            dir, S_ISLNK(st.st_mode) ? "a symbolic link, not a directory" : "not a directory");
    }
    if (!fd) return unusable(dir, std::strerror(errno));
    struct stat st {};
    if (::fstatfs(fd.get(), &fs) != 0 || ::fstat(fd.get(), &st) != 0)
        return unusable(dir, std::strerror(errno));
    if (fs.f_type != BPF_FS_MAGIC) return unusable(dir, "not on bpffs");
    taken = st.st_uid != 0 || (st.st_mode & 022) != 0;
    if (taken)
        return unusable(dir, fmt::format("owned by uid {}, mode {:o}: must be root's, writable "
                                         "by no one else",
                                         st.st_uid, st.st_mode & 07777));
    return fd;
}

Fd LinuxSystem::open_kept_program(const std::string& path) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.pathname = pointer(path.c_str());  // (a program is opened read-write or not at all)
    const int fd = sys_int(bpf_call(BPF_OBJ_GET, &attr));
    if (fd < 0 && errno == ENOENT) return Fd();
    if (fd < 0) throw_errno("open kept device program", path);
    return Fd(fd);
}

void LinuxSystem::keep_program(int prog_fd, const std::string& path) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.pathname = pointer(path.c_str());
    attr.bpf_fd = static_cast<std::uint32_t>(prog_fd);
    if (bpf_call(BPF_OBJ_PIN, &attr) != 0) throw_errno("keep device program", path);
}

void LinuxSystem::enter_mount_ns(int ns_fd) {
    if (::setns(ns_fd, CLONE_NEWNS) != 0) throw_errno("enter mount namespace");
}

void LinuxSystem::change_dir(int dir_fd) {
    if (::fchdir(dir_fd) != 0) throw_errno("change directory");
}

Fd LinuxSystem::open_root(const std::filesystem::path& rootfs) {
    return open_or_throw(rootfs, O_PATH | O_DIRECTORY);
}

Fd LinuxSystem::open_dir_in_root(int root_fd, const std::filesystem::path& path) {
    return try_open_in_root(root_fd, path, O_PATH | O_DIRECTORY);
}

FileInfo LinuxSystem::stat_at(int dir_fd, const std::string& name) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return {};
        throw_errno("stat", name);
    }
    return info_of(st);
}

FileInfo LinuxSystem::stat_in_root(int root_fd, const std::filesystem::path& path) {
    Fd fd;
    try {
        fd = try_open_in_root(root_fd, path, O_PATH);
    } catch (const Error& e) {
        if (e.code().value() == ENOTDIR) return {};
        throw;
    }
    return fd ? stat_fd(fd.get()) : FileInfo{};
}

std::string LinuxSystem::read_link_at(int dir_fd, const std::string& name) {
    char buf[PATH_MAX];
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof buf);
    if (n < 0) throw_errno("readlink", name);
    if (static_cast<std::size_t>(n) >= sizeof buf) throw Error(ENAMETOOLONG, "readlink", name);
    return std::string(buf, static_cast<std::size_t>(n));
}

DirNames LinuxSystem::list_dir(int dir_fd, std::size_t max_entries, const NameFilter& keep) {
    // The descriptor may be O_PATH: a readable one of the same directory.
    const Fd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throw_errno("open directory", "descriptor " + std::to_string(dir_fd));
    DirNames out;
    std::size_t read = 0;
    const bool ok = detail::for_each_entry(fd.get(), [&](std::string_view name, const dirent64&) {
        if (++read > max_entries) {
            out.more = true;
            return false;
        }
        if (!keep || keep(name)) out.names.emplace_back(name);
        return true;
    });
    if (!ok) throw_errno("read directory", "descriptor " + std::to_string(dir_fd));
    return out;
}

Fd LinuxSystem::make_dir(int dir_fd, const std::string& name, unsigned mode) {
    if (::mkdirat(dir_fd, name.c_str(), static_cast<mode_t>(mode)) != 0)
        throw_errno("create directory", name);
    int fd = ::openat(dir_fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);  // not left behind unrecorded
        throw Error(err, "open", name);
    }
    return Fd(fd);
}

Fd LinuxSystem::make_file(int dir_fd, const std::string& name, unsigned mode) {
    Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   static_cast<mode_t>(mode)));
    if (!fd) throw_errno("create file", name);
    return fd;
}

void LinuxSystem::write_file_at(int dir_fd, const std::string& name, const std::string& data,
                                unsigned mode) {
    Fd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   static_cast<mode_t>(mode)));
    if (!fd) throw_errno("create file", name);
    write_all(fd.get(), data, name);
}

RegularFile LinuxSystem::read_regular_at(int dir_fd, const std::string& name,
                                         std::size_t max_size) {
    // O_NONBLOCK: a FIFO swapped in after the caller's check does not block the
    // open; fstat then refuses it before any read.
    Fd fd(
        ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        if (errno == ELOOP) throw Error(ELOOP, "read", name, "is a symbolic link (not followed)");
        throw_errno("open", name);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("stat", name);
    RegularFile file;
    file.uid = st.st_uid;
    file.gid = st.st_gid;
    file.mode = st.st_mode & 07777;
    file.data = read_fd(fd.get(), max_size, name);  // regular and size-capped
    return file;
}

void LinuxSystem::replace_file_at(int dir_fd, const std::string& temp, const std::string& name,
                                  const std::string& data, unsigned mode,
                                  const std::optional<Owner>& chown_to) {
    Fd fd(::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   static_cast<mode_t>(mode & 0777)));
    if (!fd) throw_errno("create file", temp);
    try {
        write_all(fd.get(), data, temp);
        if (chown_to && ::fchown(fd.get(), static_cast<uid_t>(chown_to->uid),
                                 static_cast<gid_t>(chown_to->gid)) != 0)
            throw_errno("change the owner of", temp);
        // After fchown, which clears set-id bits; the umask does not apply.
        if (::fchmod(fd.get(), static_cast<mode_t>(mode & 07777)) != 0)
            throw_errno("change the mode of", temp);
        if (::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0)
            throw_errno("rename " + temp + " to", name);
    } catch (...) {
        ::unlinkat(dir_fd, temp.c_str(), 0);
        throw;
    }
}

void LinuxSystem::make_symlink(const std::string& target, int dir_fd, const std::string& name) {
    if (::symlinkat(target.c_str(), dir_fd, name.c_str()) != 0) throw_errno("create symlink", name);
}

Fd LinuxSystem::open_at(int dir_fd, const std::string& name) {
    return openat_or_throw(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW, name);
}

void LinuxSystem::remove(int dir_fd, const std::string& name, bool directory) {
    if (::unlinkat(dir_fd, name.c_str(), directory ? AT_REMOVEDIR : 0) != 0)
        throw_errno("remove", name);
}

void LinuxSystem::set_fs_ids(unsigned uid, unsigned gid) {
    // Both calls return the previous id and cannot report an error: check.
    ::setfsgid(static_cast<gid_t>(gid));
    ::setfsuid(static_cast<uid_t>(uid));
    if (static_cast<unsigned>(::setfsgid(static_cast<gid_t>(-1))) != gid ||
        static_cast<unsigned>(::setfsuid(static_cast<uid_t>(-1))) != uid)
        throw Error(EPERM, "set file system ids", std::to_string(uid) + ":" + std::to_string(gid));
}

void LinuxSystem::set_mount_flags(int mount_fd, unsigned flags) {
    MountAttr attr{};
    if (flags & kMountReadOnly) attr.attr_set |= MOUNT_ATTR_RDONLY;
    if (flags & kMountNoSuid) attr.attr_set |= MOUNT_ATTR_NOSUID;
    if (flags & kMountNoDev) attr.attr_set |= MOUNT_ATTR_NODEV;
    if (flags & kMountNoExec) attr.attr_set |= MOUNT_ATTR_NOEXEC;
    if (::syscall(SYS_mount_setattr, mount_fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        throw_errno("set mount flags");
}

void LinuxSystem::attach(int mount_fd, int target_fd) {
    if (::syscall(SYS_move_mount, mount_fd, "", target_fd, "",
                  MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
        throw_errno("attach mount");
}

void LinuxSystem::detach(int dir_fd, const std::string& name) {
    // umount2 takes a path: the name, relative to the directory made current.
    if (::fchdir(dir_fd) != 0) throw_errno("change directory", name);
    if (::umount2(name.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) throw_errno("unmount", name);
}

Fd LinuxSystem::make_tmpfs() {
    return mount_api::make_tmpfs({{"mode", "0555"}}, "tmpfs");
}

void LinuxSystem::rename_at(int dir_fd, const std::string& from, const std::string& to) {
    if (::renameat(dir_fd, from.c_str(), dir_fd, to.c_str()) != 0) throw_errno("rename", to);
}

void LinuxSystem::exchange_at(int dir_fd, const std::string& a, const std::string& b) {
    if (::renameat2(dir_fd, a.c_str(), dir_fd, b.c_str(), RENAME_EXCHANGE) != 0)
        throw_errno("exchange", b);
}

std::uint64_t LinuxSystem::mount_id(int fd) {
    struct statx stx {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0)
        throw_errno("statx", "descriptor " + std::to_string(fd));
    if ((stx.stx_mask & STATX_MNT_ID) == 0)
        throw Error(ENOSYS, "statx", "descriptor " + std::to_string(fd), "no mount id");
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
        throw_errno("statx", "descriptor " + std::to_string(fd));
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
    if (::fstatfs(fd, &fs) != 0) throw_errno("statfs", "descriptor " + std::to_string(fd));
    if (fs.f_type != TMPFS_MAGIC) return std::nullopt;
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("stat", "descriptor " + std::to_string(fd));
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
        Fd fd(::open(candidate, O_PATH | O_DIRECTORY | O_CLOEXEC));
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
    Fd fd(proc_ ? ::openat(proc_.get(), "thread-self/mountinfo", O_RDONLY | O_CLOEXEC)
                : ::open(what, O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open", what);
    return read_fd(fd.get(), kMaxHostFile, what);
}

Fd LinuxSystem::open_mountinfo() {
    const char* what = "/proc/thread-self/mountinfo";
    Fd fd(proc_ ? ::openat(proc_.get(), "thread-self/mountinfo", O_RDONLY | O_CLOEXEC)
                : ::open(what, O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open", what);
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
        if (n < 0) throw_errno("read", "the runtime's mountinfo");
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
        throw_invalid("run", what, "a program runs only confined to a root (-r ROOT first)");
    if (!proc_) throw Error(ENOENT, "run", what, "no /proc to map the sandbox's user namespace");
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

}  // namespace gpubind
