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

    // Writes config.json and runs `runc run`; the container is deleted after.
    RunResult run();
    // The same through another runtime binary (gpubind-runtime); deleted with runc.
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
// Sections of a container's output: a "== name" line starts one.
std::map<std::string, std::vector<std::string>> sections(const std::string& out);
bool contains(const std::vector<std::string>& lines, const std::string& line);

// A snapshot of a tree (paths, types, sizes, modes, link targets, mtimes),
// to prove a run changed nothing there.
std::string snapshot_tree(const std::filesystem::path& root);
// The mount table of this process's namespace, without per-boot noise.
std::string host_mounts();

}  // namespace gpubind::test
