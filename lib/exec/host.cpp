// The executor's host side: everything checked and opened before anything in
// the container changes (exec.hpp, step 1).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "gpubind/util/error.hpp"
#include "gpubind/util/id_map.hpp"
#include "gpubind/util/log.hpp"

#include "context.hpp"
#include "device_access.hpp"

namespace gpubind::exec {

namespace {

void validate_plan(const decide::Plan& plan) {
    for (const auto& d : plan.devices) {
        check_container_path(d.node.path, "device");
        if (d.bind && !d.node.host_path.starts_with('/'))
            util::throw_invalid("execute", d.node.host_path,
                                "device source is not an absolute path");
    }
    for (const auto& m : plan.mounts) {
        check_container_path(m.target, "mount target");
        if (!m.source.starts_with('/'))
            util::throw_invalid("execute", m.source, "mount source is not an absolute path");
    }
    for (const auto& s : plan.symlinks) {
        check_container_path(s.path, "symlink");
        if (s.target.empty() || s.target.find('\0') != std::string::npos)
            util::throw_invalid("execute", s.path, "symlink has an empty target");
    }
    if (plan.proc) {
        check_container_path(plan.proc->target, "proc view");
        for (const auto& g : plan.proc->gpus) check_name(g.bus_id, "GPU directory");
        for (const auto& cap : plan.proc->capability_files) proc_relative(cap);
    }
    for (const auto& d : plan.library_dirs)
        if (d != "/") check_container_path(d, "library directory");
}

// Whether the plan creates, mounts or writes anything at or below `at`.
bool plan_reaches(const decide::Plan& plan, std::string_view at) {
    auto in = [&](std::string_view p) { return within(p, at); };
    return std::any_of(plan.mounts.begin(), plan.mounts.end(),
                       [&](const auto& m) { return in(m.target); }) ||
           std::any_of(plan.symlinks.begin(), plan.symlinks.end(),
                       [&](const auto& l) { return in(l.path); }) ||
           std::any_of(plan.files.begin(), plan.files.end(),
                       [&](const auto& f) { return in(f.path); }) ||
           std::any_of(plan.stale_files.begin(), plan.stale_files.end(),
                       [&](const auto& f) { return in(f.path); }) ||
           std::any_of(plan.owned.begin(), plan.owned.end(),
                       [&](const auto& o) { return in(o.dir); }) ||
           std::any_of(plan.library_dirs.begin(), plan.library_dirs.end(), in) ||
           (plan.refresh_ldcache && in("/etc/ld.so.cache")) || (plan.proc && in(plan.proc->target));
}

// The container's root as the host sees it: a container with a user
// namespace gets what we create owned by the ids its root maps to (an
// unmapped root leaves them the host root's, "nobody" inside).
void prepare_owner(Context& c, const std::string& who) {
    if (c.target.join_user_ns) {
        // What this process creates there is the container root's already.
        c.host.user_ns = c.processes.open_user_ns(c.host.pidfd.get(), c.target.pid);
        return;
    }
    if (c.target.in_place) return;  // the same: this process acts as the container's root
    const int pidfd = c.host.pidfd.get();
    const auto uid =
        os::map_id(c.processes.read_proc(pidfd, c.target.pid, "uid_map"), 0, who + " uid_map");
    const auto gid =
        os::map_id(c.processes.read_proc(pidfd, c.target.pid, "gid_map"), 0, who + " gid_map");
    if (!uid || !gid) {
        util::logger().warn(
            "{}: the container's root is not mapped in its user namespace; "
            "what gpubind creates stays owned by the host's root",
            who);
        return;
    }
    c.set_owner({*uid, *gid});
    if (c.chown())
        util::logger().debug("{}: user namespace, its root is {}:{} on the host", who, *uid, *gid);
}

// In place: the pid shares this process's mount namespace, and that is not
// the host's own. A process of the initial user namespace (its uid_map is the
// identity over every id) compares with pid 1's; one in another user
// namespace cannot be in the host's, or could not mount there.
void check_in_place(Context& c, bool shared, const std::string& who) {
    if (!shared)
        throw util::Error(
            EPERM, "execute", who,
            "is in another mount namespace than this process; refusing to act in place");
    bool initial = false;
    in_context("read the container's user namespace (" + who + ")", [&] {
        initial = util::is_initial_id_map(
            c.processes.read_proc(c.host.pidfd.get(), c.target.pid, "uid_map"), who + " uid_map");
    });
    if (!initial) return;
    util::Fd init_ns;
    try {
        util::Fd init = c.processes.open_process(1);
        init_ns = c.processes.open_mount_ns(init.get(), 1);
    } catch (const util::Error& e) {
        // Hidden (an LSM, an empty /proc mounted over the host's, pid 1 not
        // there): a namespace that cannot be told from the host's is taken
        // for it (issue 44, F2: the mounts went to the host's namespace).
        // Any other failure (no descriptor left, I/O) is that failure.
        const int err = e.code().value();
        if (err != EACCES && err != EPERM && err != ENOENT && err != ESRCH)
            throw util::Error(e.kind(), err, "compare mount namespaces with pid 1's", {}, e.what());
        throw util::Error(EPERM, "execute", c.target.rootfs.string(),
                          std::string("pid 1's mount namespace cannot be compared with this "
                                      "process's (") +
                              e.what() +
                              "); refusing to act in place (give the container's --pid, or make "
                              "/proc/1/ns/mnt readable)");
    }
    bool host_ns = false;
    in_context("compare mount namespaces",
               [&] { host_ns = c.processes.same_file(init_ns.get(), c.host.own_ns.get()); });
    if (host_ns)
        throw util::Error(EPERM, "execute", c.target.rootfs.string(),
                          "this process is in the host's mount namespace (pid 1's); refusing to "
                          "mount there (give the container's --pid, or run it in the container's "
                          "namespaces)");
}

// Each planned source as a detached mount, checked to be what the plan says.
void open_sources(Context& c) {
    const decide::Plan& plan = c.plan;
    Host& host = c.host;
    for (const auto& dev : plan.devices) {
        if (!dev.bind) {  // cgroup access only
            host.device_trees.emplace_back();
            continue;
        }
        in_context([&] { return "device " + dev.node.path + " (" + dev.why + ")"; },
                   [&] {
                       util::Fd tree = c.files.open_tree(dev.node.host_path);
                       os::FileInfo info = c.files.stat_fd(tree.get());
                       if (info.type != Type::CharDevice || info.major != dev.node.major ||
                           info.minor != dev.node.minor)
                           throw util::Error(
                               util::ErrorKind::Invalid, EINVAL, "bind device", dev.node.host_path,
                               "is " + describe(info) + ", not the character device " +
                                   std::to_string(dev.node.major) + ":" +
                                   std::to_string(dev.node.minor));
                       host.device_trees.push_back(std::move(tree));
                   });
    }
    for (const auto& m : plan.mounts) {
        in_context([&] { return "mount " + m.target + " (" + m.why + ")"; },
                   [&] {
                       util::Fd tree = c.files.open_tree(m.source);
                       os::FileInfo info = c.files.stat_fd(tree.get());
                       if (m.directory != (info.type == Type::Directory))
                           throw util::Error(m.directory ? ENOTDIR : EISDIR, "bind", m.source,
                                             "is " + describe(info) + ", the plan wants " +
                                                 (m.directory ? "a directory" : "a file"));
                       host.mount_trees.push_back(std::move(tree));
                   });
    }
    if (plan.proc) {
        for (const auto& cap : plan.proc->capability_files) {
            in_context([&] { return "proc view " + plan.proc->target; },
                       [&] {
                           util::Fd tree = c.files.open_tree(cap);
                           os::FileInfo info = c.files.stat_fd(tree.get());
                           if (info.type == Type::Directory)
                               throw util::Error(EISDIR, "bind", cap, "is a directory, not a file");
                           host.cap_trees.push_back(std::move(tree));
                       });
        }
    }
}

}  // namespace

void prepare_host(Context& c, DeviceAccess& devices) {
    const pid_t pid = c.target.pid;
    const std::string who = "pid " + std::to_string(pid);
    if (pid <= 1) util::throw_invalid("execute", who, "refusing to act on pid <= 1");
    if (pid == ::getpid()) util::throw_invalid("execute", who, "refusing to act on this process");
    if (!c.target.rootfs.is_absolute() || c.target.rootfs.relative_path().empty())
        util::throw_invalid("execute", c.target.rootfs.string(),
                            "the rootfs must be an absolute path other than /");
    validate_plan(c.plan);
    // What the runtime's namespace shows, to tell the container's own
    // tmpfs from a host one: opened here, before any namespace is
    // entered, and only where a fresh tmpfs would take something of the plan
    // (containerd's /run; not the /dev every spec has, which is the
    // runtime's already): ~2 us per mount of the host's.
    for (const std::string& at : c.target.fresh_tmpfs)
        if (!within(at, "/dev") && !within(at, "/proc") && plan_reaches(c.plan, at))
            c.host.fresh_candidates.push_back(at);
    if (!c.host.fresh_candidates.empty()) c.host.host_mountinfo = c.files.open_mountinfo();

    bool shared = false;
    in_context("open the container's mount namespace (" + who + ")", [&] {
        c.host.pidfd = c.processes.open_process(pid);
        c.host.container_ns = c.processes.open_mount_ns(c.host.pidfd.get(), pid);
        c.host.own_ns = c.processes.open_own_mount_ns();
    });
    in_context("read the container's user namespace (" + who + ")", [&] { prepare_owner(c, who); });
    in_context("compare mount namespaces", [&] {
        shared = c.processes.same_file(c.host.container_ns.get(), c.host.own_ns.get());
    });
    if (c.target.in_place)
        check_in_place(c, shared, who);
    else if (shared)
        throw util::Error(EPERM, "execute", who,
                          "the container shares this process's mount namespace; refusing");
    c.timing.mark("process and namespaces");
    if (c.target.cgroups && !c.plan.devices.empty())
        in_context("device cgroup", [&] { devices.prepare(c.host.pidfd.get(), pid, who); });
    c.timing.mark("device cgroup prepared");
    // Rootless: the host's files are opened where this process may clone
    // mounts, the container's namespace before its pivot_root.
    if (c.target.join_user_ns)
        in_context("enter the container's user and mount namespaces (" + who + ")",
                   [&] { c.enter(); });

    open_sources(c);
    if (c.plan.refresh_ldcache && use_ldconfig(c.plan, c.target))
        in_context("ldconfig",
                   [&] { c.host.ldconfig = c.processes.open_executable(c.target.ldconfig); });
    in_context("open this process's working directory",
               [&] { c.host.cwd = c.processes.open_cwd(); });
    c.timing.mark("driver files opened");
}

}  // namespace gpubind::exec
