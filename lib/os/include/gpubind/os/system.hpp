// The system layer: the system calls the executor (and the image reader)
// make, one or so per method, behind interfaces so that the order and the
// rollback of a start can be tested without root by a recording
// implementation (tests/support/recording_system.hpp); the real one
// (LinuxSystem, system_linux.cpp) stays small enough to read at a glance.
// Three parts by what their users need: SystemFiles (files and mounts),
// SystemDevices (device cgroups), SystemProcesses (processes and
// namespaces); `System` is the three, made once per process, and each user
// takes the narrowest part it uses (the image reader the files, device
// access the devices).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/os/bpf.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/mount_flags.hpp"

namespace gpubind::os {

// What BPF_PROG_QUERY says about a cgroup's device programs.
struct DevicePrograms {
    unsigned attach_flags = 0;  // BPF_F_ALLOW_OVERRIDE (1), BPF_F_ALLOW_MULTI (2), or 0
    std::vector<std::uint32_t> ids;
    bool operator==(const DevicePrograms&) const = default;
};
inline constexpr unsigned kBpfAllowMulti = 2;  // BPF_F_ALLOW_MULTI

// What stat says about a file, without the parts the executor never looks at.
struct FileInfo {
    enum class Type { Missing, Regular, Directory, Symlink, CharDevice, BlockDevice, Fifo, Socket };
    Type type = Type::Missing;
    unsigned major = 0;  // of st_rdev, for devices
    unsigned minor = 0;
    std::uint64_t size = 0;  // st_size
    bool operator==(const FileInfo&) const = default;
};
std::string_view to_string(FileInfo::Type type);

// A regular file read by System::read_regular_at, with what fstat said.
struct RegularFile {
    std::string data;
    unsigned uid = 0;
    unsigned gid = 0;
    unsigned mode = 0;  // permission bits (07777)
};

// Host ids: those a container's user namespace maps its root to.
struct Owner {
    unsigned uid = 0;
    unsigned gid = 0;
    bool operator==(const Owner&) const = default;
};
// The id `id` of a user namespace maps to on the host, from its
// /proc/<pid>/uid_map or gid_map text ("inside outside count" lines);
// nullopt when it is not mapped. A malformed line is an Error naming `what`.
std::optional<unsigned> map_id(std::string_view id_map, unsigned id, const std::string& what);

// Whether mount `id` of a /proc/<pid>/mountinfo text is shared (a "shared:N"
// optional field); false when the id is not listed.
bool mount_is_shared(std::string_view mountinfo, std::uint64_t id);
// The device "major:minor" of a mountinfo line (its third field; "" if none).
std::string_view mountinfo_device(std::string_view line);

// What System::list_dir read of a directory.
struct DirNames {
    std::vector<std::string> names;  // the kept ones
    bool more = false;               // entries beyond the cap, not read
};
using NameFilter = std::function<bool(std::string_view)>;

// The system calls a start makes, in three parts by what their users need:
// SystemFiles (the container's root, host files bound into it, mounts),
// SystemDevices (device cgroups: v1 rules, v2 device programs) and
// SystemProcesses (the container process, namespaces, file system ids,
// ldconfig). `System` is all three: one object made per process and handed
// down once; each user takes the part it uses. Every directory argument is a
// descriptor; names are single path components. Failures throw Error.

// Files and mounts: the container's root, host files bound into it.
class SystemFiles {
  public:
    virtual ~SystemFiles() = default;

    // --- Host files ---
    // open_tree(OPEN_TREE_CLONE): a detached bind mount of a host path.
    virtual util::Fd open_tree(const std::filesystem::path& host_path) = 0;
    virtual FileInfo stat_fd(int fd) = 0;

    // --- Inside the container's root ---
    // O_PATH|O_DIRECTORY of the rootfs, by its path in the current namespace.
    virtual util::Fd open_root(const std::filesystem::path& rootfs) = 0;
    // A directory inside the root, resolved with open_in_root; empty when missing.
    virtual util::Fd open_dir_in_root(int root_fd, const std::filesystem::path& path) = 0;
    // fstatat(AT_SYMLINK_NOFOLLOW); Type::Missing when there is nothing.
    virtual FileInfo stat_at(int dir_fd, const std::string& name) = 0;
    // What `path` is inside the root, links followed there (resolved like
    // open_dir_in_root, never out of it); Type::Missing when nothing is there
    // or a component is not a directory.
    virtual FileInfo stat_in_root(int root_fd, const std::filesystem::path& path) = 0;
    virtual std::string read_link_at(int dir_fd, const std::string& name) = 0;
    // The names in a directory (not "." or ".."), in no particular order,
    // that `keep` accepts (all when it is empty): a name becomes a string only
    // when kept. Reads at most `max_entries` entries (an image's directory can
    // hold millions); DirNames::more says there were others.
    virtual DirNames list_dir(int dir_fd, std::size_t max_entries, const NameFilter& keep) = 0;
    // mkdirat, then the new directory opened O_PATH|O_NOFOLLOW.
    virtual util::Fd make_dir(int dir_fd, const std::string& name, unsigned mode) = 0;
    // An empty file: openat(O_CREAT|O_EXCL|O_NOFOLLOW), kept open: the new
    // inode itself (a mount point needs no second lookup).
    virtual util::Fd make_file(int dir_fd, const std::string& name, unsigned mode) = 0;
    // A file with contents, O_CREAT|O_EXCL|O_NOFOLLOW (files of the proc view).
    virtual void write_file_at(int dir_fd, const std::string& name, const std::string& data,
                               unsigned mode) = 0;
    virtual void make_symlink(const std::string& target, int dir_fd, const std::string& name) = 0;
    // make_file, make_dir and make_symlink where the name is expected to be
    // free (a fresh root): an empty Fd (false) instead of an error when
    // something is at the name already (EEXIST; never followed), which the
    // caller then looks at with stat_at. LinuxSystem creates first: no
    // lookup that finds nothing before each creation. The defaults look
    // first (stat_at), as a caller did before.
    virtual util::Fd try_make_file(int dir_fd, const std::string& name, unsigned mode) {
        if (stat_at(dir_fd, name).type != FileInfo::Type::Missing) return {};
        return make_file(dir_fd, name, mode);
    }
    virtual util::Fd try_make_dir(int dir_fd, const std::string& name, unsigned mode) {
        if (stat_at(dir_fd, name).type != FileInfo::Type::Missing) return {};
        return make_dir(dir_fd, name, mode);
    }
    virtual bool try_make_symlink(const std::string& target, int dir_fd, const std::string& name) {
        if (stat_at(dir_fd, name).type != FileInfo::Type::Missing) return false;
        make_symlink(target, dir_fd, name);
        return true;
    }
    // Reads dir_fd/name: openat(O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_NOCTTY), then
    // fstat: anything but a regular file (a symlink: ELOOP) is an Error, never
    // read; one larger than `max_size` is Error(EFBIG).
    virtual RegularFile read_regular_at(int dir_fd, const std::string& name,
                                        std::size_t max_size) = 0;
    // Replaces dir_fd/name atomically: `data` into a new file dir_fd/temp
    // (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing already there is opened), owned
    // by `chown_to` when set (else by the file system ids), given `mode`, then
    // renameat(temp, name). On failure before the rename the temp file is removed.
    virtual void replace_file_at(int dir_fd, const std::string& temp, const std::string& name,
                                 const std::string& data, unsigned mode,
                                 const std::optional<Owner>& chown_to) = 0;
    // O_PATH|O_NOFOLLOW of an existing entry: the exact inode to mount onto.
    virtual util::Fd open_at(int dir_fd, const std::string& name) = 0;
    // unlinkat (AT_REMOVEDIR for directories).
    virtual void remove(int dir_fd, const std::string& name, bool directory) = 0;
    // rename(2) within a directory (replacing the entry `to`, never following it).
    virtual void rename_at(int dir_fd, const std::string& from, const std::string& to) = 0;
    // renameat2(RENAME_EXCHANGE) within a directory: the two entries swap.
    virtual void exchange_at(int dir_fd, const std::string& a, const std::string& b) = 0;

    // --- Mounts ---
    // mount_setattr on a (detached or attached) mount: MountFlag bits to set
    // (mount_flags.hpp).
    virtual void set_mount_flags(int mount_fd, unsigned flags) = 0;
    // move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH): the mount onto the inode.
    virtual void attach(int mount_fd, int target_fd) = 0;
    // umount2(MNT_DETACH | UMOUNT_NOFOLLOW) of the mount on dir_fd/name.
    virtual void detach(int dir_fd, const std::string& name) = 0;
    // open_tree(OPEN_TREE_CLONE | AT_EMPTY_PATH): another detached copy of a
    // mount (one open_tree gave), to bind the same host file at a second place.
    virtual util::Fd clone_tree(int tree_fd) = 0;
    // fsopen("tmpfs") / fsconfig / fsmount: a detached, empty tmpfs (nosuid, nodev, noexec).
    virtual util::Fd make_tmpfs() = 0;
    // The id of the mount the descriptor's file is on (statx STATX_MNT_ID).
    virtual std::uint64_t mount_id(int fd) = 0;
    // The device (st_dev) of the tmpfs the descriptor's file is on; nullopt
    // when it is on another file system (fstatfs).
    virtual std::optional<std::pair<unsigned, unsigned>> tmpfs_device(int fd) = 0;
    // Whether the mount the descriptor's file is on propagates to peers
    // (MS_SHARED), asked of the kernel directly (statmount(2), Linux 6.8);
    // nullopt where it cannot answer (an older kernel): read_mountinfo then.
    virtual std::optional<bool> mount_shared(int fd) = 0;
    // This thread's mount namespace's mountinfo (/proc/thread-self/mountinfo),
    // for mount_is_shared: read once per start by the executor where
    // mount_shared cannot answer (reading it costs ~2 us per mount listed).
    virtual std::string read_mountinfo() = 0;
    // This thread's mount namespace's mountinfo opened now, to be read later
    // (a setns meanwhile changes nothing of what it shows): which of
    // `devices` (major:minor) a mount there is of. Read as a stream, any size.
    virtual util::Fd open_mountinfo() = 0;
    virtual std::vector<bool> mountinfo_shows(
        int mountinfo_fd, const std::vector<std::pair<unsigned, unsigned>>& devices) = 0;
};

// Devices and cgroups: a container's device cgroup, v1 rules and v2 device
// programs, and the host files its location is read from.
class SystemDevices {
  public:
    virtual ~SystemDevices() = default;

    // --- cgroup v1, and where the cgroups are ---
    // A small host file (/proc/self/mountinfo, a cgroup's devices.list).
    virtual std::string read_host_file(const std::filesystem::path& path) = 0;
    // mountinfo lines (fields the cgroup locator reads) for the cgroup file
    // systems at the usual places, asked of statmount(2) in microseconds where
    // the host's whole mountinfo costs ~2 us per mount: /sys/fs/cgroup/devices
    // for a process in a v1 devices hierarchy, else /sys/fs/cgroup and
    // /sys/fs/cgroup/unified. nullopt where the kernel cannot answer.
    virtual std::optional<std::string> cgroup_mounts(bool v1_devices) = 0;
    // O_WRONLY descriptor of a cgroup control file (`dir` a host path, `name` e.g.
    // "devices.allow").
    virtual util::Fd open_cgroup_file(const std::filesystem::path& dir,
                                      const std::string& name) = 0;
    // One write(2) of a rule to a cgroup control file; `what` names the file.
    virtual void write_rule(int fd, const std::string& rule, const std::string& what) = 0;

    // --- cgroup v2 device programs (bpf(2)) ---
    // O_RDONLY|O_DIRECTORY of a cgroup v2 directory (a host path).
    virtual util::Fd open_cgroup_dir(const std::filesystem::path& dir) = 0;
    // BPF_PROG_QUERY(BPF_CGROUP_DEVICE) on the cgroup: the ids of the programs
    // attached to it (not its ancestors) and the flags they were attached with.
    virtual DevicePrograms query_device_programs(int cgroup_fd) = 0;
    // BPF_PROG_GET_FD_BY_ID.
    virtual util::Fd open_program(std::uint32_t id) = 0;
    // BPF_OBJ_GET_INFO_BY_FD: the program's instructions as the kernel dumps them.
    virtual std::vector<bpf::Insn> program_instructions(int prog_fd) = 0;
    // BPF_PROG_LOAD of a BPF_PROG_TYPE_CGROUP_DEVICE program named `name`;
    // the verifier's complaint is in the Error.
    virtual util::Fd load_device_program(const std::vector<bpf::Insn>& insns,
                                         const std::string& name) = 0;
    // BPF_PROG_ATTACH(BPF_CGROUP_DEVICE) of `new_prog` in place of `old_prog`,
    // atomically: with BPF_F_ALLOW_MULTI in `flags`, BPF_F_REPLACE naming the
    // old program; otherwise (a single program per cgroup) the attach itself
    // replaces it. `what` names the cgroup.
    virtual void replace_device_program(int cgroup_fd, int new_prog, int old_prog, unsigned flags,
                                        const std::string& what) = 0;
    // The directory where device programs are kept (pinned) for reuse, a host
    // path: opened O_RDONLY|O_DIRECTORY|O_NOFOLLOW, made (0700) first when it
    // is missing. It must be a directory on bpffs, root's and writable by no
    // one else; otherwise an empty Fd, and `why` says what it is (no
    // exception: a node without bpffs takes this path at every start);
    // `taken` is then whether the name is held by someone else: a directory
    // another user's or writable by others, or something not a directory (a
    // symbolic link, a pinned object) at the name.
    virtual util::Fd open_program_dir(const std::filesystem::path& dir, std::string& why,
                                      bool& taken) = 0;
    // BPF_OBJ_GET of the program kept at `path` (in that directory); an
    // empty Fd when nothing is there.
    virtual util::Fd open_kept_program(const std::string& path) = 0;
    // BPF_OBJ_PIN: keeps the program at `path` (EEXIST when something is there).
    virtual void keep_program(int prog_fd, const std::string& path) = 0;
};

// Processes and namespaces: the container process seen from the host, the
// namespaces entered and left, the ids files are made as, ldconfig run.
class SystemProcesses {
  public:
    virtual ~SystemProcesses() = default;

    // --- The container process (host side) ---
    // pidfd_open(2): pins the process so its pid cannot be reused under us.
    virtual util::Fd open_process(pid_t pid) = 0;
    // /proc/<pid>/ns/mnt, then a check through the pidfd that <pid> is still
    // the pinned process (so the namespace is its).
    virtual util::Fd open_mount_ns(int pidfd, pid_t pid) = 0;
    // /proc/<pid>/<name> (e.g. "cgroup"), verified through the pidfd likewise.
    virtual std::string read_proc(int pidfd, pid_t pid, const std::string& name) = 0;
    // /proc/<pid>/ns/user, verified likewise.
    virtual util::Fd open_user_ns(int pidfd, pid_t pid) = 0;
    // setns(CLONE_NEWUSER): every capability there, none left over the host.
    virtual void enter_user_ns(int ns_fd) = 0;
    // This process's own mount namespace and working directory, to return to.
    virtual util::Fd open_own_mount_ns() = 0;
    virtual util::Fd open_cwd() = 0;
    // Whether two descriptors are the same file (namespaces compare this way).
    virtual bool same_file(int fd_a, int fd_b) = 0;

    // --- Namespace ---
    // setns(CLONE_NEWNS); the working directory then is the namespace's root.
    virtual void enter_mount_ns(int ns_fd) = 0;
    virtual void change_dir(int dir_fd) = 0;  // fchdir
    // setfsgid, setfsuid: the ids new files get and file permissions are
    // checked as (not 0: no capability over files until set back to 0:0).
    virtual void set_fs_ids(unsigned uid, unsigned gid) = 0;

    // --- ldconfig ---
    // The host binary to execute later (ldconfig), opened on the host side: a
    // sealed memfd copy of it (sandbox::seal_executable).
    virtual util::Fd open_executable(const std::filesystem::path& path) = 0;
    // Runs the executable with `args` (argv[1..]), which start with "-r ROOT"
    // (ROOT a path in the current mount namespace): the program runs confined
    // to ROOT, pivoted into it, with ROOT's "-r" not passed on (sandbox::run:
    // new namespaces, the root read-only, nosuid and nodev, no /proc, /sys or
    // /dev of the container, a private writable tmpfs at kLdconfigScratch, a
    // user namespace whose root is an unprivileged host id (nobody), no
    // capabilities, seccomp, limits, empty environment); waits at most
    // `timeout`, killing it after. Returns the regular file kLdconfigOutput
    // it left in its scratch. Non-zero exit, a signal, a refused set-up, the
    // timeout or no such file is an Error.
    virtual std::string run(int exe_fd, const std::string& what,
                            const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout) = 0;
    // run(), the root of the program's user namespace mapped to the host ids
    // `owner` instead (the ids a user namespace maps the container's root to;
    // 0:0 only from inside a rootless container's user namespace).
    virtual std::string run_as(const Owner& owner, int exe_fd, const std::string& what,
                               const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout) = 0;
};

// All three: what one process makes once (LinuxSystem; the tests'
// RecordingSystem) and hands to the pieces that need every part (a start,
// the executor's Context).
class System : public SystemFiles, public SystemDevices, public SystemProcesses {
  public:
    ~System() override = default;
};

// Where the sandboxed ldconfig writes its cache (-C): a private tmpfs over
// the root's /dev in the sandbox, read back by the executor, never the image.
inline constexpr std::string_view kLdconfigScratch = "/dev";
inline constexpr std::string_view kLdconfigOutput = "ld.so.cache";

// The real thing.
class LinuxSystem final : public System {
  public:
    // Opens this process's /proc (the sandbox's id maps are written there,
    // whatever mount namespace the executor is in by then).
    LinuxSystem();
    util::Fd open_process(pid_t pid) override;
    util::Fd open_mount_ns(int pidfd, pid_t pid) override;
    std::string read_proc(int pidfd, pid_t pid, const std::string& name) override;
    util::Fd open_user_ns(int pidfd, pid_t pid) override;
    void enter_user_ns(int ns_fd) override;
    util::Fd open_own_mount_ns() override;
    util::Fd open_cwd() override;
    bool same_file(int fd_a, int fd_b) override;
    std::string read_host_file(const std::filesystem::path& path) override;
    util::Fd open_tree(const std::filesystem::path& host_path) override;
    util::Fd open_executable(const std::filesystem::path& path) override;
    util::Fd open_cgroup_file(const std::filesystem::path& dir, const std::string& name) override;
    void write_rule(int fd, const std::string& rule, const std::string& what) override;
    FileInfo stat_fd(int fd) override;
    util::Fd open_cgroup_dir(const std::filesystem::path& dir) override;
    DevicePrograms query_device_programs(int cgroup_fd) override;
    util::Fd open_program(std::uint32_t id) override;
    std::vector<bpf::Insn> program_instructions(int prog_fd) override;
    util::Fd load_device_program(const std::vector<bpf::Insn>& insns,
                                 const std::string& name) override;
    void replace_device_program(int cgroup_fd, int new_prog, int old_prog, unsigned flags,
                                const std::string& what) override;
    util::Fd open_program_dir(const std::filesystem::path& dir, std::string& why,
                              bool& taken) override;
    util::Fd open_kept_program(const std::string& path) override;
    void keep_program(int prog_fd, const std::string& path) override;
    void enter_mount_ns(int ns_fd) override;
    void change_dir(int dir_fd) override;
    util::Fd open_root(const std::filesystem::path& rootfs) override;
    util::Fd open_dir_in_root(int root_fd, const std::filesystem::path& path) override;
    FileInfo stat_at(int dir_fd, const std::string& name) override;
    FileInfo stat_in_root(int root_fd, const std::filesystem::path& path) override;
    std::string read_link_at(int dir_fd, const std::string& name) override;
    DirNames list_dir(int dir_fd, std::size_t max_entries, const NameFilter& keep) override;
    util::Fd make_dir(int dir_fd, const std::string& name, unsigned mode) override;
    util::Fd make_file(int dir_fd, const std::string& name, unsigned mode) override;
    void write_file_at(int dir_fd, const std::string& name, const std::string& data,
                       unsigned mode) override;
    void make_symlink(const std::string& target, int dir_fd, const std::string& name) override;
    util::Fd try_make_file(int dir_fd, const std::string& name, unsigned mode) override;
    util::Fd try_make_dir(int dir_fd, const std::string& name, unsigned mode) override;
    bool try_make_symlink(const std::string& target, int dir_fd, const std::string& name) override;
    RegularFile read_regular_at(int dir_fd, const std::string& name, std::size_t max_size) override;
    void replace_file_at(int dir_fd, const std::string& temp, const std::string& name,
                         const std::string& data, unsigned mode,
                         const std::optional<Owner>& chown_to) override;
    util::Fd open_at(int dir_fd, const std::string& name) override;
    void remove(int dir_fd, const std::string& name, bool directory) override;
    void set_fs_ids(unsigned uid, unsigned gid) override;
    void set_mount_flags(int mount_fd, unsigned flags) override;
    void attach(int mount_fd, int target_fd) override;
    void detach(int dir_fd, const std::string& name) override;
    util::Fd clone_tree(int tree_fd) override;
    util::Fd make_tmpfs() override;
    void rename_at(int dir_fd, const std::string& from, const std::string& to) override;
    void exchange_at(int dir_fd, const std::string& a, const std::string& b) override;
    std::uint64_t mount_id(int fd) override;
    std::optional<std::pair<unsigned, unsigned>> tmpfs_device(int fd) override;
    std::optional<bool> mount_shared(int fd) override;
    std::optional<std::string> cgroup_mounts(bool v1_devices) override;
    std::string read_mountinfo() override;
    util::Fd open_mountinfo() override;
    std::vector<bool> mountinfo_shows(
        int mountinfo_fd, const std::vector<std::pair<unsigned, unsigned>>& devices) override;
    std::string run(int exe_fd, const std::string& what, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout) override;
    std::string run_as(const Owner& owner, int exe_fd, const std::string& what,
                       const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout) override;

  private:
    // The directory just made at dir_fd/name, O_PATH|O_NOFOLLOW (removed again if it cannot be).
    static util::Fd open_made_dir(int dir_fd, const std::string& name);

    util::Fd proc_;
};

}  // namespace gpubind::os
