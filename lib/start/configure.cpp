#include "gpubind/start/configure.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "gpubind/os/system.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/id_map.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::start {

namespace {

bool in_initial_user_ns() {
    return util::is_initial_id_map(util::read_file("/proc/self/uid_map", 64 * 1024),
                                   "/proc/self/uid_map");
}

// Whether process `pid` is in this process's mount namespace.
bool shares_mount_ns(pid_t pid) {
    const std::string theirs = "/proc/" + std::to_string(pid) + "/ns/mnt";
    struct stat own {
    }, other{};
    if (::stat("/proc/self/ns/mnt", &own) != 0) util::throw_errno("stat", "/proc/self/ns/mnt");
    if (::stat(theirs.c_str(), &other) != 0) {
        if (errno == ENOENT)
            throw util::Error(util::ErrorKind::Invalid, ESRCH, "configure",
                              "pid " + std::to_string(pid), "no such process");
        util::throw_errno("stat", theirs);
    }
    return own.st_dev == other.st_dev && own.st_ino == other.st_ino;
}

}  // namespace

void configure(const config::Config& config, const ConfigureCall& call) {
    const std::filesystem::path rootfs = std::filesystem::path(call.rootfs).lexically_normal();
    if (!rootfs.is_absolute() || rootfs.relative_path().empty())
        util::throw_invalid(
            "configure", call.rootfs,
            "the container's root filesystem must be an absolute path other than /");
    const bool privileged = ::geteuid() == 0 && in_initial_user_ns();
    const bool cgroups = !call.no_cgroups && config.policy.cgroups;
    if (cgroups && !privileged)
        throw util::Error(util::ErrorKind::Refused, EPERM, "configure", call.rootfs,
                          "device cgroups cannot be changed without privileges over the host; "
                          "give --no-cgroups (the container stays in the caller's device cgroup)");
    // Without a pid the parent's namespace: the caller's hook runs in the
    // container's, and it acts in place. A pid in this process's namespace
    // is refused (the executor).
    const pid_t pid = call.pid ? *call.pid : ::getppid();
    const bool in_place = shares_mount_ns(pid) && !call.pid;
    Start start{.config = config,
                .sys = call.sys,
                .rootfs = rootfs,
                .pid = pid,
                .target = {.rootless = !in_place && !privileged,
                           .in_place = in_place,
                           .cgroups = cgroups,
                           .bind_devices = !call.no_devbind,
                           .ldconfig = call.ldconfig},
                .store = call.store,
                .leave_out = call.leave_out};
    if (in_place) util::logger().debug("in this process's mount namespace");
    run(start, call.request, Act::Execute);
}

}  // namespace gpubind::start
