// Device families into a container: the devices asked for, their shared
// nodes, links and files.
#include "gpubind/decide/plan.hpp"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "gpubind/node/families.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/mount_flags.hpp"

namespace gpubind::decide {

namespace {

using node::detail::under;

std::string names_of(const node::FamilyNodes& f) {
    std::string out;
    for (const auto& d : f.devices) out += (out.empty() ? "" : ", ") + d.name;
    return out;
}

}  // namespace

FamilyItems plan_families(const Request& request, const node::Node& node,
                          const std::vector<const node::Gpu*>& gpus, const config::Config& config) {
    FamilyItems out;
    for (const auto& fr : request.families) {
        const node::FamilyNodes* f = node::find_family(node, fr.family);
        const config::Family* spec = config.family(fr.family);
        if (!f) {
            if (fr.by_capability) {
                util::logger().debug("family {}: the node has none ({})", fr.family, fr.asked_by);
                continue;
            }
            const std::string why = fmt::format(
                "asks for {} devices and this node has none{}", fr.family,
                spec && !spec->nodes.empty() && spec->source == config::FamilySource::Glob
                    ? fmt::format(" (no {} with the {} major)", spec->nodes.front(), spec->major)
                    : "");
            if (config.policy.on_refused == config::OnRefused::Warn) {
                util::logger().warn("{} {}; starting without them (on-refused = warn)", fr.asked_by,
                                    why);
                continue;
            }
            util::throw_refused("plan", fr.asked_by, why);
        }
        std::vector<bool> chosen(f->devices.size(), fr.all);
        if (spec && spec->source == config::FamilySource::Drm) {
            // DRM: only the container's own GPUs' nodes, whatever was asked.
            for (std::size_t i = 0; i < f->devices.size(); ++i)
                chosen[i] =
                    chosen[i] && std::any_of(gpus.begin(), gpus.end(), [&](const node::Gpu* g) {
                        return g->pci_bus_id == f->devices[i].pci_bus_id;
                    });
        }
        for (const auto& name : fr.names) {
            auto it = std::find_if(f->devices.begin(), f->devices.end(),
                                   [&](const node::FamilyDevice& d) { return d.name == name; });
            if (it == f->devices.end())
                util::throw_invalid(
                    "select device", name,
                    fmt::format("no {} device {} on this node (it has {}; asked by {})", f->name,
                                name, names_of(*f), fr.asked_by));
            chosen[static_cast<std::size_t>(it - f->devices.begin())] = true;
        }
        if (fr.affine) {
            if (gpus.empty())
                util::logger().info(
                    "{}: affine asked without a GPU: no device of the family is near", f->name);
            const node::AffineChoice near = node::affine(*f, gpus);
            for (const auto& note : near.notes) util::logger().info("{}", note);
            for (std::size_t i = 0; i < chosen.size(); ++i) chosen[i] = chosen[i] || near.chosen[i];
        }
        bool any = false;
        for (std::size_t i = 0; i < f->devices.size(); ++i) {
            if (!chosen[i]) continue;
            any = true;
            const auto& d = f->devices[i];
            const std::string why = fmt::format("{} {}", f->name, d.name);
            for (const auto& n : d.nodes) out.devices.push_back({n, why});
            if (fr.extras)
                for (const auto& n : d.extras) out.devices.push_back({n, why});
            for (const auto& [path, target] : d.links) out.links.push_back({path, target});
        }
        if (!any) continue;
        for (const auto& n : f->shared) out.devices.push_back({n, f->name});
        for (const auto& file : f->files)
            out.files.push_back(
                {node::detail::under(node.roots.driver, file).string(), file, false,
                 util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec,
                 f->name + " file"});
    }
    return out;
}

}  // namespace gpubind::decide
