// End to end: gpubind-hook registered in config.json as users register it,
// the real runc, a simulated node and a busybox+glibc rootfs. Every
// expectation comes from the simulated node's own manifest, and the checks
// are run against a container started without the hook too, where they must
// fail (the suite proves itself).
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RuncTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        node_ = std::make_unique<SimNode>(spec);
    }
    static void TearDownTestSuite() { node_.reset(); }

    static void write_config(const std::string& extra) { node_->write_config(extra); }
    void TearDown() override { write_config({}); }

    Bundle bundle(Layout layout = Layout::Multiarch, bool with_hook = true) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)), layout);
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config());
        return b;
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& node() { return node_->root(); }
    static const fs::path& config() { return node_->config(); }

    static std::vector<const sim::ManifestFile*> libraries(std::set<std::string> caps,
                                                           bool compat32) {
        std::vector<const sim::ManifestFile*> out;
        for (const auto& f : m().files)
            if (f.kind == "library" && caps.count(f.capability) && f.compat32 == compat32)
                out.push_back(&f);
        return out;
    }

    // What the checks below read, for an image whose libraries are in `lib_dir`.
    static std::string inspect_script(const std::string& lib_dir) {
        return gpu_script(m(), {.lib_dir = lib_dir});
    }
    // Binds every GPU node of the host at /hostdev so that the container can
    // try to open the ones it was not given: the device cgroup must refuse.
    static void bind_all_gpus(Bundle& b) {
        for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
    }
    // What a container given exactly `selected` (indices) with utility,compute
    // must show: problems by check, empty when all is well.
    static std::map<std::string, std::vector<std::string>> check_given(
        const RunResult& r, const std::vector<unsigned>& selected, const std::string& lib_dir) {
        return gpu_problems(m(), r.out, selected, {.lib_dir = lib_dir});
    }
    static std::string describe(const std::map<std::string, std::vector<std::string>>& problems) {
        std::string out;
        for (const auto& [check, list] : problems)
            for (const auto& p : list) out += check + ": " + p + "\n";
        return out;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e"};
    int count_ = 0;
};

constexpr const char* kMultiarch = "/usr/lib/x86_64-linux-gnu";

TEST_F(RuncTest, VisibleDevicesByIndexGivesExactlyThoseGpus) {
    Bundle b = bundle();
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=0,2").command(inspect_script(kMultiarch));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, {0, 2}, kMultiarch)), "") << r.out;
    // The hook logged to the configured file, the container id on every line.
    std::ifstream log(node_->log());
    std::string line;
    int lines = 0;
    while (std::getline(log, line)) {
        ++lines;
        EXPECT_THAT(line, HasSubstr(" [gpubind-e2e-")) << line;
    }
    EXPECT_GT(lines, 0);
}

TEST_F(RuncTest, PoststopIsANoOp) {
    auto r =
        run_command({"/bin/sh", "-c",
                     "echo garbage | " + env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH) + " poststop"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
}

TEST_F(RuncTest, SameByUuidByBusIdAndByVolumeMounts) {
    write_config("[policy]\naccept-volume-mounts = true\n");
    const std::string by_uuid = m().gpus[0].uuid + "," + m().gpus[2].uuid;
    const std::string by_bus = m().gpus[2].pci_bus_id + "," + m().gpus[0].pci_bus_id;
    for (const std::string& ids : std::vector<std::string>{by_uuid, by_bus}) {
        SCOPED_TRACE(ids);
        Bundle b = bundle();
        bind_all_gpus(b);
        b.env("NVIDIA_VISIBLE_DEVICES=" + ids).command(inspect_script(kMultiarch));
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(describe(check_given(r, {0, 2}, kMultiarch)), "") << r.out;
    }
    Bundle b = bundle();
    bind_all_gpus(b);
    // The volume-mount list takes precedence over the variable.
    b.env("NVIDIA_VISIBLE_DEVICES=1").volume_device(m().gpus[0].uuid).volume_device("2");
    b.command(inspect_script(kMultiarch));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, {0, 2}, kMultiarch)), "") << r.out;
}

TEST_F(RuncTest, Lib64ImageGetsLibrariesInUsrLib64ThroughItsRefreshedCache) {
    Bundle b = bundle(Layout::Lib64);
    bind_all_gpus(b);
    fs::create_directories(b.rootfs() / "sbin");
    fs::copy_file("/sbin/ldconfig", b.rootfs() / "sbin/ldconfig");
    b.env("NVIDIA_VISIBLE_DEVICES=0,2")
        .command(inspect_script("/usr/lib64") + "; echo '== ldconfig'; /sbin/ldconfig -p");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, {0, 2}, "/usr/lib64")), "") << r.out;
    // `ldconfig -p` inside the container (a static ldconfig the image ships) lists them.
    auto s = sections(r.out);
    EXPECT_TRUE(contains(s["ldconfig"], "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1"))
        << r.out;
    EXPECT_TRUE(contains(s["ldconfig"],
                         "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib64/libnvidia-ml.so.1"))
        << r.out;
}

TEST_F(RuncTest, ChecksFailWithoutTheHook) {
    Bundle b = bundle(Layout::Multiarch, /*with_hook=*/false);
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=0,2").command(inspect_script(kMultiarch));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto problems = check_given(r, {0, 2}, kMultiarch);
    for (const char* check : {"devices", "libraries", "loader", "nvidia-smi", "cgroup", "proc"})
        EXPECT_TRUE(problems.count(check)) << check << " passed without the hook:\n" << r.out;
}

TEST_F(RuncTest, NonGpuContainersAreLeftAlone) {
    for (std::string env : {"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=", "UNRELATED=1",
                            "CUDA_VERSION=12.0|NVIDIA_REQUIRE_CUDA=cuda>=12.0"}) {
        SCOPED_TRACE(env);
        Bundle b = bundle();
        std::string rest = env;
        while (!rest.empty()) {
            auto bar = rest.find('|');
            b.env(rest.substr(0, bar));
            rest = bar == std::string::npos ? "" : rest.substr(bar + 1);
        }
        const std::string before = snapshot_tree(b.rootfs());
        b.command("ls /dev; ls /usr/lib/x86_64-linux-gnu; ls /proc/driver");
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr("nvidia")));
        EXPECT_EQ(snapshot_tree(b.rootfs()), before);
    }
}

TEST_F(RuncTest, NoneGivesDriverFilesButNoGpu) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=none")
        .command("echo '== dev'; ls /dev; echo '== cuda'; probe cuda");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sections(r.out);
    EXPECT_TRUE(contains(s["dev"], "nvidiactl")) << r.out;
    for (const auto& g : m().gpus)
        EXPECT_FALSE(contains(s["dev"], "nvidia" + std::to_string(g.minor))) << r.out;
    ASSERT_EQ(s["cuda"].size(), 1u) << r.out;
    // As the real libcuda: no device to initialise.
    EXPECT_THAT(s["cuda"][0], HasSubstr("init=100 "));
}

TEST_F(RuncTest, LegacyCudaImageGetsAllGpusAndAllCapabilities) {
    Bundle b = bundle();
    b.env("CUDA_VERSION=12.0");
    std::string script = "echo '== dev'; ls /dev; echo '== libs'; probe stat";
    for (const auto& f : m().files)
        if (f.kind == "library")
            script += std::string(" ") +
                      (f.compat32 ? "/usr/lib/i386-linux-gnu/" : "/usr/lib/x86_64-linux-gnu/") +
                      fs::path(f.real_path).filename().string();
    auto r = b.command(script).run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sections(r.out);
    for (const auto& g : m().gpus)
        EXPECT_TRUE(contains(s["dev"], "nvidia" + std::to_string(g.minor))) << r.out;
    for (const auto& line : s["libs"]) EXPECT_THAT(line, ::testing::EndsWith(" f"));
    EXPECT_EQ(s["libs"].size(), std::count_if(m().files.begin(), m().files.end(),
                                              [](const auto& f) { return f.kind == "library"; }));
}

// gpubind plan: what would be injected, from the bundle alone; touches nothing.
TEST_F(RuncTest, PlanCommandShowsThePlanAndChangesNothing) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=" + m().gpus[1].uuid);
    std::ofstream(b.dir() / "config.json") << b.spec().dump();
    const std::string before = snapshot_tree(b.dir()), mounts = host_mounts();
    auto r = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "plan", "--json", "--config",
                          config().string(), "--bundle", b.dir().string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto plan = nlohmann::json::parse(r.out);
    EXPECT_EQ(plan["schema"], "gpubind.plan/v1");
    EXPECT_TRUE(plan["gpu_container"].get<bool>());
    std::set<std::string> gpu_nodes;
    for (const auto& d : plan["plan"]["devices"])
        if (d["major"] == 195 && d["minor"] < 254) gpu_nodes.insert(d["path"].get<std::string>());
    EXPECT_EQ(gpu_nodes, std::set<std::string>{"/dev/nvidia" + std::to_string(m().gpus[1].minor)});
    std::set<std::string> targets;
    for (const auto& mnt : plan["plan"]["mounts"]) targets.insert(mnt["target"].get<std::string>());
    for (const auto* f : libraries({"utility", "compute"}, false))
        EXPECT_TRUE(targets.count(std::string(kMultiarch) + "/" +
                                  fs::path(f->real_path).filename().string()))
            << f->name;
    EXPECT_EQ(snapshot_tree(b.dir()), before);
    EXPECT_EQ(host_mounts(), mounts);

    // A non-GPU bundle: said so, exit 0.
    Bundle plain = bundle();
    std::ofstream(plain.dir() / "config.json") << plain.spec().dump();
    r = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "plan", "--config", config().string(),
                     "--bundle", plain.dir().string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "not a GPU container\n");
}

// gpubind configure, scripted from a hook the way people drive
// nvidia-container-cli from their own runtimes.
TEST_F(RuncTest, ConfigureCommandFromAScriptedHook) {
    const fs::path script = dir_.path() / "my-hook.sh";
    Bundle b = bundle(Layout::Multiarch, /*with_hook=*/false);
    std::ofstream(script) << "#!/bin/sh\n"
                          << "pid=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p')\n"
                          << "exec " << env_or("GPUBIND_CLI", GPUBIND_CLI_PATH)
                          << " configure --config " << config().string()
                          << " --pid \"$pid\" --device 1 --compute --utility "
                          << b.rootfs().string() << "\n";
    fs::permissions(script, fs::perms::owner_all);
    b.spec()["hooks"]["prestart"] = {{{"path", script.string()}, {"args", {"my-hook.sh"}}}};
    bind_all_gpus(b);
    b.command(inspect_script(kMultiarch));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(describe(check_given(r, {1}, kMultiarch)), "") << r.out;
}

// A MIG device: its parent GPU's node, its GPU-instance and compute-instance
// capability nodes and access files, and nothing of the other MIG devices.
TEST(MigE2e, MigDeviceReachesTheContainerWithExactlyItsNodes) {
    sim::Spec spec;
    spec.gpus = 2;
    spec.mig = {{0, 1, 0}, {0, 2, 0}, {1, 3, 0}};
    const SimNode node(spec, "gpubind-e2e-mig");
    const sim::Manifest& m = node.manifest();
    const fs::path& config = node.config();
    TempDir work("gpubind-e2e-mig-bundle");
    // MIG index 1 of GPU 0: the one with GPU instance 2 (devices are ordered by gi, ci).
    const sim::ManifestMig& want = m.migs[1];
    ASSERT_EQ(want.gi, 2u);
    Bundle b(work / "bundle");
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
    b.env("NVIDIA_VISIBLE_DEVICES=0:1");
    b.command(
        "echo '== caps'; ls /dev/nvidia-caps; echo '== dev'; ls /dev; echo '== smi'; "
        "nvidia-smi -L; echo '== access'; cat /proc/driver/nvidia/capabilities/gpu" +
        std::to_string(m.gpus[0].minor) + "/mig/gi2/access; true");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sections(r.out);
    EXPECT_EQ(s["caps"],
              (std::vector<std::string>{"nvidia-cap" + std::to_string(want.gi_cap_minor),
                                        "nvidia-cap" + std::to_string(want.ci_cap_minor)}))
        << r.out;
    EXPECT_TRUE(contains(s["dev"], "nvidia" + std::to_string(m.gpus[0].minor))) << r.out;
    EXPECT_FALSE(contains(s["dev"], "nvidia" + std::to_string(m.gpus[1].minor))) << r.out;
    std::string smi;
    for (const auto& line : s["smi"]) smi += line + "\n";
    EXPECT_THAT(smi, HasSubstr("(UUID: " + want.uuid + ")"));
    for (const auto& other : m.migs) {
        if (other.uuid != want.uuid) {
            EXPECT_THAT(smi, ::testing::Not(HasSubstr(other.uuid)));
        }
    }
    EXPECT_TRUE(contains(s["access"], "DeviceFileMinor: " + std::to_string(want.gi_cap_minor)))
        << r.out;
}

// A driver in a prefix of its own with shell wrappers in /usr/bin (GPU
// sandboxes ship it so): the container gets the real programs, and
// nvidia-smi, the libraries and the loader work there as on any node.
TEST(PrefixE2e, ADriverInItsOwnPrefixGivesTheProgramsNotTheirWrappers) {
    sim::Spec spec;
    spec.gpus = 2;
    spec.prefix = "usr/local/nvidia";
    const SimNode node(spec, "gpubind-e2e-prefix");
    TempDir work("gpubind-e2e-prefix-bundle");
    Bundle b(work / "bundle");
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node.config());
    for (const auto& [host, dest] : node.host_gpus())
        b.bind(host, dest);  // what the cgroup check opens
    b.env("NVIDIA_VISIBLE_DEVICES=all");
    b.command(gpu_script(node.manifest(), {.lib_dir = kMultiarch}) +
              "; echo '== head'; head -c 4 /usr/bin/nvidia-smi");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(node.manifest(), r.out, {0, 1}, {.lib_dir = kMultiarch}), "") << r.out;
    EXPECT_THAT(r.out, HasSubstr("== head\n\x7f"
                                 "ELF"))
        << r.out;
}

// IMEX channels: the container gets exactly the channels it asks for (by
// variable or by volume mount), the device cgroup lets it open them (ENXIO: no
// driver behind the node) and refuses the others (EPERM).
class ImexE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 1;
        spec.imex_channels = 3;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-imex");
        node_->write_config("[policy]\naccept-volume-mounts = true\n");
    }
    static void TearDownTestSuite() { node_.reset(); }
    static const sim::Manifest& m() { return node_->manifest(); }

    static constexpr const char* kDir = "/dev/nvidia-caps-imex-channels";
    static const sim::ManifestNode& channel(unsigned n) {
        const std::string path = fmt::format("{}/channel{}", kDir, n);
        for (const auto& node : m().nodes)
            if (node.path == path) return node;
        throw std::runtime_error("the manifest has no IMEX channel " + std::to_string(n));
    }

    Bundle bundle(bool with_hook = true) {
        Bundle b(work_ / ("b" + std::to_string(count_++)));
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        // Every channel of the host, reachable another way: only the cgroup decides.
        for (unsigned n = 0; n < m().spec.imex_channels; ++n)
            b.bind(node_->root() / fs::path(channel(n).path).relative_path(),
                   "/hostdev/channel" + std::to_string(n));
        std::string script =
            std::string("echo '== ls'; ls ") + kDir + "; echo '== stat'; probe stat";
        for (unsigned n = 0; n < m().spec.imex_channels; ++n) script += " " + channel(n).path;
        script += "; echo '== open'; probe open";
        for (unsigned n = 0; n < m().spec.imex_channels; ++n)
            script += " /hostdev/channel" + std::to_string(n);
        script += "; echo '== gpu'; probe stat /dev/nvidia0; true";
        b.command(script);
        return b;
    }

    // Problems with a container that should hold exactly channel `want`.
    static std::vector<std::string> check_channel(const RunResult& r, unsigned want) {
        std::vector<std::string> problems;
        auto s = sections(r.out);
        if (s["ls"] != std::vector<std::string>{"channel" + std::to_string(want)})
            problems.push_back(std::string(kDir) + " does not hold exactly channel" +
                               std::to_string(want));
        for (unsigned n = 0; n < m().spec.imex_channels; ++n) {
            const auto& c = channel(n);
            std::string stat =
                n == want ? c.path + " c " + std::to_string(c.major) + ":" + std::to_string(c.minor)
                          : c.path + " ENOENT";
            if (!contains(s["stat"], stat)) problems.push_back("missing: " + stat);
            std::string open =
                "/hostdev/channel" + std::to_string(n) + (n == want ? " ENXIO" : " EPERM");
            if (!contains(s["open"], open)) problems.push_back("missing: " + open);
        }
        return problems;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-imex-bundle"};
    int count_ = 0;
};

TEST_F(ImexE2e, ChannelByVariableReachesTheContainerWithExactlyItsNode) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_IMEX_CHANNELS=1");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(check_channel(r, 1), ::testing::IsEmpty()) << r.out;
    EXPECT_TRUE(
        contains(sections(r.out)["gpu"], "/dev/nvidia0 c 195:" + std::to_string(m().gpus[0].minor)))
        << r.out;
}

TEST_F(ImexE2e, ChannelByVolumeMountWithoutAGpu) {
    Bundle b = bundle();
    b.volume_device("imex/1");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(check_channel(r, 1), ::testing::IsEmpty()) << r.out;
    EXPECT_TRUE(contains(sections(r.out)["gpu"], "/dev/nvidia0 ENOENT")) << r.out;
}

TEST_F(ImexE2e, ChecksFailWithoutTheHook) {
    Bundle b = bundle(/*with_hook=*/false);
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_IMEX_CHANNELS=1");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto problems = check_channel(r, 1);
    EXPECT_GE(problems.size(), 3u) << r.out;  // no node, no stat line, no cgroup access
}

TEST_F(ImexE2e, AChannelTheNodeLacksIsRefusedNamingIt) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .env("NVIDIA_IMEX_CHANNELS=1," + std::to_string(m().spec.imex_channels));
    b.command("echo started");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_THAT(r.err, HasSubstr("gpubind-hook: select IMEX channel " +
                                 std::to_string(m().spec.imex_channels) + ": no " + kDir +
                                 "/channel" + std::to_string(m().spec.imex_channels)));
}

// CUDA forward compatibility: an image whose /usr/local/cuda/compat holds a
// libcuda newer than the driver gets a loader entry for it, and its refreshed
// cache lists the compat libcuda.so.1 before the injected one. The order is
// read with the system's ldconfig and proven by the container's own loader.
class CudaCompatE2e : public RuncTest {
  protected:
    // The driver's major version plus `delta`, as a version string.
    static std::string version_beside(int delta) {
        return std::to_string(std::stoi(m().spec.driver_version) + delta) + ".10.01";
    }
    Bundle compat_bundle(const std::string& version, bool with_hook = true) {
        Bundle b = bundle(Layout::Multiarch, with_hook);
        const fs::path compat = b.rootfs() / "usr/local/cuda/compat";
        fs::create_directories(compat);
        std::ofstream(compat / ("libcuda.so." + version), std::ios::binary)
            << sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libcuda.so.1");
        // As CUDA images ship it.
        fs::create_symlink("libcuda.so." + version, compat / "libcuda.so.1");
        b.env("NVIDIA_VISIBLE_DEVICES=0")
            .command(
                "echo '== conf'; cat /etc/ld.so.conf.d/000-cuda-compat.conf; "
                "echo '== cuda'; probe cuda; true");
        return b;
    }
    // The cache's libcuda.so.1 entries, in order, read by the system's ldconfig.
    static std::vector<std::string> cached_libcuda(const Bundle& b) {
        auto r = run_command({"ldconfig", "-p", "-C", (b.rootfs() / "etc/ld.so.cache").string()});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        std::vector<std::string> out;
        std::istringstream in(r.out);
        std::string line;
        while (std::getline(in, line))
            if (line.find("\tlibcuda.so.1 (libc6,x86-64) => ") == 0)
                out.push_back(line.substr(line.find("=> ") + 3));
        return out;
    }
};

TEST_F(CudaCompatE2e, NewerCompatLibcudaComesFirst) {
    Bundle b = compat_bundle(version_beside(+1));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sections(r.out);
    EXPECT_EQ(s["conf"], std::vector<std::string>{"/usr/local/cuda/compat"}) << r.out;
    EXPECT_EQ(cached_libcuda(b),
              (std::vector<std::string>{"/usr/local/cuda/compat/libcuda.so.1",
                                        std::string(kMultiarch) + "/libcuda.so.1"}));
    // The container's loader takes the compat stub, which has no CUDA entry points.
    EXPECT_EQ(s["cuda"], std::vector<std::string>{"libcuda.so.1 missing-symbols"}) << r.out;
    // The image's compat files were neither replaced nor mounted over.
    struct stat st {};
    const fs::path lib = b.rootfs() / ("usr/local/cuda/compat/libcuda.so." + version_beside(+1));
    ASSERT_EQ(::lstat(lib.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(CudaCompatE2e, OlderCompatLibcudaOrTheSwitchOffWritesNothing) {
    for (bool switch_off : {false, true}) {
        SCOPED_TRACE(switch_off ? "cuda-compat = false" : "older compat libcuda");
        if (switch_off) write_config("[policy]\ncuda-compat = false\n");
        Bundle b = compat_bundle(version_beside(switch_off ? +1 : -1));
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_FALSE(
            fs::exists(fs::symlink_status(b.rootfs() / "etc/ld.so.conf.d/000-cuda-compat.conf")));
        EXPECT_EQ(cached_libcuda(b),
                  std::vector<std::string>{std::string(kMultiarch) + "/libcuda.so.1"});
        auto s = sections(r.out);
        ASSERT_EQ(s["cuda"].size(), 1u) << r.out;
        EXPECT_THAT(s["cuda"][0], ::testing::StartsWith("cuda init=0 ")) << r.out;
    }
}

TEST_F(CudaCompatE2e, ChecksFailWithoutTheHook) {
    Bundle b = compat_bundle(version_beside(+1), /*with_hook=*/false);
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(sections(r.out)["conf"].empty()) << r.out;
    EXPECT_NE(cached_libcuda(b).size(), 2u);
}

// A refused start: runc fails with gpubind's one line, and nothing on the
// host changed (mount table, the node, the rootfs).
class RefusedTest : public RuncTest {
  protected:
    void expect_refused(Bundle& b, const std::string& message) {
        const std::string mounts = host_mounts(), node_tree = snapshot_tree(node()),
                          rootfs = snapshot_tree(b.rootfs());
        auto r = b.command("echo started").run();
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
        EXPECT_THAT(r.err, HasSubstr("gpubind-hook: " + message));
        EXPECT_EQ(host_mounts(), mounts);
        EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs);
        // The hook's log grows; nothing else in the node changes.
        auto strip_log = [](std::string tree) {
            std::istringstream in(tree);
            std::string line, out;
            while (std::getline(in, line))
                if (line.rfind(node_->log().filename().string(), 0) != 0) out += line + "\n";
            return out;
        };
        EXPECT_EQ(strip_log(snapshot_tree(node())), strip_log(node_tree));
    }
};

TEST_F(RefusedTest, UnknownDeviceId) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0,7");
    expect_refused(b, "select device 7: no GPU with this index (the node has 4)");
}

TEST_F(RefusedTest, UnsatisfiedCudaRequirement) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_REQUIRE_CUDA=cuda>=99.0");
    expect_refused(b, "check requirement NVIDIA_REQUIRE_CUDA");
}

TEST_F(RefusedTest, UnprivilegedRequestWhenPolicyRefusesIt) {
    write_config("[policy]\naccept-envvar-unprivileged = false\n");
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    expect_refused(b, "refuse request");
}

// Hostile images, states and variables: hostile_test.cpp.

}  // namespace
}  // namespace gpubind::test
