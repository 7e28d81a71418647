// NVML is asked in a child process with a deadline. The truth for the fake
// NVML of a simulated node is the node's manifest.
#include <chrono>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "built.hpp"
#include "gpubind/node/memory_limits.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "nvml.hpp"
#include "sim_node.hpp"

namespace gpubind {
namespace {

class NvmlOnASimulatedNode : public test::SimNodeTest {
  protected:
    NvmlOnASimulatedNode() : test::SimNodeTest("gpubind-nvml") {
        node_options().gpus(3).mig({{1, 2, 0}});
    }
};

TEST_F(NvmlOnASimulatedNode, ReadsTheSimulatedNodesFacts) {
    const sim::Manifest& manifest = this->manifest();
    auto facts = node::query_nvml(root() / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                                  std::chrono::seconds(10));
    EXPECT_EQ(facts.cuda_version, manifest.cuda_version);
    ASSERT_EQ(facts.gpus.size(), manifest.gpus.size());
    for (const auto& g : manifest.gpus) {
        ASSERT_TRUE(facts.gpus.count(g.minor));
        EXPECT_EQ(facts.gpus[g.minor].brand, g.brand);
        EXPECT_EQ(facts.gpus[g.minor].compute_capability, g.compute_capability);
    }
    ASSERT_EQ(manifest.migs.size(), 1u);
    const auto& mig = manifest.migs[0];
    EXPECT_EQ((facts.gpus[manifest.gpus[mig.gpu].minor].mig_uuids[{mig.gi, mig.ci}]), mig.uuid);
}

// The driver's per-cgroup memory limit (issue 48): found at discovery where
// the fake NVML offers it (gpubind simulate --memory-limits), set and read
// back through it, its state the fake driver's file.
class NvmlMemoryLimits : public test::SimNodeTest {
  protected:
    NvmlMemoryLimits() : test::SimNodeTest("gpubind-nvml-limits") {
        node_options().gpus(2).spec().memory_limits = true;
    }
    std::string state() const {
        std::ifstream in(root() / "gpubind-fake-nvml/memory-limits");
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }
};

TEST_F(NvmlMemoryLimits, DiscoveryFindsTheLimitWhereTheDriverOffersIt) {
    auto facts = node::query_nvml(root() / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                                  std::chrono::seconds(10));
    EXPECT_TRUE(facts.memory_limits);
    EXPECT_EQ(facts.memory_limits_why, "");
    const auto known = knowledge({.need_nvml = true, .write = false});
    EXPECT_TRUE(known.node.memory_limits);
}

TEST_F(NvmlOnASimulatedNode, DiscoveryFindsNoLimitWhereTheDriverDoesNotOfferIt) {
    auto facts = node::query_nvml(root() / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                                  std::chrono::seconds(10));
    EXPECT_FALSE(facts.memory_limits);
    EXPECT_EQ(facts.memory_limits_why,
              "nvmlDeviceGetMemoryLimits_v1(/sys/fs/cgroup) returned 3: the driver does not "
              "offer it");
    const auto known = knowledge({.need_nvml = true, .write = false});
    EXPECT_FALSE(known.node.memory_limits);
    EXPECT_EQ(known.node.memory_limits_why, facts.memory_limits_why);
    // Without NVML's answer nothing is claimed.
    EXPECT_EQ(knowledge({.write = false}).node.memory_limits_why, "");
}

TEST_F(NvmlMemoryLimits, SetReadBackAndCleared) {
    const auto known = knowledge({.need_nvml = true, .write = false});
    const sim::Manifest& m = manifest();
    const std::string dir = "/sys/fs/cgroup/system.slice/docker-abc.scope";
    const unsigned minor = m.gpus[1].minor;
    const auto got = node::set_memory_limits(known.node, dir, {{minor, 1u << 20, 1u << 30}},
                                             std::chrono::seconds(10));
    EXPECT_EQ(got, (std::vector<node::MemoryLimit>{{minor, 1u << 20, 1u << 30}}));
    // One line for it, the cgroup as the kernel would name it (fake_limits.h).
    EXPECT_THAT(state(), ::testing::MatchesRegex(fmt::format("{} {} {} /.*docker-abc\\.scope\n",
                                                             minor, 1u << 20, 1u << 30)));
    const auto none = node::set_memory_limits(known.node, dir, {{minor, 0, node::kNoMemoryLimit}},
                                              std::chrono::seconds(10));
    EXPECT_EQ(none, (std::vector<node::MemoryLimit>{{minor, 0, node::kNoMemoryLimit}}));
    EXPECT_EQ(state(), "");
    // A soft limit above the hard one: NVML's refusal, one line naming the cgroup.
    try {
        node::set_memory_limits(known.node, dir, {{minor, 2u << 30, 1u << 30}},
                                std::chrono::seconds(10));
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), ::testing::StartsWith("set GPU memory limit " + dir + ": "));
        EXPECT_THAT(e.what(),
                    ::testing::HasSubstr("nvmlDeviceSetMemoryLimits_v1(GPU minor " +
                                         std::to_string(minor) + ", " + dir + ") returned 2"));
    }
}

TEST(Nvml, AHungDriverHitsTheDeadline) {
    const auto start = std::chrono::steady_clock::now();
    try {
        node::query_nvml(GPUBIND_HUNG_NVML, std::chrono::milliseconds(300));
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ETIMEDOUT);
        EXPECT_THAT(e.what(), ::testing::HasSubstr("no answer within 300 ms"));
    }
    // The child was killed: the caller is not held much past the deadline.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Nvml, MissingOrBrokenLibraryIsAnError) {
    try {
        node::query_nvml("/nonexistent/libnvidia-ml.so.1", std::chrono::seconds(5));
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(),
                    ::testing::StartsWith("query NVML /nonexistent/libnvidia-ml.so.1: dlopen"));
    }
}

TEST(Nvml, ReportParsing) {
    auto facts =
        node::parse_nvml_report("cuda 12.4\ngpu 3 tesla 7.5\nmig 3 1 0 MIG-abc\nnoise\n", "t");
    EXPECT_EQ(facts.cuda_version, "12.4");
    EXPECT_EQ(facts.gpus[3].brand, "tesla");
    EXPECT_EQ(facts.gpus[3].compute_capability, "7.5");
    EXPECT_EQ((facts.gpus[3].mig_uuids[{1, 0}]), "MIG-abc");
    EXPECT_THROW(node::parse_nvml_report("error nvmlInit_v2 returned 9\n", "t"), util::Error);
    EXPECT_TRUE(node::parse_nvml_report("memlimit yes\n", "t").memory_limits);
    auto no = node::parse_nvml_report("memlimit no this NVML has no it\n", "t");
    EXPECT_FALSE(no.memory_limits);
    EXPECT_EQ(no.memory_limits_why, "this NVML has no it");
}

}  // namespace
}  // namespace gpubind
