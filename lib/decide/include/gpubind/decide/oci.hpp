// The OCI runtime state (hook stdin) and the bundle's config.json, read with
// size limits. Parsing only: what they mean for GPUs lives in request.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpubind::decide::oci {

inline constexpr std::size_t kMaxStateSize = 1u << 20;  // 1 MiB
inline constexpr std::size_t kMaxSpecSize = 16u << 20;  // 16 MiB
// The deepest nesting of arrays and objects a state or spec may have (a
// real spec has under 10; a document is copied and compared recursively).
inline constexpr std::size_t kMaxJsonDepth = 1000;
// process.env of a spec: entries ("KEY=VALUE") and the size of each, for a
// container that asks gpubind for something (check_env_caps).
inline constexpr std::size_t kMaxEnvEntries = 8192;
inline constexpr std::size_t kMaxEnvEntrySize = 64u << 10;  // 64 KiB

struct State {
    std::string oci_version;
    std::string id;
    std::string status;
    pid_t pid = 0;
    std::filesystem::path bundle;
    // crun adds "root": the spec's root.path as config.json gives it (the
    // rootfs is taken from config.json either way). Empty when absent.
    std::string root;
    std::map<std::string, std::string> annotations;
};

struct Mount {
    std::string destination;
    std::string source;
    std::string type;
    std::vector<std::string> options;
};

struct IdMapping {
    unsigned container_id = 0;
    unsigned host_id = 0;
    unsigned size = 0;
};

struct Spec {
    std::shared_ptr<const nlohmann::json> doc;  // the whole document, untouched
    std::filesystem::path bundle;
    std::filesystem::path rootfs;  // absolute: a relative root.path is relative to the bundle
    bool rootfs_readonly = false;
    std::vector<std::string> env;  // process.env, in order ("KEY=VALUE")
    std::vector<Mount> mounts;
    std::vector<std::string> bounding_caps;  // process.capabilities.bounding
    std::vector<IdMapping> uid_mappings;     // linux.uidMappings
    std::vector<IdMapping> gid_mappings;
    std::string cgroups_path;        // linux.cgroupsPath
    std::string rootfs_propagation;  // linux.rootfsPropagation ("rshared", ...)
    // Where process.env is past kMaxEnvEntries or kMaxEnvEntrySize
    // ("process.env: 9000 entries, more than 8192"); empty within them.
    std::string env_over_caps;

    // The last value of `name` in env (later entries win, as execve sees them).
    std::optional<std::string> getenv(std::string_view name) const;
    bool privileged() const;  // CAP_SYS_ADMIN in the bounding set
    // Where the spec has the runtime mount a new tmpfs (type "tmpfs", only
    // the options of one: no bind, no remount), under no later mount at its
    // path or above it, as normal paths ("/run" of containerd's default
    // spec). Only candidates: the image's links can send a mount elsewhere,
    // so the executor trusts what it finds there only as a tmpfs no mount of
    // the runtime's namespace shows (Target::fresh_tmpfs).
    std::vector<std::string> fresh_tmpfs() const;
};

// Throws Error(EINVAL, "read request", <bundle>/config.json, env_over_caps)
// where the environment is past its caps. Called only for a container that
// asks gpubind for something: runc starts any other, and so does gpubind.
void check_env_caps(const Spec& spec);

// Parse errors throw Error(EINVAL, "parse state"/"parse spec", what, detail).
// An environment past its caps is no parse error (Spec::env_over_caps).
State parse_state(std::string_view json, const std::string& what);
Spec parse_spec(std::string_view json, const std::filesystem::path& bundle);
// The same of a document already parsed (gpubind-runtime's edited spec).
Spec parse_spec_document(nlohmann::json doc, const std::filesystem::path& bundle);
// Reads <bundle>/config.json with kMaxSpecSize.
Spec load_spec(const std::filesystem::path& bundle);

}  // namespace gpubind::decide::oci
