// Running a host program against a hostile tree: the loader-cache refresh
// (the host's ldconfig over a container's rootfs) and nothing else.
//
// The program is copied into a sealed memfd on the host side, so what runs is
// what was opened, whatever the container's mount namespace holds. The child
// gets new mount, pid, ipc, net and uts namespaces, is pivoted into the root
// (a recursive bind of it; the old root is detached), loses every capability
// (bounding set included; securebits keep uid 0 from regaining them on exec),
// gets resource limits and no_new_privs, a seccomp allow-list, an empty
// environment, runs as uid 0 or the ids Options names, and is killed at the
// deadline.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/fd.hpp"

namespace gpubind::sandbox {

// The program at `path` (a regular, executable file) copied into a memfd
// sealed against writing, shrinking and growing. Throws Error.
Fd seal_executable(const std::filesystem::path& path);

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
    // The ids it runs as: 0:0 (root without capabilities), or the ids a user
    // namespace maps the container's root to, so that what it writes in a
    // rootfs that ids owns is allowed and shows as the container root's.
    // Other than 0:0, supplementary groups are dropped too.
    unsigned uid = 0;
    unsigned gid = 0;
};

// Runs the program `exe_fd` (from seal_executable, or any descriptor execveat
// accepts with AT_EMPTY_PATH) as `what` with `args` (argv[1..]) confined as
// described above, with an empty environment. Errors of the set-up come back
// from the child as text. Non-zero exit, a signal, a set-up failure or the
// deadline (the child is killed) is an Error; its message ends with the last
// lines the program wrote.
void run(int exe_fd, const std::string& what, const std::vector<std::string>& args,
         const Options& options);

}  // namespace gpubind::sandbox
