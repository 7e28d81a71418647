// Reading the OCI state and config.json: what is accepted, and that every
// rejection names the field that is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json minimal_spec() {
    return {{"ociVersion", "1.0.2"},
            {"root", {{"path", "rootfs"}}},
            {"process", {{"env", {"PATH=/bin", "A=1"}}, {"args", {"sh"}}}}};
}

using test::error_of;

decide::oci::Spec spec_of(const json& doc) {
    return decide::oci::parse_spec(doc.dump(), "/bundles/c1");
}

TEST(OciState, ParsesTheHookInput) {
    auto st = decide::oci::parse_state(
        R"({"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/b/c1",
            "annotations":{"x":"y"}})",
        "stdin");
    EXPECT_EQ(st.oci_version, "1.0.2");
    EXPECT_EQ(st.id, "c1");
    EXPECT_EQ(st.status, "created");
    EXPECT_EQ(st.pid, 4242);
    EXPECT_EQ(st.bundle, "/b/c1");
}

// What crun 1.8.1 writes on a prestart hook's stdin (captured from a run):
// "1.0" as its version, status "created", and "root", which runc leaves out.
TEST(OciState, ParsesCrunsState) {
    auto st = decide::oci::parse_state(
        R"({"ociVersion":"1.0","id":"t3","pid":27610,"root":"rootfs","bundle":"/tmp/crun-try",)"
        R"("status":"created","annotations":{"foo":"bar"}})",
        "stdin");
    EXPECT_EQ(st.oci_version, "1.0");
    EXPECT_EQ(st.id, "t3");
    EXPECT_EQ(st.pid, 27610);
    EXPECT_EQ(st.bundle, "/tmp/crun-try");
    EXPECT_EQ(st.root, "rootfs");
    EXPECT_EQ(st.annotations, (std::map<std::string, std::string>{{"foo", "bar"}}));
    // runc 1.1.5's, for comparison: "creating" in prestart, no root.
    auto runc = decide::oci::parse_state(
        R"({"ociVersion":"1.0.2-dev","id":"t4","status":"creating","pid":27448,)"
        R"("bundle":"/tmp/crun-try","annotations":{"foo":"bar"}})",
        "stdin");
    EXPECT_EQ(runc.status, "creating");
    EXPECT_EQ(runc.root, "");
    EXPECT_EQ(runc.annotations.at("foo"), "bar");
}

TEST(OciState, RejectsBadFieldsNamingThem) {
    json good = {
        {"ociVersion", "1.0.2"}, {"id", "c1"}, {"status", "created"}, {"pid", 1}, {"bundle", "/b"}};
    struct Case {
        const char* field;
        json value;
    };
    for (const auto& c : std::vector<Case>{{"pid", 0},
                                           {"pid", -5},
                                           {"pid", 1.5},
                                           {"pid", "12"},
                                           {"pid", 1LL << 40},
                                           {"id", 7},
                                           {"id", ""},
                                           {"status", json::array()},
                                           {"bundle", "relative/dir"},
                                           {"bundle", nullptr},
                                           {"root", 3},
                                           {"annotations", json::array({"a"})},
                                           {"annotations", {{"a", 1}}}}) {
        json doc = good;
        doc[c.field] = c.value;
        auto e = error_of([&] { decide::oci::parse_state(doc.dump(), "stdin"); });
        EXPECT_EQ(e.code().value(), EINVAL) << doc.dump();
        EXPECT_THAT(e.what(), HasSubstr(std::string("parse state stdin: ") + c.field))
            << doc.dump();
    }
    json missing = good;
    missing.erase("pid");
    EXPECT_THAT(error_of([&] { decide::oci::parse_state(missing.dump(), "stdin"); }).what(),
                HasSubstr("pid: missing"));
}

TEST(OciState, RejectsGarbageAndOversizedInput) {
    for (const char* text : {"", "garbage", "{", "[1,2]", "\"str\"", "{\"id\": }"}) {
        auto e = error_of([&] { decide::oci::parse_state(text, "stdin"); });
        EXPECT_EQ(e.code().value(), EINVAL) << text;
        EXPECT_THAT(e.what(), HasSubstr("parse state stdin")) << text;
    }
    std::string big(decide::oci::kMaxStateSize + 1, ' ');
    auto e = error_of([&] { decide::oci::parse_state(big, "stdin"); });
    EXPECT_EQ(e.code().value(), EFBIG);
    EXPECT_THAT(e.what(), HasSubstr("limit"));
}

TEST(OciSpec, FreshTmpfsIsATmpfsMountNoLaterMountCovers) {
    auto spec = [](std::vector<decide::oci::Mount> mounts) {
        decide::oci::Spec s;
        s.mounts = std::move(mounts);
        return s.fresh_tmpfs();
    };
    using V = std::vector<std::string>;
    const decide::oci::Mount run{"/run", "tmpfs", "tmpfs", {"nosuid", "mode=755"}};
    EXPECT_EQ(spec({run}), V{"/run"});
    EXPECT_EQ(spec({{"/run//x/", "tmpfs", "tmpfs", {}}, {"run2", "tmpfs", "tmpfs", {}}}),
              (V{"/run2", "/run/x"}));
    // A bind (of a host directory, whatever its type) is no fresh tmpfs.
    EXPECT_EQ(spec({{"/run", "/host/shm", "tmpfs", {"rbind"}}}), V{});
    EXPECT_EQ(spec({{"/run", "/host/shm", "tmpfs", {"bind", "ro"}}}), V{});
    EXPECT_EQ(spec({{"/run", "/host/run", "bind", {"rbind"}}}), V{});
    // Only a new tmpfs's options: a remount (of what is there) or an option
    // gpubind does not know is no fresh tmpfs.
    EXPECT_EQ(spec({{"/run", "tmpfs", "tmpfs", {"remount"}}}), V{});
    EXPECT_EQ(spec({{"/run", "tmpfs", "tmpfs", {"nosuid", "rshared"}}}), V{});
    EXPECT_EQ(spec({{"/run", "tmpfs", "tmpfs", {"nosuid", "X-made-up"}}}), V{});
    EXPECT_EQ(spec({{"/run",
                     "tmpfs",
                     "tmpfs",
                     {"rw", "nosuid", "nodev", "noexec", "relatime", "size=65536k", "mode=755",
                      "uid=0", "gid=0", "tmpcopyup", "rprivate"}}}),
              V{"/run"});
    // A later relative destination is the runtime's below "/" too.
    EXPECT_EQ(spec({run, {"run", "/host/run", "bind", {"rbind"}}}), V{});
    // A later mount at its path, or above it, hides it; one below does not.
    EXPECT_EQ(spec({run, {"/run/", "/host/run", "bind", {"rbind"}}}), V{});
    EXPECT_EQ(spec({{"/run/user", "tmpfs", "tmpfs", {}}, {"/run", "/h", "bind", {"rbind"}}}), V{});
    EXPECT_EQ(spec({{"/run/user", "tmpfs", "tmpfs", {}}, {"/", "/h", "bind", {"rbind"}}}), V{});
    EXPECT_EQ(spec({run, {"/run/secrets", "/h", "bind", {"rbind"}}}), V{"/run"});
    EXPECT_EQ(spec({{"/runx", "/h", "bind", {"rbind"}}, run}), V{"/run"});
    EXPECT_EQ(spec({{"/", "tmpfs", "tmpfs", {}}}), V{});
}

TEST(OciSpec, RelativeRootIsUnderTheBundleAbsoluteIsKept) {
    EXPECT_EQ(spec_of(minimal_spec()).rootfs, "/bundles/c1/rootfs");
    json doc = minimal_spec();
    doc["root"]["path"] = "./sub/../fs";
    EXPECT_EQ(spec_of(doc).rootfs, "/bundles/c1/fs");
    doc["root"] = {{"path", "/var/lib/images/x"}, {"readonly", true}};
    auto spec = spec_of(doc);
    EXPECT_EQ(spec.rootfs, "/var/lib/images/x");
    EXPECT_TRUE(spec.rootfs_readonly);
}

TEST(OciSpec, ReadsTheFieldsTheHookUses) {
    json doc = minimal_spec();
    doc["process"]["capabilities"] = {{"bounding", {"CAP_CHOWN", "CAP_SYS_ADMIN"}}};
    doc["mounts"] = {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
                     {{"destination", "/data"}, {"source", "/srv"}, {"options", {"rbind", "ro"}}}};
    doc["linux"] = {{"uidMappings", {{{"containerID", 0}, {"hostID", 100000}, {"size", 65536}}}},
                    {"gidMappings", {{{"containerID", 0}, {"hostID", 200000}, {"size", 1}}}},
                    {"cgroupsPath", "/kubepods/pod1/c1"}};
    auto spec = spec_of(doc);
    EXPECT_EQ(spec.bundle, "/bundles/c1");
    EXPECT_EQ(spec.env, (std::vector<std::string>{"PATH=/bin", "A=1"}));
    EXPECT_TRUE(spec.privileged());
    ASSERT_EQ(spec.mounts.size(), 2u);
    EXPECT_EQ(spec.mounts[1].destination, "/data");
    EXPECT_EQ(spec.mounts[1].source, "/srv");
    EXPECT_EQ(spec.mounts[1].options, (std::vector<std::string>{"rbind", "ro"}));
    EXPECT_EQ(spec.mounts[0].type, "proc");
    ASSERT_EQ(spec.uid_mappings.size(), 1u);
    EXPECT_EQ(spec.uid_mappings[0].host_id, 100000u);
    EXPECT_EQ(spec.uid_mappings[0].size, 65536u);
    EXPECT_EQ(spec.gid_mappings[0].host_id, 200000u);
    EXPECT_EQ(spec.cgroups_path, "/kubepods/pod1/c1");
    EXPECT_EQ((*spec.doc)["ociVersion"], "1.0.2");  // the document is kept whole
}

TEST(OciSpec, NoProcessOrCapabilitiesIsUnprivilegedWithNoEnv) {
    json doc = {{"root", {{"path", "rootfs"}}}};
    auto spec = spec_of(doc);
    EXPECT_TRUE(spec.env.empty());
    EXPECT_FALSE(spec.privileged());
    doc = minimal_spec();
    doc["process"]["capabilities"] = {{"bounding", {"CAP_NET_ADMIN"}},
                                      {"effective", {"CAP_SYS_ADMIN"}}};
    EXPECT_FALSE(spec_of(doc).privileged());  // only the bounding set counts
}

TEST(OciSpec, GetenvReturnsTheLastValue) {
    json doc = minimal_spec();
    doc["process"]["env"] = {"A=1", "AB=2", "A=3", "EMPTY=", "X==y", "A_B=4"};
    auto spec = spec_of(doc);
    EXPECT_EQ(spec.getenv("A"), "3");
    EXPECT_EQ(spec.getenv("AB"), "2");
    EXPECT_EQ(spec.getenv("EMPTY"), "");
    EXPECT_EQ(spec.getenv("X"), "=y");
    EXPECT_EQ(spec.getenv("B"), std::nullopt);
    EXPECT_EQ(spec.getenv("A_"), std::nullopt);
}

TEST(OciSpec, RejectsWrongTypesNamingTheField) {
    struct Case {
        json::json_pointer where;
        json value;
        const char* message;
    };
    const std::vector<Case> cases = {
        {json::json_pointer("/root"), "rootfs", "root: not an object"},
        {json::json_pointer("/root/path"), 3, "root.path: not a string"},
        {json::json_pointer("/root/path"), "", "root.path: empty"},
        {json::json_pointer("/root/readonly"), "yes", "root.readonly: not a boolean"},
        {json::json_pointer("/process"), json::array(), "process: not an object"},
        {json::json_pointer("/process/env"), "A=1", "process.env: not an array"},
        {json::json_pointer("/process/env/1"), 5, "process.env[1]: not a string"},
        {json::json_pointer("/process/env/1"), "NOEQUALS", "process.env[1]: no '='"},
        {json::json_pointer("/process/capabilities"),
         {{"bounding", "CAP_SYS_ADMIN"}},
         "process.capabilities.bounding: not an array"},
        {json::json_pointer("/mounts"), json::object(), "mounts: not an array"},
        {json::json_pointer("/mounts"),
         {{{"source", "/dev/null"}}},
         "mounts[0].destination: missing"},
        {json::json_pointer("/mounts"),
         {{{"destination", "/x"}, {"options", {1}}}},
         "mounts[0].options[0]: not a string"},
        {json::json_pointer("/linux"),
         {{"uidMappings", {{{"containerID", 0}, {"hostID", -1}, {"size", 1}}}}},
         "linux.uidMappings[0].hostID: not a non-negative integer"},
        {json::json_pointer("/linux"),
         {{"gidMappings", {{{"containerID", 0}, {"hostID", 1}, {"size", 1LL << 33}}}}},
         "linux.gidMappings[0].size: 8589934592 is out of range"},
        {json::json_pointer("/linux"), {{"cgroupsPath", false}}, "linux.cgroupsPath: not a string"},
    };
    for (const auto& c : cases) {
        json doc = minimal_spec();
        doc[c.where] = c.value;
        auto e = error_of([&] { spec_of(doc); });
        EXPECT_EQ(e.code().value(), EINVAL) << doc.dump();
        EXPECT_THAT(e.what(),
                    HasSubstr(std::string("parse spec /bundles/c1/config.json: ") + c.message))
            << doc.dump();
    }
    json no_root = minimal_spec();
    no_root.erase("root");
    EXPECT_THAT(error_of([&] { spec_of(no_root); }).what(), HasSubstr("root: missing"));
}

// runc refuses such entries too; gpubind says which variable, and never
// reads a value cut at a NUL byte as something else. An entry past the size
// cap, which runc starts, is read: only a request is refused for it
// (request_test, ReadRequest.TheEnvironmentsCapsRefuseOnlyARequest).
TEST(OciSpec, RejectsNulBytesNamingTheVariableAndReadsOversizedEntries) {
    json doc = minimal_spec();
    doc["process"]["env"] = {"PATH=/bin", std::string("NVIDIA_VISIBLE_DEVICES=0\0"
                                                      "1",
                                                      26)};
    auto e = error_of([&] { spec_of(doc); });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(),
                HasSubstr("process.env[1] (NVIDIA_VISIBLE_DEVICES): contains a NUL byte"));

    const std::string big =
        "NVIDIA_VISIBLE_DEVICES=" + std::string(decide::oci::kMaxEnvEntrySize, '0');
    doc["process"]["env"][1] = big;
    EXPECT_EQ(spec_of(doc).env.at(1), big);
    doc["process"]["env"] = std::vector<std::string>(decide::oci::kMaxEnvEntries + 1, "A=1");
    EXPECT_EQ(spec_of(doc).env.size(), decide::oci::kMaxEnvEntries + 1);
    doc["process"]["env"] = {"PATH=/bin", ""};
    // A name that is itself odd is not repeated.
    doc["process"]["env"][1] = std::string("BAD\nNAME=1\0", 11);
    EXPECT_THAT(error_of([&] { spec_of(doc); }).what(),
                HasSubstr("process.env[1]: contains a NUL byte"));
}

// Issue 44 (F8's kin): each mount's "a later mount covers it" is a lookup
// of its path and the paths above it, not a scan of the later mounts: 40,000
// tmpfs mounts took the quadratic scan some 20 s of CPU, linear a fraction of
// one. The bound only catches the quadratic scan coming back.
TEST(OciSpec, FreshTmpfsOfManyMountsIsLinear) {
    constexpr std::size_t kMounts = 40'000;
    decide::oci::Spec s;
    for (std::size_t i = 0; i < kMounts; ++i)
        s.mounts.push_back({"/t/" + std::to_string(i), "tmpfs", "tmpfs", {"nosuid"}});
    s.mounts.push_back({"/t/7/", "/host", "bind", {"rbind"}});  // covers /t/7
    s.mounts.push_back({"/t/8/x", "tmpfs", "tmpfs", {}});       // covers nothing above it
    const std::clock_t start = std::clock();
    const std::vector<std::string> fresh = s.fresh_tmpfs();
    const double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
    ASSERT_EQ(fresh.size(), kMounts);  // the 40,000 but /t/7, and /t/8/x
    EXPECT_EQ(fresh.front(), "/t/8/x");
    EXPECT_EQ(std::count(fresh.begin(), fresh.end(), "/t/7"), 0);
    EXPECT_EQ(std::count(fresh.begin(), fresh.end(), "/t/8"), 1);
    EXPECT_LT(seconds, 5.0) << "judging " << s.mounts.size() << " mounts";
}

TEST(OciSpec, RejectsGarbageAndOversizedInput) {
    for (const char* text : {"", "garbage", "[]", "{\"root\":{\"path\":\"r\"}", "null"}) {
        auto e = error_of([&] { decide::oci::parse_spec(text, "/b"); });
        EXPECT_EQ(e.code().value(), EINVAL) << text;
        EXPECT_THAT(e.what(), HasSubstr("parse spec /b/config.json")) << text;
    }
    std::string big = minimal_spec().dump();
    big.append(decide::oci::kMaxSpecSize + 1 - big.size(), ' ');  // valid JSON, one byte too large
    auto e = error_of([&] { decide::oci::parse_spec(big, "/b"); });
    EXPECT_EQ(e.code().value(), EFBIG);
}

TEST(OciSpec, DeepNestingIsAnErrorNotACrash) {
    std::string deep(1'000'000, '[');
    EXPECT_THROW(decide::oci::parse_spec(deep, "/b"), util::Error);
    std::string nested = std::string(100'000, '[') + std::string(100'000, ']');
    EXPECT_THROW(decide::oci::parse_spec(nested, "/b"), util::Error);  // valid JSON, not an object
}

// Issue 21 (5): a valid spec with a member nested 200,000 deep parsed, and
// gpubind-runtime's copy of the document then overflowed the stack. Such a
// spec is refused when parsed, naming the limit; one just within it is read
// and copies; brackets inside strings are not nesting.
TEST(OciSpec, NestingPastTheLimitIsRefusedWhenParsed) {
    auto with_member = [](std::size_t depth) {
        std::string text = minimal_spec().dump();
        text.pop_back();  // the closing brace
        return text + ",\"x-deep\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
    };
    for (const std::size_t depth : {std::size_t{200'000}, decide::oci::kMaxJsonDepth}) {
        auto e = error_of([&] { decide::oci::parse_spec(with_member(depth), "/b"); });
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(),
                    HasSubstr("nested deeper than " + std::to_string(decide::oci::kMaxJsonDepth)));
    }
    const decide::oci::Spec ok =
        decide::oci::parse_spec(with_member(decide::oci::kMaxJsonDepth - 1), "/b");
    const json copy = *ok.doc;
    EXPECT_EQ(copy, *ok.doc);
    const std::string brackets = "\"" + std::string(5000, '[') + "\\\"{\"";
    EXPECT_NO_THROW(decide::oci::parse_spec(
        R"({"root": {"path": "r"}, "annotations": {"a": )" + brackets + "}}", "/b"));
    auto e = error_of([&] {
        decide::oci::parse_state(std::string(2000, '[') + std::string(2000, ']'), "stdin");
    });
    EXPECT_THAT(e.what(), HasSubstr("nested deeper"));
}

TEST(OciSpec, LoadSpecReadsConfigJsonInTheBundle) {
    test::TempDir dir;
    {
        std::ofstream out(dir / "config.json");
        out << minimal_spec().dump();
    }
    auto spec = decide::oci::load_spec(dir.path());
    EXPECT_EQ(spec.rootfs, dir / "rootfs");
    EXPECT_EQ(spec.getenv("A"), "1");

    test::TempDir empty;
    auto e = error_of([&] { decide::oci::load_spec(empty.path()); });
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_THAT(e.what(), HasSubstr((empty / "config.json").string()));
}

}  // namespace
}  // namespace gpubind
