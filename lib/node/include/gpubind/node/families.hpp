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

// The device directories ("/dev", "/dev/infiniband") whose entries decide
// what discover_families finds, each with the prefixes of the names that
// count ("": every name): the fingerprint lists them.
std::map<std::string, std::vector<std::string>> family_dev_entries(const config::Config& config);

}  // namespace gpubind::node
