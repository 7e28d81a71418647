// The node's CDI specs against the simulated node's manifest (never against
// gpubind's own output): every device name and its nodes, the common edits,
// the driver files, the version; applying each name gives exactly its nodes;
// refresh rewrites only on change and follows a driver upgrade.
#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "files.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/sim/sim.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CdiNodeTest : public test::SimNodeTest {
  protected:
    CdiNodeTest() : test::SimNodeTest("gpubind-cdi-node") {
        node_options().gpus(3).mig({{1, 1, 0}, {1, 2, 0}}).imex_channels(2);
        config().cdi.dir = dir() / "cdi";
        config().cdi.hook = "/opt/gpubind/bin/gpubind-hook";
        config().source = "/etc/gpubind/test.toml";
    }

    const sim::ManifestNode& manifest_node(const std::string& path) const {
        for (const auto& n : manifest().nodes)
            if (n.path == path) return n;
        throw std::runtime_error("no manifest node " + path);
    }
    // The (path, hostPath, major, minor) of a spec's deviceNodes list.
    static std::set<std::string> nodes_of(const json& edits) {
        std::set<std::string> out;
        for (const auto& n : edits.value("deviceNodes", json::array()))
            out.insert(n["path"].get<std::string>() + " " + n["hostPath"].get<std::string>() + " " +
                       std::to_string(n["major"].get<unsigned>()) + ":" +
                       std::to_string(n["minor"].get<unsigned>()));
        return out;
    }
    std::string expected(const std::string& path) const {
        const auto& n = manifest_node(path);
        return n.path + " " + (root() / n.path.substr(1)).string() + " " + std::to_string(n.major) +
               ":" + std::to_string(n.minor);
    }
};

TEST_F(CdiNodeTest, EveryDeviceNameHasExactlyItsNodes) {
    const node::Node node = node::discover(config());
    const json spec = cdi::gpu_spec(node, config());
    EXPECT_EQ(spec["kind"], "nvidia.com/gpu");
    std::map<std::string, std::set<std::string>> devices;
    for (const auto& d : spec["devices"]) devices[d["name"]] = nodes_of(d["containerEdits"]);

    std::map<std::string, std::set<std::string>> want;
    std::set<std::string> all;
    for (const auto& g : manifest().gpus) {
        const std::string dev = "/dev/nvidia" + std::to_string(g.minor);
        want[std::to_string(g.index)] = {expected(dev)};
        want[g.uuid] = {expected(dev)};
        all.insert(expected(dev));
    }
    std::map<unsigned, unsigned> per_gpu;
    for (const auto& m : manifest().migs) {
        const std::set<std::string> nodes = {
            expected("/dev/nvidia" + std::to_string(m.gpu)),
            expected("/dev/nvidia-caps/nvidia-cap" + std::to_string(m.gi_cap_minor)),
            expected("/dev/nvidia-caps/nvidia-cap" + std::to_string(m.ci_cap_minor))};
        want[std::to_string(m.gpu) + ":" + std::to_string(per_gpu[m.gpu]++)] = nodes;
        want[m.uuid] = nodes;
    }
    want["all"] = all;
    EXPECT_EQ(devices, want);
    EXPECT_EQ(devices.size(), 3u * 2 + 2 * 2 + 1);
}

TEST_F(CdiNodeTest, CommonEditsHoldTheControlNodesDriverFilesAndTheHook) {
    const node::Node node = node::discover(config());
    const json spec = cdi::gpu_spec(node, config());
    const json& edits = spec["containerEdits"];
    EXPECT_EQ(edits["env"], json({"NVIDIA_VISIBLE_DEVICES=void"}));
    EXPECT_EQ(nodes_of(edits),
              (std::set<std::string>{expected("/dev/nvidiactl"), expected("/dev/nvidia-uvm"),
                                     expected("/dev/nvidia-uvm-tools")}));
    // The utility and compute files of the manifest: libraries (64-bit) at their
    // own file's path, binaries, sockets and firmware at theirs, read-only.
    std::map<std::string, std::string> want;
    for (const auto& f : manifest().files) {
        if ((f.capability != "utility" && f.capability != "compute") || f.compat32) continue;
        if (f.kind == "ipc" && f.name == "nvidia-mps") continue;  // not in the default catalog
        const std::string& file = f.kind == "library" ? f.real_path : f.path;
        want[file] = (root() / file.substr(1)).string();
    }
    std::map<std::string, std::string> got;
    for (const auto& m : edits["mounts"]) {
        got[m["containerPath"]] = m["hostPath"];
        const auto options = m["options"].get<std::vector<std::string>>();
        EXPECT_TRUE(std::count(options.begin(), options.end(), "rbind")) << m;
        EXPECT_TRUE(std::count(options.begin(), options.end(), "nosuid")) << m;
        EXPECT_TRUE(std::count(options.begin(), options.end(), "nodev")) << m;
        EXPECT_EQ(std::count(options.begin(), options.end(), "ro"), 1) << m;
    }
    EXPECT_EQ(got, want);
    // The "cdi" stage, and poststop, which undoes what the start set (a GPU share).
    ASSERT_EQ(edits["hooks"].size(), 2u);
    EXPECT_EQ(edits["hooks"][0], json({{"hookName", "createRuntime"},
                                       {"path", "/opt/gpubind/bin/gpubind-hook"},
                                       {"args", {"gpubind-hook", "cdi"}},
                                       {"env", {"GPUBIND_CONFIG=/etc/gpubind/test.toml"}}}));
    EXPECT_EQ(edits["hooks"][1], json({{"hookName", "poststop"},
                                       {"path", "/opt/gpubind/bin/gpubind-hook"},
                                       {"args", {"gpubind-hook", "poststop"}},
                                       {"env", {"GPUBIND_CONFIG=/etc/gpubind/test.toml"}}}));
    // Devices named by index and hostPath need 0.5.0, and nothing more.
    EXPECT_EQ(spec["cdiVersion"], "0.5.0");
    EXPECT_NO_THROW(cdi::validate(spec, "generated"));
    EXPECT_NO_THROW(
        cdi::validate(cdi::yaml::parse(cdi::yaml::dump(spec), "generated.yaml"), "generated.yaml"));
}

TEST_F(CdiNodeTest, ImexChannelsAreAKindOfTheirOwn) {
    const node::Node node = node::discover(config());
    const auto spec = cdi::imex_spec(node, config());
    ASSERT_TRUE(spec);
    EXPECT_EQ((*spec)["kind"], "nvidia.com/imex-channel");
    std::map<std::string, std::set<std::string>> devices;
    for (const auto& d : (*spec)["devices"]) devices[d["name"]] = nodes_of(d["containerEdits"]);
    std::map<std::string, std::set<std::string>> want;
    for (unsigned c = 0; c < manifest().spec.imex_channels; ++c)
        want[std::to_string(c)] = {
            expected("/dev/nvidia-caps-imex-channels/channel" + std::to_string(c))};
    EXPECT_EQ(devices, want);
    EXPECT_NO_THROW(cdi::validate(*spec, "imex"));
}

// Applying a name gives the container exactly that device's nodes and the
// common ones, and the hook finds exactly that device in the result.
TEST_F(CdiNodeTest, EachNameAppliedSelectsExactlyItsDevice) {
    const node::Node node = node::discover(config());
    cdi::Registry reg;
    reg.specs.push_back({"/var/run/cdi/nvidia.com-gpu.json", 1, cdi::gpu_spec(node, config())});
    for (const auto& g : manifest().gpus)
        for (const std::string& name : {std::to_string(g.index), g.uuid}) {
            const json oci = cdi::apply(json::object(), {"nvidia.com/gpu=" + name}, reg);
            const auto found = cdi::selection_in_spec(node, oci);
            EXPECT_EQ(found.names, std::vector<std::string>{"GPU " + std::to_string(g.index)})
                << name;
        }
    const json mig = cdi::apply(json::object(), {"nvidia.com/gpu=" + manifest().migs[1].uuid}, reg);
    EXPECT_EQ(cdi::selection_in_spec(node, mig).names, std::vector<std::string>{"MIG 1:1"});
    const json all = cdi::apply(json::object(), {"nvidia.com/gpu=all"}, reg);
    EXPECT_EQ(cdi::selection_in_spec(node, all).names,
              (std::vector<std::string>{"GPU 0", "GPU 1", "GPU 2"}));
}

// A start keeps this node's specs current and creates none; a spec another
// node wrote (another dev root: a simulated node's config sharing the host's
// CDI directory) is never touched, nor is a file that is not a spec.
TEST_F(CdiNodeTest, StartsRefreshOnlyThisNodesExistingSpecs) {
    test::TempDir other("gpubind-cdi-quiet");
    sim::Spec spec;
    spec.gpus = 2;
    sim::simulate(other.path() / "a", spec);
    spec.gpus = 1;
    sim::simulate(other.path() / "b", spec);
    auto config_for = [&](const std::string& name) {
        config::Config c = config();
        c.roots = {other.path() / name, other.path() / name, other.path() / name / "proc"};
        c.cdi.dir = other.path() / "cdi";
        return c;
    };
    const config::Config a = config_for("a"), b = config_for("b");
    const fs::path file = a.cdi.dir / "nvidia.com-gpu.json";
    // Nothing there: nothing created.
    cdi::refresh_quietly(node::discover(a), a);
    EXPECT_FALSE(fs::exists(file));
    // Node a's spec (an explicit refresh wrote it): node b's start leaves it as it is.
    ASSERT_EQ(cdi::refresh(node::discover(a), a), std::vector<fs::path>{file});
    const std::string written_by_a = test::slurp(file);
    EXPECT_TRUE(cdi::written_for(written_by_a, a));
    EXPECT_FALSE(cdi::written_for(written_by_a, b));
    cdi::refresh_quietly(node::discover(b), b);
    EXPECT_EQ(test::slurp(file), written_by_a);
    // Node a after an upgrade: its start brings its own spec up to date.
    spec.gpus = 2;
    spec.driver_version = "555.42.06";
    sim::simulate(other.path() / "a", spec);
    cdi::refresh_quietly(node::discover(a), a);
    EXPECT_NE(test::slurp(file), written_by_a);
    EXPECT_NE(test::slurp(file).find("555.42.06"), std::string::npos);
    // Not a spec at all: left alone.
    fs::remove(file);
    { std::ofstream(file) << "not json"; }
    cdi::refresh_quietly(node::discover(a), a);
    EXPECT_EQ(test::slurp(file), "not json");
}

// On a host whose dev root is "/" the spec's device nodes have no hostPath
// (it would equal their path): they are this node's all the same.
TEST_F(CdiNodeTest, ASpecForTheHostsOwnDevIsThisNodes) {
    config::Config host = config();
    host.roots = {"/", "/", "/proc"};
    const std::string spec = R"({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl", "type": "c"}]},
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]})";
    EXPECT_TRUE(cdi::written_for(spec, host));
    EXPECT_FALSE(cdi::written_for(spec, config()));  // the simulated node's dev root
}

TEST_F(CdiNodeTest, RefreshWritesOnlyOnChangeAndFollowsAnUpgrade) {
    test::TempDir other("gpubind-cdi-upgrade");
    sim::Spec spec;
    spec.gpus = 2;
    sim::simulate(other.path(), spec);
    config::Config c = config();
    c.roots = {other.path(), other.path(), other.path() / "proc"};
    c.cdi.dir = other.path() / "run-cdi";
    const fs::path file = c.cdi.dir / "nvidia.com-gpu.json";
    EXPECT_EQ(cdi::refresh(node::discover(c), c), std::vector<fs::path>{file});
    struct stat before {};
    ASSERT_EQ(::stat(file.c_str(), &before), 0);
    EXPECT_TRUE(cdi::refresh(node::discover(c), c).empty());
    struct stat after {};
    ASSERT_EQ(::stat(file.c_str(), &after), 0);
    EXPECT_EQ(before.st_ino, after.st_ino);
    EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);

    spec.driver_version = "555.42.06";
    const sim::Manifest upgraded = sim::simulate(other.path(), spec);
    EXPECT_EQ(cdi::refresh(node::discover(c), c), std::vector<fs::path>{file});
    std::ifstream in(file);
    const json written = json::parse(in);
    std::set<std::string> sources;
    for (const auto& m : written["containerEdits"]["mounts"]) sources.insert(m["hostPath"]);
    for (const auto& f : upgraded.files) {
        if (f.kind != "library" || f.capability != "compute" || f.compat32) continue;
        EXPECT_TRUE(sources.count((other.path() / f.real_path.substr(1)).string())) << f.real_path;
    }
    for (const auto& s : sources) EXPECT_EQ(s.find("550.54.15"), std::string::npos) << s;
}

}  // namespace
}  // namespace gpubind
