// doctor's cdi-specs group and `gpubind cdi check`: every CDI spec an engine
// would read, whoever wrote it, against this node now.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/version.hpp"

namespace gpubind::doctor {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kCdiGroup = "cdi-specs";

std::optional<unsigned> number(const json& edit, const char* key) {
    if (!edit.contains(key) || !edit[key].is_number_unsigned()) return std::nullopt;
    return edit[key].get<unsigned>();
}

// The edits of one containerEdits object, for `device`.
void add_edits(CdiSpecFacts::File& file, const std::string& device, const json& edits) {
    using What = CdiSpecFacts::Edit::What;
    auto each = [&](const char* key, auto&& fn) {
        if (edits.contains(key) && edits[key].is_array())
            for (const auto& item : edits[key])
                if (item.is_object()) fn(item);
    };
    each("deviceNodes", [&](const json& n) {
        const std::string path = n.value("hostPath", n.value("path", std::string()));
        file.edits.push_back({device, What::Node, path, number(n, "major"), number(n, "minor"),
                              stat_path(path, true)});
    });
    each("mounts", [&](const json& m) {
        const std::string path = m.value("hostPath", std::string());
        file.edits.push_back({device, What::Mount, path, {}, {}, stat_path(path, true)});
    });
    each("hooks", [&](const json& h) {
        const std::string path = h.value("path", std::string());
        file.edits.push_back({device, What::Hook, path, {}, {}, stat_path(path, true)});
    });
}

CdiSpecFacts::File file_facts(const cdi::LoadedSpec& loaded) {
    CdiSpecFacts::File f;
    f.path = loaded.file.string();
    const json& spec = loaded.spec;
    const std::string kind = spec.value("kind", std::string());
    f.version = spec.value("cdiVersion", std::string());
    f.needed = cdi::minimum_version(spec);
    if (spec.contains("containerEdits")) add_edits(f, kind, spec["containerEdits"]);
    for (const auto& device : spec.value("devices", json::array())) {
        const std::string name = kind + "=" + device.value("name", std::string());
        f.devices.push_back(name);
        if (device.contains("containerEdits")) add_edits(f, name, device["containerEdits"]);
    }
    return f;
}

// The version a driver file's path carries: "libcuda.so.550.54.15" and
// "/lib/firmware/nvidia/550.54.15/gsp.bin" -> "550.54.15"; "" for any other
// path (another vendor's library, a socket, a binary).
std::string driver_version_of(const fs::path& path) {
    const std::string name = path.filename().string();
    const bool nvidia = name.find("nvidia") != std::string::npos || name.starts_with("libcuda.") ||
                        name.starts_with("libnvcuvid.") || name.starts_with("libnvoptix.");
    if (const auto so = name.find(".so."); nvidia && so != std::string::npos) {
        const std::string version = name.substr(so + 4);
        if (node::detail::is_version(version) && version.find('.') != version.rfind('.'))
            return version;
    }
    const std::string p = path.string();
    if (const auto at = p.find("/firmware/nvidia/"); at != std::string::npos) {
        const std::string rest = p.substr(at + 17);
        const std::string version = rest.substr(0, rest.find('/'));
        if (node::detail::is_version(version)) return version;
    }
    return {};
}

bool registered(const CdiSpecFacts& f, unsigned major) {
    if (major == node::kNvidiaMajor) return true;  // listed as nvidia-frontend (or nvidia)
    for (const auto& [driver, m] : f.majors)
        if (m == major) return true;
    return false;
}

// What is wrong with one edit, and what mends it.
struct Problem {
    std::string text;
    enum class Remedy { SetupNodes, InstallHook, NewDriver, Regenerate } remedy;
};

std::optional<Problem> edit_problem(const CdiSpecFacts& f, const CdiSpecFacts::Edit& e) {
    using What = CdiSpecFacts::Edit::What;
    using Remedy = Problem::Remedy;
    const std::string at = e.device + ": " + e.path;
    if (e.path.empty())
        return Problem{e.device + ": an edit without a host path", Remedy::Regenerate};
    switch (e.what) {
        case What::Node: {
            const bool drivers = f.driver_nodes.contains(
                "/" + fs::path(e.path).lexically_relative(f.roots.dev).string());
            if (!e.now.exists())
                return drivers
                           ? Problem{at + ": missing", Remedy::SetupNodes}
                           : Problem{at + ": missing (the driver's procfs names no such device)",
                                     Remedy::Regenerate};
            if (e.now.type != FileFact::Type::CharDevice)
                return Problem{at + ": " + describe(e.now) + ", not a character device",
                               Remedy::Regenerate};
            if ((e.major && *e.major != e.now.major) || (e.minor && *e.minor != e.now.minor))
                return Problem{fmt::format("{}: {}, the spec says {}:{}", at, describe(e.now),
                                           e.major ? std::to_string(*e.major) : "*",
                                           e.minor ? std::to_string(*e.minor) : "*"),
                               Remedy::Regenerate};
            if (!registered(f, e.now.major))
                return Problem{fmt::format("{}: major {} is no driver's in {}", at, e.now.major,
                                           (f.roots.proc / "devices").string()),
                               Remedy::Regenerate};
            return std::nullopt;
        }
        case What::Mount: {
            const std::string version = driver_version_of(e.path);
            if (!version.empty() && !f.module_version.empty() && version != f.module_version)
                return Problem{
                    fmt::format("{}: of driver {}, the module is {}{}", at, version,
                                f.module_version, e.now.exists() ? "" : " (and it is gone)"),
                    Remedy::NewDriver};
            if (!e.now.exists()) return Problem{at + ": missing", Remedy::Regenerate};
            return std::nullopt;
        }
        case What::Hook:
            if (e.now.type != FileFact::Type::Regular || !e.now.executable)
                return Problem{at + ": the hook's program is " + describe(e.now),
                               Remedy::InstallHook};
            return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace

CdiSpecFacts gather_cdi_specs(const config::Config& config, const std::vector<fs::path>& files) {
    CdiSpecFacts f;
    f.roots = config.roots;
    try {
        f.module_version =
            node::detail::read_driver_version(config.roots.proc / "driver/nvidia/version");
        f.majors = node::detail::read_majors(config.roots.proc / "devices");
        for (auto& node : setup::driver_nodes(config.roots.proc, setup::NodeSet::All).nodes)
            f.driver_nodes.emplace(node.path, node.why);
    } catch (const util::Error&) {  // no driver: every node is judged by what is there
    }
    const cdi::Registry reg =
        files.empty() ? cdi::load_specs(config.cdi.spec_dirs) : cdi::load_spec_files(files);
    for (const auto& loaded : reg.specs) f.files.push_back(file_facts(loaded));
    for (const auto& r : reg.refused) {
        CdiSpecFacts::File file;
        file.path = r.file.string();
        file.refused = r.why;
        file.refused_content = r.content;
        f.files.push_back(std::move(file));
    }
    return f;
}

std::vector<Check> check_cdi_specs(const CdiSpecFacts& f) {
    // Which files define each device name.
    std::map<std::string, std::vector<std::string>> defined;
    for (const auto& file : f.files)
        for (const auto& name : file.devices) defined[name].push_back(file.path);

    std::vector<Check> checks;
    for (const auto& file : f.files) {
        if (!file.refused.empty()) {
            // What mends it: its content, or the file (its type, owner, mode).
            checks.push_back(
                {kCdiGroup,
                 file.path,
                 Verdict::Problem,
                 "no engine will use it",
                 {file.refused},
                 file.refused_content
                     ? "correct its content as the evidence says, or generate it again "
                       "(gpubind cdi generate, gpubind cdi refresh for the node's own specs; "
                       "nvidia-ctk cdi generate for NVIDIA's)"
                     : "write it again as a regular file owned by root and writable by "
                       "root alone (gpubind cdi refresh for the node's own specs)"});
            continue;
        }
        Check c{kCdiGroup, file.path, Verdict::Ok, {}, {}, {}};
        std::set<Problem::Remedy> remedies;
        bool twice = false, common = false;
        std::set<std::string> bad_devices;
        for (const auto& e : file.edits)
            if (auto p = edit_problem(f, e)) {
                remedies.insert(p->remedy);
                common = common || e.device.find('=') == std::string::npos;
                c.evidence.push_back(std::move(p->text));
                bad_devices.insert(e.device);
            }
        for (const auto& name : file.devices)
            for (const auto& other : defined[name])
                if (other != file.path) {
                    c.evidence.push_back(name + ": also defined in " + other);
                    bad_devices.insert(name);
                    twice = true;
                }
        if (c.evidence.empty()) {
            c.summary =
                fmt::format("{} devices, every node, mount and hook present", file.devices.size());
            if (cdi::version_index(file.version) >= 0 &&
                util::compare_versions(file.version, file.needed) > 0) {
                c.verdict = Verdict::Warning;
                c.evidence.push_back(fmt::format(
                    "cdiVersion {}: its features need only {}; an engine whose CDI library "
                    "predates {} refuses the file (Debian 12's podman 4.3 refuses 0.6.0)",
                    file.version, file.needed, file.version));
                c.fix = fmt::format("declare cdiVersion {}", file.needed);
            }
        } else {
            c.verdict = Verdict::Problem;
            c.summary = common ? fmt::format(
                                     "none of its {} devices can be given as the spec says (its "
                                     "common edits)",
                                     file.devices.size())
                               : fmt::format("{} of {} devices cannot be given as the spec says",
                                             bad_devices.size(), file.devices.size());
            using Remedy = Problem::Remedy;
            const bool setup = remedies.contains(Remedy::SetupNodes);
            const bool hook = remedies.contains(Remedy::InstallHook);
            std::vector<std::string> fixes;
            if (setup) fixes.emplace_back("gpubind setup --device-nodes --all");
            if (hook) fixes.emplace_back("install the hook's program where the spec says");
            if (remedies.contains(Remedy::NewDriver) || (!setup && !hook && !twice))
                fixes.emplace_back(
                    "regenerate it for this driver (gpubind cdi refresh; "
                    "nvidia-ctk cdi generate for NVIDIA's)");
            if (twice) fixes.emplace_back("keep each device name in one file");
            c.fix = fmt::format("{}", fmt::join(fixes, "; "));
        }
        checks.push_back(std::move(c));
    }
    if (checks.empty())
        checks.push_back({kCdiGroup, kCdiGroup, Verdict::Ok, "no CDI spec", {}, {}});
    return checks;
}

}  // namespace gpubind::doctor
