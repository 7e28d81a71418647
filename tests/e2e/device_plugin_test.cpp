// gpubind-device-plugin end to end (issue 47): the program against a
// stand-in kubelet on a simulated NVLink node; GetPreferredAllocation for 2
// devices, then Allocate; the answer handed to the engine path the suite
// already tests: the CDI names of the response's CDI field (cdi-cri) in a
// cdi.k8s.io annotation applied by gpubind-runtime, and NVIDIA_VISIBLE_DEVICES
// (envvar) read by gpubind-hook, each container run by runc. Inside, the
// container must have exactly the two GPUs allocated, and they must be an
// NVLinked pair with the most links the node offers. Expectations come from
// the simulated node's manifest, never from gpubind's output.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/sim/sim.hpp"
#include "stand_in_kubelet.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
namespace api = ::v1beta1;
using namespace std::chrono_literals;

// The GPU indices whose nodes a container's gpu_script() output shows
// ("/dev/nvidia<minor> c 195:<minor>" in its "dev" section), by the manifest.
std::vector<unsigned> gpus_inside(const sim::Manifest& m, const std::string& out) {
    std::vector<unsigned> got;
    const auto s = sections(out);
    const auto dev = s.find("dev");
    if (dev == s.end()) return got;
    for (const auto& g : m.gpus) {
        const std::string minor = std::to_string(g.minor);
        if (contains(dev->second, "/dev/nvidia" + minor + " c 195:" + minor))
            got.push_back(g.index);
    }
    return got;
}

// The most NVLinks between two of `gpus`, by the manifest.
unsigned most_links(const sim::Manifest& m, const std::vector<unsigned>& gpus) {
    unsigned most = 0;
    for (unsigned a : gpus)
        for (unsigned b : gpus)
            if (a != b) most = std::max(most, m.topology.nvlinks[a][b]);
    return most;
}

class DevicePluginE2e : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        sim::Spec spec;
        spec.topology = topology();
        spec.gpus = sim::topology_gpus(spec.topology) ? sim::topology_gpus(spec.topology) : 8;
        spec.hcas = hcas_;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-dp-node");
        ASSERT_GE(m().topology.nvlinks.size(), m().gpus.size());
    }
    void TearDown() override {
        ::unsetenv("GPUBIND_CONFIG");
        if (plugin_) {
            const int status = plugin_->stop();
            EXPECT_EQ(status, 0) << plugin_->output();
        }
    }

    const sim::Manifest& m() const { return node_->manifest(); }
    // The simulated node's NVLink topology (the parameter, but in a subclass).
    virtual std::string topology() const { return GetParam(); }

    // The node's config for the runtime, the hook and the plugin alike, the
    // node's CDI spec written, the plugin started with `strategy` and registered.
    void start_plugin(const std::string& strategy, const std::string& more = "") {
        node_->write_config(
            fmt::format("[runtime]\nruntimes = [\"{}\"]\n[cdi]\nhook = \"{}\"\ndir = \"{}\"\n"
                        "spec-dirs = [\"{}\"]\n[device-plugin]\nplugin-dir = \"{}\"\n"
                        "device-list-strategy = [\"{}\"]\nhealth-interval-ms = 200\n{}",
                        env_or("GPUBIND_RUNC", "runc"), hook(), node_->cdi_dir().string(),
                        node_->cdi_dir().string(), plugin_dir_.path().string(), strategy, more));
        // gpubind-runtime finds its config as engines let it: in its environment.
        ::setenv("GPUBIND_CONFIG", config().c_str(), 1);
        const auto refresh = run_command({cli(), "cdi", "refresh", "--config", config().string()});
        ASSERT_EQ(refresh.exit_code, 0) << refresh.err;
        kubelet_ = std::make_unique<StandInKubelet>(plugin_dir_.path());
        plugin_ = std::make_unique<PluginProcess>(GPUBIND_DEVICE_PLUGIN_PATH, config(),
                                                  dir_.path() / "plugin.log");
        const auto r = kubelet_->wait(20s);
        ASSERT_TRUE(r) << "no registration: " << plugin_->output();
        EXPECT_EQ(r->resource_name(), "nvidia.com/gpu");
        EXPECT_TRUE(r->options().get_preferred_allocation_available());
        stub_ = api::DevicePlugin::NewStub(
            grpc::CreateChannel("unix:" + (plugin_dir_.path() / r->endpoint()).string(),
                                grpc::InsecureChannelCredentials()));
    }

    // What the kubelet does for a pod asking for 2 devices: the list, the
    // preferred 2 of the available ones, then Allocate of those. The
    // available devices are given with an unlinked pair first (when the node
    // has one), so that a choice in the kubelet's order fails the checks.
    // Returns the allocated GPUs' indices (from the manifest, by UUID).
    std::vector<unsigned> allocate_two(api::ContainerAllocateResponse& out) {
        std::vector<std::string> ids;
        {
            grpc::ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + 10s);
            auto reader = stub_->ListAndWatch(&ctx, api::Empty{});
            api::ListAndWatchResponse list;
            if (!reader->Read(&list)) {
                ADD_FAILURE() << "no device list";
                return {};
            }
            for (const auto& d : list.devices()) {
                EXPECT_EQ(d.health(), "Healthy") << d.id();
                ids.push_back(d.id());
            }
            ctx.TryCancel();
        }
        std::map<std::string, unsigned> index_of;
        for (const auto& g : m().gpus) index_of[g.uuid] = g.index;
        std::vector<unsigned> order;
        for (const auto& id : ids) order.push_back(index_of.at(id));
        EXPECT_EQ(order.size(), m().gpus.size());
        const auto unlinked = first_unlinked_pair(order);
        EXPECT_TRUE(unlinked || topology() == "hgx8") << "every pair is NVLinked on " << topology();
        if (unlinked) {
            std::vector<unsigned> rest;
            for (unsigned i : order)
                if (i != unlinked->first && i != unlinked->second) rest.push_back(i);
            order = {unlinked->first, unlinked->second};
            order.insert(order.end(), rest.begin(), rest.end());
        }
        api::PreferredAllocationRequest preq;
        auto* c = preq.add_container_requests();
        for (unsigned i : order) c->add_available_deviceids(m().gpus[i].uuid);
        c->set_allocation_size(2);
        api::PreferredAllocationResponse presp;
        {
            grpc::ClientContext ctx;
            const auto st = stub_->GetPreferredAllocation(&ctx, preq, &presp);
            if (!st.ok() || presp.container_responses_size() != 1) {
                ADD_FAILURE() << "GetPreferredAllocation: " << st.error_message();
                return {};
            }
        }
        api::AllocateRequest areq;
        std::vector<unsigned> chosen;
        auto* a = areq.add_container_requests();
        for (const auto& id : presp.container_responses(0).deviceids()) {
            a->add_devices_ids(id);
            chosen.push_back(index_of.at(id));
        }
        api::AllocateResponse aresp;
        grpc::ClientContext ctx;
        const auto st = stub_->Allocate(&ctx, areq, &aresp);
        if (!st.ok() || aresp.container_responses_size() != 1) {
            ADD_FAILURE() << "Allocate: " << st.error_message();
            return {};
        }
        out = aresp.container_responses(0);
        std::sort(chosen.begin(), chosen.end());
        return chosen;
    }

    // The first two of `gpus` without an NVLink between them, by the manifest.
    std::optional<std::pair<unsigned, unsigned>> first_unlinked_pair(
        const std::vector<unsigned>& gpus) const {
        for (std::size_t a = 0; a < gpus.size(); ++a)
            for (std::size_t b = a + 1; b < gpus.size(); ++b)
                if (m().topology.nvlinks[gpus[a]][gpus[b]] == 0) return std::pair(gpus[a], gpus[b]);
        return std::nullopt;
    }

    // The container's own view: exactly `chosen`, each check of gpu_script(),
    // and an NVLinked pair with the most links the node has.
    void expect_nvlinked_pair(const RunResult& r, const std::vector<unsigned>& chosen) {
        ASSERT_EQ(chosen.size(), 2u);
        EXPECT_EQ(expect_gpus(m(), r.out, chosen, kChecks), "") << r.out;
        const auto inside = gpus_inside(m(), r.out);
        ASSERT_EQ(inside, chosen) << r.out;
        std::vector<unsigned> all;
        for (const auto& g : m().gpus) all.push_back(g.index);
        const unsigned links = m().topology.nvlinks[inside[0]][inside[1]];
        EXPECT_GT(links, 0u) << "GPUs " << inside[0] << " and " << inside[1] << " share no NVLink";
        EXPECT_EQ(links, most_links(m(), all)) << fmt::format("GPUs {}", fmt::join(inside, ","));
    }

    // The same bundle through plain runc, gpubind out of the way: the device
    // check must fail (the checks above can).
    void expect_no_gpus_through_plain_runc(Bundle& b, const std::vector<unsigned>& chosen) {
        b.spec().erase("hooks");
        const auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_TRUE(gpu_problems(m(), r.out, chosen, kChecks).count("devices")) << r.out;
        EXPECT_TRUE(gpus_inside(m(), r.out).empty()) << r.out;
    }

    Bundle bundle() {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)));
        for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
        b.command(gpu_script(m(), kChecks));
        return b;
    }
    const fs::path& config() const { return node_->config(); }

    static inline const GpuChecks kChecks{};
    unsigned hcas_ = 0;  // the simulated node's HCAs
    std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-dp"};
    TempDir plugin_dir_{"gpubind-e2e-dp-kubelet"};
    std::unique_ptr<StandInKubelet> kubelet_;
    std::unique_ptr<PluginProcess> plugin_;
    std::unique_ptr<api::DevicePlugin::Stub> stub_;
    int count_ = 0;
};

// cdi-cri: the response's CDI names, as containerd 1.6 gets them through a
// cdi.k8s.io annotation, applied by gpubind-runtime from the node's CDI spec.
TEST_P(DevicePluginE2e, CdiNamesThroughGpubindRuntimeGiveExactlyAnNvlinkedPair) {
    start_plugin("cdi-cri");
    api::ContainerAllocateResponse resp;
    const auto chosen = allocate_two(resp);
    ASSERT_EQ(chosen.size(), 2u);
    std::vector<std::string> names;
    for (const auto& d : resp.cdi_devices()) names.push_back(d.name());
    ASSERT_EQ(names.size(), 2u);
    EXPECT_TRUE(resp.envs().empty());
    Bundle b = bundle();
    b.spec()["annotations"]["cdi.k8s.io/gpubind-device-plugin"] =
        fmt::format("{}", fmt::join(names, ","));
    const auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_nvlinked_pair(r, chosen);
    expect_no_gpus_through_plain_runc(b, chosen);
}

// envvar: NVIDIA_VISIBLE_DEVICES from the response, read by gpubind-hook.
TEST_P(DevicePluginE2e, VisibleDevicesThroughGpubindHookGiveExactlyAnNvlinkedPair) {
    start_plugin("envvar");
    api::ContainerAllocateResponse resp;
    const auto chosen = allocate_two(resp);
    ASSERT_EQ(chosen.size(), 2u);
    EXPECT_EQ(resp.cdi_devices_size(), 0);
    ASSERT_EQ(resp.envs().count("NVIDIA_VISIBLE_DEVICES"), 1u);
    Bundle b = bundle();
    for (const auto& [key, value] : resp.envs()) b.env(key + "=" + value);
    b.hook(hook(), config());
    const auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_nvlinked_pair(r, chosen);
    expect_no_gpus_through_plain_runc(b, chosen);
}

// rdma = "affine" on an hgx8 node with three HCAs, two under the first PCIe
// switch and one under the second, for each strategy (the parameter): the
// answer given to the engine path (the CDI names through gpubind-runtime, the
// variable or the /dev/null mounts through gpubind-hook) gives runc's
// container exactly the two GPUs and the device nodes of the HCAs nearest
// them (by the manifest: under a GPU's switch, else on its NUMA node); every
// rdma node is bound from the host at /hostdev, so that only the device
// cgroup decides whether it opens.
class DevicePluginRdmaE2e : public DevicePluginE2e {
  protected:
    DevicePluginRdmaE2e() { hcas_ = 3; }
    std::string topology() const override { return "hgx8"; }

    std::set<std::string> hcas_near(const std::vector<unsigned>& gpus) const {
        std::set<std::string> out;
        for (unsigned g : gpus) {
            std::set<std::string> by_switch, by_numa;
            for (const auto& h : m().hcas) {
                if (h.switch_port == m().gpus[g].switch_port) by_switch.insert(h.name);
                if (h.numa_node == m().gpus[g].numa_node) by_numa.insert(h.name);
            }
            for (const auto& n : by_switch.empty() ? by_numa : by_switch) out.insert(n);
        }
        return out;
    }
};

TEST_P(DevicePluginRdmaE2e, TheAnswerGivesExactlyTheGpusAndTheirNearestHcas) {
    const std::string strategy = GetParam();
    ASSERT_EQ(m().hcas.size(), 3u);
    start_plugin(strategy, "rdma = \"affine\"\n[policy]\naccept-volume-mounts = true\n");
    api::ContainerAllocateResponse resp;
    const auto chosen = allocate_two(resp);
    ASSERT_EQ(chosen.size(), 2u);
    const auto want = hcas_near(chosen);
    ASSERT_FALSE(want.empty());
    ASSERT_LT(want.size(), m().hcas.size()) << "every HCA is near: the test shows nothing";
    Bundle b = bundle();
    if (strategy == "cdi-cri") {
        std::vector<std::string> names;
        for (const auto& d : resp.cdi_devices()) names.push_back(d.name());
        EXPECT_EQ(names.size(), 2 + want.size()) << fmt::format("{}", fmt::join(names, ","));
        b.spec()["annotations"]["cdi.k8s.io/gpubind-device-plugin"] =
            fmt::format("{}", fmt::join(names, ","));
    } else {
        for (const auto& [key, value] : resp.envs()) b.env(key + "=" + value);
        const std::string prefix = "/var/run/nvidia-container-devices/";
        for (const auto& mount : resp.mounts()) {
            ASSERT_EQ(mount.container_path().rfind(prefix, 0), 0u) << mount.container_path();
            b.volume_device(mount.container_path().substr(prefix.size()));
        }
        b.hook(hook(), config());
    }
    // Every rdma node of the node: its path in the container, and a copy at /hostdev.
    std::vector<sim::ManifestFamilyNode> rdma;
    for (const auto& n : m().family_nodes)
        if (n.family == "rdma") rdma.push_back(n);
    ASSERT_FALSE(rdma.empty());
    std::string stat = "probe stat", open = "probe open";
    for (std::size_t i = 0; i < rdma.size(); ++i) {
        b.bind(node_->root() / fs::path(rdma[i].path).relative_path(),
               "/hostdev/r" + std::to_string(i));
        stat += " " + rdma[i].path;
        open += " /hostdev/r" + std::to_string(i);
    }
    b.command(gpu_script(m(), kChecks) + "; echo '== rdma-stat'; " + stat +
              "; echo '== rdma-open'; " + open);
    const auto r = strategy == "cdi-cri" ? b.run_with(runtime()) : b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_nvlinked_pair(r, chosen);
    auto s = sections(r.out);
    for (std::size_t i = 0; i < rdma.size(); ++i) {
        const auto& n = rdma[i];
        // An HCA's uverbs node with it, rdma_cm with any; never umad or issm.
        const bool given = n.path == "/dev/infiniband/rdma_cm" ||
                           (want.count(n.device) && n.path.find("/uverbs") != std::string::npos);
        EXPECT_TRUE(
            contains(s["rdma-stat"], given ? fmt::format("{} c {}:{}", n.path, n.major, n.minor)
                                           : n.path + " ENOENT"))
            << n.path << (given ? " missing\n" : " given\n") << r.out;
        EXPECT_EQ(contains(s["rdma-open"], "/hostdev/r" + std::to_string(i) + " EPERM"), !given)
            << n.path << (given ? " refused" : " allowed") << " by the device cgroup\n"
            << r.out;
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, DevicePluginRdmaE2e,
                         ::testing::Values("cdi-cri", "envvar", "volume-mounts"),
                         [](const auto& p) {
                             std::string s = p.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// The plugin's own container as deploy/kubernetes/gpubind.yaml shapes it (its
// variable and its /dev/null mount, uid 0 with no capability, no new
// privileges, a read-only root), run by gpubind-runtime under the installer's
// config (deploy/kubernetes/config.toml): it must get every GPU and NVML,
// which it needs for NVLinks and Xid events, without privilege.
TEST(DevicePluginDaemonSet, ItsContainerGetsEveryGpuWithoutPrivilege) {
    const fs::path source = GPUBIND_SOURCE_DIR;
    std::string text;
    {
        std::ifstream in(source / "deploy/kubernetes/gpubind.yaml");
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    // The document of the plugin's DaemonSet, wherever it is in the file.
    nlohmann::json ds;
    for (std::size_t at = 0; at != std::string::npos;) {
        const auto next = text.find("\n---\n", at);
        const std::string doc =
            text.substr(at, next == std::string::npos ? std::string::npos : next - at);
        const nlohmann::json d = cdi::yaml::parse(doc, "gpubind.yaml");
        if (d.is_object() && d.value("kind", "") == "DaemonSet" &&
            d["metadata"].value("name", "") == "gpubind-device-plugin")
            ds = d;
        at = next == std::string::npos ? next : next + 5;
    }
    ASSERT_TRUE(ds.is_object()) << "no DaemonSet gpubind-device-plugin in gpubind.yaml";
    const auto& c = ds["spec"]["template"]["spec"]["containers"][0];
    sim::Spec spec;
    spec.topology = "hgx8";
    spec.gpus = 8;
    SimNode node(spec, "gpubind-e2e-dp-ds");
    std::string installer;
    {
        std::ifstream in(source / "deploy/kubernetes/config.toml");
        installer.assign(std::istreambuf_iterator<char>(in), {});
    }
    node.write_config("[runtime]\nruntimes = [\"" + env_or("GPUBIND_RUNC", "runc") + "\"]\n" +
                      installer);
    ::setenv("GPUBIND_CONFIG", node.config().c_str(), 1);
    TempDir dir("gpubind-e2e-dp-ds");
    Bundle b(dir.path() / "b");
    for (const auto& [host, dest] : node.host_gpus()) b.bind(host, dest);
    for (const auto& e : c["env"])
        b.env(e["name"].get<std::string>() + "=" + e["value"].get<std::string>());
    unsigned device_mounts = 0;
    for (const auto& m : c["volumeMounts"]) {
        const std::string path = m["mountPath"];
        const std::string prefix = "/var/run/nvidia-container-devices/";
        if (path.rfind(prefix, 0) != 0) continue;
        b.volume_device(path.substr(prefix.size()));
        ++device_mounts;
    }
    EXPECT_EQ(device_mounts, 1u);
    const auto& sc = c["securityContext"];
    ASSERT_EQ(sc["runAsUser"], 0);
    b.spec()["process"]["user"] = {{"uid", 0}, {"gid", sc["runAsGroup"].get<int>()}};
    b.spec()["process"]["capabilities"] = {{"bounding", nlohmann::json::array()},
                                           {"effective", nlohmann::json::array()},
                                           {"permitted", nlohmann::json::array()}};
    b.spec()["process"]["noNewPrivileges"] = !sc["allowPrivilegeEscalation"].get<bool>();
    b.spec()["root"]["readonly"] = sc["readOnlyRootFilesystem"].get<bool>();
    const GpuChecks checks{};
    b.command(gpu_script(node.manifest(), checks) +
              "; echo '== caps'; grep CapEff /proc/self/status");
    const auto r = b.run_with(runtime());
    ::unsetenv("GPUBIND_CONFIG");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<unsigned> all;
    for (const auto& g : node.manifest().gpus) all.push_back(g.index);
    EXPECT_EQ(expect_gpus(node.manifest(), r.out, all, checks), "") << r.out;
    EXPECT_TRUE(contains(sections(r.out)["caps"], "CapEff:\t0000000000000000")) << r.out;
}

// hgx8: every pair NVLinked through NVSwitches; dgx1 and pcie-pairs: pairs
// without an NVLink, given first.
INSTANTIATE_TEST_SUITE_P(Topologies, DevicePluginE2e,
                         ::testing::Values("hgx8", "dgx1", "pcie-pairs"), [](const auto& p) {
                             std::string s = p.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

}  // namespace
}  // namespace gpubind::test
