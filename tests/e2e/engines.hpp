// Real engines from Debian driven by the end-to-end suites: a private
// containerd daemon (ctr) and podman with private storage (engines.cpp).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "container.hpp"

namespace gpubind::test {

std::string read_text(const std::filesystem::path& p);
void write_text(const std::filesystem::path& p, const std::string& text);

// A containerd daemon of its own: private config, socket, root and state,
// stopped (SIGTERM, then SIGKILL) when it goes out of scope. It is started
// with this process's environment, which its shims hand on to the runc binary.
class Containerd {
  public:
    explicit Containerd(const std::filesystem::path& dir);
    ~Containerd();
    Containerd(const Containerd&) = delete;
    Containerd& operator=(const Containerd&) = delete;

    bool ready() const { return ready_; }
    const std::string& error() const { return error_; }
    std::filesystem::path socket() const { return dir_ / "containerd.sock"; }
    std::filesystem::path log() const { return dir_ / "containerd.log"; }

    // `ctr` against this daemon, in a namespace of the tests' own.
    RunResult ctr(std::vector<std::string> args) const;
    // `ctr run --rm --rootfs` of `rootfs` with `runc_binary` as the runc binary.
    RunResult run(const std::string& runc_binary, const std::filesystem::path& rootfs,
                  const std::string& id, const std::vector<std::string>& options,
                  const std::string& script) const;

  private:
    std::filesystem::path dir_;
    pid_t pid_ = -1;
    bool ready_ = false;
    std::string error_;
};

// ctr run's --mount options binding each (host path, container path).
std::vector<std::string> ctr_mounts(
    const std::vector<std::pair<std::filesystem::path, std::string>>& binds);

// A runc stand-in at `path` that copies the config.json it is given at
// `create` to `copy`, then runs the real runc ($GPUBIND_RUNC or runc).
void write_runc_recorder(const std::filesystem::path& path, const std::filesystem::path& copy);

// podman run --rm --rootfs with private storage, run state and events, runc
// as the runtime and `hooks_dir` as the hooks directory (see engines.cpp).
RunResult podman_run(const std::filesystem::path& state, const std::filesystem::path& hooks_dir,
                     const std::filesystem::path& rootfs, const std::vector<std::string>& options,
                     const std::string& script);

}  // namespace gpubind::test
