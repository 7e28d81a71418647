// A container's GPU share enforced by the driver's per-cgroup memory limit
// (issue 48): at the hook's start (createRuntime, prestart: the container's
// process is in its cgroup), the container's actual cgroup is read from its
// /proc/<pid>/cgroup, each of its GPUs' limit set there through NVML (the
// gpubind-nvml helper) and read back; what was set is recorded under the
// state directory (shares/<container id>) and cleared at poststop. A start
// that asks for no share does none of this.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/node/memory_limits.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::start {

// The host directory of the cgroup v2 cgroup of a process whose
// /proc/<pid>/cgroup is `proc_cgroup`, under a reachable cgroup2 mount of
// `mountinfo` that holds it (systemd's, cgroupfs', a rootless engine's and a
// nested runtime's paths alike). The driver's limit is cgroup v2's only: a
// process in cgroup v1 hierarchies only is refused (ECANCELED), as is a path
// the mounts do not reach; `who` names the container.
std::string share_cgroup_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                             const std::string& who);

// Sets `limits` on the cgroup of the container whose init is `pid` (through
// `sys`), reads them back (a difference is refused, nothing left set) and
// records them as `container_id`'s under config.state_dir (empty: not
// recorded). Returns the cgroup directory. Throws Error naming the cgroup.
std::string apply_memory_limits(const node::Node& node,
                                const std::vector<node::MemoryLimit>& limits, pid_t pid,
                                const std::string& container_id, os::System& sys,
                                const config::Config& config);

// Clears `limits` on `cgroup_dir` at once (the start failed after setting
// them) and `container_id`'s record. A failure is logged, never thrown.
void clear_memory_limits(const node::Node& node, const std::string& cgroup_dir,
                         const std::vector<node::MemoryLimit>& limits, const config::Config& config,
                         const std::string& container_id);

// Clears what apply_memory_limits recorded for `container_id` (poststop), and
// the record; nothing when there is none. A failure is logged, never thrown.
void undo_memory_limits(const config::Config& config, const std::string& container_id);

}  // namespace gpubind::start
