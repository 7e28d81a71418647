// gpubind cdi check (issue 25): specs of both styles an engine reads for a
// simulated 2-GPU node — gpubind's own, NVIDIA-style (kind nvidia.com/gpu, a
// device per GPU), and DRA-style ones (kind k8s.gpu.nvidia.com/device, a
// device per claim) written by the test — judged against the node as it is
// now: the current spec passes, and each broken one is reported with its
// reason (the previous driver's libraries, /dev/nvidia3 on a 2-GPU node, a
// device name another file defines too, a hook program that is gone).
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/sim/sim.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;
using doctor::Check;
using doctor::Verdict;
using gpubind::test::TempDir;
using json = nlohmann::json;
using testing::HasSubstr;

class CdiCheck : public test::SimNodeTest {
  protected:
    CdiCheck() : test::SimNodeTest("gpubind-cdi-check") {
        node_options().gpus(2).driver_version("535.104.05");
        config().cdi.spec_dirs = {specs_.path()};
    }
    void SetUp() override {
        fs::permissions(specs_.path(), fs::perms(0755));
        test::SimNodeTest::SetUp();
        // The previous driver's spec, kept by a DRA driver's cache.
        write("dra-stale.json", dra_spec("gpu-0-claim", "/dev/nvidia0", "535.104.05"));
        node_options().driver_version("550.54.15");  // the driver upgraded since
        simulate();
        const auto gen = test::run(cli() + " cdi generate --root " + root().string() +
                                   " --hook-path " + GPUBIND_HOOK_PATH + " -o " +
                                   (specs_.path() / "nvidia.com-gpu.json").string() + " 2>&1");
        EXPECT_EQ(gen.status, 0) << gen.text;
        write("dra-current.json", dra_spec("gpu-1-claim", "/dev/nvidia1", "550.54.15"));
    }

    static std::string cli() { return GPUBIND_CLI_PATH; }
    fs::path host(const std::string& path) const { return root() / path.substr(1); }
    void write(const std::string& name, const json& spec) const {
        std::ofstream(specs_.path() / name) << spec.dump(2);
    }
    // A DRA driver's spec for one claim: the GPU's node and the driver's libcuda.
    json dra_spec(const std::string& claim, const std::string& node,
                  const std::string& version) const {
        const std::string lib = "/usr/lib/x86_64-linux-gnu/libcuda.so." + version;
        return lowest({{"cdiVersion", "0.6.0"},
                       {"kind", "k8s.gpu.nvidia.com/device"},
                       {"devices",
                        {{{"name", claim},
                          {"containerEdits",
                           {{"deviceNodes", {{{"path", node}, {"hostPath", host(node).string()}}}},
                            {"mounts",
                             {{{"hostPath", host(lib).string()},
                               {"containerPath", lib},
                               {"options", {"ro", "nosuid", "nodev", "bind"}}}}}}}}}}});
    }
    static json one_node(const std::string& kind, const std::string& name,
                         const fs::path& host_path, const std::string& path) {
        return lowest(
            {{"cdiVersion", "0.6.0"},
             {"kind", kind},
             {"devices",
              {{{"name", name},
                {"containerEdits",
                 {{"deviceNodes", {{{"path", path}, {"hostPath", host_path.string()}}}}}}}}}});
    }
    // `spec` declaring the lowest cdiVersion its features need, as every
    // engine's CDI library reads it.
    static json lowest(json spec) {
        spec["cdiVersion"] = cdi::minimum_version(spec);
        return spec;
    }
    std::vector<Check> checks() const {
        return doctor::check_cdi_specs(doctor::gather_cdi_specs(config(), {}));
    }
    static const Check& of(const std::vector<Check>& checks, const std::string& file) {
        for (const auto& c : checks)
            if (fs::path(c.name).filename() == file) return c;
        ADD_FAILURE() << "no check for " << file;
        static const Check none;
        return none;
    }
    static std::string evidence(const Check& c) { return testing::PrintToString(c.evidence); }

    TempDir specs_{"gpubind-cdi-check-specs"};
};

TEST_F(CdiCheck, TheCurrentSpecsPassAndEachBrokenOneIsReportedWithItsReason) {
    // /dev/nvidia3 on a 2-GPU node, in a spec whose device name another defines too.
    write("nvidia3.json", one_node("example.com/gpu", "3", host("/dev/nvidia3"), "/dev/nvidia3"));
    write("again.json", one_node("example.com/gpu", "3", host("/dev/nvidia1"), "/dev/nvidia1"));
    // A hook whose program is gone.
    json hooked = one_node("example.com/hooked", "0", host("/dev/nvidia0"), "/dev/nvidia0");
    hooked["containerEdits"] = {
        {"hooks", {{{"hookName", "createContainer"}, {"path", "/nonexistent/bin/hook"}}}}};
    hooked = lowest(hooked);
    write("hook-gone.json", hooked);

    const auto all = checks();
    std::size_t problems = 0;
    for (const auto& c : all) {
        EXPECT_EQ(c.group, "cdi-specs");
        problems += c.verdict == Verdict::Problem ? 1 : 0;
    }
    EXPECT_EQ(all.size(), 6u);
    EXPECT_EQ(problems, 4u);
    EXPECT_EQ(of(all, "nvidia.com-gpu.json").verdict, Verdict::Ok)
        << evidence(of(all, "nvidia.com-gpu.json"));
    EXPECT_EQ(of(all, "dra-current.json").verdict, Verdict::Ok)
        << evidence(of(all, "dra-current.json"));

    const Check& stale = of(all, "dra-stale.json");
    EXPECT_EQ(stale.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(stale),
                HasSubstr("k8s.gpu.nvidia.com/device=gpu-0-claim: " +
                          host("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05").string() +
                          ": of driver 535.104.05, the module is 550.54.15"));
    EXPECT_THAT(stale.fix, HasSubstr("regenerate it for this driver"));

    const Check& missing = of(all, "nvidia3.json");
    EXPECT_EQ(missing.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(missing),
                HasSubstr("example.com/gpu=3: " + host("/dev/nvidia3").string() +
                          ": missing (the driver's procfs names no such device)"));

    const Check& again = of(all, "again.json");
    EXPECT_EQ(again.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(again), HasSubstr("example.com/gpu=3: also defined in " +
                                           (specs_.path() / "nvidia3.json").string()));
    EXPECT_THAT(again.fix, HasSubstr("keep each device name in one file"));

    const Check& hook = of(all, "hook-gone.json");
    EXPECT_EQ(hook.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(hook), HasSubstr("/nonexistent/bin/hook: the hook's program is missing"));
    EXPECT_THAT(hook.summary, HasSubstr("its common edits"));
}

TEST_F(CdiCheck, AVersionAboveWhatTheFeaturesNeedIsAWarning) {
    json spec = one_node("example.com/gpu", "0", host("/dev/nvidia0"), "/dev/nvidia0");
    const std::string needed = spec["cdiVersion"];
    ASSERT_NE(needed, "0.6.0");
    spec["cdiVersion"] = "0.6.0";
    write("newer.json", spec);
    const auto all = checks();
    const Check& c = of(all, "newer.json");
    EXPECT_EQ(c.verdict, Verdict::Warning);
    EXPECT_THAT(evidence(c), HasSubstr("cdiVersion 0.6.0: its features need only " + needed));
    EXPECT_EQ(c.fix, "declare cdiVersion " + needed);
}

TEST_F(CdiCheck, AMissingDriverNodeNamesSetupAsTheFix) {
    fs::remove(host("/dev/nvidia1"));
    const auto all = checks();
    const Check& c = of(all, "dra-current.json");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(c), HasSubstr(host("/dev/nvidia1").string() + ": missing"));
    EXPECT_THAT(c.fix, HasSubstr("gpubind setup --device-nodes"));
}

TEST_F(CdiCheck, ANodeWithOtherNumbersOrAnUnregisteredMajorIsAProblem) {
    json spec = one_node("example.com/gpu", "0", host("/dev/nvidia0"), "/dev/nvidia0");
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["major"] = 195;
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["minor"] = 7;
    write("numbers.json", spec);
    const auto all = checks();
    const Check& c = of(all, "numbers.json");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(evidence(c), HasSubstr("character device 195:0, the spec says 195:7"));

    // A node left by a driver no longer loaded: its major is nobody's.
    fs::remove(host("/dev/nvidia1"));
    ASSERT_EQ(::mknod(host("/dev/nvidia1").c_str(), S_IFCHR | 0666, ::makedev(511, 1)), 0);
    const auto after = checks();
    const Check& d = of(after, "dra-current.json");
    EXPECT_THAT(evidence(d),
                HasSubstr("major 511 is no driver's in " + (root() / "proc/devices").string()));
}

TEST_F(CdiCheck, AFileNoEngineWouldReadIsAProblemAndNeverFollowed) {
    TempDir elsewhere{"gpubind-cdi-check-elsewhere"};
    const fs::path target = elsewhere.path() / "spec.json";
    std::ofstream(target) << one_node("example.com/gpu", "9", host("/dev/nvidia0"), "/dev/nvidia0");
    fs::create_symlink(target, specs_.path() / "linked.json");
    std::ofstream(specs_.path() / "writable.json")
        << one_node("example.com/gpu", "8", host("/dev/nvidia0"), "/dev/nvidia0");
    fs::permissions(specs_.path() / "writable.json", fs::perms(0666));
    const auto all = checks();
    EXPECT_THAT(evidence(of(all, "linked.json")), HasSubstr("a symbolic link; refused"));
    EXPECT_EQ(of(all, "writable.json").verdict, Verdict::Problem);
    for (const char* name : {"linked.json", "writable.json"})
        EXPECT_THAT(of(all, name).fix, HasSubstr("owned by root and writable by root alone"));
}

// Issue 44: a file root owns and root alone may write, refused for what it
// says (not JSON, or a device name CDI does not allow), is mended by its
// content: the fix line says so, not "owned by root".
TEST_F(CdiCheck, ASpecThatFailsValidationNamesItsContentAsTheFix) {
    std::ofstream(specs_.path() / "broken.json") << "{\"cdiVersion\": ";
    json invalid = one_node("example.com/gpu", "7", host("/dev/nvidia0"), "/dev/nvidia0");
    invalid["devices"][0]["name"] = "seven/7";
    write("invalid.json", invalid);
    const auto all = checks();
    for (const char* name : {"broken.json", "invalid.json"}) {
        const Check& c = of(all, name);
        ASSERT_EQ(fs::status(specs_.path() / name).permissions() & fs::perms::group_write,
                  fs::perms::none);
        EXPECT_EQ(c.verdict, Verdict::Problem) << name;
        EXPECT_THAT(c.fix, testing::Not(HasSubstr("owned by root"))) << name;
        EXPECT_THAT(c.fix, HasSubstr("correct its content")) << name;
        EXPECT_THAT(c.fix, HasSubstr("gpubind cdi generate")) << name;
    }
    EXPECT_THAT(evidence(of(all, "invalid.json")), HasSubstr("devices[0].name"));
}

TEST_F(CdiCheck, TheCliChecksTheFilesNamedAndExitsFiveOnAProblem) {
    const std::string base = cli() + " cdi check --root " + root().string() + " ";
    auto ok = test::run(base + (specs_.path() / "nvidia.com-gpu.json").string() + " " +
                        (specs_.path() / "dra-current.json").string());
    EXPECT_EQ(ok.status, 0) << ok.text;
    EXPECT_THAT(ok.text, HasSubstr("2 checks: 2 ok, 0 warnings, 0 problems"));
    auto bad = test::run(base + "--json " + (specs_.path() / "dra-stale.json").string());
    EXPECT_EQ(bad.status, 5) << bad.text;
    const json j = json::parse(bad.text);
    EXPECT_EQ(j.at("schema"), "gpubind.doctor/v1");
    EXPECT_EQ(j.at("problems"), 1);
    EXPECT_EQ(j.at("checks").at(0).at("name"), (specs_.path() / "dra-stale.json").string());
}

}  // namespace
