// Locating a process's device cgroup (a v1 devices directory or its cgroup v2
// directory) from its /proc/<pid>/cgroup and mountinfo; reading devices.list.
// Pure text parsing (cgroup.cpp): the reads are the caller's.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace gpubind::os::cgroup {

// The host directory of a process's cgroup v1 `devices` controller, from its
// /proc/<pid>/cgroup and the host's /proc/self/mountinfo (only mounts that are
// reachable, not hidden under a later mount). None mounted is an Error.
std::filesystem::path devices_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                                  const std::string& what);
// The host directory of a process's cgroup v2 cgroup (its "0::" line), under
// a reachable cgroup2 mount whose root holds it. None is an Error.
std::filesystem::path unified_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                                  const std::string& what);

// Where a process's device access is decided: a v1 devices hierarchy when one
// holding its cgroup is mounted (v1 or hybrid hosts), else its cgroup2 directory.
struct DeviceCgroup {
    enum class Kind { V1, V2 };
    Kind kind = Kind::V1;
    std::filesystem::path dir;
    bool operator==(const DeviceCgroup&) const = default;
};
DeviceCgroup locate(std::string_view proc_cgroup, std::string_view mountinfo,
                    const std::string& what);
// Whether a devices.list grants read and write on the char device major:minor.
bool allows(std::string_view devices_list, unsigned major, unsigned minor);

}  // namespace gpubind::os::cgroup
