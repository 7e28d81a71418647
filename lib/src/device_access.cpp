// Device access: the container's device cgroup, v1 rules, v2 device programs.
#include "device_access.hpp"

#include <cerrno>
#include <set>
#include <utility>

#include "gpubind/cgroup.hpp"
#include "gpubind/error.hpp"
#include "gpubind/log.hpp"

namespace gpubind {

using std::filesystem::path;

bool refused_by_kernel(int err) {
    return err == EPERM || err == EACCES || err == EROFS || err == ENOSYS;
}

// The usual places first (statmount, microseconds); where they do not hold
// the process's cgroup, or the kernel cannot say, the host's whole mountinfo.
// A process in a v1 devices hierarchy that is not at the usual place is
// asked of mountinfo too: v1 or v2 is decided by where that hierarchy is.
cgroup::DeviceCgroup DeviceAccess::locate(const std::string& proc_cgroup, const std::string& who) {
    // ("devices" in a v2 path too only costs the mountinfo read.)
    const bool v1_devices = proc_cgroup.find("devices") != std::string::npos;
    const auto usual = sys_.cgroup_mounts(v1_devices);
    const bool v1_elsewhere = usual && v1_devices && usual->find(",devices\n") == std::string::npos;
    if (usual && !v1_elsewhere) {
        try {
            return cgroup::locate(proc_cgroup, *usual, who);
        } catch (const Error& e) {
            logger().debug("{}: not in the usual cgroup mounts ({}); reading mountinfo", who,
                           e.what());
        }
    }
    return cgroup::locate(proc_cgroup, sys_.read_host_file("/proc/self/mountinfo"), who);
}

void DeviceAccess::prepare(int pidfd, pid_t pid, const std::string& who) {
    std::string text = sys_.read_proc(pidfd, pid, "cgroup");
    const cgroup::DeviceCgroup where = locate(text, who);
    try {
        if (where.kind == cgroup::DeviceCgroup::Kind::V1)
            prepare_v1(where.dir);
        else
            prepare_v2(where.dir);
    } catch (const Error& e) {
        const int err = e.code().value();
        if (!refused_by_kernel(err)) throw;
        if (on_refused_ == OnRefused::Fail)
            throw Error(e.kind(), err, "set device cgroup", where.dir.string(),
                        std::string(e.what()) +
                            " ([policy] on-refused = \"warn\" starts containers without "
                            "device rules where the kernel refuses them)");
        logger().warn("set device cgroup {}: {}; going on without device rules",
                      where.dir.string(), e.what());
        rules_.clear();
        swaps_.clear();
    }
}

// The planned devices, once each: char devices, read and write.
std::vector<bpf::DeviceRule> DeviceAccess::device_rules() const {
    std::vector<bpf::DeviceRule> out;
    std::set<std::pair<unsigned, unsigned>> seen;
    for (const auto& dev : devices_)
        if (seen.insert({dev.node.major, dev.node.minor}).second)
            out.push_back(
                {bpf::kDevChar, dev.node.major, dev.node.minor, bpf::kAccRead | bpf::kAccWrite});
    return out;
}

// cgroup v2: every device program attached to the container's cgroup is
// read, extended with our rules and loaded now; the swap comes in allow().
void DeviceAccess::prepare_v2(const path& dir) {
    program_cgroup_ = std::make_shared<Fd>(sys_.open_cgroup_dir(dir));
    program_cgroup_what_ = dir.string();
    const DevicePrograms attached = sys_.query_device_programs(program_cgroup_->get());
    if (attached.ids.empty()) {
        logger().debug("{}: no device program attached, every device is allowed already",
                       dir.string());
        return;
    }
    attach_flags_ = attached.attach_flags;
    attached_ids_ = attached.ids;
    const std::vector<bpf::DeviceRule> rules = device_rules();
    for (std::uint32_t id : attached.ids) {
        const std::string what = "program " + std::to_string(id) + " on " + dir.string();
        auto old_prog = std::make_shared<Fd>(sys_.open_program(id));
        std::vector<bpf::Insn> insns = sys_.program_instructions(old_prog->get());
        bpf::check_reloadable(insns, what);
        auto new_prog = std::make_shared<Fd>(sys_.load_device_program(
            bpf::extend_device_program(rules, insns), bpf::kProgramName));
        logger().debug("{}: {} instructions, extended with {} device rules", what, insns.size(),
                       rules.size());
        swaps_.push_back({old_prog, new_prog});
    }
}

void DeviceAccess::prepare_v1(const path& dir) {
    std::string list = sys_.read_host_file(dir / "devices.list");
    std::set<std::pair<unsigned, unsigned>> seen;
    for (const auto& dev : devices_) {
        auto key = std::make_pair(dev.node.major, dev.node.minor);
        if (!seen.insert(key).second) continue;
        if (cgroup::allows(list, key.first, key.second)) continue;  // nothing to add or undo
        rules_.push_back("c " + std::to_string(key.first) + ":" + std::to_string(key.second) +
                         " rw");
    }
    if (rules_.empty()) return;
    allow_what_ = (dir / "devices.allow").string();
    deny_what_ = (dir / "devices.deny").string();
    allow_ = sys_.open_cgroup_file(dir, "devices.allow");
    deny_ = std::make_shared<Fd>(sys_.open_cgroup_file(dir, "devices.deny"));
}

void DeviceAccess::allow(const Record& record) {
    for (const auto& rule : rules_) {
        if (!kernel_allows([&] { sys_.write_rule(allow_.get(), rule, allow_what_); })) continue;
        record(deny_what_, [this, deny = deny_, rule] {
            sys_.write_rule(deny->get(), rule, deny_what_);
        });
    }
    // A single (not multi-attach) program cannot be swapped with
    // BPF_F_REPLACE: the attach replaces whatever is there. Checked again
    // right before it, so that a program the runtime attached meanwhile
    // (a newer one, `runc update`) is not replaced by our extension of an
    // older one. (The kernel offers no compare-and-swap here: narrowed,
    // not closed.)
    if (!swaps_.empty() && (attach_flags_ & kBpfAllowMulti) == 0 &&
        sys_.query_device_programs(program_cgroup_->get()).ids != attached_ids_)
        throw Error(EAGAIN, "set device cgroup", program_cgroup_what_,
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
    } catch (const Error& e) {
        if (!refused_by_kernel(e.code().value()) || on_refused_ == OnRefused::Fail) throw;
        logger().warn("{}; going on without this device rule", e.what());
        return false;
    }
}

}  // namespace gpubind
