// Finding a process's device cgroup (a v1 devices directory or its cgroup v2
// directory) from /proc/<pid>/cgroup and mountinfo, and reading devices.list.
#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/os/cgroup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::os::cgroup {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
    auto octal = [](char c) { return c >= '0' && c <= '7'; };
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && s.size() - i > 3 && octal(s[i + 1]) && octal(s[i + 2]) &&
            octal(s[i + 3])) {
            int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
            out.push_back(static_cast<char>(v));
            i += 3;
            continue;
        }
        out.push_back(s[i]);
    }
    return out;
}

std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    for (auto f : util::split(line, ' '))
        if (!f.empty()) out.push_back(f);
    return out;
}

bool has_token(std::string_view list, std::string_view token) {
    for (auto t : util::split(list, ','))
        if (t == token) return true;
    return false;
}

// `root` is `path` or one of its ancestors (whole components).
bool is_prefix(std::string_view root, std::string_view path) {
    if (root == "/") return true;
    if (path.substr(0, root.size()) != root) return false;
    return path.size() == root.size() || path[root.size()] == '/';
}

bool safe_cgroup_path(std::string_view p) {
    if (p.empty() || p.front() != '/') return false;
    for (auto c : util::split(p.substr(1), '/'))
        if (c == "." || c == "..") return false;
    return true;
}

struct CgroupLines {
    bool v1_devices = false;
    std::string v1_path;  // of the devices controller
    bool unified = false;
    std::string unified_path;  // of the "0::" line
};

CgroupLines parse_proc_cgroup(std::string_view proc_cgroup, const std::string& what) {
    CgroupLines out;
    for (auto line : util::split(proc_cgroup, '\n')) {
        if (line.empty()) continue;
        std::size_t a = line.find(':');
        std::size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos)
            util::throw_invalid("read cgroup", what,
                                "malformed line in /proc/<pid>/cgroup: " + std::string(line));
        std::string_view id = line.substr(0, a);
        std::string_view controllers = line.substr(a + 1, b - a - 1);
        std::string_view cg_path = line.substr(b + 1);
        if (id == "0" && controllers.empty()) {
            out.unified = true;
            out.unified_path = std::string(cg_path);
        } else if (has_token(controllers, "devices")) {
            out.v1_devices = true;
            out.v1_path = std::string(cg_path);
        }
    }
    return out;
}

// One line of mountinfo: id parent maj:min root mountpoint options [optional...] - fstype
// source super-options.
struct MountLine {
    std::string id, parent, root, point, fstype, super_opts;
};

std::vector<MountLine> parse_mountinfo(std::string_view mountinfo) {
    std::vector<MountLine> out;
    for (auto line : util::split(mountinfo, '\n')) {
        auto f = fields(line);
        std::size_t sep = 0;
        while (sep < f.size() && f[sep] != "-") ++sep;
        if (sep < 6 || f.size() < sep + 4) continue;
        out.push_back({std::string(f[0]), std::string(f[1]), unescape(f[3]), unescape(f[4]),
                       std::string(f[sep + 1]), std::string(f[sep + 3])});
    }
    return out;
}

// Whether path resolution reaches mount `m` at its mount point: starting from
// the outermost mount of its chain of parents, at each ancestor directory of
// the mount point (and the point itself) the path crosses into the mount
// attached there, the last one where several are stacked. A mount hidden by
// another mounted over it or over one of its parents (cgroup2 mounted over
// /sys/fs/cgroup hides the v1 hierarchies below) is not reached.
bool reachable(const std::vector<MountLine>& mounts, std::size_t m) {
    auto index_of = [&](const std::string& id) -> std::size_t {
        for (std::size_t i = 0; i < mounts.size(); ++i)
            if (mounts[i].id == id) return i;
        return mounts.size();
    };
    std::size_t base = m;
    for (std::size_t guard = 0; guard < mounts.size(); ++guard) {
        std::size_t p = index_of(mounts[base].parent);
        if (p == mounts.size() || p == base) break;
        base = p;
    }
    const std::string& target = mounts[m].point;
    const std::string& from = mounts[base].point;
    if (!is_prefix(from, target)) return true;  // cannot tell: do not hide it
    auto cross = [&](std::size_t cur, const std::string& point) {
        for (bool moved = true; moved;) {
            moved = false;
            for (std::size_t i = 0; i < mounts.size(); ++i)
                if (i != cur && mounts[i].point == point && mounts[i].parent == mounts[cur].id) {
                    cur = i;
                    moved = true;
                    break;
                }
        }
        return cur;
    };
    std::size_t cur = cross(base, from);
    std::string sofar = from == "/" ? "" : from;
    std::string_view rest = std::string_view(target).substr(sofar.size());
    for (auto c : util::split(rest, '/')) {
        if (c.empty()) continue;
        sofar += '/';
        sofar += c;
        cur = cross(cur, sofar);
    }
    return cur == m;
}

// The host directory of `cg_path` under the reachable mount (chosen by
// `wanted`) whose root holds it, the deepest such root.
std::filesystem::path find_dir(std::string_view mountinfo, const std::string& cg_path,
                               bool (*wanted)(const MountLine&), const std::string& what,
                               const std::string& kind) {
    if (!safe_cgroup_path(cg_path))
        util::throw_invalid("set device cgroup", what,
                            "odd " + kind + " cgroup path '" + cg_path + "'");
    auto mounts = parse_mountinfo(mountinfo);
    const MountLine* best = nullptr;
    for (std::size_t i = 0; i < mounts.size(); ++i) {
        const auto& mnt = mounts[i];
        if (!wanted(mnt) || !is_prefix(mnt.root, cg_path)) continue;
        if (best && mnt.root.size() <= best->root.size()) continue;
        if (!reachable(mounts, i)) continue;
        best = &mnt;
    }
    if (!best)
        throw util::Error(ENOENT, "set device cgroup", what,
                          "no " + kind + " hierarchy holding " + cg_path + " is mounted");
    std::filesystem::path dir = best->point;
    std::string rest = best->root == "/" ? cg_path : cg_path.substr(best->root.size());
    if (!rest.empty() && rest != "/") dir /= std::filesystem::path(rest).relative_path();
    return dir;
}

bool is_v1_devices(const MountLine& m) {
    return m.fstype == "cgroup" && has_token(m.super_opts, "devices");
}

bool is_cgroup2(const MountLine& m) {
    return m.fstype == "cgroup2";
}

}  // namespace

std::filesystem::path devices_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                                  const std::string& what) {
    CgroupLines lines = parse_proc_cgroup(proc_cgroup, what);
    if (!lines.v1_devices)
        throw util::Error(ENOENT, "set device cgroup", what,
                          "the process has no cgroup v1 devices controller");
    return find_dir(mountinfo, lines.v1_path, is_v1_devices, what, "cgroup v1 devices");
}

std::filesystem::path unified_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                                  const std::string& what) {
    CgroupLines lines = parse_proc_cgroup(proc_cgroup, what);
    if (!lines.unified)
        throw util::Error(ENOENT, "set device cgroup", what, "the process has no cgroup v2 cgroup");
    return find_dir(mountinfo, lines.unified_path, is_cgroup2, what, "cgroup2");
}

DeviceCgroup locate(std::string_view proc_cgroup, std::string_view mountinfo,
                    const std::string& what) {
    CgroupLines lines = parse_proc_cgroup(proc_cgroup, what);
    if (lines.v1_devices) {
        auto mounts = parse_mountinfo(mountinfo);
        bool v1_mounted = false;
        for (std::size_t i = 0; i < mounts.size() && !v1_mounted; ++i)
            v1_mounted = is_v1_devices(mounts[i]) && reachable(mounts, i);
        // The controller is in use (v1 or hybrid host): it decides.
        if (v1_mounted || !lines.unified)
            return {DeviceCgroup::Kind::V1, devices_dir(proc_cgroup, mountinfo, what)};
    }
    if (!lines.unified)
        throw util::Error(ENOENT, "set device cgroup", what,
                          "the process has neither a cgroup v1 devices controller nor a cgroup v2 "
                          "cgroup");
    return {DeviceCgroup::Kind::V2, unified_dir(proc_cgroup, mountinfo, what)};
}

bool allows(std::string_view devices_list, unsigned major, unsigned minor) {
    auto matches = [](std::string_view field, unsigned value) {
        if (field == "*") return true;
        auto v = util::parse_unsigned(field);
        return v && *v == value;
    };
    for (auto line : util::split(devices_list, '\n')) {
        auto f = fields(line);
        if (f.size() != 3) continue;
        std::string_view type = f[0], numbers = f[1], access = f[2];
        if (type != "a" && type != "c") continue;
        std::size_t colon = numbers.find(':');
        if (colon == std::string_view::npos) continue;
        if (!matches(numbers.substr(0, colon), major) || !matches(numbers.substr(colon + 1), minor))
            continue;
        if (access.find('r') != std::string_view::npos &&
            access.find('w') != std::string_view::npos)
            return true;
    }
    return false;
}

}  // namespace gpubind::os::cgroup
