// gpubind-runtime's part in the library: turning a plan into an edit of the
// container's OCI spec, so that the real runtime (runc, crun) creates the
// device nodes and grants them in the device cgroup itself (a systemd reload
// keeps them). The rest (the driver files' mounts, soname links, the
// /proc/driver/nvidia view, the loader-cache refresh) is gpubind-hook's,
// registered by the edit in its "finish" mode: it resolves every target by
// descriptor inside the rootfs, which a runtime given a bind mount does not.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/plan.hpp"

namespace gpubind::cdi {

// The stage argument of the hook the edit registers (as createRuntime): its
// args are ["gpubind-hook", kFinishStage]. That entry is the mark of an
// edited spec: gpubind-hook registered at another stage as well leaves such
// a container to it, and nothing is injected twice. Nothing is added to the
// annotations, which the container's owner sees in its state.
inline constexpr std::string_view kFinishStage = "finish";

// The hook the edit registers: gpubind-hook's path and its environment.
struct FinishHook {
    std::filesystem::path path;
    std::vector<std::string> env;  // "KEY=VALUE"
    // Also at poststop (a GPU share: it clears the limit the start sets).
    bool poststop = false;
};

// A planned mount's OCI options: "rbind", then "ro", "nosuid", "nodev",
// "noexec" as its flags say (the CDI spec's mounts use them too).
std::vector<std::string> mount_options(unsigned flags);

// Whether the spec carries the mark (the finish hook in hooks.createRuntime).
bool marked(const nlohmann::json& spec);

// `spec` (whose parsed facts are `facts`) with `plan` in it, every other
// field kept as it was:
//  - linux.devices: {path, type "c", major, minor, fileMode, uid 0, gid 0} for
//    each planned device that is bound (an entry at the same path with the same
//    numbers is kept, with other numbers it is an Error naming it); in a
//    spec with a user namespace, where runc binds the host's file at the
//    device's path instead of making a node, a device whose node is elsewhere
//    on the host (a dev root not "/") is a bind mount from it in `mounts`;
//  - linux.resources.devices: {allow true, type "c", major, minor, access "rw"}
//    for each planned device (bound or not), one per major:minor;
//  - hooks.createRuntime: `hook` with args [gpubind-hook, "finish"], appended:
//    it makes every planned mount (edited_finish_plan); with hook.poststop,
//    hooks.poststop: `hook` with args [gpubind-hook, "poststop"], appended;
// Refused before anything is done, as the finish hook would refuse it later:
// a spec without a mount namespace (Error EPERM); a planned mount target the
// spec mounts something at (EEXIST), or that lies in a mount of the spec other
// than a fresh tmpfs (oci::Spec::fresh_tmpfs: a volume, EXDEV); a shared
// rootfs propagation (EXDEV). A spec that already carries the mark, or a
// non-object, is an Error (EINVAL).
nlohmann::json edit_spec(nlohmann::json spec, const decide::oci::Spec& facts,
                         const decide::Plan& plan, const FinishHook& hook);

// What the hook of a CDI spec still does once the engine made the spec's
// devices and mounts: the plan without them (links, the proc view, the
// loader cache).
decide::Plan finish_plan(decide::Plan plan);
// What the finish hook of an edited spec does: the plan without its devices,
// which the runtime created.
decide::Plan edited_finish_plan(decide::Plan plan);

}  // namespace gpubind::cdi
