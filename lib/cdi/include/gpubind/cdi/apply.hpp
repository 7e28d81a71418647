// Reading CDI spec files and applying their devices' edits to an OCI spec
// (cdi_apply.cpp): what gpubind-runtime does for a container that names CDI
// devices its engine does not apply (cdi.hpp reads those names).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpubind::cdi {

// Checks a parsed spec by the CDI rules (and gpubind's: absolute paths
// without "..", device nodes under /dev, no NUL in strings, no field the
// runtime cannot apply); throws Error(EINVAL, "read CDI spec", what, why).
void validate(const nlohmann::json& spec, const std::string& what);
// Parses (JSON, or YAML when `yaml`) and validates a spec file's text.
nlohmann::json parse_spec(std::string_view text, bool yaml, const std::string& what);

struct LoadedSpec {
    std::filesystem::path file;
    int priority = 0;  // index of its directory in the list
    nlohmann::json spec;
};
struct Registry {
    std::vector<LoadedSpec> specs;
    struct Refusal {
        std::filesystem::path file;
        std::string why;  // the error, naming the file: "read CDI spec <file>: ..."
        // For what it says (not JSON or YAML, fails validate, too large), not
        // for the file itself (a link, not regular, not root's, writable by others).
        bool content = false;
    };
    std::vector<Refusal> refused;  // one per refused file
};
// Reads every *.json and *.yaml entry of `dirs` (a missing directory is
// empty). A file that is a symbolic link, not a regular file, not root's, or
// writable by others, larger than kMaxSpecFileSize, or that fails
// parse_spec is refused (recorded and logged), never read in part.
Registry load_specs(const std::vector<std::filesystem::path>& dirs);
// The same for files named one by one (priority 0 each): `gpubind cdi check FILE...`.
Registry load_spec_files(const std::vector<std::filesystem::path>& files);

// `spec` (an OCI config.json) with the named devices' edits applied as the
// CDI specification says: each spec's common edits once, then each device's;
// env replaces a variable of the same name; device nodes go to linux.devices
// with a linux.resources.devices rule (their "permissions", default "rwm"),
// their type and numbers read from hostPath (never followed) when the spec
// omits them; mounts are appended, then sorted by depth; hooks appended to
// their stage; additionalGids added to process.user. An edit identical to
// what the spec already has is not repeated. Throws Error(EINVAL,
// "apply CDI device", name, why) for a name no valid spec offers (naming the
// refused files, if any), Error(EEXIST, "apply CDI device", ...) for a
// conflict: the same device in two specs of the same priority, two edits
// setting the same device path, mount target or variable differently, or an
// edit at a device path or mount target the spec already uses differently.
nlohmann::json apply(nlohmann::json spec, const std::vector<std::string>& devices,
                     const Registry& registry);

}  // namespace gpubind::cdi
