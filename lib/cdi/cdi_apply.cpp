// CDI specs for gpubind-runtime: the cdiVersion rule, reading the node's CDI
// specs (every vendor's) as hostile input, and applying the named devices to
// an OCI spec (rules in cdi.hpp); what a container asks for is
// cdi_requests.cpp. Needs no node: the fuzzer builds it alone.
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

bool non_empty(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && !it->is_null() && !(it->is_structured() && it->empty()) &&
           !(it->is_string() && it->get_ref<const std::string&>().empty());
}

// --- validation ---

class Checker {
  public:
    explicit Checker(std::string what) : what_(std::move(what)) {}

    [[noreturn]] void fail(const std::string& where, const std::string& why) const {
        util::throw_invalid("read CDI spec", what_, where.empty() ? why : where + ": " + why);
    }

    void keys(const json& obj, const std::string& where, std::initializer_list<std::string_view> ok,
              std::initializer_list<std::string_view> unsupported = {}) const {
        if (!obj.is_object()) fail(where, "is not an object");
        for (auto it = obj.begin(); it != obj.end(); ++it) {
            if (std::find(unsupported.begin(), unsupported.end(), it.key()) != unsupported.end())
                fail(where, "\"" + it.key() + "\" is not supported by gpubind-runtime");
            if (std::find(ok.begin(), ok.end(), it.key()) == ok.end())
                fail(where, "unknown field \"" + it.key() + "\"");
        }
    }

    const std::string& string(const json& v, const std::string& where) const {
        if (!v.is_string()) fail(where, "is not a string");
        const auto& s = v.get_ref<const std::string&>();
        if (s.find('\0') != std::string::npos) fail(where, "holds a NUL character");
        return s;
    }

    std::string path(const json& v, const std::string& where) const {
        const std::string& s = string(v, where);
        if (s.empty() || s.front() != '/') fail(where, "'" + s + "' is not an absolute path");
        for (const auto& part : fs::path(s))
            if (part == "..") fail(where, "'" + s + "' holds \"..\"");
        return s;
    }

    void strings(const json& v, const std::string& where) const {
        if (!v.is_array()) fail(where, "is not a list of strings");
        for (std::size_t i = 0; i < v.size(); ++i) string(v[i], fmt::format("{}[{}]", where, i));
    }

    void env(const json& v, const std::string& where) const {
        strings(v, where);
        for (std::size_t i = 0; i < v.size(); ++i) {
            const auto& e = v[i].get_ref<const std::string&>();
            const auto eq = e.find('=');
            if (eq == std::string::npos || eq == 0)
                fail(fmt::format("{}[{}]", where, i), "'" + e + "' is not NAME=VALUE");
        }
    }

    void number(const json& v, const std::string& where, std::uint64_t max) const {
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<std::uint64_t>() > max)
            fail(where, fmt::format("is not a number from 0 to {}", max));
    }

    void annotations(const json& v, const std::string& where) const {
        if (!v.is_object()) fail(where, "is not an object");
        for (auto it = v.begin(); it != v.end(); ++it) string(*it, where + "." + it.key());
    }

    // check(item, where) for each item of the list e[key], when there is one.
    template <typename F>
    void each(const json& e, const char* key, const std::string& where, F&& check) const {
        if (!e.contains(key)) return;
        const json& list = e[key];
        if (!list.is_array()) fail(where + "." + key, "is not a list");
        for (std::size_t i = 0; i < list.size(); ++i)
            check(list[i], fmt::format("{}.{}[{}]", where, key, i));
    }

    void edits(const json& e, const std::string& where) const {
        keys(e, where, {"env", "deviceNodes", "hooks", "mounts", "additionalGids"},
             {"intelRdt", "netDevices"});
        if (e.contains("env")) env(e["env"], where + ".env");
        each(e, "deviceNodes", where,
             [&](const json& v, const std::string& w) { device_node(v, w); });
        each(e, "mounts", where, [&](const json& v, const std::string& w) { mount(v, w); });
        each(e, "hooks", where, [&](const json& v, const std::string& w) { hook(v, w); });
        each(e, "additionalGids", where,
             [&](const json& v, const std::string& w) { number(v, w, 0xffffffffu); });
    }

    void device_node(const json& d, const std::string& where) const {
        keys(d, where,
             {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid",
              "gid"});
        if (!d.contains("path")) fail(where, "has no path");
        const std::string p = path(d["path"], where + ".path");
        if (!util::normal_path(p).starts_with("/dev/"))
            fail(where + ".path", "'" + p + "' is not under /dev");
        if (d.contains("hostPath")) path(d["hostPath"], where + ".hostPath");
        if (d.contains("type")) {
            const std::string& t = string(d["type"], where + ".type");
            if (t != "" && t != "c" && t != "b" && t != "u" && t != "p")
                fail(where + ".type", "'" + t + "' is not c, b, u or p");
        }
        if (d.contains("major")) number(d["major"], where + ".major", 0xfffff);
        if (d.contains("minor")) number(d["minor"], where + ".minor", 0xfffff);
        if (d.contains("fileMode")) number(d["fileMode"], where + ".fileMode", 07777);
        if (d.contains("uid")) number(d["uid"], where + ".uid", 0xfffffffeu);
        if (d.contains("gid")) number(d["gid"], where + ".gid", 0xfffffffeu);
        if (d.contains("permissions")) {
            const std::string& p2 = string(d["permissions"], where + ".permissions");
            if (p2 != "none" && p2.find_first_not_of("rwm") != std::string::npos)
                fail(where + ".permissions", "'" + p2 + "' is not made of r, w, m (or none)");
        }
    }

    void mount(const json& m, const std::string& where) const {
        keys(m, where, {"hostPath", "containerPath", "options", "type"});
        if (!m.contains("hostPath")) fail(where, "has no hostPath");
        if (!m.contains("containerPath")) fail(where, "has no containerPath");
        path(m["hostPath"], where + ".hostPath");
        path(m["containerPath"], where + ".containerPath");
        if (m.contains("options")) strings(m["options"], where + ".options");
        if (m.contains("type")) string(m["type"], where + ".type");
    }

    void hook(const json& h, const std::string& where) const {
        keys(h, where, {"hookName", "path", "args", "env", "timeout"});
        static const std::set<std::string> stages = {"prestart",        "createRuntime",
                                                     "createContainer", "startContainer",
                                                     "poststart",       "poststop"};
        if (!h.contains("hookName") || !stages.count(string(h["hookName"], where + ".hookName")))
            fail(where + ".hookName", "is not an OCI hook stage");
        if (!h.contains("path")) fail(where, "has no path");
        path(h["path"], where + ".path");
        if (h.contains("args")) strings(h["args"], where + ".args");
        if (h.contains("env")) env(h["env"], where + ".env");
        if (h.contains("timeout")) {
            if (!h["timeout"].is_number_integer() || h["timeout"].get<long long>() <= 0 ||
                h["timeout"].get<long long>() > 0x7fffffff)
                fail(where + ".timeout", "is not a positive number of seconds");
        }
    }

  private:
    std::string what_;
};

// --- loading ---

// One directory entry read as hostile input: not followed, a root-owned
// regular file no one else may write, size-capped.
std::string read_entry(int dirfd, const std::string& name, const fs::path& file) {
    util::Fd fd(
        ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        if (errno == ELOOP)
            util::throw_invalid("read CDI spec", file.string(), "a symbolic link; refused");
        util::throw_errno("open CDI spec", file.string());
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", file.string());
    if (!S_ISREG(st.st_mode))
        util::throw_invalid("read CDI spec", file.string(), "not a regular file; refused");
    if (st.st_uid != 0)
        util::throw_invalid("read CDI spec", file.string(),
                            fmt::format("owned by uid {}, not root; refused", st.st_uid));
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        util::throw_invalid("read CDI spec", file.string(), "writable by other users; refused");
    if (static_cast<std::uint64_t>(st.st_size) > kMaxSpecFileSize)
        throw util::Error(util::ErrorKind::Invalid, EFBIG, "read CDI spec", file.string(),
                          fmt::format("{} bytes, more than the {} a CDI spec may have; refused",
                                      st.st_size, kMaxSpecFileSize));
    return util::read_fd(fd.get(), kMaxSpecFileSize, file.string());
}

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

// Reads and parses one entry of `dirfd` into reg.specs, or records why not in
// reg.refused (false).
bool load_entry(Registry& reg, int dirfd, const std::string& name, const fs::path& file,
                int priority) {
    bool read = false;  // refused then for its content (too large: EFBIG), not the file
    try {
        const std::string text = read_entry(dirfd, name, file);
        read = true;
        reg.specs.push_back(
            {file, priority, parse_spec(text, name.ends_with(".yaml"), file.string())});
        return true;
    } catch (const util::Error& e) {
        reg.refused.push_back({file, e.what(), read || e.code().value() == EFBIG});
        return false;
    }
}

}  // namespace

std::vector<const json*> all_edits(const json& spec) {
    std::vector<const json*> out;
    if (auto e = spec.find("containerEdits"); e != spec.end() && e->is_object()) out.push_back(&*e);
    if (auto d = spec.find("devices"); d != spec.end() && d->is_array())
        for (const auto& dev : *d)
            if (dev.is_object())
                if (auto e = dev.find("containerEdits"); e != dev.end() && e->is_object())
                    out.push_back(&*e);
    return out;
}

std::vector<json*> all_edits(json& spec) {
    std::vector<json*> out;
    // Pointers into `spec`, which the caller may change.
    for (const json* e : all_edits(std::as_const(spec))) out.push_back(const_cast<json*>(e));
    return out;
}

const std::vector<std::string>& versions() {
    static const std::vector<std::string> list = {"0.3.0", "0.4.0", "0.5.0", "0.6.0",
                                                  "0.7.0", "0.8.0", "1.0.0", "1.1.0"};
    return list;
}

int version_index(std::string_view version) {
    if (version.starts_with('v')) version.remove_prefix(1);
    const auto& list = versions();
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i] == version) return static_cast<int>(i);
    return -1;
}

std::string minimum_version(const json& spec) {
    const auto edits = all_edits(spec);
    auto any_edit = [&](auto&& pred) {
        return std::any_of(edits.begin(), edits.end(), [&](const json* e) { return pred(*e); });
    };
    auto any_in = [&](const char* list, auto&& pred) {
        return any_edit([&](const json& e) {
            auto it = e.find(list);
            if (it == e.end() || !it->is_array()) return false;
            return std::any_of(it->begin(), it->end(),
                               [&](const json& item) { return item.is_object() && pred(item); });
        });
    };
    const json devices = spec.is_object() && spec.contains("devices") && spec["devices"].is_array()
                             ? spec["devices"]
                             : json::array();
    if (any_edit([](const json& e) {
            if (non_empty(e, "netDevices")) return true;
            auto rdt = e.find("intelRdt");
            return rdt != e.end() && rdt->is_object() &&
                   (rdt->contains("schemata") ||
                    (rdt->contains("enableMonitoring") && rdt->at("enableMonitoring") == true));
        }))
        return "1.1.0";
    if (any_edit([](const json& e) {
            return (e.contains("intelRdt") && !e["intelRdt"].is_null()) ||
                   non_empty(e, "additionalGids");
        }))
        return "0.7.0";
    const std::string kind = spec.value("kind", "");
    const auto slash = kind.find('/');
    if (non_empty(spec, "annotations") ||
        std::any_of(devices.begin(), devices.end(),
                    [](const json& d) { return d.is_object() && non_empty(d, "annotations"); }) ||
        (slash != std::string::npos && kind.find('.', slash) != std::string::npos))
        return "0.6.0";
    if (std::any_of(devices.begin(), devices.end(),
                    [](const json& d) {
                        if (!d.is_object() || !d.contains("name") || !d["name"].is_string())
                            return false;
                        const auto& n = d["name"].get_ref<const std::string&>();
                        return !n.empty() && n[0] >= '0' && n[0] <= '9';
                    }) ||
        any_in("deviceNodes", [](const json& n) { return non_empty(n, "hostPath"); }))
        return "0.5.0";
    if (any_in("mounts", [](const json& m) { return non_empty(m, "type"); })) return "0.4.0";
    return "0.3.0";
}

std::vector<std::string> device_names(const json& spec) {
    std::vector<std::string> out;
    const std::string kind = spec.value("kind", "");
    if (!spec.contains("devices") || !spec["devices"].is_array()) return out;
    for (const auto& d : spec["devices"])
        if (d.is_object() && d.contains("name") && d["name"].is_string())
            out.push_back(kind + "=" + d["name"].get<std::string>());
    return out;
}

void validate(const json& spec, const std::string& what) {
    const Checker c(what);
    c.keys(spec, "", {"cdiVersion", "kind", "annotations", "devices", "containerEdits"});
    if (!spec.contains("cdiVersion")) c.fail("", "no cdiVersion");
    const std::string& version = c.string(spec["cdiVersion"], "cdiVersion");
    if (version_index(version) < 0) c.fail("cdiVersion", "unknown version '" + version + "'");
    if (!spec.contains("kind")) c.fail("", "no kind");
    const std::string& kind = c.string(spec["kind"], "kind");
    if (auto why = util::kind_error(kind)) c.fail("kind", "'" + kind + "': " + *why);
    if (spec.contains("annotations")) c.annotations(spec["annotations"], "annotations");
    if (spec.contains("containerEdits")) c.edits(spec["containerEdits"], "containerEdits");
    if (!spec.contains("devices") || !spec["devices"].is_array() || spec["devices"].empty())
        c.fail("devices", "no devices");
    std::set<std::string> names;
    const json& devices = spec["devices"];
    for (std::size_t i = 0; i < devices.size(); ++i) {
        const std::string where = fmt::format("devices[{}]", i);
        c.keys(devices[i], where, {"name", "annotations", "containerEdits"});
        if (!devices[i].contains("name")) c.fail(where, "has no name");
        const std::string& name = c.string(devices[i]["name"], where + ".name");
        if (auto why = util::device_name_error(name))
            c.fail(where + ".name", "'" + name + "': " + *why);
        if (!names.insert(name).second) c.fail(where + ".name", "'" + name + "' is defined twice");
        if (devices[i].contains("annotations"))
            c.annotations(devices[i]["annotations"], where + ".annotations");
        if (devices[i].contains("containerEdits"))
            c.edits(devices[i]["containerEdits"], where + ".containerEdits");
    }
    const std::string needed = minimum_version(spec);
    if (util::compare_versions(version, needed) < 0)
        c.fail("cdiVersion",
               fmt::format("'{}' does not have what the spec uses (it needs {})", version, needed));
}

json parse_spec(std::string_view text, bool yaml_text, const std::string& what) {
    json doc;
    if (yaml_text) {
        doc = yaml::parse(text, what);
    } else {
        if (!util::json_depth_within(text, decide::oci::kMaxJsonDepth))
            util::throw_invalid(
                "read CDI spec", what,
                fmt::format("nested deeper than {} levels", decide::oci::kMaxJsonDepth));
        try {
            doc = json::parse(text);
        } catch (const json::exception& e) {
            util::throw_invalid("read CDI spec", what, std::string("not JSON: ") + e.what());
        }
    }
    validate(doc, what);
    return doc;
}

Registry load_specs(const std::vector<fs::path>& dirs) {
    Registry reg;
    for (std::size_t priority = 0; priority < dirs.size(); ++priority) {
        const fs::path& dir = dirs[priority];
        util::Fd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dirfd) {
            if (errno == ENOENT) continue;
            util::throw_errno("open CDI spec directory", dir.string());
        }
        std::vector<std::string> names;
        {
            DIR* d = ::fdopendir(::dup(dirfd.get()));
            if (!d) util::throw_errno("list", dir.string());
            while (const dirent* e = ::readdir(d)) {
                std::string name = e->d_name;
                if (name.ends_with(".json") || name.ends_with(".yaml")) names.push_back(name);
            }
            ::closedir(d);
        }
        std::sort(names.begin(), names.end());
        for (const auto& name : names)
            if (!load_entry(reg, dirfd.get(), name, dir / name, static_cast<int>(priority)))
                util::logger().warn("{}", reg.refused.back().why);
    }
    return reg;
}

Registry load_spec_files(const std::vector<fs::path>& files) {
    Registry reg;
    for (const auto& file : files) {
        const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
        const util::Fd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dirfd) {
            reg.refused.push_back(
                {file, util::Error(errno, "open CDI spec directory", dir.string()).what()});
            continue;
        }
        load_entry(reg, dirfd.get(), file.filename().string(), file, 0);
    }
    return reg;
}

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
