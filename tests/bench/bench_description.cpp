// How long a container start spends on the node description (issue 8): the
// node's fingerprint, and the steady-state load_node (a valid description
// read, checked and converted). Run as root: it simulates a 4-GPU node in a
// temporary directory, with its own state directory, and removes it after.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <benchmark/benchmark.h>

#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;

// A simulated 4-GPU node and a config pointing at it, made once.
class SimulatedNode {
  public:
    SimulatedNode() {
        std::string tmpl = (fs::temp_directory_path() / "gpubind-bench-desc-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr)
            throw std::system_error(errno, std::system_category(), "mkdtemp");
        dir_ = tmpl;
        sim::Spec spec;
        spec.gpus = 4;
        sim::simulate(dir_ / "node", spec);
        config_ = config::default_config();
        config_.roots = {dir_ / "node", dir_ / "node", dir_ / "node/proc"};
        config_.state_dir = dir_ / "state";
    }
    ~SimulatedNode() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    SimulatedNode(const SimulatedNode&) = delete;
    SimulatedNode& operator=(const SimulatedNode&) = delete;

    const config::Config& config() const { return config_; }

  private:
    fs::path dir_;
    config::Config config_;
};

const config::Config& node_config() {
    static SimulatedNode node;
    return node.config();
}

void BM_NodeFingerprint(benchmark::State& state) {
    const config::Config& config = node_config();
    for (auto _ : state) benchmark::DoNotOptimize(node::node_fingerprint(config));
}
BENCHMARK(BM_NodeFingerprint)->Unit(benchmark::kMicrosecond);

void BM_ConfigDigest(benchmark::State& state) {
    const config::Config& config = node_config();
    for (auto _ : state) benchmark::DoNotOptimize(node::config_digest(config));
}
BENCHMARK(BM_ConfigDigest)->Unit(benchmark::kMicrosecond);

// What a container start pays when the description holds.
void BM_LoadNodeValid(benchmark::State& state) {
    const config::Config& config = node_config();
    if (node::load_node(config).recomputed && node::load_node(config).recomputed) {
        state.SkipWithError("the description is recomputed at every load (not root?)");
        return;
    }
    std::size_t parts = 0;
    for (auto _ : state) {
        node::NodeKnowledge k = node::load_node(config);
        parts = k.fingerprint.size();
        if (k.recomputed) {
            state.SkipWithError(("recomputed: " + k.why).c_str());
            break;
        }
        benchmark::DoNotOptimize(k);
    }
    state.counters["fingerprint_parts"] = static_cast<double>(parts);
}
BENCHMARK(BM_LoadNodeValid)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
