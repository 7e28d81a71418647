// deploy/kubernetes (issue 25): the manifests are Kubernetes objects of the
// kinds and API versions they say, checked against Kubernetes' own OpenAPI
// definitions of those kinds (tests/data/k8s-openapi.json: the schemas
// reachable from them, descriptions removed) as a strict server would (an
// unknown field, a wrong type, a missing required field or an unknown
// apiVersion/kind is an error); they agree with what the installer does;
// only an init container holds privilege or the host's / (issue 44, F10); the
// release's copies name the image by digest; the config the image installs
// takes GPUs only from the device plugin; and docs/kubernetes.md shows these
// very files.
#include <cerrno>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "files.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/setup/host.hpp"
#include "gpubind/setup/setup.hpp"
#include "spec.hpp"
#include "temp_dir.hpp"

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
            out.push_back(gpubind::cdi::yaml::parse(doc, file.string()));
            doc.clear();
        } else {
            doc += line + "\n";
        }
    }
    out.push_back(gpubind::cdi::yaml::parse(doc, file.string()));
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
    EXPECT_EQ(kinds(install),
              "v1 Namespace\napps/v1 DaemonSet\nnode.k8s.io/v1 RuntimeClass\napps/v1 DaemonSet\n"
              "apps/v1 DaemonSet\n");
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

// The project's version, the tag of the image the repository's manifests name.
std::string project_version() {
    const std::string cmake = slurp(source("CMakeLists.txt"));
    std::smatch m;
    if (!std::regex_search(cmake, m, std::regex(R"(project\(gpubind VERSION ([0-9.]+))")))
        return "";
    return m[1].str();
}

// Every container of a pod template, init containers first.
std::vector<json> all_containers(const json& pod) {
    std::vector<json> out;
    for (const char* key : {"initContainers", "containers"})
        for (const auto& c : pod["spec"].value(key, json::array())) out.push_back(c);
    return out;
}

// What the manifests say agrees with what the installer and the image do.
// A container's securityContext that keeps nothing of root's: no escalation,
// a read-only root, every capability dropped and none added, the runtime's
// default seccomp profile.
void expect_no_privilege(const json& sc) {
    EXPECT_FALSE(sc.value("allowPrivilegeEscalation", true));
    EXPECT_TRUE(sc.value("readOnlyRootFilesystem", false));
    const json caps = sc.value("capabilities", json::object());
    EXPECT_EQ(caps.value("drop", json::array()), json::array({"ALL"}));
    EXPECT_FALSE(caps.contains("add"));
    EXPECT_EQ(sc.value("seccompProfile", json::object()).value("type", ""), "RuntimeDefault");
}

TEST(Manifests, AgreeWithTheInstallerAndTheImage) {
    const auto install = documents(source("deploy/kubernetes/gpubind.yaml"));
    const auto uninstall = documents(source("deploy/kubernetes/uninstall.yaml"));
    EXPECT_EQ(install[2]["handler"], std::string(gpubind::setup::kRuntimeName));
    const std::string version = project_version();
    ASSERT_FALSE(version.empty());
    for (const json* ds : {&install[1], &uninstall[0]}) {
        SCOPED_TRACE((*ds)["metadata"]["name"].get<std::string>());
        EXPECT_EQ((*ds)["metadata"]["namespace"], install[0]["metadata"]["name"]);
        const json& pod = (*ds)["spec"]["template"];
        EXPECT_EQ((*ds)["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]);
        // The project's version is the image's tag, for every container.
        for (const auto& c : all_containers(pod))
            EXPECT_EQ(c["image"], "gpubind-node:" + version) << c["name"];
        // GPUBIND_HOST_ROOT is where the host's / is mounted.
        ASSERT_TRUE(pod["spec"].contains("initContainers"));
        const json& c = pod["spec"]["initContainers"][0];
        std::string host_root;
        for (const auto& e : c["env"])
            if (e["name"] == "GPUBIND_HOST_ROOT") host_root = e["value"];
        const json& volume = pod["spec"]["volumes"][0];
        EXPECT_EQ(volume["hostPath"]["path"], "/");
        EXPECT_EQ(c["volumeMounts"][0]["name"], volume["name"]);
        EXPECT_EQ(c["volumeMounts"][0]["mountPath"], host_root);
        // The container that stays waits (entrypoint.sh wait).
        EXPECT_EQ(pod["spec"]["containers"][0]["args"], json::array({"wait"}));
    }
    EXPECT_EQ(install[1]["spec"]["template"]["spec"]["initContainers"][0]["args"],
              json::array({"install"}));
    EXPECT_EQ(uninstall[0]["spec"]["template"]["spec"]["initContainers"][0]["args"],
              json::array({"remove"}));
    // The image runs the entrypoint the end-to-end test runs, which knows
    // each action the manifests give it.
    const std::string containerfile = slurp(source("deploy/kubernetes/Containerfile"));
    EXPECT_THAT(containerfile,
                HasSubstr("COPY entrypoint.sh /usr/local/bin/gpubind-node-install\n"));
    EXPECT_THAT(containerfile, HasSubstr("ENTRYPOINT [\"/usr/local/bin/gpubind-node-install\"]"));
    const std::string entrypoint = slurp(source("deploy/kubernetes/entrypoint.sh"));
    for (const char* action : {"install", "remove", "wait"})
        EXPECT_THAT(entrypoint, HasSubstr(std::string("\n") + action + ")")) << action;
}

// The pod's running container: entrypoint.sh wait stops at once on SIGTERM
// (exit 0); an action it does not know is refused.
TEST(Manifests, TheEntrypointWaitsUntilStopped) {
    const std::string entrypoint = source("deploy/kubernetes/entrypoint.sh").string();
    const auto stopped = gpubind::test::run(
        "sh -c 'sh \"$0\" wait & p=$!; sleep 0.3; kill -TERM $p; wait $p; echo $?' '" + entrypoint +
        "' 2>&1");
    EXPECT_EQ(stopped.text, "0\n");
    const auto unknown = gpubind::test::run("sh '" + entrypoint + "' idle 2>&1");
    EXPECT_EQ(unknown.status, 2);
    EXPECT_THAT(unknown.text, HasSubstr("'idle' is not install, remove or wait"));
}

// Issue 44, F10: the installer was one privileged container with the host's
// / mounted read-write that then slept forever, so whoever may exec into a pod
// of its namespace had root on every GPU node. The privileged, host-writing
// part is an init container (it has exited when anyone could exec); what stays
// running holds no privilege, no capability and no host mount.
TEST(Manifests, OnlyAnInitContainerHoldsPrivilegeOrTheHost) {
    const auto install = documents(source("deploy/kubernetes/gpubind.yaml"));
    const auto uninstall = documents(source("deploy/kubernetes/uninstall.yaml"));
    for (const json* ds : {&install[1], &uninstall[0]}) {
        SCOPED_TRACE((*ds)["metadata"]["name"].get<std::string>());
        const json& spec = (*ds)["spec"]["template"]["spec"];
        EXPECT_FALSE(spec.value("hostPID", false) || spec.value("hostNetwork", false) ||
                     spec.value("hostIPC", false));
        EXPECT_FALSE(spec.value("shareProcessNamespace", false));
        EXPECT_FALSE(spec.value("automountServiceAccountToken", true));
        std::set<std::string> host_volumes;
        for (const auto& v : spec["volumes"])
            if (v.contains("hostPath")) host_volumes.insert(v["name"].get<std::string>());
        EXPECT_FALSE(host_volumes.empty());
        // The init container does the work the host needs.
        ASSERT_TRUE(spec.contains("initContainers"));
        ASSERT_EQ(spec["initContainers"].size(), 1u);
        const json& init = spec["initContainers"][0];
        EXPECT_TRUE(init["securityContext"]["privileged"].get<bool>());
        ASSERT_EQ(init["volumeMounts"].size(), 1u);
        EXPECT_TRUE(host_volumes.contains(init["volumeMounts"][0]["name"].get<std::string>()));
        // What stays running.
        ASSERT_EQ(spec["containers"].size(), 1u);
        const json& c = spec["containers"][0];
        SCOPED_TRACE(c["name"].get<std::string>());
        EXPECT_FALSE(c.contains("volumeMounts") || c.contains("volumeDevices"));
        const json& sc = c.value("securityContext", json::object());
        EXPECT_FALSE(sc.value("privileged", false));
        EXPECT_TRUE(sc.value("runAsNonRoot", false));
        EXPECT_NE(sc.value("runAsUser", 0), 0);
        EXPECT_NE(sc.value("runAsGroup", 0), 0);
        expect_no_privilege(sc);
    }
}

// The release's manifests (scripts/package manifests, which runs
// deploy/kubernetes/pin-image.sh) name the node image by digest: a node runs
// the image the release built, not whatever its tag is moved to. The
// repository's own keep the tag; a reference without a digest is refused.
TEST(Manifests, TheReleasesManifestsNameTheImageByDigest) {
    const gpubind::test::TempDir dir("gpubind-manifests");
    const std::string pin = source("deploy/kubernetes/pin-image.sh").string();
    const std::string digest = "sha256:" + std::string(64, '0').replace(0, 8, "0123abcd");
    const std::string image = "registry.example.com/gpubind/gpubind-node:0.1.0@" + digest;
    const auto r = gpubind::test::run("sh '" + pin + "' '" + image + "' '" +
                                      (dir / "release").string() + "' 2>&1");
    ASSERT_EQ(r.status, 0) << r.text;
    const OpenApi api;
    for (const char* name : {"gpubind.yaml", "uninstall.yaml"}) {
        SCOPED_TRACE(name);
        const auto ours = documents(source(std::string("deploy/kubernetes/") + name));
        const auto released = documents(dir / "release" / name);
        ASSERT_EQ(released.size(), ours.size());
        std::size_t images = 0;
        for (std::size_t i = 0; i < ours.size(); ++i) {
            EXPECT_THAT(api.check(released[i]), ElementsAre());
            // Only the images differ: each is the one by digest.
            json expected = ours[i];
            if (expected.value("kind", "") == "DaemonSet") {
                json& pod = expected["spec"]["template"]["spec"];
                for (const char* key : {"initContainers", "containers"}) {
                    if (!pod.contains(key)) continue;
                    for (auto& c : pod[key]) {
                        c["image"] = image;
                        ++images;
                    }
                }
            }
            EXPECT_EQ(released[i], expected);
        }
        EXPECT_GE(images, 2u);
        // Text outside the documents (the comments) as it was.
        EXPECT_EQ(
            std::regex_replace(slurp(dir / "release" / name), std::regex("image: .*"), "image: X"),
            std::regex_replace(slurp(source(std::string("deploy/kubernetes/") + name)),
                               std::regex("image: .*"), "image: X"));
    }
    // A tag, a short or upper-case digest, text that is no reference: refused,
    // nothing written.
    for (const std::string& bad :
         std::vector<std::string>{std::string("gpubind-node:0.1.0"), "gpubind-node@sha256:0123",
                                  "gpubind-node@sha256:" + std::string(64, 'A'),
                                  "gpubind-node@md5:" + std::string(32, '0'),
                                  image + "\nimage: evil", "gpubind-node|x@" + digest, ""}) {
        SCOPED_TRACE(bad);
        const auto refused = gpubind::test::run("sh '" + pin + "' '" + bad + "' '" +
                                                (dir / "refused").string() + "' 2>&1");
        EXPECT_EQ(refused.status, 2) << refused.text;
        EXPECT_THAT(refused.text, HasSubstr("pin-image.sh: "));
        EXPECT_FALSE(fs::exists(dir / "refused"));
    }
    // The release step is the one that runs it.
    EXPECT_THAT(slurp(source("scripts/package")),
                HasSubstr("\"$top/deploy/kubernetes/pin-image.sh\" \"$GPUBIND_NODE_IMAGE\""));
}

// The config the image installs on the host (Containerfile: its
// /etc/gpubind/config.toml, the package's own unless the image puts another
// there), as `gpubind setup --host-root` writes it beside gpubind-runtime.
gpubind::config::Config installed_config() {
    const std::string containerfile = slurp(source("deploy/kubernetes/Containerfile"));
    std::smatch m;
    fs::path file = source("config/config.toml");  // what the .deb installs there
    if (std::regex_search(containerfile, m,
                          std::regex(R"(\nCOPY ([^ \n]+) /etc/gpubind/config\.toml\n)")))
        file = source("deploy/kubernetes/" + m[1].str());
    const std::string text = gpubind::setup::config_with_hook(
        slurp(file), "/usr/local/gpubind/gpubind-hook", file.string());
    return gpubind::config::parse_config(text, file.string());
}

// Most CUDA images set NVIDIA_VISIBLE_DEVICES=all in their own environment: a
// pod that asks the scheduler for no GPU but runs one with runtimeClassName
// gpubind got every GPU, outside the device plugin's accounting. The
// installer's config takes GPUs only from the plugin's mounts or CDI names;
// the variable from a container without CAP_SYS_ADMIN is refused.
TEST(Manifests, TheInstallersConfigTakesGpusOnlyFromTheDevicePlugin) {
    using gpubind::test::make_spec;
    const gpubind::config::Config config = installed_config();
    EXPECT_FALSE(config.policy.accept_envvar_unprivileged);
    EXPECT_TRUE(config.policy.accept_volume_mounts);
    // An image's variable, or a legacy CUDA image, in a pod without GPUs: no GPU.
    for (const char* env :
         {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=12.2.0"}) {
        SCOPED_TRACE(env);
        const auto e = gpubind::test::error_of(
            [&] { gpubind::decide::read_request(make_spec({env}, false), config.policy); });
        EXPECT_EQ(e.code().value(), ECANCELED);
        EXPECT_THAT(e.what(), HasSubstr("not privileged"));
    }
    // The plugin's volume-mounts strategy: the mounts it made, whatever the image says.
    const std::string dir = "/var/run/nvidia-container-devices";
    const auto by_mounts = gpubind::decide::read_request(
        make_spec({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=" + dir}, false,
                  {dir + "/GPU-6e3a5d1c"}),
        config.policy);
    EXPECT_EQ(by_mounts.source, gpubind::decide::RequestSource::VolumeMounts);
    EXPECT_THAT(by_mounts.devices.ids, ElementsAre("GPU-6e3a5d1c"));
    // A CDI device's edits set the variable to void over the image's: no refusal.
    EXPECT_FALSE(
        gpubind::decide::read_request(
            make_spec({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"}, false),
            config.policy)
            .gpu_container());
    // A privileged pod may still ask by variable.
    EXPECT_EQ(gpubind::decide::read_request(make_spec({"NVIDIA_VISIBLE_DEVICES=all"}, true),
                                            config.policy)
                  .devices.kind,
              gpubind::node::DeviceIdsKind::All);
}

// gpubind-device-plugin's DaemonSet (issue 47) holds the least that works:
// no privilege, no capability, no host namespace; its one host directory is
// the kubelet's device-plugins (its config's plugin-dir); the GPUs NVML needs
// come through gpubind-runtime (its RuntimeClass), asked for by a /dev/null
// mount that the installer's config accepts as every GPU.
TEST(Manifests, TheDevicePluginRunsThroughGpubindWithoutPrivilege) {
    using gpubind::test::make_spec;
    const auto install = documents(source("deploy/kubernetes/gpubind.yaml"));
    ASSERT_EQ(install.size(), 5u);  // the last, gpubind mps, is privileged by need
    const json& ds = install[3];
    EXPECT_EQ(ds["metadata"]["name"], "gpubind-device-plugin");
    EXPECT_EQ(ds["metadata"]["namespace"], install[0]["metadata"]["name"]);
    const json& pod = ds["spec"]["template"];
    EXPECT_EQ(ds["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]);
    const json& spec = pod["spec"];
    EXPECT_EQ(spec["runtimeClassName"], install[2]["metadata"]["name"]);
    EXPECT_FALSE(spec.value("hostPID", false) || spec.value("hostNetwork", false) ||
                 spec.value("hostIPC", false) || spec.value("shareProcessNamespace", false));
    EXPECT_FALSE(spec.value("automountServiceAccountToken", true));
    EXPECT_FALSE(spec.contains("initContainers"));
    ASSERT_EQ(spec["containers"].size(), 1u);
    const json& c = spec["containers"][0];
    EXPECT_EQ(c["command"], json::array({"gpubind-device-plugin"}));
    EXPECT_EQ(c["image"], "gpubind-node:" + project_version());
    const json& sc = c.value("securityContext", json::object());
    EXPECT_FALSE(sc.value("privileged", false));
    expect_no_privilege(sc);
    // Host paths: the kubelet's directory, read-write; /dev/null, read-only.
    std::map<std::string, json> volumes;
    for (const auto& v : spec["volumes"]) volumes[v["name"].get<std::string>()] = v;
    std::map<std::string, std::string> host;  // mount path -> host path (":ro" when read-only)
    for (const auto& m : c["volumeMounts"]) {
        const json& v = volumes.at(m["name"].get<std::string>());
        if (v.contains("hostPath"))
            host[m["mountPath"]] = v["hostPath"]["path"].get<std::string>() +
                                   (m.value("readOnly", false) ? ":ro" : "");
    }
    const auto plugin = gpubind::config::parse_config_with_plugin(
        slurp(source("deploy/kubernetes/config.toml")), "config.toml");
    const std::string dir = "/var/run/nvidia-container-devices";
    EXPECT_EQ(host, (std::map<std::string, std::string>{
                        {plugin.plugin.plugin_dir.string(), plugin.plugin.plugin_dir.string()},
                        {dir + "/all", "/dev/null:ro"}}));
    // The mount and the variable the container has are every GPU to gpubind-runtime.
    std::vector<std::string> env;
    for (const auto& e : c["env"])
        env.push_back(e["name"].get<std::string>() + "=" + e["value"].get<std::string>());
    EXPECT_THAT(env, ElementsAre("NVIDIA_VISIBLE_DEVICES=" + dir));
    const auto request = gpubind::decide::read_request(make_spec(env, false, {dir + "/all"}),
                                                       installed_config().policy);
    EXPECT_EQ(request.source, gpubind::decide::RequestSource::VolumeMounts);
    EXPECT_EQ(request.devices.kind, gpubind::node::DeviceIdsKind::All);
    // The guide's pod (two-gpus.yaml) asks for 2 of the plugin's resource; its
    // spec is a valid pod spec (checked in this DaemonSet's template).
    const json pod_doc = documents(source("deploy/kubernetes/two-gpus.yaml")).at(0);
    EXPECT_EQ(kinds({pod_doc}), "v1 Pod\n");
    EXPECT_EQ(pod_doc["spec"]["containers"][0]["resources"]["limits"][plugin.plugin.resource_name],
              2);
    json as_template = ds;
    as_template["spec"]["template"]["spec"] = pod_doc["spec"];
    EXPECT_THAT(OpenApi().check(as_template), ElementsAre());
}

// docs/kubernetes.md shows the files themselves: each ```yaml or ```toml
// block after a "<!-- file: PATH -->" line is that file, byte for byte.
TEST(Manifests, TheGuideShowsTheseVeryFiles) {
    const std::string doc = slurp(source("docs/kubernetes.md"));
    const std::regex block(R"(<!-- file: ([^ ]+) -->\n```(?:yaml|toml)\n([\s\S]*?)```\n)");
    std::set<std::string> shown;
    for (std::sregex_iterator it(doc.begin(), doc.end(), block), end; it != end; ++it) {
        const std::string file = (*it)[1];
        EXPECT_EQ((*it)[2].str(), slurp(source(file))) << file;
        shown.insert(file);
    }
    EXPECT_EQ(shown, (std::set<std::string>{
                         "deploy/kubernetes/config.toml", "deploy/kubernetes/gpubind.yaml",
                         "deploy/kubernetes/two-gpus.yaml", "deploy/kubernetes/uninstall.yaml"}));
}

}  // namespace
