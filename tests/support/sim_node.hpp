// One fixture base for the tests on a simulated node: a temporary directory,
// the node simulated into its "node" folder with the options a suite chooses,
// a Config whose roots are that node's (sim.hpp: dir, dir, dir/proc,
// dir/sys), all removed when the test ends.
//
//   class Doctor : public test::SimNodeTest {
//     protected:
//       Doctor() : SimNodeTest("gpubind-doctor") { node_options().gpus(2); }
//   };
//   TEST_F(Doctor, ...) { ... root() ... config() ... manifest() ... }
//
// SetUp() simulates the node; a suite that overrides it calls
// SimNodeTest::SetUp() first. simulate() again makes the node the options
// say now (a driver upgrade: node_options().driver_version("560.35.03")).
// A parameterized suite derives from SimNodeTestWithParam<T> and chooses the
// options from GetParam() in its constructor.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpubind/config/config.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {

// The options of a simulated node, chosen fluently:
// NodeOptions().gpus(3).mig({{1, 1, 0}}).imex_channels(2). What has no
// setter here is set on spec().
class NodeOptions {
  public:
    NodeOptions& gpus(unsigned n) {
        spec_.gpus = n;
        return *this;
    }
    NodeOptions& driver_version(std::string version) {
        spec_.driver_version = std::move(version);
        return *this;
    }
    NodeOptions& mig(std::vector<sim::MigSpec> devices) {
        spec_.mig = std::move(devices);
        return *this;
    }
    NodeOptions& imex_channels(unsigned n) {
        spec_.imex_channels = n;
        return *this;
    }
    NodeOptions& hcas(unsigned n) {
        spec_.hcas = n;
        return *this;
    }
    NodeOptions& drm(bool on = true) {
        spec_.drm = on;
        return *this;
    }
    // The NVLink topology, and as many GPUs as it has (sim::topology_gpus;
    // the GPUs chosen before when it says none).
    NodeOptions& topology(std::string name) {
        spec_.topology = std::move(name);
        if (const unsigned n = sim::topology_gpus(spec_.topology)) spec_.gpus = n;
        return *this;
    }
    // Every option at once.
    NodeOptions& spec(sim::Spec spec) {
        spec_ = std::move(spec);
        return *this;
    }
    sim::Spec& spec() { return spec_; }
    const sim::Spec& spec() const { return spec_; }

  private:
    sim::Spec spec_;
};

template <class Base>
class BasicSimNodeTest : public Base {
  protected:
    explicit BasicSimNodeTest(const std::string& prefix = "gpubind-sim-node")
        : dir_(prefix), config_(config::default_config()) {
        config_.roots = {root(), root(), root() / "proc", root() / "sys"};
    }

    void SetUp() override { simulate(); }

    // The node's options, for simulate(): chosen in a suite's constructor,
    // or changed before simulating again.
    NodeOptions& node_options() { return options_; }

    // Makes the node the options say (again, over the one there); its manifest.
    const sim::Manifest& simulate() {
        manifest_ = sim::simulate(root(), options_.spec());
        return manifest_;
    }

    // The test's temporary directory (the node is its "node" folder; a suite's
    // other files, state and CDI directories go beside it).
    const std::filesystem::path& dir() const { return dir_.path(); }
    // The simulated node: its driver and dev root ("/" of the node).
    std::filesystem::path root() const { return dir_.path() / "node"; }
    // default_config() with the roots at the node; the test may change it.
    config::Config& config() { return config_; }
    const config::Config& config() const { return config_; }
    // What simulate() made, as the simulator reports it.
    const sim::Manifest& manifest() const { return manifest_; }
    // The node as gpubind knows it through config(): load_node's answer.
    node::NodeKnowledge knowledge(const node::LoadOptions& options = {}) const {
        return node::load_node(config_, options);
    }

  private:
    TempDir dir_;
    config::Config config_;
    NodeOptions options_;
    sim::Manifest manifest_;
};

using SimNodeTest = BasicSimNodeTest<::testing::Test>;
template <class T>
using SimNodeTestWithParam = BasicSimNodeTest<::testing::TestWithParam<T>>;

}  // namespace gpubind::test
