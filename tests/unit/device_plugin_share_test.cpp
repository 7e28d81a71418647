// gpubind-device-plugin's GPU shares ([device-plugin] sharing, issue 48 item
// 3), its decisions without gRPC on simulated nodes: the device lists, the
// preferred allocation, Allocate's answer and its refusals, health. Sizes
// come from the simulated model's "<N>GB" (the fake NVML's memory, sim.hpp),
// UUIDs and NVLinks from the manifest; the share request Allocate writes is
// read back by the start path's own reader (decide::read_share).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/plugin/plugin.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

class PluginShares : public ::testing::Test {
  protected:
    void simulate(const std::string& topology, unsigned gpus) {
        sim::Spec spec;
        spec.topology = topology;
        spec.gpus = gpus;
        spec.model = "NVIDIA A100-SXM4 40GB";
        manifest_ = sim::simulate(dir_.path(), spec);
        const auto d = dir_.path();
        config_ = config::default_config();
        config_.roots = {d, d, d / "proc", d / "sys"};
        config_.state_dir = d / "run-gpubind";
        node_ = node::discover(config_);
    }
    // The GPU memory the simulated model names ("40GB": 40 GiB).
    std::uint64_t model_memory() const {
        std::smatch m;
        const std::string model = manifest_.gpus.at(0).model;
        EXPECT_TRUE(std::regex_search(model, m, std::regex(R"(([0-9]+)GB)"))) << model;
        return std::stoull(m[1]) * kGiB;
    }
    std::vector<plugin::Device> devices() {
        const auto r = plugin::resources(node_, settings_);
        EXPECT_EQ(r.size(), 1u);
        return r.at(0).devices;
    }
    // The share `answer`'s variables ask for, as a container start reads it.
    decide::ShareRequest share_of(const plugin::Allocation& answer) {
        decide::oci::Spec spec;
        for (const auto& [k, v] : answer.envs) spec.env.push_back(k + "=" + v);
        return decide::read_share(spec, "test");
    }
    // The share the hook reads from the answer's /dev/null mounts, whatever
    // variable the pod sets itself (here: 80 GiB and all the compute).
    decide::ShareRequest share_by_mounts(const plugin::Allocation& answer) {
        decide::oci::Spec spec;
        spec.env = {"GPUBIND_GPU_MEMORY=80GiB", "GPUBIND_GPU_COMPUTE=100"};
        for (const auto& m : answer.mounts)
            spec.mounts.push_back({m.container_path, m.host_path, "bind", {"bind", "ro"}});
        return decide::read_container_share(spec, config::Policy{}, "test", "test");
    }
    std::string refusal(const std::function<void()>& f) {
        try {
            f();
        } catch (const util::Error& e) {
            return e.what();
        }
        ADD_FAILURE() << "not refused";
        return {};
    }
    unsigned gpu_of(const std::string& id) const {
        for (const auto& g : manifest_.gpus)
            if (id.rfind(g.uuid + "::", 0) == 0) return g.index;
        ADD_FAILURE() << id << " is no share of a GPU of the manifest";
        return ~0u;
    }

    test::TempDir dir_{"gpubind-dp-share"};
    sim::Manifest manifest_;
    config::Config config_;
    config::DevicePluginConfig settings_;
    node::Node node_;
};

TEST_F(PluginShares, ReplicasListEachGpuAsNDevicesWithAnEqualPart) {
    simulate("hgx8", 8);
    settings_.sharing = config::SharingMode::Replicas;
    settings_.replicas = 3;
    const auto r = plugin::resources(node_, settings_);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].name, "nvidia.com/gpu");
    ASSERT_EQ(r[0].devices.size(), manifest_.gpus.size() * 3);
    for (std::size_t i = 0; i < r[0].devices.size(); ++i) {
        const auto& d = r[0].devices[i];
        const auto& g = manifest_.gpus[i / 3];
        EXPECT_EQ(d.id, fmt::format("{}::{}", g.uuid, i % 3));
        EXPECT_EQ(d.numa_node, g.numa_node) << d.id;
        EXPECT_EQ(d.memory, model_memory() / 3 / kMiB * kMiB) << d.id;  // 13653 MiB
        EXPECT_EQ(d.compute, 33u) << d.id;
    }
    settings_.id_strategy = config::IdStrategy::Index;
    EXPECT_EQ(devices().back().id, "7::2");
}

TEST_F(PluginShares, MemoryListsAUnitPerGibUnderItsOwnResource) {
    simulate("", 2);
    settings_.sharing = config::SharingMode::Memory;
    settings_.id_strategy = config::IdStrategy::Index;
    const auto r = plugin::resources(node_, settings_);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].name, "gpubind.io/gpu-memory");
    const std::uint64_t units = model_memory() / kGiB;
    ASSERT_EQ(r[0].devices.size(), 2 * units);
    EXPECT_EQ(r[0].devices[0].id, "0::0");
    EXPECT_EQ(r[0].devices[units - 1].id, fmt::format("0::{}", units - 1));
    EXPECT_EQ(r[0].devices[units].id, "1::0");
    settings_.memory_resource_name = "example.com/gpu-gib";
    EXPECT_EQ(plugin::resources(node_, settings_)[0].name, "example.com/gpu-gib");
}

TEST_F(PluginShares, AGpuWithMigDevicesOrUnknownMemoryIsRefused) {
    sim::Spec spec;
    spec.gpus = 2;
    spec.mig = {{1, 1, 0}};
    manifest_ = sim::simulate(dir_.path(), spec);
    const auto d = dir_.path();
    config_ = config::default_config();
    config_.roots = {d, d, d / "proc", d / "sys"};
    node_ = node::discover(config_);
    settings_.sharing = config::SharingMode::Memory;
    EXPECT_THAT(refusal([&] { plugin::resources(node_, settings_); }), HasSubstr("MIG"));
    node_.gpus[1].mig.clear();
    node_.gpus[1].memory = 0;
    EXPECT_THAT(refusal([&] { plugin::resources(node_, settings_); }),
                HasSubstr("memory of GPU 1"));
}

// Memory units: one GPU, the one with most free units that has the size.
TEST_F(PluginShares, PreferredMemoryUnitsAreAllOfOneGpu) {
    simulate("", 3);
    settings_.sharing = config::SharingMode::Memory;
    const auto ds = devices();
    const std::uint64_t units = model_memory() / kGiB;
    // Free: 10 units of GPU 0, 30 of GPU 1, 20 of GPU 2 (the others taken).
    const std::map<unsigned, unsigned> free = {{0, 10}, {1, 30}, {2, 20}};
    std::vector<std::string> available;
    for (const auto& [gpu, n] : free)
        for (unsigned k = 0; k < n; ++k)
            available.push_back(fmt::format("{}::{}", manifest_.gpus[gpu].uuid, units - 1 - k));
    for (int size : {1, 10, 25, 30}) {
        const auto got = plugin::preferred_allocation(node_, ds, available, {}, size);
        ASSERT_EQ(got.size(), static_cast<std::size_t>(size));
        EXPECT_EQ(std::set<std::string>(got.begin(), got.end()).size(), got.size());
        for (const auto& id : got) {
            EXPECT_EQ(gpu_of(id), 1u) << id << " for " << size;
            EXPECT_NE(std::find(available.begin(), available.end(), id), available.end());
        }
    }
    // A unit that must be in takes its GPU, if it has room.
    const auto got = plugin::preferred_allocation(node_, ds, available, {available[12 + 10]}, 15);
    ASSERT_EQ(got.size(), 15u);
    EXPECT_EQ(got[0], available[22]);
    for (const auto& id : got) EXPECT_EQ(gpu_of(id), 1u) << id;
    const auto on2 = plugin::preferred_allocation(node_, ds, available, {available[45]}, 20);
    for (const auto& id : on2) EXPECT_EQ(gpu_of(id), 2u) << id;
    EXPECT_THAT(refusal([&] { plugin::preferred_allocation(node_, ds, available, {}, 31); }),
                HasSubstr("no GPU has 31 free memory units"));
    EXPECT_THAT(
        refusal([&] { plugin::preferred_allocation(node_, ds, available, {available[0]}, 11); }),
        HasSubstr("no GPU has 11 free memory units"));
    EXPECT_THAT(
        refusal([&] {
            plugin::preferred_allocation(node_, ds, available, {available[0], available[15]}, 4);
        }),
        HasSubstr("more than one GPU"));
}

// Replicas: each of its own GPU; one where most replicas are free; NVLinked
// GPUs for two.
TEST_F(PluginShares, PreferredReplicasAreOfDistinctGpus) {
    simulate("dgx1", 8);
    settings_.sharing = config::SharingMode::Replicas;
    settings_.replicas = 4;
    const auto ds = devices();
    // GPU 0 has 1 replica free, GPU 5 has 3, the others 2.
    std::vector<std::string> available;
    for (const auto& g : manifest_.gpus) {
        const unsigned n = g.index == 0 ? 1 : g.index == 5 ? 3 : 2;
        for (unsigned k = 4 - n; k < 4; ++k) available.push_back(fmt::format("{}::{}", g.uuid, k));
    }
    const auto one = plugin::preferred_allocation(node_, ds, available, {}, 1);
    EXPECT_THAT(one, ElementsAre(manifest_.gpus[5].uuid + "::1"));
    for (int size : {2, 4, 8}) {
        const auto got = plugin::preferred_allocation(node_, ds, available, {}, size);
        ASSERT_EQ(got.size(), static_cast<std::size_t>(size));
        std::set<unsigned> gpus;
        for (const auto& id : got) {
            gpus.insert(gpu_of(id));
            EXPECT_NE(std::find(available.begin(), available.end(), id), available.end());
        }
        EXPECT_EQ(gpus.size(), got.size()) << fmt::format("{}", fmt::join(got, ","));
        if (size == 2) {
            const auto a = *gpus.begin(), b = *gpus.rbegin();
            EXPECT_GT(manifest_.topology.nvlinks[a][b], 0u) << a << " and " << b;
        }
    }
    const auto with = plugin::preferred_allocation(node_, ds, available, {available.back()}, 2);
    EXPECT_EQ(with[0] == available.back() || with[1] == available.back(), true);
    EXPECT_THAT(refusal([&] { plugin::preferred_allocation(node_, ds, available, {}, 9); }),
                HasSubstr("9 replicas asked for, and 8 GPUs have a free one"));
    EXPECT_THAT(
        refusal([&] {
            plugin::preferred_allocation(node_, ds, available, {available[1], available[2]}, 2);
        }),
        HasSubstr("at most one replica of a GPU"));
}

// Allocate names the GPUs by every strategy and writes the share, which the
// start path reads as 1/N of the memory and 100/N % of the compute.
TEST_F(PluginShares, AllocateOfReplicasWritesTheirShareAndNamesTheGpus) {
    simulate("hgx8", 8);
    settings_.sharing = config::SharingMode::Replicas;
    settings_.replicas = 3;
    settings_.device_list = {
        config::DeviceListStrategy::CdiCri, config::DeviceListStrategy::CdiAnnotations,
        config::DeviceListStrategy::Envvar, config::DeviceListStrategy::VolumeMounts};
    const auto ds = devices();
    const std::string a = manifest_.gpus[2].uuid, b = manifest_.gpus[6].uuid;
    const auto got = plugin::allocate(config_, settings_, node_, ds, {a + "::1", b + "::2"});
    EXPECT_THAT(got.cdi_devices, ElementsAre("nvidia.com/gpu=" + a, "nvidia.com/gpu=" + b));
    EXPECT_EQ(got.annotations.at(plugin::kCdiAnnotation),
              "nvidia.com/gpu=" + a + ",nvidia.com/gpu=" + b);
    EXPECT_EQ(got.envs.at("NVIDIA_VISIBLE_DEVICES"), a + "," + b);
    // The GPUs by mounts, then the share by mounts (the pod cannot make those).
    ASSERT_EQ(got.mounts.size(), 4u);
    EXPECT_EQ(got.mounts[0].container_path, fmt::format("{}/memory/{}", decide::kShareMountDir,
                                                        model_memory() / 3 / kMiB * kMiB));
    EXPECT_EQ(got.mounts[1].container_path,
              fmt::format("{}/compute/{}", decide::kShareMountDir, 100u / 3));
    EXPECT_EQ(got.mounts[2].container_path, "/var/run/nvidia-container-devices/" + a);
    EXPECT_EQ(got.mounts[3].container_path, "/var/run/nvidia-container-devices/" + b);
    for (const auto& m : got.mounts) EXPECT_EQ(m.host_path, "/dev/null");
    const auto share = share_of(got);
    EXPECT_EQ(share.memory, model_memory() / 3 / kMiB * kMiB);
    EXPECT_EQ(share.compute, 100u / 3);
    // What the pod writes into its own environment does not change it.
    EXPECT_EQ(share_by_mounts(got).memory, share.memory);
    EXPECT_EQ(share_by_mounts(got).compute, share.compute);
    // Without shares: no share asked.
    settings_.sharing = config::SharingMode::None;
    const auto whole = plugin::allocate(config_, settings_, node_, devices(), {a});
    EXPECT_FALSE(share_of(whole).asked());
    EXPECT_EQ(whole.envs.count("GPUBIND_GPU_MEMORY"), 0u);
}

TEST_F(PluginShares, AllocateOfMemoryUnitsWritesTheirGib) {
    simulate("", 2);
    settings_.sharing = config::SharingMode::Memory;
    settings_.id_strategy = config::IdStrategy::Index;
    settings_.device_list = {config::DeviceListStrategy::Envvar};
    const auto ds = devices();
    std::vector<std::string> ids;
    for (unsigned k = 0; k < 10; ++k) ids.push_back(fmt::format("1::{}", 3 * k));
    const auto got = plugin::allocate(config_, settings_, node_, ds, ids);
    EXPECT_EQ(got.envs.at("NVIDIA_VISIBLE_DEVICES"), "1");
    EXPECT_EQ(got.envs.at("GPUBIND_GPU_MEMORY"), "10GiB");
    EXPECT_TRUE(got.cdi_devices.empty());
    const auto share = share_of(got);
    EXPECT_EQ(share.memory, 10 * kGiB);
    EXPECT_EQ(share.compute, 0u);
    // With the envvar strategy too, the share by a mount the pod cannot make.
    EXPECT_EQ(share_by_mounts(got).memory, 10 * kGiB);
    settings_.device_list = {config::DeviceListStrategy::CdiCri};
    EXPECT_THAT(plugin::allocate(config_, settings_, node_, ds, {"0::7"}).cdi_devices,
                ElementsAre("nvidia.com/gpu=0"));
}

TEST_F(PluginShares, AllocateRefusesUnitsOfTwoGpusAndTwoReplicasOfOne) {
    simulate("", 2);
    settings_.sharing = config::SharingMode::Memory;
    settings_.id_strategy = config::IdStrategy::Index;
    auto ds = devices();
    try {
        plugin::allocate(config_, settings_, node_, ds, {"0::1", "0::2", "1::0"});
        ADD_FAILURE() << "units of two GPUs were given";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
        EXPECT_THAT(e.what(), HasSubstr("memory units 0::1 and 1::0 are of two GPUs"));
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
    settings_.sharing = config::SharingMode::Replicas;
    settings_.replicas = 4;
    ds = devices();
    try {
        plugin::allocate(config_, settings_, node_, ds, {"1::0", "0::3", "1::2"});
        ADD_FAILURE() << "two replicas of one GPU were given";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
        EXPECT_THAT(e.what(), HasSubstr("replicas 1::0 and 1::2 are of one GPU 1"));
    }
    EXPECT_THAT(refusal([&] { plugin::allocate(config_, settings_, node_, ds, {"1::4"}); }),
                HasSubstr("unknown device 1::4"));
}

// A share is unhealthy when its GPU is (its device node gone), and refused then.
TEST_F(PluginShares, ASharesHealthIsItsGpus) {
    simulate("", 3);
    settings_.sharing = config::SharingMode::Replicas;
    settings_.replicas = 2;
    auto ds = devices();
    EXPECT_FALSE(plugin::update_health(ds, node_));
    ASSERT_EQ(::unlink((dir_.path() / "dev/nvidia1").c_str()), 0);
    EXPECT_TRUE(plugin::update_health(ds, node_));
    for (const auto& d : ds) EXPECT_EQ(d.healthy, gpu_of(d.id) != 1) << d.id;
    const std::string id = manifest_.gpus[1].uuid + "::0";
    EXPECT_THAT(refusal([&] { plugin::allocate(config_, settings_, node_, ds, {id}); }),
                HasSubstr("unhealthy device " + id));
}

// The config: sharing's forms, and a bad one is an Error naming the key.
TEST(DevicePluginSharingConfig, ReadsEachFormAndRefusesBadOnes) {
    auto read = [](const std::string& table) {
        return config::parse_config_with_plugin("[device-plugin]\n" + table, "t.toml").plugin;
    };
    EXPECT_EQ(read("").sharing, config::SharingMode::None);
    EXPECT_EQ(read("sharing = \"none\"\n").sharing, config::SharingMode::None);
    EXPECT_EQ(read("sharing = \"memory\"\n").sharing, config::SharingMode::Memory);
    const auto r = read("sharing = { replicas = 4 }\n");
    EXPECT_EQ(r.sharing, config::SharingMode::Replicas);
    EXPECT_EQ(r.replicas, 4u);
    EXPECT_EQ(read("[device-plugin.sharing]\nreplicas = 100\n").replicas, 100u);
    EXPECT_EQ(read("memory-resource-name = \"example.com/gib\"\n").memory_resource_name,
              "example.com/gib");
    for (const char* bad :
         {"sharing = \"time-slicing\"", "sharing = { replicas = 1 }",
          "sharing = { replicas = 101 }", "sharing = { replicas = 2, memory = 1 }",
          "sharing = { replica = 2 }", "sharing = 4",
          "sharing = \"memory\"\nmig-strategy = \"mixed\"", "memory-resource-name = \"gib\""}) {
        try {
            config::parse_config(std::string("[device-plugin]\n") + bad + "\n", "t.toml");
            ADD_FAILURE() << bad << " was accepted";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("device-plugin.")) << bad;
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace gpubind
