// End to end with real engines from Debian: containerd (its own daemon on a
// private socket, driven by ctr) running gpubind-runtime as its runc binary,
// and podman loading the hooks.d file `gpubind setup --engine podman` writes.
// Expectations come from the simulated node's manifest; every check is also
// run without gpubind and must fail there.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "gpubind/sim.hpp"
#include "temp_dir.hpp"

extern char** environ;

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

std::string runtime() {
    return env_or("GPUBIND_RUNTIME", GPUBIND_RUNTIME_PATH);
}
std::string hook() {
    return env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH);
}
std::string cli() {
    return env_or("GPUBIND_CLI", GPUBIND_CLI_PATH);
}

// A containerd daemon of its own: private config, socket, root and state,
// stopped (SIGTERM, then SIGKILL) when it goes out of scope. It is started
// with this process's environment, which its shims hand on to the runc binary.
class Containerd {
  public:
    explicit Containerd(const fs::path& dir) : dir_(dir) {
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
        error_ = "containerd did not answer on " + socket().string() + " within 60 s:\n" +
                 read_text(log());
    }
    ~Containerd() {
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
    Containerd(const Containerd&) = delete;
    Containerd& operator=(const Containerd&) = delete;

    bool ready() const { return ready_; }
    const std::string& error() const { return error_; }
    fs::path socket() const { return dir_ / "containerd.sock"; }
    fs::path log() const { return dir_ / "containerd.log"; }

    // `ctr` against this daemon, in a namespace of the tests' own.
    RunResult ctr(std::vector<std::string> args) const {
        args.insert(args.begin(),
                    {"ctr", "--address", socket().string(), "--namespace", "gpubind-e2e"});
        return run_command(args);
    }
    // `ctr run --rm --rootfs` of `rootfs` with `runc_binary` as the runc binary.
    RunResult run(const std::string& runc_binary, const fs::path& rootfs, const std::string& id,
                  const std::vector<std::string>& options, const std::string& script) const {
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

  private:
    fs::path dir_;
    pid_t pid_ = -1;
    bool ready_ = false;
    std::string error_;
};

class EnginesTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        node_ = std::make_unique<SimNode>(spec);
        // The real runtime behind gpubind-runtime: runc, through a recorder
        // that keeps the config.json runc is handed at `create`.
        write_text(recorder(),
                   "#!/bin/sh\n"
                   "for a in \"$@\"; do\n"
                   "  if [ \"$a\" = create ]; then cp config.json " +
                       runc_got().string() +
                       "; break; fi\n"
                       "done\n"
                       "exec " +
                       env_or("GPUBIND_RUNC", "runc") + " \"$@\"\n");
        fs::permissions(recorder(), fs::perms::owner_all);
        node_->write_config("[runtime]\nruntimes = [\"" + recorder().string() + "\"]\n");
        // How an engine's runtime finds gpubind's config: its environment,
        // which containerd hands on through its shims.
        ::setenv("GPUBIND_CONFIG", config().c_str(), 1);
    }
    static void TearDownTestSuite() {
        ::unsetenv("GPUBIND_CONFIG");
        node_.reset();
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& config() { return node_->config(); }
    static fs::path recorder() { return node_->root() / "record-runc"; }
    static fs::path runc_got() { return node_->root() / "runc-got.json"; }
    static std::vector<std::pair<fs::path, std::string>> host_gpus() { return node_->host_gpus(); }

    Bundle bundle() { return Bundle(dir_.path() / ("b" + std::to_string(count_++))); }

    // What the engines' containers are checked for: the GPUs' nodes and
    // nvidiactl, NVML, nvidia-smi, the device cgroup, /proc/driver/nvidia.
    static inline const GpuChecks kChecks{.lib_dir = "", .all_nodes = false};
    static std::string inspect_script() { return gpu_script(m(), kChecks); }
    static std::string check_given(const std::string& out, const std::vector<unsigned>& selected) {
        return expect_gpus(m(), out, selected, kChecks);
    }
    // Each check fails for a container that did not get the GPUs.
    static void expect_every_check_fails(const std::string& out) {
        const auto problems = gpu_problems(m(), out, {0, 2}, kChecks);
        for (const char* check : {"devices", "cgroup", "loader", "nvidia-smi", "proc"})
            EXPECT_TRUE(problems.count(check)) << check << " passed without gpubind:\n" << out;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-eng"};
    int count_ = 0;
};

// --- containerd: ctr run with gpubind-runtime as the runc binary ---

std::vector<std::string> ctr_mounts(const std::vector<std::pair<fs::path, std::string>>& binds) {
    std::vector<std::string> out;
    for (const auto& [src, dst] : binds)
        out.insert(out.end(),
                   {"--mount", "type=bind,src=" + src.string() + ",dst=" + dst + ",options=rbind"});
    return out;
}

TEST_F(EnginesTest, ContainerdRunsAGpuContainerThroughGpubindRuntime) {
    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    std::vector<std::string> options = ctr_mounts(host_gpus());
    options.insert(options.end(), {"--env", "NVIDIA_VISIBLE_DEVICES=0,2"});

    Bundle b = bundle();
    fs::remove(runc_got());
    auto r = containerd.run(runtime(), b.rootfs(), "gpu", options, inspect_script());
    ASSERT_EQ(r.exit_code, 0) << r.err << read_text(containerd.log());
    EXPECT_EQ(check_given(r.out, {0, 2}), "") << r.out;
    // runc got the spec gpubind-runtime edited from the one containerd made.
    ASSERT_TRUE(fs::exists(runc_got())) << "runc was not run through the recorder";
    json got = json::parse(read_text(runc_got()));
    EXPECT_EQ(got["annotations"]["gpubind.injected"], "runtime");

    // The same through plain runc: the checks fail.
    Bundle plain = bundle();
    r = containerd.run(env_or("GPUBIND_RUNC", "runc"), plain.rootfs(), "gpu", options,
                       inspect_script());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_every_check_fails(r.out);
}

// A container that asks for no GPU: runc gets through gpubind-runtime the
// very bytes it gets from containerd directly, and the container sees the same.
TEST_F(EnginesTest, ContainerdNonGpuContainerIsByteForByteUnaffected) {
    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    const std::string script =
        "ls /dev /proc/driver 2>&1; cat /proc/self/status | "
        "grep -i -e cap -e seccomp; env | sort; true";
    for (const char* env :
         {"UNRELATED=1", "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES="}) {
        SCOPED_TRACE(env);
        const std::vector<std::string> options = {"--env", env};
        Bundle b = bundle();
        fs::remove(runc_got());
        auto direct = containerd.run(recorder().string(), b.rootfs(), "plain", options, script);
        ASSERT_EQ(direct.exit_code, 0) << direct.err;
        const std::string direct_spec = read_text(runc_got());
        ASSERT_FALSE(direct_spec.empty());
        // After runc made its mount points: gpubind-runtime must add nothing.
        const std::string rootfs = snapshot_tree(b.rootfs());

        fs::remove(runc_got());
        auto shim = containerd.run(runtime(), b.rootfs(), "plain", options, script);
        ASSERT_EQ(shim.exit_code, 0) << shim.err;
        EXPECT_EQ(read_text(runc_got()), direct_spec);
        EXPECT_EQ(shim.out, direct.out);
        EXPECT_THAT(shim.out, ::testing::Not(HasSubstr("nvidia")));
        EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs);
    }
    // The comparison can fail: a GPU container's spec is not what containerd made.
    const std::vector<std::string> options = {"--env", "NVIDIA_VISIBLE_DEVICES=1"};
    Bundle b = bundle();
    fs::remove(runc_got());
    ASSERT_EQ(containerd.run(recorder().string(), b.rootfs(), "plain", options, "true").exit_code,
              0);
    const std::string direct_spec = read_text(runc_got());
    fs::remove(runc_got());
    auto r = containerd.run(runtime(), b.rootfs(), "plain", options, "true");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(read_text(runc_got()), direct_spec);
}

// --- podman: the hooks.d file from `gpubind setup --engine podman` ---

// podman's defaults ask runc for RLIMIT_NOFILE 1048576 and RLIMIT_NPROC
// above this sandbox's hard limits, which runc may not raise ("error setting
// rlimit type 7: operation not permitted"); explicit limits under them let
// the container start. Storage, run state and events are kept private.
RunResult podman_run(const fs::path& state, const fs::path& hooks_dir, const fs::path& rootfs,
                     const std::vector<std::string>& options, const std::string& script) {
    std::vector<std::string> args = {"podman",
                                     "--root",
                                     (state / "storage").string(),
                                     "--runroot",
                                     (state / "run").string(),
                                     "--tmpdir",
                                     (state / "tmp").string(),
                                     "--storage-driver",
                                     "vfs",
                                     "--cgroup-manager",
                                     "cgroupfs",
                                     "--events-backend",
                                     "file",
                                     "--hooks-dir",
                                     hooks_dir.string(),
                                     // crun, podman's first choice, refuses this host's
                                     // hybrid cgroups (see tests/e2e/crun_hybrid.cpp).
                                     "--runtime",
                                     "runc",
                                     "run",
                                     "--rm",
                                     "--network",
                                     "none",
                                     "--ulimit",
                                     "nofile=1024:1024",
                                     "--ulimit",
                                     "nproc=1024:1024"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--rootfs", rootfs.string(), "/bin/sh", "-c", script});
    return run_command(args);
}

TEST_F(EnginesTest, PodmanHooksDirGivesAContainerItsGpus) {
    const fs::path prefix = dir_ / "prefix";
    // The node's config is not at the default path: setup writes it into the
    // hook's explicit env, as an administrator would point it elsewhere.
    auto setup = run_command({cli(), "setup", "--engine", "podman", "--prefix", prefix.string(),
                              "--hook-path", hook(), "--config-path", config().string()});
    ASSERT_EQ(setup.exit_code, 0) << setup.err;
    const fs::path hooks_file = prefix / "usr/share/containers/oci/hooks.d/gpubind-hook.json";
    json entry = json::parse(read_text(hooks_file));
    ASSERT_EQ(entry["hook"]["path"], hook());
    ASSERT_EQ(entry["hook"]["env"], json::array({"GPUBIND_CONFIG=" + config().string()}));

    std::vector<std::string> options;
    for (const auto& [src, dst] : host_gpus())
        options.insert(options.end(), {"-v", src.string() + ":" + dst});
    options.insert(options.end(), {"-e", "NVIDIA_VISIBLE_DEVICES=0,2"});

    Bundle b = bundle();
    auto r = podman_run(dir_ / "podman", hooks_file.parent_path(), b.rootfs(), options,
                        inspect_script());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(check_given(r.out, {0, 2}), "") << r.out;

    // Without the registration (an empty hooks directory): the checks fail.
    fs::create_directories(dir_ / "no-hooks");
    Bundle plain = bundle();
    r = podman_run(dir_ / "podman", dir_ / "no-hooks", plain.rootfs(), options, inspect_script());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_every_check_fails(r.out);
}

}  // namespace
}  // namespace gpubind::test
