// gpubind-device-plugin with [device-plugin] rdma = "affine": Allocate also
// names the HCAs nearest the allocated GPUs, per device-list strategy, on
// simulated nodes with HCAs. Which HCAs are near which GPU comes from the
// simulator's manifest (the PCIe switch each sits under, its NUMA node),
// never from the plugin's or the hook's selection.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_plugin_fixture.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/plugin/plugin.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

namespace api = ::v1beta1;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class DevicePluginRdma : public dp_test::DevicePlugin {
  protected:
    // The HCAs nearest the GPUs `gpus` by the manifest: those under a GPU's
    // PCIe switch, else those on its NUMA node; in the manifest's order.
    std::vector<std::string> near(const std::vector<unsigned>& gpus) const {
        std::set<std::string> names;
        for (unsigned g : gpus) {
            const auto& gpu = manifest_.gpus[g];
            std::vector<std::string> by_switch, by_numa;
            for (const auto& h : manifest_.hcas) {
                if (h.switch_port == gpu.switch_port) by_switch.push_back(h.name);
                if (h.numa_node == gpu.numa_node) by_numa.push_back(h.name);
            }
            for (const auto& n : by_switch.empty() ? by_numa : by_switch) names.insert(n);
        }
        std::vector<std::string> out;
        for (const auto& h : manifest_.hcas)
            if (names.count(h.name)) out.push_back(h.name);
        return out;
    }
    std::vector<std::string> uuids(const std::vector<unsigned>& gpus) const {
        std::vector<std::string> out;
        for (unsigned g : gpus) out.push_back(manifest_.gpus[g].uuid);
        return out;
    }
    // The CDI names a container with `gpus` must be given: the GPUs', then
    // the near HCAs' as the rdma family's CDI spec names them.
    std::vector<std::string> cdi_names(const std::vector<unsigned>& gpus) const {
        std::vector<std::string> out;
        for (const auto& u : uuids(gpus)) out.push_back("nvidia.com/gpu=" + u);
        for (const auto& h : near(gpus)) out.push_back("nvidia.com/mofed=" + h);
        return out;
    }
    static std::vector<std::string> cdi_of(const api::ContainerAllocateResponse& r) {
        std::vector<std::string> out;
        for (const auto& d : r.cdi_devices()) out.push_back(d.name());
        return out;
    }
    void every_strategy() {
        settings_.device_list = {
            config::DeviceListStrategy::CdiCri, config::DeviceListStrategy::CdiAnnotations,
            config::DeviceListStrategy::Envvar, config::DeviceListStrategy::VolumeMounts};
    }
};

// Three HCAs: two under the first switch (GPUs 0-3), one under the second
// (GPUs 4-7). Each container gets exactly the HCAs near its own GPUs, in
// every strategy; the CDI names are those the node's rdma CDI spec offers.
TEST_F(DevicePluginRdma, AllocateNamesExactlyTheNearestHcasPerStrategy) {
    simulate("hgx8", 0, {}, 3);
    ASSERT_EQ(manifest_.hcas.size(), 3u);
    ASSERT_EQ(near({6}).size(), 1u);  // the node is what the test needs
    ASSERT_EQ(near({1}).size(), 2u);
    every_strategy();
    settings_.rdma = config::RdmaStrategy::Affine;
    start();
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({uuids({6}), uuids({1, 6}), uuids({2})}, out).ok());
    ASSERT_EQ(out.container_responses_size(), 3);
    const auto spec = cdi::family_spec(node::discover(config_), config_, "rdma");
    ASSERT_TRUE(spec);
    const auto offered = cdi::device_names(*spec);
    const std::vector<std::vector<unsigned>> asked = {{6}, {1, 6}, {2}};
    for (std::size_t k = 0; k < asked.size(); ++k) {
        const auto& r = out.container_responses(static_cast<int>(k));
        const auto want = cdi_names(asked[k]);
        EXPECT_THAT(cdi_of(r), ElementsAreArray(want)) << k;
        for (const auto& h : near(asked[k]))
            EXPECT_NE(std::find(offered.begin(), offered.end(), "nvidia.com/mofed=" + h),
                      offered.end())
                << h;
        ASSERT_EQ(r.annotations().count("cdi.k8s.io/gpubind-device-plugin"), 1u);
        EXPECT_EQ(r.annotations().at("cdi.k8s.io/gpubind-device-plugin"),
                  fmt::format("{}", fmt::join(want, ",")));
        ASSERT_EQ(r.envs().count("GPUBIND_RDMA"), 1u) << k;
        EXPECT_EQ(r.envs().at("GPUBIND_RDMA"), fmt::format("{}", fmt::join(near(asked[k]), ",")));
        EXPECT_EQ(r.envs().at("NVIDIA_VISIBLE_DEVICES"),
                  fmt::format("{}", fmt::join(uuids(asked[k]), ",")));
        // volume-mounts: each GPU's /dev/null mount, then each HCA's under rdma/.
        std::vector<std::string> mounts, want_mounts;
        for (const auto& mount : r.mounts()) {
            EXPECT_EQ(mount.host_path(), "/dev/null");
            EXPECT_TRUE(mount.read_only());
            mounts.push_back(mount.container_path());
        }
        for (const auto& u : uuids(asked[k]))
            want_mounts.push_back("/var/run/nvidia-container-devices/" + u);
        for (const auto& h : near(asked[k]))
            want_mounts.push_back("/var/run/nvidia-container-devices/rdma/" + h);
        EXPECT_THAT(mounts, ElementsAreArray(want_mounts)) << k;
    }
}

// One HCA, under the first switch: GPUs 2 and 3 (the second switch, the
// other NUMA node) have none near. They get no HCA, and a container with
// GPUs of both kinds gets only the one near its first GPU.
TEST_F(DevicePluginRdma, AGpuWithNoHcaNearGetsNone) {
    simulate("", 4, {}, 1);
    ASSERT_EQ(near({0}), std::vector<std::string>{"mlx5_0"});
    ASSERT_THAT(near({3}), IsEmpty());
    settings_.device_list = {config::DeviceListStrategy::CdiCri,
                             config::DeviceListStrategy::Envvar};
    settings_.rdma = config::RdmaStrategy::Affine;
    start();
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({uuids({3}), uuids({0, 3})}, out).ok());
    ASSERT_EQ(out.container_responses_size(), 2);
    const auto& alone = out.container_responses(0);
    EXPECT_THAT(cdi_of(alone), ElementsAre("nvidia.com/gpu=" + manifest_.gpus[3].uuid));
    EXPECT_EQ(alone.envs().count("GPUBIND_RDMA"), 0u);
    const auto& both = out.container_responses(1);
    EXPECT_THAT(cdi_of(both), ElementsAreArray(cdi_names({0, 3})));
    EXPECT_THAT(cdi_of(both), ::testing::Contains("nvidia.com/mofed=mlx5_0"));
    EXPECT_EQ(both.envs().at("GPUBIND_RDMA"), "mlx5_0");

    // What the server logs (once): a note naming the GPU without an HCA.
    const node::Node n = node::discover(config_);
    const auto devices = plugin::resources(n, settings_).front().devices;
    const auto a = plugin::allocate(config_, settings_, n, devices, uuids({0, 3}));
    ASSERT_EQ(a.notes.size(), 1u);
    EXPECT_THAT(a.notes[0], HasSubstr(manifest_.gpus[3].uuid));
    EXPECT_THAT(plugin::allocate(config_, settings_, n, devices, uuids({0})).notes, IsEmpty());
}

// rdma = "none" (the default) on a node with HCAs: the answer names the GPUs only.
TEST_F(DevicePluginRdma, RdmaNoneLeavesTheAnswerAsItWas) {
    simulate("hgx8", 0, {}, 3);
    every_strategy();
    start();
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({uuids({1, 6})}, out).ok());
    const auto& r = out.container_responses(0);
    EXPECT_THAT(cdi_of(r), ElementsAre("nvidia.com/gpu=" + manifest_.gpus[1].uuid,
                                       "nvidia.com/gpu=" + manifest_.gpus[6].uuid));
    EXPECT_EQ(
        r.annotations().at("cdi.k8s.io/gpubind-device-plugin"),
        "nvidia.com/gpu=" + manifest_.gpus[1].uuid + ",nvidia.com/gpu=" + manifest_.gpus[6].uuid);
    EXPECT_EQ(r.envs().count("GPUBIND_RDMA"), 0u);
    EXPECT_EQ(r.envs().size(), 1u);
    EXPECT_EQ(r.mounts_size(), 2);
}

TEST(DevicePluginRdmaConfig, ReadsRdmaAndRefusesABadValue) {
    EXPECT_EQ(config::parse_config_with_plugin("[device-plugin]\nrdma = \"affine\"\n", "t.toml")
                  .plugin.rdma,
              config::RdmaStrategy::Affine);
    EXPECT_EQ(config::parse_config_with_plugin("[device-plugin]\nrdma = \"none\"\n", "t.toml")
                  .plugin.rdma,
              config::RdmaStrategy::None);
    EXPECT_EQ(config::DevicePluginConfig{}.rdma, config::RdmaStrategy::None);
    for (const char* bad : {"rdma = \"near\"", "rdma = true", "rdma = \"Affine\""}) {
        try {
            config::parse_config(std::string("[device-plugin]\n") + bad + "\n", "t.toml");
            ADD_FAILURE() << bad << " was accepted";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("device-plugin.rdma")) << bad;
        }
    }
}

}  // namespace
}  // namespace gpubind
