// End to end (issue 46, item 5): a container declaring the placement it was
// promised (the annotation gpubind.io/placement or GPUBIND_PLACEMENT, both
// "nvlink") is started through runc, by gpubind-hook and by gpubind-runtime,
// on a simulated node whose GPUs are bridged in pairs (0-1, 2-3). GPUs of one
// pair start; GPUs of two pairs are refused with one line naming them and
// their path, nothing left in the rootfs; with [policy] on-refused = "warn"
// they start with a warning. A start declaring nothing makes the system calls
// it made before. Expectations come from the simulated node's manifest.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "binaries.hpp"
#include "container.hpp"
#include "files.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class PlacementE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        spec.topology = "pcie-pairs";
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-placement");
    }
    static void TearDownTestSuite() { node_.reset(); }
    void TearDown() override {
        node_->write_config();
        ::unsetenv("GPUBIND_CONFIG");
    }
    static const sim::Manifest& m() { return node_->manifest(); }

    // A container asking for `gpus`, with the hook registered unless
    // `with_hook` is false (for the shim, which registers its own), and every
    // GPU's node at /hostdev unless `hostdev` is false (runc makes those
    // mount points before any hook: a refused start's rootfs would change).
    Bundle bundle(const std::string& gpus, bool with_hook = true, bool hostdev = true) {
        Bundle b(work_.path() / ("b" + std::to_string(count_++)));
        if (with_hook) b.hook(hook(), node_->config());
        // Every GPU's node at /hostdev: the device cgroup must refuse those not given.
        if (hostdev)
            for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
        b.env("NVIDIA_VISIBLE_DEVICES=" + gpus).env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        b.command(gpu_script(m()));
        return b;
    }
    static void annotate(Bundle& b, const std::string& value) {
        b.spec()["annotations"]["gpubind.io/placement"] = value;
    }
    // The shim runs the real runc with the node's config, from its environment.
    static void use_shim(const std::string& extra = {}) {
        node_->write_config(fmt::format("[runtime]\nruntimes = [\"{}\"]\n{}",
                                        env_or("GPUBIND_RUNC", "runc"), extra));
        ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    }

    // What a refusal of GPUs a and b says after "<asked by>: ", from the manifest.
    static std::string not_a_clique(unsigned a, unsigned b) {
        std::string cliques;
        for (const auto& c : m().topology.cliques)
            cliques += fmt::format("{}GPUs {}", cliques.empty() ? "" : "; ", fmt::join(c, ", "));
        return fmt::format(
            "GPUs {}, {} are not one NVLink clique (GPU {}-{}: {}); this node's NVLink cliques: {}",
            a, b, a, b, m().topology.matrix[a][b], cliques);
    }

    // Runs `b` (through `runtime`, "" for runc with the hook) and expects it
    // refused with `message`, nothing changed in the rootfs or the spec.
    static void expect_refused(Bundle& b, const std::string& runtime, const std::string& message) {
        b.write_spec();
        const std::string spec = slurp(b.dir() / "config.json"), rootfs = snapshot_tree(b.rootfs()),
                          mounts = host_mounts();
        auto r = runtime.empty() ? b.run() : b.run_with(runtime);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("== dev"))) << "the container ran";
        EXPECT_THAT(r.err, HasSubstr(message));
        if (!runtime.empty()) {  // the shim's line alone: runc never ran
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        }
        EXPECT_EQ(slurp(b.dir() / "config.json"), spec);
        EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs);
        EXPECT_EQ(host_mounts(), mounts);
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-placement"};
    int count_ = 0;
};

TEST_F(PlacementE2e, TheManifestHasPairs) {
    // What the tests below take from the simulator: 0-1 and 2-3 linked, 1-2 not.
    ASSERT_EQ(m().topology.cliques, (std::vector<std::vector<unsigned>>{{0, 1}, {2, 3}}));
    ASSERT_EQ(m().topology.matrix[1][2].rfind("NV", 0), std::string::npos);
}

TEST_F(PlacementE2e, TheHookStartsALinkedPair) {
    for (bool by_annotation : {false, true}) {
        Bundle b = bundle("0,1");
        if (by_annotation)
            annotate(b, "nvlink");
        else
            b.env("GPUBIND_PLACEMENT=nvlink");
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
        EXPECT_EQ(expect_gpus(m(), r.out, {0, 1}), "") << r.out;
    }
}

TEST_F(PlacementE2e, TheHookRefusesGpusOfTwoPairs) {
    Bundle b = bundle("1,2", /*with_hook=*/true, /*hostdev=*/false);
    b.env("GPUBIND_PLACEMENT=nvlink");
    expect_refused(b, "",
                   "gpubind-hook: check placement GPUBIND_PLACEMENT=nvlink: " + not_a_clique(1, 2));
    Bundle a = bundle("1,2", /*with_hook=*/true, /*hostdev=*/false);
    annotate(a, "nvlink");
    expect_refused(a, "",
                   "gpubind-hook: check placement annotation gpubind.io/placement=nvlink: " +
                       not_a_clique(1, 2));
}

TEST_F(PlacementE2e, TheHookRefusesAnotherPlacement) {
    Bundle b = bundle("0,1", /*with_hook=*/true, /*hostdev=*/false);
    b.env("GPUBIND_PLACEMENT=nvswitch");
    expect_refused(b, "",
                   "gpubind-hook: read request " + (b.dir() / "config.json").string() +
                       ": GPUBIND_PLACEMENT: 'nvswitch' is not a placement (nvlink)");
}

TEST_F(PlacementE2e, OnRefusedWarnStartsItWithAWarning) {
    node_->write_config("[policy]\non-refused = \"warn\"\n");
    std::ofstream(node_->log(), std::ios::trunc).flush();
    Bundle b = bundle("1,2");
    b.env("GPUBIND_PLACEMENT=nvlink");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {1, 2}), "") << r.out;
    EXPECT_THAT(slurp(node_->log()), HasSubstr("GPUBIND_PLACEMENT=nvlink: " + not_a_clique(1, 2) +
                                               "; starting it anyway (on-refused = warn)"));
}

TEST_F(PlacementE2e, TheShimStartsALinkedPair) {
    use_shim();
    Bundle b = bundle("2,3", /*with_hook=*/false);
    annotate(b, "nvlink");
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_EQ(expect_gpus(m(), r.out, {2, 3}), "") << r.out;
}

TEST_F(PlacementE2e, TheShimRefusesGpusOfTwoPairsBeforeRunc) {
    use_shim();
    Bundle b = bundle("1,2", /*with_hook=*/false, /*hostdev=*/false);
    annotate(b, "nvlink");
    expect_refused(b, runtime(),
                   "gpubind-runtime: check placement annotation gpubind.io/placement=nvlink: " +
                       not_a_clique(1, 2));
}

TEST_F(PlacementE2e, TheShimWarnsUnderOnRefusedWarn) {
    use_shim("[policy]\non-refused = \"warn\"\n");
    Bundle b = bundle("1,2", /*with_hook=*/false);
    b.env("GPUBIND_PLACEMENT=nvlink");
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {1, 2}), "") << r.out;
    EXPECT_THAT(r.err, Not(HasSubstr("check placement")));
    EXPECT_THAT(slurp(node_->log()), HasSubstr("starting it anyway (on-refused = warn)"));
}

// A declared placement needs NVML's NVLink facts: on a node whose
// description has none yet (NVML never asked in this driver state), the
// start asks NVML once; a start declaring nothing never does.
TEST(PlacementNvml, ADeclaredStartAsksNvmlOnceAStartDeclaringNothingNever) {
    sim::Spec spec;
    spec.gpus = 4;
    spec.topology = "pcie-pairs";
    SimNode node(spec, "gpubind-e2e-placement-nvml");
    TempDir work("gpubind-e2e-placement-nvml");
    auto nvml = [&] {
        node::LoadOptions options;
        options.write = false;
        return node::load_node(config::load_config(node.config()), options).nvml.status;
    };
    auto start = [&](const std::string& name, const std::string& declared) {
        Bundle b(work.path() / name);
        b.hook(hook(), node.config());
        b.env("NVIDIA_VISIBLE_DEVICES=0,1").command("true");
        if (!declared.empty()) b.env("GPUBIND_PLACEMENT=" + declared);
        return b.run();
    };
    auto r = start("undeclared", "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nvml(), node::NvmlStatus::NotAsked);
    r = start("declared", "nvlink");
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node.log());
    EXPECT_EQ(nvml(), node::NvmlStatus::Answered);
}

// The system calls of a start, by name, as strace counts them: gpubind-hook
// (`hook_path`) registered at prestart, run under strace. brk is left out:
// how often the heap grows depends on where ASLR put it (7 or 8 times for
// the same start of the same binary).
std::map<std::string, std::size_t> traced_calls(Bundle& b, const std::string& hook_path,
                                                const fs::path& trace) {
    auto& hooks = b.spec()["hooks"]["prestart"];
    hooks[0]["args"] = {"strace", "-f", "-qq", "-o", trace.string(), hook_path, "prestart"};
    hooks[0]["path"] = "/usr/bin/strace";
    auto r = b.run();
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, std::size_t> calls;
    std::ifstream in(trace);
    for (std::string line; std::getline(in, line);) {
        std::size_t at = line.find_first_not_of("0123456789 ");
        if (at == std::string::npos || line.compare(at, 3, "---") == 0 ||
            line.compare(at, 3, "+++") == 0 || line.compare(at, 4, "<...") == 0)
            continue;
        const std::size_t paren = line.find('(', at);
        if (paren != std::string::npos && line.compare(at, paren - at, "brk") != 0)
            ++calls[line.substr(at, paren - at)];
    }
    return calls;
}

std::string diff(const std::map<std::string, std::size_t>& a,
                 const std::map<std::string, std::size_t>& b) {
    std::map<std::string, std::pair<std::size_t, std::size_t>> both;
    for (const auto& [k, v] : a) both[k].first = v;
    for (const auto& [k, v] : b) both[k].second = v;
    std::string out;
    for (const auto& [k, v] : both)
        if (v.first != v.second) out += fmt::format("{}: {} vs {}\n", k, v.first, v.second);
    return out;
}

// Once the description holds NVML's facts, a start declaring nvlink for a
// linked pair makes exactly the system calls of the same start declaring
// nothing: the check is the node description's, in memory. With
// GPUBIND_BASELINE_HOOK (a gpubind-hook built before this feature), a start
// declaring nothing makes exactly the calls it made with that hook.
TEST_F(PlacementE2e, AStartDeclaringNothingMakesNoExtraSystemCall) {
    if (::access("/usr/bin/strace", X_OK) != 0) GTEST_SKIP() << "no strace";
    {
        Bundle first = bundle("0,1");
        first.env("GPUBIND_PLACEMENT=nvlink");
        ASSERT_EQ(first.run().exit_code, 0);  // NVML asked: the description has its facts
    }
    // Each hook started once first, untraced: its description is current.
    auto calls = [&](const std::string& hook_path, bool declared) {
        for (bool traced : {false, true}) {
            Bundle b = bundle("0,1");
            b.command("true");
            if (declared) b.env("GPUBIND_PLACEMENT=nvlink");
            if (!traced) {
                b.spec()["hooks"]["prestart"][0]["path"] = hook_path;
                EXPECT_EQ(b.run().exit_code, 0);
                continue;
            }
            return traced_calls(b, hook_path, work_.path() / ("trace" + std::to_string(count_++)));
        }
        return std::map<std::string, std::size_t>{};
    };
    const auto nothing = calls(hook(), false);
    ASSERT_GT(nothing.size(), 10u);
    const auto declared = calls(hook(), true);
    EXPECT_EQ(nothing, declared) << "declaring nothing vs. nvlink:\n" << diff(nothing, declared);
    const std::string baseline = env_or("GPUBIND_BASELINE_HOOK", "");
    if (baseline.empty()) return;
    const auto before = calls(baseline, false);
    const auto after = calls(hook(), false);
    EXPECT_EQ(before, after) << baseline << " vs. " << hook() << ":\n" << diff(before, after);
}

}  // namespace
}  // namespace gpubind::test
