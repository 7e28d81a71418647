// runtime::edit_spec: the plan as spec fields the real runtime acts on, and
// nothing else in the spec changed.
#include "gpubind/runtime.hpp"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/error.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

PlannedDevice device(const std::string& path, unsigned major, unsigned minor, mode_t mode,
                     bool bind = true) {
    PlannedDevice d;
    d.node.path = path;
    d.node.host_path = "/host" + path;
    d.node.major = major;
    d.node.minor = minor;
    d.node.mode = mode;
    d.why = "test " + path;
    d.bind = bind;
    return d;
}

PlannedMount mount(const std::string& source, const std::string& target, unsigned flags) {
    PlannedMount m;
    m.source = source;
    m.target = target;
    m.flags = flags;
    m.why = "test " + target;
    return m;
}

Plan sample_plan() {
    Plan p;
    p.devices = {device("/dev/nvidiactl", 195, 255, 0666), device("/dev/nvidia1", 195, 1, 0660),
                 // Cgroup access only (no node), and a second node with the same numbers.
                 device("/dev/nvidia-uvm", 510, 0, 0666, false),
                 device("/dev/nvidia-alias", 195, 1, 0660)};
    p.mounts = {mount("/drv/usr/lib/libcuda.so.535.1", "/usr/lib64/libcuda.so.535.1",
                      kMountReadOnly | kMountNoSuid | kMountNoDev),
                mount("/drv/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket",
                      kMountNoSuid | kMountNoDev | kMountNoExec)};
    p.symlinks = {{"/usr/lib64/libcuda.so.1", "libcuda.so.535.1"}};
    p.proc = ProcView{};
    p.library_dirs = {"/usr/lib64"};
    p.refresh_ldcache = true;
    return p;
}

runtime::FinishHook sample_hook() {
    return {"/opt/gpubind/bin/gpubind-hook", {"PATH=/usr/bin", "GPUBIND_CONFIG=/etc/g.toml"}};
}

// A spec with every container gpubind appends to already present, and fields
// gpubind knows nothing about at every level.
json full_spec() {
    return json::parse(R"({
      "ociVersion": "1.0.2",
      "x-vendor": {"nested": [1, 2.5, "three", null, {"deep": true}]},
      "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=1"], "oomScoreAdj": -17},
      "root": {"path": "rootfs"},
      "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                 {"destination": "/run", "type": "tmpfs", "source": "tmpfs"}],
      "hooks": {"prestart": [{"path": "/other/hook"}],
                "createRuntime": [{"path": "/usr/bin/other", "timeout": 5}]},
      "annotations": {"io.example/owner": "me"},
      "linux": {
        "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
        "resources": {"devices": [{"allow": false, "access": "rwm"}],
                      "memory": {"limit": 9223372036854775807}},
        "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"},
        "cgroupsPath": "/kubepods/x"
      }
    })");
}

TEST(RuntimeEditSpec, AppendsExactlyThePlanAndKeepsEverythingElse) {
    const json in = full_spec();
    const Plan plan = sample_plan();
    const json out = runtime::edit_spec(in, plan, sample_hook());

    // Removing what gpubind appended gives back the input exactly.
    json stripped = out;
    auto drop_tail = [](json& array, std::size_t n) {
        ASSERT_GE(array.size(), n);
        array.erase(array.end() - static_cast<std::ptrdiff_t>(n), array.end());
    };
    drop_tail(stripped["linux"]["devices"], 3);               // the bound devices
    drop_tail(stripped["linux"]["resources"]["devices"], 3);  // one rule per major:minor
    drop_tail(stripped["mounts"], 1);  // the socket, under the spec's /run volume
    drop_tail(stripped["hooks"]["createRuntime"], 1);
    stripped["annotations"].erase("gpubind.injected");
    EXPECT_EQ(stripped, in);
    EXPECT_EQ(out["linux"]["resources"]["memory"]["limit"].get<std::int64_t>(),
              9223372036854775807LL);

    // Devices the runtime creates: the bound ones, with the host node's numbers and mode.
    const json& devices = out["linux"]["devices"];
    std::size_t at = 1;
    for (const auto& d : plan.devices) {
        if (!d.bind) continue;
        EXPECT_EQ(devices[at], (json{{"path", d.node.path},
                                     {"type", "c"},
                                     {"major", d.node.major},
                                     {"minor", d.node.minor},
                                     {"fileMode", d.node.mode & 0777},
                                     {"uid", 0},
                                     {"gid", 0}}));
        ++at;
    }
    EXPECT_EQ(devices[2]["fileMode"], 0660);

    // Cgroup rules: allowed read/write, for every device, each major:minor once, after the
    // deny-all.
    const json& rules = out["linux"]["resources"]["devices"];
    const json want_rules = json::parse(R"([
      {"allow": false, "access": "rwm"},
      {"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rw"},
      {"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rw"},
      {"allow": true, "type": "c", "major": 510, "minor": 0, "access": "rw"}])");
    EXPECT_EQ(rules, want_rules);

    // Bind mounts with the plan's flags, after the spec's own: only where a
    // volume of the spec covers the target (the library is the finish hook's).
    ASSERT_EQ(out["mounts"].size(), 3u);
    EXPECT_EQ(out["mounts"][2], json::parse(R"({"destination": "/run/nvidia-persistenced/socket",
        "type": "bind", "source": "/drv/run/nvidia-persistenced/socket",
        "options": ["rbind", "nosuid", "nodev", "noexec"]})"));

    // The finish hook, after the spec's own createRuntime hooks; the prestart ones untouched.
    EXPECT_EQ(out["hooks"]["createRuntime"][1],
              json::parse(R"({"path": "/opt/gpubind/bin/gpubind-hook",
                 "args": ["gpubind-hook", "finish"],
                 "env": ["PATH=/usr/bin", "GPUBIND_CONFIG=/etc/g.toml"]})"));
    EXPECT_EQ(out["annotations"]["gpubind.injected"], "runtime");
    EXPECT_TRUE(runtime::marked(out));
    EXPECT_FALSE(runtime::marked(in));
}

TEST(RuntimeEditSpec, CreatesMissingSections) {
    const json in = {{"ociVersion", "1.0.2"}, {"root", {{"path", "rootfs"}}}};
    const json out = runtime::edit_spec(in, sample_plan(), sample_hook());
    EXPECT_EQ(out["linux"]["devices"].size(), 3u);
    EXPECT_EQ(out["linux"]["resources"]["devices"].size(), 3u);
    EXPECT_EQ(out["mounts"].size(), 0u);  // no volume: the finish hook makes them all
    EXPECT_EQ(out["hooks"]["createRuntime"].size(), 1u);
    EXPECT_FALSE(out["hooks"].contains("prestart"));
    EXPECT_EQ(out["root"], in["root"]);
    EXPECT_TRUE(runtime::marked(out));
}

TEST(RuntimeEditSpec, KeepsAnIdenticalDeviceOnceAndRefusesAnotherAtThePath) {
    json in = full_spec();
    in["linux"]["devices"].push_back(
        {{"path", "/dev/nvidiactl"}, {"type", "c"}, {"major", 195}, {"minor", 255}});
    json out = runtime::edit_spec(in, sample_plan(), sample_hook());
    int count = 0;
    for (const auto& d : out["linux"]["devices"]) count += d["path"] == "/dev/nvidiactl";
    EXPECT_EQ(count, 1);

    in["linux"]["devices"].back()["minor"] = 254;
    try {
        runtime::edit_spec(in, sample_plan(), sample_hook());
        FAIL() << "a different device at /dev/nvidiactl was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EEXIST);
        EXPECT_THAT(e.what(), HasSubstr("/dev/nvidiactl"));
        EXPECT_THAT(e.what(), HasSubstr("195:255"));
    }
}

TEST(RuntimeEditSpec, RefusesAMountAtAPlannedDestination) {
    json in = full_spec();
    in["mounts"].push_back({{"destination", "/run/nvidia-persistenced//socket"},
                            {"type", "tmpfs"},
                            {"source", "tmpfs"}});
    try {
        runtime::edit_spec(in, sample_plan(), sample_hook());
        FAIL() << "a mount over the spec's own was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EEXIST);
        EXPECT_THAT(e.what(), HasSubstr("/run/nvidia-persistenced/socket"));
    }
}

TEST(RuntimeEditSpec, RefusesBadShapesAndASpecEditedBefore) {
    const json edited = runtime::edit_spec(full_spec(), sample_plan(), sample_hook());
    EXPECT_THROW(runtime::edit_spec(edited, sample_plan(), sample_hook()), Error);
    EXPECT_THROW(runtime::edit_spec(json::array(), sample_plan(), sample_hook()), Error);
    json bad = full_spec();
    bad["linux"]["devices"] = "nope";
    try {
        runtime::edit_spec(bad, sample_plan(), sample_hook());
        FAIL() << "linux.devices as a string was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr("linux.devices"));
    }
    bad = full_spec();
    bad["mounts"] = json::object();
    EXPECT_THROW(runtime::edit_spec(bad, sample_plan(), sample_hook()), Error);
}

TEST(RuntimeEditSpec, MarkIsOnlyTheExactAnnotation) {
    EXPECT_FALSE(runtime::marked(json::parse(R"({"annotations": {"gpubind.injected": "hook"}})")));
    EXPECT_FALSE(runtime::marked(json::parse(R"({"annotations": {"gpubind.injected": 1}})")));
    EXPECT_FALSE(runtime::marked(json::parse(R"({"annotations": []})")));
    EXPECT_FALSE(runtime::marked(json::parse("null")));
    EXPECT_TRUE(
        runtime::marked(json::parse(R"({"annotations": {"gpubind.injected": "runtime"}})")));
}

// A volume of the spec at, above or (for a planned directory) below a target
// gives the mount to the runtime; elsewhere the finish hook makes it.
TEST(RuntimeMounts, WhereASpecMountCoversTheTarget) {
    auto spec_with = [](std::vector<std::string> dests) {
        json s = {{"mounts", json::array()}};
        for (const auto& d : dests) s["mounts"].push_back({{"destination", d}, {"type", "bind"}});
        return s;
    };
    const PlannedMount lib = mount("/drv/libcuda.so.1", "/usr/lib64/libcuda.so.1", 0);
    EXPECT_FALSE(runtime::runtime_mounts(lib, spec_with({"/proc", "/dev", "/etc/hosts"})));
    EXPECT_FALSE(runtime::runtime_mounts(lib, spec_with({"/usr/lib6"})));  // a prefix, not a parent
    EXPECT_FALSE(runtime::runtime_mounts(lib, json::object()));
    EXPECT_TRUE(runtime::runtime_mounts(lib, spec_with({"/usr/lib64"})));
    EXPECT_TRUE(runtime::runtime_mounts(lib, spec_with({"/usr/"})));
    EXPECT_TRUE(runtime::runtime_mounts(lib, spec_with({"/usr/lib64/libcuda.so.1"})));
    PlannedMount dir = mount("/drv/run/nvidia-mps", "/tmp/nvidia-mps", 0);
    dir.directory = true;
    EXPECT_TRUE(runtime::runtime_mounts(dir, spec_with({"/tmp/nvidia-mps/pipe"})));
    EXPECT_FALSE(runtime::runtime_mounts(lib, spec_with({"/usr/lib64/libcuda.so.1/x"})));
}

TEST(RuntimeFinishPlan, KeepsOnlyWhatTheRuntimeCannotDo) {
    const Plan plan = sample_plan();
    const Plan finish = runtime::finish_plan(plan);
    EXPECT_TRUE(finish.devices.empty());
    EXPECT_TRUE(finish.mounts.empty());
    // In a spec gpubind-runtime edited: the mounts it left out.
    const json edited = runtime::edit_spec(full_spec(), plan, sample_hook());
    const Plan after_edit = runtime::finish_plan(plan, edited);
    EXPECT_TRUE(after_edit.devices.empty());
    ASSERT_EQ(after_edit.mounts.size(), 1u);
    EXPECT_EQ(after_edit.mounts[0].target, "/usr/lib64/libcuda.so.535.1");
    ASSERT_EQ(finish.symlinks.size(), 1u);
    EXPECT_EQ(finish.symlinks[0].path, plan.symlinks[0].path);
    EXPECT_TRUE(finish.proc.has_value());
    EXPECT_EQ(finish.library_dirs, plan.library_dirs);
    EXPECT_TRUE(finish.refresh_ldcache);
}

// IMEX channel nodes go into the spec like any device; the CUDA compat file is
// not in the spec but in the finishing hook's plan, before its cache refresh.
TEST(RuntimeEditSpec, ImexChannelsAndTheCudaCompatFile) {
    Plan plan = sample_plan();
    plan.devices.push_back(device("/dev/nvidia-caps-imex-channels/channel1", 508, 1, 0666));
    plan.files.push_back({"/etc/ld.so.conf.d/000-cuda-compat.conf", "/usr/local/cuda/compat\n",
                          "CUDA forward compatibility"});
    const json out = runtime::edit_spec(full_spec(), plan, sample_hook());
    EXPECT_NE(std::find(out["linux"]["devices"].begin(), out["linux"]["devices"].end(),
                        json{{"path", "/dev/nvidia-caps-imex-channels/channel1"},
                             {"type", "c"},
                             {"major", 508},
                             {"minor", 1},
                             {"fileMode", 0666},
                             {"uid", 0},
                             {"gid", 0}}),
              out["linux"]["devices"].end())
        << out["linux"]["devices"].dump();
    EXPECT_NE(std::find(out["linux"]["resources"]["devices"].begin(),
                        out["linux"]["resources"]["devices"].end(),
                        json{{"allow", true}, {"type", "c"}, {"major", 508}, {"minor", 1},
                             {"access", "rw"}}),
              out["linux"]["resources"]["devices"].end());
    EXPECT_EQ(out.dump().find("000-cuda-compat"), std::string::npos);
    const Plan finish = runtime::finish_plan(plan);
    ASSERT_EQ(finish.files.size(), 1u);
    EXPECT_EQ(finish.files[0].path, plan.files[0].path);
    EXPECT_EQ(finish.files[0].content, plan.files[0].content);
}

}  // namespace
}  // namespace gpubind
