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

#include "binaries.hpp"
#include "container.hpp"
#include "engines.hpp"
#include "files.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

extern char** environ;

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

class EnginesTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        node_ = std::make_unique<SimNode>(spec);
        // The real runtime behind gpubind-runtime: runc, through a recorder
        // that keeps the config.json runc is handed at `create`.
        write_runc_recorder(recorder(), runc_got());
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
    EXPECT_TRUE(cdi::marked(got)) << got["hooks"].dump();
    EXPECT_FALSE(got.value("annotations", json::object()).contains("gpubind.injected"));

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
    // Variables, and annotations that name no CDI device (CDI's own prefix
    // with nothing in it, or a CDI name under another prefix).
    const std::vector<std::vector<std::string>> cases = {
        {"--env", "UNRELATED=1"},
        {"--env", "NVIDIA_VISIBLE_DEVICES=void"},
        {"--env", "NVIDIA_VISIBLE_DEVICES="},
        {"--annotation", "io.example/cdi=nvidia.com/gpu=0"},
        {"--annotation", "cdi.k8s.io/empty="}};
    for (const auto& options : cases) {
        SCOPED_TRACE(options[1]);
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

// --- the Kubernetes node installer: deploy/kubernetes/entrypoint.sh ---

// The DaemonSet's entrypoint, run with the simulated node's root as the
// host's "/": containerd reads the config it leaves (its own parser, in a
// mount namespace where that host's /etc is /etc), runs a GPU container
// through the runtime that config registers (the installed copy, which
// runs the installed hook), and `entrypoint.sh remove` leaves the node as
// it was.
TEST_F(EnginesTest, NodeInstallerRegistersARuntimeContainerdRunsThenRemovesIt) {
    const fs::path host = node_->root();
    write_text(host / "etc/containerd/config.toml",
               "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n"
               "  sandbox_image = \"registry.k8s.io/pause:3.9\"\n");
    // The node's tree, but what the container's start itself writes beside
    // it (its log, runc's spec).
    const auto contents = [&] {
        auto out = tree(host);
        out.erase("gpubind.log");
        out.erase("runc-got.json");
        return out;
    };
    const auto before = contents();
    const auto entrypoint = [&](const std::string& action) {
        return run_command(
            {"env", "GPUBIND_HOST_ROOT=" + host.string(), "GPUBIND_ONESHOT=1",
             "GPUBIND_SETUP_ARGS=--programs " + fs::path(hook()).parent_path().string(),
             "PATH=" + fs::path(cli()).parent_path().string() + ":" + env_or("PATH", "/usr/bin"),
             "sh", std::string(GPUBIND_SOURCE_DIR) + "/deploy/kubernetes/entrypoint.sh", action});
    };
    auto r = entrypoint("install");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

    const auto dump =
        run_command({"unshare", "--mount", "--propagation", "private", "sh", "-c",
                     "mount --bind " + (host / "etc").string() +
                         " /etc && containerd --config /etc/containerd/config.toml config dump"});
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    const std::string key = "BinaryName = \"";
    const auto at = dump.out.find(key, dump.out.find("containerd.runtimes.gpubind.options]"));
    ASSERT_NE(at, std::string::npos) << dump.out;
    const std::string binary =
        dump.out.substr(at + key.size(), dump.out.find('"', at + key.size()) - at - key.size());
    EXPECT_EQ(binary, "/usr/local/gpubind/gpubind-runtime");

    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    std::vector<std::string> options = ctr_mounts(host_gpus());
    options.insert(options.end(), {"--env", "NVIDIA_VISIBLE_DEVICES=0,2"});
    Bundle b = bundle();
    r = containerd.run((host / binary.substr(1)).string(), b.rootfs(), "gpu", options,
                       inspect_script());
    ASSERT_EQ(r.exit_code, 0) << r.err << read_text(containerd.log());
    EXPECT_EQ(check_given(r.out, {0, 2}), "") << r.out;

    r = entrypoint("remove");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(contents(), before) << r.out;
    fs::remove_all(host / "etc/containerd");
}

// --- podman: the hooks.d file from `gpubind setup --engine podman` ---

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
