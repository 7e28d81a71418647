// The plan: everything that goes into one container, computed by a pure
// function of the request, the node and the image. The executor carries it
// out; `gpubind plan` prints it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/image.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/util/mount_flags.hpp"

namespace gpubind::decide {

struct PlannedMount {
    std::string source;      // host path, absolute
    std::string target;      // container path, absolute (inside the rootfs)
    bool directory = false;  // the mount point is a directory, else a file
    unsigned flags = 0;      // MountFlag bits
    std::string why;         // "compute library libcuda.so.1", ...
};

struct PlannedDevice {
    node::DeviceNode node;  // node.host_path is bound onto node.path in the container
    std::string why;        // "GPU 0", "nvidiactl", ...
    bool bind = true;       // false: cgroup access only (gpubind configure --no-devbind)
};

struct PlannedSymlink {
    std::string path;    // container path of the link
    std::string target;  // what it points to (relative, in the same directory)
};

// A small file gpubind writes into the container's rootfs (never a host file):
// created with O_CREAT|O_EXCL|O_NOFOLLOW, its parent resolved inside the root.
struct PlannedFile {
    std::string path;  // container path, absolute
    std::string content;
    std::string why;
};

// Where the CUDA compat libraries' loader entry goes: ldconfig's
// "include /etc/ld.so.conf.d/*.conf" reads it before the distributions' files.
inline constexpr const char* kCudaCompatConf = "/etc/ld.so.conf.d/000-cuda-compat.conf";

// The container's /proc/driver/nvidia: a tmpfs holding copies of the host's
// files, with params saying ModifyDeviceFiles: 0, and only the selected GPUs.
struct ProcView {
    std::string target = "/proc/driver/nvidia";
    std::string version;  // content of version
    std::string params;   // content of params (ModifyDeviceFiles: 0)
    struct GpuDir {
        std::string bus_id;       // directory name under gpus/
        std::string information;  // content of information
    };
    std::vector<GpuDir> gpus;
    std::vector<std::string> capability_files;  // MIG access files (host paths under the proc root)
};

// The driver's names gpubind owns in one container directory, whether or
// not this plan injects them (the rule: docs/design/container-ownership.md): what an
// earlier start for another driver version, other capabilities or another
// image left at them is brought up to date by the executor (stale_entries()).
struct OwnedDir {
    std::string dir;  // container directory (libraries, binaries)
    std::vector<std::string>
        stems;  // each node library's file name less the driver version: "libcuda.so."
    std::vector<std::string>
        links;  // their sonames and development links: "libcuda.so.1", "libcuda.so"
    std::vector<std::string> files;  // binaries' names: "nvidia-smi"
};

struct Plan {
    std::vector<PlannedDevice> devices;
    std::vector<PlannedMount> mounts;
    std::vector<PlannedSymlink> symlinks;
    std::vector<PlannedFile> files;
    // Files an earlier start may have written that this plan does not (the
    // CUDA compat loader entry of a decision since reversed): removed where
    // they hold exactly `content`, left alone otherwise.
    std::vector<PlannedFile> stale_files;
    std::vector<OwnedDir> owned;
    std::optional<ProcView> proc;
    std::vector<std::string> library_dirs;  // container dirs the loader cache must cover
    bool refresh_ldcache = false;
    // What the refresh adds to the image's cache, as ldconfig would find it in
    // library_dirs (their order): the CUDA compat libraries by their soname
    // links, then each mounted library by its soname (the file or the link
    // beside it) and the development links libcuda.so, libnvidia-ml.so.
    std::vector<ldcache::Library> ldcache_libraries;
    // The image has no loader cache but an /etc/ld.so.conf naming something:
    // only a scan of those directories (ldconfig) refreshes it faithfully.
    bool ldcache_scan = false;
    // Variables the container's process must get ("NAME=value": an MPS
    // share's CUDA_MPS_*, decide/mps.hpp): set by gpubind-runtime in the
    // spec; a hook alone, run after the process's environment is made,
    // cannot set them.
    std::vector<std::string> env;

    bool empty() const { return devices.empty() && mounts.empty() && files.empty() && !proc; }
};

// Everything `request` brings into a container with `image`, from the node's
// `selection` (select_devices(node, request.devices)). Pure: no I/O.
//  - devices: nvidiactl for any GPU container; nvidia-uvm and nvidia-uvm-tools
//    with compute; nvidia-modeset with display; each selected GPU's node; a MIG
//    device's parent GPU node and its gi/ci capability nodes; the MIG config
//    and monitor capability nodes when asked for; the IMEX channels asked
//    for (select_imex_channels), whether or not there is a GPU.
//  - mounts (deduplicated by target): libraries of the asked capabilities at
//    image.lib_dir/<versioned file name> (32-bit ones at image.lib32_dir, only
//    with compat32), binaries at image.bin_dir, all ro,nosuid,nodev; IPC
//    sockets and the MPS pipe directory at their own path, rw,nosuid,nodev,noexec;
//    firmware at /lib/firmware/nvidia/<driver version>/<file>, ro,nosuid,nodev,noexec.
//  - symlinks: <soname> -> <versioned file> beside each library, and the
//    development links libcuda.so -> libcuda.so.1 and
//    libnvidia-ml.so -> libnvidia-ml.so.1 where those libraries are mounted.
//  - proc: for any GPU container, the selected GPUs (and MIG parents) only.
//  - files: CUDA forward compatibility. With compute, config.policy.cuda_compat
//    and image.cuda_compat_version newer than the node's driver version: the
//    file kCudaCompatConf holding "/usr/local/cuda/compat\n", and that
//    directory first in library_dirs (the refresh lists the directories named
//    on its command line first, and the loader takes the first entry), and its
//    soname links (image.cuda_compat_sonames) first in ldcache_libraries.
//    Otherwise, for any GPU container, that file with that content in
//    stale_files.
//  - ldcache_scan: refresh_ldcache, the image has no /etc/ld.so.cache and its
//    /etc/ld.so.conf names something (image.ld_so_conf).
//  - owned: for image.lib_dir (and image.lib32_dir when the image has one),
//    the stems, sonames and development links of every library of the node,
//    whatever its capabilities; for image.bin_dir, every binary's name.
// Throws Error(ECANCELED, "plan", ...) when the request asks for MIG
// config/monitor and the node has no such capability device; Error(EINVAL,
// "select IMEX channel", ...) for an IMEX channel the node lacks.
Plan make_plan(const Request& request, const node::Node& node, const node::Selection& selection,
               const Image& image, const config::Config& config, const node::ProcFiles& proc_files);

struct FamilyItems {
    std::vector<PlannedDevice> devices;
    std::vector<PlannedSymlink> links;
    std::vector<PlannedMount> files;
};

// The nodes, links and files of request.families from the node, for a
// container given `gpus` (whole GPUs and MIG parents). Pure but for logging:
// - a family asked by variable, selection or mount that the node lacks throws
//   Error(ECANCELED, "plan", <asked by>, ...), or with on-refused = warn is
//   left out with a warning; one asked only by capability is left out quietly;
// - a device named that the family lacks throws Error(EINVAL, "select device",
//   <name>, "no <family> device <name> on this node (it has ...)");
// - affine: for each GPU the devices nearest it (sysfs::nearest), logged when
//   none is.
FamilyItems plan_families(const Request& request, const node::Node& node,
                          const std::vector<const node::Gpu*>& gpus, const config::Config& config);

// JSON with stable field names:
//   {"devices": [{"path", "host_path", "major", "minor", "why"}],
//    "mounts": [{"source", "target", "directory", "flags": ["ro","nosuid","nodev","noexec"],
//    "why"}], "symlinks": [{"path", "target"}], "files": [{"path", "content", "why"}], "proc": null
//    | {"target", "gpus": [bus ids], "capability_files": [host paths]}, "library_dirs": [...],
//    "refresh_ldcache": bool}
void to_json(nlohmann::json& j, const Plan& plan);
// Human-readable, one line per item, with the reason.
std::string describe(const Plan& plan);

}  // namespace gpubind::decide
