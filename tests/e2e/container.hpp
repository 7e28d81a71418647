// A fluent OCI bundle for end-to-end tests: a busybox rootfs with the host's
// glibc, its loader and the probe, a config.json with gpubind-hook registered
// as users register it, run by the real runc.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "built.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {

struct RunResult {
    int exit_code = -1;
    std::string out;  // the container's stdout
    std::string err;  // runc's and the container's stderr
};

// Runs argv with an empty stdin, capturing stdout and stderr.
RunResult run_command(const std::vector<std::string>& argv);

enum class Layout { Multiarch, Lib64 };

class Bundle {
  public:
    // `dir` is created; the bundle's rootfs is dir/rootfs.
    explicit Bundle(std::filesystem::path dir, Layout layout = Layout::Multiarch);

    Bundle& env(const std::string& key_value);
    Bundle& volume_device(
        const std::string& id);  // /dev/null -> /var/run/nvidia-container-devices/<id>
    Bundle& bind(const std::filesystem::path& host, const std::string& dest);
    Bundle& privileged(bool on = true);
    Bundle& hook(const std::filesystem::path& hook, const std::filesystem::path& config,
                 const std::string& stage = "prestart");
    Bundle& no_proc_mount();
    Bundle& command(const std::string& shell_script);  // run by /bin/sh -c
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

// A container created and started by the suite's runtime (runtime_binary())
// from a bundle, left running (its command should sleep); deleted, by force,
// when it goes.
class Detached {
  public:
    Detached(const Bundle& b, const std::string& id);
    ~Detached() { remove(); }
    Detached(const Detached&) = delete;
    Detached& operator=(const Detached&) = delete;

    void remove();
    bool created() const { return created_; }
    // What the runtime said when create or start failed.
    const std::string& error() const { return error_; }
    RunResult exec(std::vector<std::string> args) const;
    // The container's init process (the runtime's state), -1 when unknown.
    int pid() const;
    std::string proc_cgroup() const;  // its /proc/<pid>/cgroup

  private:
    std::string state_, id_;
    bool created_ = false;
    std::string error_;
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

// A simulated node for a suite: written under a temporary directory when made,
// removed with gpubind's config beside it when it goes. The config names the
// node's roots and logs at debug level to log(), then whatever write_config's
// `extra` adds.
class SimNode {
  public:
    explicit SimNode(const sim::Spec& spec, const std::string& prefix = "gpubind-e2e-node");
    ~SimNode();
    SimNode(const SimNode&) = delete;
    SimNode& operator=(const SimNode&) = delete;

    const sim::Manifest& manifest() const { return manifest_; }
    const std::filesystem::path& root() const { return dir_.path(); }
    const std::filesystem::path& config() const { return config_; }
    std::filesystem::path log() const { return root() / "gpubind.log"; }
    // The config's [node] state-dir: beside the node, so that rewriting the
    // node leaves the description for the fingerprint to judge.
    const std::filesystem::path& state_dir() const { return state_dir_; }
    // The config's [node] bpf-dir: <root>/bpf/gpubind, device programs kept
    // only where a test mounts a bpffs at <root>/bpf (never the host's).
    std::filesystem::path bpf_dir() const { return root() / "bpf/gpubind"; }
    // Where container starts write the node's CDI specs ([cdi] dir).
    const std::filesystem::path& cdi_dir() const { return cdi_dir_; }
    // (Re)writes the config; `extra` is appended (TOML: more tables). Unless
    // it has a [cdi] table, the config's [cdi] dir is cdi_dir().
    void write_config(const std::string& extra = {}) const;
    // Rewrites the node in place (another driver version, MIG layout, ...).
    void simulate(const sim::Spec& spec) { manifest_ = sim::simulate(root(), spec); }
    // Each GPU's node on the host, and where gpu_script() expects it bound
    // (/hostdev/nvidia<minor>) to try the ones a container was not given.
    std::vector<std::pair<std::filesystem::path, std::string>> host_gpus() const;

  private:
    TempDir dir_;
    sim::Manifest manifest_;
    std::filesystem::path config_;
    std::filesystem::path state_dir_;
    std::filesystem::path cdi_dir_;
};

// What gpu_script() prints and expect_gpus() checks of a container given GPUs
// with the utility and compute capabilities.
struct GpuChecks {
    // Where the image's loader finds libraries; empty: the libraries and the
    // loader are not checked.
    std::string lib_dir = "/usr/lib/x86_64-linux-gnu";
    bool all_nodes = true;      // every node of the manifest (false: the GPUs and nvidiactl)
    bool cgroup = true;         // host_gpus() are bound at /hostdev: only the given ones open
    bool smi = true;            // nvidia-smi -L lists exactly the given GPUs
    bool mounted_once = false;  // each library is mounted exactly once
};

// A shell script for the container printing what expect_gpus() reads.
std::string gpu_script(const sim::Manifest& m, const GpuChecks& checks = {});
// Problems by check ("devices", "libraries", "loader", "nvidia-smi", "cgroup",
// "proc") of a container given exactly `selected` (GPU indices) whose output
// of gpu_script() is `out`; empty when all is well.
std::map<std::string, std::vector<std::string>> gpu_problems(const sim::Manifest& m,
                                                             const std::string& out,
                                                             const std::vector<unsigned>& selected,
                                                             const GpuChecks& checks = {});
// The same as lines of text ("check: problem"); empty when all is well.
std::string expect_gpus(const sim::Manifest& m, const std::string& out,
                        const std::vector<unsigned>& selected, const GpuChecks& checks = {});

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
