// CDI specs as hostile input: their validation (rules in cdi.hpp), the
// cdiVersion rule, reading the node's specs (every vendor's) and the
// names they define; applying named devices is cdi_apply.cpp. Needs no
// node: the fuzzer builds it alone.
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

}  // namespace gpubind::cdi
