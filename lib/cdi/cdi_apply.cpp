// Applying the named CDI devices of the node's specs to an OCI spec for
// gpubind-runtime (rules in cdi.hpp); reading and validating the specs is
// cdi_spec.cpp, what a container asks for cdi_requests.cpp. Needs no node:
// the fuzzer builds it alone.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/version.hpp"

namespace gpubind::cdi {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// --- applying ---

std::string env_name(const std::string& entry) {
    return entry.substr(0, entry.find('='));
}

json& member(json& parent, const char* key, const json& empty, const std::string& where) {
    if (!parent.contains(key) || parent[key].is_null()) parent[key] = empty;
    json& m = parent[key];
    if (m.type() != empty.type())
        util::throw_invalid("apply CDI device", where,
                            fmt::format("is of type {}, not {}", m.type_name(), empty.type_name()));
    return m;
}

// A path compared with others: lexically normal, without a trailing '/'.
std::string normal(const std::string& p) {
    return util::normal_path(p);
}

// A device node with its type and numbers, read from the host node (never
// followed) when the spec leaves them out.
json complete_node(json d, const std::string& device) {
    const bool has_numbers = d.contains("major") && d.contains("minor");
    const std::string type = d.value("type", "");
    if (!type.empty() && (type == "p" || has_numbers)) return d;
    const std::string host = d.value("hostPath", d["path"].get<std::string>());
    struct stat st {};
    if (::lstat(host.c_str(), &st) != 0)
        util::throw_errno("apply CDI device " + device + ": stat", host);
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode) && !S_ISFIFO(st.st_mode))
        throw util::Error(EINVAL, "apply CDI device", device, host + " is not a device node");
    d["type"] = S_ISCHR(st.st_mode) ? "c" : S_ISBLK(st.st_mode) ? "b" : "p";
    if (!S_ISFIFO(st.st_mode)) {
        d["major"] = ::major(st.st_rdev);
        d["minor"] = ::minor(st.st_rdev);
    }
    if (!d.contains("fileMode")) d["fileMode"] = static_cast<unsigned>(st.st_mode & 0777);
    return d;
}

// The edits of the requested devices gathered, checked against each other;
// each kind of edit indexed by what two edits may not differ in.
struct Gathered {
    std::vector<std::string> env;
    std::unordered_map<std::string, std::size_t> env_at;   // name -> env[i]
    std::vector<std::pair<json, std::string>> nodes;       // node, device name
    std::vector<std::string> node_paths;                   // nodes[i]'s path, normal
    std::unordered_map<std::string, std::size_t> node_at;  // node_paths[i] -> i
    std::vector<std::pair<json, std::string>> mounts;
    std::vector<std::string> mount_paths;  // mounts[i]'s containerPath, normal
    std::unordered_map<std::string, std::size_t> mount_at;
    std::vector<json> hooks;
    std::unordered_set<std::string> hook_texts;  // hooks, dumped
    std::vector<std::uint32_t> gids;
    std::unordered_set<std::uint32_t> gid_set;
};

void gather(Gathered& g, const json& edits, const std::string& device) {
    if (!edits.is_object()) return;
    if (edits.contains("env"))
        for (const auto& e : edits["env"]) {
            const std::string entry = e.get<std::string>();
            const auto [at, added] = g.env_at.try_emplace(env_name(entry), g.env.size());
            if (added) {
                g.env.push_back(entry);
            } else if (g.env[at->second] != entry) {
                throw util::Error(EEXIST, "apply CDI device", device,
                                  fmt::format("conflict: {} and {} set by the requested devices",
                                              g.env[at->second], entry));
            }
        }
    if (edits.contains("deviceNodes"))
        for (const auto& d : edits["deviceNodes"]) {
            json node = complete_node(d, device);
            std::string path = normal(node["path"]);
            const auto [at, added] = g.node_at.try_emplace(path, g.nodes.size());
            if (!added) {
                const auto& [have, who] = g.nodes[at->second];
                if (have.value("hostPath", have["path"].get<std::string>()) !=
                        node.value("hostPath", node["path"].get<std::string>()) ||
                    have.value("type", "") != node.value("type", "") ||
                    have.value("major", 0u) != node.value("major", 0u) ||
                    have.value("minor", 0u) != node.value("minor", 0u))
                    throw util::Error(EEXIST, "apply CDI device", device,
                                      fmt::format("conflict: device {} differs from {}'s",
                                                  node["path"].get<std::string>(), who));
                continue;
            }
            g.nodes.emplace_back(std::move(node), device);
            g.node_paths.push_back(std::move(path));
        }
    if (edits.contains("mounts"))
        for (const auto& m : edits["mounts"]) {
            std::string path = normal(m["containerPath"]);
            const auto [at, added] = g.mount_at.try_emplace(path, g.mounts.size());
            if (!added) {
                const auto& [have, who] = g.mounts[at->second];
                if (have != m)
                    throw util::Error(EEXIST, "apply CDI device", device,
                                      fmt::format("conflict: mount at {} differs from {}'s",
                                                  m["containerPath"].get<std::string>(), who));
                continue;
            }
            g.mounts.emplace_back(m, device);
            g.mount_paths.push_back(std::move(path));
        }
    if (edits.contains("hooks"))
        for (const auto& h : edits["hooks"])
            if (g.hook_texts.insert(h.dump()).second) g.hooks.push_back(h);
    if (edits.contains("additionalGids"))
        for (const auto& gid : edits["additionalGids"]) {
            const auto v = gid.get<std::uint32_t>();
            if (v != 0 && g.gid_set.insert(v).second) g.gids.push_back(v);
        }
}

// The positions of a JSON list's entries by a key of each (entries without
// one are not indexed).
template <typename Key>
std::unordered_map<std::string, std::vector<std::size_t>> index_by(const json& list, Key&& key) {
    std::unordered_map<std::string, std::vector<std::size_t>> out;
    for (std::size_t i = 0; i < list.size(); ++i)
        if (auto k = key(list[i])) out[*k].push_back(i);
    return out;
}

// The number of parts of a normal path ("/" and "": none).
std::size_t depth(std::string_view path) {
    std::size_t n = 0;
    for (const std::string_view part : util::split(path, '/'))
        if (!part.empty()) ++n;
    return n;
}

// A qualified name's definitions: each spec that defines it, with its device.
using DefinedDevices =
    std::unordered_map<std::string, std::vector<std::pair<const LoadedSpec*, const json*>>>;

// Every device of every spec by its qualified name, once: a request of
// many names costs a lookup each, not a pass over the node's specs.
DefinedDevices index_devices(const Registry& registry) {
    DefinedDevices defined;
    for (const auto& s : registry.specs)
        for (const auto& d : s.spec["devices"])
            defined[s.spec["kind"].get<std::string>() + "=" + d["name"].get<std::string>()]
                .emplace_back(&s, &d);
    return defined;
}

// The spec and the device a requested name resolves to: the highest priority
// wins; two at that priority conflict.
std::pair<const LoadedSpec*, const json*> resolve(const std::string& name,
                                                  const DefinedDevices& defined,
                                                  const Registry& registry) {
    const auto q = util::parse_qualified(name);
    if (!q)
        util::throw_invalid("apply CDI device", name, "not a CDI device name (vendor/class=name)");
    const LoadedSpec* best = nullptr;
    const json* best_device = nullptr;
    if (const auto it = defined.find(q->text()); it != defined.end())
        for (const auto& [s, d] : it->second) {
            if (best && best->priority == s->priority)
                throw util::Error(EEXIST, "apply CDI device", name,
                                  fmt::format("conflict: defined by {} and {}", best->file.string(),
                                              s->file.string()));
            if (!best || s->priority > best->priority) {
                best = s;
                best_device = d;
            }
        }
    if (!best) {
        std::string refused;
        for (const auto& r : registry.refused) refused += (refused.empty() ? "" : "; ") + r.why;
        throw util::Error(ENOENT, "apply CDI device", name,
                          refused.empty() ? "no CDI spec on this node defines it"
                                          : "no valid CDI spec defines it (" + refused + ")");
    }
    return {best, best_device};
}

// The edits of the requested devices: each name resolved, the common edits
// of its spec (once a spec) and its own gathered.
Gathered gather_requested(const std::vector<std::string>& devices, const Registry& registry) {
    const DefinedDevices defined = index_devices(registry);
    Gathered g;
    std::set<const LoadedSpec*> common_done;
    for (const auto& name : devices) {
        const auto [best, best_device] = resolve(name, defined, registry);
        if (common_done.insert(best).second && best->spec.contains("containerEdits"))
            gather(g, best->spec["containerEdits"], name);
        if (best_device->contains("containerEdits"))
            gather(g, (*best_device)["containerEdits"], name);
        util::logger().info("CDI device {} from {}", name, best->file.string());
    }
    return g;
}

// The gathered variables in process.env: each replaces the entries of its
// name, or is added at the end.
void apply_env(json& process, const Gathered& g) {
    json& env = member(process, "env", json::array(), "process.env");
    const auto at = index_by(env, [](const json& e) -> std::optional<std::string> {
        if (!e.is_string()) return std::nullopt;
        return env_name(e.get<std::string>());
    });
    for (const auto& entry : g.env) {
        const auto it = at.find(env_name(entry));
        if (it == at.end()) {
            env.push_back(entry);
            continue;
        }
        for (const std::size_t i : it->second) env[i] = entry;
    }
}

// `entry` added at the end of `list` unless the entries at its place (the
// indices `same_place`, kept up to date) have it already; one there that
// `differs` from it is a conflict (`who` asked for it; the container's spec
// already `has` something else at `place`). Returns whether it was added.
template <typename Differs>
bool add_once(json& list, std::vector<std::size_t>& same_place, const json& entry,
              Differs&& differs, const std::string& who, std::string_view has,
              const std::string& place) {
    bool present = false;
    for (const std::size_t i : same_place) {
        if (differs(list[i]))
            throw util::Error(
                EEXIST, "apply CDI device", who,
                fmt::format("conflict: the container's spec already {} at {}", has, place));
        present = true;
    }
    if (present) return false;
    same_place.push_back(list.size());
    list.push_back(entry);
    return true;
}

// A gathered device node as linux.devices lists it: ids it leaves out are
// those of the process's user, when not root.
json oci_node(const json& d, const json& user) {
    json oci = {{"path", d["path"]}, {"type", d["type"]}};
    if (d.contains("major")) oci["major"] = d["major"];
    if (d.contains("minor")) oci["minor"] = d["minor"];
    if (d.contains("fileMode")) oci["fileMode"] = d["fileMode"];
    if (d.contains("uid"))
        oci["uid"] = d["uid"];
    else if (user.value("uid", 0u) > 0)
        oci["uid"] = user["uid"];
    if (d.contains("gid"))
        oci["gid"] = d["gid"];
    else if (user.value("gid", 0u) > 0)
        oci["gid"] = user["gid"];
    return oci;
}

// The gathered device nodes in linux.devices (one already at the same path
// must be the same device), each character or block device allowed by a
// rule of linux.resources.devices.
void apply_nodes(json& out, const Gathered& g, const json& user) {
    json& linux = member(out, "linux", json::object(), "linux");
    json& list = member(linux, "devices", json::array(), "linux.devices");
    json& resources = member(linux, "resources", json::object(), "linux.resources");
    json& rules = member(resources, "devices", json::array(), "linux.resources.devices");
    // The spec's devices by their paths, normal.
    auto listed = index_by(list, [](const json& e) -> std::optional<std::string> {
        if (!e.is_object() || !e.contains("path") || !e["path"].is_string()) return std::nullopt;
        return normal(e["path"]);
    });
    std::unordered_set<std::string> ruled;  // the rules, dumped
    for (const auto& r : rules) ruled.insert(r.dump());
    for (std::size_t n = 0; n < g.nodes.size(); ++n) {
        const auto& [d, who] = g.nodes[n];
        const json oci = oci_node(d, user);
        add_once(
            list, listed[g.node_paths[n]], oci,
            [&](const json& e) {
                return e.value("type", "") != oci["type"] ||
                       e.value("major", json()) != oci.value("major", json()) ||
                       e.value("minor", json()) != oci.value("minor", json());
            },
            who, "has another device", d["path"].get<std::string>());
        const std::string type = d["type"];
        if (type == "c" || type == "b") {
            std::string access = d.value("permissions", "");
            if (access.empty()) access = "rwm";
            if (access == "none") access.clear();
            json rule = {{"allow", true},
                         {"type", type},
                         {"major", d["major"]},
                         {"minor", d["minor"]},
                         {"access", access}};
            if (ruled.insert(rule.dump()).second) rules.push_back(std::move(rule));
        }
    }
}

// The mounts sorted by depth (of their normal `destinations`), each
// destination's depth counted once; equal depths keep their order.
void sort_by_depth(json& mounts, const std::vector<std::string>& destinations) {
    std::vector<std::pair<std::size_t, json>> by_depth;
    by_depth.reserve(mounts.size());
    for (std::size_t i = 0; i < mounts.size(); ++i)
        by_depth.emplace_back(depth(destinations[i]), std::move(mounts[i]));
    std::stable_sort(by_depth.begin(), by_depth.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < mounts.size(); ++i) mounts[i] = std::move(by_depth[i].second);
}

// The gathered mounts in the spec's mounts (one already at the same
// destination must have the same source), then all sorted by depth.
void apply_mounts(json& out, const Gathered& g) {
    json& mounts = member(out, "mounts", json::array(), "mounts");
    // The destinations of the spec's mounts, normal, each once.
    std::vector<std::string> destinations;
    for (const auto& e : mounts)
        destinations.push_back(e.is_object() && e.contains("destination") &&
                                       e["destination"].is_string()
                                   ? normal(e["destination"])
                                   : std::string());
    std::unordered_map<std::string, std::vector<std::size_t>> at_destination;
    for (std::size_t i = 0; i < destinations.size(); ++i)
        if (!destinations[i].empty()) at_destination[destinations[i]].push_back(i);
    for (std::size_t n = 0; n < g.mounts.size(); ++n) {
        const auto& [m, who] = g.mounts[n];
        json oci = {{"destination", m["containerPath"]}, {"source", m["hostPath"]}};
        if (m.contains("type")) oci["type"] = m["type"];
        oci["options"] = m.value("options", json::array());
        if (add_once(
                mounts, at_destination[g.mount_paths[n]], oci,
                [&](const json& e) { return e.value("source", json()) != oci["source"]; }, who,
                "mounts something else", m["containerPath"].get<std::string>()))
            destinations.push_back(g.mount_paths[n]);
    }
    sort_by_depth(mounts, destinations);
}

// The gathered hooks in the spec's hooks by stage, each once.
void apply_hooks(json& out, const Gathered& g) {
    json& hooks = member(out, "hooks", json::object(), "hooks");
    std::unordered_map<std::string, std::unordered_set<std::string>> have;  // stage -> dumped
    for (const auto& h : g.hooks) {
        const std::string stage = h["hookName"];
        json& list = member(hooks, stage.c_str(), json::array(), "hooks." + stage);
        auto [there, fresh] = have.try_emplace(stage);
        if (fresh)
            for (const auto& e : list) there->second.insert(e.dump());
        json oci = {{"path", h["path"]}};
        for (const char* k : {"args", "env", "timeout"})
            if (h.contains(k)) oci[k] = h[k];
        if (there->second.insert(oci.dump()).second) list.push_back(std::move(oci));
    }
}

// The gathered group ids in process.user.additionalGids, each once.
void apply_gids(json& process, const Gathered& g) {
    json& u = member(process, "user", json::object(), "process.user");
    json& gids = member(u, "additionalGids", json::array(), "process.user.additionalGids");
    std::unordered_set<std::string> had;
    for (const auto& e : gids) had.insert(e.dump());
    for (auto gid : g.gids)
        if (had.insert(json(gid).dump()).second) gids.push_back(gid);
}

}  // namespace

json apply(json spec, const std::vector<std::string>& devices, const Registry& registry) {
    if (!spec.is_object())
        util::throw_invalid("apply CDI device", "config.json", "is not a JSON object");
    if (devices.size() > kMaxRequestNames)
        throw util::Error(
            util::ErrorKind::Invalid, E2BIG, "apply CDI device", "config.json",
            fmt::format("{} CDI devices, more than {}; refused", devices.size(), kMaxRequestNames));
    const Gathered g = gather_requested(devices, registry);

    json out = std::move(spec);
    json& process = member(out, "process", json::object(), "process");
    if (!g.env.empty()) apply_env(process, g);
    const json user =
        process.contains("user") && process["user"].is_object() ? process["user"] : json::object();
    if (!g.nodes.empty()) apply_nodes(out, g, user);
    if (!g.mounts.empty()) apply_mounts(out, g);
    if (!g.hooks.empty()) apply_hooks(out, g);
    if (!g.gids.empty()) apply_gids(process, g);
    member(out, "annotations", json::object(), "annotations")[std::string(kAppliedAnnotation)] =
        "applied";
    return out;
}

}  // namespace gpubind::cdi
