// Device access: the container's device cgroup, v1 rules, v2 device programs.
#include "device_access.hpp"

#include <cerrno>
#include <chrono>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "gpubind/os/cgroup.hpp"
#include "gpubind/util/digest.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/timing.hpp"

namespace gpubind::exec {

using std::filesystem::path;

namespace {

// Kept programs: at most this many; a start that would keep one more first
// removes them all (a node needs a few: one per runtime program and GPU set).
constexpr std::size_t kMaxKeptPrograms = 256;
constexpr std::string_view kKeptPrefix = "dev-";

// Microseconds since `since`, for the debug log (tests/gpu/check.sh reads it).
long long us_since(std::chrono::steady_clock::time_point since) {
    return util::micros(since, std::chrono::steady_clock::now());
}

}  // namespace

bool refused_by_kernel(int err) {
    return err == EPERM || err == EACCES || err == EROFS || err == ENOSYS;
}

// The usual places first (statmount, microseconds); where they do not hold
// the process's cgroup, or the kernel cannot say, the host's whole mountinfo.
// A process in a v1 devices hierarchy that is not at the usual place is
// asked of mountinfo too: v1 or v2 is decided by where that hierarchy is.
os::cgroup::DeviceCgroup DeviceAccess::locate(const std::string& proc_cgroup,
                                              const std::string& who) {
    // ("devices" in a v2 path too only costs the mountinfo read.)
    const bool v1_devices = proc_cgroup.find("devices") != std::string::npos;
    const auto usual = sys_.cgroup_mounts(v1_devices);
    const bool v1_elsewhere = usual && v1_devices && usual->find(",devices\n") == std::string::npos;
    if (usual && !v1_elsewhere) {
        try {
            return os::cgroup::locate(proc_cgroup, *usual, who);
        } catch (const util::Error& e) {
            util::logger().debug("{}: not in the usual cgroup mounts ({}); reading mountinfo", who,
                                 e.what());
        }
    }
    return os::cgroup::locate(proc_cgroup, sys_.read_host_file("/proc/self/mountinfo"), who);
}

void DeviceAccess::prepare(int pidfd, pid_t pid, const std::string& who) {
    const auto started = std::chrono::steady_clock::now();
    std::string text = processes_.read_proc(pidfd, pid, "cgroup");
    const os::cgroup::DeviceCgroup where = locate(text, who);
    util::logger().debug("device cgroup {} located in {} us", where.dir.string(),
                         us_since(started));
    try {
        if (where.kind == os::cgroup::DeviceCgroup::Kind::V1)
            prepare_v1(where.dir);
        else
            prepare_v2(where.dir);
    } catch (const util::Error& e) {
        const int err = e.code().value();
        if (!refused_by_kernel(err)) throw;
        if (on_refused_ == config::OnRefused::Fail)
            throw util::Error(e.kind(), err, "set device cgroup", where.dir.string(),
                              std::string(e.what()) +
                                  " ([policy] on-refused = \"warn\" starts containers without "
                                  "device rules where the kernel refuses them)");
        util::logger().warn("set device cgroup {}: {}; going on without device rules",
                            where.dir.string(), e.what());
        rules_.clear();
        swaps_.clear();
    }
}

// The planned devices, once each: char devices, read and write.
std::vector<os::bpf::DeviceRule> DeviceAccess::device_rules() const {
    std::vector<os::bpf::DeviceRule> out;
    std::set<std::pair<unsigned, unsigned>> seen;
    for (const auto& dev : devices_)
        if (seen.insert({dev.node.major, dev.node.minor}).second)
            out.push_back({os::bpf::kDevChar, dev.node.major, dev.node.minor,
                           os::bpf::kAccRead | os::bpf::kAccWrite});
    return out;
}

// cgroup v2: every device program attached to the container's cgroup is
// read, extended with our rules and loaded now; the swap comes in allow().
void DeviceAccess::prepare_v2(const path& dir) {
    program_cgroup_ = std::make_shared<util::Fd>(sys_.open_cgroup_dir(dir));
    program_cgroup_what_ = dir.string();
    const os::DevicePrograms attached = sys_.query_device_programs(program_cgroup_->get());
    if (attached.ids.empty()) {
        util::logger().debug("{}: no device program attached, every device is allowed already",
                             dir.string());
        return;
    }
    attach_flags_ = attached.attach_flags;
    attached_ids_ = attached.ids;
    const std::vector<os::bpf::DeviceRule> rules = device_rules();
    for (std::uint32_t id : attached.ids) {
        const auto started = std::chrono::steady_clock::now();
        const std::string what = "program " + std::to_string(id) + " on " + dir.string();
        auto old_prog = std::make_shared<util::Fd>(sys_.open_program(id));
        std::vector<os::bpf::Insn> insns = sys_.program_instructions(old_prog->get());
        os::bpf::check_reloadable(insns, what);
        const auto read = us_since(started);
        auto new_prog = std::make_shared<util::Fd>(
            device_program(os::bpf::extend_device_program(rules, insns)));
        util::logger().debug(
            "{}: {} instructions, extended with {} device rules (read in {} us, "
            "ready in {} us)",
            what, insns.size(), rules.size(), read, us_since(started) - read);
        swaps_.push_back({old_prog, new_prog});
    }
}

// Loading a program makes the kernel verify and compile it (50-300 us a
// start); a program kept from an earlier start is fetched instead (~1 us)
// when the instructions the kernel runs for it are exactly `want` (compared
// in full: its name is only a digest). The directory is an optimisation:
// anything amiss with it is logged and the program loaded as without it.
util::Fd DeviceAccess::device_program(const std::vector<os::bpf::Insn>& want) {
    if (program_dir_.empty()) return sys_.load_device_program(want, os::bpf::kProgramName);
    util::Fd dir;
    std::string name, at;  // named only where it can be kept
    try {
        std::string why;
        bool taken = false;
        dir = sys_.open_program_dir(program_dir_, why, taken);
        if (!dir && taken) {
            // Made first by someone else: every start pays a load until an
            // administrator removes it (the packages make it at install).
            util::logger().warn("device programs are not kept: {}", why);
        } else if (!dir) {
            util::logger().debug("device programs are not kept: {}", why);
        } else {
            const std::string_view bytes(reinterpret_cast<const char*>(want.data()),
                                         want.size() * sizeof(os::bpf::Insn));
            name = fmt::format("{}{:016x}", kKeptPrefix, util::digest(bytes));
            at = util::join_path(program_dir_, name);
            if (util::Fd kept = sys_.open_kept_program(at)) {
                if (sys_.program_instructions(kept.get()) == want) return kept;
                util::logger().warn(
                    "kept device program {} runs other instructions than its name "
                    "says; replacing it",
                    at);
                files_.remove(dir.get(), name, false);
            }
        }
    } catch (const util::Error& e) {
        util::logger().debug("device programs are not kept: {}", e.what());
        dir = util::Fd();
    }
    util::Fd prog = sys_.load_device_program(want, os::bpf::kProgramName);
    if (dir) keep(dir.get(), at, prog.get(), want);
    return prog;
}

void DeviceAccess::keep(int dir_fd, const std::string& path, int prog_fd,
                        const std::vector<os::bpf::Insn>& want) {
    try {
        // Only a program the kernel runs as it was given can be recognised later.
        if (sys_.program_instructions(prog_fd) != want) {
            util::logger().debug("device program not kept: the kernel rewrote its instructions");
            return;
        }
        const os::DirNames kept = files_.list_dir(dir_fd, kMaxKeptPrograms, [](std::string_view n) {
            return n.starts_with(kKeptPrefix);
        });
        if (kept.more || kept.names.size() >= kMaxKeptPrograms) {
            for (const std::string& old : kept.names) files_.remove(dir_fd, old, false);
            util::logger().info("{}: {} kept device programs removed to keep new ones",
                                program_dir_, kept.names.size());
        }
        sys_.keep_program(prog_fd, path);
        util::logger().debug("device program kept as {}", path);
    } catch (const util::Error& e) {  // another start keeping the same one: EEXIST
        util::logger().debug("device program not kept: {}", e.what());
    }
}

void DeviceAccess::prepare_v1(const path& dir) {
    std::string list = sys_.read_host_file(dir / "devices.list");
    std::set<std::pair<unsigned, unsigned>> seen;
    for (const auto& dev : devices_) {
        auto key = std::make_pair(dev.node.major, dev.node.minor);
        if (!seen.insert(key).second) continue;
        if (os::cgroup::allows(list, key.first, key.second)) continue;  // nothing to add or undo
        rules_.push_back("c " + std::to_string(key.first) + ":" + std::to_string(key.second) +
                         " rw");
    }
    if (rules_.empty()) return;
    allow_what_ = (dir / "devices.allow").string();
    deny_what_ = (dir / "devices.deny").string();
    allow_ = sys_.open_cgroup_file(dir, "devices.allow");
    deny_ = std::make_shared<util::Fd>(sys_.open_cgroup_file(dir, "devices.deny"));
}

void DeviceAccess::allow(const Record& record) {
    for (const auto& rule : rules_) {
        if (!kernel_allows([&] { sys_.write_rule(allow_.get(), rule, allow_what_); })) continue;
        record(deny_what_,
               [this, deny = deny_, rule] { sys_.write_rule(deny->get(), rule, deny_what_); });
    }
    // A single (not multi-attach) program cannot be swapped with
    // BPF_F_REPLACE: the attach replaces whatever is there. Checked again
    // right before it, so that a program the runtime attached meanwhile
    // (a newer one, `runc update`) is not replaced by our extension of an
    // older one. (The kernel offers no compare-and-swap here: narrowed,
    // not closed.)
    if (!swaps_.empty() && (attach_flags_ & os::kBpfAllowMulti) == 0 &&
        sys_.query_device_programs(program_cgroup_->get()).ids != attached_ids_)
        throw util::Error(EAGAIN, "set device cgroup", program_cgroup_what_,
                          "the runtime's device program changed while gpubind extended it; "
                          "refusing");
    for (const auto& swap : swaps_) {
        if (!kernel_allows([&] {
                sys_.replace_device_program(program_cgroup_->get(), swap.ours->get(),
                                            swap.runtime->get(), attach_flags_,
                                            program_cgroup_what_);
            }))
            continue;
        record(program_cgroup_what_, [this, cgroup = program_cgroup_, swap] {
            sys_.replace_device_program(cgroup->get(), swap.runtime->get(), swap.ours->get(),
                                        attach_flags_, program_cgroup_what_);
        });
    }
}

bool DeviceAccess::kernel_allows(const std::function<void()>& step) {
    try {
        step();
        return true;
    } catch (const util::Error& e) {
        if (!refused_by_kernel(e.code().value()) || on_refused_ == config::OnRefused::Fail) throw;
        util::logger().warn("{}; going on without this device rule", e.what());
        return false;
    }
}

}  // namespace gpubind::exec
