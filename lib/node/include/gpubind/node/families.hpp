// The device families of the config ([family.<name>], config.hpp) as the node
// has them: found once per driver state, with the rest of the node, and kept in
// its description.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::node {

// Fills node.families (a family the node has no device of is left out) and
// each GPU's place, from the dev root, proc/devices, proc/misc and the sys
// root. A node whose type or numbers disagree with what the node's own
// /proc/devices, /proc/misc or sysfs say is left out with a warning
// (node.warnings), as is a file that is not a regular file of root's that
// only root may write (one whose owner shows Unknown: only where `vouched`).
void discover_families(Node& node, const config::Config& config,
                       const std::map<std::string, unsigned, std::less<>>& majors,
                       const Vouch& vouched = {});

// The family of that name the node has, or null.
const FamilyNodes* find_family(const Node& node, std::string_view name);

// What affine selection chose of one family for some GPUs.
struct AffineChoice {
    std::vector<bool> chosen;        // by position in the family's devices
    std::vector<std::string> notes;  // a line for each GPU none is near, saying why
};
// The devices of `f` nearest to each of `gpus` (sysfs::nearest: those sharing
// a PCI bridge with it, else those on its NUMA node), in the family's order.
// A GPU without a PCI place, or with none near, adds none and a note (not an
// error: the caller logs it). Pure but for a debug line per GPU.
AffineChoice affine(const FamilyNodes& f, const std::vector<const Gpu*>& gpus);

// The device directories ("/dev", "/dev/infiniband") whose entries decide
// what discover_families finds, each with the prefixes of the names that
// count ("": every name): the fingerprint lists them.
std::map<std::string, std::vector<std::string>> family_dev_entries(const config::Config& config);

}  // namespace gpubind::node
