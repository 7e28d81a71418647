// CDI without a node: the cdiVersion rule, YAML, request parsing, spec
// validation of hostile files, and applying devices (merge and conflicts).
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/apply.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "errors.hpp"
#include "files.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/version.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

json node(const std::string& path, unsigned major, unsigned minor) {
    return {{"path", path}, {"type", "c"}, {"major", major}, {"minor", minor}};
}

json base_spec(const std::string& kind = "example.com/dev") {
    return {{"cdiVersion", "0.3.0"},
            {"kind", kind},
            {"devices",
             json::array({{{"name", "dev-a"},
                           {"containerEdits", {{"deviceNodes", {node("/dev/a", 10, 1)}}}}}})}};
}

// --- cdiVersion: the lowest one that has every field used ---

TEST(CdiVersion, EachFeatureNeedsItsVersion) {
    json s = base_spec();
    EXPECT_EQ(cdi::minimum_version(s), "0.3.0");
    json t = s;
    t["containerEdits"]["mounts"] = {
        {{"hostPath", "/a"}, {"containerPath", "/b"}, {"type", "bind"}}};
    EXPECT_EQ(cdi::minimum_version(t), "0.4.0");
    t = s;
    t["devices"][0]["name"] = "0";
    EXPECT_EQ(cdi::minimum_version(t), "0.5.0");
    t = s;
    t["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/host/dev/a";
    EXPECT_EQ(cdi::minimum_version(t), "0.5.0");
    t = s;
    t["annotations"] = {{"a", "b"}};
    EXPECT_EQ(cdi::minimum_version(t), "0.6.0");
    t = s;
    t["devices"][0]["annotations"] = {{"a", "b"}};
    EXPECT_EQ(cdi::minimum_version(t), "0.6.0");
    EXPECT_EQ(cdi::minimum_version(base_spec("example.com/dev.x")), "0.6.0");
    t = s;
    t["containerEdits"]["additionalGids"] = {5};
    EXPECT_EQ(cdi::minimum_version(t), "0.7.0");
    t = s;
    t["devices"][0]["containerEdits"]["netDevices"] = {{{"hostInterfaceName", "a"}, {"name", "b"}}};
    EXPECT_EQ(cdi::minimum_version(t), "1.1.0");
    // Empty lists and strings use nothing.
    t = s;
    t["annotations"] = json::object();
    t["containerEdits"]["mounts"] = {{{"hostPath", "/a"}, {"containerPath", "/b"}, {"type", ""}}};
    EXPECT_EQ(cdi::minimum_version(t), "0.3.0");
}

TEST(CdiVersion, ValidateRefusesAVersionTooLowForTheSpec) {
    json s = base_spec();
    s["devices"][0]["name"] = "0";
    try {
        cdi::validate(s, "/etc/cdi/x.json");
        FAIL() << "accepted";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("/etc/cdi/x.json"));
        EXPECT_THAT(e.what(), HasSubstr("0.5.0"));
    }
    s["cdiVersion"] = "0.5.0";
    EXPECT_NO_THROW(cdi::validate(s, "x"));
    s["cdiVersion"] = "0.9.0";
    EXPECT_THROW(cdi::validate(s, "x"), util::Error);
    // A "v" prefix is accepted, and the version compared with it ignored.
    s["cdiVersion"] = "v0.6.0";
    EXPECT_NO_THROW(cdi::validate(s, "x"));
    s["cdiVersion"] = "v0.4.0";
    EXPECT_THROW(cdi::validate(s, "x"), util::Error);
    // Only the versions as the list writes them are known.
    for (const char* unknown : {"0.5", "0.5.0.0", "0.5.0-rc1", "00.5.0"}) {
        s["cdiVersion"] = unknown;
        EXPECT_THROW(cdi::validate(s, "x"), util::Error) << unknown;
    }
}

TEST(CdiVersion, KnownVersionsAreOrderedByTheOneComparison) {
    const auto& list = cdi::versions();
    ASSERT_FALSE(list.empty());
    for (std::size_t i = 0; i < list.size(); ++i) {
        EXPECT_EQ(cdi::version_index(list[i]), static_cast<int>(i));
        EXPECT_EQ(cdi::version_index("v" + list[i]), static_cast<int>(i));
    }
    for (std::size_t i = 1; i < list.size(); ++i)
        EXPECT_LT(util::compare_versions(list[i - 1], list[i]), 0) << list[i];
}

// --- names ---

TEST(CdiNames, QualifiedNamesFollowTheSpecification) {
    EXPECT_TRUE(util::parse_qualified("nvidia.com/gpu=0"));
    EXPECT_TRUE(util::parse_qualified("nvidia.com/gpu=1:0"));
    EXPECT_TRUE(util::parse_qualified("nvidia.com/gpu=GPU-4def712e-18c0-b76d-3738-20ccf88437b2"));
    EXPECT_TRUE(util::parse_qualified("nvidia.com/gpu=all"));
    for (const char* bad : {"nvidia.com/gpu", "nvidia.com/gpu=", "=0", "/gpu=0", "nvidia.com/=0",
                            "1vendor/gpu=0", "vendor/gpu-=0", "vendor/gpu=-0", "vendor/gpu=a/b",
                            "vendor/gpu=a b", "/dev/nvidia0", "0", "GPU-1"})
        EXPECT_FALSE(util::parse_qualified(bad)) << bad;
    EXPECT_FALSE(util::looks_qualified("0,1"));
    EXPECT_TRUE(util::looks_qualified("nvidia.com/gpu=0"));
}

// --- YAML ---

TEST(CdiYaml, DumpReadsBackAsTheSameDocument) {
    json s = base_spec();
    s["containerEdits"] = {
        {"env", {"A=1", "QUOTE=\"x\" 'y' #z: - [x] {y}", "NL=a\nb\tc", "UNI=\xc3\xa9"}},
        {"mounts", {{{"hostPath", "/a b"}, {"containerPath", "/c"}, {"options", {"ro", "rbind"}}}}},
        {"hooks",
         {{{"hookName", "createRuntime"},
           {"path", "/h"},
           {"args", json::array()},
           {"env", {"E="}}}}}};
    s["devices"][0]["containerEdits"]["deviceNodes"][0]["fileMode"] = 438;
    s["devices"].push_back({{"name", "true"}, {"containerEdits", json::object()}});
    s["devices"].push_back({{"name", "0"}, {"containerEdits", {{"env", {"null=~"}}}}});
    const std::string text = cdi::yaml::dump(s);
    EXPECT_EQ(cdi::yaml::parse(text, "t.yaml"), s) << text;
}

// Characters YAML does not let stand raw (DEL, C0 and C1 controls, the BOM,
// U+FFFE) and its line breaks (NEL, U+2028) are escaped, in values and keys, and read back as they
// were (the fuzzer's first finding: a DEL written raw, which libyaml refused).
TEST(CdiYaml, UnprintableCharactersAreEscapedAndReadBack) {
    json s = base_spec();
    const std::string odd = std::string("d\x7f\x01\x1b") +
                            "\xc2\x80\xc2\x9f\xef\xbb\xbf\xef\xbf\xbe" +
                            "\xc2\x85\xe2\x80\xa8\xf0\x9f\x98\x80\\\"";
    s["containerEdits"] = {{"env", {"V=" + odd}}};
    s["annotations"] = {{odd, odd}};
    const std::string text = cdi::yaml::dump(s);
    EXPECT_EQ(text.find('\x7f'), std::string::npos) << text;
    EXPECT_EQ(text.find("\xc2\x80"), std::string::npos) << text;
    EXPECT_EQ(cdi::yaml::parse(text, "t.yaml"), s) << text;
}

TEST(CdiYaml, ReadsTheUsualShapesOfAHandWrittenSpec) {
    const std::string text =
        "---\n"
        "cdiVersion: 0.5.0\n"
        "kind: example.com/dev\n"
        "devices:\n"
        "- name: \"0\"\n"
        "  containerEdits:\n"
        "    deviceNodes:\n"
        "    - {path: /dev/a, type: c, major: 10, minor: 0x1, fileMode: 0666}\n"
        "containerEdits:\n"
        "  env: [A=1, 'B=two words']\n";
    const json doc = cdi::yaml::parse(text, "t.yaml");
    EXPECT_EQ(doc["cdiVersion"], "0.5.0");
    EXPECT_EQ(doc["devices"][0]["name"], "0");
    EXPECT_EQ(doc["devices"][0]["containerEdits"]["deviceNodes"][0]["minor"], 1);
    EXPECT_EQ(doc["devices"][0]["containerEdits"]["deviceNodes"][0]["fileMode"], 0666);
    EXPECT_EQ(doc["containerEdits"]["env"][1], "B=two words");
    EXPECT_NO_THROW(cdi::validate(doc, "t.yaml"));
}

TEST(CdiYaml, RefusesWhatASpecNeverNeeds) {
    for (const char* text : {"a: &x 1\nb: *x\n", "a: !!str 1\n", "a: 1\na: 2\n", "<<: {a: 1}\n",
                             "a: 1\n---\nb: 2\n", "[a, [b, {c: d}]]: 1\n", "a: [\n", "a: 'x\n"}) {
        try {
            cdi::yaml::parse(text, "/etc/cdi/t.yaml");
            ADD_FAILURE() << "accepted: " << text;
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("/etc/cdi/t.yaml")) << text;
            EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
        }
    }
    std::string deep;
    for (int i = 0; i < 40; ++i) deep += "[";
    EXPECT_THROW(cdi::yaml::parse(deep, "t"), util::Error);
}

// Issue 49: a spec nested past the limit is refused when parsed, in one line
// naming the file and the limit: JSON at the OCI config's limit
// (decide::oci::kMaxJsonDepth), YAML at its reader's (cdi::yaml::kMaxDepth). One just
// within it is read, and refused only for what it holds (an unknown field).
// Fails with either limit's check taken out: the spec is then refused for its
// unknown field, or the deepest one overflows the stack.
TEST(CdiSpecFile, NestingPastTheLimitIsRefusedInOneLine) {
    // base_spec() with a field "x" holding `depth` nested arrays: the
    // document is depth + 1 levels deep.
    auto json_text = [](std::size_t depth) {
        std::string text = base_spec().dump();
        text.pop_back();  // the closing brace
        return text + ",\"x\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
    };
    auto yaml_text = [](std::size_t depth) {
        return cdi::yaml::dump(base_spec()) + "x: " + std::string(depth, '[') +
               std::string(depth, ']') + "\n";
    };
    struct Case {
        std::string text;
        bool yaml;
        std::size_t limit;
    };
    const std::vector<Case> deep = {
        {json_text(decide::oci::kMaxJsonDepth), false, decide::oci::kMaxJsonDepth},  // 1,001 levels
        {json_text(200'000), false, decide::oci::kMaxJsonDepth},
        {yaml_text(cdi::yaml::kMaxDepth + 1), true, cdi::yaml::kMaxDepth},
        {yaml_text(200'000), true, cdi::yaml::kMaxDepth}};
    for (const Case& c : deep) {
        SCOPED_TRACE(c.text.substr(c.text.size() - 40));
        const std::string file = c.yaml ? "/etc/cdi/deep.yaml" : "/etc/cdi/deep.json";
        const util::Error e = test::error_of([&] { cdi::parse_spec(c.text, c.yaml, file); });
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr(file));
        EXPECT_THAT(e.what(),
                    HasSubstr("nested deeper than " + std::to_string(c.limit) + " levels"));
        EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
    }
    for (const Case& c : {Case{json_text(decide::oci::kMaxJsonDepth - 1), false, 0},
                          Case{yaml_text(cdi::yaml::kMaxDepth), true, 0}}) {
        const util::Error e =
            test::error_of([&] { cdi::parse_spec(c.text, c.yaml, "/etc/cdi/s"); });
        EXPECT_THAT(e.what(), HasSubstr("unknown field \"x\"")) << c.yaml;
        EXPECT_THAT(e.what(), Not(HasSubstr("nested"))) << c.yaml;
    }
}

// --- requests ---

decide::oci::Spec spec_of(json doc) {
    if (!doc.contains("ociVersion")) doc["ociVersion"] = "1.0.2";
    if (!doc.contains("root")) doc["root"] = {{"path", "rootfs"}};
    return decide::oci::parse_spec(doc.dump(), "/bundle");
}

// A spec whose process has CAP_SYS_ADMIN (what Spec::privileged() reads).
json privileged(json doc) {
    doc["process"]["capabilities"]["bounding"] = {"CAP_SYS_ADMIN"};
    return doc;
}

config::Config policy_config(const config::Policy& policy) {
    config::Config c;
    c.policy = policy;
    return c;
}

TEST(CdiRequests, AnnotationsEveryKeyUnderTheirPrefix) {
    const auto s =
        spec_of(privileged({{"annotations",
                             {{"cdi.k8s.io/devplugin_0", "nvidia.com/gpu=0, nvidia.com/gpu=1:0"},
                              {"cdi.k8s.io/other", "nvidia.com/gpu=0,example.com/x=y"},
                              {"io.kubernetes.cri.container-type", "container"}}}}));
    const auto r = cdi::read_requests(s, config::Config{});
    EXPECT_EQ(r.devices, (std::vector<std::string>{"nvidia.com/gpu=0", "nvidia.com/gpu=1:0",
                                                   "example.com/x=y"}));
    EXPECT_THAT(r.source, HasSubstr("cdi.k8s.io/devplugin_0"));
}

TEST(CdiRequests, VisibleDevicesHoldingCdiNames) {
    config::Policy policy;
    auto s = spec_of(
        {{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,nvidia.com/gpu=all"}}}}});
    EXPECT_EQ(cdi::read_requests(s, policy_config(policy)).devices,
              (std::vector<std::string>{"nvidia.com/gpu=1", "nvidia.com/gpu=all"}));
    // The legacy reading leaves them alone: not a request of its own.
    EXPECT_FALSE(decide::read_request(s, policy).gpu_container());
    // Plain ids are not CDI requests; mixing both is refused.
    s = spec_of({{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=0,1"}}}}});
    EXPECT_TRUE(cdi::read_requests(s, policy_config(policy)).devices.empty());
    s = spec_of({{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1"}}}}});
    EXPECT_THROW(cdi::read_requests(s, policy_config(policy)), util::Error);
    // Unprivileged under a policy refusing variables.
    policy.accept_envvar_unprivileged = false;
    s = spec_of({{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}}}}});
    try {
        cdi::read_requests(s, policy_config(policy));
        FAIL() << "accepted";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ECANCELED);
    }
}

TEST(CdiRequests, VolumeMountsUnderTheirPolicy) {
    const json mounts = {
        {{"destination", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"},
         {"source", "/dev/null"}},
        {{"destination", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/all"},
         {"source", "/dev/null"}}};
    auto s = spec_of(
        {{"mounts", mounts}, {"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=3"}}}}});
    config::Policy policy;
    policy.accept_volume_mounts = true;
    EXPECT_EQ(cdi::read_requests(s, policy_config(policy)).devices,
              (std::vector<std::string>{"nvidia.com/gpu=0", "nvidia.com/gpu=all"}));
    // The legacy reading does not take cdi/... for device ids.
    EXPECT_FALSE(decide::read_request(s, policy).gpu_container());
    policy.accept_volume_mounts = false;
    EXPECT_EQ(cdi::read_requests(s, policy_config(policy)).devices,
              (std::vector<std::string>{"nvidia.com/gpu=3"}));
    // A path that is not vendor/class/name.
    policy.accept_volume_mounts = true;
    s = spec_of({{"mounts",
                  {{{"destination", "/var/run/nvidia-container-devices/cdi/nvidia.com/0"},
                    {"source", "/dev/null"}}}}});
    EXPECT_THROW(cdi::read_requests(s, policy_config(policy)), util::Error);
}

TEST(CdiRequests, MalformedNamesAreOneLineErrors) {
    for (const char* value :
         {"nvidia.com/gpu=", "nvidia.com/gpu=a/b", "nvidia.com/=1", "x/y=a\nb"}) {
        const auto s = spec_of({{"annotations", {{"cdi.k8s.io/x", value}}}});
        try {
            cdi::read_requests(s, config::Config{});
            ADD_FAILURE() << "accepted " << value;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
            EXPECT_THAT(e.what(), HasSubstr("cdi.k8s.io/x"));
        }
    }
}

// Issue 21 (3): NVIDIA's variable names only the configured vendors'
// devices (by default the vendor of [cdi] kind), whoever sets it; a container
// without CAP_SYS_ADMIN names only those by any way, and by annotations only
// under their own key. Each refusal is one line naming the way and the name.
TEST(CdiRequests, WhoMayNameWhichVendorsDevices) {
    auto refusal = [](const decide::oci::Spec& s, const config::Config& c) -> std::string {
        try {
            cdi::read_requests(s, c);
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), ECANCELED) << e.what();
            EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
            return e.what();
        }
        return {};
    };
    const json env = {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,evil.com/dev=x"}}};
    const json annotation = {{"cdi.k8s.io/x", "evil.com/dev=x"}};
    const json volume = {{{"destination", "/var/run/nvidia-container-devices/cdi/evil.com/dev/x"},
                          {"source", "/dev/null"}}};
    config::Config c;
    c.policy.accept_volume_mounts = true;

    // The variable: another vendor's device refused, privileged or not.
    for (const bool priv : {false, true}) {
        json doc = {{"process", env}};
        const auto s = spec_of(priv ? privileged(doc) : doc);
        const std::string why = refusal(s, c);
        EXPECT_THAT(why, HasSubstr("NVIDIA_VISIBLE_DEVICES names evil.com/dev=x"));
        EXPECT_THAT(why, HasSubstr("nvidia.com"));
        EXPECT_THAT(why, HasSubstr("cdi-vendors"));
    }
    // Annotations and volume mounts: refused unprivileged, taken privileged.
    for (const json& doc : {json{{"annotations", annotation}}, json{{"mounts", volume}}}) {
        EXPECT_THAT(refusal(spec_of(doc), c),
                    HasSubstr("evil.com/dev=x, a device of vendor evil.com"));
        EXPECT_EQ(cdi::read_requests(spec_of(privileged(doc)), c).devices,
                  (std::vector<std::string>{"evil.com/dev=x"}));
    }
    // NVIDIA's own devices stay open to unprivileged containers by every way.
    EXPECT_EQ(
        cdi::read_requests(spec_of({{"annotations", {{"cdi.k8s.io/p", "nvidia.com/gpu=1"}}}}), c)
            .devices,
        (std::vector<std::string>{"nvidia.com/gpu=1"}));
    // A configured list replaces the default, and follows another kind.
    c.policy.cdi_vendors = {"nvidia.com", "evil.com"};
    EXPECT_EQ(cdi::read_requests(spec_of({{"annotations", annotation}}), c).devices,
              (std::vector<std::string>{"evil.com/dev=x"}));
    c.policy.cdi_vendors.clear();
    c.cdi.kind = "example.org/gpu";
    EXPECT_THAT(
        refusal(spec_of({{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"}}}}}), c),
        HasSubstr("only devices of example.org"));
    c.cdi.kind = "nvidia.com/gpu";

    // The annotations' own key: off, an unprivileged container naming devices
    // there is refused (even NVIDIA's), a privileged one is not, and an empty
    // annotation is no request.
    c.policy.accept_cdi_annotations_unprivileged = false;
    const json own = {{"cdi.k8s.io/p", "nvidia.com/gpu=1"}};
    EXPECT_THAT(refusal(spec_of({{"annotations", own}}), c),
                HasSubstr("accept-cdi-annotations-unprivileged is off"));
    EXPECT_EQ(cdi::read_requests(spec_of(privileged({{"annotations", own}})), c).devices.size(),
              1u);
    EXPECT_TRUE(cdi::read_requests(spec_of({{"annotations", {{"cdi.k8s.io/p", " , "}}}}), c)
                    .devices.empty());
    // The variable's key does not open the annotations, nor the reverse.
    c.policy.accept_envvar_unprivileged = true;
    EXPECT_NE(refusal(spec_of({{"annotations", own}}), c), "");
    c.policy.accept_cdi_annotations_unprivileged = true;
    c.policy.accept_envvar_unprivileged = false;
    EXPECT_THAT(
        refusal(spec_of({{"process", {{"env", {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}}}}}), c),
        HasSubstr("accept_envvar_unprivileged is off"));
    EXPECT_EQ(cdi::read_requests(spec_of({{"annotations", own}}), c).devices.size(), 1u);
}

// Issue 44 (F7): a container naming no CDI device is read whatever its
// environment's size (runc starts it); one naming devices is refused past
// the environment's caps, naming the cap.
TEST(CdiRequests, TheEnvironmentsCapsRefuseOnlyARequest) {
    const config::Config c = policy_config(config::Policy{});
    json doc = {
        {"process",
         {{"env", {"PATH=/bin", "HUGE=" + std::string(decide::oci::kMaxEnvEntrySize, 'x')}}}}};
    EXPECT_TRUE(cdi::read_requests(spec_of(doc), c).devices.empty());
    doc["annotations"] = {{"cdi.k8s.io/p", "nvidia.com/gpu=1"}};
    const util::Error e = test::error_of([&] { cdi::read_requests(spec_of(doc), c); });
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_THAT(e.what(), HasSubstr("process.env[1] (HUGE): "));
}

// Issue 21 (4): a request is capped in names (counted before duplicates are
// dropped), refused in one line; below the cap duplicates are dropped in
// order. The spec index makes applying many names a lookup each.
TEST(CdiRequests, ManyNamesAreCappedAndDeduplicated) {
    std::string many;
    for (std::size_t i = 0; i <= cdi::kMaxRequestNames; ++i) many += "nvidia.com/gpu=0,";
    try {
        cdi::read_requests(spec_of({{"annotations", {{"cdi.k8s.io/x", many}}}}), config::Config{});
        ADD_FAILURE() << "accepted";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), E2BIG);
        EXPECT_THAT(e.what(), HasSubstr(std::to_string(cdi::kMaxRequestNames)));
    }
    std::string some;
    for (std::size_t i = 0; i < cdi::kMaxRequestNames / 2; ++i)
        some += "nvidia.com/gpu=" + std::to_string(i % 7) + ",";
    const auto r =
        cdi::read_requests(spec_of({{"annotations", {{"cdi.k8s.io/x", some}}}}), config::Config{});
    ASSERT_EQ(r.devices.size(), 7u);
    for (std::size_t i = 0; i < 7; ++i)
        EXPECT_EQ(r.devices[i], "nvidia.com/gpu=" + std::to_string(i));
}

// --- specs on disk: hostile files refused, each naming the file ---

class CdiSpecDir : public ::testing::Test {
  protected:
    fs::path dir(const std::string& name) {
        fs::path d = tmp_ / name;
        fs::create_directories(d);
        return d;
    }
    void put(const fs::path& file, const std::string& text, unsigned mode = 0644) {
        test::write(file, text, fs::perms(mode));
    }
    test::TempDir tmp_{"gpubind-cdi"};
};

TEST_F(CdiSpecDir, HostileFilesAreRefusedEachWithOneLineNamingIt) {
    if (::geteuid() != 0) GTEST_SKIP() << "spec files must be root's: run as root";
    const fs::path d = dir("etc-cdi");
    put(d / "good.json", base_spec().dump());
    put(d / "bad-json.json", "{\"cdiVersion\": ");
    json relative = base_spec("example.com/rel");
    relative["containerEdits"]["mounts"] = {{{"hostPath", "usr/lib"}, {"containerPath", "/x"}}};
    put(d / "relative.json", relative.dump());
    json outside = base_spec("example.com/out");
    outside["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/etc/shadow";
    put(d / "outside.json", outside.dump());
    json dotdot = base_spec("example.com/dots");
    dotdot["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/../etc/passwd";
    put(d / "dotdot.json", dotdot.dump());
    json unknown = base_spec("example.com/unk");
    unknown["devices"][0]["containerEdits"]["sysctl"] = {{"a", "b"}};
    put(d / "unknown.json", unknown.dump());
    json nul = base_spec("example.com/nul");
    nul["containerEdits"]["env"] = {std::string("A=x\0y", 5)};
    put(d / "nul.json", nul.dump());
    put(d / "huge.json", std::string(cdi::kMaxSpecFileSize + 1, ' '));
    put(d / "writable.json", base_spec("example.com/w").dump(), 0666);
    put(d / "notroot.json", base_spec("example.com/n").dump());
    ASSERT_EQ(::chown((d / "notroot.json").c_str(), 65534, 65534), 0);
    put(tmp_ / "target.json", base_spec("example.com/link").dump());
    fs::create_symlink(tmp_ / "target.json", d / "link.json");
    fs::create_directory(d / "dir.json");
    put(d / "ignored.txt", "not a spec");

    const cdi::Registry reg = cdi::load_specs({d, tmp_ / "missing"});
    ASSERT_EQ(reg.specs.size(), 1u);
    EXPECT_EQ(reg.specs[0].file, d / "good.json");
    std::vector<std::string> refused_files, lines;
    for (const auto& refusal : reg.refused) {
        const std::string& line = refusal.why;
        lines.push_back(line);
        EXPECT_THAT(line, Not(HasSubstr("\n")));
        for (const char* f : {"bad-json", "relative", "outside", "dotdot", "unknown", "nul", "huge",
                              "writable", "notroot", "link", "dir"})
            if (line.find(std::string("/") + f + ".json") != std::string::npos)
                refused_files.push_back(f);
    }
    EXPECT_EQ(refused_files.size(), 11u) << ::testing::PrintToString(lines);

    // Asking for a device only a refused file offers fails naming that file.
    try {
        cdi::apply(json{{"ociVersion", "1.0.2"}}, {"example.com/rel=dev-a"}, reg);
        FAIL() << "applied";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("relative.json"));
        EXPECT_THAT(e.what(), HasSubstr("usr/lib"));
    }
    EXPECT_NO_THROW(cdi::apply(json{{"ociVersion", "1.0.2"}}, {"example.com/dev=dev-a"}, reg));
}

// --- applying ---

json loaded(const json& spec) {
    cdi::validate(spec, "spec");
    return spec;
}

cdi::Registry registry(std::vector<std::pair<json, int>> specs) {
    cdi::Registry reg;
    int n = 0;
    for (auto& [s, prio] : specs)
        reg.specs.push_back({"/cdi/" + std::to_string(n++) + ".json", prio, loaded(s)});
    return reg;
}

json gpu_like_spec() {
    json s = {
        {"cdiVersion", "0.7.0"},  // names starting with digits, additionalGids
        {"kind", "vendor.example/gpu"},
        {"containerEdits",
         {{"env", {"VISIBLE=void"}},
          {"deviceNodes", {node("/dev/ctl", 195, 255)}},
          {"mounts",
           {{{"hostPath", "/drv/lib/liba.so.1"},
             {"containerPath", "/usr/lib/liba.so.1"},
             {"options", {"ro", "rbind"}}},
            {{"hostPath", "/drv/run"}, {"containerPath", "/run"}, {"options", {"rbind"}}}}},
          {"hooks",
           {{{"hookName", "createRuntime"}, {"path", "/bin/hook"}, {"args", {"hook", "x"}}}}}}},
        {"devices",
         {{{"name", "0"}, {"containerEdits", {{"deviceNodes", {node("/dev/g0", 195, 0)}}}}},
          {{"name", "1"},
           {"containerEdits",
            {{"deviceNodes", {node("/dev/g1", 195, 1)}}, {"additionalGids", {44}}}}}}}};
    return s;
}

TEST(CdiApply, MergesEditsAsTheSpecificationSays) {
    const json oci = {{"ociVersion", "1.0.2"},
                      {"process",
                       {{"env", {"PATH=/bin", "VISIBLE=vendor.example/gpu=0"}},
                        {"user", {{"uid", 1000}, {"gid", 100}}}}},
                      {"mounts",
                       {{{"destination", "/usr/lib/deep/x"}, {"source", "/s"}},
                        {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}}}}};
    const json out = cdi::apply(oci, {"vendor.example/gpu=0", "vendor.example/gpu=1"},
                                registry({{gpu_like_spec(), 0}}));
    EXPECT_EQ(out["process"]["env"], json({"PATH=/bin", "VISIBLE=void"}));
    std::vector<std::string> paths;
    for (const auto& d : out["linux"]["devices"]) paths.push_back(d["path"]);
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/ctl", "/dev/g0", "/dev/g1"}));
    EXPECT_EQ(out["linux"]["devices"][1]["uid"], 1000);  // the process's user, as CDI does
    EXPECT_EQ(out["linux"]["resources"]["devices"].size(), 3u);
    EXPECT_EQ(out["linux"]["resources"]["devices"][0]["access"], "rwm");
    // Mounts sorted by depth, the container's own kept.
    std::vector<std::string> dests;
    for (const auto& m : out["mounts"]) dests.push_back(m["destination"]);
    EXPECT_EQ(dests,
              (std::vector<std::string>{"/proc", "/run", "/usr/lib/liba.so.1", "/usr/lib/deep/x"}));
    EXPECT_EQ(out["hooks"]["createRuntime"].size(), 1u);
    EXPECT_EQ(out["process"]["user"]["additionalGids"], json({44}));
    EXPECT_EQ(out["annotations"][std::string(cdi::kAppliedAnnotation)], "applied");
    // Applying the same again adds nothing but keeps working (an engine applied it already).
    json again = out;
    again["annotations"].erase(std::string(cdi::kAppliedAnnotation));
    const json twice = cdi::apply(again, {"vendor.example/gpu=0", "vendor.example/gpu=1"},
                                  registry({{gpu_like_spec(), 0}}));
    EXPECT_EQ(twice["linux"]["devices"], out["linux"]["devices"]);
    EXPECT_EQ(twice["mounts"], out["mounts"]);
    EXPECT_EQ(twice["hooks"], out["hooks"]);
}

TEST(CdiApply, PriorityAndConflicts) {
    json low = gpu_like_spec();
    json high = gpu_like_spec();
    high["devices"][0]["containerEdits"]["deviceNodes"][0]["minor"] = 7;
    const json oci = {{"ociVersion", "1.0.2"}};
    // The later directory wins.
    json out = cdi::apply(oci, {"vendor.example/gpu=0"}, registry({{low, 0}, {high, 1}}));
    EXPECT_EQ(out["linux"]["devices"][1]["minor"], 7);
    auto conflict = [&](const cdi::Registry& reg, const std::vector<std::string>& names,
                        const json& base, const std::string& says) {
        try {
            cdi::apply(base, names, reg);
            ADD_FAILURE() << "applied: " << says;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EEXIST) << e.what();
            EXPECT_THAT(e.what(), HasSubstr(says));
            EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
        }
    };
    // The same device in two specs of one priority.
    conflict(registry({{low, 1}, {high, 1}}), {"vendor.example/gpu=0"}, oci, "/cdi/1.json");
    // Two devices setting one variable differently.
    json other = base_spec("other.example/x");
    other["containerEdits"]["env"] = {"VISIBLE=all"};
    conflict(registry({{gpu_like_spec(), 0}, {other, 0}}),
             {"vendor.example/gpu=0", "other.example/x=dev-a"}, oci, "VISIBLE");
    // A device path with other numbers, a mount target with another source.
    json clash = base_spec("other.example/y");
    clash["devices"][0]["containerEdits"]["deviceNodes"][0] = node("/dev/g0", 1, 3);
    conflict(registry({{gpu_like_spec(), 0}, {clash, 0}}),
             {"vendor.example/gpu=0", "other.example/y=dev-a"}, oci, "/dev/g0");
    conflict(registry({{gpu_like_spec(), 0}}), {"vendor.example/gpu=0"},
             json{{"mounts", {{{"destination", "/run/"}, {"source", "/elsewhere"}}}}}, "/run");
    conflict(
        registry({{gpu_like_spec(), 0}}), {"vendor.example/gpu=1"},
        json{{"linux",
              {{"devices", {{{"path", "/dev/g1"}, {"type", "c"}, {"major", 1}, {"minor", 1}}}}}}},
        "/dev/g1");
    // Unknown names.
    try {
        cdi::apply(oci, {"vendor.example/gpu=9"}, registry({{gpu_like_spec(), 0}}));
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("vendor.example/gpu=9"));
    }
}

}  // namespace
}  // namespace gpubind
