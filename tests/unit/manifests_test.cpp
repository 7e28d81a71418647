// deploy/kubernetes (issue 25): the manifests are Kubernetes objects of the
// kinds and API versions they say, checked against Kubernetes' own OpenAPI
// definitions of those kinds (tests/data/k8s-openapi.json: the schemas
// reachable from them, descriptions removed) as a strict server would (an
// unknown field, a wrong type, a missing required field or an unknown
// apiVersion/kind is an error); they agree with what the installer does;
// and docs/kubernetes.md shows these very files.
#include <filesystem>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "files.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/setup/setup.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ElementsAre;
using testing::HasSubstr;

using gpubind::test::slurp;

fs::path source(const std::string& rel) {
    return fs::path(GPUBIND_SOURCE_DIR) / rel;
}

// The documents of a multi-document YAML file ("---" lines between them).
std::vector<json> documents(const fs::path& file) {
    std::vector<json> out;
    std::string text = slurp(file), doc;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line == "---") {
            out.push_back(gpubind::yaml::parse(doc, file.string()));
            doc.clear();
        } else {
            doc += line + "\n";
        }
    }
    out.push_back(gpubind::yaml::parse(doc, file.string()));
    return out;
}

// Kubernetes' schemas, and a check of a document against its kind's.
class OpenApi {
  public:
    OpenApi() : data_(json::parse(slurp(source("tests/data/k8s-openapi.json")))) {}

    // Every problem, one a line ("spec.template.spec.containers[0].x: unknown field").
    std::vector<std::string> check(const json& doc) const {
        std::vector<std::string> errors;
        const std::string api = doc.value("apiVersion", ""), kind = doc.value("kind", "");
        const auto& kinds = data_.at("kinds");
        const std::string key = api + "/" + kind;
        if (!kinds.contains(key)) return {"apiVersion " + api + ", kind " + kind + ": unknown"};
        const json& schema = schemas().at(kinds.at(key).get<std::string>());
        // The schema says which group, version and kind it is.
        bool named = false;
        for (const auto& gvk : schema.value("x-kubernetes-group-version-kind", json::array())) {
            const std::string group = gvk.value("group", "");
            named |= (group.empty() ? "" : group + "/") + gvk.value("version", "") == api &&
                     gvk.value("kind", "") == kind;
        }
        if (!named) errors.push_back("the schema of " + key + " does not name it");
        validate(doc, schema, "", errors);
        return errors;
    }

  private:
    const json& schemas() const { return data_.at("schemas"); }

    const json& resolve(const json& schema) const {
        if (!schema.contains("$ref")) return schema;
        const std::string ref = schema["$ref"];
        const std::string prefix = "#/components/schemas/";
        return schemas().at(ref.substr(prefix.size()));
    }

    void validate(const json& value, const json& in, const std::string& at,
                  std::vector<std::string>& errors) const {
        const json& schema = resolve(in);
        const std::string where = at.empty() ? "(document)" : at;
        for (const auto& part : schema.value("allOf", json::array()))
            validate(value, part, at, errors);
        // IntOrString and Quantity: one of their alternatives.
        if (schema.contains("oneOf")) {
            bool one = false;
            for (const auto& alternative : schema["oneOf"]) {
                std::vector<std::string> none;
                validate(value, alternative, at, none);
                one |= none.empty();
            }
            if (!one)
                errors.push_back(where + ": " + value.dump() + " is none of " +
                                 schema["oneOf"].dump());
        }
        const std::string type = schema.value("type", "");
        const bool ok = type.empty() || (type == "object" && value.is_object()) ||
                        (type == "array" && value.is_array()) ||
                        (type == "string" && value.is_string()) ||
                        (type == "boolean" && value.is_boolean()) ||
                        (type == "integer" && value.is_number_integer()) ||
                        (type == "number" && value.is_number());
        if (!ok) {
            errors.push_back(where + ": not " + type + " but " + value.dump());
            return;
        }
        if (schema.contains("enum") && !schema["enum"].empty()) {
            bool listed = false;
            for (const auto& e : schema["enum"]) listed |= e == value;
            if (!listed) errors.push_back(where + ": " + value.dump() + " is not one of the enum");
        }
        if (value.is_array() && schema.contains("items"))
            for (std::size_t i = 0; i < value.size(); ++i)
                validate(value[i], schema["items"], at + "[" + std::to_string(i) + "]", errors);
        if (!value.is_object()) return;
        for (const auto& r : schema.value("required", json::array()))
            if (!value.contains(r.get<std::string>()))
                errors.push_back(where + ": required field " + r.get<std::string>() + " missing");
        // A schema naming no field (an allOf wrapper, FieldsV1) leaves the
        // fields to the one it wraps, or to no one.
        if (!schema.contains("properties") && !schema.contains("additionalProperties")) return;
        const bool open = schema.value("x-kubernetes-preserve-unknown-fields", false);
        for (const auto& [key, item] : value.items()) {
            const std::string path = at.empty() ? key : at + "." + key;
            if (schema.contains("properties") && schema["properties"].contains(key))
                validate(item, schema["properties"][key], path, errors);
            else if (schema.contains("additionalProperties") &&
                     schema["additionalProperties"].is_object())
                validate(item, schema["additionalProperties"], path, errors);
            else if (!open)
                errors.push_back(path + ": unknown field");
        }
    }

    json data_;
};

std::string kinds(const std::vector<json>& docs) {
    std::string out;
    for (const auto& d : docs) out += d.value("apiVersion", "") + " " + d.value("kind", "") + "\n";
    return out;
}

TEST(Manifests, AreKubernetesObjectsOfTheirKinds) {
    const OpenApi api;
    const auto install = documents(source("deploy/kubernetes/gpubind.yaml"));
    EXPECT_EQ(kinds(install), "v1 Namespace\napps/v1 DaemonSet\nnode.k8s.io/v1 RuntimeClass\n");
    const auto uninstall = documents(source("deploy/kubernetes/uninstall.yaml"));
    EXPECT_EQ(kinds(uninstall), "apps/v1 DaemonSet\n");
    for (const auto* docs : {&install, &uninstall})
        for (const auto& doc : *docs)
            EXPECT_THAT(api.check(doc), ElementsAre()) << doc.value("kind", "");
}

// The check can fail: each kind of mistake a server refuses is found.
TEST(Manifests, TheCheckFindsWhatAServerRefuses) {
    const OpenApi api;
    const json daemonset = documents(source("deploy/kubernetes/gpubind.yaml"))[1];
    const auto errors = [&](const std::function<void(json&)>& change) {
        json doc = daemonset;
        change(doc);
        std::string out;
        for (const auto& e : api.check(doc)) out += e + "\n";
        return out;
    };
    EXPECT_EQ(errors([](json& d) { d["spec"]["template"]["spec"]["hostPid"] = true; }),
              "spec.template.spec.hostPid: unknown field\n");
    EXPECT_EQ(errors([](json& d) {
                  d["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] =
                      "yes";
              }),
              "spec.template.spec.containers[0].securityContext.privileged: not boolean but "
              "\"yes\"\n");
    EXPECT_EQ(errors([](json& d) { d["spec"]["template"]["spec"].erase("containers"); }),
              "spec.template.spec: required field containers missing\n");
    EXPECT_EQ(errors([](json& d) { d["spec"]["template"]["spec"]["containers"][0].erase("name"); }),
              "spec.template.spec.containers[0]: required field name missing\n");
    EXPECT_EQ(errors([](json& d) { d["apiVersion"] = "apps/v1beta2"; }),
              "apiVersion apps/v1beta2, kind DaemonSet: unknown\n");
    EXPECT_EQ(errors([](json& d) {
                  d["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = 1;
              }),
              "spec.template.spec.volumes[0].hostPath.path: not string but 1\n");
}

// What the manifests say agrees with what the installer and the image do.
TEST(Manifests, AgreeWithTheInstallerAndTheImage) {
    const auto install = documents(source("deploy/kubernetes/gpubind.yaml"));
    const auto uninstall = documents(source("deploy/kubernetes/uninstall.yaml"));
    EXPECT_EQ(install[2]["handler"], std::string(gpubind::setup::kRuntimeName));
    // The project's version is the image's tag.
    const std::smatch version = [] {
        static const std::string cmake = slurp(source("CMakeLists.txt"));
        std::smatch m;
        std::regex_search(cmake, m, std::regex(R"(project\(gpubind VERSION ([0-9.]+))"));
        return m;
    }();
    ASSERT_EQ(version.size(), 2u);
    for (const json* ds : {&install[1], &uninstall[0]}) {
        SCOPED_TRACE((*ds)["metadata"]["name"].get<std::string>());
        EXPECT_EQ((*ds)["metadata"]["namespace"], install[0]["metadata"]["name"]);
        const json& pod = (*ds)["spec"]["template"];
        EXPECT_EQ((*ds)["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]);
        const json& c = pod["spec"]["containers"][0];
        EXPECT_EQ(c["image"], "gpubind-node:" + version[1].str());
        EXPECT_TRUE(c["securityContext"]["privileged"].get<bool>());
        // GPUBIND_HOST_ROOT is where the host's / is mounted.
        std::string host_root;
        for (const auto& e : c["env"])
            if (e["name"] == "GPUBIND_HOST_ROOT") host_root = e["value"];
        const json& volume = pod["spec"]["volumes"][0];
        EXPECT_EQ(volume["hostPath"]["path"], "/");
        EXPECT_EQ(c["volumeMounts"][0]["name"], volume["name"]);
        EXPECT_EQ(c["volumeMounts"][0]["mountPath"], host_root);
    }
    EXPECT_FALSE(install[1]["spec"]["template"]["spec"]["containers"][0].contains("args"));
    EXPECT_EQ(uninstall[0]["spec"]["template"]["spec"]["containers"][0]["args"],
              json::array({"remove"}));
    // The image runs the entrypoint the end-to-end test runs.
    const std::string containerfile = slurp(source("deploy/kubernetes/Containerfile"));
    EXPECT_THAT(containerfile,
                HasSubstr("COPY entrypoint.sh /usr/local/bin/gpubind-node-install\n"));
    EXPECT_THAT(containerfile, HasSubstr("ENTRYPOINT [\"/usr/local/bin/gpubind-node-install\"]"));
    EXPECT_TRUE(fs::exists(source("deploy/kubernetes/entrypoint.sh")));
}

// docs/kubernetes.md shows the files themselves: each ```yaml block after a
// "<!-- file: PATH -->" line is that file, byte for byte.
TEST(Manifests, TheGuideShowsTheseVeryFiles) {
    const std::string doc = slurp(source("docs/kubernetes.md"));
    const std::regex block(R"(<!-- file: ([^ ]+) -->\n```yaml\n([\s\S]*?)```\n)");
    std::set<std::string> shown;
    for (std::sregex_iterator it(doc.begin(), doc.end(), block), end; it != end; ++it) {
        const std::string file = (*it)[1];
        EXPECT_EQ((*it)[2].str(), slurp(source(file))) << file;
        shown.insert(file);
    }
    EXPECT_EQ(shown, (std::set<std::string>{"deploy/kubernetes/gpubind.yaml",
                                            "deploy/kubernetes/uninstall.yaml"}));
}

}  // namespace
