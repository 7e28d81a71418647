// A System that passes every call to another one (the real LinuxSystem, or
// the recording one) and fails one of them: the k-th call made through it
// (counted from 1) throws Error(errno) without reaching the System below,
// as the kernel would have failed it (EIO, ENOSPC, EPERM, EMFILE, EINTR).
// Every other call, the rollback's after the fault too, goes through.
//
//   os::LinuxSystem real;
//   test::FailingSystem sys(real);
//   sys.fail_at(7, ENOSPC);
//   exec::execute(plan, target, sys);  // the 7th system call fails
//   sys.fired();                        // false: the run made fewer than 7
//
// A walk tries k = 1, 2, ... until a run completes without the fault firing.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpubind/os/system.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::test {

class FailingSystem final : public os::System {
  public:
    explicit FailingSystem(os::System& inner) : inner_(inner) {}

    // Fails the k-th call from now (1: the next one) with `err`; 0: none.
    void fail_at(std::size_t k, int err) {
        fail_at_ = k;
        errno_ = err;
        calls_.clear();
        failed_.clear();
    }
    // Whether the fault was injected, and into which call ("make_file").
    bool fired() const { return !failed_.empty(); }
    const std::string& failed_call() const { return failed_; }
    // The names of the calls made since fail_at, in order.
    const std::vector<std::string>& calls() const { return calls_; }

    // --- Processes and namespaces ---
    util::Fd open_process(pid_t pid) override {
        hit("open_process");
        return inner_.open_process(pid);
    }
    util::Fd open_mount_ns(int pidfd, pid_t pid) override {
        hit("open_mount_ns");
        return inner_.open_mount_ns(pidfd, pid);
    }
    std::string read_proc(int pidfd, pid_t pid, const std::string& name) override {
        hit("read_proc");
        return inner_.read_proc(pidfd, pid, name);
    }
    util::Fd open_user_ns(int pidfd, pid_t pid) override {
        hit("open_user_ns");
        return inner_.open_user_ns(pidfd, pid);
    }
    void enter_user_ns(int fd) override {
        hit("enter_user_ns");
        inner_.enter_user_ns(fd);
    }
    util::Fd open_own_mount_ns() override {
        hit("open_own_mount_ns");
        return inner_.open_own_mount_ns();
    }
    util::Fd open_cwd() override {
        hit("open_cwd");
        return inner_.open_cwd();
    }
    bool same_file(int a, int b) override {
        hit("same_file");
        return inner_.same_file(a, b);
    }
    void enter_mount_ns(int fd) override {
        hit("enter_mount_ns");
        inner_.enter_mount_ns(fd);
    }
    void change_dir(int fd) override {
        hit("change_dir");
        inner_.change_dir(fd);
    }
    void set_fs_ids(unsigned uid, unsigned gid) override {
        hit("set_fs_ids");
        inner_.set_fs_ids(uid, gid);
    }
    util::Fd open_executable(const std::filesystem::path& p) override {
        hit("open_executable");
        return inner_.open_executable(p);
    }
    std::string run(int exe, const std::string& what, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout) override {
        hit("run");
        return inner_.run(exe, what, args, timeout);
    }
    std::string run_as(const os::Owner& owner, int exe, const std::string& what,
                       const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout) override {
        hit("run_as");
        return inner_.run_as(owner, exe, what, args, timeout);
    }

    // --- Devices and cgroups ---
    std::string read_host_file(const std::filesystem::path& p) override {
        hit("read_host_file");
        return inner_.read_host_file(p);
    }
    std::optional<std::string> cgroup_mounts(bool v1) override {
        hit("cgroup_mounts");
        return inner_.cgroup_mounts(v1);
    }
    util::Fd open_cgroup_file(const std::filesystem::path& dir, const std::string& name) override {
        hit("open_cgroup_file");
        return inner_.open_cgroup_file(dir, name);
    }
    void write_rule(int fd, const std::string& rule, const std::string& what) override {
        hit("write_rule");
        inner_.write_rule(fd, rule, what);
    }
    util::Fd open_cgroup_dir(const std::filesystem::path& dir) override {
        hit("open_cgroup_dir");
        return inner_.open_cgroup_dir(dir);
    }
    os::DevicePrograms query_device_programs(int fd) override {
        hit("query_device_programs");
        return inner_.query_device_programs(fd);
    }
    util::Fd open_program(std::uint32_t id) override {
        hit("open_program");
        return inner_.open_program(id);
    }
    std::vector<os::bpf::Insn> program_instructions(int fd) override {
        hit("program_instructions");
        return inner_.program_instructions(fd);
    }
    util::Fd load_device_program(const std::vector<os::bpf::Insn>& insns,
                                 const std::string& name) override {
        hit("load_device_program");
        return inner_.load_device_program(insns, name);
    }
    void replace_device_program(int cgroup_fd, int new_prog, int old_prog, unsigned flags,
                                const std::string& what) override {
        hit("replace_device_program");
        inner_.replace_device_program(cgroup_fd, new_prog, old_prog, flags, what);
    }
    util::Fd open_program_dir(const std::filesystem::path& dir, std::string& why,
                              bool& taken) override {
        hit("open_program_dir");
        return inner_.open_program_dir(dir, why, taken);
    }
    util::Fd open_kept_program(const std::string& path) override {
        hit("open_kept_program");
        return inner_.open_kept_program(path);
    }
    void keep_program(int fd, const std::string& path) override {
        hit("keep_program");
        inner_.keep_program(fd, path);
    }

    // --- Files and mounts ---
    util::Fd open_tree(const std::filesystem::path& p) override {
        hit("open_tree");
        return inner_.open_tree(p);
    }
    os::FileInfo stat_fd(int fd) override {
        hit("stat_fd");
        return inner_.stat_fd(fd);
    }
    util::Fd open_root(const std::filesystem::path& rootfs) override {
        hit("open_root");
        return inner_.open_root(rootfs);
    }
    util::Fd open_dir_in_root(int root, const std::filesystem::path& p) override {
        hit("open_dir_in_root");
        return inner_.open_dir_in_root(root, p);
    }
    os::FileInfo stat_at(int dir, const std::string& name) override {
        hit("stat_at");
        return inner_.stat_at(dir, name);
    }
    os::FileInfo stat_in_root(int root, const std::filesystem::path& p) override {
        hit("stat_in_root");
        return inner_.stat_in_root(root, p);
    }
    std::string read_link_at(int dir, const std::string& name) override {
        hit("read_link_at");
        return inner_.read_link_at(dir, name);
    }
    os::DirNames list_dir(int dir, std::size_t max, const os::NameFilter& keep) override {
        hit("list_dir");
        return inner_.list_dir(dir, max, keep);
    }
    util::Fd make_dir(int dir, const std::string& name, unsigned mode) override {
        hit("make_dir");
        return inner_.make_dir(dir, name, mode);
    }
    util::Fd make_file(int dir, const std::string& name, unsigned mode) override {
        hit("make_file");
        return inner_.make_file(dir, name, mode);
    }
    void write_file_at(int dir, const std::string& name, const std::string& data,
                       unsigned mode) override {
        hit("write_file_at");
        inner_.write_file_at(dir, name, data, mode);
    }
    void make_symlink(const std::string& target, int dir, const std::string& name) override {
        hit("make_symlink");
        inner_.make_symlink(target, dir, name);
    }
    util::Fd try_make_file(int dir, const std::string& name, unsigned mode) override {
        hit("try_make_file");
        return inner_.try_make_file(dir, name, mode);
    }
    util::Fd try_make_dir(int dir, const std::string& name, unsigned mode) override {
        hit("try_make_dir");
        return inner_.try_make_dir(dir, name, mode);
    }
    bool try_make_symlink(const std::string& target, int dir, const std::string& name) override {
        hit("try_make_symlink");
        return inner_.try_make_symlink(target, dir, name);
    }
    os::RegularFile read_regular_at(int dir, const std::string& name, std::size_t max) override {
        hit("read_regular_at");
        return inner_.read_regular_at(dir, name, max);
    }
    void replace_file_at(int dir, const std::string& temp, const std::string& name,
                         const std::string& data, unsigned mode,
                         const std::optional<os::Owner>& chown_to) override {
        hit("replace_file_at");
        inner_.replace_file_at(dir, temp, name, data, mode, chown_to);
    }
    util::Fd open_at(int dir, const std::string& name) override {
        hit("open_at");
        return inner_.open_at(dir, name);
    }
    void remove(int dir, const std::string& name, bool directory) override {
        hit("remove");
        inner_.remove(dir, name, directory);
    }
    void rename_at(int dir, const std::string& from, const std::string& to) override {
        hit("rename_at");
        inner_.rename_at(dir, from, to);
    }
    void exchange_at(int dir, const std::string& a, const std::string& b) override {
        hit("exchange_at");
        inner_.exchange_at(dir, a, b);
    }
    void set_mount_flags(int fd, unsigned flags) override {
        hit("set_mount_flags");
        inner_.set_mount_flags(fd, flags);
    }
    void attach(int mount_fd, int target_fd) override {
        hit("attach");
        inner_.attach(mount_fd, target_fd);
    }
    void detach(int dir, const std::string& name) override {
        hit("detach");
        inner_.detach(dir, name);
    }
    util::Fd clone_tree(int fd) override {
        hit("clone_tree");
        return inner_.clone_tree(fd);
    }
    util::Fd make_tmpfs() override {
        hit("make_tmpfs");
        return inner_.make_tmpfs();
    }
    std::uint64_t mount_id(int fd) override {
        hit("mount_id");
        return inner_.mount_id(fd);
    }
    std::optional<std::pair<unsigned, unsigned>> tmpfs_device(int fd) override {
        hit("tmpfs_device");
        return inner_.tmpfs_device(fd);
    }
    std::optional<bool> mount_shared(int fd) override {
        hit("mount_shared");
        return inner_.mount_shared(fd);
    }
    std::string read_mountinfo() override {
        hit("read_mountinfo");
        return inner_.read_mountinfo();
    }
    util::Fd open_mountinfo() override {
        hit("open_mountinfo");
        return inner_.open_mountinfo();
    }
    std::vector<bool> mountinfo_shows(
        int fd, const std::vector<std::pair<unsigned, unsigned>>& devices) override {
        hit("mountinfo_shows");
        return inner_.mountinfo_shows(fd, devices);
    }

  private:
    // Counts the call; the chosen one throws instead of reaching inner_.
    void hit(const char* name) {
        calls_.emplace_back(name);
        if (calls_.size() == fail_at_ && failed_.empty()) {
            failed_ = name;
            throw util::Error(errno_, name,
                              "(fault injected into call " + std::to_string(fail_at_) + ")");
        }
    }

    os::System& inner_;
    std::size_t fail_at_ = 0;
    int errno_ = EIO;
    std::vector<std::string> calls_;
    std::string failed_;
};

// What one run through a FailingSystem came to, as a child process sends it
// back (text(), from()): whether the fault fired, in which call, the error
// and its errno.
struct FaultOutcome {
    bool fired = false;
    std::string failed_call, error;
    int code = 0;
    std::string text() const {
        return std::to_string(code) + '\x1f' + (fired ? "1" : "0") + failed_call + '\x1f' + error;
    }
    static FaultOutcome from(const std::string& text) {
        FaultOutcome o;
        const auto first = text.find('\x1f');
        const auto sep = first == std::string::npos ? first : text.find('\x1f', first + 1);
        if (sep == std::string::npos || first + 1 >= sep) {
            o.error = "<no outcome: " + text + ">";
            return o;
        }
        o.code = std::atoi(text.substr(0, first).c_str());
        o.fired = text[first + 1] == '1';
        o.failed_call = text.substr(first + 2, sep - first - 2);
        o.error = text.substr(sep + 1);
        return o;
    }
};

}  // namespace gpubind::test
