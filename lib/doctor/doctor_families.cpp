// gpubind doctor: the device families of the config on this node. The facts
// are what discovery finds (discover_families); the checks judge them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/doctor/doctor.hpp"
#include "gpubind/node/families.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/node/sysfs.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::doctor {

void gather_families(NodeFacts& f, const config::Config& config) {
    // The GPUs as procfs lists them: their bus ids are what DRM and the
    // HCAs' nearness are found by.
    node::Node node;
    node.roots = config.roots;
    for (const auto& g : f.gpus) {
        node::Gpu gpu;
        gpu.index = static_cast<unsigned>(node.gpus.size());
        gpu.pci_bus_id = g.bus_id;
        node.gpus.push_back(std::move(gpu));
    }
    node::discover_families(node, config, f.majors);
    std::vector<const node::PciPlace*> gpu_places;
    for (const auto& gpu : node.gpus) gpu_places.push_back(gpu.place ? &*gpu.place : nullptr);
    for (const auto& family : config.families) {
        NodeFacts::Family out;
        out.name = family.name;
        if (family.source == config::FamilySource::Glob) {
            out.driver = family.major;
            out.driver_loaded = family.major == "misc" || f.majors.count(family.major) != 0;
        }
        const std::string prefix = "family " + family.name + ": ";
        for (const auto& w : node.warnings)
            if (w.starts_with(prefix)) out.left_out.push_back(w.substr(prefix.size()));
        if (const node::FamilyNodes* found = node::find_family(node, family.name))
            for (const auto& d : found->devices) {
                out.devices.push_back(d.name);
                if (family.source == config::FamilySource::Infiniband && !node.gpus.empty() &&
                    (!d.place || node::sysfs::nearest(*d.place, gpu_places).which.empty()))
                    out.far_hcas.push_back(d.name);
            }
        f.families.push_back(std::move(out));
    }
}

std::vector<Check> check_families(const NodeFacts& f) {
    std::vector<Check> out;
    for (const auto& family : f.families) {
        Check c;
        c.group = "node";
        c.name = "family-" + family.name;
        c.evidence = family.left_out;
        if (!family.left_out.empty()) {
            c.verdict = Verdict::Problem;
            c.summary = fmt::format(
                "{} node(s) of family {} left out: their numbers are not "
                "what the kernel gives the driver",
                family.left_out.size(), family.name);
            c.fix = "recreate them (reload the driver, or mknod with the numbers " +
                    (f.roots.proc / "devices").string() + " gives)";
        } else if (family.devices.empty()) {
            c.summary = !family.driver.empty() && family.driver_loaded
                            ? fmt::format("no {} device nodes, though {} lists {}", family.name,
                                          (f.roots.proc / "devices").string(), family.driver)
                            : fmt::format("no {} devices on this node", family.name);
            if (!family.driver.empty() && family.driver_loaded) c.verdict = Verdict::Warning;
        } else {
            c.summary = fmt::format("{} device(s): {}", family.devices.size(),
                                    fmt::join(family.devices, ", "));
        }
        if (!family.far_hcas.empty()) {
            if (c.verdict == Verdict::Ok) c.verdict = Verdict::Warning;
            c.evidence.push_back(fmt::format(
                "no GPU under the PCIe switch or on the NUMA node of {}: GPUBIND_RDMA=affine "
                "never gives it",
                fmt::join(family.far_hcas, ", ")));
        }
        out.push_back(std::move(c));
    }
    return out;
}

}  // namespace gpubind::doctor
