// The executor: carries out a Plan inside a running container's mount
// namespace, all or nothing. Every step goes through `System` (system.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/decide/plan.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::exec {

// The container to act on.
struct Target {
    pid_t pid = 0;                 // its init process (the OCI state's pid)
    std::filesystem::path rootfs;  // absolute, as seen in the container's mount namespace
    bool cgroups = true;           // grant the devices in the container's device cgroup
    // When the kernel refuses a device cgroup step (EPERM, EACCES, EROFS, ENOSYS):
    // fail, or go on without the rule and log a warning.
    config::OnRefused on_refused = config::OnRefused::Fail;
    // cgroup v2: where the device programs made are kept for reuse (a
    // directory on bpffs, root's: [node] bpf-dir); empty: each start loads its own.
    std::string bpf_dir;
    // Rootless (a caller without privileges over the host, the hook of a
    // rootless runtime): join the container's user namespace first, open the
    // host's files in its mount namespace (before its pivot_root they are
    // there), and stay in both afterwards (no way back out; the hook exits).
    bool join_user_ns = false;
    // In place: this process is in the container's mount namespace already
    // (nvidia-container-cli's callers, enroot's and Apptainer's hooks, run it
    // there with the pid of their own process). No namespace is entered or
    // left; what is created there is this process's, as with join_user_ns.
    // Refused unless the pid shares this process's mount namespace, and in
    // the host's initial one (pid 1's, seen from the initial user namespace).
    bool in_place = false;
    // Where the spec has the runtime mount a new tmpfs (oci::Spec::fresh_tmpfs).
    // What is there when the executor enters is taken as the container's own
    // mount, as the root's, only if it is a tmpfs that no mount of this
    // process's (the runtime's) mount namespace shows: memory of the
    // container's alone, not a host tmpfs (/dev/shm, a secret, an emptyDir)
    // a volume or an image's link brought there. Beside these, only the
    // runtime's /dev and /proc.
    std::vector<std::string> fresh_tmpfs;
    // How plan.refresh_ldcache is done: gpubind writes /etc/ld.so.cache itself,
    // or runs the host's ldconfig (sandboxed). The plan's ldcache_scan (an image
    // without a cache whose ld.so.conf names directories) always takes ldconfig.
    config::LdcacheMethod ldcache = config::LdcacheMethod::Gpubind;
    std::filesystem::path ldconfig = "/sbin/ldconfig";  // the host's, for the ldconfig method
    std::chrono::milliseconds ldconfig_timeout{30000};
};

// The target `config` describes for the container whose init is `pid` and
// root `rootfs`: its policy's cgroups, on-refused and ldcache method, and the
// host's ldconfig. (What only the caller knows, rootless or a shorter
// deadline, it sets itself.)
Target make_target(const config::Config& config, pid_t pid, std::filesystem::path rootfs);

// Carries out `plan` in the container `target`:
//  1. host side: pins the pid (a pidfd; pid <= 1 and our own pid are refused),
//     opens its mount namespace (refused if it is ours), the cgroup files, every
//     source (a detached bind mount each, checked: devices are char devices with
//     the planned numbers) and ldconfig;
//  2. enters the container's mount namespace and opens the rootfs;
//  3. devices, mounts, symlinks, plan.files: each parent directory resolved inside the root
//     (missing ones created one component at a time relative to their parent's
//     descriptor), the mount point created or checked (a symlink, FIFO, socket,
//     device with other numbers, or a file where a directory belongs is an
//     Error naming it), flags set on the detached mount, then attached to the
//     mount point's inode;
//  4. device access: on cgroup v1, rules written to devices.allow; on cgroup
//     v2, each BPF_CGROUP_DEVICE program attached to the container's cgroup
//     is swapped atomically for one that allows the planned devices and
//     otherwise runs the runtime's instructions unchanged (loaded and checked
//     on the host side in step 1, before anything changes; none attached:
//     nothing to do). A refusal by the kernel (EPERM, EACCES, EROFS, ENOSYS)
//     fails, or with Target::on_refused Warn is logged and skipped. Then the proc view
//     tmpfs (files written through its descriptor, then made read-only and
//     attached), and when plan.refresh_ldcache the loader cache: /etc/ld.so.cache
//     and /etc/ld.so.cache~ must each be a regular file or missing, /etc a
//     directory (a FIFO, device, socket or symlink there is an Error at once,
//     nothing opened); then either gpubind's writer (the image's cache read,
//     at most ldcache::kMaxCacheSize, merged with plan.ldcache_libraries in the
//     order of plan.library_dirs, written to ld.so.cache~ and renamed over it
//     with the original's owner and mode, or as the container's root with 0644)
//     or ldconfig (Target::ldcache, or plan.ldcache_scan);
//  5. returns to this process's mount namespace and working directory.
// A container with a user namespace gets what is created in its root (parent
// directories, mount points, links) created as the host ids its root maps to
// (/proc/<pid>/uid_map, gid_map; System::set_fs_ids around each creation),
// and ldconfig runs as those ids. With Target::join_user_ns (rootless) the
// executor enters the container's user namespace before its mount namespace,
// opens the sources there, and does not return.
// On any failure everything done is undone in reverse order (mounts detached,
// created files, links and directories removed, cgroup rules denied, the
// runtime's device programs swapped back) and the
// first error is rethrown. Nothing is created or mounted outside the rootfs.
// Single-threaded callers only (setns(CLONE_NEWNS) refuses threaded processes).
void execute(const decide::Plan& plan, const Target& target, os::System& sys);
// With LinuxSystem.
void execute(const decide::Plan& plan, const Target& target);

}  // namespace gpubind::exec
