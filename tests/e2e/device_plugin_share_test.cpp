// gpubind-device-plugin's GPU shares end to end (issue 48 item 3): the
// program with [device-plugin] sharing against a stand-in kubelet on a
// simulated node: the registered resource, ListAndWatch's list (every GPU's
// replicas or GiB units, by the manifest's UUIDs and the model's memory), the
// preferred allocation and Allocate's answer, which gpubind-hook then starts
// under runc: the container gets exactly that GPU, its share request read as
// well-formed ([policy] shares = "soft": started whatever the node enforces);
// a GPU's device node removed makes exactly its replicas Unhealthy.
// Expectations come from the manifest, never from gpubind's output.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/sim/sim.hpp"
#include "stand_in_kubelet.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace api = ::v1beta1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

class DevicePluginShareE2e : public ::testing::Test {
  protected:
    void SetUp() override {
        sim::Spec spec;
        spec.topology = "hgx8";
        spec.gpus = 8;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-dps-node");
    }
    void TearDown() override {
        if (plugin_) {
            const int status = plugin_->stop();
            EXPECT_EQ(status, 0) << plugin_->output();
        }
    }
    const sim::Manifest& m() const { return node_->manifest(); }

    // The model's memory in GiB ("NVIDIA H100 80GB HBM3": 80), what the fake NVML reports.
    std::uint64_t model_gib() const {
        std::smatch match;
        const std::string model = m().gpus.at(0).model;
        EXPECT_TRUE(std::regex_search(model, match, std::regex(R"(([0-9]+)GB)"))) << model;
        return std::stoull(match[1]);
    }

    // The plugin started with `table` in [device-plugin]; its registration.
    api::RegisterRequest start_plugin(const std::string& table) {
        node_->write_config(fmt::format(
            "[runtime]\nruntimes = [\"{}\"]\n[policy]\nshares = \"soft\"\n[device-plugin]\n"
            "plugin-dir = \"{}\"\nhealth-interval-ms = 200\n{}",
            env_or("GPUBIND_RUNC", "runc"), plugin_dir_.path().string(), table));
        kubelet_ = std::make_unique<StandInKubelet>(plugin_dir_.path());
        plugin_ = std::make_unique<PluginProcess>(GPUBIND_DEVICE_PLUGIN_PATH, node_->config(),
                                                  dir_.path() / "plugin.log");
        const auto r = kubelet_->wait(20s);
        if (!r) {
            ADD_FAILURE() << "no registration: " << plugin_->output();
            return {};
        }
        stub_ = api::DevicePlugin::NewStub(
            grpc::CreateChannel("unix:" + (plugin_dir_.path() / r->endpoint()).string(),
                                grpc::InsecureChannelCredentials()));
        return *r;
    }
    std::vector<std::string> list() {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        auto reader = stub_->ListAndWatch(&ctx, api::Empty{});
        api::ListAndWatchResponse r;
        std::vector<std::string> ids;
        if (!reader->Read(&r)) {
            ADD_FAILURE() << "no device list";
            return ids;
        }
        for (const auto& d : r.devices()) {
            EXPECT_EQ(d.health(), "Healthy") << d.id();
            ids.push_back(d.id());
        }
        ctx.TryCancel();
        return ids;
    }
    std::vector<std::string> prefer(const std::vector<std::string>& available, int size) {
        api::PreferredAllocationRequest req;
        auto* c = req.add_container_requests();
        for (const auto& id : available) c->add_available_deviceids(id);
        c->set_allocation_size(size);
        api::PreferredAllocationResponse resp;
        grpc::ClientContext ctx;
        const auto st = stub_->GetPreferredAllocation(&ctx, req, &resp);
        EXPECT_TRUE(st.ok()) << st.error_message();
        if (!st.ok() || resp.container_responses_size() != 1) return {};
        const auto& ids = resp.container_responses(0).deviceids();
        return {ids.begin(), ids.end()};
    }
    grpc::Status allocate(const std::vector<std::string>& ids,
                          api::ContainerAllocateResponse& out) {
        api::AllocateRequest req;
        auto* c = req.add_container_requests();
        for (const auto& id : ids) c->add_devices_ids(id);
        api::AllocateResponse resp;
        grpc::ClientContext ctx;
        const auto st = stub_->Allocate(&ctx, req, &resp);
        if (st.ok() && resp.container_responses_size() == 1) out = resp.container_responses(0);
        return st;
    }
    // The GPU index of "<uuid>::<part>", by the manifest.
    unsigned gpu_of(const std::string& id) const {
        for (const auto& g : m().gpus)
            if (id.rfind(g.uuid + "::", 0) == 0) return g.index;
        ADD_FAILURE() << id << " is no share of a GPU of the manifest";
        return ~0u;
    }
    // Allocate's variables given to a container started by gpubind-hook: it
    // must get exactly GPU `gpu`.
    void expect_container_gets(const api::ContainerAllocateResponse& resp, unsigned gpu) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)));
        for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
        const GpuChecks checks{};
        b.command(gpu_script(m(), checks));
        for (const auto& [key, value] : resp.envs()) b.env(key + "=" + value);
        b.hook(hook(), node_->config());
        const auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(expect_gpus(m(), r.out, {gpu}, checks), "") << r.out;
    }

    std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-dps"};
    TempDir plugin_dir_{"gpubind-e2e-dps-kubelet"};
    std::unique_ptr<StandInKubelet> kubelet_;
    std::unique_ptr<PluginProcess> plugin_;
    std::unique_ptr<api::DevicePlugin::Stub> stub_;
    int count_ = 0;
};

// Replicas: GPUs x 4 devices under nvidia.com/gpu; one replica's answer is
// its GPU and a quarter of its memory and compute.
TEST_F(DevicePluginShareE2e, ReplicasAreListedPerGpuAndAllocateWritesAQuarter) {
    const auto reg = start_plugin(
        "sharing = { replicas = 4 }\n"
        "device-list-strategy = [\"envvar\"]\n");
    EXPECT_EQ(reg.resource_name(), "nvidia.com/gpu");
    const auto ids = list();
    ASSERT_EQ(ids.size(), m().gpus.size() * 4);
    std::set<std::string> expected;
    for (const auto& g : m().gpus)
        for (int r = 0; r < 4; ++r) expected.insert(fmt::format("{}::{}", g.uuid, r));
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()), expected);

    const auto two = prefer(ids, 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_NE(gpu_of(two[0]), gpu_of(two[1]));
    api::ContainerAllocateResponse resp;
    const std::string id = m().gpus[5].uuid + "::2";
    const auto st = allocate({id}, resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.envs().at("NVIDIA_VISIBLE_DEVICES"), m().gpus[5].uuid);
    EXPECT_EQ(resp.envs().at("GPUBIND_GPU_MEMORY"), fmt::format("{}MiB", model_gib() * 1024 / 4));
    EXPECT_EQ(resp.envs().at("GPUBIND_GPU_COMPUTE"), "25");
    expect_container_gets(resp, 5);

    const auto refused = allocate({m().gpus[1].uuid + "::0", m().gpus[1].uuid + "::3"}, resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(), HasSubstr("at most one replica of a GPU"));

    // GPU 2's device node gone: exactly its replicas are Unhealthy.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto reader = stub_->ListAndWatch(&ctx, api::Empty{});
    api::ListAndWatchResponse now;
    ASSERT_TRUE(reader->Read(&now));
    ASSERT_EQ(::unlink((node_->root() / "dev/nvidia2").c_str()), 0);
    ASSERT_TRUE(reader->Read(&now));
    ASSERT_EQ(now.devices_size(), static_cast<int>(m().gpus.size() * 4));
    for (const auto& d : now.devices())
        EXPECT_EQ(d.health(), gpu_of(d.id()) == 2 ? "Unhealthy" : "Healthy") << d.id();
    ctx.TryCancel();
}

// Memory: GPUs x GiB devices under gpubind.io/gpu-memory; 10 units preferred
// on one GPU, and Allocate's answer is that GPU's CDI name and 10 GiB.
TEST_F(DevicePluginShareE2e, MemoryUnitsAreListedPerGibAndTenStayOnOneGpu) {
    const auto reg = start_plugin("sharing = \"memory\"\n");
    EXPECT_EQ(reg.resource_name(), "gpubind.io/gpu-memory");
    const auto ids = list();
    ASSERT_EQ(ids.size(), m().gpus.size() * model_gib());
    // GPU 3 has the most units free: every other GPU's first half is taken.
    std::vector<std::string> available;
    for (const auto& id : ids) {
        const std::size_t part = std::stoul(id.substr(id.rfind("::") + 2));
        if (gpu_of(id) == 3 || part >= model_gib() / 2) available.push_back(id);
    }
    const auto ten = prefer(available, 10);
    ASSERT_EQ(ten.size(), 10u);
    for (const auto& id : ten) EXPECT_EQ(gpu_of(id), 3u) << id;
    api::ContainerAllocateResponse resp;
    const auto st = allocate(ten, resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.cdi_devices_size(), 1);
    EXPECT_EQ(resp.cdi_devices(0).name(), "nvidia.com/gpu=" + m().gpus[3].uuid);
    EXPECT_EQ(resp.envs().at("GPUBIND_GPU_MEMORY"), "10GiB");
    EXPECT_EQ(resp.envs().count("GPUBIND_GPU_COMPUTE"), 0u);

    const auto refused = allocate({ten[0], m().gpus[4].uuid + "::0"}, resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(), HasSubstr("are of two GPUs"));
}

// The memory answer under the envvar strategy, started by gpubind-hook.
TEST_F(DevicePluginShareE2e, AMemoryShareStartsWithExactlyItsGpu) {
    start_plugin("sharing = \"memory\"\ndevice-list-strategy = [\"envvar\"]\n");
    api::ContainerAllocateResponse resp;
    const auto st = allocate({m().gpus[6].uuid + "::0", m().gpus[6].uuid + "::1"}, resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.envs().at("GPUBIND_GPU_MEMORY"), "2GiB");
    expect_container_gets(resp, 6);
}

// A bad sharing value: one line naming it, exit 2.
TEST(DevicePluginShareConfig, ABadSharingIsOneLineAndExitTwo) {
    TempDir dir("gpubind-e2e-dps-bad");
    const auto conf = dir.path() / "bad.toml";
    std::ofstream(conf) << "[device-plugin]\nsharing = { replicas = 1 }\n";
    // Bounded: a config taken would serve until stopped.
    const auto r = run_command({"timeout", "20", GPUBIND_DEVICE_PLUGIN_PATH, "--config",
                                conf.string(), "--plugin-dir", dir.path().string()});
    EXPECT_EQ(r.exit_code, 2);
    const std::string out = r.out + r.err;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_THAT(out, HasSubstr("device-plugin.sharing"));
}

}  // namespace
}  // namespace gpubind::test
