// libFuzzer target: the CDI parsers gpubind-runtime feeds hostile bytes to.
// Whatever the bytes, each returns or throws gpubind::Error:
//  - a spec file's text, as JSON and as YAML: one that validates declares a
//    cdiVersion at least minimum_version(), survives YAML and back unchanged,
//    and applies its own devices to an empty OCI spec or throws Error;
//  - an OCI spec's CDI requests (annotations, NVIDIA_VISIBLE_DEVICES, volume
//    mounts) under both policies: every name returned is a valid qualified name.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/version.hpp"

namespace {

void check_spec(std::string_view bytes, bool yaml_text) {
    using namespace gpubind;
    nlohmann::json spec;
    try {
        spec = cdi::parse_spec(bytes, yaml_text, "fuzz");
    } catch (const util::Error&) {
        return;
    }
    if (util::compare_versions(spec["cdiVersion"].get<std::string>(), cdi::minimum_version(spec)) <
        0)
        std::abort();
    if (cdi::yaml::parse(cdi::yaml::dump(spec), "dump") != spec) std::abort();
    const auto names = cdi::device_names(spec);
    for (const auto& n : names)
        if (!util::parse_qualified(n)) std::abort();
    cdi::Registry reg;
    reg.specs.push_back({"/fuzz.json", 0, spec});
    try {
        const auto out = cdi::apply(nlohmann::json::object(), names, reg);
        if (!out.is_object()) std::abort();
    } catch (const util::Error&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace gpubind;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    check_spec(bytes, false);
    check_spec(bytes, true);
    try {
        const decide::oci::Spec spec = decide::oci::parse_spec(bytes, "/bundle");
        for (bool strict : {false, true}) {
            config::Config config;
            config.policy.accept_volume_mounts = strict;
            config.policy.accept_envvar_unprivileged = !strict;
            config.policy.accept_cdi_annotations_unprivileged = !strict;
            try {
                const auto names = cdi::read_requests(spec, config).devices;
                if (names.size() > cdi::kMaxRequestNames) std::abort();
                for (const auto& n : names)
                    if (!util::parse_qualified(n)) std::abort();
            } catch (const util::Error&) {
            }
        }
    } catch (const util::Error&) {
    }
    return 0;
}
