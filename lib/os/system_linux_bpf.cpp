// LinuxSystem's device-program calls: the BPF_CGROUP_DEVICE programs on a
// cgroup, loading, replacing and reading them, and the bpffs directory where
// they are kept (system.hpp; the rest of LinuxSystem is system_linux.cpp).
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpubind/os/system.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::os {

namespace {

long bpf_call(int cmd, union bpf_attr* attr) {
    return ::syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

std::uint64_t pointer(const void* p) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

static_assert(sizeof(bpf::Insn) == sizeof(struct bpf_insn));

}  // namespace

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
            util::throw_errno("query device programs",
                              "cgroup descriptor " + std::to_string(cgroup_fd));
        }
        ids.resize(attr.query.prog_cnt);
        return {attr.query.attach_flags, ids};
    }
}

util::Fd LinuxSystem::open_program(std::uint32_t id) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.prog_id = id;
    int fd = static_cast<int>(bpf_call(BPF_PROG_GET_FD_BY_ID, &attr));
    if (fd < 0) util::throw_errno("open device program", "id " + std::to_string(id));
    return util::Fd(fd);
}

std::vector<bpf::Insn> LinuxSystem::program_instructions(int prog_fd) {
    auto info_of_prog = [&](struct bpf_prog_info& info) {
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.info.bpf_fd = static_cast<std::uint32_t>(prog_fd);
        attr.info.info_len = sizeof info;
        attr.info.info = pointer(&info);
        if (bpf_call(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0)
            util::throw_errno("read device program", "descriptor " + std::to_string(prog_fd));
    };
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof info);
    info_of_prog(info);
    const std::string what = "program " + std::to_string(info.id);
    if (info.type != BPF_PROG_TYPE_CGROUP_DEVICE)
        throw util::Error(util::ErrorKind::Invalid, EINVAL, "read device program", what,
                          "not a cgroup device program");
    // The kernel shows the instructions only to a caller with CAP_BPF (or CAP_SYS_ADMIN).
    if (info.xlated_prog_len == 0)
        throw util::Error(EPERM, "read device program", what,
                          "the kernel does not show its instructions");
    std::vector<bpf::Insn> insns(info.xlated_prog_len / sizeof(bpf::Insn));
    const std::uint32_t len = info.xlated_prog_len;
    std::memset(&info, 0, sizeof info);
    info.xlated_prog_len = len;
    info.xlated_prog_insns = pointer(insns.data());
    info_of_prog(info);
    if (info.xlated_prog_len != len)
        throw util::Error(EAGAIN, "read device program", what, "changed while being read");
    return insns;
}

util::Fd LinuxSystem::load_device_program(const std::vector<bpf::Insn>& insns,
                                          const std::string& name) {
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
        return static_cast<int>(bpf_call(BPF_PROG_LOAD, &attr));
    };
    int fd = load(nullptr, 0);
    if (fd >= 0) return util::Fd(fd);
    const int err = errno;
    if (err != EINVAL && err != EACCES) throw util::Error(err, "load device program", name);
    // The verifier's reason: the last line of its log.
    std::vector<char> log(1u << 16, '\0');
    fd = load(log.data(), static_cast<std::uint32_t>(log.size()));
    if (fd >= 0) return util::Fd(fd);
    std::string text(log.data());
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::size_t nl = text.rfind('\n');
    std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
    throw util::Error(err, "load device program", name,
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
    if (bpf_call(BPF_PROG_ATTACH, &attr) != 0) util::throw_errno("attach device program", what);
}

util::Fd LinuxSystem::open_program_dir(const std::filesystem::path& dir, std::string& why,
                                       bool& taken) {
    taken = false;
    auto unusable = [&](const std::string& path, const std::string& what) {
        why = path + ": " + what;
        return util::Fd();
    };
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    util::Fd fd(::open(dir.c_str(), flags));
    struct statfs fs {};
    if (!fd && errno == ENOENT) {
        // Made only on a bpffs parent: never a directory of some other file system.
        const std::filesystem::path parent = dir.parent_path();
        if (::statfs(parent.c_str(), &fs) != 0) return unusable(parent, std::strerror(errno));
        if (fs.f_type != BPF_FS_MAGIC) return unusable(parent, "not a bpffs");
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
            return unusable(dir, std::string("mkdir: ") + std::strerror(errno));
        fd = util::Fd(::open(dir.c_str(), flags));
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

util::Fd LinuxSystem::open_kept_program(const std::string& path) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.pathname = pointer(path.c_str());  // (a program is opened read-write or not at all)
    const int fd = static_cast<int>(bpf_call(BPF_OBJ_GET, &attr));
    if (fd < 0 && errno == ENOENT) return util::Fd();
    if (fd < 0) util::throw_errno("open kept device program", path);
    return util::Fd(fd);
}

void LinuxSystem::keep_program(int prog_fd, const std::string& path) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.pathname = pointer(path.c_str());
    attr.bpf_fd = static_cast<std::uint32_t>(prog_fd);
    if (bpf_call(BPF_OBJ_PIN, &attr) != 0) util::throw_errno("keep device program", path);
}

}  // namespace gpubind::os
