// Running a host program against a hostile tree: the loader-cache refresh
// by the host's ldconfig over a container's rootfs (the fallback of the
// in-process writer) and nothing else.
//
// The program is copied into a sealed memfd on the host side, so what runs is
// what was opened, whatever the container's mount namespace holds. The child
// gets new mount, pid, ipc, net and uts namespaces, is pivoted into the root
// (a recursive bind of it, every mount read-only, nosuid and nodev; the
// container's /proc, /sys and /dev detached; the old root detached), gets a
// private tmpfs (Options::scratch) as the one place it may write, then a user
// namespace of its own whose root is mapped to Options::uid:gid (never the
// host's root), loses every capability (bounding set included; securebits
// keep its uid 0 from regaining them on exec), gets resource limits and
// no_new_privs, a seccomp allow-list, an empty environment, and is killed at
// the deadline.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/util/fd.hpp"

namespace gpubind::os::sandbox {

// The program at `path` (a regular, executable file) copied into a memfd
// sealed against writing, shrinking and growing. Throws Error.
util::Fd seal_executable(const std::filesystem::path& path);

enum class Filter {
    Ldconfig,  // the system calls ldconfig makes on files and memory; nothing else
    None,      // no seccomp filter (tests that look inside the sandbox with a shell)
};

struct Limits {
    rlim_t cpu_seconds = 30;
    rlim_t address_space = 1ull << 30;  // bytes
    rlim_t file_size = 256ull << 20;    // bytes, of any file written
    rlim_t open_files = 256;
    rlim_t processes = 1;  // counted per real uid: with no capabilities, no forks
};

struct Options {
    // The directory (in the caller's mount namespace) that becomes "/". Required.
    std::filesystem::path root;
    std::chrono::milliseconds timeout{30000};
    Filter filter = Filter::Ldconfig;
    Limits limits;
    // The host ids the root of its user namespace is mapped to: an
    // unprivileged pair (nobody by default), or the ids a container's user
    // namespace maps its root to. Never 0:0 of the initial namespace.
    unsigned uid = 65534;
    unsigned gid = 65534;
    // An absolute directory of the root over which a fresh tmpfs, writable by
    // those ids alone, is mounted (empty: none); the root has no other
    // writable place.
    std::string scratch;
    // A file name in the scratch: its contents (a regular file) are run()'s
    // result after a successful exit (empty: nothing is read back).
    std::string output;
    // A descriptor of the procfs of this process's pid namespace, for writing
    // the child's id maps (-1: "/proc" is opened when run() starts; pass one
    // when this process's mount namespace has another procfs).
    int proc_fd = -1;
};

// Runs the program `exe_fd` (from seal_executable, or any descriptor execveat
// accepts with AT_EMPTY_PATH) as `what` with `args` (argv[1..]) confined as
// described above, with an empty environment. Errors of the set-up come back
// from the child as text. Non-zero exit, a signal, a set-up failure or the
// deadline (the child is killed) is an Error; its message ends with the last
// lines the program wrote. Returns the contents of Options::output, if any.
std::string run(int exe_fd, const std::string& what, const std::vector<std::string>& args,
                const Options& options);

}  // namespace gpubind::os::sandbox
