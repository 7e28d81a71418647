#include "gpubind/setup/host.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/os/safe_path.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"
#include "setup_files.hpp"

namespace gpubind::setup {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

constexpr std::size_t kMaxProgramSize = 256u << 20;

// The installed list: what an install wrote and made, host paths.
struct Installed {
    std::vector<fs::path> files;
    std::vector<fs::path> dirs;  // outermost first
    bool operator==(const Installed&) const = default;
};

// Whether `file` is one an install writes: in the install dir, or a CDI
// spec (a .json file in a directory named cdi). Nothing else is ever taken
// out, whatever a list says.
bool installable(const fs::path& file, const fs::path& install_dir) {
    const auto rel = file.lexically_relative(install_dir);
    if (!rel.empty() && *rel.begin() != ".." && rel != ".") return true;
    return file.extension() == ".json" && file.parent_path().filename() == "cdi";
}

Installed parse_installed(const Text& text, const std::string& what, const fs::path& install_dir) {
    Installed out;
    if (!text) return out;
    auto lines = split(*text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        const std::string line = std::to_string(i + 1);
        const fs::path p = l.size() > 2 ? fs::path(l.substr(2)) : fs::path();
        if (l.size() < 3 || (l[0] != 'f' && l[0] != 'd') || l[1] != ' ' || !p.is_absolute() ||
            p.lexically_normal() != p || p == "/")
            throw_invalid("read", what, "line " + line + " is not \"f PATH\" or \"d PATH\"");
        if (l[0] == 'f' && !installable(p, install_dir))
            throw_invalid("read", what,
                          "line " + line + " names " + p.string() +
                              ", which no install writes (not in " + install_dir.string() +
                              " nor a CDI spec)");
        (l[0] == 'f' ? out.files : out.dirs).push_back(p);
    }
    return out;
}

std::string format_installed(const Installed& in) {
    std::string out;
    for (const auto& f : in.files) out += "f " + f.string() + "\n";
    for (const auto& d : in.dirs) out += "d " + d.string() + "\n";
    return out;
}

bool listed(const std::vector<fs::path>& list, const fs::path& p) {
    return std::find(list.begin(), list.end(), p) != list.end();
}

// The directories that writing `file` would create, outermost first.
std::vector<fs::path> missing_dirs(const fs::path& file) {
    std::vector<fs::path> out;
    for (fs::path d = file.parent_path(); d.has_relative_path(); d = d.parent_path()) {
        struct stat st {};
        if (::lstat(d.c_str(), &st) == 0) break;
        out.insert(out.begin(), d);
    }
    return out;
}

fs::path find_program(const std::vector<fs::path>& dirs, std::string_view name) {
    std::string where;
    for (const auto& dir : dirs) {
        const fs::path p = dir / name;
        struct stat st {};
        if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0)
            return p;
        where += (where.empty() ? "" : ", ") + dir.string();
    }
    throw Error(ENOENT, "find program", std::string(name),
                "not an executable file in " + (where.empty() ? "no directory" : where));
}

// The engine's new config is read at its start: what the admin does next.
std::string engine_note(Engine e) {
    switch (e) {
        case Engine::Containerd:
            return "containerd reads its config at start only: restart it on the host "
                   "(systemctl restart containerd); running containers keep running";
        case Engine::Crio:
            return "CRI-O reads its runtimes at start only: restart it on the host "
                   "(systemctl restart crio)";
        case Engine::Docker:
            return "docker reads its runtimes again on SIGHUP: systemctl reload docker on the host";
        case Engine::Podman:
        case Engine::Runc:
            break;
    }
    return "podman reads hooks.d at each container start: nothing to restart";
}

// `p` under `root` as the node is read through it: the node's config names
// the host's paths.
fs::path under(const fs::path& root, const fs::path& p) {
    return p.empty() ? p : root / p.relative_path();
}

}  // namespace

fs::path host_path(const fs::path& root, const fs::path& path) {
    Fd root_fd = open_or_throw(root, O_PATH | O_DIRECTORY);
    const fs::path rel = path.lexically_normal().relative_path();
    std::vector<fs::path> rest = {rel.filename()};
    for (fs::path dir = rel.parent_path();; dir = dir.parent_path()) {
        // Opened inside the root: ".." and every symlink stay in it.
        if (Fd fd = try_open_in_root(root_fd.get(), dir, O_PATH | O_DIRECTORY)) {
            fs::path out = fs::read_symlink("/proc/self/fd/" + std::to_string(fd.get()));
            for (auto it = rest.rbegin(); it != rest.rend(); ++it)
                if (!it->empty()) out /= *it;
            return out;
        }
        rest.push_back(dir.filename());
    }
}

bool in_container() {
    struct stat st {};
    const char* k8s = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* container = std::getenv("container");
    return ::lstat("/run/.containerenv", &st) == 0 || ::lstat("/.dockerenv", &st) == 0 ||
           (container && *container) || (k8s && *k8s);
}

void check_host_root(const fs::path& root) {
    const std::string r = root.string();
    if (!root.is_absolute()) throw_invalid("use host root", r, "is not an absolute path");
    struct stat st {
    }, own{};
    if (::lstat(root.c_str(), &st) != 0) throw_errno("use host root", r);
    if (S_ISLNK(st.st_mode))
        throw_invalid("use host root", r, "is a symbolic link; name the directory itself");
    if (!S_ISDIR(st.st_mode)) throw_invalid("use host root", r, "is not a directory");
    if (::stat("/", &own) == 0 && own.st_dev == st.st_dev && own.st_ino == st.st_ino &&
        in_container())
        throw_invalid("use host root", r,
                      "is this container's own root, not the host's: mount the host's / there "
                      "(a hostPath volume) and name that directory");
}

std::string config_with_hook(std::string_view text, const std::string& hook,
                             const std::string& what) {
    std::string out(text);
    const std::string line = "hook = " + quote(hook) + "\n";
    const toml::table root = parse_toml(text, what);
    const toml::node* node = root.get("cdi");
    if (!node) {
        if (!out.empty() && out.back() != '\n') out += '\n';
        return out + (out.empty() ? "" : "\n") + "[cdi]\n" + line;
    }
    const toml::table* cdi = node->as_table();
    if (!cdi) throw_invalid("read", what, "cdi is not a table");
    if (const toml::node* h = cdi->get("hook")) {
        if (!h->is_string()) throw_invalid("read", what, "[cdi] hook is not a string");
        const auto begin = offset_of(out, h->source().begin);
        return out.replace(begin, offset_of(out, h->source().end) - begin, quote(hook));
    }
    // After its own header line: an inline table or dotted keys have none.
    const auto at = offset_of(out, cdi->source().begin);
    const auto close = out.find(']', at);
    std::string header = out.substr(at, close == std::string::npos ? 0 : close + 1 - at);
    std::erase_if(header, [](char c) { return c == ' ' || c == '\t'; });
    if (cdi->is_inline() || header != "[cdi]")
        throw_invalid("read", what, "its cdi keys are not under a [cdi] header; write them so");
    const auto nl = out.find('\n', close);
    if (nl == std::string::npos) return out + "\n" + line;
    return out.insert(nl + 1, line);
}

json spec_for_host(json spec, const fs::path& host_root) {
    std::string root = host_root.lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    if (root == "/") return spec;
    const auto strip = [&](json& v) {
        if (!v.is_string()) return;
        const std::string s = v.get<std::string>();
        if (s == root)
            v = "/";
        else if (s.size() > root.size() && s.starts_with(root) && s[root.size()] == '/')
            v = s.substr(root.size());
    };
    // Each array of objects in `edits[key]`.
    const auto each = [](json& edits, const char* key, const auto& f) {
        if (!edits.contains(key) || !edits[key].is_array()) return;
        for (auto& item : edits[key])
            if (item.is_object()) f(item);
    };
    for (json* edits : cdi::all_edits(spec)) {
        each(*edits, "deviceNodes", [&](json& n) {
            if (!n.contains("hostPath")) return;
            strip(n["hostPath"]);
            if (n.contains("path") && n["hostPath"] == n["path"]) n.erase("hostPath");
        });
        each(*edits, "mounts", [&](json& m) {
            if (m.contains("hostPath")) strip(m["hostPath"]);
        });
        each(*edits, "hooks", [&](json& h) {
            if (h.contains("path")) strip(h["path"]);
        });
    }
    spec["cdiVersion"] = cdi::minimum_version(spec);
    return spec;
}

std::vector<std::string> install_host(const HostInstall& in, bool dry_run) {
    check_host_root(in.host_root);
    const fs::path real_root = host_path(in.host_root, "/");
    const auto local = [&](const fs::path& host) { return host_path(in.host_root, host); };
    const auto host_of = [&](const fs::path& here) {
        return "/" / here.lexically_relative(real_root);
    };
    if (!in.install_dir.is_absolute() || in.install_dir.lexically_normal() != in.install_dir)
        throw_invalid("install into host", in.install_dir.string(),
                      "the install dir must be an absolute path without . or ..");
    const fs::path list_path = local(in.install_dir / kInstalledList);
    const Text list_text = read_text(list_path);
    const Installed was = parse_installed(list_text, list_path.string(), in.install_dir);
    Installed now = was;

    Options o;
    o.runtime_path = (in.install_dir / "gpubind-runtime").string();
    o.hook_path = (in.install_dir / "gpubind-hook").string();
    o.config_path = (in.install_dir / "config.toml").string();
    o.set_default = in.set_default;
    o.cdi = in.cdi;

    std::vector<Change> changes;
    for (const Engine e : in.engines) {
        Request r;
        r.engine = e;
        r.options = o;
        r.remove = in.remove;
        r.prefix = in.host_root;
        for (auto& c : plan_setup(r)) changes.push_back(std::move(c));
    }
    // gpubind's own files: written over a file that is not (kept as a backup),
    // or with remove, each the list names taken out (its backup put back).
    const auto ours = [&](const fs::path& host, Text after, const std::string& what, unsigned mode,
                          bool text) {
        const bool mine = listed(was.files, host);
        Change c = edit(
            local(host), in.remove, [&](const Text&) { return after; },
            [](const Text&) -> Text { return std::nullopt; }, what, "", kMaxProgramSize);
        c.keep_backup = c.keep_backup && !mine;
        c.mode = mode;
        c.binary = !text;
        if (!in.remove && !mine) now.files.push_back(host);
        changes.push_back(std::move(c));
    };
    if (in.remove) {
        for (const auto& f : was.files) ours(f, std::nullopt, "", 0644, true);
    } else {
        for (const auto name : kHostPrograms) {
            const fs::path from = find_program(in.program_dirs, name);
            ours(in.install_dir / name, read_file(from, kMaxProgramSize), "from " + from.string(),
                 0755, false);
        }
        const std::string text = config_with_hook(in.config_text, o.hook_path, in.config_what);
        Config config = parse_config(text, in.config_what);
        config.source = o.config_path;
        ours(o.config_path, text, "[cdi] hook " + o.hook_path, 0644, true);
        if (in.cdi) {
            // The node read under the host root; the specs say what the host sees.
            Config here = config;
            here.roots = {under(in.host_root, config.roots.driver),
                          under(in.host_root, config.roots.dev),
                          under(in.host_root, config.roots.proc)};
            here.ldcache = under(in.host_root, config.ldcache);
            LoadOptions load;
            load.need_nvml = true;
            load.write = false;
            const Node node = load_node(here, load).node;
            for (const auto& f : cdi::wanted_specs(node, here)) {
                if (!f.content) {
                    if (listed(was.files, f.path)) {  // the node's IMEX channels went
                        ours(f.path, std::nullopt, "", 0644, true);
                        std::erase(now.files, f.path);
                    }
                    continue;
                }
                const json spec = spec_for_host(json::parse(*f.content), in.host_root);
                ours(f.path, cdi::serialize(spec, cdi::Format::Json),
                     "CDI spec, " + std::to_string(cdi::device_names(spec).size()) + " devices",
                     0644, true);
            }
        }
    }

    // The directories the writes make, recorded as the list's own.
    for (const auto& c : changes) {
        if (in.remove || !c.after || c.before) continue;
        for (const auto& d : missing_dirs(c.path))
            if (!listed(now.dirs, host_of(d))) now.dirs.push_back(host_of(d));
    }
    std::vector<std::string> report = apply_setup(changes, dry_run);
    if (in.remove) {
        if (list_text) {
            if (!dry_run) unlink_if_there(list_path);
            report.push_back((dry_run ? "would remove " : "removed ") + list_path.string());
        }
        for (auto d = was.dirs.rbegin(); d != was.dirs.rend(); ++d) {
            const fs::path here = local(*d);
            if (dry_run) {
                report.push_back("would remove directory " + here.string());
            } else if (::rmdir(here.c_str()) == 0 || errno == ENOENT) {
                report.push_back("removed directory " + here.string());
            } else if (errno == ENOTEMPTY || errno == EEXIST) {
                report.push_back("left directory " + here.string() + " (not empty)");
            } else {
                throw_errno("remove directory", here.string());
            }
        }
        return report;
    }
    for (const auto& d : now.dirs)
        if (!listed(was.dirs, d)) report.push_back("made directory " + local(d).string());
    if (now != was || !list_text) {
        if (!dry_run) write_file_atomic(list_path, format_installed(now), {.mode = 0644});
        report.push_back((dry_run ? "would write " : "wrote ") + list_path.string() +
                         " (what --remove takes out)");
    }
    for (const Engine e : in.engines) report.push_back("note: " + engine_note(e));
    return report;
}

}  // namespace gpubind::setup
