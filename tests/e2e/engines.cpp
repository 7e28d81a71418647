// The engines the end-to-end suites drive (engines.hpp).
#include "engines.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace gpubind::test {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

void write_runc_recorder(const fs::path& path, const fs::path& copy) {
    write_text(path,
               "#!/bin/sh\n"
               "for a in \"$@\"; do\n"
               "  if [ \"$a\" = create ]; then cp config.json " +
                   copy.string() +
                   "; break; fi\n"
                   "done\n"
                   "exec " +
                   env_or("GPUBIND_RUNC", "runc") + " \"$@\"\n");
    fs::permissions(path, fs::perms::owner_all);
}

Containerd::Containerd(const fs::path& dir) : dir_(dir) {
    write_text(dir_ / "config.toml",
               "version = 2\n"
               "root = \"" +
                   (dir_ / "root").string() +
                   "\"\n"
                   "state = \"" +
                   (dir_ / "state").string() +
                   "\"\n"
                   "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
                   "[grpc]\n  address = \"" +
                   socket().string() +
                   "\"\n"
                   "[ttrpc]\n  address = \"" +
                   socket().string() +
                   ".ttrpc\"\n"
                   "[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n");
    const std::vector<std::string> argv = {"containerd",
                                           "--config",
                                           (dir_ / "config.toml").string(),
                                           "--address",
                                           socket().string(),
                                           "--root",
                                           (dir_ / "root").string(),
                                           "--state",
                                           (dir_ / "state").string()};
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        pid_ = -1;
        error_ = "spawn containerd failed: " + std::string(std::strerror(rc));
        return;
    }
    // A bounded wait for the daemon to answer on its socket.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            error_ = "containerd exited at start:\n" + read_text(log());
            return;
        }
        if (fs::exists(socket()) && ctr({"version"}).exit_code == 0) {
            ready_ = true;
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    error_ =
        "containerd did not answer on " + socket().string() + " within 60 s:\n" + read_text(log());
}

Containerd::~Containerd() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
}

RunResult Containerd::ctr(std::vector<std::string> args) const {
    args.insert(args.begin(),
                {"ctr", "--address", socket().string(), "--namespace", "gpubind-e2e"});
    return run_command(args);
}
RunResult Containerd::run(const std::string& runc_binary, const fs::path& rootfs,
                          const std::string& id, const std::vector<std::string>& options,
                          const std::string& script) const {
    std::vector<std::string> args = {"run",
                                     "--rm",
                                     "--rootfs",
                                     "--runc-binary",
                                     runc_binary,
                                     "--runc-root",
                                     (dir_ / "runc").string(),
                                     "--fifo-dir",
                                     (dir_ / "fifo").string()};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {rootfs.string(), id, "/bin/sh", "-c", script});
    return ctr(args);
}

// podman's defaults ask runc for RLIMIT_NOFILE 1048576 and RLIMIT_NPROC
// above this sandbox's hard limits, which runc may not raise ("error setting
// rlimit type 7: operation not permitted"); explicit limits under them let
// the container start. Storage, run state, events and the database are kept
// private: a containers.conf of the test's own (CONTAINERS_CONF, the only one
// podman then reads) moves libpod's database and volumes out of the host's
// /var/lib/containers.
RunResult podman_run(const fs::path& state, const fs::path& hooks_dir, const fs::path& rootfs,
                     const std::vector<std::string>& options, const std::string& script) {
    fs::create_directories(state);
    const fs::path conf = state / "containers.conf";
    std::ofstream(conf) << "[engine]\nstatic_dir = \"" << (state / "libpod").string()
                        << "\"\nvolume_path = \"" << (state / "volumes").string() << "\"\n";
    std::vector<std::string> args = {"env", "CONTAINERS_CONF=" + conf.string(), "podman", "--root",
                                     (state / "storage").string(), "--runroot",
                                     (state / "run").string(), "--tmpdir", (state / "tmp").string(),
                                     "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs",
                                     "--events-backend", "file", "--hooks-dir", hooks_dir.string(),
                                     // crun, podman's first choice, refuses this host's
                                     // hybrid cgroups (see tests/e2e/crun_hybrid.cpp).
                                     "--runtime", "runc", "run", "--rm", "--network", "none",
                                     "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--rootfs", rootfs.string(), "/bin/sh", "-c", script});
    return run_command(args);
}

std::vector<std::string> ctr_mounts(const std::vector<std::pair<fs::path, std::string>>& binds) {
    std::vector<std::string> out;
    for (const auto& [src, dst] : binds)
        out.insert(out.end(),
                   {"--mount", "type=bind,src=" + src.string() + ",dst=" + dst + ",options=rbind"});
    return out;
}

}  // namespace gpubind::test
