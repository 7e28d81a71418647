// sandbox::run: the confined child for ldconfig. Everything the child needs
// (argv, the seccomp filter, an empty capability set) is built before clone;
// the child only makes system calls and reports a failed step as one line of
// text through a close-on-exec pipe (no exception crosses the clone).
#include "gpubind/os/sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/process.hpp"
#include "gpubind/util/strings.hpp"
#include "mount_api.hpp"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace gpubind::os::sandbox {

namespace {

constexpr std::size_t kMaxProgram = 64u << 20;  // a static ldconfig is ~1 MiB
constexpr std::size_t kMaxOutput = 4096;        // of the program's output kept for the error
constexpr std::size_t kMaxSetupError = 512;
constexpr std::size_t kMaxResult = 256u << 20;  // the file read back from the scratch

int sys_int(long r) {
    return static_cast<int>(r);
}

// What ldconfig (glibc 2.31 .. 2.40, static) calls while reading a root's
// ld.so.conf and libraries and writing its cache and links. No chroot (it is
// run without -r, already in the root), no mount, socket, ptrace, fork, kill,
// namespace or keyring calls: those fail with EPERM.
constexpr std::array kLdconfigCalls = {
    // files
    "read",
    "pread64",
    "readv",
    "write",
    "writev",
    "pwrite64",
    "open",
    "openat",
    "close",
    "lseek",
    "fstat",
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "readlink",
    "readlinkat",
    "getdents",
    "getdents64",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "chmod",
    "fchmod",
    "fchmodat",
    "fsync",
    "fdatasync",
    "ftruncate",
    "access",
    "faccessat",
    "faccessat2",
    "getcwd",
    "chdir",
    "fchdir",
    "fcntl",
    "umask",
    "ioctl",
    "dup",
    "dup2",
    "dup3",
    // memory
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    // the process itself
    "exit",
    "exit_group",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "rseq",
    "prlimit64",
    "getrlimit",
    "getrandom",
    "futex",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "getpid",
    "gettid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "uname",
    "clock_gettime",
    "gettimeofday",
    "time",
    "sched_getaffinity",
    "sched_yield",
    "clock_nanosleep",
    "nanosleep",
};

struct FilterDeleter {
    void operator()(void* ctx) const noexcept { seccomp_release(ctx); }
};
using FilterPtr = std::unique_ptr<void, FilterDeleter>;

// The allow-list; everything else is EPERM. execveat only of the sealed program
// (whose descriptor is close-on-exec: the program cannot exec it again).
FilterPtr make_filter(Filter filter, int exe_fd, const std::string& what) {
    if (filter == Filter::None) return {};
    FilterPtr ctx(seccomp_init(SCMP_ACT_ERRNO(EPERM)));
    if (!ctx) throw util::Error(ENOMEM, "seccomp_init", what);
    for (const char* name : kLdconfigCalls) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture (stat on arm64)
        if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0); rc < 0)
            throw util::Error(-rc, "seccomp allow", what, name);
    }
    // (spelled out: SCMP_A0 is a C compound literal, not C++)
    scmp_arg_cmp same_fd{};
    same_fd.arg = 0;
    same_fd.op = SCMP_CMP_EQ;
    same_fd.datum_a = static_cast<scmp_datum_t>(exe_fd);
    same_fd.datum_b = 0;
    if (int rc = seccomp_rule_add_array(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(execveat), 1, &same_fd);
        rc < 0)
        throw util::Error(-rc, "seccomp allow", what, "execveat");
    return ctx;
}

struct CapDeleter {
    void operator()(cap_t caps) const noexcept { cap_free(caps); }
};
using CapPtr = std::unique_ptr<std::remove_pointer_t<cap_t>, CapDeleter>;

// In the child: a failed step, as text, then exit.
[[noreturn]] void child_fail(int err_fd, const char* step, int err) {
    // The errno, then the step: one write, so the parent reads it whole.
    char buf[kMaxSetupError];
    std::memcpy(buf, &err, sizeof err);
    int n = std::snprintf(buf + sizeof err, sizeof buf - sizeof err, "%s", step);
    if (n > 0) {
        std::size_t len =
            sizeof err + std::min(static_cast<std::size_t>(n), sizeof buf - sizeof err - 1);
        ssize_t ignored = ::write(err_fd, buf, len);
        (void)ignored;
    }
    ::_exit(127);
}

struct ChildArgs {
    int exe_fd;
    int err_fd;
    int out_fd;
    int null_fd;
    int ready_fd;    // the child says: my user namespace is there, map it
    int go_fd;       // the parent says: mapped
    int scratch_fd;  // a detached tmpfs, or -1
    const char* root;
    const char* scratch;  // where it goes in the new root
    char* const* argv;
    const Limits* limits;
    cap_t no_caps;
    void* filter;        // scmp_filter_ctx or null
    bool groups_denied;  // setgroups is denied where we are (a rootless user namespace)
};

[[noreturn]] void child_main(const ChildArgs& a) {
    const int e = a.err_fd;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::dup2(a.null_fd, STDIN_FILENO) < 0 || ::dup2(a.out_fd, STDOUT_FILENO) < 0 ||
        ::dup2(a.out_fd, STDERR_FILENO) < 0)
        child_fail(e, "redirect output", errno);
    // Whatever the caller had open is gone at exec (the program and the error
    // pipe are close-on-exec already).
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0 && errno != ENOSYS)
        child_fail(e, "close_range", errno);

    // The root: a private recursive bind of it becomes "/", the rest detached.
    // Every mount of it read-only, nosuid and nodev: the program writes
    // nothing in the image and opens no device node there (an image's block
    // device named like a file it writes).
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        child_fail(e, "make mounts private", errno);
    if (::mount(a.root, a.root, nullptr, MS_BIND | MS_REC, nullptr) != 0)
        child_fail(e, "bind the root", errno);
    mount_api::MountAttr sealed{};
    sealed.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (::syscall(SYS_mount_setattr, AT_FDCWD, a.root, AT_RECURSIVE, &sealed, sizeof sealed) != 0)
        child_fail(e, "make the root read-only, nosuid, nodev", errno);
    if (::chdir(a.root) != 0) child_fail(e, "enter the root", errno);
    if (::syscall(SYS_pivot_root, ".", ".") != 0) child_fail(e, "pivot_root", errno);
    if (::umount2(".", MNT_DETACH) != 0) child_fail(e, "detach the old root", errno);
    if (::chdir("/") != 0) child_fail(e, "chdir /", errno);
    // Nothing of the container's /proc, /sys and /dev (what a runtime mounted
    // there, stacked mounts included; never through a link).
    for (const char* hidden : {"/proc", "/sys", "/dev"})
        while (::umount2(hidden, MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
        }
    if (a.scratch_fd >= 0 && ::syscall(SYS_move_mount, a.scratch_fd, "", AT_FDCWD, a.scratch,
                                       MOVE_MOUNT_F_EMPTY_PATH) != 0)
        child_fail(e, "mount the scratch directory (the root needs that directory)", errno);
    static const char kHost[] = "gpubind-sandbox";
    if (::sethostname(kHost, sizeof kHost - 1) != 0) child_fail(e, "set the hostname", errno);

    const std::array<std::pair<int, rlim_t>, 6> limits = {{
        {RLIMIT_CPU, a.limits->cpu_seconds},
        {RLIMIT_AS, a.limits->address_space},
        {RLIMIT_FSIZE, a.limits->file_size},
        {RLIMIT_NOFILE, a.limits->open_files},
        {RLIMIT_NPROC, a.limits->processes},
        {RLIMIT_CORE, 0},
    }};
    for (const auto& [resource, value] : limits) {
        // Never above what this process has already (raising it needs a capability).
        struct rlimit rl {};
        if (::getrlimit(static_cast<__rlimit_resource>(resource), &rl) != 0)
            child_fail(e, "getrlimit", errno);
        if (rl.rlim_max == RLIM_INFINITY || value < rl.rlim_max) rl.rlim_max = value;
        rl.rlim_cur = rl.rlim_max;
        if (::setrlimit(static_cast<__rlimit_resource>(resource), &rl) != 0)
            child_fail(e, "setrlimit", errno);
    }

    // A user namespace of its own, whose root the parent maps to the ids of
    // Options (never the host's root): the mounts above belong to the outer
    // one, so nothing of them can be undone from here.
    if (::unshare(CLONE_NEWUSER) != 0) child_fail(e, "new user namespace", errno);
    char sync = 'u';
    if (::write(a.ready_fd, &sync, 1) != 1) child_fail(e, "ask for the user namespace map", errno);
    if (::read(a.go_fd, &sync, 1) != 1) child_fail(e, "wait for the user namespace map", EIO);

    // No capabilities, now or after exec: uid 0 gets none back from execve
    // (NOROOT), none can be raised again (empty bounding and ambient sets).
    if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                       SECBIT_NO_CAP_AMBIENT_RAISE |
                                       SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
        child_fail(e, "set securebits", errno);
    for (cap_value_t c = 0; c <= CAP_LAST_CAP || c < cap_max_bits(); ++c)
        if (cap_drop_bound(c) != 0 && errno != EINVAL) child_fail(e, "drop bounding set", errno);
    if (cap_reset_ambient() != 0) child_fail(e, "clear ambient capabilities", errno);
    // The namespace's root, the mapped ids outside, while CAP_SETUID and
    // CAP_SETGID are still effective (NO_SETUID_FIXUP: the change itself
    // drops nothing; the next step does). No supplementary group either.
    // (Under a user namespace that denies setgroups, a rootless runtime's,
    // the groups are the unprivileged user's and stay.)
    if (::setgroups(0, nullptr) != 0 && !(errno == EPERM && a.groups_denied))
        child_fail(e, "drop supplementary groups", errno);
    if (::setresgid(0, 0, 0) != 0) child_fail(e, "setresgid", errno);
    if (::setresuid(0, 0, 0) != 0) child_fail(e, "setresuid", errno);
    if (cap_set_proc(a.no_caps) != 0) child_fail(e, "drop capabilities", errno);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(e, "no_new_privs", errno);
    if (a.filter) {
        if (int rc = seccomp_load(a.filter); rc < 0) child_fail(e, "load seccomp filter", -rc);
    }
    char* envp[] = {nullptr};
    ::syscall(SYS_execveat, a.exe_fd, "", a.argv, envp, AT_EMPTY_PATH);
    child_fail(e, "execute", errno);
}

// Where a program that ran out of time was stuck, when it was opening a file
// (an image's FIFO blocks open() until a writer comes, forever):
// "; it was blocked opening PATH", else "". Read from /proc/PID/syscall (the
// call and its arguments) and the path from the program's memory, a page at
// a time; the path is the image's text, so it is capped and escaped.
std::string blocked_opening(pid_t pid) {
    const std::string proc = "/proc/" + std::to_string(pid) + "/syscall";
    util::Fd fd(::open(proc.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return {};
    char text[512];
    const ssize_t n = ::read(fd.get(), text, sizeof text - 1);
    if (n <= 0) return {};
    text[n] = '\0';
    char* p = text;
    const long nr = std::strtol(p, &p, 10);
    unsigned long args[2] = {0, 0};
    for (auto& a : args) a = std::strtoul(p, &p, 16);
    unsigned long addr = 0;
    if (nr == SYS_openat) addr = args[1];
#ifdef SYS_open
    else if (nr == SYS_open)
        addr = args[0];
#endif
    if (addr == 0) return {};
    constexpr std::size_t kMaxShown = 256;
    const auto page = static_cast<unsigned long>(::sysconf(_SC_PAGESIZE));
    std::string path;
    while (path.size() < kMaxShown) {
        char buf[4096];
        const std::size_t len =
            std::min<std::size_t>(sizeof buf, page - addr % page);  // never across a page
        iovec local{buf, len};
        iovec remote{reinterpret_cast<void*>(addr), len};
        if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(len)) break;
        const std::size_t end = std::find(buf, buf + len, '\0') - buf;
        path.append(buf, end);
        if (end < len) break;
        addr += len;
    }
    if (path.empty()) return {};
    std::string shown = util::escape_control(std::string_view(path).substr(0, kMaxShown));
    if (path.size() > kMaxShown) shown += "...";
    return "; it was blocked opening " + shown;
}

// A detached tmpfs for the program's output, its root directory the
// sandbox's ids' alone; nosuid, nodev, noexec.
util::Fd make_scratch(const Options& o, const std::string& what) {
    return mount_api::make_tmpfs({{"mode", "0700"},
                                  {"uid", std::to_string(o.uid)},
                                  {"gid", std::to_string(o.gid)},
                                  {"size", std::to_string(o.limits.file_size * 2 + 65536)}},
                                 what);
}

// Whether this process's user namespace denies setgroups (so will the child's).
bool setgroups_denied(int proc_fd) {
    util::Fd fd(::openat(proc_fd, "self/setgroups", O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    char buf[16] = {};
    const ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
    return n >= 4 && std::strncmp(buf, "deny", 4) == 0;
}

// The child's user namespace: its root is o.uid:o.gid outside, nothing else mapped.
void map_ids(int proc_fd, pid_t pid, const Options& o, const std::string& what) {
    const std::pair<const char*, unsigned> maps[] = {{"uid_map", o.uid}, {"gid_map", o.gid}};
    for (const auto& [name, id] : maps) {
        const std::string file = std::to_string(pid) + "/" + name;
        util::Fd fd(::openat(proc_fd, file.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
        if (!fd) util::throw_errno("open /proc/" + file, what);
        const std::string line = "0 " + std::to_string(id) + " 1\n";
        if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
            util::throw_errno("write /proc/" + file, what);
    }
}

// The regular file `name` the program left in its scratch (never a link or
// another kind of file).
std::string read_result(int scratch_fd, const std::string& name, const std::string& what) {
    util::Fd fd(::openat(scratch_fd, name.c_str(),
                         O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) util::throw_errno("open the program's " + name, what);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", name);
    if (!S_ISREG(st.st_mode))
        throw util::Error(util::ErrorKind::Invalid, EINVAL, "read the program's " + name, what,
                          "not a regular file");
    return util::read_fd(fd.get(), kMaxResult, name);
}

void append_capped(std::string& out, const char* data, std::size_t n) {
    out.append(data, n);
    if (out.size() > kMaxOutput) out.erase(0, out.size() - kMaxOutput);
}

// What run needs of its options before anything is made: an absolute root,
// and an output only as a file name in an absolute scratch directory.
void check_options(const Options& options, const std::string& what) {
    if (options.root.empty() || !options.root.is_absolute())
        util::throw_invalid("run", what, "the sandbox needs an absolute root directory");
    if (!options.output.empty() &&
        (options.scratch.empty() || options.output.find('/') != std::string::npos))
        util::throw_invalid("run", what, "the output is a file name in the scratch directory");
    if (!options.scratch.empty() && options.scratch.front() != '/')
        util::throw_invalid("run", what, "the scratch directory is an absolute path in the root");
}

// A close-on-exec pipe: its read end, then its write end.
std::pair<util::Fd, util::Fd> make_pipe(const std::string& what) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) util::throw_errno("pipe", what);
    return {util::Fd(fds[0]), util::Fd(fds[1])};
}

// The child, started: its pid here (child_main runs in it and never returns).
pid_t start_child(const ChildArgs& child_args, const std::string& what) {
    // Like fork, into new namespaces at once: the child is pid 1 of its own
    // pid namespace, and killing it takes everything it could have started.
    const long flags =
        CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS | SIGCHLD;
    pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, 0));
    if (pid < 0) util::throw_errno("clone (new namespaces)", what);
    if (pid == 0) child_main(child_args);
    return pid;
}

// A pidfd of the child; without one, the child is killed.
util::Fd open_pidfd(pid_t pid, const std::string& what) {
    util::Fd child(sys_int(::syscall(SYS_pidfd_open, pid, 0)));
    if (!child) {
        int err = errno;
        util::kill_and_reap(pid);
        throw util::Error(err, "pidfd_open", what);
    }
    return child;
}

// The child's user namespace, once it has one (nothing comes on `ready_fd`
// when its set-up failed before: the error pipe says why), mapped, then the
// child released through `go_fd`; on failure, the child is killed.
void map_child(int ready_fd, int go_fd, int proc_fd, pid_t pid, const Options& options,
               const std::string& what) {
    char sync = 0;
    ssize_t n;
    while ((n = ::read(ready_fd, &sync, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1) {
        try {
            map_ids(proc_fd, pid, options, what);
        } catch (...) {
            util::kill_and_reap(pid);
            throw;
        }
        if (::write(go_fd, &sync, 1) != 1) {
            int err = errno;
            util::kill_and_reap(pid);
            throw util::Error(err, "sandbox: release the child", what);
        }
    }
}

// How the child ended: its wait status, and the last of what it wrote.
struct Outcome {
    int status = 0;
    std::string output;
};

// The child's output read until it exits (it is killed at the deadline),
// then the child reaped and what it left in the pipe read.
Outcome wait_child(const util::Fd& child, int out_fd, pid_t pid, const Options& options,
                   const std::string& what) {
    std::string output;
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    bool exited = false, out_open = true;
    while (!exited) {
        struct pollfd pfd[2] = {{child.get(), POLLIN, 0}, {out_fd, POLLIN, 0}};
        bool ready = false;
        try {
            ready = util::poll_until({pfd, out_open ? 2u : 1u}, deadline, what);
        } catch (...) {
            util::kill_and_reap(pid);
            throw;
        }
        if (!ready) {
            const std::string where = blocked_opening(pid);
            ::syscall(SYS_pidfd_send_signal, child.get(), SIGKILL, nullptr, 0);
            util::reap(pid);
            throw util::Error(
                ETIMEDOUT, "run", what,
                "killed after " + std::to_string(options.timeout.count()) + " ms" + where);
        }
        if (out_open && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            char buf[1024];
            ssize_t r = ::read(out_fd, buf, sizeof buf);
            if (r > 0)
                append_capped(output, buf, static_cast<std::size_t>(r));
            else if (r == 0 || errno != EINTR)
                out_open = false;
        }
        if ((pfd[0].revents & POLLIN) != 0) exited = true;
    }
    const int status = util::reap(pid);
    if (out_open && ::fcntl(out_fd, F_SETFL, O_NONBLOCK) == 0) {
        char buf[1024];
        ssize_t r;
        while ((r = ::read(out_fd, buf, sizeof buf)) > 0)
            append_capped(output, buf, static_cast<std::size_t>(r));
    }
    return {status, std::move(output)};
}

// A failed set-up (its error as the child sent it on `err_fd`), a signal or
// a non-zero exit thrown as an Error ending with the program's last lines.
void check_outcome(int err_fd, Outcome outcome, const std::string& what) {
    char setup[kMaxSetupError];
    ssize_t setup_n = ::read(err_fd, setup, sizeof setup);
    if (setup_n > static_cast<ssize_t>(sizeof(int))) {
        int err = 0;
        std::memcpy(&err, setup, sizeof err);
        throw util::Error(err,
                          "sandbox: " + std::string(setup + sizeof err,
                                                    static_cast<std::size_t>(setup_n) - sizeof err),
                          what);
    }
    std::string& output = outcome.output;
    const int status = outcome.status;
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    const std::string tail = output.empty() ? "" : ": " + output;
    if (WIFSIGNALED(status))
        throw util::Error(EIO, "run", what,
                          "killed by signal " + std::to_string(WTERMSIG(status)) + tail);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw util::Error(EIO, "run", what,
                          "exited with status " + std::to_string(WEXITSTATUS(status)) + tail);
}

}  // namespace

util::Fd seal_executable(const std::filesystem::path& path) {
    util::Fd src = util::open_or_throw(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    struct stat st {};
    if (::fstat(src.get(), &st) != 0) util::throw_errno("stat", path.string());
    if (!S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0)
        throw util::Error(EACCES, "execute", path.string(), "not an executable file");
    if (static_cast<std::size_t>(st.st_size) > kMaxProgram)
        throw util::Error(util::ErrorKind::Invalid, EFBIG, "execute", path.string(),
                          "larger than 64 MiB");
    const std::string bytes = util::read_fd(src.get(), kMaxProgram, path.string());

    util::Fd mem(::memfd_create(path.filename().c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!mem) util::throw_errno("memfd_create", path.string());
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::write(mem.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) util::throw_errno("copy into memfd", path.string());
        done += static_cast<std::size_t>(n);
    }
    // Executable by the ids the sandbox may switch to (Options::uid); it is
    // reachable only through this process's descriptors anyway.
    if (::fchmod(mem.get(), 0555) != 0) util::throw_errno("chmod memfd", path.string());
    if (::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
        0)
        util::throw_errno("seal memfd", path.string());
    // A read-only descriptor of it: execve refuses a file open for writing (ETXTBSY).
    const std::string self = "/proc/self/fd/" + std::to_string(mem.get());
    util::Fd ro(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ro) util::throw_errno("reopen memfd", path.string());
    return ro;
}

std::string run(int exe_fd, const std::string& what, const std::vector<std::string>& args,
                const Options& options) {
    check_options(options, what);
    std::vector<std::string> argv_s;
    argv_s.push_back(std::filesystem::path(what).filename().string());
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string root = options.root.string();

    util::Fd proc_own;
    int proc_fd = options.proc_fd;
    if (proc_fd < 0) {
        proc_own = util::Fd(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!proc_own) util::throw_errno("open /proc", what);
        proc_fd = proc_own.get();
    }
    util::Fd scratch;
    if (!options.scratch.empty()) scratch = make_scratch(options, what);
    FilterPtr filter = make_filter(options.filter, exe_fd, what);
    CapPtr no_caps(cap_init());
    if (!no_caps) util::throw_errno("cap_init", what);

    auto [err_r, err_w] = make_pipe(what);
    auto [out_r, out_w] = make_pipe(what);
    // stdin: a pipe with no writer (end of input at once; the container's
    // namespace may have no /dev/null to open).
    auto [null_fd, null_w] = make_pipe(what);
    null_w.reset();
    auto [ready_r, ready_w] = make_pipe(what);
    auto [go_r, go_w] = make_pipe(what);

    const ChildArgs child_args{exe_fd,
                               err_w.get(),
                               out_w.get(),
                               null_fd.get(),
                               ready_w.get(),
                               go_r.get(),
                               scratch ? scratch.get() : -1,
                               root.c_str(),
                               options.scratch.c_str(),
                               argv.data(),
                               &options.limits,
                               no_caps.get(),
                               filter.get(),
                               setgroups_denied(proc_fd)};
    const pid_t pid = start_child(child_args, what);
    err_w.reset();
    out_w.reset();
    null_fd.reset();
    ready_w.reset();
    go_r.reset();

    const util::Fd child = open_pidfd(pid, what);
    map_child(ready_r.get(), go_w.get(), proc_fd, pid, options, what);
    go_w.reset();
    check_outcome(err_r.get(), wait_child(child, out_r.get(), pid, options, what), what);
    if (options.output.empty()) return {};
    return read_result(scratch.get(), options.output, what);
}

}  // namespace gpubind::os::sandbox

namespace gpubind::os::mount_api {

util::Fd make_tmpfs(std::initializer_list<std::pair<const char*, std::string>> options,
                    const std::string& what) {
    util::Fd fs(static_cast<int>(::syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC)));
    if (!fs) util::throw_errno("fsopen tmpfs", what);
    for (const auto& [key, value] : options)
        if (::syscall(SYS_fsconfig, fs.get(), kFsconfigSetString, key, value.c_str(), 0) != 0)
            util::throw_errno(std::string("fsconfig tmpfs ") + key, what);
    if (::syscall(SYS_fsconfig, fs.get(), kFsconfigCmdCreate, nullptr, nullptr, 0) != 0)
        util::throw_errno("fsconfig tmpfs create", what);
    util::Fd mnt(
        static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC,
                                   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)));
    if (!mnt) util::throw_errno("fsmount tmpfs", what);
    return mnt;
}

}  // namespace gpubind::os::mount_api
