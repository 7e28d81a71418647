// What a container asks for (read_request) and whether the node can give it
// (check_requirements). Specs are written as JSON and parsed as the hook
// does; the node is built by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/util/error.hpp"
#include "spec.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr const char* kDeviceDir = "/var/run/nvidia-container-devices/";

using test::make_spec;

using test::error_of;

decide::Request read(const std::vector<std::string>& env, const config::Policy& policy = {}) {
    return decide::read_request(make_spec(env), policy);
}

// ---- NVIDIA_VISIBLE_DEVICES --------------------------------------------------------------

TEST(ReadRequest, UnsetVoidOrEmptyIsNotAGpuContainer) {
    for (const auto& env : std::vector<std::vector<std::string>>{
             {"PATH=/bin"},
             {"NVIDIA_VISIBLE_DEVICES=void"},
             {"NVIDIA_VISIBLE_DEVICES="},
             {"NVIDIA_VISIBLE_DEVICES=  "},
             // Other variables alone ask for nothing.
             {"NVIDIA_DRIVER_CAPABILITIES=all", "NVIDIA_REQUIRE_CUDA=cuda>=99"}}) {
        auto req = read(env);
        EXPECT_FALSE(req.gpu_container()) << env.back();
        EXPECT_EQ(req.source, decide::RequestSource::None);
        EXPECT_THAT(req.requirements, IsEmpty());
    }
}

TEST(ReadRequest, NoneAllAndLists) {
    auto none = read({"NVIDIA_VISIBLE_DEVICES=none"});
    EXPECT_TRUE(none.gpu_container());
    EXPECT_EQ(none.source, decide::RequestSource::Env);
    EXPECT_EQ(none.devices.kind, node::DeviceIdsKind::None);

    EXPECT_EQ(read({"NVIDIA_VISIBLE_DEVICES=all"}).devices.kind, node::DeviceIdsKind::All);

    auto list = read({"NVIDIA_VISIBLE_DEVICES=0, GPU-abc,1,0,GPU-abc"});
    EXPECT_EQ(list.devices.kind, node::DeviceIdsKind::List);
    EXPECT_THAT(list.devices.ids, ElementsAre("0", "GPU-abc", "1"));  // duplicates dropped
}

TEST(ReadRequest, TheLastValueOfAVariableWins) {
    auto req = read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video",
                     "NVIDIA_VISIBLE_DEVICES=2", "NVIDIA_DRIVER_CAPABILITIES=graphics"});
    EXPECT_THAT(req.devices.ids, ElementsAre("2"));
    EXPECT_EQ(req.caps, config::Capabilities{config::kCapGraphics});
    EXPECT_FALSE(
        read({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"}).gpu_container());
    EXPECT_TRUE(read({"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=1"}).gpu_container());
}

// ---- legacy CUDA images -------------------------------------------------------------------

TEST(ReadRequest, LegacyCudaImageGetsAllGpusAllCapabilitiesAndACudaRequirement) {
    auto req = read({"CUDA_VERSION=10.2.89"});
    EXPECT_EQ(req.source, decide::RequestSource::LegacyCuda);
    EXPECT_EQ(req.devices.kind, node::DeviceIdsKind::All);
    EXPECT_EQ(req.caps, config::kCapAll);
    ASSERT_EQ(req.requirements.size(), 1u);
    EXPECT_EQ(req.requirements[0].variable, "CUDA_VERSION");
    EXPECT_EQ(req.requirements[0].expression, "cuda>=10.2");

    config::Policy limited;
    limited.supported = config::kCapUtility | config::kCapCompute | config::kCapVideo;
    EXPECT_EQ(read({"CUDA_VERSION=10.2.89"}, limited).caps, limited.supported);
    // Capabilities asked for explicitly are what it gets.
    EXPECT_EQ(read({"CUDA_VERSION=9.0", "NVIDIA_DRIVER_CAPABILITIES=compute"}).caps,
              config::Capabilities{config::kCapCompute});
}

TEST(ReadRequest, NotLegacyWithRequireCudaOrExplicitDevices) {
    // A modern CUDA image names its requirement: no GPUs unless asked for.
    EXPECT_FALSE(read({"CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"}).gpu_container());
    // An explicit "void" turns a legacy image off.
    EXPECT_FALSE(read({"CUDA_VERSION=10.2", "NVIDIA_VISIBLE_DEVICES=void"}).gpu_container());
    EXPECT_FALSE(read({"CUDA_VERSION="}).gpu_container());
    // With explicit devices the legacy image still implies its CUDA requirement.
    auto req = read({"CUDA_VERSION=11.8.0", "NVIDIA_VISIBLE_DEVICES=1"});
    EXPECT_EQ(req.source, decide::RequestSource::Env);
    EXPECT_THAT(req.devices.ids, ElementsAre("1"));
    ASSERT_EQ(req.requirements.size(), 1u);
    EXPECT_EQ(req.requirements[0].expression, "cuda>=11.8");
}

TEST(ReadRequest, MalformedLegacyCudaVersionIsNamed) {
    auto e = error_of([] { read({"CUDA_VERSION=eleven"}); });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("CUDA_VERSION: 'eleven' is not a version"));
}

// ---- device mounts --------------------------------------------------------------------------

TEST(ReadRequest, DeviceMountsTakePrecedenceWhenPolicyAcceptsThem) {
    config::Policy policy;
    policy.accept_volume_mounts = true;
    auto spec =
        make_spec({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=7"}, false,
                  {std::string(kDeviceDir) + "GPU-abc", std::string(kDeviceDir) + "1",
                   std::string(kDeviceDir) + "GPU-abc", std::string(kDeviceDir) + "imex/3"});
    auto req = decide::read_request(spec, policy);
    EXPECT_EQ(req.source, decide::RequestSource::VolumeMounts);
    EXPECT_EQ(req.devices.kind, node::DeviceIdsKind::List);
    EXPECT_THAT(req.devices.ids, ElementsAre("GPU-abc", "1"));
    EXPECT_THAT(req.imex_channels, ElementsAre("3"));

    auto all = decide::read_request(
        make_spec({}, false,
                  {std::string(kDeviceDir) + "0", "/var/run/nvidia-container-devices/all"}),
        policy);
    EXPECT_EQ(all.devices.kind, node::DeviceIdsKind::All);
}

TEST(ReadRequest, OnlyDevNullMountsUnderTheDirectoryCount) {
    config::Policy policy;
    policy.accept_volume_mounts = true;
    json doc = {
        {"root", {{"path", "rootfs"}}},
        {"mounts",
         {{{"destination", std::string(kDeviceDir) + "0"}, {"source", "/tmp/x"}},
          {{"destination", "/var/run/nvidia-container-devices-x/1"}, {"source", "/dev/null"}},
          {{"destination", "/var/run/nvidia-container-devices"}, {"source", "/dev/null"}}}}};
    EXPECT_FALSE(
        decide::read_request(decide::oci::parse_spec(doc.dump(), "/b"), policy).gpu_container());
}

TEST(ReadRequest, DeviceMountsRefusedByPolicyFallBackToTheVariable) {
    const std::vector<std::string> mounts = {std::string(kDeviceDir) + "3"};
    auto req = decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=0"}, false, mounts),
                                    config::Policy{});
    EXPECT_EQ(req.source, decide::RequestSource::Env);
    EXPECT_THAT(req.devices.ids, ElementsAre("0"));
    EXPECT_FALSE(
        decide::read_request(make_spec({}, false, mounts), config::Policy{}).gpu_container());
}

TEST(ReadRequest, BadDeviceMountIsNamed) {
    config::Policy policy;
    policy.accept_volume_mounts = true;
    for (const char* dest :
         {"/var/run/nvidia-container-devices/a/b", "/var/run/nvidia-container-devices/imex/x",
          "/var/run/nvidia-container-devices/imex/1,2",
          "/var/run/nvidia-container-devices/imex/none",
          "/var/run/nvidia-container-devices/imex/-1",
          "/var/run/nvidia-container-devices/imex/1048576"}) {
        auto e = error_of([&] { decide::read_request(make_spec({}, false, {dest}), policy); });
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr(std::string("mounts[1].destination ") + dest));
    }
}

// ---- unprivileged containers --------------------------------------------------------------

TEST(ReadRequest, UnprivilegedRequestByVariableIsRefusedWhenPolicySaysSo) {
    config::Policy policy;
    policy.accept_envvar_unprivileged = false;
    for (const char* value :
         {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=none", "CUDA_VERSION=10.2"}) {
        auto e = error_of([&] { decide::read_request(make_spec({value}, false), policy); });
        EXPECT_EQ(e.code().value(), ECANCELED) << value;
        EXPECT_EQ(e.op(), "refuse request");
        EXPECT_EQ(e.path(), "/bundles/c1");
        EXPECT_THAT(e.what(), HasSubstr("not privileged")) << value;
        EXPECT_THAT(e.what(), HasSubstr("accept_envvar_unprivileged")) << value;
    }
    // Privileged containers, device mounts and non-GPU containers are fine.
    EXPECT_TRUE(decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=all"}, true), policy)
                    .gpu_container());
    policy.accept_volume_mounts = true;
    EXPECT_TRUE(decide::read_request(make_spec({}, false, {std::string(kDeviceDir) + "0"}), policy)
                    .gpu_container());
    EXPECT_FALSE(decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=void"}, false), policy)
                     .gpu_container());
}

TEST(ReadRequest, UnprivilegedRequestByVariableIsAcceptedByDefault) {
    EXPECT_EQ(
        decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=all"}, false), config::Policy{})
            .devices.kind,
        node::DeviceIdsKind::All);
}

// ---- the environment's caps (issue 44, F7) ------------------------------------------------

// runc starts a container whatever the size of its environment: a container
// that asks gpubind for nothing is left alone past the caps too, one that
// asks for something (by variable, a legacy CUDA image, a device mount) is
// refused, naming the cap.
TEST(ReadRequest, TheEnvironmentsCapsRefuseOnlyARequest) {
    std::vector<std::string> crowded(decide::oci::kMaxEnvEntries + 1, "A=1");
    const std::string huge = "HUGE=" + std::string(decide::oci::kMaxEnvEntrySize, 'x');
    EXPECT_FALSE(read(crowded).gpu_container());
    EXPECT_FALSE(read({"PATH=/bin", huge}).gpu_container());
    EXPECT_FALSE(read({huge, "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_GDS=enabled"}).gpu_container());

    crowded.push_back("NVIDIA_VISIBLE_DEVICES=0");
    auto e = error_of([&] { read(crowded); });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("/bundles/c1/config.json"));
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("process.env: {} entries, more than {}",
                                                crowded.size(), decide::oci::kMaxEnvEntries)));
    const std::string too_big = fmt::format("process.env[1] (HUGE): {} bytes, more than {}",
                                            huge.size(), decide::oci::kMaxEnvEntrySize);
    for (const char* asks : {"NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.1"}) {
        e = error_of([&] { read({"PATH=/bin", huge, asks}); });
        EXPECT_EQ(e.code().value(), EINVAL) << asks;
        EXPECT_THAT(e.what(), HasSubstr(too_big)) << asks;
    }
    config::Policy mounts;
    mounts.accept_volume_mounts = true;
    e = error_of([&] {
        decide::read_request(make_spec({"PATH=/bin", huge}, false, {std::string(kDeviceDir) + "0"}),
                             mounts);
    });
    EXPECT_THAT(e.what(), HasSubstr(too_big));
}

// ---- many device mounts (issue 44, F8) ------------------------------------------------------

// Each device mount is one lookup, not a scan of those read before it. The
// mounts name HCAs of 64 characters that differ only at their end (then the
// first 1,000 again). Read for n and for 4n names, a linear reading takes
// about 4 times the CPU time, the quadratic one (each compared with every
// one before it) 16 times: the ratio, not a time, is what is judged, so a
// slow machine or the sanitizer build judges the same (bench_request
// measures the time itself).
double cpu_seconds_reading(std::size_t names, std::size_t* read = nullptr) {
    auto hca = [](std::size_t i) { return fmt::format("mlx5_{:0>59}", i); };
    decide::oci::Spec spec = make_spec({}, false, {std::string(kDeviceDir) + "0"});
    for (std::size_t i = 0; i < names + 1000; ++i)
        spec.mounts.push_back({fmt::format("{}rdma/{}", kDeviceDir, hca(i % names)),
                               "/dev/null",
                               "bind",
                               {"bind", "ro"}});
    config::Config config = config::default_config();
    config.policy.accept_volume_mounts = true;
    const std::clock_t start = std::clock();
    const decide::Request r = decide::read_request(spec, config.policy, config.families);
    const double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
    EXPECT_THAT(r.devices.ids, ElementsAre("0"));
    EXPECT_EQ(r.families.size(), 1u);
    if (r.families.size() == 1) {
        EXPECT_EQ(r.families[0].family, "rdma");
        EXPECT_EQ(r.families[0].names.front(), hca(0));  // each once, in the mounts' order
        EXPECT_EQ(r.families[0].names.back(), hca(names - 1));
        if (read) *read = r.families[0].names.size();
    }
    return seconds;
}

TEST(ReadRequest, ManyDeviceMountsAreReadInLinearTime) {
    constexpr std::size_t kNames = 10'000;
    std::size_t small = 0, large = 0;
    const double t1 = cpu_seconds_reading(kNames, &small);
    const double t4 = cpu_seconds_reading(4 * kNames, &large);
    EXPECT_EQ(small, kNames);
    EXPECT_EQ(large, 4 * kNames);
    EXPECT_LT(t4, 8 * std::max(t1, 1e-3))
        << "CPU seconds: " << t1 << " for " << kNames << " names, " << t4 << " for " << 4 * kNames
        << " (linear: about 4 times; quadratic: 16)";
}

// ---- capabilities -----------------------------------------------------------------------------

TEST(ReadRequest, Capabilities) {
    const std::string devices = "NVIDIA_VISIBLE_DEVICES=all";
    EXPECT_EQ(read({devices}).caps,
              config::Capabilities{config::kCapUtility | config::kCapCompute});
    EXPECT_EQ(read({devices, "NVIDIA_DRIVER_CAPABILITIES="}).caps,
              config::Capabilities{config::kCapUtility | config::kCapCompute});
    EXPECT_EQ(read({devices, "NVIDIA_DRIVER_CAPABILITIES=all"}).caps, config::kCapAll);
    EXPECT_EQ(read({devices, "NVIDIA_DRIVER_CAPABILITIES=video,compat32,display,ngx"}).caps,
              config::Capabilities{config::kCapVideo | config::kCapCompat32 | config::kCapDisplay |
                                   config::kCapNgx});

    config::Policy policy;
    policy.supported = config::kCapUtility | config::kCapCompute;
    EXPECT_EQ(read({devices, "NVIDIA_DRIVER_CAPABILITIES=all"}, policy).caps, policy.supported);
    EXPECT_EQ(read({devices, "NVIDIA_DRIVER_CAPABILITIES=graphics,compute"}, policy).caps,
              config::Capabilities{config::kCapCompute});
}

TEST(ReadRequest, UnknownCapabilityIsNamed) {
    auto e = error_of([] {
        read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"});
    });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("NVIDIA_DRIVER_CAPABILITIES: unknown capability 'warp'"));
}

// ---- requirements -----------------------------------------------------------------------------

TEST(ReadRequest, EveryRequireVariableWithItsLastValue) {
    auto req = read({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=11",
                     "NVIDIA_REQUIRE_ARCH=arch>=7.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.2",
                     "NVIDIA_REQUIRE_EMPTY=", "NVIDIA_REQUIRE_FOO=brand=tesla",
                     "NVIDIA_REQUIRE_=driver>=1"});
    ASSERT_EQ(req.requirements.size(), 3u);
    EXPECT_EQ(req.requirements[0].variable, "NVIDIA_REQUIRE_CUDA");
    EXPECT_EQ(req.requirements[0].expression, "cuda>=12.2");
    EXPECT_EQ(req.requirements[1].variable, "NVIDIA_REQUIRE_ARCH");
    EXPECT_EQ(req.requirements[2].variable, "NVIDIA_REQUIRE_FOO");
}

TEST(ReadRequest, RequirementsCanBeDisabled) {
    const std::vector<std::string> env = {"NVIDIA_VISIBLE_DEVICES=all",
                                          "NVIDIA_REQUIRE_CUDA=cuda>=99", "CUDA_VERSION=1.0"};
    for (const char* off : {"1", "true", "TRUE", "yes", "on"}) {
        auto with = env;
        with.push_back(std::string("NVIDIA_DISABLE_REQUIRE=") + off);
        EXPECT_THAT(read(with).requirements, IsEmpty()) << off;
    }
    for (const char* on : {"0", "false", "no", ""}) {
        auto with = env;
        with.push_back(std::string("NVIDIA_DISABLE_REQUIRE=") + on);
        EXPECT_EQ(read(with).requirements.size(), 1u) << on;
    }
    config::Policy policy;
    policy.disable_require = true;
    EXPECT_THAT(read(env, policy).requirements, IsEmpty());
    EXPECT_THAT(read({"CUDA_VERSION=10.0"}, policy).requirements, IsEmpty());
}

// ---- MIG and IMEX -------------------------------------------------------------------------------

TEST(ReadRequest, MigConfigAndMonitorOnlyForPrivilegedContainers) {
    for (const char* var : {"NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"}) {
        std::vector<std::string> env = {"NVIDIA_VISIBLE_DEVICES=0", std::string(var) + "=all"};
        auto e = error_of([&] { decide::read_request(make_spec(env, false), config::Policy{}); });
        EXPECT_EQ(e.code().value(), ECANCELED) << var;
        EXPECT_THAT(e.what(), HasSubstr(std::string(var) + " is only for privileged containers"));

        auto req = decide::read_request(make_spec(env, true), config::Policy{});
        const node::DeviceIds& ids =
            std::string(var) == "NVIDIA_MIG_CONFIG_DEVICES" ? req.mig_config : req.mig_monitor;
        EXPECT_EQ(ids.kind, node::DeviceIdsKind::All) << var;
        // Unset, void or none asks for nothing: no refusal.
        env.back() = std::string(var) + "=void";
        EXPECT_NO_THROW(decide::read_request(make_spec(env, false), config::Policy{}));
    }
    auto plain =
        decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=0"}, false), config::Policy{});
    EXPECT_EQ(plain.mig_config.kind, node::DeviceIdsKind::Void);
    EXPECT_EQ(plain.mig_monitor.kind, node::DeviceIdsKind::Void);
}

TEST(ReadRequest, ImexChannelsAsUsersWriteThem) {
    auto channels = [](const std::string& value) {
        return read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=" + value}).imex_channels;
    };
    EXPECT_THAT(channels(" 0 , 007,7 ,12"), ElementsAre("0", "7", "12"));
    EXPECT_THAT(channels("1048575"), ElementsAre("1048575"));
    EXPECT_THAT(channels(""), IsEmpty());
    EXPECT_THAT(channels("void"), IsEmpty());
    EXPECT_THAT(channels(",,"), IsEmpty());
    EXPECT_THAT(channels("none,2"), ElementsAre("2"));
    EXPECT_THAT(channels("all,none"), ElementsAre("all"));
    EXPECT_THAT(read({"NVIDIA_VISIBLE_DEVICES=0"}).imex_channels, IsEmpty());
    for (const char* bad :
         {"-1", "+1", "0x1", "1.0", "1 2", "1048576", "99999999999999999999", "ALL", "channel1"}) {
        auto e = error_of([&] { channels(bad); });
        EXPECT_EQ(e.code().value(), EINVAL) << bad;
        EXPECT_THAT(e.what(), HasSubstr(std::string("NVIDIA_IMEX_CHANNELS: '") + bad +
                                        "' is not an IMEX channel number (0 to 1048575)"));
    }
    // By volume mount: one channel a mount, normalised like the variable.
    config::Policy policy;
    policy.accept_volume_mounts = true;
    auto req = decide::read_request(
        make_spec({}, false,
                  {std::string(kDeviceDir) + "imex/01", std::string(kDeviceDir) + "imex/1",
                   std::string(kDeviceDir) + "imex/4"}),
        policy);
    EXPECT_TRUE(req.gpu_container());
    EXPECT_EQ(req.devices.kind, node::DeviceIdsKind::None);
    EXPECT_THAT(req.imex_channels, ElementsAre("1", "4"));
    EXPECT_THAT(decide::read_request(make_spec({}, false,
                                               {std::string(kDeviceDir) + "imex/4",
                                                std::string(kDeviceDir) + "imex/all"}),
                                     policy)
                    .imex_channels,
                ElementsAre("all"));
}

TEST(ReadRequest, ImexChannels) {
    EXPECT_THAT(read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1,2,1"}).imex_channels,
                ElementsAre("1", "2"));
    EXPECT_THAT(read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=3,all"}).imex_channels,
                ElementsAre("all"));
    EXPECT_THAT(read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=none"}).imex_channels,
                IsEmpty());
    auto e = error_of([] { read({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1,x"}); });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("NVIDIA_IMEX_CHANNELS: 'x' is not an IMEX channel number"));
}

// ---- check_requirements -------------------------------------------------------------------------

// A node: driver 550.54.15 supporting CUDA 12.4; GPUs 0 and 1 Tesla 9.0,
// GPU 2 GeForce 8.6, GPU 3 Tesla 8.0 with one MIG device.
class Requirements : public ::testing::Test {
  protected:
    Requirements() {
        node.driver_version = "550.54.15";
        node.cuda_version = "12.4";
        const char* brands[] = {"Tesla", "Tesla", "GeForce", "Tesla"};
        const char* archs[] = {"9.0", "9.0", "8.6", "8.0"};
        for (unsigned i = 0; i < 4; ++i) {
            node::Gpu gpu;
            gpu.index = i;
            gpu.minor = i;
            gpu.uuid = "GPU-" + std::to_string(i) + "aaa";
            gpu.brand = brands[i];
            gpu.compute_capability = archs[i];
            node.gpus.push_back(gpu);
        }
        node::MigDevice mig;
        mig.gpu_index = 3;
        mig.uuid = "MIG-3aaa";
        node.gpus[3].mig.push_back(mig);
    }

    node::Selection gpus(std::initializer_list<unsigned> indices) const {
        node::Selection s;
        for (unsigned i : indices) s.gpus.push_back(&node.gpus[i]);
        return s;
    }

    void check(const std::string& expression, const node::Selection& selection,
               const char* variable = "NVIDIA_REQUIRE_CUDA") const {
        decide::Request req;
        req.source = decide::RequestSource::Env;
        req.requirements.push_back({variable, expression});
        decide::check_requirements(req, node, selection);
    }

    bool holds(const std::string& expression, const node::Selection& selection) const {
        try {
            check(expression, selection);
            return true;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), ECANCELED) << expression << ": " << e.what();
            return false;
        }
    }

    node::Node node;
};

TEST_F(Requirements, VersionOperatorsCompareNumerically) {
    const auto sel = gpus({0});
    struct Case {
        const char* expr;
        bool ok;
    };
    for (const auto& c : std::vector<Case>{{"cuda>=12.4", true},     {"cuda>=12.5", false},
                                           {"cuda>12.3", true},      {"cuda>12.4", false},
                                           {"cuda<13", true},        {"cuda<12.4", false},
                                           {"cuda<=12.4", true},     {"cuda<=12.3", false},
                                           {"cuda=12.4", true},      {"cuda==12.4.0", true},
                                           {"cuda==12", false},      {"cuda!=12.4", false},
                                           {"cuda!=11", true},       {"cuda>=12.10", false},
                                           {"cuda>12.3.99", true},   {"driver>=550.54.9", true},
                                           {"driver<550.100", true}, {"driver==550.54.15", true},
                                           {"driver>=555", false},   {"driver!=550.54.15", false},
                                           {"driver>535", true}}) {
        EXPECT_EQ(holds(c.expr, sel), c.ok) << c.expr;
    }
}

TEST_F(Requirements, UnsatisfiedSaysWhatTheNodeHas) {
    auto e = error_of([&] { check("cuda>=12.5", gpus({0})); });
    EXPECT_EQ(e.code().value(), ECANCELED);
    EXPECT_EQ(e.op(), "check requirement");
    EXPECT_EQ(e.path(), "NVIDIA_REQUIRE_CUDA");
    EXPECT_STREQ(e.what(),
                 "check requirement NVIDIA_REQUIRE_CUDA: cuda>=12.5 not satisfied: the driver "
                 "supports CUDA 12.4");
    EXPECT_THAT(error_of([&] { check("driver>=560", gpus({0})); }).what(),
                HasSubstr("the driver version is 550.54.15"));
}

TEST_F(Requirements, SpacesSeparateAlternativesCommasJoinConditions) {
    // The forward-compatibility form CUDA images use.
    const std::string expr = "cuda>=13.0 brand=tesla,driver>=550,driver<551";
    EXPECT_TRUE(holds(expr, gpus({0})));
    EXPECT_FALSE(holds(expr, gpus({2})));  // a GeForce: neither alternative holds
    EXPECT_FALSE(holds(expr, gpus({0, 2})));
    EXPECT_FALSE(holds("cuda>=12.0,driver>=560", gpus({0})));
    EXPECT_TRUE(holds("cuda>=12.0,driver>=550", gpus({0})));
    EXPECT_TRUE(holds("  cuda>=13   cuda>=12  ", gpus({0})));

    auto e = error_of([&] { check(expr, gpus({2})); });
    EXPECT_THAT(e.what(), HasSubstr("cuda>=13.0 not satisfied: the driver supports CUDA 12.4"));
    EXPECT_THAT(e.what(),
                HasSubstr("brand=tesla not satisfied: GPU 2 (GPU-2aaa) has brand GeForce"));
}

TEST_F(Requirements, EveryVariableMustHold) {
    decide::Request req;
    req.source = decide::RequestSource::Env;
    req.requirements = {{"NVIDIA_REQUIRE_CUDA", "cuda>=12"},
                        {"NVIDIA_REQUIRE_DRIVER", "driver>=999"}};
    auto e = error_of([&] { decide::check_requirements(req, node, gpus({0})); });
    EXPECT_EQ(e.path(), "NVIDIA_REQUIRE_DRIVER");
    req.requirements.pop_back();
    EXPECT_NO_THROW(decide::check_requirements(req, node, gpus({0})));
}

TEST_F(Requirements, ArchAndBrandAreCheckedForEachSelectedGpu) {
    EXPECT_TRUE(holds("arch>=9.0", gpus({0, 1})));
    auto e = error_of([&] { check("arch>=9.0", gpus({0, 2})); });
    EXPECT_THAT(e.what(), HasSubstr("GPU 2 (GPU-2aaa) has compute capability 8.6"));
    EXPECT_TRUE(holds("arch==8.6", gpus({2})));
    EXPECT_TRUE(holds("arch<8.10", gpus({2})));  // 8.6 < 8.10 as versions

    EXPECT_TRUE(holds("brand=TESLA", gpus({0, 1, 3})));  // case-insensitive
    EXPECT_TRUE(holds("BRAND==tesla", gpus({0})));       // keys too
    EXPECT_FALSE(holds("brand=tesla", gpus({1, 2})));
    EXPECT_TRUE(holds("brand!=geforce", gpus({0, 1})));
    EXPECT_FALSE(holds("brand!=geforce", gpus({2})));
}

TEST_F(Requirements, MigDevicesAreCheckedAsTheirParent) {
    node::Selection sel;
    sel.migs.push_back(&node.gpus[3].mig[0]);
    EXPECT_TRUE(holds("arch=8.0,brand=tesla", sel));
    auto e = error_of([&] { check("arch>=9.0", sel); });
    EXPECT_THAT(e.what(), HasSubstr("GPU 3 (GPU-3aaa) has compute capability 8.0"));
}

TEST_F(Requirements, WithoutGpusOnlyCudaAndDriverCount) {
    EXPECT_TRUE(holds("arch>=100,brand=quadro,driver>=550", node::Selection{}));
    EXPECT_FALSE(holds("cuda>=13", node::Selection{}));
}

TEST_F(Requirements, UnknownFactsCannotSatisfy) {
    node.cuda_version.clear();
    auto e = error_of([&] { check("cuda>=11.0", gpus({0})); });
    EXPECT_EQ(e.code().value(), ECANCELED);
    EXPECT_THAT(e.what(), HasSubstr("the CUDA version the driver supports is unknown"));
    EXPECT_TRUE(holds("cuda>=11.0 driver>=550", gpus({0})));  // another alternative holds

    node.gpus[0].brand.clear();
    node.gpus[0].compute_capability.clear();
    EXPECT_THAT(error_of([&] { check("brand=tesla", gpus({0})); }).what(),
                HasSubstr("the brand of GPU 0 (GPU-0aaa) is unknown"));
    EXPECT_THAT(error_of([&] { check("arch>=7.0", gpus({0})); }).what(),
                HasSubstr("compute capability of GPU 0 (GPU-0aaa) is unknown"));
}

TEST_F(Requirements, MalformedExpressionIsInvalidAndNamesTheVariable) {
    for (const char* expr :
         {"cuda", "cuda>=", "cuda=>12", "cuda~12", "foo>=1", ">=1", "cuda>=abc", "cuda>=12..1",
          "cuda>=-1", "cuda>=1.x", "brand>=tesla", "brand<tesla", "arch>=sm_90"}) {
        auto e = error_of([&] { check(expr, gpus({0}), "NVIDIA_REQUIRE_X"); });
        EXPECT_EQ(e.code().value(), EINVAL) << expr;
        EXPECT_EQ(e.path(), "NVIDIA_REQUIRE_X") << expr;
        EXPECT_THAT(e.what(), HasSubstr(expr)) << expr;
    }
    // Malformed is reported even when an earlier variable fails.
    decide::Request req;
    req.source = decide::RequestSource::Env;
    req.requirements = {{"NVIDIA_REQUIRE_CUDA", "cuda>=99"}, {"NVIDIA_REQUIRE_B", "bogus"}};
    EXPECT_EQ(error_of([&] { decide::check_requirements(req, node, gpus({0})); }).code().value(),
              EINVAL);
}

TEST_F(Requirements, FromTheSpecToTheVerdict) {
    // A legacy CUDA 12.5 image on a node whose driver supports 12.4.
    auto req = read({"CUDA_VERSION=12.5.0"});
    auto e = error_of([&] { decide::check_requirements(req, node, gpus({0, 1, 2, 3})); });
    EXPECT_EQ(e.path(), "CUDA_VERSION");
    EXPECT_THAT(e.what(), HasSubstr("cuda>=12.5 not satisfied"));
    // Disabled requirements let it through.
    EXPECT_NO_THROW(decide::check_requirements(
        read({"CUDA_VERSION=12.5.0", "NVIDIA_DISABLE_REQUIRE=1"}), node, gpus({0})));
}

}  // namespace
}  // namespace gpubind
