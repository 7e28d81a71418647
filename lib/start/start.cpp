#include "gpubind/start/start.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/start/share_limit.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/id_map.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::start {

namespace {

// Whether this process is root on the host: NVML sets the driver's
// per-cgroup limit for root only, which a rootless engine's hook (its user,
// or root of a user namespace) is not.
bool host_root() {
    if (::geteuid() != 0) return false;
    try {
        return util::is_initial_id_map(util::read_file("/proc/self/uid_map", 64u << 10),
                                       "/proc/self/uid_map");
    } catch (const util::Error&) {
        return false;
    }
}

// Whether the share's limit may be set here: as host root, yes; else refused
// in one line, or, with [policy] shares = "soft", started unenforced.
bool may_set_memory_limits(const decide::ShareRequest& share, const config::Config& config) {
    if (host_root()) return true;
    const std::string why = fmt::format(
        "the driver's per-cgroup memory limit is set by root on the host, and this start runs "
        "as uid {}{} (a rootless engine)",
        ::geteuid(), ::geteuid() == 0 ? " of a user namespace" : "");
    if (config.policy.shares == config::SharesPolicy::Soft) {
        util::logger().warn("{}: the share is not enforced: {}; starting it anyway (shares = soft)",
                            share.asked_by, why);
        return false;
    }
    util::throw_refused("set GPU memory limit", share.asked_by,
                        why + "; [policy] shares = soft starts it unenforced");
}

}  // namespace

node::NodeKnowledge know_node(const config::Config& config, const node::LoadOptions& options) {
    node::NodeKnowledge known = node::load_node(config, options);
    if (known.stored && (known.recomputed || known.nvml_asked))
        cdi::refresh_quietly(known.node, config);
    return known;
}

namespace {

// The plan of `act` (what the runtime or the engine made already left out).
decide::Plan kept(decide::Plan plan, Act act) {
    switch (act) {
        case Act::FinishEdited:
            return cdi::edited_finish_plan(std::move(plan));
        case Act::FinishCdi:
            return cdi::finish_plan(std::move(plan));
        case Act::Execute:
        case Act::Decide:
            break;
    }
    return plan;
}

exec::Target make_target(const Start& start) {
    const TargetOptions& o = start.target;
    exec::Target target = gpubind::exec::make_target(start.config, start.pid, start.rootfs);
    target.cgroups = target.cgroups && o.cgroups;
    target.join_user_ns = o.rootless;
    target.in_place = o.in_place;
    target.fresh_tmpfs = o.fresh_tmpfs;
    if (!o.ldconfig.empty()) target.ldconfig = o.ldconfig;
    target.ldconfig_timeout = std::min(target.ldconfig_timeout, start.deadline.left());
    return target;
}

}  // namespace

decide::Decision run(Start& start, decide::Request request, Act act) {
    if (!request.gpu_container()) return decide::leave_alone(std::move(request));
    const node::LoadOptions options = decide::node_needs(request, start.store);
    if (!start.known ||
        (options.need_nvml && start.known->nvml.status == node::NvmlStatus::NotAsked))
        start.known = know_node(start.config, options);
    start.deadline.check("decide");
    std::optional<os::LinuxSystem> own;  // the decision reads the image through it, then acts
    os::System& sys = start.sys ? *start.sys : own.emplace();
    decide::Decision d = decide::decide_on(std::move(request), sys, start.rootfs, start.config,
                                           std::move(*start.known));
    start.known.reset();
    if (start.leave_out) start.leave_out(d.plan, *d.node);
    if (!start.target.bind_devices)
        for (auto& dev : d.plan.devices) dev.bind = false;
    d.plan = kept(std::move(d.plan), act);
    if (!start.reason.empty()) d.reason = start.reason;
    start.decided = std::chrono::steady_clock::now();
    if (act == Act::Decide) return d;
    util::logger().info("{}: {} devices, {} mounts, {} links", d.reason, d.plan.devices.size(),
                        d.plan.mounts.size(), d.plan.symlinks.size());
    if (start.target.rootless)
        util::logger().debug("rootless: joining the container's user namespace");
    start.deadline.check("configure the container");
    // An MPS share's variables go into the spec through gpubind-runtime; a
    // hook alone (or the CDI stage) runs once the process's environment is made.
    if ((act == Act::Execute || act == Act::FinishCdi) && !d.plan.env.empty())
        util::logger().warn(
            "{}: the container's own share is not in its environment (only gpubind-runtime "
            "sets CUDA_MPS_* there): the GPU's MPS ceiling alone holds",
            d.request.share.asked_by);
    // A memory share on a node whose driver limits cgroups: set before the
    // container is changed, cleared if that fails. Nothing for any other start.
    std::vector<node::MemoryLimit> limits;
    std::string cgroup_dir;
    if (d.request.share.asked() && d.node->memory_limits && start.pid > 0 &&
        may_set_memory_limits(d.request.share, start.config)) {
        limits =
            decide::share_limits(d.request.share, node::select_devices(*d.node, d.request.devices));
        cgroup_dir =
            apply_memory_limits(*d.node, limits, start.pid, start.container_id, sys, start.config);
    }
    try {
        execute(d.plan, make_target(start), sys);
    } catch (...) {
        if (!cgroup_dir.empty())
            clear_memory_limits(*d.node, cgroup_dir, limits, start.config, start.container_id);
        throw;
    }
    return d;
}

decide::Decision decide(const decide::oci::Spec& spec, const config::Config& config, bool store) {
    Start start{.config = config, .rootfs = spec.rootfs, .store = store};
    return run(start, decide::read_request(spec, config.policy, config.families), Act::Decide);
}

decide::Request cdi_stage_request(const node::Node& node, const decide::oci::Spec& spec,
                                  const config::Config& config, std::string& reason) {
    const cdi::SpecSelection found = cdi::selection_in_spec(node, *spec.doc);
    decide::Request request;
    if (found.selection.empty() && found.imex_channels.empty()) {
        reason = "CDI: the spec holds none of the node's GPU or IMEX channel nodes";
        return request;
    }
    // By position (select_devices' "N" and "G:M"): the same devices, in the
    // node's order, whatever NVML knew of their UUIDs.
    std::vector<std::string> ids;
    for (const node::Gpu* gpu : found.selection.gpus)
        ids.push_back(std::to_string(gpu - node.gpus.data()));
    for (const node::MigDevice* mig : found.selection.migs) {
        const node::Gpu& parent = node.gpus[mig->gpu_index];
        ids.push_back(fmt::format("{}:{}", mig->gpu_index, mig - parent.mig.data()));
    }
    request.source = decide::RequestSource::Explicit;
    request.caps = config.cdi.caps;
    request.imex_channels = found.imex_channels;
    // A GPU share asked with the CDI devices holds as at any other start.
    request.share = decide::read_container_share(spec, config.policy, spec.bundle.string(),
                                                 (spec.bundle / "config.json").string());
    request.devices = {ids.empty() ? node::DeviceIdsKind::None : node::DeviceIdsKind::List,
                       std::move(ids)};
    std::string names;
    for (const auto& n : found.names) names += (names.empty() ? "" : ", ") + n;
    reason = fmt::format("CDI devices in the spec: {}; capabilities {}", names,
                         config::capability_names(config.cdi.caps));
    return request;
}

}  // namespace gpubind::start
