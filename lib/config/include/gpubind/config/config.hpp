// The configuration: where the node's files are, what belongs to which
// capability, and the request policy. Loaded from TOML.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/config/capabilities.hpp"

namespace gpubind::config {

// Every host path gpubind reads goes through one of these roots.
struct Roots {
    std::filesystem::path driver =
        "/";  // holds etc/ld.so.cache, usr/lib*, usr/bin, lib/firmware, run/
    std::filesystem::path dev = "/";       // holds dev/nvidia*
    std::filesystem::path proc = "/proc";  // holds driver/nvidia, devices
    std::filesystem::path sys = "/sys";    // sysfs: PCI placement, HCAs, DRM nodes

    bool operator==(const Roots&) const = default;
};

// One line of the catalog: a file name (libraries: the name before the
// version, e.g. "libcuda.so"; binaries: the file name; ipcs: a path under the
// driver root; firmware: a glob under the driver root where "{version}" stands
// for the driver version) and the capabilities that bring it.
struct CatalogEntry {
    std::string name;
    Capabilities caps = 0;

    bool operator==(const CatalogEntry&) const = default;
};

struct Catalog {
    std::vector<CatalogEntry> libraries;
    std::vector<CatalogEntry> binaries;
    std::vector<CatalogEntry> ipcs;
    std::vector<CatalogEntry> firmware;

    bool operator==(const Catalog&) const = default;
};

// What to do when the kernel or the sandbox refuses a step gpubind could do
// without (a device cgroup rule: BPF refused in a nested or rootless
// container, EPERM on the cgroup files): fail the container, or go on without
// it and log a warning.
enum class OnRefused { Fail, Warn };
// [policy] shares: a GPU share this node cannot enforce refuses the container
// (Strict) or starts it unenforced with a warning (Soft).
enum class SharesPolicy { Strict, Soft };

// How a container's loader cache is refreshed ([policy] ldcache): gpubind
// writes /etc/ld.so.cache itself ("gpubind"), or runs the host's ldconfig
// sandboxed ("ldconfig").
enum class LdcacheMethod { Gpubind, Ldconfig };

struct Policy {
    bool accept_envvar_unprivileged =
        true;  // may a container without CAP_SYS_ADMIN ask by variable
    // May a container without CAP_SYS_ADMIN ask for CDI devices by cdi.k8s.io/* annotations.
    bool accept_cdi_annotations_unprivileged = true;
    // The vendors whose CDI devices NVIDIA_VISIBLE_DEVICES may name (anyone) and a
    // container without CAP_SYS_ADMIN may name at all; empty: the vendor of [cdi] kind.
    std::vector<std::string> cdi_vendors;
    bool accept_volume_mounts = false;       // honour /var/run/nvidia-container-devices mounts
    bool disable_require = false;            // ignore every NVIDIA_REQUIRE_*
    Capabilities supported = kCapAll;        // what containers may ask for
    bool cgroups = true;                     // write device cgroup rules for injected nodes
    OnRefused on_refused = OnRefused::Fail;  // [policy] on-refused
    // [policy] shares
    SharesPolicy shares = SharesPolicy::Strict;
    bool cuda_compat = true;                         // prefer the image's newer CUDA compat libcuda
    LdcacheMethod ldcache = LdcacheMethod::Gpubind;  // [policy] ldcache
    // Users besides root who may own the node's IPCs and their directories
    // (a persistenced run with --user): [policy] ipc-owners, numeric uids.
    std::vector<unsigned> ipc_owners;

    bool operator==(const Policy&) const = default;
};

struct LogConfig {
    std::string file;            // empty: stderr only
    std::string level = "info";  // trace, debug, info, warn, error, off

    bool operator==(const LogConfig&) const = default;
};

// The Container Device Interface side ([cdi]): where gpubind writes the
// node's specs, under which kind, with which driver files, and where
// gpubind-runtime reads specs (every vendor's) for CDI requests.
struct CdiConfig {
    std::filesystem::path dir = "/var/run/cdi";            // gpubind's specs are written here
    std::string kind = "nvidia.com/gpu";                   // vendor/class of the GPU devices
    Capabilities caps = kCapUtility | kCapCompute;         // driver files in the spec
    std::filesystem::path hook = "/usr/bin/gpubind-hook";  // the createContainer hook
    // Read by gpubind-runtime, lowest priority first (CDI's order).
    std::vector<std::filesystem::path> spec_dirs = {"/etc/cdi", "/var/run/cdi"};

    bool operator==(const CdiConfig&) const = default;
};

// `gpubind mps` ([mps]): the MPS control daemons gpubind runs, one a GPU,
// each under <root>/<GPU UUID>/ (pipe/, log/, shm/, limits). `memory` is each
// daemon's pinned memory ceiling: "" (the whole GPU), a size ("10G") or
// "replicas" (the GPU's memory over [device-plugin] sharing's replicas);
// `compute` its active thread percentage: "100", a percent or "replicas".
struct MpsConfig {
    std::filesystem::path root = "/run/gpubind/mps";
    std::string memory;
    std::string compute = "100";

    bool operator==(const MpsConfig&) const = default;
};

// How a device family's nodes are found on the node.
enum class FamilySource {
    Glob,        // `nodes`: globs under the dev root; each node found is one device
    Infiniband,  // the HCAs sysfs lists (class infiniband): each its uverbs node,
                 // its umad nodes as extras; `nodes` are shared (rdma_cm)
    Drm,         // each given GPU's card and renderD nodes, found in sysfs by PCI bus id
};

// A device family ([family.<name>]): devices beside the GPU that a container
// asks for by variable (NVIDIA_GDS=enabled), by a selecting variable
// (GPUBIND_RDMA=affine), by a volume mount
// (/var/run/nvidia-container-devices/<name>/<device|all>) or by capability
// (DRM with graphics). Families are data: config/config.toml holds the built-in
// ones, a config may change them or add its own. A node's major is never taken
// from the image or a spec: `major` names it in /proc/devices ("misc": major 10,
// the minor /proc/misc lists under the node's file name).
struct Family {
    std::string name;  // the table's name: [a-z][a-z0-9-]*
    FamilySource source = FamilySource::Glob;
    std::vector<std::string> nodes;      // absolute paths or globs under /dev
    std::string major;                   // the driver's name in /proc/devices, or "misc"
    std::vector<std::string> variables;  // "enabled" (or true, 1, all) gives every device
    std::string select;                  // a variable naming devices: all, affine, names
    std::string extras;                  // a variable whose "enabled" adds the extras (umad)
    Capabilities caps = 0;               // capabilities that bring it with the GPUs
    std::vector<std::string> files;      // files under the driver root given when present
    std::string cdi_kind;                // "nvidia.com/gds"; empty: no CDI devices of its own

    bool operator==(const Family&) const = default;
};

struct Config {
    Roots roots;
    std::filesystem::path ldcache;                      // empty: <driver root>/etc/ld.so.cache
    std::filesystem::path ldconfig = "/sbin/ldconfig";  // the host's, run for the container
    // Where the node description lives ([node] state-dir; description.hpp).
    std::filesystem::path state_dir = "/run/gpubind";
    // cgroup v2: where the device programs gpubind makes are kept for reuse
    // ([node] bpf-dir, a directory on bpffs); empty: one loaded per start.
    std::filesystem::path bpf_dir = "/sys/fs/bpf/gpubind";
    Catalog catalog;
    Policy policy;
    LogConfig log;
    std::vector<std::string> runtimes = {"runc", "crun"};  // for gpubind-runtime
    CdiConfig cdi;
    std::vector<Family> families;  // by name
    MpsConfig mps;
    std::filesystem::path source;  // the file it was read from, empty for defaults

    const Family* family(std::string_view name) const;

    std::filesystem::path ldcache_path() const {
        return ldcache.empty() ? roots.driver / "etc/ld.so.cache" : ldcache;
    }

    // Every field (the built-in defaults are checked against config/config.toml this way).
    bool operator==(const Config&) const = default;
};

// Where the config lives unless --config or GPUBIND_CONFIG says otherwise.
inline constexpr std::string_view kDefaultConfigPath = "/etc/gpubind/config.toml";
inline constexpr std::string_view kConfigEnv = "GPUBIND_CONFIG";

// The built-in configuration: config/config.toml, turned into plain
// initialisers at build time (no parsing at run time).
Config default_config();
// Parses TOML text over the defaults. An unknown key or a bad value throws
// Error(EINVAL, "load config", what, "<key>: <why>").
Config parse_config(std::string_view toml, const std::string& what);
// Reads and parses a config file (size capped).
Config load_config(const std::filesystem::path& path);
// The config a command uses: the explicit path if given, else $GPUBIND_CONFIG,
// else the default path if it exists, else the defaults.
Config load_effective_config(const std::filesystem::path& explicit_path);

// The config of a process that runs as root for a container (the hook, the
// runtime): $GPUBIND_CONFIG (the registration's "env") or the default path if
// it exists, else the defaults. The file must be named by an absolute path,
// be a regular file (not reached through a final symlink), owned by root (or
// this process's user) and writable by no one else; otherwise an
// Error(EINVAL/EACCES) naming it.
Config load_trusted_config();
// gpubind-runtime's: $GPUBIND_CONFIG, else the config.toml in `own_dir`
// (its own directory) when there is one, as a host install from a container
// puts it (engines hand a runtime no environment of its own), else as above.
Config load_trusted_config_beside(const std::filesystem::path& own_dir);
// The same checks and parse of the file at `path`, which must exist
// (gpubind doctor judges a config as the hook would).
Config load_trusted_config(const std::filesystem::path& path);

}  // namespace gpubind::config
