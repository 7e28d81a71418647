#include "gpubind/start/start.hpp"

#include <optional>

#include "gpubind/cdi/cdi.hpp"

namespace gpubind {

NodeKnowledge know_node(const Config& config, const LoadOptions& options) {
    NodeKnowledge known = load_node(config, options);
    if (known.stored && (known.recomputed || known.nvml_asked))
        cdi::refresh_quietly(known.node, config);
    return known;
}

namespace {

// decide() with, where given, a node this process knew already, the image
// read through `sys` (LinuxSystem when none is given).
Decision decide_with(Request request, const std::filesystem::path& rootfs, const Config& config,
                     bool store, std::optional<NodeKnowledge> known, System* sys = nullptr) {
    if (!request.gpu_container()) return leave_alone(std::move(request));
    const LoadOptions options = node_needs(request, store);
    if (!known || (options.need_nvml && known->nvml.status == NvmlStatus::NotAsked))
        known = know_node(config, options);
    if (sys) return decide_on(std::move(request), *sys, rootfs, config, std::move(*known));
    LinuxSystem linux_sys;
    return decide_on(std::move(request), linux_sys, rootfs, config, std::move(*known));
}

}  // namespace

Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                bool store) {
    return decide_with(std::move(request), rootfs, config, store, std::nullopt);
}

Decision decide(const oci::Spec& spec, const Config& config, bool store) {
    return decide_with(read_request(spec, config.policy, config.families), spec.rootfs, config,
                       store, std::nullopt);
}

Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                System& sys) {
    return decide_with(std::move(request), rootfs, config, true, std::nullopt, &sys);
}

Decision decide(const oci::Spec& spec, const Config& config, NodeKnowledge known) {
    return decide_with(read_request(spec, config.policy, config.families), spec.rootfs, config,
                       true, std::move(known));
}

}  // namespace gpubind
