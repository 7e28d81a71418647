// The plan: what goes into a container for a request on a hand-built node,
// and the image layout it is laid out for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/version.hpp"
#include "target.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

constexpr const char* kVersion = "550.54.15";
constexpr const char* kHost = "/host";  // every root of the hand-built node

node::DeviceNode dev(const std::string& name, unsigned major, unsigned minor) {
    return {fs::path("/dev") / name, fs::path(kHost) / "dev" / name, major, minor, 0666};
}

// A node with four GPUs (GPU 3 has one MIG device), every control node, and
// driver files for each capability, including 32-bit libraries.
class PlanTest : public ::testing::Test {
  protected:
    PlanTest() {
        node.roots = {kHost, kHost, fs::path(kHost) / "proc"};
        node.driver_version = kVersion;
        node.cuda_version = "12.4";
        for (unsigned i = 0; i < 4; ++i) {
            node::Gpu gpu;
            gpu.index = i;
            gpu.minor = i;
            gpu.uuid = "GPU-" + std::to_string(i) + "aaa";
            gpu.pci_bus_id = "0000:0" + std::to_string(i + 1) + ":00.0";
            gpu.proc_dir = fs::path(kHost) / "proc/driver/nvidia/gpus" / gpu.pci_bus_id;
            gpu.node = dev("nvidia" + std::to_string(i), node::kNvidiaMajor, i);
            node.gpus.push_back(gpu);
            proc_files.information[gpu.pci_bus_id] = "Model: GPU " + std::to_string(i) + "\n";
        }
        node::MigDevice mig;
        mig.gpu_index = 3;
        mig.gi = 1;
        mig.ci = 0;
        mig.uuid = "MIG-3aaa";
        const fs::path mig_dir = fs::path(kHost) / "proc/driver/nvidia/capabilities/gpu3/mig";
        mig.gi_access = mig_dir / "gi1/access";
        mig.ci_access = mig_dir / "gi1/ci0/access";
        mig.gi_cap = dev("nvidia-caps/nvidia-cap30", 511, 30);
        mig.ci_cap = dev("nvidia-caps/nvidia-cap31", 511, 31);
        node.gpus[3].mig.push_back(mig);

        node.control = {dev("nvidiactl", node::kNvidiaMajor, node::kNvidiactlMinor),
                        dev("nvidia-uvm", 510, 0), dev("nvidia-uvm-tools", 510, 1),
                        dev("nvidia-modeset", node::kNvidiaMajor, node::kModesetMinor)};
        node.mig_control = {dev("nvidia-caps/nvidia-cap1", 511, 1),
                            dev("nvidia-caps/nvidia-cap2", 511, 2)};

        library("libcuda.so.1", config::kCapCompute, false);
        library("libcuda.so.1", config::kCapCompute, true);
        library("libnvidia-ml.so.1", config::kCapUtility, false);
        library("libnvcuvid.so.1", config::kCapVideo, false);
        library("libGLX_nvidia.so.0", config::kCapGraphics, false);
        library("libGLX_nvidia.so.0", config::kCapGraphics, true);
        library("libnvidia-fbc.so.1", config::kCapDisplay | config::kCapVideo, false);
        library("libnvidia-ngx.so.1", config::kCapNgx, false);
        file(node::FileKind::Binary, "nvidia-smi", "/usr/bin/nvidia-smi", config::kCapUtility);
        file(node::FileKind::Binary, "nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control",
             config::kCapCompute);
        file(node::FileKind::Ipc, "/run/nvidia-persistenced/socket",
             "/run/nvidia-persistenced/socket", config::kCapUtility | config::kCapCompute);
        file(node::FileKind::Ipc, "/tmp/nvidia-mps", "/tmp/nvidia-mps", config::kCapCompute);
        const std::string fw = std::string("/lib/firmware/nvidia/") + kVersion + "/gsp_ga10x.bin";
        file(node::FileKind::Firmware, fw, fw, config::kCapUtility | config::kCapCompute);

        proc_files.version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
        proc_files.params = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nEnableMSI: 1\n";
        multiarch.lib_dir = "/usr/lib/x86_64-linux-gnu";
        multiarch.lib32_dir = "/usr/lib/i386-linux-gnu";
    }

    void library(const std::string& soname, config::Capabilities caps, bool compat32) {
        const std::string dir =
            compat32 ? "/usr/lib/i386-linux-gnu/" : "/usr/lib/x86_64-linux-gnu/";
        const std::string base = soname.substr(0, soname.find(".so")) + ".so." + kVersion;
        node.files.push_back({node::FileKind::Library, soname, kHost + dir + soname,
                              kHost + dir + base, caps, compat32});
    }
    void file(node::FileKind kind, const std::string& name, const std::string& path,
              config::Capabilities caps) {
        node.files.push_back({kind, name, kHost + path, kHost + path, caps, false});
    }

    decide::Request request(node::DeviceIdsKind kind,
                            config::Capabilities caps = config::kCapDefault) const {
        decide::Request r;
        r.source = decide::RequestSource::Env;
        r.devices.kind = kind;
        r.caps = caps;
        return r;
    }
    node::Selection gpus(std::initializer_list<unsigned> indices) const {
        node::Selection s;
        for (unsigned i : indices) s.gpus.push_back(&node.gpus[i]);
        return s;
    }
    decide::Plan plan(const decide::Request& r, const node::Selection& s,
                      const decide::Image& image = {}) const {
        return make_plan(r, node, s, image, config::Config{}, proc_files);
    }

    static std::vector<std::string> device_paths(const decide::Plan& p) {
        std::vector<std::string> out;
        for (const auto& d : p.devices) out.push_back(d.node.path);
        return out;
    }
    static std::vector<std::string> targets(const decide::Plan& p) {
        std::vector<std::string> out;
        for (const auto& m : p.mounts) out.push_back(m.target);
        return out;
    }
    static const decide::PlannedMount* mount_at(const decide::Plan& p, const std::string& target) {
        for (const auto& m : p.mounts)
            if (m.target == target) return &m;
        return nullptr;
    }
    static std::vector<std::pair<std::string, std::string>> links(const decide::Plan& p) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& s : p.symlinks) out.emplace_back(s.path, s.target);
        return out;
    }

    node::Node node;
    node::ProcFiles proc_files;
    decide::Image multiarch;
};

TEST_F(PlanTest, NotAGpuContainerGetsNothing) {
    auto p = plan(decide::Request{}, gpus({0}));
    EXPECT_TRUE(p.empty());
    EXPECT_FALSE(p.proc);
    EXPECT_THAT(p.symlinks, IsEmpty());
    EXPECT_FALSE(p.refresh_ldcache);
}

TEST_F(PlanTest, SelectedGpusAndTheControlNodesComputeNeeds) {
    auto p = plan(request(node::DeviceIdsKind::List), gpus({1, 2}));
    EXPECT_THAT(device_paths(p),
                UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                     "/dev/nvidia1", "/dev/nvidia2"));
    for (const auto& d : p.devices) {
        EXPECT_EQ(d.node.host_path, std::string(kHost) + d.node.path);
        EXPECT_FALSE(d.why.empty()) << d.node.path;
    }
    auto gpu1 = std::find_if(p.devices.begin(), p.devices.end(),
                             [](const auto& d) { return d.node.path == "/dev/nvidia1"; });
    EXPECT_EQ(gpu1->node.minor, 1u);
    EXPECT_THAT(gpu1->why, HasSubstr("GPU-1aaa"));
}

TEST_F(PlanTest, UvmOnlyWithComputeModesetOnlyWithDisplay) {
    auto p = plan(request(node::DeviceIdsKind::All, config::kCapUtility | config::kCapDisplay),
                  gpus({0}));
    EXPECT_THAT(device_paths(p),
                UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia0"));
}

TEST_F(PlanTest, NoneBringsTheDriverButNoGpu) {
    auto p = plan(request(node::DeviceIdsKind::None), node::Selection{});
    EXPECT_THAT(device_paths(p),
                UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"));
    EXPECT_THAT(targets(p), Contains("/usr/lib64/libcuda.so.550.54.15"));
    ASSERT_TRUE(p.proc);
    EXPECT_THAT(p.proc->gpus, IsEmpty());
    // Even if a selection slipped in, "none" means no GPU.
    EXPECT_THAT(device_paths(plan(request(node::DeviceIdsKind::None), gpus({0}))),
                Not(Contains("/dev/nvidia0")));
}

TEST_F(PlanTest, MigDeviceBringsItsParentAndCapabilityNodes) {
    node::Selection sel;
    sel.migs.push_back(&node.gpus[3].mig[0]);
    auto p = plan(request(node::DeviceIdsKind::List, config::kCapUtility), sel);
    EXPECT_THAT(device_paths(p), UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia3",
                                                      "/dev/nvidia-caps/nvidia-cap30",
                                                      "/dev/nvidia-caps/nvidia-cap31"));
    ASSERT_TRUE(p.proc);
    ASSERT_EQ(p.proc->gpus.size(), 1u);
    EXPECT_EQ(p.proc->gpus[0].bus_id, node.gpus[3].pci_bus_id);
    EXPECT_THAT(p.proc->capability_files,
                UnorderedElementsAre(node.gpus[3].mig[0].gi_access, node.gpus[3].mig[0].ci_access));
}

TEST_F(PlanTest, MigConfigAndMonitorCapabilities) {
    auto r = request(node::DeviceIdsKind::List, config::kCapUtility);
    r.mig_config.kind = node::DeviceIdsKind::All;
    auto p = plan(r, gpus({0}));
    EXPECT_THAT(device_paths(p), Contains("/dev/nvidia-caps/nvidia-cap1"));
    EXPECT_THAT(device_paths(p), Not(Contains("/dev/nvidia-caps/nvidia-cap2")));
    EXPECT_THAT(p.proc->capability_files,
                Contains(fs::path(kHost) / "proc/driver/nvidia/capabilities/mig/config"));

    r.mig_monitor.kind = node::DeviceIdsKind::List;
    r.mig_monitor.ids = {"0"};
    EXPECT_THAT(device_paths(plan(r, gpus({0}))), Contains("/dev/nvidia-caps/nvidia-cap2"));

    node.mig_control.clear();
    try {
        plan(r, gpus({0}));
        ADD_FAILURE() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ECANCELED);
        EXPECT_THAT(e.what(), HasSubstr("NVIDIA_MIG_CONFIG_DEVICES"));
    }
}

TEST_F(PlanTest, LibrariesOfTheAskedCapabilitiesWithTheirLinks) {
    auto p = plan(request(node::DeviceIdsKind::All), gpus({0}), multiarch);
    const std::string lib = "/usr/lib/x86_64-linux-gnu/";
    EXPECT_THAT(targets(p), Contains(lib + "libcuda.so.550.54.15"));
    EXPECT_THAT(targets(p), Contains(lib + "libnvidia-ml.so.550.54.15"));
    for (const char* absent : {"libnvcuvid.so.550.54.15", "libGLX_nvidia.so.550.54.15",
                               "libnvidia-fbc.so.550.54.15", "libnvidia-ngx.so.550.54.15"})
        EXPECT_THAT(targets(p), Not(Contains(lib + absent))) << absent;

    const decide::PlannedMount* cuda = mount_at(p, lib + "libcuda.so.550.54.15");
    ASSERT_NE(cuda, nullptr);
    EXPECT_EQ(cuda->source, fs::path(kHost) / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
    EXPECT_EQ(cuda->flags, unsigned{util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev});
    EXPECT_FALSE(cuda->directory);
    EXPECT_THAT(cuda->why, HasSubstr("compute"));

    EXPECT_THAT(links(p),
                UnorderedElementsAre(
                    std::pair{lib + "libcuda.so.1", std::string("libcuda.so.550.54.15")},
                    std::pair{lib + "libcuda.so", std::string("libcuda.so.1")},
                    std::pair{lib + "libnvidia-ml.so.1", std::string("libnvidia-ml.so.550.54.15")},
                    std::pair{lib + "libnvidia-ml.so", std::string("libnvidia-ml.so.1")}));
    EXPECT_THAT(p.library_dirs, ElementsAre(multiarch.lib_dir));
    EXPECT_TRUE(p.refresh_ldcache);
    // The cache entries ldconfig would make of the soname and development links.
    std::vector<std::string> entries;
    for (const auto& l : p.ldcache_libraries)
        entries.push_back(l.soname + " " + l.path + (l.arch == ldcache::Arch::I386 ? " i386" : ""));
    EXPECT_THAT(entries, UnorderedElementsAre("libcuda.so.1 " + lib + "libcuda.so.1",
                                              "libcuda.so " + lib + "libcuda.so",
                                              "libnvidia-ml.so.1 " + lib + "libnvidia-ml.so.1",
                                              "libnvidia-ml.so " + lib + "libnvidia-ml.so"));
    EXPECT_FALSE(p.ldcache_scan);
}

TEST_F(PlanTest, LibrariesFollowTheImageLayout) {
    auto lib64 = plan(request(node::DeviceIdsKind::All, config::kCapCompute | config::kCapCompat32),
                      gpus({0}), decide::Image{});
    EXPECT_THAT(targets(lib64), Contains("/usr/lib64/libcuda.so.550.54.15"));
    EXPECT_THAT(links(lib64), Contains(std::pair{std::string("/usr/lib64/libcuda.so.1"),
                                                 std::string("libcuda.so.550.54.15")}));
    if (test::target::kHas32) {
        EXPECT_THAT(targets(lib64), Contains("/usr/lib/libcuda.so.550.54.15"));  // the 32-bit one
        EXPECT_THAT(lib64.library_dirs, ElementsAre("/usr/lib64", "/usr/lib"));
    } else {  // arm64: a lib64 image has no 32-bit directory, compat32 or not
        for (const auto& t : targets(lib64)) EXPECT_THAT(t, Not(StartsWith("/usr/lib/"))) << t;
        EXPECT_THAT(lib64.library_dirs, ElementsAre("/usr/lib64"));
    }

    auto deb = plan(request(node::DeviceIdsKind::All, config::kCapCompute | config::kCapCompat32),
                    gpus({0}), multiarch);
    EXPECT_THAT(targets(deb), Contains("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"));
    EXPECT_THAT(targets(deb), Contains("/usr/lib/i386-linux-gnu/libcuda.so.550.54.15"));
    EXPECT_THAT(links(deb), Contains(std::pair{std::string("/usr/lib/i386-linux-gnu/libcuda.so.1"),
                                               std::string("libcuda.so.550.54.15")}));
}

TEST_F(PlanTest, ThirtyTwoBitLibrariesOnlyWithCompat32) {
    auto p = plan(request(node::DeviceIdsKind::All, config::kCapCompute | config::kCapGraphics),
                  gpus({0}), multiarch);
    for (const auto& t : targets(p)) EXPECT_THAT(t, Not(HasSubstr("i386"))) << t;
    auto with = plan(request(node::DeviceIdsKind::All,
                             config::kCapCompute | config::kCapGraphics | config::kCapCompat32),
                     gpus({0}), multiarch);
    EXPECT_THAT(targets(with), Contains("/usr/lib/i386-linux-gnu/libGLX_nvidia.so.550.54.15"));
    // compat32 alone brings no library: it only adds the 32-bit copies.
    auto alone =
        plan(request(node::DeviceIdsKind::All, config::kCapCompat32), gpus({0}), multiarch);
    EXPECT_THAT(targets(alone), IsEmpty());
    EXPECT_FALSE(alone.refresh_ldcache);
}

TEST_F(PlanTest, EachCapabilityBringsItsFiles) {
    auto t = [&](config::Capabilities caps) {
        return targets(plan(request(node::DeviceIdsKind::All, caps), gpus({0}), multiarch));
    };
    const std::string lib = "/usr/lib/x86_64-linux-gnu/";
    EXPECT_THAT(t(config::kCapVideo), UnorderedElementsAre(lib + "libnvcuvid.so.550.54.15",
                                                           lib + "libnvidia-fbc.so.550.54.15"));
    EXPECT_THAT(t(config::kCapDisplay), ElementsAre(lib + "libnvidia-fbc.so.550.54.15"));
    EXPECT_THAT(t(config::kCapNgx), ElementsAre(lib + "libnvidia-ngx.so.550.54.15"));
    EXPECT_THAT(t(config::kCapGraphics), ElementsAre(lib + "libGLX_nvidia.so.550.54.15"));
}

TEST_F(PlanTest, BinariesIpcsAndFirmware) {
    auto p = plan(request(node::DeviceIdsKind::All), gpus({0}));
    const decide::PlannedMount* smi = mount_at(p, "/usr/bin/nvidia-smi");
    ASSERT_NE(smi, nullptr);
    EXPECT_EQ(smi->source, fs::path(kHost) / "usr/bin/nvidia-smi");
    EXPECT_TRUE(smi->flags & util::kMountReadOnly);
    EXPECT_FALSE(smi->flags & util::kMountNoExec);
    EXPECT_NE(mount_at(p, "/usr/bin/nvidia-cuda-mps-control"), nullptr);

    const decide::PlannedMount* sock = mount_at(p, "/run/nvidia-persistenced/socket");
    ASSERT_NE(sock, nullptr);
    // A socket works on a read-only mount (connect needs no write access to the mount).
    EXPECT_EQ(sock->flags, unsigned{util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev |
                                    util::kMountNoExec});
    EXPECT_FALSE(sock->directory);
    const decide::PlannedMount* mps = mount_at(p, "/tmp/nvidia-mps");
    ASSERT_NE(mps, nullptr);
    EXPECT_TRUE(mps->directory);
    EXPECT_FALSE(mps->flags & util::kMountReadOnly);  // clients create their pipes there

    const decide::PlannedMount* fw = mount_at(p, "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin");
    ASSERT_NE(fw, nullptr);
    EXPECT_EQ(fw->flags, unsigned{util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev |
                                  util::kMountNoExec});

    // Utility alone: nvidia-smi and the persistenced socket, not the MPS pieces.
    auto u = plan(request(node::DeviceIdsKind::All, config::kCapUtility), gpus({0}));
    EXPECT_NE(mount_at(u, "/usr/bin/nvidia-smi"), nullptr);
    EXPECT_NE(mount_at(u, "/run/nvidia-persistenced/socket"), nullptr);
    EXPECT_EQ(mount_at(u, "/usr/bin/nvidia-cuda-mps-control"), nullptr);
    EXPECT_EQ(mount_at(u, "/tmp/nvidia-mps"), nullptr);
    EXPECT_EQ(mount_at(u, "/usr/lib64/libcuda.so.550.54.15"), nullptr);
}

TEST_F(PlanTest, ProcViewHasOnlySelectedGpusAndModifyDeviceFilesOff) {
    auto p = plan(request(node::DeviceIdsKind::List), gpus({0, 2}));
    ASSERT_TRUE(p.proc);
    EXPECT_EQ(p.proc->target, "/proc/driver/nvidia");
    EXPECT_EQ(p.proc->version, proc_files.version);
    ASSERT_EQ(p.proc->gpus.size(), 2u);
    EXPECT_EQ(p.proc->gpus[0].bus_id, node.gpus[0].pci_bus_id);
    EXPECT_EQ(p.proc->gpus[0].information, proc_files.information[node.gpus[0].pci_bus_id]);
    EXPECT_EQ(p.proc->gpus[1].bus_id, node.gpus[2].pci_bus_id);
    EXPECT_EQ(p.proc->params, "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nEnableMSI: 1\n");

    proc_files.params = "EnableMSI: 1";  // no ModifyDeviceFiles line, no final newline
    EXPECT_EQ(plan(request(node::DeviceIdsKind::List), gpus({0})).proc->params,
              "EnableMSI: 1\nModifyDeviceFiles: 0\n");
    proc_files.params.clear();
    EXPECT_EQ(plan(request(node::DeviceIdsKind::List), gpus({0})).proc->params,
              "ModifyDeviceFiles: 0\n");
}

TEST_F(PlanTest, JsonHasTheDocumentedFields) {
    auto r = request(node::DeviceIdsKind::List);
    r.mig_config.kind = node::DeviceIdsKind::All;
    auto p = plan(r, gpus({1}));
    nlohmann::json j = p;
    ASSERT_EQ(j["devices"].size(), p.devices.size());
    for (const auto& d : j["devices"]) {
        for (const char* key : {"path", "host_path", "major", "minor", "why"})
            EXPECT_TRUE(d.contains(key)) << key;
    }
    auto gpu1 = std::find_if(p.devices.begin(), p.devices.end(),
                             [](const auto& d) { return d.node.path == "/dev/nvidia1"; });
    ASSERT_NE(gpu1, p.devices.end());
    EXPECT_THAT(j["devices"], Contains(nlohmann::json{{"path", "/dev/nvidia1"},
                                                      {"host_path", "/host/dev/nvidia1"},
                                                      {"major", 195},
                                                      {"minor", 1},
                                                      {"why", gpu1->why}}));
    auto smi = std::find_if(j["mounts"].begin(), j["mounts"].end(),
                            [](const auto& m) { return m["target"] == "/usr/bin/nvidia-smi"; });
    ASSERT_NE(smi, j["mounts"].end());
    EXPECT_EQ((*smi)["source"], "/host/usr/bin/nvidia-smi");
    EXPECT_EQ((*smi)["directory"], false);
    EXPECT_EQ((*smi)["flags"], nlohmann::json({"ro", "nosuid", "nodev"}));
    EXPECT_TRUE((*smi)["why"].is_string());
    EXPECT_THAT(j["symlinks"], Contains(nlohmann::json{{"path", "/usr/lib64/libcuda.so"},
                                                       {"target", "libcuda.so.1"}}));
    EXPECT_EQ(j["proc"]["target"], "/proc/driver/nvidia");
    EXPECT_EQ(j["proc"]["gpus"], nlohmann::json({node.gpus[1].pci_bus_id}));
    EXPECT_EQ(j["proc"]["capability_files"].size(), 1u);
    EXPECT_EQ(j["library_dirs"], nlohmann::json({"/usr/lib64"}));
    EXPECT_EQ(j["refresh_ldcache"], true);

    nlohmann::json none = plan(decide::Request{}, node::Selection{});
    EXPECT_TRUE(none["proc"].is_null());
    EXPECT_TRUE(none["devices"].empty());
}

TEST_F(PlanTest, DescribeHasOneLinePerItem) {
    auto p = plan(request(node::DeviceIdsKind::List), gpus({1}));
    const std::string text = decide::describe(p);
    const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    EXPECT_EQ(lines,
              p.devices.size() + p.mounts.size() + p.symlinks.size() + 1 /*proc*/ + 1 /*ldcache*/);
    EXPECT_THAT(text, HasSubstr("/dev/nvidia1"));
    EXPECT_THAT(text, HasSubstr("GPU-1aaa"));
    EXPECT_THAT(text, HasSubstr("/usr/lib64/libcuda.so -> libcuda.so.1"));
    EXPECT_THAT(text, HasSubstr(node.gpus[1].pci_bus_id));
    EXPECT_THAT(describe(decide::Plan{}), HasSubstr("not a GPU container"));
}

TEST_F(PlanTest, ImexChannelsBringExactlyTheirNodes) {
    const std::string dir = "nvidia-caps-imex-channels/channel";
    for (unsigned n : {0u, 1u, 3u})
        node.imex_channels.push_back(dev(dir + std::to_string(n), 508, n));
    auto r = request(node::DeviceIdsKind::List);
    auto channels = [](const decide::Plan& p) {
        std::vector<std::string> out;
        for (const auto& d : p.devices)
            if (d.node.major == 508) out.push_back(d.node.path);
        return out;
    };
    EXPECT_THAT(channels(plan(r, gpus({0}))), IsEmpty());
    r.imex_channels = {"3", "1"};
    auto p = plan(r, gpus({0}));
    EXPECT_THAT(channels(p), ElementsAre("/dev/" + dir + "3", "/dev/" + dir + "1"));
    auto one = std::find_if(p.devices.begin(), p.devices.end(),
                            [&](const auto& d) { return d.node.path == "/dev/" + dir + "1"; });
    ASSERT_NE(one, p.devices.end());
    EXPECT_EQ(one->node.host_path, fs::path(kHost) / "dev" / (dir + "1"));
    EXPECT_EQ(one->node.minor, 1u);
    EXPECT_THAT(one->why, HasSubstr("IMEX channel 1"));
    r.imex_channels = {"all"};
    EXPECT_THAT(channels(plan(r, gpus({0}))),
                ElementsAre("/dev/" + dir + "0", "/dev/" + dir + "1", "/dev/" + dir + "3"));
    // Channels without a GPU (imex/<n> mounts only): the driver and the channel.
    auto only = request(node::DeviceIdsKind::None);
    only.imex_channels = {"0"};
    auto q = plan(only, node::Selection{});
    EXPECT_THAT(channels(q), ElementsAre("/dev/" + dir + "0"));
    EXPECT_THAT(device_paths(q), Contains("/dev/nvidiactl"));
    EXPECT_THAT(device_paths(q), Not(Contains("/dev/nvidia0")));
    // A channel the node lacks is an error naming it.
    r.imex_channels = {"1", "2"};
    try {
        plan(r, gpus({0}));
        ADD_FAILURE() << "channel 2 was planned";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr("IMEX channel 2"));
        EXPECT_THAT(e.what(), HasSubstr("/dev/nvidia-caps-imex-channels/channel2"));
    }
    node.imex_channels.clear();
    r.imex_channels = {"all"};
    EXPECT_THAT(channels(plan(r, gpus({0}))), IsEmpty());
}

TEST_F(PlanTest, CudaCompatOnlyWhenTheImagesLibcudaIsNewer) {
    auto compat = [&](const std::string& version, config::Capabilities caps = config::kCapDefault,
                      bool enabled = true) {
        decide::Image image = multiarch;
        image.cuda_compat_version = version;
        image.cuda_compat_sonames = {"libcuda.so.1", "libnvidia-nvvm.so.4"};
        config::Config config;
        config.policy.cuda_compat = enabled;
        return make_plan(request(node::DeviceIdsKind::List, caps), node, gpus({0}), image, config,
                         proc_files);
    };
    for (const std::string newer : {"550.54.16", "550.100", "551", "560.28.03", "999.1.1.1"}) {
        SCOPED_TRACE(newer);
        auto p = compat(newer);
        ASSERT_EQ(p.files.size(), 1u);
        EXPECT_EQ(p.files[0].path, "/etc/ld.so.conf.d/000-cuda-compat.conf");
        EXPECT_EQ(p.files[0].content, "/usr/local/cuda/compat\n");
        EXPECT_THAT(p.files[0].why, HasSubstr(newer));
        EXPECT_THAT(p.files[0].why, HasSubstr(kVersion));
        EXPECT_EQ(p.library_dirs, (std::vector<std::string>{"/usr/local/cuda/compat",
                                                            "/usr/lib/x86_64-linux-gnu"}));
        EXPECT_TRUE(p.refresh_ldcache);
        // The image's compat soname links come first in the cache.
        ASSERT_GE(p.ldcache_libraries.size(), 2u);
        EXPECT_EQ(p.ldcache_libraries[0].path, "/usr/local/cuda/compat/libcuda.so.1");
        EXPECT_EQ(p.ldcache_libraries[1].path, "/usr/local/cuda/compat/libnvidia-nvvm.so.4");
    }
    for (const std::string not_newer : {"", "550.54.15", "550.54.15.0", "550.54.14", "550.9.99",
                                        "1", "535.183.01", "550..54", "x"}) {
        SCOPED_TRACE(not_newer);
        auto p = compat(not_newer);
        EXPECT_THAT(p.files, IsEmpty());
        EXPECT_EQ(p.library_dirs, std::vector<std::string>{"/usr/lib/x86_64-linux-gnu"});
    }
    EXPECT_THAT(compat("999.1", config::kCapUtility).files, IsEmpty());
    EXPECT_THAT(compat("999.1", config::kCapDefault, /*enabled=*/false).files, IsEmpty());

    auto p = compat("999.1");
    nlohmann::json j = p;
    EXPECT_EQ(j["files"],
              nlohmann::json::array({{{"path", "/etc/ld.so.conf.d/000-cuda-compat.conf"},
                                      {"content", "/usr/local/cuda/compat\n"},
                                      {"why", p.files[0].why}}}));
    EXPECT_THAT(decide::describe(p), HasSubstr("file    /etc/ld.so.conf.d/000-cuda-compat.conf: "));
}

// What gpubind owns beyond this plan's names: every library and binary of the
// node, whatever was asked, so that a restart with less finds what an earlier
// start left; and the compat entry of a decision no longer taken.
TEST_F(PlanTest, OwnedNamesCoverEveryDriverFileOfTheNode) {
    auto p = plan(request(node::DeviceIdsKind::List, config::kCapUtility), gpus({0}), multiarch);
    ASSERT_EQ(p.owned.size(), 3u);
    EXPECT_EQ(p.owned[0].dir, "/usr/lib/x86_64-linux-gnu");
    EXPECT_THAT(p.owned[0].stems, UnorderedElementsAre("libcuda.so.", "libnvidia-ml.so.",
                                                       "libnvcuvid.so.", "libGLX_nvidia.so.",
                                                       "libnvidia-fbc.so.", "libnvidia-ngx.so."));
    EXPECT_THAT(p.owned[0].links,
                UnorderedElementsAre("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1",
                                     "libnvidia-ml.so", "libnvcuvid.so.1", "libGLX_nvidia.so.0",
                                     "libnvidia-fbc.so.1", "libnvidia-ngx.so.1"));
    EXPECT_THAT(p.owned[0].files, IsEmpty());
    EXPECT_EQ(p.owned[1].dir, "/usr/lib/i386-linux-gnu");
    EXPECT_THAT(p.owned[1].stems, UnorderedElementsAre("libcuda.so.", "libGLX_nvidia.so."));
    EXPECT_EQ(p.owned[2].dir, "/usr/bin");
    EXPECT_THAT(p.owned[2].files, UnorderedElementsAre("nvidia-smi", "nvidia-cuda-mps-control"));
    // Not a GPU container: nothing is owned.
    EXPECT_THAT(plan(decide::Request{}, {}, multiarch).owned, IsEmpty());
}

TEST_F(PlanTest, CompatEntryOfAnEarlierDecisionIsStaleWhenNotWrittenNow) {
    decide::Image image = multiarch;
    image.cuda_compat_version = "999.1";
    auto with = plan(request(node::DeviceIdsKind::List), gpus({0}), image);
    ASSERT_EQ(with.files.size(), 1u);
    EXPECT_THAT(with.stale_files, IsEmpty());
    for (const char* version : {"", "535.1"}) {
        image.cuda_compat_version = version;
        auto without = plan(request(node::DeviceIdsKind::List), gpus({0}), image);
        EXPECT_THAT(without.files, IsEmpty());
        ASSERT_EQ(without.stale_files.size(), 1u);
        EXPECT_EQ(without.stale_files[0].path, with.files[0].path);
        EXPECT_EQ(without.stale_files[0].content, with.files[0].content);
    }
}

TEST(Versions, CompareNumericallyComponentByComponent) {
    EXPECT_TRUE(decide::is_version("550.54.15"));
    EXPECT_TRUE(decide::is_version("12"));
    for (const char* bad :
         {"", ".", "550.", ".550", "550..54", "550.x", "5 50", "-1", "1e3", "1234567890.1"})
        EXPECT_FALSE(decide::is_version(bad)) << bad;
    EXPECT_LT(util::compare_versions("550.54.15", "550.100.1"), 0);
    EXPECT_GT(util::compare_versions("560", "550.999"), 0);
    EXPECT_EQ(util::compare_versions("550.54", "550.54.0"), 0);
    EXPECT_LT(util::compare_versions("550.54", "550.54.1"), 0);
    EXPECT_EQ(util::compare_versions("550.054.15", "550.54.15"), 0);
}

// ---- read_proc_files -------------------------------------------------------------------------

void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

TEST(ReadProcFiles, ReadsVersionParamsAndEachGpusInformation) {
    test::TempDir dir;
    node::Node node;
    node.roots.proc = dir.path();
    for (const char* bus : {"0000:01:00.0", "0000:02:00.0"}) {
        node::Gpu gpu;
        gpu.pci_bus_id = bus;
        gpu.proc_dir = dir / "driver/nvidia/gpus" / bus;
        node.gpus.push_back(gpu);
    }
    write(dir / "driver/nvidia/version", "NVRM version: 550.54.15\n");
    write(dir / "driver/nvidia/params", "ModifyDeviceFiles: 1\n");
    write(dir / "driver/nvidia/gpus/0000:01:00.0/information", "Model: A\n");

    auto files = node::read_proc_files(node);
    EXPECT_EQ(files.version, "NVRM version: 550.54.15\n");
    EXPECT_EQ(files.params, "ModifyDeviceFiles: 1\n");
    EXPECT_EQ(files.information["0000:01:00.0"], "Model: A\n");
    EXPECT_EQ(files.information["0000:02:00.0"], "");  // missing reads as empty

    fs::remove(dir / "driver/nvidia/params");
    EXPECT_EQ(node::read_proc_files(node).params, "");
    fs::remove(dir / "driver/nvidia/version");
    EXPECT_THROW(node::read_proc_files(node), util::Error);
}

// ---- inspect_image -----------------------------------------------------------------------------

TEST(InspectImage, Lib64UnlessDebianLike) {
    test::TempDir root;
    auto image = decide::inspect_image(root.path());
    EXPECT_EQ(image.lib_dir, "/usr/lib64");
    EXPECT_EQ(image.lib32_dir, test::target::kHas32 ? "/usr/lib" : "");
    EXPECT_EQ(image.bin_dir, "/usr/bin");

    write(root / "etc/debian_version", "12.5\n");
    image = decide::inspect_image(root.path());
    EXPECT_EQ(image.lib_dir, test::target::kLibDir);
    EXPECT_EQ(image.lib32_dir, test::target::kLib32Dir);

    test::TempDir multiarch;
    fs::create_directories(multiarch / (test::target::kLibDir + 1));
    EXPECT_EQ(decide::inspect_image(multiarch.path()).lib_dir, test::target::kLibDir);
}

TEST(InspectImage, ImageSymlinksStayInsideTheRoot) {
    test::TempDir outside;
    write(outside / "debian_version", "12\n");
    fs::create_directories(outside / (test::target::kLibDir + 1));
    test::TempDir root;
    fs::create_directories(root / "etc");
    fs::create_directories(root / "usr/lib");
    // Both point at real host paths; inside the root they name nothing.
    fs::create_symlink("../../../../../../.." + (outside / "debian_version").string(),
                       root / "etc/debian_version");
    fs::create_symlink((outside / (test::target::kLibDir + 1)).string(),
                       root / (test::target::kLibDir + 1));
    EXPECT_EQ(decide::inspect_image(root.path()).lib_dir, "/usr/lib64");

    // A symlink that stays inside counts.
    write(root / "etc/real_debian_version", "12\n");
    fs::remove(root / "etc/debian_version");
    fs::create_symlink("real_debian_version", root / "etc/debian_version");
    EXPECT_EQ(decide::inspect_image(root.path()).lib_dir, test::target::kLibDir);
}

TEST(InspectImage, OddShapesAreNotDebian) {
    test::TempDir root;
    write(root / "usr/lib", "not a directory\n");  // /usr/lib/x86_64-linux-gnu cannot exist
    EXPECT_EQ(decide::inspect_image(root.path()).lib_dir, "/usr/lib64");
    test::TempDir file_root;
    write(file_root / (test::target::kLibDir + 1), "a file\n");
    EXPECT_EQ(decide::inspect_image(file_root.path()).lib_dir, "/usr/lib64");

    auto missing = root / "no-such-rootfs";
    EXPECT_THROW(decide::inspect_image(missing), util::Error);
}

// What decides the cache refresh's method: a cache, or an ld.so.conf naming something.
TEST(InspectImage, LoaderCacheAndConfiguration) {
    test::TempDir root;
    decide::Image image = decide::inspect_image(root.path());
    EXPECT_FALSE(image.has_ldcache);
    EXPECT_FALSE(image.ld_so_conf);
    write(root / "etc/ld.so.conf", "# nothing\n\n   \t\n");
    EXPECT_FALSE(decide::inspect_image(root.path()).ld_so_conf);
    write(root / "etc/ld.so.conf", "# dirs\ninclude /etc/ld.so.conf.d/*.conf\n");
    EXPECT_TRUE(decide::inspect_image(root.path()).ld_so_conf);
    write(root / "etc/ld.so.cache", "whatever\n");
    image = decide::inspect_image(root.path());
    EXPECT_TRUE(image.has_ldcache);
    EXPECT_FALSE(image.ld_so_conf);  // asked only without a cache
    // A FIFO as ld.so.conf is never opened: it names nothing.
    test::TempDir fifo;
    fs::create_directories(fifo / "etc");
    ASSERT_EQ(::mkfifo((fifo / "etc/ld.so.conf").c_str(), 0644), 0);
    EXPECT_FALSE(decide::inspect_image(fifo.path()).ld_so_conf);
}

TEST_F(PlanTest, ScanOnlyForAnImageWithoutCacheWhoseConfNamesDirectories) {
    auto with = [&](bool cache, bool conf) {
        decide::Image image = multiarch;
        image.has_ldcache = cache;
        image.ld_so_conf = conf;
        return plan(request(node::DeviceIdsKind::All, config::kCapCompute), gpus({0}), image)
            .ldcache_scan;
    };
    EXPECT_TRUE(with(false, true));
    EXPECT_FALSE(with(false, false));
    EXPECT_FALSE(with(true, false));
    EXPECT_FALSE(with(true, true));
}

TEST(InspectImage, CudaCompatLibrariesAreListedNeverFollowed) {
    test::TempDir root;
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_version, "");
    const fs::path compat = root / "usr/local/cuda-12.4/compat";
    fs::create_directories(compat);
    // CUDA images make /usr/local/cuda a link to the versioned directory: resolved in the root.
    fs::create_symlink("/usr/local/cuda-12.4", root / "usr/local/cuda");
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_version, "");
    write(compat / "libcuda.so.560.28.03", "ELF\n");
    fs::create_symlink("libcuda.so.560.28.03", compat / "libcuda.so.1");
    fs::create_symlink("libcuda.so.1", compat / "libcuda.so");
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_version, "560.28.03");
    // Malformed versions, a directory, a FIFO (never opened: this would block) are ignored.
    for (const char* odd : {"libcuda.so.999..1", "libcuda.so.999.x", "libcuda.so.", "libcuda.so.-1",
                            "libcuda.so.999 ", "libcudaxso.999"})
        write(compat / odd, "x\n");
    fs::create_directories(compat / "libcuda.so.998");
    ASSERT_EQ(::mkfifo((compat / "libcuda.so.999").c_str(), 0644), 0);
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_version, "560.28.03");
    // Numeric comparison: 560.100 is newer than 560.28.03; a dangling link counts by its name.
    fs::create_symlink("/nowhere/libcuda.so", compat / "libcuda.so.560.100");
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_version, "560.100");
    // Entries named like sonames are what the loader cache gets (not the FIFO or the directory).
    write(compat / "libnvidia-ptxjitcompiler.so.1", "ELF\n");
    EXPECT_EQ(decide::inspect_image(root.path()).cuda_compat_sonames,
              (std::vector<std::string>{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"}));

    // The compat directory as a symlink, or a file: none.
    test::TempDir linked;
    fs::create_directories(linked / "elsewhere");
    write(linked / "elsewhere/libcuda.so.999.1", "ELF\n");
    fs::create_directories(linked / "usr/local/cuda");
    fs::create_symlink("/elsewhere", linked / "usr/local/cuda/compat");
    EXPECT_EQ(decide::inspect_image(linked.path()).cuda_compat_version, "");
    test::TempDir file;
    write(file / "usr/local/cuda/compat", "not a directory\n");
    EXPECT_EQ(decide::inspect_image(file.path()).cuda_compat_version, "");
    // /usr/local/cuda pointing out of the root resolves inside it: nothing there.
    test::TempDir outside, escaping;
    write(outside / "compat/libcuda.so.999.1", "ELF\n");
    fs::create_directories(escaping / "usr/local");
    fs::create_symlink(outside.path(), escaping / "usr/local/cuda");
    EXPECT_EQ(decide::inspect_image(escaping.path()).cuda_compat_version, "");
}

}  // namespace
}  // namespace gpubind
