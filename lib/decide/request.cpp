// What a container asks for. The interface is NVIDIA's (variables, device
// mounts, their meaning); the rules, in order:
//
//  1. Device mounts: mounts of /dev/null at /var/run/nvidia-container-devices/<id>
//     (<id> may be "all"; imex/<n> names an IMEX channel; cdi/... is CDI's).
//     Honoured only under policy.accept_volume_mounts; when present they replace the variables.
//     Refused by policy, they are ignored (logged) and the variables apply.
//  2. NVIDIA_VISIBLE_DEVICES: unset means no GPUs, except for a legacy CUDA
//     image (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA unset) which gets all of
//     them; "void" or empty means no GPUs; "none" the driver without a GPU;
//     "all" or a comma list of ids otherwise; CDI names ("nvidia.com/gpu=1")
//     are not a request here (cdi::read_requests). Not a GPU container: nothing
//     else is read. An unprivileged container (no CAP_SYS_ADMIN in its
//     bounding set) asking by variable is refused unless
//     policy.accept_envvar_unprivileged.
//  3. NVIDIA_DRIVER_CAPABILITIES: a comma list; unset or empty means
//     utility,compute (all for a legacy CUDA image); an unknown name is an
//     error; the result is limited to policy.supported (dropped ones logged).
//  4. NVIDIA_REQUIRE_<X> (every such variable) unless NVIDIA_DISABLE_REQUIRE is
//     1/true/yes/on or policy.disable_require. A legacy CUDA image also
//     requires cuda>=<major.minor of CUDA_VERSION>.
//  5. NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES: privileged
//     containers only, else refused. NVIDIA_IMEX_CHANNELS: numbers or "all"
//     (parse_imex_channels); "none", "void" or empty: no channel.
//  6. Device families ([family.<name>]): by device mounts
//     (<dir>/<family>/<device|all>) when mounts are honoured, else each
//     family's variables ("enabled": every device) and its selecting variable
//     (all, affine, device names); and a family whose capabilities the
//     request has comes with the GPUs (never refused for its absence).
//     Families' variables are read only for a request by variable that passed
//     rule 2's gate: where policy refuses the variable from an unprivileged
//     container, such a container gets families only by device mounts or CDI.
//
// A variable given several times counts with its last value, as the
// container's process sees it; duplicate ids are dropped. A container that
// asks for something is refused when its environment is past the caps
// (oci::check_env_caps); one that asks for nothing is not.
#include "gpubind/decide/request.hpp"

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "gpubind/decide/placement_check.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::decide {

namespace {

constexpr std::string_view kDeviceMountDir = "/var/run/nvidia-container-devices";
constexpr std::string_view kRequirePrefix = "NVIDIA_REQUIRE_";

// A list without duplicates, in the order items first came: each addition
// is one lookup, not a scan of the list (a spec may hold 200,000 device
// mounts, a variable thousands of names).
class UniqueList {
  public:
    void add(std::string item) {
        if (seen_.insert(item).second) items_.push_back(std::move(item));
    }
    const std::vector<std::string>& items() const { return items_; }
    std::vector<std::string> take() && { return std::move(items_); }

  private:
    std::vector<std::string> items_;
    std::unordered_set<std::string> seen_;
};

bool truthy(std::string_view value) {
    auto v = util::to_lower(util::trim(value));
    return v == "1" || v == "true" || v == "yes" || v == "on";
}

// CUDA_VERSION set and NVIDIA_REQUIRE_CUDA unset (empty counts as unset).
bool legacy_cuda_image(const oci::Spec& spec) {
    auto cuda = spec.getenv("CUDA_VERSION");
    auto require = spec.getenv("NVIDIA_REQUIRE_CUDA");
    return cuda && !util::trim(*cuda).empty() && (!require || util::trim(*require).empty());
}

struct MountRequest {
    bool present = false;
    UniqueList devices;
    UniqueList imex;
    std::map<std::string, UniqueList> families;  // family -> devices ("all")
};

// A device's name as a family lists it ("mlx5_0", "nvidia-fs3", "card1").
bool device_name(std::string_view name) {
    return !name.empty() && name.size() <= 64 &&
           name.find_first_not_of(
               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
               "0123456789_.:-") == std::string_view::npos &&
           name != "." && name != "..";
}

MountRequest read_device_mounts(const oci::Spec& spec, const std::vector<config::Family>& families,
                                const std::string& where) {
    MountRequest out;
    for (std::size_t i = 0; i < spec.mounts.size(); ++i) {
        const auto& m = spec.mounts[i];
        if (m.source != "/dev/null") continue;
        auto rel = std::filesystem::path(m.destination)
                       .lexically_normal()
                       .lexically_relative(kDeviceMountDir);
        std::vector<std::string> parts;
        for (const auto& part : rel)
            if (!part.empty()) parts.push_back(part.string());
        if (parts.empty() || parts[0] == "." || parts[0] == "..") continue;  // not under it
        if (parts[0] == "cdi") continue;  // CDI names: cdi::read_requests

        auto bad = [&](const char* why) {
            util::throw_invalid(
                "read request", where,
                fmt::format("mounts[{}].destination {}: {}", i, m.destination, why));
        };
        out.present = true;
        if (parts.size() == 1) {
            out.devices.add(parts[0]);
        } else if (parts.size() == 2 &&
                   std::any_of(families.begin(), families.end(),
                               [&](const config::Family& f) { return f.name == parts[0]; })) {
            if (!device_name(parts[1])) bad("not a device name");
            out.families[parts[0]].add(parts[1]);
        } else if (parts.size() == 2 && parts[0] == "imex") {
            // One channel a mount: a number or "all".
            if (parts[1].find_first_of(", \t") != std::string::npos || parts[1] == "none" ||
                parts[1] == "void")
                bad("not an IMEX channel number");
            for (auto& c : parse_imex_channels(
                     parts[1], fmt::format("mounts[{}].destination {}", i, m.destination), where))
                out.imex.add(std::move(c));
        } else {
            bad("not a device id");
        }
    }
    return out;
}

// Whether a NVIDIA_VISIBLE_DEVICES value names CDI devices ("nvidia.com/gpu=0").
bool names_cdi_devices(std::string_view value) {
    for (auto field : util::split(value, ','))
        if (util::looks_qualified(util::trim(field))) return true;
    return false;
}

// NVIDIA_IMEX_CHANNELS: "all", or channel numbers; void, none or empty: none.
std::vector<std::string> read_imex_channels(const oci::Spec& spec, const std::string& where) {
    auto value = spec.getenv("NVIDIA_IMEX_CHANNELS");
    if (!value) return {};
    return parse_imex_channels(*value, "NVIDIA_IMEX_CHANNELS", where);
}

// MIG configuration and monitoring: device ids, privileged containers only.
node::DeviceIds read_mig(const oci::Spec& spec, const char* variable,
                         const std::string& container) {
    auto value = spec.getenv(variable);
    if (!value) return {};
    node::DeviceIds ids = node::parse_device_ids(*value);
    if (ids.kind == node::DeviceIdsKind::None) ids = {};
    if (ids.kind != node::DeviceIdsKind::Void && !spec.privileged())
        util::throw_refused(
            "refuse request", container,
            fmt::format("{} is only for privileged containers (CAP_SYS_ADMIN in the "
                        "bounding set), and this one is not",
                        variable));
    return ids;
}

// "cuda>=<major>.<minor>" from a legacy image's CUDA_VERSION ("10.2.89").
std::string legacy_cuda_requirement(const std::string& cuda_version, const std::string& where) {
    auto parts = util::split(util::trim(cuda_version), '.');
    std::string out = "cuda>=";
    for (std::size_t i = 0; i < parts.size() && i < 2; ++i) {
        if (!util::parse_unsigned(parts[i]))
            util::throw_invalid("read request", where,
                                fmt::format("CUDA_VERSION: '{}' is not a version", cuda_version));
        if (i) out += '.';
        out += parts[i];
    }
    return out;
}

std::vector<Requirement> read_requirements(const oci::Spec& spec, bool legacy,
                                           const std::string& where) {
    // One pass (a spec may hold thousands of variables): each name in the
    // order it first appears, with its last value.
    std::vector<std::string_view> order;
    std::map<std::string_view, std::string_view> last;
    for (const auto& entry : spec.env) {
        const std::size_t eq = entry.find('=');
        if (eq == std::string::npos) continue;
        std::string_view name = std::string_view(entry).substr(0, eq);
        if (!name.starts_with(kRequirePrefix) || name.size() == kRequirePrefix.size()) continue;
        auto [it, added] = last.insert_or_assign(name, std::string_view(entry).substr(eq + 1));
        if (added) order.push_back(name);
    }
    std::vector<Requirement> out;
    for (std::string_view name : order) {
        const std::string_view value = last[name];
        if (!util::trim(value).empty()) out.push_back({std::string(name), std::string(value)});
    }
    if (legacy)
        out.push_back(
            {"CUDA_VERSION", legacy_cuda_requirement(*spec.getenv("CUDA_VERSION"), where)});
    return out;
}

// The request of device mounts policy accepts: their devices (none but
// IMEX channels: the driver without a GPU) and IMEX channels.
Request request_by_mounts(MountRequest mounts) {
    Request req;
    req.source = RequestSource::VolumeMounts;
    bool all = false;
    for (const auto& id : mounts.devices.items()) all = all || id == "all";
    if (all)
        req.devices = {node::DeviceIdsKind::All, {}};
    else if (mounts.devices.items().empty())
        req.devices = {node::DeviceIdsKind::None, {}};  // only IMEX channels: the driver, no GPU
    else
        req.devices = {node::DeviceIdsKind::List, std::move(mounts.devices).take()};
    bool all_channels = false;
    for (const auto& c : mounts.imex.items()) all_channels = all_channels || c == "all";
    if (all_channels)
        req.imex_channels = {"all"};
    else
        req.imex_channels = std::move(mounts.imex).take();
    return req;
}

// The request of the variables: NVIDIA_VISIBLE_DEVICES (or a legacy CUDA
// image) and NVIDIA_IMEX_CHANNELS; none (not a GPU container) when they ask
// for no GPU or name CDI devices.
Request request_by_variables(const oci::Spec& spec, const config::Policy& policy, bool legacy,
                             const std::string& container, const std::string& where) {
    Request req;
    std::string asked_by;
    auto visible = spec.getenv("NVIDIA_VISIBLE_DEVICES");
    if (visible && names_cdi_devices(*visible)) {
        util::logger().debug(
            "{}: NVIDIA_VISIBLE_DEVICES names CDI devices: the engine or "
            "gpubind-runtime applies them",
            container);
        return Request{};
    }
    if (visible) {
        req.devices = node::parse_device_ids(*visible);
        if (req.devices.kind == node::DeviceIdsKind::Void) return Request{};
        req.source = RequestSource::Env;
        asked_by = fmt::format("NVIDIA_VISIBLE_DEVICES={}", *visible);
    } else if (legacy) {
        req.source = RequestSource::LegacyCuda;
        req.devices = {node::DeviceIdsKind::All, {}};
        asked_by = "a legacy CUDA image (CUDA_VERSION without NVIDIA_REQUIRE_CUDA)";
    } else {
        return Request{};
    }
    if (!spec.privileged() && !policy.accept_envvar_unprivileged)
        util::throw_refused(
            "refuse request", container,
            fmt::format("{} asks for GPUs by environment variable, but the container "
                        "is not privileged (no CAP_SYS_ADMIN) and policy "
                        "accept_envvar_unprivileged is off",
                        asked_by));
    req.imex_channels = read_imex_channels(spec, where);
    return req;
}

// NVIDIA_DRIVER_CAPABILITIES (unset or empty: utility,compute, all for a
// legacy CUDA image), limited to those policy supports.
config::Capabilities read_capabilities(const oci::Spec& spec, const config::Policy& policy,
                                       bool legacy, const std::string& container,
                                       const std::string& where) {
    config::Capabilities wanted;
    auto caps = spec.getenv("NVIDIA_DRIVER_CAPABILITIES");
    if (!caps || util::trim(*caps).empty()) {
        wanted = legacy ? config::kCapAll : config::kCapDefault;
    } else {
        std::string unknown;
        auto parsed = config::parse_capabilities(*caps, &unknown);
        if (!parsed)
            util::throw_invalid(
                "read request", where,
                fmt::format("NVIDIA_DRIVER_CAPABILITIES: unknown capability '{}'", unknown));
        wanted = *parsed;
    }
    if (config::Capabilities dropped = wanted & ~policy.supported)
        util::logger().warn("{}: capabilities {} are not supported by policy and are left out",
                            container, config::capability_names(dropped));
    return wanted & policy.supported;
}

// A family's switch variable: on (enabled, true, 1, yes, on, all), off
// (disabled, false, 0, no, off, void, none, empty), else an error.
bool switched_on(std::string_view variable, std::string_view value, const std::string& where) {
    const std::string v = util::to_lower(util::trim(value));
    if (v == "enabled" || v == "true" || v == "1" || v == "yes" || v == "on" || v == "all")
        return true;
    if (v.empty() || v == "disabled" || v == "false" || v == "0" || v == "no" || v == "off" ||
        v == "void" || v == "none")
        return false;
    util::throw_invalid("read request", where,
                        fmt::format("{}: '{}' is neither enabled nor disabled", variable, value));
}

// What the variables and capabilities of a GPU container ask of each family.
void read_family_variables(Request& req, const oci::Spec& spec,
                           const std::vector<config::Family>& families, const std::string& where) {
    for (const auto& f : families) {
        FamilyRequest fr;
        fr.family = f.name;
        for (const auto& variable : f.variables)
            if (auto value = spec.getenv(variable); value && switched_on(variable, *value, where)) {
                fr.all = true;
                fr.asked_by = fmt::format("{}={}", variable, *value);
            }
        if (auto value = f.select.empty() ? std::nullopt : spec.getenv(f.select)) {
            UniqueList names;
            for (auto field : util::split(*value, ',')) {
                field = util::trim(field);
                if (field.empty() || field == "none" || field == "void") continue;
                if (field == "all")
                    fr.all = true;
                else if (field == "affine")
                    fr.affine = true;
                else if (device_name(field))
                    names.add(std::string(field));
                else
                    util::throw_invalid("read request", where,
                                        fmt::format("{}: '{}' is not all, affine or a device name",
                                                    f.select, field));
            }
            fr.names = std::move(names).take();
            if (fr.all || fr.affine || !fr.names.empty())
                fr.asked_by = fmt::format("{}={}", f.select, *value);
        }
        if (fr.asked_by.empty() && (req.caps & f.caps) != 0) {
            fr.all = true;
            fr.by_capability = true;
            fr.asked_by = "capabilities " + config::capability_names(req.caps & f.caps);
        }
        if (fr.asked_by.empty()) continue;
        if (auto value = f.extras.empty() ? std::nullopt : spec.getenv(f.extras))
            fr.extras = switched_on(f.extras, *value, where);
        req.families.push_back(std::move(fr));
    }
}

// What device mounts ask of each family (and the capabilities, as by variable).
void read_family_mounts(Request& req, std::map<std::string, UniqueList> mounts,
                        const std::vector<config::Family>& families) {
    for (const auto& f : families) {
        FamilyRequest fr;
        fr.family = f.name;
        if (auto it = mounts.find(f.name); it != mounts.end()) {
            for (auto& name : std::move(it->second).take())
                if (name == "all")
                    fr.all = true;
                else
                    fr.names.push_back(std::move(name));
            if (fr.all) fr.names.clear();
            fr.asked_by = fmt::format("device mounts under {}/{}", kDeviceMountDir, f.name);
        } else if ((req.caps & f.caps) != 0) {
            fr.all = true;
            fr.by_capability = true;
            fr.asked_by = "capabilities " + config::capability_names(req.caps & f.caps);
        } else {
            continue;
        }
        req.families.push_back(std::move(fr));
    }
}

}  // namespace

std::vector<std::string> parse_imex_channels(std::string_view value, std::string_view what,
                                             const std::string& where) {
    std::vector<std::string> out;
    std::set<unsigned long> seen;
    bool all = false;
    for (auto field : util::split(value, ',')) {
        field = util::trim(field);
        if (field.empty() || field == "void" || field == "none") continue;
        if (field == "all") {
            all = true;
            continue;
        }
        // Decimal digits only (no sign, no blanks inside), within a minor number.
        auto n = field.find_first_not_of("0123456789") == std::string_view::npos
                     ? util::parse_unsigned(field)
                     : std::nullopt;
        if (!n || *n > kMaxImexChannel)
            util::throw_invalid("read request", where,
                                fmt::format("{}: '{}' is not an IMEX channel number (0 to {})",
                                            what, field, kMaxImexChannel));
        if (seen.insert(*n).second) out.push_back(std::to_string(*n));
    }
    if (all) return {"all"};
    return out;
}

Request read_request(const oci::Spec& spec, const config::Policy& policy,
                     const std::vector<config::Family>& families) {
    const std::string container = spec.bundle.string();
    const std::string where = (spec.bundle / "config.json").string();
    const bool legacy = legacy_cuda_image(spec);
    Request req;

    MountRequest mounts = read_device_mounts(spec, families, where);
    const bool by_mounts = mounts.present && policy.accept_volume_mounts;
    auto family_mounts = std::move(mounts.families);
    if (by_mounts) {
        req = request_by_mounts(std::move(mounts));
    } else {
        if (mounts.present)
            util::logger().warn(
                "{}: ignoring the device mounts under {}: policy does not accept them; "
                "reading NVIDIA_VISIBLE_DEVICES instead",
                container, kDeviceMountDir);
        req = request_by_variables(spec, policy, legacy, container, where);
        if (!req.gpu_container()) return req;
    }
    // It asks for something: the environment within its caps (F7 of issue 44).
    oci::check_env_caps(spec);

    req.caps = read_capabilities(spec, policy, legacy, container, where);

    auto disable = spec.getenv("NVIDIA_DISABLE_REQUIRE");
    if (!policy.disable_require && !(disable && truthy(*disable)))
        req.requirements = read_requirements(spec, legacy, where);

    req.mig_config = read_mig(spec, "NVIDIA_MIG_CONFIG_DEVICES", container);
    req.mig_monitor = read_mig(spec, "NVIDIA_MIG_MONITOR_DEVICES", container);
    if (by_mounts)
        read_family_mounts(req, std::move(family_mounts), families);
    else
        read_family_variables(req, spec, families, where);
    read_placement(req, spec, where);
    req.share = read_container_share(spec, policy, container, where);
    return req;
}

}  // namespace gpubind::decide
