// gpubind-device-plugin against a stand-in kubelet: a Registration server and
// a DevicePlugin client over real unix sockets in a temp dir, on simulated
// nodes. Expectations come from the simulator's manifest (UUIDs, NUMA nodes,
// NVLinks, PCIe switches), never from the plugin's own answers.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "brute_place.hpp"
#include "device_plugin_fixture.hpp"
#include "deviceplugin.grpc.pb.h"
#include "files.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/plugin/plugin.hpp"
#include "gpubind/plugin/server.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace api = ::v1beta1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

using dp_test::DevicePlugin;
using dp_test::Kubelet;

TEST_F(DevicePlugin, RegistersWithTheKubeletsFields) {
    simulate();
    settings_.resource_name = "example.com/gpu";
    settings_.socket_name = "gpubind-test.sock";
    start();
    const auto r = kubelet_->wait(1);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->version(), "v1beta1");
    EXPECT_EQ(r->endpoint(), "gpubind-test.sock");
    EXPECT_EQ(r->resource_name(), "example.com/gpu");
    EXPECT_TRUE(r->options().get_preferred_allocation_available());
    EXPECT_FALSE(r->options().pre_start_required());
    struct stat st {};
    ASSERT_EQ(::lstat(socket().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    api::DevicePluginOptions o;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->GetDevicePluginOptions(&ctx, api::Empty{}, &o).ok());
    EXPECT_TRUE(o.get_preferred_allocation_available());
}

class DevicePluginIds : public DevicePlugin,
                        public ::testing::WithParamInterface<config::IdStrategy> {};

TEST_P(DevicePluginIds, ListsEveryGpuWithItsNumaNode) {
    simulate();
    settings_.id_strategy = GetParam();
    start();
    Watch w(*stub_);
    const auto list = w.next();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->devices_size(), static_cast<int>(manifest_.gpus.size()));
    for (int i = 0; i < list->devices_size(); ++i) {
        const auto& d = list->devices(i);
        const auto& g = manifest_.gpus[i];
        EXPECT_EQ(d.id(),
                  GetParam() == config::IdStrategy::Uuid ? g.uuid : std::to_string(g.index));
        EXPECT_EQ(d.health(), "Healthy");
        ASSERT_EQ(d.topology().nodes_size(), 1) << d.id();
        EXPECT_EQ(d.topology().nodes(0).id(), g.numa_node) << d.id();
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, DevicePluginIds,
                         ::testing::Values(config::IdStrategy::Uuid, config::IdStrategy::Index),
                         [](const auto& p) { return std::string(config::strategy_name(p.param)); });

TEST_F(DevicePlugin, ADeviceNodeRemovedMakesItsGpuUnhealthyUntilItIsBack) {
    simulate();
    start();
    Watch w(*stub_);
    ASSERT_TRUE(w.next());
    const auto node = node_dir_.path() / "dev/nvidia3";
    ASSERT_EQ(::unlink(node.c_str()), 0);
    auto list = w.next();
    ASSERT_TRUE(list);
    for (int i = 0; i < list->devices_size(); ++i)
        EXPECT_EQ(list->devices(i).health(), i == 3 ? "Unhealthy" : "Healthy") << i;
    // Unhealthy devices are refused.
    api::AllocateResponse out;
    auto st = allocate({{id_of(3)}}, out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("unhealthy device " + id_of(3)));
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, makedev(195, 3)), 0);
    list = w.next();
    ASSERT_TRUE(list);
    for (int i = 0; i < list->devices_size(); ++i) EXPECT_EQ(list->devices(i).health(), "Healthy");
}

TEST_F(DevicePlugin, TheDriverGoneMakesEveryGpuUnhealthy) {
    simulate();
    start();
    Watch w(*stub_);
    ASSERT_TRUE(w.next());
    const auto version = node_dir_.path() / "proc/driver/nvidia/version";
    const auto moved = node_dir_.path() / "proc/driver/nvidia/version.away";
    ASSERT_EQ(::rename(version.c_str(), moved.c_str()), 0);
    auto list = w.next();
    ASSERT_TRUE(list);
    for (const auto& d : list->devices()) EXPECT_EQ(d.health(), "Unhealthy") << d.id();
    ASSERT_EQ(::rename(moved.c_str(), version.c_str()), 0);
    list = w.next();
    ASSERT_TRUE(list);
    for (const auto& d : list->devices()) EXPECT_EQ(d.health(), "Healthy") << d.id();
}

// Allocate under each device-list strategy, from the manifest's UUIDs; the
// CDI names are those the node's CDI spec offers.
TEST_F(DevicePlugin, AllocateAnswersPerStrategy) {
    simulate();
    settings_.device_list = {
        config::DeviceListStrategy::CdiCri, config::DeviceListStrategy::CdiAnnotations,
        config::DeviceListStrategy::Envvar, config::DeviceListStrategy::VolumeMounts};
    start();
    const std::string a = manifest_.gpus[1].uuid, b = manifest_.gpus[6].uuid;
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({{a, b}, {manifest_.gpus[0].uuid}}, out).ok());
    ASSERT_EQ(out.container_responses_size(), 2);
    const auto& r = out.container_responses(0);
    std::vector<std::string> cdi;
    for (const auto& d : r.cdi_devices()) cdi.push_back(d.name());
    EXPECT_THAT(cdi, ElementsAre("nvidia.com/gpu=" + a, "nvidia.com/gpu=" + b));
    const auto offered = cdi::device_names(cdi::gpu_spec(node::discover(config_), config_));
    for (const auto& name : cdi)
        EXPECT_NE(std::find(offered.begin(), offered.end(), name), offered.end()) << name;
    ASSERT_EQ(r.annotations().count("cdi.k8s.io/gpubind-device-plugin"), 1u);
    EXPECT_EQ(r.annotations().at("cdi.k8s.io/gpubind-device-plugin"),
              "nvidia.com/gpu=" + a + ",nvidia.com/gpu=" + b);
    ASSERT_EQ(r.envs().count("NVIDIA_VISIBLE_DEVICES"), 1u);
    EXPECT_EQ(r.envs().at("NVIDIA_VISIBLE_DEVICES"), a + "," + b);
    ASSERT_EQ(r.mounts_size(), 2);
    EXPECT_EQ(r.mounts(0).container_path(), "/var/run/nvidia-container-devices/" + a);
    EXPECT_EQ(r.mounts(0).host_path(), "/dev/null");
    EXPECT_TRUE(r.mounts(0).read_only());
    EXPECT_EQ(r.mounts(1).container_path(), "/var/run/nvidia-container-devices/" + b);
    EXPECT_EQ(out.container_responses(1).envs().at("NVIDIA_VISIBLE_DEVICES"),
              manifest_.gpus[0].uuid);
}

TEST_F(DevicePlugin, AllocateByDefaultGivesCdiNamesOnlyAndIndexIdsWork) {
    simulate();
    settings_.id_strategy = config::IdStrategy::Index;
    start();
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({{"2", "5"}}, out).ok());
    const auto& r = out.container_responses(0);
    ASSERT_EQ(r.cdi_devices_size(), 2);
    EXPECT_EQ(r.cdi_devices(0).name(), "nvidia.com/gpu=2");
    EXPECT_EQ(r.cdi_devices(1).name(), "nvidia.com/gpu=5");
    EXPECT_TRUE(r.envs().empty());
    EXPECT_TRUE(r.annotations().empty());
    EXPECT_EQ(r.mounts_size(), 0);
}

TEST_F(DevicePlugin, UnknownIdsAndBadRequestsAreRefusedAndServingGoesOn) {
    simulate();
    start();
    api::AllocateResponse out;
    auto st = allocate({{manifest_.gpus[0].uuid, "GPU-nope", "7"}}, out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("unknown devices GPU-nope, 7"));
    EXPECT_EQ(st.error_message().find('\n'), std::string::npos);
    // Oversized: more than the service reads.
    std::vector<std::string> many(40000, std::string(40, 'x'));
    st = allocate({many}, out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    // A preferred allocation of 0 devices, and of a device not available.
    api::PreferredAllocationRequest p;
    auto* c = p.add_container_requests();
    c->add_available_deviceids(manifest_.gpus[0].uuid);
    c->set_allocation_size(0);
    api::PreferredAllocationResponse pr;
    {
        grpc::ClientContext ctx;
        st = stub_->GetPreferredAllocation(&ctx, p, &pr);
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("allocation_size 0"));
    c->set_allocation_size(1);
    c->add_must_include_deviceids(manifest_.gpus[1].uuid);
    {
        grpc::ClientContext ctx;
        st = stub_->GetPreferredAllocation(&ctx, p, &pr);
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(manifest_.gpus[1].uuid));
    // Still serving.
    out.Clear();
    ASSERT_TRUE(allocate({{manifest_.gpus[0].uuid}}, out).ok());
    EXPECT_EQ(out.container_responses(0).cdi_devices(0).name(),
              "nvidia.com/gpu=" + manifest_.gpus[0].uuid);
}

// GetPreferredAllocation against a brute-force search over the manifest's
// facts, in the documented order: NVLinks summed (more), PCIe ranks summed
// (PIX 1, NODE 4, SYS 5 on this layout; less), NUMA nodes (fewer), indices.
class Preferred : public DevicePlugin, public ::testing::WithParamInterface<std::string> {};

TEST_P(Preferred, IsTheOptimumOfABruteForceSearch) {
    simulate(GetParam());
    start();
    const auto& m = manifest_;
    const unsigned n_gpus = static_cast<unsigned>(m.gpus.size());
    const auto facts = test::manifest_facts(m);
    auto brute = [&](const std::vector<unsigned>& free, unsigned must, unsigned n) {
        return test::brute_place(facts, free, n, node::NvlinkNeed::Preferred,
                                 must == ~0u ? std::nullopt : std::optional<unsigned>(must))
            .gpus;
    };
    std::map<std::string, unsigned> index_of;
    for (const auto& g : m.gpus) index_of[g.uuid] = g.index;
    unsigned compared = 0;
    for (unsigned mask = 1; mask < (1u << n_gpus); mask += 3) {
        std::vector<unsigned> free;
        for (unsigned i = 0; i < n_gpus; ++i)
            if (mask >> i & 1) free.push_back(i);
        for (unsigned n = 1; n <= 4 && n <= free.size(); ++n)
            for (unsigned must : {~0u, free.back()}) {
                api::PreferredAllocationRequest req;
                auto* c = req.add_container_requests();
                // The kubelet's order is its own: give them highest first.
                for (auto it = free.rbegin(); it != free.rend(); ++it)
                    c->add_available_deviceids(m.gpus[*it].uuid);
                if (must != ~0u) c->add_must_include_deviceids(m.gpus[must].uuid);
                c->set_allocation_size(static_cast<int>(n));
                api::PreferredAllocationResponse resp;
                grpc::ClientContext ctx;
                const auto st = stub_->GetPreferredAllocation(&ctx, req, &resp);
                const std::string what = fmt::format("free {} must {} n {}", fmt::join(free, ","),
                                                     must == ~0u ? -1 : static_cast<int>(must), n);
                ASSERT_TRUE(st.ok()) << what << ": " << st.error_message();
                ASSERT_EQ(resp.container_responses_size(), 1);
                std::vector<unsigned> got;
                for (const auto& id : resp.container_responses(0).deviceids())
                    got.push_back(index_of.at(id));
                std::sort(got.begin(), got.end());
                ASSERT_EQ(got, brute(free, must, n)) << what;
                ++compared;
            }
    }
    EXPECT_GT(compared, 100u);
}

INSTANTIATE_TEST_SUITE_P(Simulated, Preferred,
                         ::testing::Values("hgx8-degraded", "pcie-pairs", "dgx1"),
                         [](const auto& p) {
                             std::string s = p.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

TEST_F(DevicePlugin, RegistersWhenTheKubeletComesLateOrRefusedOnce) {
    simulate();
    start(false);  // no kubelet yet
    std::this_thread::sleep_for(400ms);
    kubelet_ = std::make_unique<Kubelet>(plugin_dir_.path(), 1);  // refuses the first
    const auto r = kubelet_->wait(1);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->resource_name(), "nvidia.com/gpu");
    EXPECT_GE(kubelet_->attempts(), 2);
}

TEST_F(DevicePlugin, RegistersAgainAfterAKubeletRestartKeepingItsState) {
    simulate();
    start();
    // A device made unhealthy before the restart stays so after it.
    ASSERT_EQ(::unlink((node_dir_.path() / "dev/nvidia5").c_str()), 0);
    {
        Watch w(*stub_);
        std::optional<api::ListAndWatchResponse> list;
        for (int i = 0; i < 3 && (list = w.next()); ++i)
            if (list->devices(5).health() == "Unhealthy") break;
        ASSERT_TRUE(list);
        ASSERT_EQ(list->devices(5).health(), "Unhealthy");
    }
    // The kubelet restarts: it removes every socket in its directory and makes its own anew.
    kubelet_->stop();
    std::filesystem::remove(plugin_dir_.path() / "kubelet.sock");
    std::filesystem::remove(socket());
    kubelet_ = std::make_unique<Kubelet>(plugin_dir_.path());
    const auto r = kubelet_->wait(1);
    ASSERT_TRUE(r) << "no registration after the restart";
    EXPECT_EQ(r->endpoint(), settings_.socket_name);
    ASSERT_TRUE(std::filesystem::exists(socket()));
    connect();
    Watch w(*stub_);
    const auto list = w.next();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->devices_size(), static_cast<int>(manifest_.gpus.size()));
    EXPECT_EQ(list->devices(5).health(), "Unhealthy");
    EXPECT_EQ(list->devices(4).health(), "Healthy");
}

TEST_F(DevicePlugin, RegistersAgainWhenOnlyKubeletSockIsNew) {
    simulate();
    start();
    kubelet_->stop();
    std::filesystem::remove(plugin_dir_.path() / "kubelet.sock");
    kubelet_ = std::make_unique<Kubelet>(plugin_dir_.path());
    ASSERT_TRUE(kubelet_->wait(1)) << "no registration with the new kubelet";
}

// The program: SIGTERM removes its socket and exits 0; a bad key is one line, exit 2.
struct Child {
    pid_t pid = -1;
    int err = -1;  // its stderr
};
Child spawn(const std::vector<std::string>& args) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(p[1], 2);
        std::vector<char*> argv;
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(p[1]);
    return {pid, p[0]};
}
std::string drain(int fd) {
    std::string s = test::drain(fd);
    ::close(fd);
    return s;
}
int wait_exit(pid_t pid) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST_F(DevicePlugin, ProgramStopsOnSigtermWithItsSocketRemoved) {
    simulate();
    kubelet_ = std::make_unique<Kubelet>(plugin_dir_.path());
    const auto conf = node_dir_.path() / "plugin.toml";
    std::ofstream(conf) << fmt::format(
        "[node]\ndriver-root = \"{0}\"\ndev-root = \"{0}\"\nproc-root = \"{0}/proc\"\n"
        "sys-root = \"{0}/sys\"\nstate-dir = \"{0}/run-gpubind\"\n"
        "[device-plugin]\nplugin-dir = \"{1}\"\nid-strategy = \"index\"\n",
        node_dir_.path().string(), plugin_dir_.path().string());
    Child c = spawn({GPUBIND_DEVICE_PLUGIN_PATH, "--config", conf.string()});
    ASSERT_GT(c.pid, 0);
    const auto r = kubelet_->wait(1, 20s);
    if (!r) ::kill(c.pid, SIGKILL);
    ASSERT_TRUE(r) << drain(c.err);
    EXPECT_EQ(r->endpoint(), "gpubind.sock");
    connect();
    {
        Watch w(*stub_);
        const auto list = w.next();
        ASSERT_TRUE(list);
        EXPECT_EQ(list->devices(0).id(), "0");
    }
    ASSERT_TRUE(std::filesystem::exists(socket()));
    ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
    EXPECT_EQ(wait_exit(c.pid), 0);
    EXPECT_FALSE(std::filesystem::exists(socket()));
    drain(c.err);
}

TEST_F(DevicePlugin, ProgramRefusesABadKeyWithOneLine) {
    simulate();
    const auto conf = node_dir_.path() / "bad.toml";
    for (const auto& [bad, why] :
         {std::pair{"id-stratgy = \"uuid\"", "device-plugin.id-stratgy: unknown key"},
          std::pair{"rdma = \"near\"", "device-plugin.rdma: unknown value \"near\""}}) {
        std::ofstream(conf) << "[device-plugin]\n" << bad << "\n";
        Child c = spawn({GPUBIND_DEVICE_PLUGIN_PATH, "--config", conf.string(), "--plugin-dir",
                         plugin_dir_.path().string()});
        ASSERT_GT(c.pid, 0);
        const std::string err = drain(c.err);
        EXPECT_EQ(wait_exit(c.pid), 2) << bad;
        EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
        EXPECT_THAT(err, HasSubstr(why));
    }
}

// MIG "single": every MIG device under the plain resource name, with its
// parent's NUMA node; Allocate names it as the node's CDI spec does.
TEST_F(DevicePlugin, MigSingleOffersEveryMigDeviceUnderThePlainName) {
    simulate("", 2, {{0, 1, 0}, {0, 2, 0}, {1, 1, 0}});
    settings_.mig_strategy = config::MigStrategy::Single;
    start();
    EXPECT_EQ(kubelet_->wait(1)->resource_name(), "nvidia.com/gpu");
    Watch w(*stub_);
    const auto list = w.next();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->devices_size(), 3);
    for (int i = 0; i < 3; ++i) {
        const auto& m = manifest_.migs[static_cast<std::size_t>(i)];
        EXPECT_EQ(list->devices(i).id(), m.uuid);
        ASSERT_EQ(list->devices(i).topology().nodes_size(), 1);
        EXPECT_EQ(list->devices(i).topology().nodes(0).id(), manifest_.gpus[m.gpu].numa_node);
    }
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({{manifest_.migs[2].uuid}}, out).ok());
    ASSERT_EQ(out.container_responses(0).cdi_devices_size(), 1);
    const std::string name = out.container_responses(0).cdi_devices(0).name();
    EXPECT_EQ(name, "nvidia.com/gpu=" + manifest_.migs[2].uuid);
    const auto offered = cdi::device_names(cdi::gpu_spec(node::discover(config_), config_));
    EXPECT_NE(std::find(offered.begin(), offered.end(), name), offered.end()) << name;
    // A whole GPU is no device of this resource.
    EXPECT_EQ(allocate({{manifest_.gpus[0].uuid}}, out).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
}

// "single" on a node where one GPU has MIG devices and another none: refused
// at start, naming the GPU.
TEST_F(DevicePlugin, MigSingleRefusesANodeThatIsNotUniform) {
    simulate("", 2, {{0, 1, 0}});
    settings_.mig_strategy = config::MigStrategy::Single;
    try {
        plugin::Server server(config_, settings_, node::discover(config_));
        ADD_FAILURE() << "a node with MIG on one GPU of two was served";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("GPU 1 (" + manifest_.gpus[1].uuid + ") has no MIG"));
        EXPECT_THAT(e.what(), HasSubstr("\"single\""));
    }
    // The program: one line, exit status 3 (bad input).
    const auto conf = node_dir_.path() / "single.toml";
    std::ofstream(conf) << fmt::format(
        "[node]\ndriver-root = \"{0}\"\ndev-root = \"{0}\"\nproc-root = \"{0}/proc\"\n"
        "sys-root = \"{0}/sys\"\nstate-dir = \"{0}/run-gpubind\"\n"
        "[device-plugin]\nplugin-dir = \"{1}\"\nmig-strategy = \"single\"\n",
        node_dir_.path().string(), plugin_dir_.path().string());
    Child c = spawn({GPUBIND_DEVICE_PLUGIN_PATH, "--config", conf.string()});
    ASSERT_GT(c.pid, 0);
    const std::string err = drain(c.err);
    EXPECT_EQ(wait_exit(c.pid), 3) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_THAT(err, HasSubstr("GPU 1 (" + manifest_.gpus[1].uuid + ") has no MIG"));
    // "none" serves the same node: two whole GPUs.
    settings_.mig_strategy = config::MigStrategy::None;
    start();
    Watch w(*stub_);
    const auto list = w.next();
    ASSERT_TRUE(list);
    EXPECT_EQ(list->devices_size(), 2);
}

// "mixed": the GPUs without MIG under the plain name, each MIG profile a
// resource of its own, registered on its own socket.
TEST_F(DevicePlugin, MigMixedRegistersAResourcePerProfile) {
    simulate("", 3, {{0, 1, 0}, {0, 2, 0}, {2, 3, 0}});
    settings_.mig_strategy = config::MigStrategy::Mixed;
    settings_.id_strategy = config::IdStrategy::Index;
    start();
    ASSERT_TRUE(kubelet_->wait(2));
    std::map<std::string, std::string> registered;  // resource -> endpoint
    for (std::size_t n : {1u, 2u}) {
        const auto r = kubelet_->wait(n);
        registered[r->resource_name()] = r->endpoint();
    }
    // An H100 80GB's smallest MIG profile is 1g.10gb.
    EXPECT_EQ(registered, (std::map<std::string, std::string>{
                              {"nvidia.com/gpu", "gpubind.sock"},
                              {"nvidia.com/mig-1g.10gb", "gpubind-mig-1g.10gb.sock"}}));
    std::vector<std::string> ids;
    {
        Watch w(*stub_);
        const auto list = w.next();
        ASSERT_TRUE(list);
        for (const auto& d : list->devices()) ids.push_back(d.id());
        EXPECT_THAT(ids, ElementsAre("1"));
    }
    settings_.socket_name = "gpubind-mig-1g.10gb.sock";
    connect();
    Watch w(*stub_);
    const auto list = w.next();
    ASSERT_TRUE(list);
    ids.clear();
    for (const auto& d : list->devices()) ids.push_back(d.id());
    EXPECT_THAT(ids, ElementsAre("0:0", "0:1", "2:0"));
    api::AllocateResponse out;
    ASSERT_TRUE(allocate({{"2:0"}}, out).ok());
    ASSERT_EQ(out.container_responses(0).cdi_devices_size(), 1);
    EXPECT_EQ(out.container_responses(0).cdi_devices(0).name(), "nvidia.com/gpu=2:0");
    const auto offered = cdi::device_names(cdi::gpu_spec(node::discover(config_), config_));
    EXPECT_NE(std::find(offered.begin(), offered.end(), "nvidia.com/gpu=2:0"), offered.end());
    const auto st = allocate({{"1"}}, out);
    EXPECT_THAT(st.error_message(), HasSubstr("unknown device 1"));
}

// Appends an Xid event for a GPU (by index) as the simulated NVML reads them.
// With `instance`, of that MIG instance (GPU instance, compute instance).
void inject_xid(const std::filesystem::path& node, unsigned gpu, unsigned xid,
                std::optional<std::pair<unsigned, unsigned>> instance = std::nullopt) {
    std::filesystem::create_directories(node / "gpubind-fake-nvml");
    std::ofstream out(node / "gpubind-fake-nvml/xid", std::ios::app);
    out << gpu << ' ' << xid;
    if (instance) out << ' ' << instance->first << ' ' << instance->second;
    out << '\n';
}

// A critical Xid turns exactly its GPU Unhealthy in the next list; an ignored
// one changes nothing; the GPU is Healthy again once its device node is made
// anew.
TEST_F(DevicePlugin, ACriticalXidMakesExactlyItsGpuUnhealthyUntilItsNodeIsBack) {
    simulate("", 4);
    start();
    Watch w(*stub_);
    auto list = w.next();
    ASSERT_TRUE(list);
    for (const auto& d : list->devices()) ASSERT_EQ(d.health(), "Healthy");
    inject_xid(node_dir_.path(), 1, 13);  // an application's error: ignored
    std::this_thread::sleep_for(500ms);
    inject_xid(node_dir_.path(), 2, 79);  // the GPU fell off the bus
    list = w.next();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->devices_size(), 4);
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(list->devices(i).health(), i == 2 ? "Unhealthy" : "Healthy") << i;
    api::AllocateResponse out;
    EXPECT_THAT(allocate({{id_of(2)}}, out).error_message(),
                HasSubstr("unhealthy device " + id_of(2)));
    const auto node = node_dir_.path() / "dev/nvidia2";
    ASSERT_EQ(::unlink(node.c_str()), 0);
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, makedev(195, 2)), 0);
    bool healthy = false;
    while (!healthy && (list = w.next())) {
        healthy = true;
        for (const auto& d : list->devices()) healthy = healthy && d.health() == "Healthy";
    }
    EXPECT_TRUE(healthy);
}

// A new driver state is followed: the node simulated again with another
// driver and a GPU more, then one less, sends each new list on the open
// stream.
TEST_F(DevicePlugin, ANewDriverStateSendsTheNewList) {
    simulate("", 2);
    // As gpubind-device-plugin does: the node as its description has it now.
    refresh_ = [this]() -> std::optional<node::Node> { return node::load_node(config_).node; };
    start();
    Watch w(*stub_);
    auto list = w.next();
    ASSERT_TRUE(list);
    const auto ids = [](const api::ListAndWatchResponse& l) {
        std::vector<std::string> out;
        for (const auto& d : l.devices()) out.push_back(d.id());
        return out;
    };
    EXPECT_EQ(ids(*list),
              (std::vector<std::string>{manifest_.gpus[0].uuid, manifest_.gpus[1].uuid}));
    sim::Spec upgraded;
    upgraded.driver_version = "560.35.03";
    upgraded.gpus = 3;
    manifest_ = sim::simulate(node_dir_.path(), upgraded);
    list = w.next();
    ASSERT_TRUE(list);
    EXPECT_EQ(ids(*list), (std::vector<std::string>{manifest_.gpus[0].uuid, manifest_.gpus[1].uuid,
                                                    manifest_.gpus[2].uuid}));
    // And back to two GPUs, as a GPU excluded again.
    upgraded.gpus = 2;
    manifest_ = sim::simulate(node_dir_.path(), upgraded);
    list = w.next();
    ASSERT_TRUE(list);
    EXPECT_EQ(ids(*list),
              (std::vector<std::string>{manifest_.gpus[0].uuid, manifest_.gpus[1].uuid}));
}

// An Xid NVML attributes to one MIG instance turns exactly that MIG device
// Unhealthy; one it cannot attribute (no instance ids) turns every MIG
// device of its GPU Unhealthy.
TEST_F(DevicePlugin, AnXidOfOneMigInstanceMakesOnlyItsMigDeviceUnhealthy) {
    simulate("", 2, {{0, 1, 0}, {0, 2, 0}, {1, 1, 0}});
    settings_.mig_strategy = config::MigStrategy::Single;
    start();
    Watch w(*stub_);
    auto list = w.next();
    ASSERT_TRUE(list);
    ASSERT_EQ(list->devices_size(), 3);
    for (const auto& d : list->devices()) ASSERT_EQ(d.health(), "Healthy");
    const auto health = [&](const api::ListAndWatchResponse& l) {
        std::map<std::string, std::string> out;
        for (const auto& d : l.devices()) out[d.id()] = d.health();
        return out;
    };
    const auto& migs = manifest_.migs;
    ASSERT_EQ(migs[1].gpu, 0u);
    // GPU 0's instance (2, 0): its MIG device alone.
    inject_xid(node_dir_.path(), 0, 79, {{migs[1].gi, migs[1].ci}});
    list = w.next();
    ASSERT_TRUE(list);
    EXPECT_EQ(health(*list), (std::map<std::string, std::string>{{migs[0].uuid, "Healthy"},
                                                                 {migs[1].uuid, "Unhealthy"},
                                                                 {migs[2].uuid, "Healthy"}}));
    api::AllocateResponse out;
    EXPECT_THAT(allocate({{migs[1].uuid}}, out).error_message(),
                HasSubstr("unhealthy device " + migs[1].uuid));
    EXPECT_TRUE(allocate({{migs[0].uuid}}, out).ok());
    // GPU 1, not attributed to an instance: every MIG device of GPU 1.
    inject_xid(node_dir_.path(), 1, 48);
    list = w.next();
    ASSERT_TRUE(list);
    EXPECT_EQ(health(*list), (std::map<std::string, std::string>{{migs[0].uuid, "Healthy"},
                                                                 {migs[1].uuid, "Unhealthy"},
                                                                 {migs[2].uuid, "Unhealthy"}}));
}

// What each device is told, from the marks alone: a whole GPU is unhealthy
// by any mark of its GPU, a MIG device by its own instance's or the GPU's.
TEST(XidMarks, AMarkCoversItsInstanceOrTheWholeGpu) {
    test::TempDir dir("gpubind-dp-xid");
    sim::Spec spec;
    spec.gpus = 2;
    spec.mig = {{0, 1, 0}, {0, 2, 0}};
    sim::simulate(dir.path(), spec);
    config::Config config = config::default_config();
    config.roots = {dir.path(), dir.path(), dir.path() / "proc", dir.path() / "sys"};
    const node::Node node = node::discover(config);
    ASSERT_EQ(node.gpus[0].mig.size(), 2u);
    std::vector<plugin::Device> devices(4);
    devices[0].position = 0;  // GPU 0 whole
    devices[1].position = 0;  // its MIG devices
    devices[1].mig = 0;
    devices[2].position = 0;
    devices[2].mig = 1;
    devices[3].position = 1;  // GPU 1 whole
    config::DevicePluginConfig settings;
    plugin::XidMarks marks;
    const auto healthy = [&] {
        plugin::update_health(devices, node, marks);
        std::vector<bool> out;
        for (const auto& d : devices) out.push_back(d.healthy);
        return out;
    };
    ASSERT_EQ(healthy(), (std::vector<bool>{true, true, true, true}));
    const auto& second = node.gpus[0].mig[1];
    EXPECT_TRUE(plugin::record_xid(marks, node, node.gpus[0].minor, 79, settings,
                                   std::pair(second.gi, second.ci)));
    EXPECT_EQ(healthy(), (std::vector<bool>{false, true, false, true}));
    EXPECT_THAT(devices[2].why, HasSubstr("compute instance " + std::to_string(second.ci)));
    EXPECT_THAT(devices[2].why, HasSubstr("reported the critical Xid 79"));
    // An instance the GPU has no MIG device of: the whole GPU.
    EXPECT_TRUE(
        plugin::record_xid(marks, node, node.gpus[1].minor, 48, settings, std::pair(7u, 7u)));
    EXPECT_EQ(healthy(), (std::vector<bool>{false, true, false, false}));
    // Ignored Xids change nothing.
    EXPECT_FALSE(plugin::record_xid(marks, node, node.gpus[0].minor, 13, settings,
                                    std::pair(node.gpus[0].mig[0].gi, node.gpus[0].mig[0].ci)));
    EXPECT_EQ(healthy(), (std::vector<bool>{false, true, false, false}));
    EXPECT_TRUE(plugin::record_xid(marks, node, node.gpus[0].minor, 79, settings));
    EXPECT_EQ(healthy(), (std::vector<bool>{false, false, false, false}));
}

// The simulated NVML answers a plugin's start: memory info from the model's
// "80GB", and Xid events through its event API.
TEST_F(DevicePlugin, SimulatedNvmlAnswersMemoryInfoAndEvents) {
    simulate("", 2);
    const auto f = std::find_if(
        manifest_.files.begin(), manifest_.files.end(),
        [](const auto& file) { return file.name == "libnvidia-ml.so.1" && !file.compat32; });
    ASSERT_NE(f, manifest_.files.end());
    const auto lib = node_dir_.path() / f->path.substr(1);
    void* h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << ::dlerror();
    using Dev = void*;
    struct Memory {
        unsigned long long total, free, used;
    };
    struct Event {
        Dev device;
        unsigned long long type, data;
        unsigned gi, ci;
    };
    auto init = reinterpret_cast<int (*)()>(::dlsym(h, "nvmlInit_v2"));
    auto by_index =
        reinterpret_cast<int (*)(unsigned, Dev*)>(::dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    auto memory = reinterpret_cast<int (*)(Dev, Memory*)>(::dlsym(h, "nvmlDeviceGetMemoryInfo"));
    auto create = reinterpret_cast<int (*)(void**)>(::dlsym(h, "nvmlEventSetCreate"));
    auto reg = reinterpret_cast<int (*)(Dev, unsigned long long, void*)>(
        ::dlsym(h, "nvmlDeviceRegisterEvents"));
    auto wait =
        reinterpret_cast<int (*)(void*, Event*, unsigned)>(::dlsym(h, "nvmlEventSetWait_v2"));
    auto free_set = reinterpret_cast<int (*)(void*)>(::dlsym(h, "nvmlEventSetFree"));
    ASSERT_TRUE(init && by_index && memory && create && reg && wait && free_set);
    ASSERT_EQ(init(), 0);
    Dev d0 = nullptr, d1 = nullptr;
    ASSERT_EQ(by_index(0, &d0), 0);
    ASSERT_EQ(by_index(1, &d1), 0);
    Memory m{};
    ASSERT_EQ(memory(d1, &m), 0);
    ASSERT_THAT(manifest_.gpus[1].model, HasSubstr(" 80GB "));
    EXPECT_EQ(m.total, 80ull << 30);
    EXPECT_EQ(m.free + m.used, m.total);
    void* set = nullptr;
    ASSERT_EQ(create(&set), 0);
    ASSERT_EQ(reg(d1, 0x8, set), 0);  // nvmlEventTypeXidCriticalError
    Event e{};
    EXPECT_EQ(wait(set, &e, 50), 10);     // NVML_ERROR_TIMEOUT
    inject_xid(node_dir_.path(), 0, 48);  // GPU 0 is not registered
    inject_xid(node_dir_.path(), 1, 48);
    ASSERT_EQ(wait(set, &e, 1000), 0);
    EXPECT_EQ(e.device, d1);
    EXPECT_EQ(e.type, 0x8u);
    EXPECT_EQ(e.data, 48u);
    EXPECT_EQ(e.gi, 0xFFFFFFFFu);  // not attributed to a MIG instance
    EXPECT_EQ(e.ci, 0xFFFFFFFFu);
    inject_xid(node_dir_.path(), 1, 94, {{3, 1}});
    ASSERT_EQ(wait(set, &e, 1000), 0);
    EXPECT_EQ(e.data, 94u);
    EXPECT_EQ(e.gi, 3u);
    EXPECT_EQ(e.ci, 1u);
    EXPECT_EQ(wait(set, &e, 50), 10);
    EXPECT_EQ(free_set(set), 0);
    ::dlclose(h);
}

// The config reader: the table's values, and config/config.toml's table is the defaults.
TEST(DevicePluginConfig, ReadsTheTableAndTheDefaultsAreConfigToml) {
    const auto c = config::parse_config_with_plugin(
        "[device-plugin]\nresource-name = \"example.com/gpu\"\n"
        "device-list-strategy = [\"envvar\", \"volume-mounts\"]\nid-strategy = \"index\"\n"
        "plugin-dir = \"/x\"\nsocket = \"a.sock\"\nhealth-interval-ms = 250\n"
        "mig-strategy = \"mixed\"\nignored-xids = [79, 48]\n",
        "t.toml");
    EXPECT_EQ(c.plugin.resource_name, "example.com/gpu");
    EXPECT_EQ(c.plugin.device_list, (std::vector{config::DeviceListStrategy::Envvar,
                                                 config::DeviceListStrategy::VolumeMounts}));
    EXPECT_EQ(c.plugin.id_strategy, config::IdStrategy::Index);
    EXPECT_EQ(c.plugin.plugin_dir, "/x");
    EXPECT_EQ(c.plugin.socket_name, "a.sock");
    EXPECT_EQ(c.plugin.health_interval_ms, 250u);
    EXPECT_EQ(c.plugin.mig_strategy, config::MigStrategy::Mixed);
    EXPECT_EQ(c.plugin.ignored_xids, (std::vector<unsigned>{79, 48}));
    std::ifstream in(std::string(GPUBIND_SOURCE_DIR) + "/config/config.toml");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(text.empty());
    // Parsed for real (a changed byte skips the built-in fast path).
    const auto d = config::parse_config_with_plugin(text + "\n", "config.toml");
    EXPECT_EQ(d.plugin, config::DevicePluginConfig{});
    for (const char* bad :
         {"id-strategy = \"serial\"", "device-list-strategy = []", "socket = \"a/b\"",
          "health-interval-ms = 5", "mig-strategy = \"split\"", "ignored-xids = [0]",
          "ignored-xids = \"13\""}) {
        try {
            config::parse_config(std::string("[device-plugin]\n") + bad + "\n", "t.toml");
            ADD_FAILURE() << bad << " was accepted";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("device-plugin.")) << bad;
        }
    }
}

}  // namespace
}  // namespace gpubind
