// Finding a process's cgroup v1 devices directory and reading devices.list.
#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/error.hpp"
#include "gpubind/exec.hpp"
#include "gpubind/strings.hpp"

namespace gpubind::cgroup {

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
    for (auto f : split(line, ' '))
        if (!f.empty()) out.push_back(f);
    return out;
}

bool has_token(std::string_view list, std::string_view token) {
    for (auto t : split(list, ','))
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
    for (auto c : split(p.substr(1), '/'))
        if (c == "." || c == "..") return false;
    return true;
}

}  // namespace

std::filesystem::path devices_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                                  const std::string& what) {
    std::string v1_path;
    bool found_v1 = false, found_v2 = false;
    for (auto line : split(proc_cgroup, '\n')) {
        if (line.empty()) continue;
        std::size_t a = line.find(':');
        std::size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos)
            throw_invalid("read cgroup", what,
                          "malformed line in /proc/<pid>/cgroup: " + std::string(line));
        std::string_view id = line.substr(0, a);
        std::string_view controllers = line.substr(a + 1, b - a - 1);
        std::string_view cg_path = line.substr(b + 1);
        if (id == "0" && controllers.empty()) {
            found_v2 = true;
        } else if (has_token(controllers, "devices")) {
            found_v1 = true;
            v1_path = std::string(cg_path);
        }
    }
    if (!found_v1) {
        if (found_v2)
            throw Error(ENOTSUP, "set device cgroup", what,
                        "cgroup v2 device access is not supported yet");
        throw Error(ENOENT, "set device cgroup", what, "the process has no devices cgroup");
    }
    if (!safe_cgroup_path(v1_path))
        throw_invalid("set device cgroup", what, "odd devices cgroup path '" + v1_path + "'");

    // The devices hierarchy's mount whose root holds the process's cgroup (the
    // deepest such root, should it be mounted more than once).
    std::string best_root, best_point;
    bool found_mount = false;
    for (auto line : split(mountinfo, '\n')) {
        auto f = fields(line);
        std::size_t sep = 0;
        while (sep < f.size() && f[sep] != "-") ++sep;
        // id parent maj:min root mountpoint options [optional...] - fstype source super
        if (sep < 6 || f.size() < sep + 4) continue;
        std::string_view fstype = f[sep + 1];
        std::string_view super_opts = f[sep + 3];
        if (fstype != "cgroup" || !has_token(super_opts, "devices")) continue;
        std::string root = unescape(f[3]);
        std::string point = unescape(f[4]);
        if (!is_prefix(root, v1_path)) continue;
        if (!found_mount || root.size() > best_root.size()) {
            best_root = root;
            best_point = point;
            found_mount = true;
        }
    }
    if (!found_mount)
        throw Error(ENOENT, "set device cgroup", what,
                    "no cgroup v1 devices hierarchy holding " + v1_path + " is mounted");
    std::filesystem::path dir = best_point;
    std::string rest = best_root == "/" ? v1_path : v1_path.substr(best_root.size());
    if (!rest.empty() && rest != "/") dir /= std::filesystem::path(rest).relative_path();
    return dir;
}

bool allows(std::string_view devices_list, unsigned major, unsigned minor) {
    auto matches = [](std::string_view field, unsigned value) {
        if (field == "*") return true;
        auto v = parse_unsigned(field);
        return v && *v == value;
    };
    for (auto line : split(devices_list, '\n')) {
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

}  // namespace gpubind::cgroup
