// Device access of one container start: its device cgroup located (v1, hybrid,
// v2), then on cgroup v1 rules written to devices.allow, on cgroup v2 each
// BPF_CGROUP_DEVICE program attached to its cgroup swapped for a copy that
// also allows the planned nodes. Every system call goes through the System's
// devices part, but for the process's /proc/<pid>/cgroup (its processes part)
// and the kept programs' directory listed and cleaned (its files part); the
// executor decides when (prepare on the host side, allow after the mounts)
// and keeps the undo of each step.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpubind/decide/plan.hpp"
#include "gpubind/os/bpf.hpp"
#include "gpubind/os/cgroup.hpp"
#include "gpubind/os/system.hpp"
#include "gpubind/util/fd.hpp"

namespace gpubind::exec {

// Whether an errno is the kernel (or a sandbox) refusing a device cgroup step
// (EPERM, EACCES, EROFS, ENOSYS), not a bug of ours.
bool refused_by_kernel(int err);

class DeviceAccess {
  public:
    // How a step done is reported: what it was about (for the log) and how to
    // undo it (run on rollback, in reverse order with the executor's other steps).
    using Record = std::function<void(const std::string& what, std::function<void()> undo)>;

    // `program_dir`: where device programs are kept for reuse (empty: none is).
    DeviceAccess(os::SystemDevices& sys, os::SystemFiles& files, os::SystemProcesses& processes,
                 const std::vector<decide::PlannedDevice>& devices, config::OnRefused on_refused,
                 std::string program_dir = {})
        : sys_(sys),
          files_(files),
          processes_(processes),
          devices_(devices),
          on_refused_(on_refused),
          program_dir_(std::move(program_dir)) {}
    // The three parts of one System.
    DeviceAccess(os::System& sys, const std::vector<decide::PlannedDevice>& devices,
                 config::OnRefused on_refused, std::string program_dir = {})
        : DeviceAccess(sys, sys, sys, devices, on_refused, std::move(program_dir)) {}

    // Host side, before anything changes: locates the process's device cgroup
    // (its /proc/<pid>/cgroup through the pidfd, the host's mountinfo), reads
    // what it allows already (v1) or loads the extended programs (v2). A
    // refusal by the kernel fails, or with OnRefused::Warn leaves nothing to do.
    void prepare(int pidfd, pid_t pid, const std::string& who);
    // Writes the rules, swaps the programs; each step done goes to `record`.
    void allow(const Record& record);

  private:
    using SharedFd = std::shared_ptr<util::Fd>;

    std::vector<os::bpf::DeviceRule> device_rules() const;
    void prepare_v1(const std::filesystem::path& dir);
    os::cgroup::DeviceCgroup locate(const std::string& proc_cgroup, const std::string& who);
    void prepare_v2(const std::filesystem::path& dir);
    // The program `want` loaded: the one kept in program_dir_ when it runs
    // exactly `want`, else loaded now and kept there.
    util::Fd device_program(const std::vector<os::bpf::Insn>& want);
    void keep(int dir_fd, const std::string& path, int prog_fd,
              const std::vector<os::bpf::Insn>& want);
    // Runs one step; a refusal by the kernel is an error, or with
    // on-refused = warn a warning and false.
    bool kernel_allows(const std::function<void()>& step);

    os::SystemDevices& sys_;
    os::SystemFiles& files_;          // the kept programs' directory: list_dir, remove
    os::SystemProcesses& processes_;  // read_proc of the process's cgroup
    const std::vector<decide::PlannedDevice>& devices_;
    config::OnRefused on_refused_;
    std::string program_dir_;

    // cgroup v1
    std::vector<std::string> rules_;
    util::Fd allow_;
    SharedFd deny_;
    std::string allow_what_, deny_what_;
    // cgroup v2
    struct Swap {
        SharedFd runtime, ours;  // the runtime's program and its extended copy
    };
    std::vector<Swap> swaps_;
    SharedFd program_cgroup_;
    std::string program_cgroup_what_;
    unsigned attach_flags_ = 0;
    std::vector<std::uint32_t> attached_ids_;  // what prepare_v2 extended
};

}  // namespace gpubind::exec
