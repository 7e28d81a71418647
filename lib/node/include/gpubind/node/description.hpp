// The node description: what discovery and NVML learn of the node, kept in
// one file (<state-dir>/node.desc) per driver state, so that a container's
// start reads it instead of rediscovering the node and asking NVML.
//
// The file is trusted only when it is a regular file (opened with
// O_NOFOLLOW), owned by root, writable by no one else, at most
// kMaxDescriptionSize bytes, in a directory of root's no one else may write,
// it starts with this gpubind's schema, its digest matches its content, its
// content decodes (a compact binary encoding, bounds-checked: see
// description.cpp), and the fingerprint it was made for equals the node's
// fingerprint now. Anything else, and `refresh`, recomputes it
// (discover()) and rewrites it atomically (a new file renamed over it, 0644);
// a caller that cannot write the directory keeps what it computed in memory.
// Why the fingerprint is complete: docs/design/node-description.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::node {

inline constexpr const char* kNodeDescriptionName = "node.desc";
inline constexpr std::size_t kMaxDescriptionSize = 4u << 20;

// What is known of NVML for this driver state.
enum class NvmlStatus { NotAsked, Answered, Failed };

struct NvmlRecord {
    NvmlStatus status = NvmlStatus::NotAsked;
    std::int64_t asked_at = 0;  // unix time (seconds) NVML was asked
    std::int64_t took_ms = 0;   // how long the answer (or the failure) took
    std::string error;          // why it failed
};

// The driver state, cheap to take: part name -> value ("version": the
// driver's version file, "ldcache": the cache's identity, ...). Equal
// fingerprints mean the description still holds.
using Fingerprint = std::map<std::string, std::string>;

struct NodeKnowledge {
    Node node;
    ProcFiles proc;  // the /proc/driver/nvidia files the proc view copies
    NvmlRecord nvml;
    std::int64_t computed_at = 0;  // unix time (seconds) discovery ran
    bool recomputed = false;       // this call ran discovery (no trusted description)
    bool nvml_asked = false;       // this call asked NVML
    bool stored = false;           // the file holds what this returns
    std::string why;               // why it was recomputed ("" when read)
    std::filesystem::path path;    // the description file
    Fingerprint fingerprint;       // what it holds for
};

struct LoadOptions {
    bool need_nvml = false;  // ask NVML if this driver state never was
    bool refresh = false;    // recompute whatever the file says (gpubind info --refresh)
    bool write = true;       // store what was computed (when the directory allows)
    std::chrono::milliseconds nvml_timeout{5000};
};

// The node as the description has it, or as discover() finds it now (see
// above). Throws what discover() throws; failures to read or write the file
// are logged (debug) and cost a recomputation, never an error.
NodeKnowledge load_node(const config::Config& config, const LoadOptions& options = {});

// The fixed parts of the node's fingerprint now (exposed for tests and
// `gpubind doctor`). A description adds "watch:<path>" parts: the identity of
// the directories its driver files were found in and those an IPC's safety
// depends on.
Fingerprint node_fingerprint(const config::Config& config);

// The digest of the effective config, as the fingerprint holds it: every
// field but [log] (the log's level and file change no fact of the node).
std::string config_digest(const config::Config& config);

// The description file's framing around an encoded body: "<schema>\n", the
// body's 64-bit digest, the body. Exposed for tests, which reseal a body they
// changed; seal_description("").size() is the framing's size.
std::string seal_description(std::string_view body);

// The description file of `config`: <state-dir>/node.desc.
std::filesystem::path description_path(const config::Config& config);

}  // namespace gpubind::node
