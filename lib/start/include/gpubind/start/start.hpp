// One container start, the same for every way in: gpubind-hook's stages
// (prestart or createRuntime, the finish hook of an edited spec, the CDI
// stage), gpubind-runtime's create, `gpubind configure` and `gpubind-nvc
// configure`. Each makes one Start and calls run(): know the node (keeping
// its CDI specs current), decide, make the target, act. Above decide/, exec/
// and cdi/: deciding one container never rewrites the node's specs by itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/inject.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::start {

// A start's whole run, shorter than a runtime's patience (containerd and
// CRI-O give a container start minutes): checked between steps, bounding
// stdin and ldconfig.
inline constexpr std::chrono::milliseconds kBudget{45000};

// What the way in knows of its caller and the container, beyond the config.
struct TargetOptions {
    // No privilege over the host (a rootless runtime's hook, an unprivileged
    // gpubind-nvc): join the container's user namespace first.
    bool rootless = false;
    // This process is in the container's mount namespace already (the
    // callers of nvidia-container-cli without --pid).
    bool in_place = false;
    // Grant the devices in the device cgroup (and config.policy.cgroups).
    bool cgroups = true;
    // Make the device nodes; false: device cgroup access only (--no-devbind).
    bool bind_devices = true;
    // The host's ldconfig, where the caller names another than config.ldconfig.
    std::filesystem::path ldconfig{};
    // Where the spec has the runtime mount a new tmpfs (oci::Spec::fresh_tmpfs).
    std::vector<std::string> fresh_tmpfs{};
};

// What the way in does with its decision.
enum class Act {
    Execute,       // the whole plan in the container (the hook, configure)
    FinishEdited,  // the plan less its devices, which the runtime made (finish hook)
    FinishCdi,     // less the CDI spec's devices and mounts, which the engine made (cdi stage)
    Decide,        // nothing carried out: the shim edits the spec with the decision
};

// One container start, made once per process by its way in.
struct Start {
    const config::Config& config;
    // What the image is read and every change made through: the tests'
    // recording System; none, this host's (LinuxSystem, one per run, made
    // only for a GPU container: it opens /proc).
    os::System* sys = nullptr;
    std::filesystem::path rootfs{};  // absolute, as the container's mount namespace sees it
    pid_t pid = 0;                   // its init process (none for Act::Decide)
    // The runtime's id of the container (the hook's): what a GPU share's
    // limits are recorded under for their undoing at poststop; empty: none.
    std::string container_id{};
    os::harden::Deadline deadline{kBudget};
    TargetOptions target{};
    // What is learned of the node is stored (false: gpubind doctor, which
    // only reads, or a driver root other than the node's).
    bool store = true;
    // The node, where this process knew it already (know_node); asked again
    // when the request needs NVML's facts and NVML was not asked.
    std::optional<node::NodeKnowledge> known{};
    // What the way in leaves out of the plan once the node is known
    // (gpubind-nvc's --no-persistenced and the like); may be empty.
    std::function<void(decide::Plan&, const node::Node&)> leave_out{};
    // Why, in the log, where the way in says it better than the request
    // (the CDI stage: the devices found in the spec); empty: the decision's.
    std::string reason{};
    // Set by run(): when the decision was made (the debug timings).
    std::chrono::steady_clock::time_point decided{};
};

// The one path of every start: for a GPU container, knows the node
// (node_needs), decides (decide_on: the image read through start.sys), keeps
// of the plan what `act` leaves to gpubind, and carries it out in the
// container (pid, rootfs, the target options, the config's policy) unless
// `act` is Decide; the decision is logged (info) before. Returns the decision, its plan as carried
// out. A request that is no GPU container's is left alone (nothing known, nothing done). Throws
// Error on a bad or refused request, or a failed step.
decide::Decision run(Start& start, decide::Request request, Act act);

// The node as load_node() knows it. When what is stored changed (the driver
// state changed, or NVML was asked for the first time in this state), the
// node's CDI specs are refreshed too, so every path that learns something
// keeps them current (a failure there is a warning). Every caller that needs
// the node goes through here. On a MIG node a spec written without NVML's
// answer has no MIG UUID names until NVML is asked (gpubind cdi refresh, a
// request that needs NVML's facts): a start never waits for NVML for the spec.
node::NodeKnowledge know_node(const config::Config& config, const node::LoadOptions& options);

// The decision for the container `spec` describes, nothing carried out
// (gpubind plan, gpubind doctor): run() with Act::Decide on this host's
// System. `store` false: nothing is written (no node description, no CDI spec).
decide::Decision decide(const decide::oci::Spec& spec, const config::Config& config,
                        bool store = true);

// The request of the CDI stage (gpubind-hook's createRuntime hook in the
// node's CDI spec): the GPUs, MIG devices and IMEX channels of the node whose
// nodes the engine put in the spec's linux.devices (cdi::selection_in_spec),
// with config.cdi.caps. Not a GPU container's when the spec holds none.
// `reason` gets what was found, for the log.
decide::Request cdi_stage_request(const node::Node& node, const decide::oci::Spec& spec,
                                  const config::Config& config, std::string& reason);

}  // namespace gpubind::start
