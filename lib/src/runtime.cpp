#include "gpubind/runtime.hpp"

#include <cerrno>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "gpubind/error.hpp"
#include "gpubind/strings.hpp"

namespace gpubind::runtime {

namespace {

using nlohmann::json;

// The member `key` of `parent`, created as `empty` when absent; another type
// is an Error naming `where`.
json& member(json& parent, const char* key, const json& empty, const std::string& where) {
    if (!parent.contains(key)) parent[key] = empty;
    json& m = parent[key];
    if (m.type() != empty.type())
        throw_invalid("edit spec", where,
                      fmt::format("is of type {}, not {}", m.type_name(), empty.type_name()));
    return m;
}

void add_devices(json& linux, const Plan& plan) {
    json& devices = member(linux, "devices", json::array(), "linux.devices");
    json& resources = member(linux, "resources", json::object(), "linux.resources");
    json& rules = member(resources, "devices", json::array(), "linux.resources.devices");
    std::set<std::pair<unsigned, unsigned>> ruled;
    for (const auto& d : plan.devices) {
        const DeviceNode& n = d.node;
        if (ruled.insert({n.major, n.minor}).second)
            rules.push_back({{"allow", true},
                             {"type", "c"},
                             {"major", n.major},
                             {"minor", n.minor},
                             {"access", "rw"}});
        if (!d.bind) continue;
        bool present = false;
        for (const auto& e : devices) {
            if (!e.is_object() || e.value("path", "") != n.path) continue;
            if (e.value("type", "") != "c" || e.value("major", json()) != json(n.major) ||
                e.value("minor", json()) != json(n.minor))
                throw Error(EEXIST, "edit spec", "linux.devices " + n.path,
                            fmt::format("the spec already has another device there, not the "
                                        "character device {}:{} ({})",
                                        n.major, n.minor, d.why));
            present = true;
        }
        if (present) continue;
        devices.push_back({{"path", n.path},
                           {"type", "c"},
                           {"major", n.major},
                           {"minor", n.minor},
                           {"fileMode", static_cast<unsigned>(n.mode & 0777)},
                           {"uid", 0},
                           {"gid", 0}});
    }
}

// The destinations of the spec's mounts, normalised; a relative one below
// "/", as the runtime takes it.
std::vector<std::string> destinations(const json& spec) {
    std::vector<std::string> out;
    const auto mounts = spec.is_object() ? spec.find("mounts") : spec.end();
    if (mounts == spec.end() || !mounts->is_array()) return out;
    for (const auto& m : *mounts)
        if (m.is_object() && m.contains("destination") && m["destination"].is_string())
            out.push_back(normal_path("/" + m["destination"].get_ref<const std::string&>()));
    return out;
}

// Whether the normal path `inner` is `outer` or lies below it.
bool within(std::string_view inner, std::string_view outer) {
    if (!inner.starts_with(outer)) return false;
    return inner.size() == outer.size() || outer == "/" || inner[outer.size()] == '/';
}

// Whether a mount of the spec (`dests`) covers the planned mount, whose
// target is `target` normalised.
bool runtime_mounts_at(const PlannedMount& m, std::string_view target,
                       const std::vector<std::string>& dests) {
    for (const auto& d : dests)
        if (within(target, d) || (m.directory && within(d, target))) return true;
    return false;
}

void add_mounts(json& spec, const Plan& plan) {
    const std::vector<std::string> dests = destinations(spec);
    json& mounts = member(spec, "mounts", json::array(), "mounts");
    const std::set<std::string_view> taken(dests.begin(), dests.end());
    for (const auto& m : plan.mounts) {
        const std::string target = normal_path(m.target);
        if (taken.contains(target))
            throw Error(EEXIST, "edit spec", "mounts " + m.target,
                        "the spec already mounts something there; refusing to mount " + m.source +
                            " (" + m.why + ") over it");
        if (!runtime_mounts_at(m, target, dests)) continue;  // the finish hook's
        mounts.push_back({{"destination", m.target},
                          {"type", "bind"},
                          {"source", m.source},
                          {"options", mount_options(m.flags)}});
    }
}

}  // namespace

std::vector<std::string> mount_options(unsigned flags) {
    std::vector<std::string> out = {"rbind"};
    if (flags & kMountReadOnly) out.emplace_back("ro");
    if (flags & kMountNoSuid) out.emplace_back("nosuid");
    if (flags & kMountNoDev) out.emplace_back("nodev");
    if (flags & kMountNoExec) out.emplace_back("noexec");
    return out;
}

bool marked(const json& spec) {
    if (!spec.is_object()) return false;
    auto a = spec.find("annotations");
    if (a == spec.end() || !a->is_object()) return false;
    auto m = a->find(std::string(kMarkAnnotation));
    return m != a->end() && m->is_string() && m->get<std::string>() == kMarkValue;
}

json edit_spec(const json& spec, const Plan& plan, const FinishHook& hook) {
    if (!spec.is_object()) throw_invalid("edit spec", "config.json", "is not a JSON object");
    if (marked(spec))
        throw_invalid("edit spec", "config.json", "already edited by gpubind-runtime");
    json out = spec;
    add_devices(member(out, "linux", json::object(), "linux"), plan);
    add_mounts(out, plan);
    json& hooks = member(out, "hooks", json::object(), "hooks");
    member(hooks, "createRuntime", json::array(), "hooks.createRuntime")
        .push_back({{"path", hook.path.string()},
                    {"args", {"gpubind-hook", std::string(kFinishStage)}},
                    {"env", hook.env}});
    member(out, "annotations", json::object(), "annotations")[std::string(kMarkAnnotation)] =
        std::string(kMarkValue);
    return out;
}

bool runtime_mounts(const PlannedMount& m, const json& spec) {
    return runtime_mounts_at(m, normal_path(m.target), destinations(spec));
}

Plan finish_plan(Plan plan) {
    plan.devices.clear();
    plan.mounts.clear();
    return plan;
}

Plan finish_plan(Plan plan, const json& spec) {
    const std::vector<std::string> dests = destinations(spec);
    plan.devices.clear();
    std::erase_if(plan.mounts, [&](const PlannedMount& m) {
        return runtime_mounts_at(m, normal_path(m.target), dests);
    });
    return plan;
}

}  // namespace gpubind::runtime
