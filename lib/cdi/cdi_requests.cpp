// CDI requests: the CDI names a container asks for (annotations
// cdi.k8s.io/*, NVIDIA_VISIBLE_DEVICES=vendor/class=name, volume mounts under
// /var/run/nvidia-container-devices/cdi), each checked against who may name
// what (rules in cdi.hpp). Needs no node: the fuzzer builds it alone.
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cdi {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kAnnotationPrefix = "cdi.k8s.io/";
constexpr std::string_view kCdiMountDir = "/var/run/nvidia-container-devices/cdi";

// The CDI names a container asks for, each once in the order first given,
// each checked against who may name what.
class Names {
  public:
    Names(std::string where, bool privileged, std::vector<std::string> vendors)
        : where_(std::move(where)), privileged_(privileged), vendors_(std::move(vendors)) {}

    // Each field of a comma list (`what`: where it came from), each a valid
    // qualified name; `any_vendor`: whether the list may name other vendors'
    // devices than the configured ones.
    void add(std::vector<std::string>& out, std::string_view list, const std::string& what,
             bool any_vendor) {
        for (auto field : util::split(list, ',')) {
            field = util::trim(field);
            if (field.empty()) continue;
            // Counted before they are told apart: a list of a million copies
            // of one name costs no more than one of distinct names.
            if (++fields_ > kMaxRequestNames)
                throw util::Error(util::ErrorKind::Invalid, E2BIG, "read CDI request", where_,
                                  fmt::format("more than {} CDI device names asked for; refused",
                                              kMaxRequestNames));
            auto q = util::parse_qualified(field);
            if (!q)
                util::throw_invalid(
                    "read CDI request", where_,
                    fmt::format("{}: '{}' is not a CDI device name (vendor/class=name)", what,
                                std::string(field)));
            const std::string_view vendor = util::vendor_of(q->kind);
            if (!any_vendor &&
                std::find(vendors_.begin(), vendors_.end(), vendor) == vendors_.end())
                throw util::Error(
                    ECANCELED, "refuse request", where_,
                    fmt::format("{} names {}, a device of vendor {}; {} may name only "
                                "devices of {} ([policy] cdi-vendors)",
                                what, q->text(), std::string(vendor),
                                privileged_ ? "it" : "a container without CAP_SYS_ADMIN",
                                join(vendors_, ", ")));
            std::string name = q->text();
            if (seen_.insert(name).second) out.push_back(std::move(name));
        }
    }

  private:
    static std::string join(const std::vector<std::string>& list, std::string_view sep) {
        std::string out;
        for (const auto& s : list) out += (out.empty() ? "" : std::string(sep)) + s;
        return out;
    }

    std::string where_;
    bool privileged_;
    std::vector<std::string> vendors_;
    std::size_t fields_ = 0;
    std::unordered_set<std::string> seen_;
};

// One container's CDI requests being read: where they are, who may name
// what, and what has been found so far (the names, and the sources that gave
// them).
struct RequestReader {
    const decide::oci::Spec& spec;
    const config::Policy& policy;
    const std::string where;
    const bool privileged;
    Names names;
    Requests out;
    std::vector<std::string> sources;

    // Annotations: the device plugin's cdi-annotations strategy, CRI's CDI field.
    void read_annotations() {
        if (!spec.doc || !spec.doc->is_object() || !spec.doc->contains("annotations") ||
            !(*spec.doc)["annotations"].is_object())
            return;
        for (const auto& [key, value] : (*spec.doc)["annotations"].items()) {
            if (!key.starts_with(kAnnotationPrefix) || !value.is_string()) continue;
            const std::string what = "annotation " + key;
            const std::string& list = value.get_ref<const std::string&>();
            if (!privileged && !policy.accept_cdi_annotations_unprivileged &&
                list.find_first_not_of(" \t,") != std::string::npos)
                throw util::Error(
                    ECANCELED, "refuse request", spec.bundle.string(),
                    what +
                        " names CDI devices, but the container is not privileged (no "
                        "CAP_SYS_ADMIN) and policy accept-cdi-annotations-unprivileged "
                        "is off");
            names.add(out.devices, list, what, privileged);
            sources.push_back(what);
        }
    }

    // Volume mounts: /var/run/nvidia-container-devices/cdi/<vendor>/<class>/<name>,
    // read when policy accepts them, else only checked. Returns their
    // destinations.
    std::vector<std::string> read_volume_mounts() {
        std::vector<std::string> mounted;
        for (std::size_t i = 0; i < spec.mounts.size(); ++i) {
            const auto& m = spec.mounts[i];
            if (m.source != "/dev/null") continue;
            const fs::path rel =
                fs::path(m.destination).lexically_normal().lexically_relative(kCdiMountDir);
            std::vector<std::string> parts;
            for (const auto& part : rel)
                if (!part.empty()) parts.push_back(part.string());
            if (parts.empty() || parts[0] == "." || parts[0] == "..") continue;
            if (parts.size() != 3)
                util::throw_invalid(
                    "read CDI request", where,
                    fmt::format("mounts[{}].destination {}: not {}/<vendor>/<class>/<name>", i,
                                m.destination, kCdiMountDir));
            const std::string name = parts[0] + "/" + parts[1] + "=" + parts[2];
            const std::string what = fmt::format("mounts[{}].destination", i);
            if (policy.accept_volume_mounts) {
                names.add(out.devices, name, what, privileged);
            } else if (!util::parse_qualified(name)) {
                util::throw_invalid(
                    "read CDI request", where,
                    fmt::format("{}: '{}' is not a CDI device name (vendor/class=name)", what,
                                name));
            }
            if (mounted.empty() && policy.accept_volume_mounts) sources.push_back("volume mounts");
            mounted.push_back(m.destination);
        }
        return mounted;
    }

    // NVIDIA_VISIBLE_DEVICES, when it names CDI devices (not mixed with device ids).
    void read_visible_devices() {
        auto visible = spec.getenv("NVIDIA_VISIBLE_DEVICES");
        if (!visible) return;
        bool cdi = false, other = false;
        for (auto field : util::split(*visible, ',')) {
            field = util::trim(field);
            if (field.empty()) continue;
            (util::looks_qualified(field) ? cdi : other) = true;
        }
        if (cdi && other)
            util::throw_invalid(
                "read CDI request", where,
                "NVIDIA_VISIBLE_DEVICES mixes CDI names and device ids: '" + *visible + "'");
        if (cdi) {
            if (!privileged && !policy.accept_envvar_unprivileged)
                throw util::Error(
                    ECANCELED, "refuse request", spec.bundle.string(),
                    "NVIDIA_VISIBLE_DEVICES names CDI devices, but the container is not "
                    "privileged (no CAP_SYS_ADMIN) and policy accept_envvar_unprivileged is "
                    "off");
            // NVIDIA's variable names NVIDIA's devices (the configured
            // vendors), whoever sets it.
            names.add(out.devices, *visible, "NVIDIA_VISIBLE_DEVICES", false);
            sources.push_back("NVIDIA_VISIBLE_DEVICES");
        }
    }
};

}  // namespace

Requests read_requests(const decide::oci::Spec& spec, const config::Config& config) {
    const config::Policy& policy = config.policy;
    const std::string where = (spec.bundle / "config.json").string();
    const bool privileged = spec.privileged();
    Names names(where, privileged,
                policy.cdi_vendors.empty()
                    ? std::vector<std::string>{std::string(util::vendor_of(config.cdi.kind))}
                    : policy.cdi_vendors);
    RequestReader reader{spec, policy, where, privileged, std::move(names), {}, {}};
    reader.read_annotations();
    const std::vector<std::string> mounted = reader.read_volume_mounts();
    if (!mounted.empty() && policy.accept_volume_mounts) {
        // The mounts replace the variable.
    } else {
        if (!mounted.empty())
            util::logger().warn(
                "{}: ignoring the CDI device mounts under {}: policy does not accept them",
                spec.bundle.string(), kCdiMountDir);
        reader.read_visible_devices();
    }
    Requests& out = reader.out;
    if (!out.devices.empty()) decide::oci::check_env_caps(spec);  // it asks for something
    for (const auto& s : reader.sources) out.source += (out.source.empty() ? "" : ", ") + s;
    return std::move(out);
}

}  // namespace gpubind::cdi
