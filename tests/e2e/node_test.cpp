// The node description at container starts (issue 8): a start reads what an
// earlier one learned, NVML is asked once per driver state and only for
// requests that need its facts, and a change of the driver state or the
// config is seen by the very next start. The slow NVML is the simulated
// node's (lib/fake/nvml.c: it counts its initialisations in a file and
// sleeps as long as another says); expectations come from the manifest.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "container.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kMultiarch = "/usr/lib/x86_64-linux-gnu";

class NodeTest : public ::testing::Test {
  protected:
    NodeTest() : node_(spec()) {}

    static sim::Spec spec(const std::string& version = "550.54.15",
                          std::vector<sim::MigSpec> mig = {}) {
        sim::Spec s;
        s.gpus = 4;
        s.driver_version = version;
        s.mig = std::move(mig);
        return s;
    }

    // NVML initialisations are counted from now on, each taking `delay_ms`.
    void slow_nvml(int delay_ms) const {
        const fs::path dir = node_.root() / "gpubind-fake-nvml";
        fs::create_directories(dir);
        std::ofstream(dir / "inits", std::ios::trunc).flush();
        std::ofstream(dir / "delay-ms", std::ios::trunc) << delay_ms;
    }
    std::size_t nvml_inits() const {
        std::ifstream in(node_.root() / "gpubind-fake-nvml/inits");
        std::size_t n = 0;
        for (std::string line; std::getline(in, line);) ++n;
        return n;
    }

    std::unique_ptr<Bundle> bundle(const std::string& devices = "all") {
        auto b = std::make_unique<Bundle>(dir_.path() / ("b" + std::to_string(count_++)));
        b->hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_.config());
        b->env("NVIDIA_VISIBLE_DEVICES=" + devices);
        b->env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        b->command(
            "echo '== loaded'; probe loaded libcuda.so.1 libnvidia-ml.so.1; "
            "echo '== smi'; nvidia-smi -L; echo '== dev'; ls /dev /dev/nvidia-caps; "
            "echo '== proc'; ls /proc/driver/nvidia/gpus; true");
        return b;
    }

    // The container loaded libcuda of the node's driver version now.
    std::string loads_current_driver(const RunResult& r) const {
        if (r.exit_code != 0) return "exit " + std::to_string(r.exit_code) + ": " + r.err;
        auto s = sections(r.out);
        for (const auto& f : node_.manifest().files) {
            if (f.kind != "library" || f.compat32 || f.name != "libcuda.so.1") continue;
            const std::string want =
                f.name + " => " + kMultiarch + "/" + fs::path(f.real_path).filename().string();
            if (!contains(s["loaded"], want)) return "not loaded: " + want + "\n" + r.out;
        }
        return {};
    }

    std::string log_text() const {
        std::ifstream in(node_.log());
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }
    void clear_log() const { std::ofstream(node_.log(), std::ios::trunc).flush(); }
    static std::size_t count(const std::string& text, const std::string& what) {
        std::size_t n = 0;
        for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
        return n;
    }

    // What the stored description holds, read through the library (as
    // `gpubind info` does) without recomputing or rewriting it.
    node::NodeKnowledge description() const {
        node::LoadOptions options;
        options.write = false;
        node::NodeKnowledge k = node::load_node(config::load_config(node_.config()), options);
        EXPECT_FALSE(k.recomputed) << "the stored description is not current: " << k.why;
        return k;
    }

    TempDir dir_{"gpubind-e2e-desc"};
    SimNode node_;
    int count_ = 0;
};

TEST_F(NodeTest, TenCudaImageStartsInitialiseNvmlOnce) {
    slow_nvml(2000);
    for (int i = 0; i < 10; ++i) {
        auto b = bundle();
        b->env("NVIDIA_REQUIRE_CUDA=cuda>=12.0");
        auto r = b->run();
        ASSERT_EQ(r.exit_code, 0) << "start " << i << ": " << r.err;
    }
    EXPECT_EQ(nvml_inits(), 1u);
    const auto d = description();
    EXPECT_EQ(d.nvml.status, node::NvmlStatus::Answered);
    EXPECT_EQ(d.node.cuda_version, node_.manifest().cuda_version);
    // An unmet requirement is refused from the stored facts, without NVML.
    auto b = bundle();
    b->env("NVIDIA_REQUIRE_CUDA=cuda>=99.0");
    auto r = b->run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("the driver supports CUDA " + node_.manifest().cuda_version));
    EXPECT_EQ(nvml_inits(), 1u);
}

TEST_F(NodeTest, AStartWithoutRequirementsNeverWaitsForNvml) {
    slow_nvml(2000);
    for (const char* devices : {"all", "0,2", node_.manifest().gpus[1].uuid.c_str()}) {
        auto b = bundle(devices);
        const auto start = std::chrono::steady_clock::now();
        auto r = b->run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000))
            << devices;
    }
    EXPECT_EQ(nvml_inits(), 0u);
    EXPECT_EQ(description().nvml.status, node::NvmlStatus::NotAsked);
    // The requirement on the driver version alone is procfs's.
    auto b = bundle();
    b->env("NVIDIA_REQUIRE_DRIVER=driver>=500");
    ASSERT_EQ(b->run().exit_code, 0);
    EXPECT_EQ(nvml_inits(), 0u);
}

TEST_F(NodeTest, AHungNvmlCostsOneWaitPerDriverState) {
    slow_nvml(600000);  // never answers within the hook's deadline of 5 s
    for (int i = 0; i < 3; ++i) {
        auto b = bundle();
        b->env("NVIDIA_REQUIRE_CUDA=cuda>=12.0");
        auto r = b->run();
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.err, HasSubstr("is unknown"));
    }
    EXPECT_EQ(nvml_inits(), 1u);
    EXPECT_EQ(description().nvml.status, node::NvmlStatus::Failed);
}

TEST_F(NodeTest, ADriverUpgradeIsSeenByTheNextStart) {
    ASSERT_EQ(loads_current_driver(bundle()->run()), "");
    node_.simulate(spec("560.35.03"));
    clear_log();
    ASSERT_EQ(loads_current_driver(bundle()->run()), "");
    EXPECT_THAT(log_text(), HasSubstr("driver state changed"));
    EXPECT_EQ(description().node.driver_version, "560.35.03");
}

TEST_F(NodeTest, AMigChangeIsSeenByTheNextStart) {
    node_.simulate(spec("550.54.15", {{0, 1, 0}}));
    const std::string old_uuid = node_.manifest().migs.at(0).uuid;
    auto first = bundle(old_uuid)->run();
    ASSERT_EQ(first.exit_code, 0) << first.err;
    node_.simulate(spec("550.54.15", {{0, 2, 1}}));
    const auto& mig = node_.manifest().migs.at(0);
    auto r = bundle(mig.uuid)->run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sections(r.out);
    EXPECT_TRUE(contains(s["dev"], "nvidia-cap" + std::to_string(mig.ci_cap_minor))) << r.out;
    // The old layout's device is gone with it.
    ASSERT_NE(old_uuid, mig.uuid);
    auto gone = bundle(old_uuid)->run();
    EXPECT_NE(gone.exit_code, 0);
    EXPECT_THAT(gone.err, HasSubstr("no MIG device with this UUID"));
}

// A fresh node without its device nodes (the driver did not make them:
// ModifyDeviceFiles 0, or a container started before anything opened the
// GPUs): no GPU container starts; `gpubind setup --device-nodes` makes them
// with the driver's numbers, and the next start works.
TEST_F(NodeTest, DeviceNodesMadeBySetupLetTheNextContainerStart) {
    for (const auto& n : node_.manifest().nodes) fs::remove(node_.root() / n.path.substr(1));
    auto refused = bundle()->run();
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_THAT(refused.err, HasSubstr((node_.root() / "dev/nvidia").string()));

    auto made = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "setup", "--device-nodes",
                             "--all", "--simulated-proc", "--root", node_.root().string()});
    ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
    for (const auto& n : node_.manifest().nodes) {
        struct stat st {};
        ASSERT_EQ(::lstat((node_.root() / n.path.substr(1)).c_str(), &st), 0) << n.path;
        EXPECT_TRUE(S_ISCHR(st.st_mode)) << n.path;
        EXPECT_EQ(st.st_rdev, ::makedev(n.major, n.minor)) << n.path;
    }
    ASSERT_EQ(loads_current_driver(bundle()->run()), "");
}

TEST_F(NodeTest, AConfigChangeIsSeenByTheNextStart) {
    auto r = bundle()->run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(sections(r.out)["loaded"], std::string("libcuda.so.1 => ") + kMultiarch +
                                                        "/libcuda.so." +
                                                        node_.manifest().spec.driver_version))
        << r.out;
    node_.write_config("[catalog.compute]\nlibraries = []\n");
    r = bundle()->run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(sections(r.out)["loaded"],
                ::testing::Contains(HasSubstr("libcuda.so.1 dlopen-failed")))
        << r.out;
}

// strace of the hook, registered as runc runs it: for a GPU container without
// a requirement only NVML has the answer to, no process is started.
TEST_F(NodeTest, TheHookStartsNoProcess) {
    if (::access("/usr/bin/strace", X_OK) != 0) GTEST_SKIP() << "no strace";
    // The description exists with NVML's facts: the starts traced are the usual ones.
    auto first = bundle();
    first->env("NVIDIA_REQUIRE_CUDA=cuda>=12.0");
    ASSERT_EQ(first->run().exit_code, 0);
    for (bool cuda : {false, true}) {
        auto b = bundle();
        if (cuda) b->env("NVIDIA_REQUIRE_CUDA=cuda>=12.0");
        const fs::path trace = dir_.path() / ("trace" + std::to_string(cuda));
        auto& hooks = b->spec()["hooks"]["prestart"];
        hooks[0]["args"] = {"strace",
                            "-f",
                            "-qq",
                            "-o",
                            trace.string(),
                            "-e",
                            "trace=fork,vfork,clone,clone3,execve",
                            env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH),
                            "prestart"};
        hooks[0]["path"] = "/usr/bin/strace";
        auto r = b->run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        std::ifstream in(trace);
        std::size_t processes = 0, execs = 0;
        std::string all;
        for (std::string line; std::getline(in, line);) {
            all += line + "\n";
            if (line.find("execve(") != std::string::npos)
                ++execs;
            else if (line.find("clone") != std::string::npos ||
                     line.find("fork") != std::string::npos)
                ++processes;
        }
        EXPECT_EQ(execs, 1u) << all;  // the hook itself
        EXPECT_EQ(processes, 0u) << all;
    }
}

TEST_F(NodeTest, TheShimsFinishHookDoesNotRediscover) {
    ::setenv("GPUBIND_CONFIG", node_.config().c_str(), 1);
    clear_log();
    auto b = bundle();
    b->spec()["hooks"] = nlohmann::json::object();
    auto r = b->run_with(env_or("GPUBIND_RUNTIME", GPUBIND_RUNTIME_PATH));
    ::unsetenv("GPUBIND_CONFIG");
    ASSERT_EQ(loads_current_driver(r), "");
    const std::string log = log_text();
    EXPECT_EQ(count(log, "discovering the node"), 1u) << log;  // the shim, at create
    EXPECT_EQ(
        count(log, "node description " + (node_.state_dir() / node::kNodeDescriptionName).string()),
        1u)
        << log;  // the finish hook read it
}

}  // namespace
}  // namespace gpubind::test
