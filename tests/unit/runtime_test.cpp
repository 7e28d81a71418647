// cdi::edit_spec: the plan as spec fields the real runtime acts on, and
// nothing else in the spec changed; what the finish hook would refuse,
// refused before the runtime runs.
#include "gpubind/cdi/runtime.hpp"

#include <algorithm>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/decide/oci.hpp"
#include "gpubind/start/shim.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

decide::PlannedDevice device(const std::string& path, unsigned major, unsigned minor, mode_t mode,
                             bool bind = true) {
    decide::PlannedDevice d;
    d.node.path = path;
    d.node.host_path = "/host" + path;
    d.node.major = major;
    d.node.minor = minor;
    d.node.mode = mode;
    d.why = "test " + path;
    d.bind = bind;
    return d;
}

decide::PlannedMount mount(const std::string& source, const std::string& target, unsigned flags) {
    decide::PlannedMount m;
    m.source = source;
    m.target = target;
    m.flags = flags;
    m.why = "test " + target;
    return m;
}

decide::Plan sample_plan() {
    decide::Plan p;
    p.devices = {device("/dev/nvidiactl", 195, 255, 0666), device("/dev/nvidia1", 195, 1, 0660),
                 // Cgroup access only (no node), and a second node with the same numbers.
                 device("/dev/nvidia-uvm", 510, 0, 0666, false),
                 device("/dev/nvidia-alias", 195, 1, 0660)};
    p.mounts = {mount("/drv/usr/lib/libcuda.so.535.1", "/usr/lib64/libcuda.so.535.1",
                      util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev),
                mount("/drv/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket",
                      util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec)};
    p.symlinks = {{"/usr/lib64/libcuda.so.1", "libcuda.so.535.1"}};
    p.proc = decide::ProcView{};
    p.library_dirs = {"/usr/lib64"};
    p.refresh_ldcache = true;
    return p;
}

cdi::FinishHook sample_hook() {
    return {"/opt/gpubind/bin/gpubind-hook", {"PATH=/usr/bin", "GPUBIND_CONFIG=/etc/g.toml"}};
}

// edit_spec with the spec's facts parsed as gpubind-runtime parses them.
json edit(const json& in, const decide::Plan& plan = sample_plan()) {
    return cdi::edit_spec(in, decide::oci::parse_spec_document(in, "/bundle"), plan, sample_hook());
}

// The error edit() throws, or a failure naming the spec.
util::Error edit_error(const json& in, const decide::Plan& plan = sample_plan()) {
    try {
        edit(in, plan);
    } catch (const util::Error& e) {
        return e;
    }
    ADD_FAILURE() << "accepted: " << in.dump();
    return util::Error(0, "", "");
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
        "namespaces": [{"type": "pid"}, {"type": "mount"}],
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
    const decide::Plan plan = sample_plan();
    const json out = edit(in, plan);

    // Removing what gpubind appended gives back the input exactly: no
    // mount, no annotation (the state the owner sees has none of gpubind's).
    json stripped = out;
    auto drop_tail = [](json& array, std::size_t n) {
        ASSERT_GE(array.size(), n);
        array.erase(array.end() - static_cast<std::ptrdiff_t>(n), array.end());
    };
    drop_tail(stripped["linux"]["devices"], 3);               // the bound devices
    drop_tail(stripped["linux"]["resources"]["devices"], 3);  // one rule per major:minor
    drop_tail(stripped["hooks"]["createRuntime"], 1);
    EXPECT_EQ(stripped, in);
    EXPECT_EQ(out["annotations"], in["annotations"]);
    EXPECT_EQ(out["mounts"], in["mounts"]);
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

    // The finish hook, after the spec's own createRuntime hooks; the prestart ones untouched.
    EXPECT_EQ(out["hooks"]["createRuntime"][1],
              json::parse(R"({"path": "/opt/gpubind/bin/gpubind-hook",
                 "args": ["gpubind-hook", "finish"],
                 "env": ["PATH=/usr/bin", "GPUBIND_CONFIG=/etc/g.toml"]})"));
    EXPECT_TRUE(cdi::marked(out));
    EXPECT_FALSE(cdi::marked(in));
}

TEST(RuntimeEditSpec, CreatesMissingSections) {
    const json in = {{"ociVersion", "1.0.2"},
                     {"root", {{"path", "rootfs"}}},
                     {"linux", {{"namespaces", {{{"type", "mount"}}}}}}};
    const json out = edit(in);
    EXPECT_EQ(out["linux"]["devices"].size(), 3u);
    EXPECT_EQ(out["linux"]["resources"]["devices"].size(), 3u);
    EXPECT_FALSE(out.contains("mounts"));  // the finish hook makes them all
    EXPECT_FALSE(out.contains("annotations"));
    EXPECT_EQ(out["hooks"]["createRuntime"].size(), 1u);
    EXPECT_FALSE(out["hooks"].contains("prestart"));
    EXPECT_EQ(out["root"], in["root"]);
    EXPECT_TRUE(cdi::marked(out));
}

TEST(RuntimeEditSpec, KeepsAnIdenticalDeviceOnceAndRefusesAnotherAtThePath) {
    json in = full_spec();
    in["linux"]["devices"].push_back(
        {{"path", "/dev/nvidiactl"}, {"type", "c"}, {"major", 195}, {"minor", 255}});
    json out = edit(in);
    int count = 0;
    for (const auto& d : out["linux"]["devices"]) count += d["path"] == "/dev/nvidiactl";
    EXPECT_EQ(count, 1);

    in["linux"]["devices"].back()["minor"] = 254;
    const util::Error e = edit_error(in);
    EXPECT_EQ(e.code().value(), EEXIST);
    EXPECT_THAT(e.what(), HasSubstr("/dev/nvidiactl"));
    EXPECT_THAT(e.what(), HasSubstr("195:255"));
}

TEST(RuntimeEditSpec, RefusesAMountAtAPlannedDestination) {
    json in = full_spec();
    in["mounts"].push_back({{"destination", "/run/nvidia-persistenced//socket"},
                            {"type", "tmpfs"},
                            {"source", "tmpfs"}});
    const util::Error e = edit_error(in);
    EXPECT_EQ(e.code().value(), EEXIST);
    EXPECT_THAT(e.what(), HasSubstr("/run/nvidia-persistenced/socket"));
}

// Issue 21 (1): a planned target in a volume of the spec is refused before
// the runtime runs (the shim used to hand runc a bind mount there: mount
// points made in the host's directory, and with shared propagation the
// driver's files left in the host's mount table). A fresh tmpfs of the
// spec (containerd's /run) is the container's own: the hook mounts there.
TEST(RuntimeEditSpec, RefusesTargetsInAVolumeOfTheSpec) {
    struct Case {
        const char* name;
        json mounts;         // appended to full_spec()'s
        const char* target;  // named in the refusal, or nullptr: accepted
    };
    const json bind_lib = {{"destination", "/usr/lib64"},
                           {"type", "bind"},
                           {"source", "/srv/shared"},
                           {"options", {"rbind", "rshared"}}};
    const json bind_lib_private = {
        {"destination", "/usr"}, {"type", "none"}, {"source", "/srv/usr"}, {"options", {"bind"}}};
    const json shared_run = {{"destination", "/run"},
                             {"type", "tmpfs"},
                             {"source", "tmpfs"},
                             {"options", {"nosuid", "rshared"}}};
    const json fresh_lib = {{"destination", "/usr/lib64"},
                            {"type", "tmpfs"},
                            {"source", "tmpfs"},
                            {"options", {"nosuid", "mode=755"}}};
    const Case cases[] = {
        {"a shared bind volume at the library directory", {bind_lib}, "/usr/lib64/libcuda"},
        {"a private bind volume above it", {bind_lib_private}, "/usr/lib64/libcuda"},
        {"a tmpfs over /run that shares its mounts",
         {shared_run},
         "/run/nvidia-persistenced/socket"},
        {"a fresh tmpfs over the volume", {bind_lib_private, fresh_lib}, nullptr},
        {"the volume over the fresh tmpfs", {fresh_lib, bind_lib_private}, "/usr/lib64/libcuda"},
        {"only the spec's own fresh /run", json::array(), nullptr},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        json in = full_spec();
        for (const auto& m : c.mounts) in["mounts"].push_back(m);
        if (!c.target) {
            const json out = edit(in);
            EXPECT_EQ(out["mounts"], in["mounts"]);
            continue;
        }
        const util::Error e = edit_error(in);
        EXPECT_EQ(e.code().value(), EXDEV);
        EXPECT_THAT(e.what(), HasSubstr(c.target));
        EXPECT_THAT(e.what(), HasSubstr("volume"));
    }
}

// Issue 21 (1): with the rootfs's propagation shared, every mount gpubind
// makes would reach its peers: refused as the hook refuses it.
TEST(RuntimeEditSpec, RefusesASharedRootfsPropagation) {
    for (const char* p : {"shared", "rshared"}) {
        json in = full_spec();
        in["linux"]["rootfsPropagation"] = p;
        const util::Error e = edit_error(in);
        EXPECT_EQ(e.code().value(), EXDEV) << p;
        EXPECT_THAT(e.what(), HasSubstr("rootfsPropagation"));
        EXPECT_THAT(e.what(), HasSubstr("shared mount"));
    }
    for (const char* p : {"slave", "rslave", "private", "rprivate"}) {
        json in = full_spec();
        in["linux"]["rootfsPropagation"] = p;
        EXPECT_NO_THROW(edit(in)) << p;
    }
}

// OCI conformance: a spec without a mount namespace of its own is refused by
// the shim with the hook's line, before runc sets anything up.
TEST(RuntimeEditSpec, RefusesASpecWithoutAMountNamespace) {
    json in = full_spec();
    in["linux"]["namespaces"] = {{{"type", "pid"}}, {{"type", "network"}}};
    const util::Error e = edit_error(in);
    EXPECT_EQ(e.code().value(), EPERM);
    EXPECT_THAT(e.what(), HasSubstr("shares this process's mount namespace"));
    in["linux"].erase("namespaces");
    EXPECT_EQ(edit_error(in).code().value(), EPERM);
}

// OCI conformance: in a user namespace runc binds the host's file at the
// device's container path; a device whose node is elsewhere (a dev root not
// "/") is a bind mount from that node. With the host's own /dev it stays a
// device entry (runc binds /dev/nvidia0 itself).
TEST(RuntimeEditSpec, UserNamespaceBindsDevicesFromTheDevRoot) {
    json in = full_spec();
    in["linux"]["namespaces"].push_back({{"type", "user"}});
    const json out = edit(in);
    for (const auto& d : out["linux"]["devices"])
        EXPECT_EQ(d["path"], "/dev/fuse") << "a device entry runc would bind from the host's "
                                             "own /dev: "
                                          << d.dump();
    std::set<std::string> bound;
    for (const auto& m : out["mounts"])
        if (m["type"] == "bind") {
            EXPECT_EQ(m["source"], "/host" + m["destination"].get<std::string>()) << m.dump();
            bound.insert(m["destination"]);
        }
    EXPECT_EQ(bound,
              (std::set<std::string>{"/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia-alias"}));
    EXPECT_EQ(out["linux"]["resources"]["devices"].size(), 4u);  // the rules as without

    decide::Plan host_dev = sample_plan();
    for (auto& d : host_dev.devices) d.node.host_path = d.node.path;
    const json same = edit(in, host_dev);
    EXPECT_EQ(same["linux"]["devices"].size(), 4u);
    EXPECT_EQ(same["mounts"], in["mounts"]);

    // A mount of the spec already at a device's path is not bound over.
    in["mounts"].push_back({{"destination", "/dev/nvidia1"}, {"type", "bind"}, {"source", "/x"}});
    EXPECT_EQ(edit_error(in).code().value(), EEXIST);
}

TEST(RuntimeEditSpec, RefusesBadShapesAndASpecEditedBefore) {
    const json edited = edit(full_spec());
    const util::Error again = edit_error(edited);
    EXPECT_EQ(again.code().value(), EINVAL);
    EXPECT_THAT(again.what(), HasSubstr("already edited"));
    EXPECT_THROW(cdi::edit_spec(json::array(), decide::oci::parse_spec_document(full_spec(), "/b"),
                                sample_plan(), sample_hook()),
                 util::Error);
    json bad = full_spec();
    bad["linux"]["devices"] = "nope";
    const util::Error e = edit_error(bad);
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("linux.devices"));
    // An entry of the spec's whose path is no string: refused, not skipped.
    bad = full_spec();
    bad["linux"]["devices"] = json::array({{{"path", 5}, {"type", "c"}}});
    const util::Error path = edit_error(bad);
    EXPECT_EQ(path.code().value(), EINVAL);
    EXPECT_THAT(path.what(), HasSubstr("linux.devices"));
    EXPECT_THAT(path.what(), HasSubstr("not string"));
    bad = full_spec();
    bad["hooks"] = json::array();
    EXPECT_THROW(edit(bad), util::Error);
}

// The mark is the finish hook the edit registers, nothing a container's
// owner sets among its annotations.
TEST(RuntimeEditSpec, MarkIsTheFinishHookEntry) {
    EXPECT_FALSE(cdi::marked(json::parse(R"({"annotations": {"gpubind.injected": "runtime"}})")));
    EXPECT_FALSE(cdi::marked(json::parse("null")));
    EXPECT_FALSE(cdi::marked(json::parse(R"({"hooks": []})")));
    EXPECT_FALSE(cdi::marked(json::parse(
        R"({"hooks": {"prestart": [{"path": "/h", "args": ["gpubind-hook", "finish"]}]}})")));
    EXPECT_FALSE(cdi::marked(json::parse(
        R"({"hooks": {"createRuntime": [{"path": "/h", "args": ["gpubind-hook"]}]}})")));
    EXPECT_FALSE(cdi::marked(json::parse(
        R"({"hooks": {"createRuntime": [{"path": "/h", "args": ["gpubind-hook", "cdi"]}]}})")));
    EXPECT_TRUE(cdi::marked(json::parse(
        R"({"hooks": {"createRuntime": [1, {"path": "/h", "args": ["gpubind-hook", "finish"]}]}})")));
}

TEST(RuntimeFinishPlan, KeepsOnlyWhatTheRuntimeCannotDo) {
    const decide::Plan plan = sample_plan();
    const decide::Plan finish = cdi::finish_plan(plan);
    EXPECT_TRUE(finish.devices.empty());
    EXPECT_TRUE(finish.mounts.empty());
    // In a spec gpubind-runtime edited: every mount, no device.
    const decide::Plan after_edit = cdi::edited_finish_plan(plan);
    EXPECT_TRUE(after_edit.devices.empty());
    ASSERT_EQ(after_edit.mounts.size(), plan.mounts.size());
    for (std::size_t i = 0; i < plan.mounts.size(); ++i)
        EXPECT_EQ(after_edit.mounts[i].target, plan.mounts[i].target);
    ASSERT_EQ(finish.symlinks.size(), 1u);
    EXPECT_EQ(finish.symlinks[0].path, plan.symlinks[0].path);
    EXPECT_TRUE(finish.proc.has_value());
    EXPECT_EQ(finish.library_dirs, plan.library_dirs);
    EXPECT_TRUE(finish.refresh_ldcache);
}

// IMEX channel nodes go into the spec like any device; the CUDA compat file is
// not in the spec but in the finishing hook's plan, before its cache refresh.
TEST(RuntimeEditSpec, ImexChannelsAndTheCudaCompatFile) {
    decide::Plan plan = sample_plan();
    plan.devices.push_back(device("/dev/nvidia-caps-imex-channels/channel1", 508, 1, 0666));
    plan.files.push_back({"/etc/ld.so.conf.d/000-cuda-compat.conf", "/usr/local/cuda/compat\n",
                          "CUDA forward compatibility"});
    const json out = edit(full_spec(), plan);
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
    EXPECT_NE(
        std::find(
            out["linux"]["resources"]["devices"].begin(),
            out["linux"]["resources"]["devices"].end(),
            json{{"allow", true}, {"type", "c"}, {"major", 508}, {"minor", 1}, {"access", "rw"}}),
        out["linux"]["resources"]["devices"].end());
    EXPECT_EQ(out.dump().find("000-cuda-compat"), std::string::npos);
    const decide::Plan finish = cdi::finish_plan(plan);
    ASSERT_EQ(finish.files.size(), 1u);
    EXPECT_EQ(finish.files[0].path, plan.files[0].path);
    EXPECT_EQ(finish.files[0].content, plan.files[0].content);
}

// gpubind-runtime's command line, read as runc and crun read theirs: the
// bundle it edits must be the one the runtime reads.
start::Invocation invoked(std::vector<const char*> args) {
    args.insert(args.begin(), "gpubind-runtime");
    return start::parse_invocation(static_cast<int>(args.size()), args.data());
}

TEST(RuntimeInvocation, GlobalFlagsThenTheCommandAndItsBundle) {
    auto a = invoked({"--root", "/run/runc", "--log=/l.json", "--log-format", "json", "create",
                      "--bundle", "/b1", "--pid-file", "/p", "c1"});
    EXPECT_EQ(a.command, "create");
    EXPECT_EQ(a.bundle, "/b1");
    EXPECT_EQ(a.id, "c1");
    EXPECT_EQ(a.log, "/l.json");
    EXPECT_EQ(a.log_format, "json");
    // Every spelling of the bundle flag, and the id after "--".
    for (const auto& args :
         std::vector<std::vector<const char*>>{{"run", "-b", "/b2", "c2"},
                                               {"run", "--bundle=/b2", "c2"},
                                               {"run", "-bundle", "/b2", "--detach", "c2"},
                                               {"run", "-b=/b2", "--", "c2"}}) {
        const auto r = invoked(args);
        EXPECT_EQ(r.command, "run");
        EXPECT_EQ(r.bundle, "/b2") << ::testing::PrintToString(args);
        EXPECT_EQ(r.id, "c2") << ::testing::PrintToString(args);
    }
    // No bundle flag: the working directory, as runc takes it.
    EXPECT_EQ(invoked({"create", "c3"}).bundle, ".");
    // A global flag's value is not the command ("--root create" names a directory).
    EXPECT_EQ(invoked({"--root", "create", "state", "c4"}).command, "state");
    // Another command: nothing of it read.
    const auto other = invoked({"--log", "/l", "delete", "--force", "--unknown", "c5"});
    EXPECT_EQ(other.command, "delete");
    EXPECT_EQ(other.log, "/l");
    EXPECT_EQ(other.id, "");
    EXPECT_EQ(invoked({"--version"}).command, "");
}

TEST(RuntimeInvocation, AnUnknownFlagOfCreateOrRunIsRefusedNamingIt) {
    for (const auto& args : std::vector<std::vector<const char*>>{
             {"create", "--config", "/other/config.json", "--bundle", "/b", "c"},
             {"run", "--bundle", "/b", "--config=/other.json", "c"},
             {"create", "-x", "c"}}) {
        try {
            invoked(args);
            ADD_FAILURE() << "accepted " << ::testing::PrintToString(args);
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
            EXPECT_THAT(e.what(), HasSubstr("arguments"));
            EXPECT_THAT(e.what(), HasSubstr("which config.json"));
        }
    }
}

}  // namespace
}  // namespace gpubind
