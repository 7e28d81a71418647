// The driver's per-cgroup memory limit on a container: see share_limit.hpp.
#include "gpubind/start/share_limit.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "gpubind/node/description.hpp"
#include "gpubind/os/cgroup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::start {

namespace {

constexpr std::chrono::milliseconds kNvmlTimeout{10000};
constexpr std::size_t kMaxRecord = 64u << 10;

// The record's name: a container id as runtimes make them; anything else
// ("..", a slash) never names a file.
bool record_name_ok(const std::string& id) {
    if (id.empty() || id.size() > 255 || id == "." || id == "..") return false;
    for (char c : id)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
            return false;
    return true;
}

std::filesystem::path record_path(const config::Config& config, const std::string& id) {
    return config.state_dir / "shares" / id;
}

// "<cgroup dir>\n<minor> <minor>...\n"
std::string record_text(const std::string& dir, const std::vector<node::MemoryLimit>& limits) {
    std::string text = dir + "\n";
    for (const auto& l : limits) text += std::to_string(l.minor) + " ";
    text += "\n";
    return text;
}

std::vector<node::MemoryLimit> cleared(const std::vector<node::MemoryLimit>& limits) {
    std::vector<node::MemoryLimit> out;
    for (const auto& l : limits) out.push_back({l.minor, 0, node::kNoMemoryLimit});
    return out;
}

}  // namespace

std::string share_cgroup_dir(std::string_view proc_cgroup, std::string_view mountinfo,
                             const std::string& who) {
    bool unified = false;
    for (auto line : util::split(proc_cgroup, '\n')) unified |= line.starts_with("0::");
    if (!unified)
        util::throw_refused("set GPU memory limit", who,
                            "the driver's per-cgroup memory limit needs a cgroup v2 cgroup, and "
                            "the container is in cgroup v1 hierarchies only");
    try {
        return os::cgroup::unified_dir(proc_cgroup, mountinfo, who).string();
    } catch (const util::Error& e) {
        throw util::Error(util::ErrorKind::Refused, ECANCELED, "set GPU memory limit", who,
                          e.what());
    }
}

std::string apply_memory_limits(const node::Node& node,
                                const std::vector<node::MemoryLimit>& limits, pid_t pid,
                                const std::string& container_id, os::System& sys,
                                const config::Config& config) {
    if (limits.empty()) return {};
    const std::string who = fmt::format(
        "container {}", container_id.empty() ? "pid " + std::to_string(pid) : container_id);
    if (!container_id.empty() && !record_name_ok(container_id))
        util::throw_invalid("set GPU memory limit", who,
                            "the container id cannot name its record (letters, digits, '-', "
                            "'_' and '.')");
    const util::Fd pidfd = sys.open_process(pid);
    const std::string proc_cgroup = sys.read_proc(pidfd.get(), pid, "cgroup");
    std::string dir;
    const auto usual = sys.cgroup_mounts(false);
    try {
        if (!usual) throw util::Error(ENOENT, "set GPU memory limit", who);
        dir = share_cgroup_dir(proc_cgroup, *usual, who);
    } catch (const util::Error&) {
        dir = share_cgroup_dir(proc_cgroup, sys.read_host_file("/proc/self/mountinfo"), who);
    }
    const auto got = node::set_memory_limits(node, dir, limits, kNvmlTimeout);
    std::string wrong;
    for (const auto& want : limits) {
        const auto it = std::find_if(got.begin(), got.end(), [&](const node::MemoryLimit& g) {
            return g.minor == want.minor;
        });
        if (it == got.end())
            wrong = fmt::format("GPU minor {}'s limit was not read back", want.minor);
        else if (*it != want)
            wrong = fmt::format(
                "GPU minor {} reads back a limit of {} bytes (soft {}), not {} "
                "(soft {})",
                want.minor, it->hard, it->soft, want.hard, want.soft);
        if (!wrong.empty()) break;
    }
    if (wrong.empty() && !container_id.empty()) {
        try {
            util::make_directories(config.state_dir / "shares");
            util::write_file_atomic(record_path(config, container_id), record_text(dir, limits),
                                    {.mode = 0600});
        } catch (const util::Error& e) {
            wrong = std::string("cannot record it for its undoing: ") + e.what();
        }
    }
    if (!wrong.empty()) {
        try {
            node::set_memory_limits(node, dir, cleared(limits), kNvmlTimeout);
        } catch (const util::Error& e) {
            util::logger().warn("set GPU memory limit {}: clearing it: {}", dir, e.what());
        }
        util::throw_refused("set GPU memory limit", dir, wrong);
    }
    util::logger().info("GPU memory limit set on {} for {} GPUs (the driver's per-cgroup limit)",
                        dir, limits.size());
    if (container_id.empty())
        util::logger().warn(
            "set GPU memory limit {}: no container id to record it under: it is "
            "not cleared when the container goes",
            dir);
    return dir;
}

void clear_memory_limits(const node::Node& node, const std::string& cgroup_dir,
                         const std::vector<node::MemoryLimit>& limits, const config::Config& config,
                         const std::string& container_id) {
    try {
        node::set_memory_limits(node, cgroup_dir, cleared(limits), kNvmlTimeout);
    } catch (const util::Error& e) {
        util::logger().warn("set GPU memory limit {}: clearing it: {}", cgroup_dir, e.what());
    }
    if (record_name_ok(container_id)) ::unlink(record_path(config, container_id).c_str());
}

void undo_memory_limits(const config::Config& config, const std::string& container_id) {
    if (!record_name_ok(container_id)) return;
    const auto path = record_path(config, container_id);
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return;  // nothing set for it (the usual case)
    try {
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0)
            throw util::Error(EPERM, "undo GPU memory limit", path.string(),
                              "not a regular file of root's");
        const std::string text = util::read_fd(fd.get(), kMaxRecord, path.string());
        const auto lines = util::split(text, '\n');
        if (lines.size() < 2 || lines[0].empty() || lines[0][0] != '/')
            throw util::Error(EINVAL, "undo GPU memory limit", path.string(), "not a record");
        std::vector<node::MemoryLimit> limits;
        for (auto minor : util::split(lines[1], ' '))
            if (auto m = util::parse_unsigned(minor))
                limits.push_back({static_cast<unsigned>(*m), 0, node::kNoMemoryLimit});
        const node::NodeKnowledge known = node::load_node(config, {});
        const std::string dir(lines[0]);
        node::set_memory_limits(known.node, dir, limits, kNvmlTimeout);
        util::logger().info("GPU memory limit cleared on {}", dir);
    } catch (const std::exception& e) {
        util::logger().warn("undo GPU memory limit of container {}: {}", container_id, e.what());
    }
    ::unlink(path.c_str());
}

}  // namespace gpubind::start
