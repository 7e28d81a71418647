// The placement a container was promised, checked at its start: see
// decide/placement_check.hpp.
#include "gpubind/decide/placement_check.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/node/nvlink.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::decide {

namespace {

// One declaration's value: "" declares nothing, "nvlink" the NVLink clique.
bool declares_nvlink(std::string_view what, std::string_view value, const std::string& where) {
    if (value.empty()) return false;
    if (value == "nvlink") return true;
    util::throw_invalid("read request", where,
                        fmt::format("{}: '{}' is not a placement (nvlink)", what, value));
}

// The annotation's value in the spec, if the spec has it.
std::optional<std::string_view> annotation(const oci::Spec& spec, const std::string& where) {
    if (!spec.doc || !spec.doc->is_object()) return std::nullopt;
    const auto annotations = spec.doc->find("annotations");
    if (annotations == spec.doc->end() || !annotations->is_object()) return std::nullopt;
    const auto it = annotations->find(kPlacementAnnotation);
    if (it == annotations->end()) return std::nullopt;
    if (!it->is_string())
        util::throw_invalid("read request", where,
                            fmt::format("annotations.{}: not a string", kPlacementAnnotation));
    return std::string_view(it->get_ref<const std::string&>());
}

// "GPUs 0, 1; GPUs 2, 3" of cliques given by position.
std::string cliques_text(const node::Node& node, const node::NvlinkGraph& graph) {
    std::string out;
    for (const auto& clique : graph.cliques) {
        out += out.empty() ? "GPUs " : "; GPUs ";
        for (std::size_t i = 0; i < clique.size(); ++i)
            out += fmt::format("{}{}", i ? ", " : "", node.gpus[clique[i]].index);
    }
    return out;
}

}  // namespace

void read_placement(Request& request, const oci::Spec& spec, const std::string& where) {
    if (auto value = annotation(spec, where);
        value &&
        declares_nvlink(fmt::format("annotation {}", kPlacementAnnotation), *value, where)) {
        request.placement = PlacementNeed::Nvlink;
        request.placement_asked_by = fmt::format("annotation {}={}", kPlacementAnnotation, *value);
    }
    if (auto value = spec.getenv(kPlacementVariable);
        value && declares_nvlink(kPlacementVariable, *value, where) &&
        request.placement == PlacementNeed::None) {
        request.placement = PlacementNeed::Nvlink;
        request.placement_asked_by = fmt::format("{}={}", kPlacementVariable, *value);
    }
}

std::string nvlink_placement_failure(const node::Node& node, const node::Selection& selection) {
    std::vector<std::size_t> handed;  // positions in node.gpus, in node order
    for (std::size_t i = 0; i < node.gpus.size(); ++i) {
        const node::Gpu& gpu = node.gpus[i];
        const bool whole =
            std::find(selection.gpus.begin(), selection.gpus.end(), &gpu) != selection.gpus.end();
        const bool parent =
            std::any_of(selection.migs.begin(), selection.migs.end(),
                        [&](const node::MigDevice* m) { return m->gpu_index == gpu.index; });
        if (whole || parent) handed.push_back(i);
    }
    if (handed.size() < 2) return {};

    std::string gpus;
    for (std::size_t p : handed)
        gpus += fmt::format("{}{}", gpus.empty() ? "" : ", ", node.gpus[p].index);
    const node::NvlinkGraph graph = node::nvlink_graph(node.gpus);
    for (std::size_t p : handed)
        if (!graph.known[p]) {
            const auto& nv = node.gpus[p].nvlink;
            return fmt::format(
                "GPUs {} are not known to be one NVLink clique: the NVLink of {} is unknown ({})",
                gpus, node::gpu_name(node.gpus[p]),
                nv ? nv->unknown : std::string("NVML did not answer"));
        }
    bool clique = true;
    std::string paths;
    for (std::size_t a = 0; a < handed.size(); ++a)
        for (std::size_t b = a + 1; b < handed.size(); ++b) {
            const node::Path path = node::gpu_path(graph, node.gpus, handed[a], handed[b]);
            clique = clique && path.kind == node::PathKind::Nvlink;
            paths += fmt::format("{}GPU {}-{}: {}", paths.empty() ? "" : ", ",
                                 node.gpus[handed[a]].index, node.gpus[handed[b]].index,
                                 node::path_name(path));
        }
    if (clique) return {};
    const std::string cliques = cliques_text(node, graph);
    return fmt::format("GPUs {} are not one NVLink clique ({}); this node's NVLink cliques: {}",
                       gpus, paths, cliques.empty() ? "none" : cliques);
}

void check_placement(const Request& request, const node::Node& node,
                     const node::Selection& selection, const config::Config& config) {
    if (request.placement == PlacementNeed::None) return;
    const std::string why = nvlink_placement_failure(node, selection);
    if (why.empty()) return;
    if (config.policy.on_refused == config::OnRefused::Warn) {
        util::logger().warn("{}: {}; starting it anyway (on-refused = warn)",
                            request.placement_asked_by, why);
        return;
    }
    util::throw_refused("check placement", request.placement_asked_by, why);
}

}  // namespace gpubind::decide
