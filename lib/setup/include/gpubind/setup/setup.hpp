// Registering gpubind with container engines (`gpubind setup`): docker's
// daemon.json, a containerd drop-in and its import, a CRI-O drop-in, the OCI
// hooks.d file podman reads, a runc bundle's config.json.
//
// The edit functions are pure (old text in, new text out) and keep everything
// they do not own; plan_setup() reads the files and validates them all before
// apply_setup() writes any.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind::util {
class Journal;
}

namespace gpubind::setup {

enum class Engine { Docker, Containerd, Crio, Podman, Runc };

// "docker", "containerd", "crio", "podman", "runc"; nullopt for anything else.
std::optional<Engine> parse_engine(std::string_view name);

inline constexpr std::string_view kRuntimeName = "gpubind";
inline constexpr std::string_view kBackupSuffix = ".gpubind-backup";

// What the files say.
struct Options {
    std::string runtime_path = "/usr/bin/gpubind-runtime";
    std::string hook_path = "/usr/bin/gpubind-hook";
    // Every hook gpubind registers carries an explicit env naming its config.
    std::string config_path = "/etc/gpubind/config.toml";
    bool set_default = false;  // make gpubind the default runtime; without it a default
                               // naming gpubind is taken out (the files follow the command line)
    // The engine's own CDI support turned on (--cdi), reading these directories:
    // containerd 1.7+ (enable_cdi, cdi_spec_dirs in the cri plugin; 1.6 ignores
    // them, gpubind-runtime applies CDI requests there), docker 25+
    // (features.cdi), CRI-O 1.23+ (crio.runtime cdi_spec_dirs). podman 4.x
    // reads /etc/cdi and /var/run/cdi by itself.
    bool cdi = false;
    std::vector<std::string> cdi_spec_dirs = {"/etc/cdi", "/var/run/cdi"};
};

// A file's content; nullopt: the file does not exist (or is to be deleted).
using Text = std::optional<std::string>;

// Where the files are, relative to the root (`--prefix`).
inline constexpr std::string_view kDockerConfig = "etc/docker/daemon.json";
inline constexpr std::string_view kContainerdConfig = "etc/containerd/config.toml";
inline constexpr std::string_view kContainerdDropIn = "etc/containerd/conf.d/gpubind.toml";
inline constexpr std::string_view kCrioDropIn = "etc/crio/crio.conf.d/99-gpubind.conf";
// podman (4.x) reads only this directory unless containers.conf says otherwise.
inline constexpr std::string_view kHooksFile = "usr/share/containers/oci/hooks.d/gpubind-hook.json";

// --- pure edits. `what` names the file in errors (Error EINVAL on bad input). ---

// docker: runtimes.gpubind {path, runtimeArgs} and default-runtime; every other key kept in
// its order. Remove takes out runtimes.gpubind (and runtimes when left empty) and a
// default-runtime naming gpubind; nullopt when nothing else is left.
std::string docker_add(const Text& old, const Options& o, const std::string& what);
Text docker_remove(const Text& old, const std::string& what);

// containerd (config version 2, containerd 1.x): the drop-in with the runtime (runc v2
// shim, options.BinaryName). containerd 1.x replaces a whole plugin section with an
// imported one, so the drop-in carries the cri plugin section of `main_config` too.
std::string containerd_drop_in(const Text& main_config, const Options& o, const std::string& what);
// config.toml with `import` in its top-level imports (created with version = 2 when
// absent), edited in place: every other byte is kept.
std::string containerd_add_import(const Text& main_config, std::string_view import,
                                  const std::string& what);
// `import` taken out of imports (the key too when left empty); nullopt when only
// "version = 2" is left, which is what containerd_add_import created.
Text containerd_remove_import(const Text& main_config, std::string_view import,
                              const std::string& what);

// CRI-O drop-in: [crio.runtime.runtimes.gpubind] and, with set_default, default_runtime.
std::string crio_drop_in(const Options& o);
// OCI hooks.d file (schema 1.0.0) running gpubind-hook at prestart for every container
// (the hook leaves non-GPU containers alone).
std::string hooks_json(const Options& o);
// A runc bundle's config.json with gpubind-hook in hooks.prestart (an entry with the same
// path is replaced in place); remove takes out entries with that path.
std::string runc_add_hook(const std::string& config, const Options& o, const std::string& what);
std::string runc_remove_hook(const std::string& config, const Options& o, const std::string& what);

// --- files ---

struct Request {
    Engine engine = Engine::Docker;
    Options options;
    bool remove = false;
    std::filesystem::path prefix = "/";  // every engine file lives under it
    std::filesystem::path bundle;        // runc: the bundle whose config.json to edit
};

// One file to change.
struct Change {
    std::filesystem::path path;
    Text before;               // now
    Text after;                // wanted
    std::string what;          // what changes, for the report
    bool keep_backup = false;  // save `before` as PATH.gpubind-backup first (once)
    bool drop_backup = false;  // `after` is the backup's content: delete the backup after
    unsigned mode = 0644;      // a new file's (one that exists keeps its own)
    bool binary = false;       // a program: a dry run does not print it
};

// Reads the engine's files and works out every change; throws (changing nothing) when a
// file is bad. With remove, a file with a backup gets the backup back; others lose only
// what gpubind added.
std::vector<Change> plan_setup(const Request& r);
// Makes the changes (or, with dry_run, only says what they would be). Returns the report:
// one line per file ("wrote PATH (...)", "removed PATH", "unchanged PATH"); with dry_run a
// file's new content follows its line. All or nothing: when a change fails, the ones
// made before it are undone (each file's bytes and mode, the directories made).
std::vector<std::string> apply_setup(const std::vector<Change>& changes, bool dry_run);
// The same, each change written into `journal` before it is made: the caller
// commits it once every step of its run is done (the destructor undoes).
std::vector<std::string> apply_setup(const std::vector<Change>& changes, bool dry_run,
                                     util::Journal& journal);

// The runc hooks fragment for config.json, for `--engine runc` without a bundle.
std::string runc_hooks_snippet(const Options& o);

// --- nvidia-container-cli (`gpubind setup --nvidia-container-cli`) ---

// The program the tools built on libnvidia-container run (enroot, Apptainer,
// NVIDIA's legacy hook), relative to the prefix, and gpubind's drop-in for it.
inline constexpr std::string_view kNvcLink = "usr/bin/nvidia-container-cli";
inline constexpr std::string_view kNvcProgram = "/usr/bin/gpubind-nvc";

struct NvcLinkRequest {
    std::filesystem::path prefix = "/";  // the link is PREFIX/usr/bin/nvidia-container-cli
    std::string nvc{kNvcProgram};        // what it points at, as the host sees it (absolute)
    bool remove = false;
};

// Points PREFIX/usr/bin/nvidia-container-cli at `nvc` (a symbolic link whose
// text is `nvc`), or with remove takes gpubind's link out again. The
// directory is resolved inside the prefix by descriptor (usr/bin may be a
// link of that tree) and must be root's, writable by nobody else; `nvc`
// must be an executable file inside the prefix.
//   - nothing there: the link is created (symlinkat: never over anything);
//   - a regular file (libnvidia-container's program) or another symbolic
//     link (update-alternatives'): kept as PATH.gpubind-backup (a hard link
//     made exclusively, of the link itself, not its target), then the link
//     renamed over it from a name created exclusively: PATH never missing;
//   - the link already, or a symbolic link that resolves inside the prefix to
//     `nvc` itself: nothing changes;
//   - anything else (a directory, a device, a FIFO), or a backup already
//     there while PATH is not gpubind's: refused (Error), nothing changed.
// remove: gpubind's link (its text `nvc`) is removed, or replaced by the
// backup when there is one (renamed over it); with nothing at PATH a backup
// is put back. Anything else at PATH is not gpubind's: left, and refused when
// a backup waits (putting it back would lose what is there now). Returns
// the report, one line ("created", "replaced", "unchanged", "removed",
// "restored"; with dry_run "would ..." and nothing written).
std::vector<std::string> nvc_link(const NvcLinkRequest& request, bool dry_run);

// The /dev/char/<major>:<minor> links systemd resolves device rules through
// (a unit's DeviceAllow; a rule for a node without one is dropped at
// `systemctl daemon-reload`), for every NVIDIA character device under
// <dev_root>/dev (nvidia*, nvidia-caps/*, nvidia-caps-imex-channels/*):
// relative links ("../nvidia0") as udev makes them. Idempotent: a right link
// is left, a wrong one replaced atomically, nothing else touched. Returns the
// report, one line per link ("created", "replaced", "unchanged"; with
// dry_run "would ..."). Only nodes whose major an NVIDIA driver registered in
// <proc_root>/devices (or 195) get a link: another node named like theirs is
// skipped with a line saying so (its link would replace a system device's).
std::vector<std::string> dev_char_links(const std::filesystem::path& dev_root,
                                        const std::filesystem::path& proc_root, bool dry_run);

// --- the driver's device nodes (`gpubind setup --device-nodes`) ---

// A character device the driver's procfs says the node has, with its numbers.
struct DriverNode {
    std::string path;  // "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap1"
    unsigned major = 0;
    unsigned minor = 0;
    std::string why;  // "GPU 0000:3b:00.0", "nvidiactl", "MIG capability <access file>"
};

enum class NodeSet {
    Control,  // nvidiactl, nvidia-uvm, nvidia-uvm-tools
    Gpus,     // those and each GPU's /dev/nvidia<minor> (Device Minor of its information file)
    All,      // those, nvidia-modeset and the MIG capability nodes (DeviceFileMinor of each
              // access file under driver/nvidia/capabilities; the major of nvidia-caps)
};

struct DriverNodes {
    std::vector<DriverNode> nodes;
    std::vector<std::string> notes;  // what the driver lacks: "nvidia-uvm is not loaded ..."
};

// The IMEX channels the driver makes by default (NVreg_ImexChannelCount).
inline constexpr unsigned kMaxImexChannel = 2048;

// Reads <proc_root>/devices and <proc_root>/driver/nvidia (never writes).
// Each of `imex_channels` (any set) is /dev/nvidia-caps-imex-channels/channel<n>
// on the major of nvidia-caps-imex-channels (none, with a note, without it).
// nvidia-uvm's major is the one /proc/devices gives (dynamic); without it the
// uvm nodes are left out with a note. A GPU excluded by the driver or with no
// Device Minor is left out with a note; a missing driver/nvidia/version throws.
DriverNodes driver_nodes(const std::filesystem::path& proc_root, NodeSet which,
                         const std::vector<unsigned>& imex_channels = {});

// Runs `<modprobe> <module>` for each module in turn (an empty environment
// but PATH; its messages go to this process's stderr). The first that fails
// throws Error(EIO, "load module", <module>, "<modprobe> exited with N").
void load_modules(const std::string& modprobe, const std::vector<std::string>& modules);
inline constexpr std::string_view kModprobe = "/sbin/modprobe";

struct DeviceNodeOptions {
    NodeSet which = NodeSet::Gpus;
    mode_t mode = 0666;  // the driver's default (NVreg_DeviceFileMode)
    bool force = false;  // replace a character device that has other numbers
    bool dry_run = false;
    std::vector<unsigned> imex_channels;  // channel numbers, each below kMaxImexChannel
    // <proc_root>/devices may be on a file system other than procfs: a
    // simulated node's (--simulated-proc). Without it such a file is refused.
    bool simulated_proc = false;
};

struct DeviceNodeReport {
    std::vector<std::string> lines;  // "created", "unchanged", "replaced", "left", notes
    unsigned left = 0;               // nodes found wrong and left as they were
};

// Makes the nodes driver_nodes() names under <dev_root>/dev, root-owned with
// exactly `mode`, as the driver would: a missing node is created (mknodat in
// the directory opened without following links; nvidia-caps/ and
// nvidia-caps-imex-channels/ made 0755 when missing). A node with the right numbers is left (its
// mode too). A character device with other numbers is left and counted in `left`, or with force
// replaced (a new node renamed over it); anything that is not a character
// device is always left and counted. The majors are the ones procfs gives
// (<proc_root>/devices must be on procfs unless options.simulated_proc): a
// node whose major is not an NVIDIA driver's there, is another driver's
// there or is one the kernel fixes for its own devices (1, mem) is refused
// (Error, ErrorKind::Refused) before any node is made. The directories must be owned by this
// user and writable by nobody else, else Error(EPERM). Errors of the system
// (EPERM from mknod for a user without CAP_MKNOD) throw, naming the path.
DeviceNodeReport make_device_nodes(const std::filesystem::path& dev_root,
                                   const std::filesystem::path& proc_root,
                                   const DeviceNodeOptions& options);

}  // namespace gpubind::setup
