// A fluent OCI bundle for end-to-end tests: a busybox rootfs with the host's
// glibc, its loader and the probe, a config.json with gpubind-hook registered
// as users register it, run by the real runc.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpubind::test {

struct RunResult {
    int exit_code = -1;
    std::string out;   // the container's stdout
    std::string err;   // runc's and the container's stderr
};

// Runs argv with an empty stdin, capturing stdout and stderr.
RunResult run_command(const std::vector<std::string>& argv);

enum class Layout { Multiarch, Lib64 };

class Bundle {
public:
    // `dir` is created; the bundle's rootfs is dir/rootfs.
    explicit Bundle(std::filesystem::path dir, Layout layout = Layout::Multiarch);

    Bundle& env(const std::string& key_value);
    Bundle& volume_device(const std::string& id);  // /dev/null -> /var/run/nvidia-container-devices/<id>
    Bundle& bind(const std::filesystem::path& host, const std::string& dest);
    Bundle& privileged(bool on = true);
    Bundle& hook(const std::filesystem::path& hook, const std::filesystem::path& config,
                 const std::string& stage = "prestart");
    Bundle& no_proc_mount();
    Bundle& command(const std::string& shell_script);   // run by /bin/sh -c
    nlohmann::json& spec() { return spec_; }

    const std::filesystem::path& dir() const { return dir_; }
    std::filesystem::path rootfs() const { return dir_ / "rootfs"; }

    // Writes config.json and runs `<runtime_binary()> run`; the container is deleted after.
    RunResult run();
    // The same through another runtime binary (gpubind-runtime); deleted with runtime_binary().
    RunResult run_with(const std::string& runtime);
    // Writes config.json (run() does it too).
    void write_spec() const;
    // The runtime state directory run() passes as --root.
    std::filesystem::path state_root() const { return dir_ / "runc-state"; }

private:
    void make_rootfs(Layout layout);

    std::filesystem::path dir_;
    nlohmann::json spec_;
};

// $name if set and not empty, else `fallback`.
std::string env_or(const char* name, const char* fallback);
// The OCI runtime a suite is written for: "runc" or "crun" (gpubind_e2e_test's
// RUNTIME in tests/CMakeLists.txt; defined in suite_runtime.cpp).
const char* suite_runtime() noexcept;
// The binary that runs it: suite_runtime(), overridden by $GPUBIND_RUNC (runc
// suites) or $GPUBIND_CRUN (crun suites).
std::string runtime_binary();
// Sections of a container's output: a "== name" line starts one.
std::map<std::string, std::vector<std::string>> sections(const std::string& out);
bool contains(const std::vector<std::string>& lines, const std::string& line);

// A snapshot of a tree (paths, types, sizes, modes, link targets, mtimes),
// to prove a run changed nothing there.
std::string snapshot_tree(const std::filesystem::path& root);
// The mount table of this process's namespace, without per-boot noise.
std::string host_mounts();

// This process in a private mount namespace with cgroup2 on /sys/fs/cgroup:
// a runc started meanwhile runs in unified (cgroup v2) mode, and so does the
// hook it runs. Back in the original namespace and directory when it goes.
class PrivateCgroup2 {
public:
    PrivateCgroup2();
    ~PrivateCgroup2();
    PrivateCgroup2(const PrivateCgroup2&) = delete;
    PrivateCgroup2& operator=(const PrivateCgroup2&) = delete;
    // Empty when set up.
    const std::string& error() const { return error_; }

private:
    int own_ns_, cwd_;
    bool entered_ = false;
    std::string error_;
};

// Judges a hostile case on the host. A bait tree outside any rootfs, where an
// escaping link is aimed (a root-like layout: usr/bin, usr/lib/<multiarch>,
// usr/lib64, dev, proc/driver/nvidia, etc, lib/firmware/nvidia, run, tmp, each
// holding a file, and no file named like anything gpubind creates, so that a
// write through a link adds an entry); host files and trees that must not
// change (/etc/ld.so.cache); host directories where no entry may appear (the
// top levels of /, /tmp, /dev, /etc and the host's library and binary
// directories); and the mount table. arm() records every entry as (path, type,
// inode, mtime, size, content hash, link target, device numbers); changes()
// says what differs since, "" when nothing did.
class Tripwire {
public:
    // Creates the bait tree at `dir` (made; it must not exist yet).
    explicit Tripwire(std::filesystem::path dir);

    const std::filesystem::path& dir() const { return dir_; }
    // Another host file or tree whose every entry must stay as it is.
    Tripwire& watch_tree(const std::filesystem::path& path);
    // A host directory where no new entry may appear (top level only). New
    // names shaped like mkdtemp's ("<prefix>-XXXXXX" or "<prefix>.XXXXXX":
    // other tests' temporary directories) are not counted.
    Tripwire& watch_new_entries(const std::filesystem::path& dir);

    void arm();
    std::string changes() const;

private:
    struct Record {
        std::map<std::string, std::string> trees;    // path -> snapshot line
        std::map<std::string, std::string> entries;  // dir/name -> type
        std::string mounts;
    };
    Record record() const;

    std::filesystem::path dir_;
    std::vector<std::filesystem::path> trees_;
    std::vector<std::filesystem::path> entry_dirs_;
    Record armed_;
};

}  // namespace gpubind::test
