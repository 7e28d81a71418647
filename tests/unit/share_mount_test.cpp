// A share the pod cannot forge (issue 48): the device plugin carries it as
// /dev/null mounted at /var/run/gpubind/share/{memory,compute}/<value>, which
// a pod cannot make (an emptyDir can sit at any path, a /dev/null mount
// cannot). Where such mounts are, they are the share: a share variable the
// pod or its image sets asks nothing more, and cannot unset it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

using config::Policy;
using decide::read_request;
using decide::ShareRequest;
using nlohmann::json;
using test::error_of;
using ::testing::HasSubstr;
using util::Error;
using util::ErrorKind;
namespace oci = decide::oci;

constexpr std::uint64_t kGiB = 1ull << 30;
constexpr const char* kShares = "/var/run/gpubind/share";

// An unprivileged container given GPU 1 by the device plugin's volume mount,
// with `mounts` more (destination, source) and `env`.
oci::Spec pod_spec(const std::vector<std::pair<std::string, std::string>>& mounts,
                   const std::vector<std::string>& env) {
    json doc = {{"ociVersion", "1.0.2"},
                {"root", {{"path", "rootfs"}}},
                {"process", {{"env", json::array({"PATH=/bin"})}}},
                {"mounts", json::array()}};
    auto mount = [&](const std::string& dest, const std::string& source) {
        doc["mounts"].push_back(
            {{"destination", dest}, {"source", source}, {"type", "bind"}, {"options", {"ro"}}});
    };
    mount("/var/run/nvidia-container-devices/1", "/dev/null");
    for (const auto& [dest, source] : mounts) mount(dest, source);
    for (const auto& e : env) doc["process"]["env"].push_back(e);
    return oci::parse_spec(doc.dump(), "/bundles/pod");
}

Policy mounts_policy() {
    Policy p;
    p.accept_volume_mounts = true;
    return p;
}

std::string memory_mount(std::uint64_t bytes) {
    return fmt::format("{}/memory/{}", kShares, bytes);
}
std::string compute_mount(unsigned percent) {
    return fmt::format("{}/compute/{}", kShares, percent);
}

TEST(ShareMounts, APodsVariableAskingMoreThanItsMountIsNotObeyed) {
    // Given a quarter (1 GiB, 25 %), the pod writes a larger share.
    for (const std::vector<std::string>& env : std::vector<std::vector<std::string>>{
             {"GPUBIND_GPU_MEMORY=20GiB", "GPUBIND_GPU_COMPUTE=100"},
             {"CUDA_DEVICE_MEMORY_LIMIT_0=20g", "NVIDIA_GPU_MEMORY_LIMIT=21474836480"},
             {"ALIYUN_COM_GPU_MEM_CONTAINER=20", "CUDA_DEVICE_SM_LIMIT=90"},
         }) {
        const ShareRequest s =
            read_request(
                pod_spec({{memory_mount(kGiB), "/dev/null"}, {compute_mount(25), "/dev/null"}},
                         env),
                mounts_policy())
                .share;
        EXPECT_EQ(s.memory, kGiB) << env[0];
        EXPECT_TRUE(s.device_memory.empty()) << env[0];
        EXPECT_EQ(s.compute, 25u) << env[1];
        EXPECT_EQ(s.asked_by, memory_mount(kGiB));
    }
}

TEST(ShareMounts, APodCannotUnsetItsShare) {
    // No share variable at all (the pod unset it, or overrode it empty).
    for (const std::vector<std::string>& env :
         std::vector<std::vector<std::string>>{{}, {"GPUBIND_GPU_MEMORY="}}) {
        const ShareRequest s =
            read_request(pod_spec({{memory_mount(10 * kGiB), "/dev/null"}}, env), mounts_policy())
                .share;
        EXPECT_TRUE(s.asked());
        EXPECT_EQ(s.memory, 10 * kGiB);
        EXPECT_EQ(s.compute, 0u);
    }
}

TEST(ShareMounts, OnlyAMountOfDevNullCounts) {
    // An emptyDir (or any bind) at the share's path is the pod's own: it asks nothing.
    const ShareRequest none =
        read_request(pod_spec({{memory_mount(40 * kGiB), "/var/lib/kubelet/pods/x/empty"}}, {}),
                     mounts_policy())
            .share;
    EXPECT_FALSE(none.asked());
    // ... and where the pod also sets a variable, the variable is the share.
    const ShareRequest env =
        read_request(pod_spec({{memory_mount(40 * kGiB), "/tmp/x"}}, {"GPUBIND_GPU_MEMORY=2GiB"}),
                     mounts_policy())
            .share;
    EXPECT_EQ(env.memory, 2 * kGiB);
    EXPECT_EQ(env.asked_by, "GPUBIND_GPU_MEMORY=2GiB");
}

}  // namespace
}  // namespace gpubind
