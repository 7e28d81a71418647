#include "gpubind/decide/inject.hpp"

#include "gpubind/decide/image.hpp"
#include "gpubind/decide/mps.hpp"
#include "gpubind/decide/placement_check.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::decide {

namespace {

std::string ids_text(const node::DeviceIds& ids) {
    switch (ids.kind) {
        case node::DeviceIdsKind::Void:
            return "void";
        case node::DeviceIdsKind::None:
            return "none";
        case node::DeviceIdsKind::All:
            return "all";
        case node::DeviceIdsKind::List:
            break;
    }
    std::string out;
    for (const auto& id : ids.ids) out += (out.empty() ? "" : ",") + id;
    return out;
}

}  // namespace

std::string describe_request(const Request& request) {
    const std::string devices = ids_text(request.devices);
    const std::string caps = config::capability_names(request.caps);
    switch (request.source) {
        case RequestSource::None:
            return "not a GPU container";
        case RequestSource::Env:
            return "NVIDIA_VISIBLE_DEVICES=" + devices + ", capabilities " + caps;
        case RequestSource::VolumeMounts:
            return "volume mounts under /var/run/nvidia-container-devices: " + devices +
                   ", capabilities " + caps;
        case RequestSource::LegacyCuda:
            return "legacy CUDA image (CUDA_VERSION set): all GPUs, capabilities " + caps;
        case RequestSource::Explicit:
            return "devices " + devices + ", capabilities " + caps;
    }
    return {};
}

Decision leave_alone(Request request) {
    Decision d;
    d.request = std::move(request);
    d.reason = describe_request(d.request);
    return d;
}

node::LoadOptions node_needs(const Request& request, bool store) {
    node::LoadOptions options;
    // A declared placement needs the NVLink facts, a share each GPU's memory: NVML gives both.
    options.need_nvml = needs_nvml_facts(request) || request.placement != PlacementNeed::None ||
                        request.share.asked();
    options.write = store;
    return options;
}

Decision decide_on(Request request, os::SystemFiles& sys, const std::filesystem::path& rootfs,
                   const config::Config& config, node::NodeKnowledge known) {
    Decision d = leave_alone(std::move(request));
    if (!d.request.gpu_container()) return d;
    d.node = std::make_unique<node::Node>(std::move(known.node));
    const node::Selection selection = node::select_devices(*d.node, d.request.devices);
    check_requirements(d.request, *d.node, selection);
    check_placement(d.request, *d.node, selection, config);
    check_share(d.request.share, *d.node, selection, config);
    // A failure reading the image names the step: the container's rootfs.
    Image image;
    try {
        image = inspect_image(sys, rootfs);
    } catch (const util::Error& e) {
        throw util::Error(e.kind(), e.code().value(), "read the image", rootfs.string(), e.what());
    }
    d.plan = make_plan(d.request, *d.node, selection, image, config, known.proc);
    // An MPS share: the GPU's daemon, as its files say (no process is asked).
    if (d.request.share.asked() && share_enforcement(*d.node).by == kMps &&
        selection.migs.empty()) {
        const std::string uuid =
            selection.gpus.size() == 1 ? selection.gpus.front()->uuid : std::string();
        const MpsDaemon daemon =
            uuid.empty() ? MpsDaemon{} : read_mps_daemon(config.mps.root, uuid);
        add_mps(d.plan, plan_mps(d.request.share, selection, daemon));
    }
    util::logger().debug("plan: {} devices, {} mounts, {} links", d.plan.devices.size(),
                         d.plan.mounts.size(), d.plan.symlinks.size());
    return d;
}

}  // namespace gpubind::decide
