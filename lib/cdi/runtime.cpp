#include "gpubind/cdi/runtime.hpp"

#include "gpubind/decide/mps.hpp"

#include <algorithm>
#include <cerrno>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/decide/mps.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cdi {

namespace {

using nlohmann::json;

// The member `key` of `parent`, created as `empty` when absent; another type
// is an Error naming `where`.
json& edit_member(json& parent, const char* key, const json& empty, const std::string& where) {
    if (!parent.contains(key)) parent[key] = empty;
    json& m = parent[key];
    if (m.type() != empty.type())
        util::throw_invalid("edit spec", where,
                            fmt::format("is of type {}, not {}", m.type_name(), empty.type_name()));
    return m;
}

// Whether the spec gives the container a namespace of `type` (one with a
// path joins another's, which only the hook, seeing the process, can judge).
bool has_namespace(const json& spec, std::string_view type) {
    const auto linux = spec.find("linux");
    if (linux == spec.end() || !linux->is_object()) return false;
    const auto list = linux->find("namespaces");
    if (list == linux->end() || !list->is_array()) return false;
    return std::any_of(list->begin(), list->end(),
                       [&](const json& n) { return n.is_object() && n.value("type", "") == type; });
}

// Device nodes and their cgroup rules. In a user namespace runc cannot make a
// node: it binds the host's file at the container path, so where the dev
// root is not the host's /dev the bind from the node's file is in the spec.
void add_devices(json& spec, const decide::Plan& plan, bool user_ns) {
    json& linux = edit_member(spec, "linux", json::object(), "linux");
    json& devices = edit_member(linux, "devices", json::array(), "linux.devices");
    json& resources = edit_member(linux, "resources", json::object(), "linux.resources");
    json& rules = edit_member(resources, "devices", json::array(), "linux.resources.devices");
    std::set<std::pair<unsigned, unsigned>> ruled;
    for (const auto& d : plan.devices) {
        const node::DeviceNode& n = d.node;
        if (ruled.insert({n.major, n.minor}).second) {
            // Built member by member: an initializer list is copied element
            // by element (nlohmann's json_ref), several times the work.
            json rule(json::value_t::object);
            rule["allow"] = true;
            rule["type"] = "c";
            rule["major"] = n.major;
            rule["minor"] = n.minor;
            rule["access"] = "rw";
            rules.push_back(std::move(rule));
        }
        if (!d.bind) continue;
        bool present = false;
        for (const auto& e : devices) {
            if (!e.is_object()) continue;
            const auto path = e.find("path");
            if (path == e.end()) continue;
            if (!path->is_string())
                util::throw_invalid(
                    "edit spec", "linux.devices",
                    fmt::format("has a path of type {}, not string", path->type_name()));
            if (path->get_ref<const std::string&>() != n.path) continue;
            if (e.value("type", "") != "c" || e.value("major", json()) != json(n.major) ||
                e.value("minor", json()) != json(n.minor))
                throw util::Error(EEXIST, "edit spec", "linux.devices " + n.path,
                                  fmt::format("the spec already has another device there, not the "
                                              "character device {}:{} ({})",
                                              n.major, n.minor, d.why));
            present = true;
        }
        if (present) continue;
        if (user_ns && n.host_path != n.path) {
            json& mounts = edit_member(spec, "mounts", json::array(), "mounts");
            for (const auto& m : mounts)
                if (m.is_object() && m.contains("destination") && m["destination"].is_string() &&
                    util::normal_path("/" + m["destination"].get_ref<const std::string&>()) ==
                        util::normal_path(n.path))
                    throw util::Error(EEXIST, "edit spec", "mounts " + n.path,
                                      "the spec already mounts something there; refusing to bind " +
                                          n.host_path + " (" + d.why + ") over it");
            mounts.push_back({{"destination", n.path},
                              {"type", "bind"},
                              {"source", n.host_path},
                              {"options", {"bind", "nosuid", "noexec"}}});
            continue;
        }
        json device(json::value_t::object);
        device["path"] = n.path;
        device["type"] = "c";
        device["major"] = n.major;
        device["minor"] = n.minor;
        device["fileMode"] = static_cast<unsigned>(n.mode & 0777);
        device["uid"] = 0;
        device["gid"] = 0;
        devices.push_back(std::move(device));
    }
}

// Whether the normal path `inner` is `outer` or lies below it.
bool within(std::string_view inner, std::string_view outer) {
    if (!inner.starts_with(outer)) return false;
    return inner.size() == outer.size() || outer == "/" || inner[outer.size()] == '/';
}

// The planned mounts against the spec's own, before the runtime runs: the
// finish hook makes every one of them (resolving each target by descriptor in
// the rootfs, on the rootfs's own mount or a tmpfs the runtime made fresh),
// so what the hook would refuse is refused here, with nothing done yet: a
// target where the spec mounts something already, one in a volume of the
// spec (a host directory: runc would make mount points in it, and with shared
// propagation the driver's files would stay in the host's mount table), and
// any target when the rootfs's propagation is shared.
void check_mounts(const decide::oci::Spec& spec, const decide::Plan& plan) {
    if (plan.mounts.empty()) return;
    if (const auto& p = spec.rootfs_propagation; p == "shared" || p == "rshared")
        throw util::Error(
            EXDEV, "refuse", "linux.rootfsPropagation " + p,
            "the rootfs is on a shared mount: what gpubind mounts there would propagate "
            "to its peers, the host's mount table among them");
    const std::vector<std::string> fresh = spec.fresh_tmpfs();
    std::vector<std::string> dests;  // normal, in the spec's order
    dests.reserve(spec.mounts.size());
    for (const auto& m : spec.mounts) dests.push_back(util::normal_path("/" + m.destination));
    for (const auto& m : plan.mounts) {
        const std::string target = util::normal_path(m.target);
        // The last mount at or above the target is what it lands on.
        for (std::size_t i = dests.size(); i-- > 0;) {
            if (!within(target, dests[i])) continue;
            if (dests[i] == target)
                throw util::Error(EEXIST, "edit spec", "mounts " + m.target,
                                  "the spec already mounts something there; refusing to mount " +
                                      m.source + " (" + m.why + ") over it");
            if (std::find(fresh.begin(), fresh.end(), dests[i]) == fresh.end())
                throw util::Error(
                    EXDEV, "refuse", m.target,
                    fmt::format("is on another mount than the container's root (the "
                                "spec's {} mount at {}, a volume); gpubind creates and "
                                "mounts only on the rootfs's own mount",
                                spec.mounts[i].type.empty() ? "bind" : spec.mounts[i].type,
                                dests[i]));
            break;
        }
    }
}

}  // namespace

std::vector<std::string> mount_options(unsigned flags) {
    std::vector<std::string> out = {"rbind"};
    if (flags & util::kMountReadOnly) out.emplace_back("ro");
    if (flags & util::kMountNoSuid) out.emplace_back("nosuid");
    if (flags & util::kMountNoDev) out.emplace_back("nodev");
    if (flags & util::kMountNoExec) out.emplace_back("noexec");
    return out;
}

bool marked(const json& spec) {
    if (!spec.is_object()) return false;
    const auto hooks = spec.find("hooks");
    if (hooks == spec.end() || !hooks->is_object()) return false;
    const auto list = hooks->find("createRuntime");
    if (list == hooks->end() || !list->is_array()) return false;
    return std::any_of(list->begin(), list->end(), [](const json& h) {
        if (!h.is_object()) return false;
        const auto args = h.find("args");
        return args != h.end() && args->is_array() && args->size() == 2 &&
               (*args)[0] == "gpubind-hook" && (*args)[1] == kFinishStage;
    });
}

json edit_spec(json spec, const decide::oci::Spec& facts, const decide::Plan& plan,
               const FinishHook& hook) {
    if (!spec.is_object()) util::throw_invalid("edit spec", "config.json", "is not a JSON object");
    if (marked(spec))
        util::throw_invalid("edit spec", "config.json", "already edited by gpubind-runtime");
    if (!has_namespace(spec, "mount"))
        throw util::Error(EPERM, "edit spec", "linux.namespaces",
                          "the container shares this process's mount namespace (no \"mount\" "
                          "namespace in the spec); refusing");
    // An MPS share's /dev/shm (decide/mps.hpp): the spec's own /dev/shm
    // becomes a bind of the GPU's shm directory, the one its daemon uses.
    decide::Plan checked = plan;
    const auto shm = std::find_if(
        plan.mounts.begin(), plan.mounts.end(),
        [](const decide::PlannedMount& m) { return m.target == decide::kMpsShmTarget; });
    if (shm != plan.mounts.end()) {
        std::erase_if(checked.mounts, [](const decide::PlannedMount& m) {
            return m.target == decide::kMpsShmTarget;
        });
        json& mounts = edit_member(spec, "mounts", json::array(), "mounts");
        json kept = json::array();
        for (auto& m : mounts)
            if (!(m.is_object() && m.contains("destination") && m["destination"].is_string() &&
                  util::normal_path(m["destination"].get<std::string>()) == decide::kMpsShmTarget))
                kept.push_back(std::move(m));
        kept.push_back({{"destination", decide::kMpsShmTarget},
                        {"type", "bind"},
                        {"source", shm->source},
                        {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}});
        mounts = std::move(kept);
    }
    check_mounts(facts, checked);
    add_devices(spec, plan, has_namespace(spec, "user"));
    if (!plan.env.empty()) {
        // Each variable replaces the entries of its name, or is added.
        json& process = edit_member(spec, "process", json::object(), "process");
        json& env = edit_member(process, "env", json::array(), "process.env");
        for (const auto& entry : plan.env) {
            const std::string name = entry.substr(0, entry.find('='));
            bool replaced = false;
            for (auto& e : env)
                if (e.is_string() &&
                    e.get<std::string>().substr(0, e.get<std::string>().find('=')) == name) {
                    e = entry;
                    replaced = true;
                }
            if (!replaced) env.push_back(entry);
        }
    }
    json& hooks = edit_member(spec, "hooks", json::object(), "hooks");
    edit_member(hooks, "createRuntime", json::array(), "hooks.createRuntime")
        .push_back({{"path", hook.path.string()},
                    {"args", {"gpubind-hook", std::string(kFinishStage)}},
                    {"env", hook.env}});
    if (hook.poststop)
        edit_member(hooks, "poststop", json::array(), "hooks.poststop")
            .push_back({{"path", hook.path.string()},
                        {"args", {"gpubind-hook", "poststop"}},
                        {"env", hook.env}});
    return spec;
}

decide::Plan finish_plan(decide::Plan plan) {
    plan.devices.clear();
    plan.mounts.clear();
    return plan;
}

decide::Plan edited_finish_plan(decide::Plan plan) {
    plan.devices.clear();
    // An MPS share's /dev/shm is the spec's own mount (edit_spec).
    std::erase_if(plan.mounts,
                  [](const decide::PlannedMount& m) { return m.target == decide::kMpsShmTarget; });
    return plan;
}

}  // namespace gpubind::cdi
