#include "gpubind/inject.hpp"

#include <optional>

#include "gpubind/cdi.hpp"
#include "gpubind/description.hpp"
#include "gpubind/devices.hpp"
#include "gpubind/log.hpp"

namespace gpubind {

namespace {

std::string ids_text(const DeviceIds& ids) {
    switch (ids.kind) {
        case DeviceIdsKind::Void: return "void";
        case DeviceIdsKind::None: return "none";
        case DeviceIdsKind::All: return "all";
        case DeviceIdsKind::List: break;
    }
    std::string out;
    for (const auto& id : ids.ids) out += (out.empty() ? "" : ",") + id;
    return out;
}

}  // namespace

std::string describe_request(const Request& request) {
    const std::string devices = ids_text(request.devices);
    const std::string caps = capability_names(request.caps);
    switch (request.source) {
        case RequestSource::None: return "not a GPU container";
        case RequestSource::Env: return "NVIDIA_VISIBLE_DEVICES=" + devices + ", capabilities " + caps;
        case RequestSource::VolumeMounts:
            return "volume mounts under /var/run/nvidia-container-devices: " + devices +
                   ", capabilities " + caps;
        case RequestSource::LegacyCuda:
            return "legacy CUDA image (CUDA_VERSION set): all GPUs, capabilities " + caps;
        case RequestSource::Explicit: return "devices " + devices + ", capabilities " + caps;
    }
    return {};
}

NodeKnowledge know_node(const Config& config, const LoadOptions& options) {
    NodeKnowledge known = load_node(config, options);
    if (known.stored && (known.recomputed || known.nvml_asked))
        cdi::refresh_quietly(known.node, config);
    return known;
}

namespace {

// decide() with, where given, a node this process loaded already.
Decision decide_with(Request request, const std::filesystem::path& rootfs, const Config& config,
                     bool store, std::optional<NodeKnowledge> known) {
    Decision d;
    d.request = std::move(request);
    d.reason = describe_request(d.request);
    if (!d.request.gpu_container()) return d;

    LoadOptions options;
    options.need_nvml = needs_nvml_facts(d.request);
    options.write = store;
    if (!known || (options.need_nvml && known->nvml.status == NvmlStatus::NotAsked))
        known = know_node(config, options);
    d.node = std::make_unique<Node>(std::move(known->node));
    const Selection selection = select_devices(*d.node, d.request.devices);
    check_requirements(d.request, *d.node, selection);
    const Image image = inspect_image(rootfs);
    d.plan = make_plan(d.request, *d.node, selection, image, config, known->proc);
    logger().debug("plan: {} devices, {} mounts, {} links", d.plan.devices.size(),
                   d.plan.mounts.size(), d.plan.symlinks.size());
    return d;
}

}  // namespace

Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                bool store) {
    return decide_with(std::move(request), rootfs, config, store, std::nullopt);
}

Decision decide(const oci::Spec& spec, const Config& config, bool store) {
    return decide_with(read_request(spec, config.policy), spec.rootfs, config, store, std::nullopt);
}

Decision decide(const oci::Spec& spec, const Config& config, NodeKnowledge known) {
    return decide_with(read_request(spec, config.policy), spec.rootfs, config, true,
                       std::move(known));
}

}  // namespace gpubind
