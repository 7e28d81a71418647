// gpubind-runtime's part in the library: turning a plan into an edit of the
// container's OCI spec, so that the real runtime (runc, crun) creates the
// device nodes, grants them in the device cgroup and does the bind mounts
// itself. What only a hook can do (soname links, the /proc/driver/nvidia
// view, the loader-cache refresh) is left to gpubind-hook, registered by the
// edit in its "finish" mode.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubind/plan.hpp"

namespace gpubind::runtime {

// The annotation marking a spec gpubind-runtime edited. gpubind-hook seeing
// it in a prestart/createRuntime/createContainer stage leaves the container
// to the finish hook: nothing is injected twice.
inline constexpr std::string_view kMarkAnnotation = "gpubind.injected";
inline constexpr std::string_view kMarkValue = "runtime";
// The stage argument of the hook the edit registers (as createRuntime).
inline constexpr std::string_view kFinishStage = "finish";

// The hook the edit registers: gpubind-hook's path and its environment.
struct FinishHook {
    std::filesystem::path path;
    std::vector<std::string> env;  // "KEY=VALUE"
};

// A planned mount's OCI options: "rbind", then "ro", "nosuid", "nodev",
// "noexec" as its flags say (the CDI spec's mounts use them too).
std::vector<std::string> mount_options(unsigned flags);

// Whether the spec carries the mark.
bool marked(const nlohmann::json& spec);

// The spec with `plan` in it, every other field kept as it was:
//  - linux.devices: {path, type "c", major, minor, fileMode, uid 0, gid 0} for
//    each planned device that is bound (an entry at the same path with the same
//    numbers is kept, with other numbers it is an Error naming it);
//  - linux.resources.devices: {allow true, type "c", major, minor, access "rw"}
//    for each planned device (bound or not), one per major:minor;
//  - mounts: {destination, type "bind", source, options: "rbind", then "ro",
//    "nosuid", "nodev", "noexec" as the plan's flags say}, appended for the
//    planned mounts runtime_mounts() gives the runtime (the finish hook makes
//    the others); a mount already at a planned mount's destination is an
//    Error naming it;
//  - hooks.createRuntime: `hook` with args [gpubind-hook, "finish"], appended;
//  - annotations[kMarkAnnotation] = kMarkValue.
// A spec that already carries the mark, or a non-object, is an Error (EINVAL).
nlohmann::json edit_spec(const nlohmann::json& spec, const Plan& plan, const FinishHook& hook);

// Whether the runtime, rather than the finish hook, makes the planned mount
// `m` in a container whose spec is `spec`: where a mount of the spec is at its
// target or in a directory above it (a volume such as containerd's /run
// tmpfs: a hook mounts only on the rootfs's own mount), or below a planned
// directory (the planned mount would hide it). The finish hook makes the
// others itself: runc 1.1 takes ~65 us a bind mount, the hook ~10 us.
bool runtime_mounts(const PlannedMount& m, const nlohmann::json& spec);

// What the finish hook still does once the runtime did its part: the plan
// without devices and mounts (symlinks, the proc view, the loader cache).
Plan finish_plan(Plan plan);
// The same in a spec gpubind-runtime edited (`spec`): the planned mounts the
// runtime does not make (runtime_mounts) stay in it.
Plan finish_plan(Plan plan, const nlohmann::json& spec);

}  // namespace gpubind::runtime
