// Reading the OCI runtime state and config.json: types are checked field by
// field and every error names the field ("process.env[3]: not a string").
#include "gpubind/decide/oci.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::decide::oci {

namespace {

using nlohmann::json;

// Reports bad input in one document: op ("parse spec") and what (its path).
struct Reader {
    std::string op;
    std::string what;

    [[noreturn]] void fail(const std::string& field, const std::string& detail) const {
        util::throw_invalid(op, what, field.empty() ? detail : field + ": " + detail);
    }

    json parse(std::string_view text, std::size_t max_size) const {
        if (text.size() > max_size)
            throw util::Error(util::ErrorKind::Invalid, EFBIG, op, what,
                              fmt::format("larger than the limit of {} bytes", max_size));
        if (!util::json_depth_within(text, kMaxJsonDepth))
            throw util::Error(util::ErrorKind::Invalid, EINVAL, op, what,
                              fmt::format("nested deeper than {} levels", kMaxJsonDepth));
        try {
            return json::parse(text);
        } catch (const json::exception& e) {
            // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
            std::string_view msg = e.what();
            if (auto pos = msg.find("] "); pos != std::string_view::npos)
                msg.remove_prefix(pos + 2);
            fail({}, "not valid JSON: " + std::string(msg));
        }
    }

    // The member `key` of `obj` if present (and not null), else nullptr.
    static const json* member(const json& obj, const char* key) {
        auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }

    const json& require(const json& obj, const char* key, const std::string& field) const {
        const json* v = member(obj, key);
        if (!v) fail(field, "missing");
        return *v;
    }

    const json& object(const json& v, const std::string& field) const {
        if (!v.is_object()) fail(field, "not an object");
        return v;
    }
    const json& array(const json& v, const std::string& field) const {
        if (!v.is_array()) fail(field, "not an array");
        return v;
    }
    std::string string(const json& v, const std::string& field) const {
        if (!v.is_string()) fail(field, "not a string");
        return v.get<std::string>();
    }
    bool boolean(const json& v, const std::string& field) const {
        if (!v.is_boolean()) fail(field, "not a boolean");
        return v.get<bool>();
    }
    std::uint64_t unsigned_number(const json& v, const std::string& field,
                                  std::uint64_t max) const {
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
            fail(field, "not a non-negative integer");
        auto n = v.get<std::uint64_t>();
        if (n > max) fail(field, fmt::format("{} is out of range", n));
        return n;
    }
    std::vector<std::string> strings(const json& v, const std::string& field) const {
        std::vector<std::string> out;
        for (std::size_t i = 0; const auto& item : array(v, field))
            out.push_back(string(item, fmt::format("{}[{}]", field, i++)));
        return out;
    }
    std::vector<IdMapping> mappings(const json& v, const std::string& field) const {
        std::vector<IdMapping> out;
        for (std::size_t i = 0; const auto& item : array(v, field)) {
            auto f = fmt::format("{}[{}]", field, i++);
            object(item, f);
            auto get = [&](const char* key) {
                return static_cast<unsigned>(
                    unsigned_number(require(item, key, f + "." + key), f + "." + key, UINT32_MAX));
            };
            out.push_back({get("containerID"), get("hostID"), get("size")});
        }
        return out;
    }
};

// " (NAME)" for an environment entry whose name is short and plain, to say
// which variable a problem is in; "" otherwise (the name is input too).
std::string env_name(const std::string& entry) {
    const std::size_t eq = entry.find('=');
    if (eq == 0 || eq == std::string::npos || eq > 64) return {};
    for (std::size_t i = 0; i < eq; ++i) {
        const auto c = static_cast<unsigned char>(entry[i]);
        if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') return {};
    }
    return " (" + entry.substr(0, eq) + ")";
}

}  // namespace

std::optional<std::string> Spec::getenv(std::string_view name) const {
    for (auto it = env.rbegin(); it != env.rend(); ++it) {
        std::string_view e = *it;
        if (e.size() > name.size() && e[name.size()] == '=' && e.starts_with(name))
            return std::string(e.substr(name.size() + 1));
    }
    return std::nullopt;
}

bool Spec::privileged() const {
    return std::find(bounding_caps.begin(), bounding_caps.end(), "CAP_SYS_ADMIN") !=
           bounding_caps.end();
}

namespace {

// Whether a tmpfs mount's option leaves it a new tmpfs: its flags and its
// data. Any other ("bind", "rbind", "remount", "move", a propagation that
// shares it, ...) may put something else there.
bool fresh_tmpfs_option(std::string_view o) {
    static constexpr std::string_view kFlags[] = {
        "ro",        "rw",         "nosuid",      "suid",          "nodev",
        "dev",       "noexec",     "exec",        "sync",          "async",
        "dirsync",   "noatime",    "atime",       "nodiratime",    "diratime",
        "relatime",  "norelatime", "strictatime", "nostrictatime", "private",
        "rprivate",  "slave",      "rslave",      "unbindable",    "runbindable",
        "tmpcopyup", "inode32",    "inode64",     "noswap"};
    static constexpr std::string_view kData[] = {
        "mode=", "size=", "nr_inodes=", "nr_blocks=", "uid=", "gid=", "huge=", "mpol="};
    return std::find(std::begin(kFlags), std::end(kFlags), o) != std::end(kFlags) ||
           std::any_of(std::begin(kData), std::end(kData),
                       [&](std::string_view d) { return o.starts_with(d); });
}

// Whether the normal path `at`, or a directory above it, is in `paths`: a
// lookup per level, whatever the number of paths.
bool at_or_below(std::string_view at, const std::set<std::string, std::less<>>& paths) {
    for (;;) {
        if (paths.find(at) != paths.end()) return true;
        const std::size_t slash = at.rfind('/');
        if (slash == std::string_view::npos || at == "/") return false;
        at = slash == 0 ? std::string_view("/") : at.substr(0, slash);
    }
}

}  // namespace

std::vector<std::string> Spec::fresh_tmpfs() const {
    std::vector<std::string> out;
    std::set<std::string, std::less<>> later;  // the destinations of the mounts after mounts[i]
    for (auto m = mounts.rbegin(); m != mounts.rend(); ++m) {
        // A relative destination is the runtime's below "/" too.
        std::string at = util::normal_path("/" + m->destination);
        const bool fresh = m->type == "tmpfs" &&
                           std::all_of(m->options.begin(), m->options.end(),
                                       [](const std::string& o) { return fresh_tmpfs_option(o); });
        if (fresh && at != "/" && !at_or_below(at, later)) out.push_back(at);
        later.insert(std::move(at));
    }
    return out;
}

void check_env_caps(const Spec& spec) {
    if (!spec.env_over_caps.empty())
        util::throw_invalid("read request", (spec.bundle / "config.json").string(),
                            spec.env_over_caps);
}

State parse_state(std::string_view text, const std::string& what) {
    const Reader r{"parse state", what};
    json doc = r.parse(text, kMaxStateSize);
    r.object(doc, "state");

    State st;
    st.oci_version = r.string(r.require(doc, "ociVersion", "ociVersion"), "ociVersion");
    st.id = r.string(r.require(doc, "id", "id"), "id");
    if (st.id.empty()) r.fail("id", "empty");
    st.status = r.string(r.require(doc, "status", "status"), "status");
    const json& pid = r.require(doc, "pid", "pid");
    if (!pid.is_number_integer() || pid.get<std::int64_t>() <= 0 ||
        pid.get<std::int64_t>() > INT_MAX)
        r.fail("pid", "not a positive process id");
    st.pid = static_cast<pid_t>(pid.get<std::int64_t>());
    st.bundle = r.string(r.require(doc, "bundle", "bundle"), "bundle");
    if (!st.bundle.is_absolute()) r.fail("bundle", "not an absolute path");
    if (const json* root = Reader::member(doc, "root")) st.root = r.string(*root, "root");
    if (const json* annotations = Reader::member(doc, "annotations")) {
        r.object(*annotations, "annotations");
        for (const auto& [key, value] : annotations->items())
            st.annotations[key] = r.string(value, "annotations." + key);
    }
    return st;
}

Spec parse_spec(std::string_view text, const std::filesystem::path& bundle) {
    const Reader r{"parse spec", (bundle / "config.json").string()};
    return parse_spec_document(r.parse(text, kMaxSpecSize), bundle);
}

Spec parse_spec_document(nlohmann::json doc_json, const std::filesystem::path& bundle) {
    const Reader r{"parse spec", (bundle / "config.json").string()};
    Spec spec;
    auto parsed = std::make_shared<const json>(std::move(doc_json));
    spec.doc = parsed;
    spec.bundle = bundle;
    const json& doc = r.object(*parsed, "config");

    const json& root = r.object(r.require(doc, "root", "root"), "root");
    std::filesystem::path root_path = r.string(r.require(root, "path", "root.path"), "root.path");
    if (root_path.empty()) r.fail("root.path", "empty");
    spec.rootfs = (bundle / root_path).lexically_normal();  // an absolute root.path replaces bundle
    if (const json* ro = Reader::member(root, "readonly"))
        spec.rootfs_readonly = r.boolean(*ro, "root.readonly");

    if (const json* process = Reader::member(doc, "process")) {
        r.object(*process, "process");
        if (const json* env = Reader::member(*process, "env")) {
            spec.env = r.strings(*env, "process.env");
            // Past the caps: noted, refused only for a request (check_env_caps).
            if (spec.env.size() > kMaxEnvEntries)
                spec.env_over_caps = fmt::format("process.env: {} entries, more than {}",
                                                 spec.env.size(), kMaxEnvEntries);
            // runc refuses such entries too; better to say which one here.
            auto field = [&](std::size_t i) {
                return fmt::format("process.env[{}]{}", i, env_name(spec.env[i]));
            };
            for (std::size_t i = 0; i < spec.env.size(); ++i) {
                const std::string& entry = spec.env[i];
                if (entry.size() > kMaxEnvEntrySize && spec.env_over_caps.empty())
                    spec.env_over_caps = fmt::format("{}: {} bytes, more than {}", field(i),
                                                     entry.size(), kMaxEnvEntrySize);
                if (entry.find('=') == std::string::npos) r.fail(field(i), "no '=' in the entry");
                // A C string ends there: what gpubind read and what the
                // container's process gets would differ.
                if (entry.find('\0') != std::string::npos) r.fail(field(i), "contains a NUL byte");
            }
        }
        if (const json* caps = Reader::member(*process, "capabilities")) {
            r.object(*caps, "process.capabilities");
            if (const json* bounding = Reader::member(*caps, "bounding"))
                spec.bounding_caps = r.strings(*bounding, "process.capabilities.bounding");
        }
    }

    if (const json* mounts = Reader::member(doc, "mounts")) {
        for (std::size_t i = 0; const auto& m : r.array(*mounts, "mounts")) {
            auto f = fmt::format("mounts[{}]", i++);
            r.object(m, f);
            Mount mount;
            mount.destination =
                r.string(r.require(m, "destination", f + ".destination"), f + ".destination");
            if (const json* v = Reader::member(m, "source"))
                mount.source = r.string(*v, f + ".source");
            if (const json* v = Reader::member(m, "type")) mount.type = r.string(*v, f + ".type");
            if (const json* v = Reader::member(m, "options"))
                mount.options = r.strings(*v, f + ".options");
            spec.mounts.push_back(std::move(mount));
        }
    }

    if (const json* linux_ = Reader::member(doc, "linux")) {
        r.object(*linux_, "linux");
        if (const json* v = Reader::member(*linux_, "uidMappings"))
            spec.uid_mappings = r.mappings(*v, "linux.uidMappings");
        if (const json* v = Reader::member(*linux_, "gidMappings"))
            spec.gid_mappings = r.mappings(*v, "linux.gidMappings");
        if (const json* v = Reader::member(*linux_, "cgroupsPath"))
            spec.cgroups_path = r.string(*v, "linux.cgroupsPath");
        if (const json* v = Reader::member(*linux_, "rootfsPropagation"))
            spec.rootfs_propagation = r.string(*v, "linux.rootfsPropagation");
    }
    return spec;
}

Spec load_spec(const std::filesystem::path& bundle) {
    return parse_spec(util::read_file(bundle / "config.json", kMaxSpecSize), bundle);
}

}  // namespace gpubind::decide::oci
