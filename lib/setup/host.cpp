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

bool listed(const std::vector<fs::path>& list, const fs::path& p) {
    return std::find(list.begin(), list.end(), p) != list.end();
}

// Whether `a` is `b` or a directory above it.
bool above_or_at(const fs::path& a, const fs::path& b) {
    const auto rel = b.lexically_relative(a);
    return !rel.empty() && *rel.begin() != "..";
}

// Where an install writes, host paths: the install dir, the CDI spec
// directories and the engines' drop-in directories. A list naming a file
// elsewhere, or a directory made that is not one of these or above one, is
// not an install's: nothing else is ever taken out, whatever a list says.
struct Written {
    fs::path install_dir;
    std::vector<fs::path> spec_dirs;  // a CDI spec is a .json file directly in one
    std::vector<fs::path> dirs;       // every directory an install writes in
};

Written written_by_install(const fs::path& install_dir, std::vector<fs::path> spec_dirs) {
    Written w{install_dir, std::move(spec_dirs), {install_dir}};
    w.dirs.insert(w.dirs.end(), w.spec_dirs.begin(), w.spec_dirs.end());
    for (const auto file :
         {kDockerConfig, kContainerdConfig, kContainerdDropIn, kCrioDropIn, kHooksFile})
        w.dirs.push_back(("/" / fs::path(file)).parent_path());
    return w;
}

// Why a list line of `kind` (f or d) naming `p` is not an install's ("" when it is).
std::string not_installable(char kind, const fs::path& p, const Written& w) {
    if (kind == 'f') {
        const fs::path dir = p.parent_path();
        if (dir == w.install_dir) return {};
        if (p.extension() == ".json" && listed(w.spec_dirs, dir)) return {};
        return "names " + p.string() + ", which no install writes (not in " +
               w.install_dir.string() + " nor a CDI spec directory)";
    }
    for (const auto& d : w.dirs)
        if (above_or_at(p, d)) return {};
    return "names directory " + p.string() + ", which no install makes";
}

Installed parse_installed(const Text& text, const std::string& what, const Written& w) {
    Installed out;
    if (!text) return out;
    auto lines = util::split(*text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        const std::string line = std::to_string(i + 1);
        const fs::path p = l.size() > 2 ? fs::path(l.substr(2)) : fs::path();
        if (l.size() < 3 || (l[0] != 'f' && l[0] != 'd') || l[1] != ' ' || !p.is_absolute() ||
            p.lexically_normal() != p || p == "/")
            util::throw_invalid("read", what, "line " + line + " is not \"f PATH\" or \"d PATH\"");
        if (const std::string why = not_installable(l[0], p, w); !why.empty())
            util::throw_invalid("read", what, "line " + line + " " + why);
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
    throw util::Error(ENOENT, "find program", std::string(name),
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

// The path this process reaches the directory open at `fd` by.
fs::path path_of(int fd) {
    return fs::read_symlink("/proc/self/fd/" + std::to_string(fd));
}

// `name` in the directory `dir` (open at `fd`), which host_path() found
// missing: a symbolic link there whose target is not in the host root would
// be followed by path later, out of it, so it is an Error naming it.
void refuse_dangling(int fd, const fs::path& dir, const fs::path& name) {
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return;
        util::throw_errno("stat", (dir / name).string());
    }
    char target[4096];
    const ssize_t n = ::readlinkat(fd, name.c_str(), target, sizeof target - 1);
    throw util::Error(util::ErrorKind::Refused, ENOENT, "resolve in the host root",
                      (dir / name).string(),
                      n >= 0 ? "is a symbolic link to " + std::string(target, std::size_t(n)) +
                                   ", which the host root does not have"
                             : "is there but cannot be opened as a directory");
}

// Refuses (nothing written yet) unless every directory from the host root
// (`real_root`) down to `dir` that exists is root's and writable by no one
// else: a name in one that another user may write could be swapped under
// this root process. The ones missing are made by the install, 0755.
void check_before_writing(const fs::path& real_root, const fs::path& dir) {
    util::Fd at = util::open_or_throw(real_root, O_PATH | O_DIRECTORY);
    fs::path path = real_root;
    const fs::path rel = dir.lexically_relative(real_root);
    for (auto part = rel.begin();; ++part) {
        if (const std::string bad = util::untrusted_dir(at.get(), true); !bad.empty())
            throw util::Error(util::ErrorKind::Refused, EACCES, "install into host", path.string(),
                              "the directory " + bad + "; refusing to write under it");
        if (part == rel.end() || *part == ".") return;
        path /= *part;
        util::Fd next(
            ::openat(at.get(), part->c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next && errno == ENOENT) return;
        if (!next) util::throw_errno("open directory", path.string());
        at = std::move(next);
    }
}

// A directory by device and inode.
std::pair<dev_t, ino_t> dir_id(int fd, const fs::path& what) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) util::throw_errno("stat", what.string());
    return {st.st_dev, st.st_ino};
}

bool listed_id(const std::vector<std::pair<dev_t, ino_t>>& ids, std::pair<dev_t, ino_t> id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Why the file `st` is not one gpubind wrote ("" when it may be): a link,
// not a regular file, another user's, writable by others.
std::string not_ours(const struct stat& st) {
    if (S_ISLNK(st.st_mode)) return "a symbolic link";
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    if (!util::host_root_owns(st.st_uid) && st.st_uid != ::geteuid())
        return "owned by uid " + std::to_string(st.st_uid);
    if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by others than its owner";
    return {};
}

// The bytes of the regular file `name` in `dir` (a journal's copy, taken
// before it is replaced or removed), read without following a link.
std::string content_at(int dir, const std::string& name, const fs::path& what) {
    const util::Fd fd =
        util::openat_or_throw(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK, what.string());
    return util::read_fd(fd.get(), kMaxProgramSize, what.string());
}

// Takes `name` out of the directory open at `dir` (one an install writes,
// proven by device and inode), relative to that descriptor: its backup, when
// there is one, renamed over it, else the file unlinked. A link, or a file
// that is not root's, is left and named. Returns the report line ("" when
// nothing is there).
std::string remove_written(int dir, const std::string& name, bool dry_run, Journal& journal) {
    const fs::path here = path_of(dir) / name;
    const std::string backup = name + std::string(kBackupSuffix);
    struct stat st {
    }, saved{};
    const bool there = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!there && errno != ENOENT) util::throw_errno("stat", here.string());
    const bool kept = ::fstatat(dir, backup.c_str(), &saved, AT_SYMLINK_NOFOLLOW) == 0;
    if (!kept && errno != ENOENT) util::throw_errno("stat", (here.parent_path() / backup).string());
    if (const std::string why = there ? not_ours(st) : ""; !why.empty())
        return "left " + here.string() + ": " + why + ", not a file gpubind wrote";
    if (const std::string why = kept ? not_ours(saved) : ""; !why.empty())
        return "left " + here.string() + ": its backup " + backup + " is " + why;
    if (kept) {
        if (!dry_run) {
            journal.file(here, there ? std::optional(content_at(dir, name, here)) : std::nullopt,
                         st.st_mode & 07777);
            journal.file(here.parent_path() / backup,
                         content_at(dir, backup, here.parent_path() / backup),
                         saved.st_mode & 07777);
        }
        if (!dry_run && ::renameat(dir, backup.c_str(), dir, name.c_str()) != 0)
            util::throw_errno("rename", (here.parent_path() / backup).string());
        return (dry_run ? "would restore " : "restored ") + here.string() + " from " + backup;
    }
    if (!there) return {};
    if (!dry_run) journal.file(here, content_at(dir, name, here), st.st_mode & 07777);
    if (!dry_run && ::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT)
        util::throw_errno("unlink", here.string());
    return (dry_run ? "would remove " : "removed ") + here.string();
}

// The directory `dir` (the host's path) taken out when empty, relative to its
// parent's descriptor: a link or a file there is left.
std::string remove_made_dir(int root_fd, const fs::path& dir, bool dry_run, Journal& journal) {
    const util::Fd parent =
        os::try_open_in_root(root_fd, dir.parent_path().relative_path(), O_PATH | O_DIRECTORY);
    if (!parent) return {};
    const fs::path here = path_of(parent.get()) / dir.filename();
    if (dry_run) return "would remove directory " + here.string();
    struct stat st {};
    if (::fstatat(parent.get(), dir.filename().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 &&
        errno == ENOENT)
        return "removed directory " + here.string();
    if (::unlinkat(parent.get(), dir.filename().c_str(), AT_REMOVEDIR) == 0) {
        journal.dir_removed(here, st.st_mode & 07777);
        return "removed directory " + here.string();
    }
    if (errno == ENOENT) return "removed directory " + here.string();
    if (errno == ENOTEMPTY || errno == EEXIST)
        return "left directory " + here.string() + " (not empty)";
    if (errno == ENOTDIR) return "left " + here.string() + " (not a directory)";
    util::throw_errno("remove directory", here.string());
}

// The directories an install may have written CDI specs into: the built-in
// config's and the one installed (or being installed) names.
std::vector<fs::path> spec_dirs_of(const HostInstall& in, const fs::path& installed_config) {
    const config::Config defaults = config::parse_config("", "the built-in config");
    std::vector<fs::path> out = defaults.cdi.spec_dirs;
    out.push_back(defaults.cdi.dir);
    try {
        if (!in.remove) out.push_back(config::parse_config(in.config_text, in.config_what).cdi.dir);
        if (const Text text = read_text(installed_config))
            out.push_back(config::parse_config(*text, installed_config.string()).cdi.dir);
    } catch (const util::Error&) {
        // Said where it matters: an install parses its config again, and a
        // list naming a spec elsewhere is refused.
    }
    for (auto& d : out) d = d.lexically_normal();
    return out;
}

// --remove, after the engines' registrations: each file the list names,
// proven an install's (in the install dir or a CDI spec directory, the same
// directory by device and inode) and taken out by remove_written(); then the
// list; then the directories it made, when empty.
void remove_installed(const HostInstall& in, const Installed& was, const Written& written,
                      bool has_list, bool dry_run, std::vector<std::string>& report,
                      Journal& journal) {
    const util::Fd root = util::open_or_throw(in.host_root, O_PATH | O_DIRECTORY);
    std::vector<std::pair<dev_t, ino_t>> ids;
    util::Fd install_dir;
    for (const auto& dir : written.spec_dirs)
        if (util::Fd fd =
                os::try_open_in_root(root.get(), dir.relative_path(), O_PATH | O_DIRECTORY))
            ids.push_back(dir_id(fd.get(), dir));
    if (util::Fd fd = os::try_open_in_root(root.get(), in.install_dir.relative_path(),
                                           O_PATH | O_DIRECTORY)) {
        ids.push_back(dir_id(fd.get(), in.install_dir));
        install_dir = std::move(fd);
    }
    for (const auto& f : was.files) {
        const util::Fd dir =
            os::try_open_in_root(root.get(), f.parent_path().relative_path(), O_PATH | O_DIRECTORY);
        if (!dir) continue;  // gone, and the file with it
        if (!listed_id(ids, dir_id(dir.get(), f))) {
            report.push_back("left " + (path_of(dir.get()) / f.filename()).string() +
                             ": its directory is not one an install writes");
            continue;
        }
        if (std::string line = remove_written(dir.get(), f.filename().string(), dry_run, journal);
            !line.empty())
            report.push_back(std::move(line));
    }
    if (has_list && install_dir) {
        const fs::path list = path_of(install_dir.get()) / kInstalledList;
        const std::string name(kInstalledList);
        if (!dry_run)
            if (util::Fd fd(::openat(install_dir.get(), name.c_str(),
                                     O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
                fd)
                journal.file(list, util::read_fd(fd.get(), kMaxFileSize, list.string()), 0644);
        if (!dry_run &&
            ::unlinkat(install_dir.get(), std::string(kInstalledList).c_str(), 0) != 0 &&
            errno != ENOENT)
            util::throw_errno("unlink", list.string());
        report.push_back((dry_run ? "would remove " : "removed ") + list.string());
    }
    for (auto d = was.dirs.rbegin(); d != was.dirs.rend(); ++d)
        if (std::string line = remove_made_dir(root.get(), *d, dry_run, journal); !line.empty())
            report.push_back(std::move(line));
}

}  // namespace

fs::path host_path(const fs::path& root, const fs::path& path) {
    util::Fd root_fd = util::open_or_throw(root, O_PATH | O_DIRECTORY);
    const fs::path rel = path.lexically_normal().relative_path();
    std::vector<fs::path> rest = {rel.filename()};
    for (fs::path dir = rel.parent_path();; dir = dir.parent_path()) {
        // Opened inside the root: ".." and every symlink stay in it.
        if (util::Fd fd = os::try_open_in_root(root_fd.get(), dir, O_PATH | O_DIRECTORY)) {
            fs::path out = path_of(fd.get());
            if (rest.size() > 1) refuse_dangling(fd.get(), out, rest.back());
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
    if (!root.is_absolute()) util::throw_invalid("use host root", r, "is not an absolute path");
    struct stat st {
    }, own{};
    if (::lstat(root.c_str(), &st) != 0) util::throw_errno("use host root", r);
    if (S_ISLNK(st.st_mode))
        util::throw_invalid("use host root", r, "is a symbolic link; name the directory itself");
    if (!S_ISDIR(st.st_mode)) util::throw_invalid("use host root", r, "is not a directory");
    if (::stat("/", &own) == 0 && own.st_dev == st.st_dev && own.st_ino == st.st_ino &&
        in_container())
        util::throw_invalid(
            "use host root", r,
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
    if (!cdi) util::throw_invalid("read", what, "cdi is not a table");
    if (const toml::node* h = cdi->get("hook")) {
        if (!h->is_string()) util::throw_invalid("read", what, "[cdi] hook is not a string");
        const auto begin = offset_of(out, h->source().begin);
        return out.replace(begin, offset_of(out, h->source().end) - begin, quote(hook));
    }
    // After its own header line: an inline table or dotted keys have none.
    const auto at = offset_of(out, cdi->source().begin);
    const auto close = out.find(']', at);
    std::string header = out.substr(at, close == std::string::npos ? 0 : close + 1 - at);
    std::erase_if(header, [](char c) { return c == ' ' || c == '\t'; });
    if (cdi->is_inline() || header != "[cdi]")
        util::throw_invalid("read", what,
                            "its cdi keys are not under a [cdi] header; write them so");
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
        util::throw_invalid("install into host", in.install_dir.string(),
                            "the install dir must be an absolute path without . or ..");
    const fs::path list_path = local(in.install_dir / kInstalledList);
    const Text list_text = read_text(list_path);
    Written written =
        written_by_install(in.install_dir, spec_dirs_of(in, local(in.install_dir / "config.toml")));
    // A directory made is listed as resolved in the host (its /var/run/cdi as /run/cdi).
    for (std::size_t i = 0, n = written.dirs.size(); i < n; ++i) {
        try {
            written.dirs.push_back(host_of(local(written.dirs[i])));
        } catch (const util::Error&) {
            // A link on the way that dangles: nothing made below it is listed.
        }
    }
    const Installed was = parse_installed(list_text, list_path.string(), written);
    Installed now = was;

    Options o;
    o.runtime_path = (in.install_dir / "gpubind-runtime").string();
    o.hook_path = (in.install_dir / "gpubind-hook").string();
    o.config_path = (in.install_dir / "config.toml").string();
    o.set_default = in.set_default;
    o.cdi = in.cdi;

    std::vector<Change> engines;
    for (const Engine e : in.engines) {
        Request r;
        r.engine = e;
        r.options = o;
        r.remove = in.remove;
        r.prefix = in.host_root;
        for (auto& c : plan_setup(r)) engines.push_back(std::move(c));
    }
    // gpubind's own files: written over a file that is not (kept as a backup).
    std::vector<Change> files;
    const auto ours = [&](const fs::path& host, Text after, const std::string& what, unsigned mode,
                          bool text) {
        const bool mine = listed(was.files, host);
        Change c = edit(
            local(host), false, [&](const Text&) { return after; },
            [](const Text&) -> Text { return std::nullopt; }, what, "", kMaxProgramSize);
        c.keep_backup = c.keep_backup && !mine;
        c.mode = mode;
        c.binary = !text;
        if (!mine) now.files.push_back(host);
        files.push_back(std::move(c));
    };
    if (!in.remove) {
        for (const auto name : kHostPrograms) {
            const fs::path from = find_program(in.program_dirs, name);
            ours(in.install_dir / name, util::read_file(from, kMaxProgramSize),
                 "from " + from.string(), 0755, false);
        }
        const std::string text = config_with_hook(in.config_text, o.hook_path, in.config_what);
        config::Config config = config::parse_config(text, in.config_what);
        config.source = o.config_path;
        ours(o.config_path, text, "[cdi] hook " + o.hook_path, 0644, true);
        if (in.cdi) {
            // The node read under the host root; the specs say what the host sees.
            config::Config here = config;
            here.roots = {under(in.host_root, config.roots.driver),
                          under(in.host_root, config.roots.dev),
                          under(in.host_root, config.roots.proc)};
            here.ldcache = under(in.host_root, config.ldcache);
            node::LoadOptions load;
            load.need_nvml = true;
            load.write = false;
            const node::Node node = node::load_node(here, load).node;
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
    for (const auto* list : {&files, &engines})
        for (const auto& c : *list) {
            if (in.remove || !c.after || c.before) continue;
            for (const auto& d : missing_dirs(c.path))
                if (!listed(now.dirs, host_of(d))) now.dirs.push_back(host_of(d));
        }
    const bool new_list = !in.remove && (now != was || !list_text);
    // Every directory written in checked before anything is written.
    for (const auto* list : {&files, &engines})
        for (const auto& c : *list)
            if (c.before != c.after) check_before_writing(real_root, c.path.parent_path());
    if (new_list) check_before_writing(real_root, list_path.parent_path());

    // A step that fails undoes the run's earlier ones (the journal's
    // destructor): the host is left as it was found.
    Journal journal;
    if (in.remove) {
        // The engines' registrations first: none is left naming what goes.
        std::vector<std::string> report = apply_setup(engines, dry_run, journal);
        remove_installed(in, was, written, list_text.has_value(), dry_run, report, journal);
        journal.commit();
        return report;
    }
    // gpubind's own files and their list first: no engine is told to run a
    // program that is not there yet.
    std::vector<std::string> report = apply_setup(files, dry_run, journal);
    for (const auto& d : now.dirs)
        if (!listed(was.dirs, d)) report.push_back("made directory " + local(d).string());
    if (new_list) {
        if (!dry_run) {
            journal.file(list_path, list_text, 0644);
            util::write_file_atomic(list_path, format_installed(now), {.mode = 0644});
        }
        report.push_back((dry_run ? "would write " : "wrote ") + list_path.string() +
                         " (what --remove takes out)");
    }
    for (auto& line : apply_setup(engines, dry_run, journal)) report.push_back(std::move(line));
    journal.commit();
    for (const Engine e : in.engines) report.push_back("note: " + engine_note(e));
    return report;
}

}  // namespace gpubind::setup
