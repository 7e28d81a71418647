// NVML is asked in a child process with a deadline. The truth for the fake
// NVML of a simulated node is the node's manifest.
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "built.hpp"
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
}

}  // namespace
}  // namespace gpubind
