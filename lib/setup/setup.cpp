#include "gpubind/setup/setup.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpubind/setup/host.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/toml.hpp"
#include "setup_files.hpp"

namespace gpubind::setup {

// The helpers host.cpp shares (setup_files.hpp) and those only this file uses.
namespace detail {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
constexpr std::string_view kCriPlugin = "io.containerd.grpc.v1.cri";
const std::string kName{kRuntimeName};

bool blank(std::string_view s) {
    return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// --- JSON ---

// An absent or blank file is an empty object.
Json parse_json(const Text& text, const std::string& what) {
    if (!text || blank(*text)) return Json::object();
    Json j;
    try {
        j = Json::parse(*text);
    } catch (const Json::parse_error& e) {
        util::throw_invalid("read", what, std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) util::throw_invalid("read", what, "expected a JSON object");
    return j;
}

// Written the way the file was: its indentation (the first indented line's, spaces or
// tabs; 4 spaces when it has none) and its final newline.
std::string dump(const Json& j, const Text& old) {
    int width = 4;
    char c = ' ';
    bool newline = true;
    if (old) {
        newline = old->empty() || old->back() == '\n';
        if (auto nl = old->find('\n'); nl != std::string::npos && nl + 1 < old->size()) {
            const char first = (*old)[nl + 1];
            if (first == ' ' || first == '\t') {
                const auto n = old->find_first_not_of(first, nl + 1) - (nl + 1);
                if (n <= 8) width = static_cast<int>(n), c = first;
            }
        }
    }
    return j.dump(width, c) + (newline ? "\n" : "");
}

// The object at j[key], created when absent.
Json& member(Json& j, const std::string& key, const Json& init, const std::string& what) {
    Json& m = j[key];
    if (m.is_null()) m = init;
    if (m.type() != init.type())
        util::throw_invalid("read", what, "\"" + key + "\" is not a JSON " + init.type_name());
    return m;
}

Json hook_entry(const Options& o) {
    return Json{{"path", o.hook_path},
                {"args", Json::array({"gpubind-hook", "prestart"})},
                {"env", Json::array({"GPUBIND_CONFIG=" + o.config_path})}};
}

// --- TOML ---

toml::table parse_toml(std::string_view text, const std::string& what) {
    if (auto unsafe = gpubind::util::detail::toml_unsafe_text(text))
        util::throw_invalid("read", what, "invalid TOML at " + *unsafe);
    try {
        return toml::parse(text, what);
    } catch (const toml::parse_error& e) {
        util::throw_invalid("read", what,
                            "invalid TOML at line " + std::to_string(e.source().begin.line) + ": " +
                                std::string(e.description()));
    }
}

std::string format_toml(const toml::table& t) {
    std::ostringstream os;
    os << toml::toml_formatter{t, toml::format_flags::allow_unicode_strings};
    return os.str() + "\n";
}

// A TOML basic string.
std::string quote(std::string_view s) {
    toml::table t;
    t.insert("k", std::string(s));
    std::string line = format_toml(t);  // k = "..."\n
    return line.substr(4, line.size() - 5);
}

std::string format_array(const std::vector<std::string>& items) {
    std::string out = "[";
    for (const auto& s : items) out += (out.size() > 1 ? ", " : "") + quote(s);
    return out + "]";
}

toml::array string_array(const std::vector<std::string>& items) {
    toml::array out;
    for (const auto& item : items) out.push_back(item);
    return out;
}

// The subtable t[key], created when absent.
toml::table& subtable(toml::table& t, std::string_view key, const std::string& what) {
    auto [it, inserted] = t.insert(key, toml::table{});
    auto* sub = it->second.as_table();
    if (!sub) util::throw_invalid("read", what, "\"" + std::string(key) + "\" is not a table");
    return *sub;
}

// The byte offset of a toml++ position (1-based line and column, columns in code points).
std::size_t offset_of(std::string_view text, const toml::source_position& p) {
    std::size_t i = 0;
    for (toml::source_index line = 1; line < p.line; ++line) {
        i = text.find('\n', i);
        if (i == std::string_view::npos) return text.size();
        ++i;
    }
    for (toml::source_index col = 1; col < p.column && i < text.size(); ++col) {
        ++i;
        while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    }
    return i;
}

// Whether the config has `version = 2` (false: no version key and nothing that needs one).
bool containerd_version(const toml::table& root, const std::string& what) {
    const auto* v = root.get("version");
    if (!v) {
        if (root.contains("plugins"))
            util::throw_invalid(
                "read", what,
                "no \"version = 2\": version 1 configs are not supported (containerd 1.x "
                "reads version 2; add it and rename the plugins)");
        return false;
    }
    const auto n = v->value<std::int64_t>();
    if (!v->is_integer() || n != 2)
        util::throw_invalid("read", what,
                            "version " + (n ? std::to_string(*n) : std::string("?")) +
                                " is not supported: gpubind writes containerd config version 2 "
                                "(containerd 1.6 and 1.7)");
    return true;
}

std::vector<std::string> imports_of(const toml::node& node, const std::string& what) {
    const auto* arr = node.as_array();
    std::vector<std::string> out;
    if (!arr) util::throw_invalid("read", what, "\"imports\" is not an array of strings");
    for (const auto& item : *arr) {
        const auto* s = item.as_string();
        if (!s) util::throw_invalid("read", what, "\"imports\" is not an array of strings");
        out.push_back(s->get());
    }
    return out;
}

// Whether an imports entry (a path or a glob, as containerd takes them) names `path`.
bool imports(const std::string& entry, std::string_view path) {
    return entry == path || ::fnmatch(entry.c_str(), std::string(path).c_str(), FNM_PATHNAME) == 0;
}

// --- files ---

// An engine's config or gpubind's backup of it: absent (nullopt), or a
// regular file owned by root (or this user) that no one else may write,
// opened without following a link. Anything else there is an Error naming
// it: a link at a backup could hand another file's content to --remove.
Text read_text(const fs::path& path, std::size_t max_size) {
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return std::nullopt;
        if (errno == ELOOP)
            throw util::Error(util::ErrorKind::Refused, ELOOP, "read", path.string(),
                              "is a symbolic link; refusing to read or replace it");
        util::throw_errno("open", path.string());
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", path.string());
    if (!S_ISREG(st.st_mode))
        throw util::Error(util::ErrorKind::Refused, EINVAL, "read", path.string(),
                          "is not a regular file");
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        throw util::Error(util::ErrorKind::Refused, EACCES, "read", path.string(),
                          "is owned by another user; refusing to use it");
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        throw util::Error(util::ErrorKind::Refused, EACCES, "read", path.string(),
                          "is writable by others than its owner; refusing to use it");
    return util::read_fd(fd.get(), max_size, path.string());
}

fs::path backup_of(const fs::path& path) {
    fs::path b = path;
    b += std::string(kBackupSuffix);
    return b;
}

using Edit = std::function<Text(const Text&)>;

// The change to `path`: `add`, or with remove the backup if there is one, else `remove`.
Change edit(const fs::path& path, bool remove, const Edit& add, const Edit& del,
            const std::string& what_add, const std::string& what_remove, std::size_t max_size) {
    Change c;
    c.path = path;
    c.before = read_text(path, max_size);
    if (!remove) {
        c.after = add(c.before);
        c.what = what_add;
        c.keep_backup = c.before.has_value();
        return c;
    }
    const fs::path backup = backup_of(path);
    if (Text saved = read_text(backup, max_size)) {
        c.after = std::move(saved);
        c.drop_backup = true;
        c.what = "restored from " + backup.string();
        return c;
    }
    c.after = del(c.before);
    c.what = what_remove;
    return c;
}

// The mode of the file read_text() read (never a link's target).
unsigned mode_of(const fs::path& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777) : 0644;
}

void unlink_if_there(const fs::path& path) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) util::throw_errno("unlink", path.string());
}

}  // namespace detail

using namespace detail;

std::optional<Engine> parse_engine(std::string_view name) {
    if (name == "docker") return Engine::Docker;
    if (name == "containerd") return Engine::Containerd;
    if (name == "crio" || name == "cri-o") return Engine::Crio;
    if (name == "podman") return Engine::Podman;
    if (name == "runc") return Engine::Runc;
    return std::nullopt;
}

// --- docker ---

std::string docker_add(const Text& old, const Options& o, const std::string& what) {
    Json j = parse_json(old, what);
    const Json before = j;
    Json& runtime =
        member(member(j, "runtimes", Json::object(), what), kName, Json::object(), what);
    runtime["path"] = o.runtime_path;
    if (!runtime.contains("runtimeArgs")) runtime["runtimeArgs"] = Json::array();
    if (o.cdi) member(j, "features", Json::object(), what)["cdi"] = true;
    if (o.set_default)
        j["default-runtime"] = kName;
    else if (j.contains("default-runtime") && j["default-runtime"] == kName)
        j.erase("default-runtime");
    if (old && j == before) return *old;
    return dump(j, old);
}

Text docker_remove(const Text& old, const std::string& what) {
    if (!old) return old;
    Json j = parse_json(old, what);
    const Json before = j;
    if (j.contains("runtimes") && j["runtimes"].is_object()) {
        j["runtimes"].erase(kName);
        if (j["runtimes"].empty()) j.erase("runtimes");
    }
    if (j.contains("default-runtime") && j["default-runtime"] == kName) j.erase("default-runtime");
    if (j == before) return old;
    if (j.empty()) return std::nullopt;
    return dump(j, old);
}

// --- containerd ---

std::string containerd_drop_in(const Text& main_config, const Options& o, const std::string& what) {
    toml::table out;
    out.insert("version", 2);
    if (main_config) {
        const toml::table root = parse_toml(*main_config, what);
        containerd_version(root, what);
        const auto* plugins = root.get_as<toml::table>("plugins");
        if (const auto* cri = plugins ? plugins->get(kCriPlugin) : nullptr) {
            if (!cri->is_table())
                util::throw_invalid("read", what, "the cri plugin is not a table");
            subtable(out, "plugins", what).insert(kCriPlugin, *cri->as_table());
        }
    }
    toml::table& containerd =
        subtable(subtable(subtable(out, "plugins", what), kCriPlugin, what), "containerd", what);
    toml::table& runtimes = subtable(containerd, "runtimes", what);
    // Without a runtimes table containerd has its built-in runc; one of our own hides it.
    if (runtimes.empty())
        subtable(runtimes, "runc", what).insert("runtime_type", "io.containerd.runc.v2");
    toml::table& runtime = subtable(runtimes, kName, what);
    runtime.insert_or_assign("runtime_type", "io.containerd.runc.v2");
    subtable(runtime, "options", what).insert_or_assign("BinaryName", o.runtime_path);
    if (o.set_default) containerd.insert_or_assign("default_runtime_name", kName);
    if (o.cdi) {
        toml::table& cri = subtable(subtable(out, "plugins", what), kCriPlugin, what);
        cri.insert_or_assign("enable_cdi", true);
        cri.insert_or_assign("cdi_spec_dirs", string_array(o.cdi_spec_dirs));
    }
    return "# The gpubind runtime for containerd, written by `gpubind setup --engine containerd`.\n"
           "# containerd 1.x replaces a whole plugin section with an imported one, so the cri\n"
           "# plugin settings of config.toml (or containerd's built-in runc) are repeated here:\n"
           "# run it again after changing them.\n\n" +
           format_toml(out);
}

std::string containerd_add_import(const Text& main_config, std::string_view import,
                                  const std::string& what) {
    const std::string line = "imports = " + format_array({std::string(import)}) + "\n";
    if (!main_config) return "version = 2\n" + line;
    std::string text = *main_config;
    const toml::table root = parse_toml(text, what);
    const bool versioned = containerd_version(root, what);
    if (const auto* node = root.get("imports")) {
        auto items = imports_of(*node, what);
        for (const auto& item : items)
            if (imports(item, import)) return text;
        items.emplace_back(import);
        const auto begin = offset_of(text, node->source().begin);
        const auto end = offset_of(text, node->source().end);
        return text.replace(begin, end - begin, format_array(items));
    }
    if (!versioned) return "version = 2\n" + line + text;
    const auto nl = text.find('\n', offset_of(text, root.get("version")->source().end));
    if (nl == std::string::npos) return text + "\n" + line;
    return text.insert(nl + 1, line);
}

Text containerd_remove_import(const Text& main_config, std::string_view import,
                              const std::string& what) {
    if (!main_config) return main_config;
    std::string text = *main_config;
    const toml::table root = parse_toml(text, what);
    const auto* node = root.get("imports");
    if (!node) return main_config;
    auto items = imports_of(*node, what);
    std::erase(items, std::string(import));
    const auto begin = offset_of(text, node->source().begin);
    const auto end = offset_of(text, node->source().end);
    if (!items.empty()) {
        text.replace(begin, end - begin, format_array(items));
    } else {
        // The whole `imports = [...]` statement; its line too when nothing else is on it.
        std::size_t from = begin;
        for (const auto& [key, value] : root)
            if (key.str() == "imports") from = offset_of(text, key.source().begin);
        std::size_t to = end;
        const auto line_start = text.rfind('\n', from == 0 ? 0 : from - 1);
        const std::size_t bol = (from == 0 || line_start == std::string::npos) ? 0 : line_start + 1;
        if (blank(std::string_view(text).substr(bol, from - bol))) {
            const auto rest = text.find_first_not_of(" \t\r", to);
            if (rest == std::string::npos || text[rest] == '\n' || text[rest] == '#') {
                const auto nl = text.find('\n', to);
                from = bol;
                to = nl == std::string::npos ? text.size() : nl + 1;
            }
        }
        text.erase(from, to - from);
    }
    if (text == *main_config) return main_config;
    if (text == "version = 2\n") return std::nullopt;
    return text;
}

// --- CRI-O, hooks.d, runc ---

std::string crio_drop_in(const Options& o) {
    const std::string what = "CRI-O drop-in";
    toml::table out;
    toml::table& runtime = subtable(subtable(out, "crio", what), "runtime", what);
    if (o.set_default) runtime.insert("default_runtime", kName);
    toml::table& gpubind = subtable(subtable(runtime, "runtimes", what), kName, what);
    gpubind.insert("runtime_path", o.runtime_path);
    gpubind.insert("runtime_type", "oci");
    if (o.cdi) runtime.insert("cdi_spec_dirs", string_array(o.cdi_spec_dirs));
    return "# The gpubind runtime for CRI-O, written by `gpubind setup --engine crio`.\n\n" +
           format_toml(out);
}

std::string hooks_json(const Options& o) {
    const Json j = {{"version", "1.0.0"},
                    {"hook", hook_entry(o)},
                    {"when", {{"always", true}}},
                    {"stages", Json::array({"prestart"})}};
    return j.dump(4) + "\n";
}

std::string runc_add_hook(const std::string& config, const Options& o, const std::string& what) {
    Json j = parse_json(config, what);
    const Json before = j;
    Json& prestart =
        member(member(j, "hooks", Json::object(), what), "prestart", Json::array(), what);
    bool found = false;
    for (auto& h : prestart)
        if (h.is_object() && h.contains("path") && h["path"] == o.hook_path) {
            h = hook_entry(o);
            found = true;
        }
    if (!found) prestart.push_back(hook_entry(o));
    if (j == before) return config;
    return dump(j, config);
}

std::string runc_remove_hook(const std::string& config, const Options& o, const std::string& what) {
    Json j = parse_json(config, what);
    const Json before = j;
    if (j.contains("hooks") && j["hooks"].is_object() && j["hooks"].contains("prestart") &&
        j["hooks"]["prestart"].is_array()) {
        Json kept = Json::array();
        for (const auto& h : j["hooks"]["prestart"])
            if (!(h.is_object() && h.contains("path") && h["path"] == o.hook_path))
                kept.push_back(h);
        j["hooks"]["prestart"] = kept;
        if (kept.empty()) j["hooks"].erase("prestart");
        if (j["hooks"].empty()) j.erase("hooks");
    }
    if (j == before) return config;
    return dump(j, config);
}

std::string runc_hooks_snippet(const Options& o) {
    const Json j = {{"hooks", {{"prestart", Json::array({hook_entry(o)})}}}};
    return j.dump(4) + "\n";
}

// --- files ---

std::vector<Change> plan_setup(const Request& r) {
    const auto& o = r.options;
    const bool rm = r.remove;
    // Under a prefix, a directory symlink of that tree (/var/run -> /run)
    // resolves inside it, as on the host whose "/" it is (a prefix not made
    // yet has none).
    std::error_code ec;
    const bool inside = r.prefix != "/" && fs::is_directory(r.prefix, ec);
    const auto at = [&](std::string_view rel) {
        return inside ? host_path(r.prefix, fs::path("/") / rel) : r.prefix / rel;
    };
    const auto gone = [](const Text&) -> Text { return std::nullopt; };
    std::vector<Change> changes;
    switch (r.engine) {
        case Engine::Docker: {
            const fs::path path = at(kDockerConfig);
            const std::string p = path.string();
            changes.push_back(edit(
                path, rm, [&](const Text& t) -> Text { return docker_add(t, o, p); },
                [&](const Text& t) { return docker_remove(t, p); },
                o.set_default ? "runtime gpubind, the default" : "runtime gpubind",
                "runtime gpubind taken out"));
            break;
        }
        case Engine::Containerd: {
            const fs::path main = at(kContainerdConfig), drop_in = at(kContainerdDropIn);
            const std::string import = "/" + std::string(kContainerdDropIn), m = main.string();
            const Text main_now = read_text(main);
            Change d = edit(
                drop_in, rm,
                [&](const Text&) -> Text { return containerd_drop_in(main_now, o, m); }, gone,
                "runtime gpubind, BinaryName " + o.runtime_path, "");
            Change c = edit(
                main, rm,
                [&](const Text& t) -> Text { return containerd_add_import(t, import, m); },
                [&](const Text& t) { return containerd_remove_import(t, import, m); },
                "imports " + import, "import of " + import + " taken out");
            // The import never names a missing file.
            if (rm)
                changes = {std::move(c), std::move(d)};
            else
                changes = {std::move(d), std::move(c)};
            break;
        }
        case Engine::Crio:
            changes.push_back(edit(
                at(kCrioDropIn), rm, [&](const Text&) -> Text { return crio_drop_in(o); }, gone,
                o.set_default ? "runtime gpubind, the default" : "runtime gpubind", ""));
            break;
        case Engine::Podman:
            changes.push_back(edit(
                at(kHooksFile), rm, [&](const Text&) -> Text { return hooks_json(o); }, gone,
                "prestart hook " + o.hook_path, ""));
            break;
        case Engine::Runc: {
            if (r.bundle.empty())
                util::throw_invalid("setup", "runc", "needs the bundle whose config.json to edit");
            const fs::path path = r.bundle / "config.json";
            const std::string p = path.string();
            const auto need = [&](const Text& t) -> const std::string& {
                if (!t) throw util::Error(ENOENT, "read", p);
                return *t;
            };
            changes.push_back(edit(
                path, rm, [&](const Text& t) -> Text { return runc_add_hook(need(t), o, p); },
                [&](const Text& t) -> Text { return runc_remove_hook(need(t), o, p); },
                "prestart hook " + o.hook_path, "prestart hook " + o.hook_path + " taken out"));
            break;
        }
    }
    return changes;
}

std::vector<std::string> apply_setup(const std::vector<Change>& changes, bool dry_run,
                                     util::Journal& journal) {
    std::vector<std::string> report;
    for (const auto& c : changes) {
        const std::string p = c.path.string();
        const fs::path backup = backup_of(c.path);
        const std::string what = c.what.empty() ? "" : " (" + c.what + ")";
        if (c.before == c.after) {
            report.push_back((dry_run ? "would leave " : "unchanged ") + p);
        } else if (dry_run) {
            report.push_back(!c.after   ? "would remove " + p + what
                             : c.binary ? "would write " + p + what
                                        : "would write " + p + what + ":\n" + *c.after);
        } else if (!c.after) {
            journal.file(c.path, c.before, mode_of(c.path));
            unlink_if_there(c.path);
            report.push_back("removed " + p + what);
        } else {
            journal.dirs_for(c.path);
            util::make_directories(c.path.parent_path());
            const unsigned mode = c.before ? mode_of(c.path) : c.mode;
            std::string saved;
            if (c.keep_backup && c.before && !read_text(backup)) {
                // Made only where nothing is: never over another's file.
                journal.file(backup, std::nullopt, mode);
                util::write_file_atomic(backup, *c.before, {.mode = mode, .replace = false});
                saved = "; the original is in " + backup.string();
            }
            journal.file(c.path, c.before, mode);
            util::write_file_atomic(c.path, *c.after, {.mode = mode});
            report.push_back("wrote " + p + what + saved);
        }
        if (c.drop_backup && !dry_run) {
            // The backup's bytes are `after`'s (edit() read them).
            journal.file(backup, c.after, mode_of(backup));
            unlink_if_there(backup);
        }
    }
    return report;
}

std::vector<std::string> apply_setup(const std::vector<Change>& changes, bool dry_run) {
    util::Journal journal;
    std::vector<std::string> report = apply_setup(changes, dry_run, journal);
    journal.commit();
    return report;
}

}  // namespace gpubind::setup
