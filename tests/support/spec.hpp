// A container's spec as a device plugin or docker writes it, parsed as the
// hook parses config.json (bundle /bundles/c1): its variables, whether it is
// privileged (CAP_SYS_ADMIN in the bounding set), and /dev/null mounts at
// `device_mounts` (the volume-mount strategy).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpubind/decide/oci.hpp"

namespace gpubind::test {

inline decide::oci::Spec make_spec(const std::vector<std::string>& env, bool privileged = false,
                                   const std::vector<std::string>& device_mounts = {}) {
    using nlohmann::json;
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", env}}},
                {"mounts", json::array()}};
    doc["process"]["capabilities"]["bounding"] =
        privileged ? json{"CAP_CHOWN", "CAP_SYS_ADMIN"} : json{"CAP_CHOWN", "CAP_KILL"};
    doc["mounts"].push_back({{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}});
    for (const auto& dest : device_mounts)
        doc["mounts"].push_back({{"destination", dest},
                                 {"type", "bind"},
                                 {"source", "/dev/null"},
                                 {"options", {"bind", "ro"}}});
    return decide::oci::parse_spec(doc.dump(), "/bundles/c1");
}

}  // namespace gpubind::test
