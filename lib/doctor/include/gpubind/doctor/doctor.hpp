// `gpubind doctor`: what is wrong with a GPU node or a GPU container, and how
// to fix it. Each group of checks gathers facts (through the configured roots,
// an engine prefix, /proc/<pid>) and judges them with a pure function, so the
// tests judge broken simulated nodes and hand-made facts alike. Doctor only
// reads: it never changes the node.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/config/capabilities.hpp"
#include "gpubind/config/config.hpp"

namespace gpubind::doctor {

enum class Verdict { Ok, Warning, Problem };
std::string_view to_string(Verdict v);

// One check's answer.
struct Check {
    std::string group;  // "node", "gpubind", "engines", "cdi-specs", "container"
    std::string name;   // stable, e.g. "driver-libraries"
    Verdict verdict = Verdict::Ok;
    std::string summary;                // one line: what was found
    std::vector<std::string> evidence;  // paths, numbers, versions
    std::string fix;                    // one line: how to fix it ("" when ok)
};

struct Report {
    std::vector<Check> checks;
    int count(Verdict v) const;
    const Check* find(std::string_view name) const;  // the first check so named
};

// Exit status of `gpubind doctor`: 0 when no check is a problem (warnings
// allowed), kExitProblem otherwise.
inline constexpr int kExitProblem = 5;
int exit_code(const Report& report);

// JSON of schema kSchema, documented by docs/doctor.schema.json:
// {"schema", "problems", "warnings", "checks": [{"group", "name", "verdict",
// "summary", "evidence", "fix"}]}.
inline constexpr const char* kSchema = "gpubind.doctor/v1";
void to_json(nlohmann::json& j, const Report& report);
// One block per check: "[ok|warning|problem] group/name: summary", the
// evidence indented, "fix: ..." when there is one; then a count line.
std::string format_text(const Report& report);

// ---------------------------------------------------------------------------
// Facts. A file as lstat (and, for links, stat through them) saw it.
struct FileFact {
    enum class Type { Missing, Regular, Directory, Symlink, CharDevice, Socket, Other };
    Type type = Type::Missing;
    unsigned major = 0, minor = 0;  // devices
    unsigned mode = 0;              // permission bits
    unsigned uid = 0;
    std::string link;         // a symlink's target
    bool executable = false;  // a regular file with an x bit
    bool exists() const { return type != Type::Missing; }
};
// lstat of `path` (not following a final link; stat with `follow`).
FileFact stat_path(const std::filesystem::path& path, bool follow = false);
std::string describe(const FileFact& f);  // "character device 195:0", "missing", ...

// --- node ---
struct LibraryFact {
    std::string soname;  // "libcuda.so.1"
    config::Capabilities caps = 0;
    bool compat32 = false;
    std::string path;                 // the cache's path (node-relative)
    std::optional<std::string> real;  // resolved inside the driver root; nullopt: dangling
};
struct NodeFacts {
    config::Roots roots;
    std::string version_error;   // why the module's version could not be read ("" when read)
    std::string module_version;  // "550.54.15"
    std::map<std::string, unsigned, std::less<>> majors;     // proc/devices
    std::map<std::string, std::string, std::less<>> params;  // driver/nvidia/params
    struct ProcGpu {
        std::string bus_id;
        std::optional<unsigned> minor;  // "Device Minor"
        bool excluded = false;
    };
    std::vector<ProcGpu> gpus;
    // The driver's device files by node path ("/dev/nvidia0", "/dev/nvidia-uvm",
    // "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps-imex-channels/channel0"), lstat.
    std::map<std::string, FileFact> dev;
    // MIG capabilities the driver exposes: access file (proc path) -> DeviceFileMinor.
    std::map<std::string, std::optional<unsigned>> mig_caps;
    std::vector<std::string> imex_names;  // entries of dev/nvidia-caps-imex-channels
    std::string ldcache_path;
    std::string ldcache_error;
    std::vector<LibraryFact> libraries;  // catalog libraries found in the cache
    std::string persistenced_socket;     // host path
    FileFact persistenced;
    std::string ldconfig;    // the configured one ([node] ldconfig, '@' taken off)
    FileFact ldconfig_fact;  // stat through links
    config::LdcacheMethod ldcache_method = config::LdcacheMethod::Gpubind;
    config::SharesPolicy shares = config::SharesPolicy::Strict;  // [policy] shares
    // How the node enforces GPU shares (decide::share_enforcement): the
    // mechanism, or empty and why none.
    std::string share_by, share_lacks;
    std::vector<std::string> mps_daemons;  // under MPS: each GPU's daemon (decide/mps.hpp)
    // dev/char/<major>:<minor> of each device in `dev`: lstat, and where it leads.
    std::map<std::string, FileFact> dev_char;
    std::map<std::string, std::optional<std::string>> dev_char_target;  // resolved in the dev root
    // The config's device families as discovery finds them (node/families.hpp).
    struct Family {
        std::string name;
        std::vector<std::string> devices;   // found: "mlx5_0", "nvidia-fs0"
        std::vector<std::string> left_out;  // nodes or devices left out, and why
        std::vector<std::string> far_hcas;  // HCAs with no GPU under their switch or NUMA node
        std::string driver;                 // the glob family's driver name ("" for others)
        bool driver_loaded = false;         // /proc/devices (or /proc/misc) lists it
    };
    std::vector<Family> families;
};
NodeFacts gather_node(const config::Config& config);
std::vector<Check> check_node(const NodeFacts& facts);
// The device families (doctor_families.cpp): gather_node fills
// NodeFacts::families with it, check_node adds one check a family
// ("family-<name>"): a problem when nodes are left out for their numbers, a
// warning when a glob family's driver is loaded but no node is there, or an
// HCA has no GPU near it.
void gather_families(NodeFacts& facts, const config::Config& config);
std::vector<Check> check_families(const NodeFacts& facts);

// --- engines ---
inline constexpr std::string_view kHookName = "gpubind-hook";
struct EngineOptions {
    std::filesystem::path prefix = "/";  // engines' files, /run/systemd, /sys/fs/cgroup under it
};
struct Registration {
    std::string mode;               // "hook", "runtime" (the shim), "cdi"
    std::string file;               // where it is registered
    std::string path;               // the binary it names
    FileFact binary;                // stat through links
    std::optional<bool> is_static;  // nullopt: not an ELF file we could read
    bool is_default = false;        // the engine's default runtime
};
struct EngineFacts {
    std::string name;  // "docker", "containerd", "crio", "podman", "runc"
    bool installed = false;
    std::string installed_evidence;
    std::string error;  // a registration file that does not parse
    bool systemd_cgroup_driver = false;
    std::vector<Registration> registrations;
};
struct EnginesFacts {
    bool systemd = false;  // run/systemd/system exists
    bool cgroup2 = false;  // sys/fs/cgroup is cgroup v2 (cgroup.controllers at its top)
    std::vector<EngineFacts> engines;
};
EnginesFacts gather_engines(const EngineOptions& options);
std::vector<Check> check_engines(const EnginesFacts& facts);

// --- gpubind itself ---
struct GpubindFacts {
    std::string config_path;           // "" for the built-in defaults
    std::string config_error;          // why it does not load ("" when it does)
    bool config_env_relative = false;  // GPUBIND_CONFIG names it by a relative path
};
std::vector<Check> check_gpubind(const GpubindFacts& facts);
// What gpubind keeps for the driver state: the node description and the
// node's CDI specs, each current or not (read only: nothing is rewritten).
struct StateFacts {
    std::string description_path;
    std::string description_stale;  // why it is not trusted now ("" when it is)
    std::string node_error;         // the node could not be learned at all
    struct Spec {
        std::string path;
        FileFact file;
        std::string state;    // "current", "stale", "missing", "left over"
        bool wanted = false;  // refresh() would write it (false: would remove it)
    };
    std::vector<Spec> cdi;
};
StateFacts gather_state(const config::Config& config);
std::vector<Check> check_state(const StateFacts& facts);

// --- CDI specs on the node, whoever wrote them (`gpubind cdi check`) ---
struct CdiSpecFacts {
    config::Roots roots;
    std::string module_version;                           // the running driver's ("" when unknown)
    std::map<std::string, unsigned, std::less<>> majors;  // proc/devices
    // The device nodes the driver's procfs says the node has (path -> why):
    // a missing one of these is made by `gpubind setup --device-nodes`.
    std::map<std::string, std::string, std::less<>> driver_nodes;
    struct Edit {
        std::string device;  // "nvidia.com/gpu=0"; "nvidia.com/gpu" for the common edits
        enum class What { Node, Mount, Hook } what = What::Node;
        std::string path;                      // host path (a node's hostPath, else its path)
        std::optional<unsigned> major, minor;  // a node's, when the spec gives them
        FileFact now;                          // stat through links
    };
    struct File {
        std::string path;
        std::string refused;               // why no engine would use it ("" when it loads)
        bool refused_content = false;      // refused for what it says, not the file itself
        std::string version;               // its cdiVersion
        std::string needed;                // the lowest cdiVersion its features need
        std::vector<std::string> devices;  // qualified names
        std::vector<Edit> edits;
    };
    std::vector<File> files;
};
// The files named, or every spec in config.cdi.spec_dirs when none is.
CdiSpecFacts gather_cdi_specs(const config::Config& config,
                              const std::vector<std::filesystem::path>& files);
// One check per file (group "cdi-specs", named by its path): a problem when
// it cannot be loaded, a device node is missing, of another type or numbers
// or of a major /proc/devices does not list, a mounted path is missing or a
// driver library (or firmware) of another version than the module's, a hook's
// program is missing or not executable, or a device name is defined in
// another file too. A warning when it declares a cdiVersion above the lowest
// its features need: an engine with an older CDI library refuses the file.
std::vector<Check> check_cdi_specs(const CdiSpecFacts& facts);

// --- a container ---
struct ContainerOptions {
    pid_t pid = 0;                 // 0: none
    std::filesystem::path bundle;  // empty: found from the pid in the runtimes' state
    std::vector<std::filesystem::path> state_roots;  // runc-style state roots (id/state.json)
};
struct ContainerFacts {
    pid_t pid = 0;
    std::string bundle;
    std::string find_error;  // the bundle or the process could not be found
    std::string request;     // what it asked for, in words
    bool gpu = false;
    std::string plan_error;  // decide() refused or failed
    struct Device {
        std::string path, why;
        unsigned major = 0, minor = 0;
        std::optional<FileFact> now;  // in the container's /dev (nullopt: not looked at)
        std::optional<bool> allowed;  // by its device cgroup (nullopt: unknown)
    };
    std::vector<Device> devices;
    struct Mount {
        std::string target, why;
        bool present = false;
    };
    std::vector<Mount> mounts;
    std::string cgroup_kind;  // "v1", "v2"
    std::string cgroup_dir;
    std::string cgroup_error;
    std::vector<std::string> cgroup_evidence;  // programs looked at, devices.list lines
};
ContainerFacts gather_container(const ContainerOptions& options, const config::Config& config);
std::vector<Check> check_container(const ContainerFacts& facts);

// ---------------------------------------------------------------------------
// Runs `fn` in a forked child and takes its checks back; a child that does not
// answer within `deadline` is killed and the answer is one problem naming the
// group (a hung driver or a stuck mount never hangs doctor). An exception in
// the child becomes a problem check too.
std::vector<Check> run_bounded(const std::string& group,
                               const std::function<std::vector<Check>()>& fn,
                               std::chrono::milliseconds deadline);

struct Options {
    // The config file named (--config) or found; `config` was loaded from it,
    // or is the defaults when config_error is set.
    GpubindFacts gpubind;
    EngineOptions engines;
    std::optional<ContainerOptions>
        container;  // --pid / --bundle: the container instead of the node
    std::chrono::milliseconds deadline{10000};  // per group
};
Report run(const config::Config& config, const Options& options);

}  // namespace gpubind::doctor
