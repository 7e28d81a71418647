// The simulated node: a directory holding what an NVIDIA driver install
// leaves on a host, for the demo and the tests on machines without a GPU.
//
// Layout of a node at DIR (driver root DIR, dev root DIR, proc root DIR/proc):
//   dev/nvidia<N> (195:N), dev/nvidiactl (195:255), dev/nvidia-modeset (195:254),
//   dev/nvidia-uvm, dev/nvidia-uvm-tools (U:0, U:1), and with MIG
//   dev/nvidia-caps/nvidia-cap<M> (C:M): config (1, mode 0400), monitor (2, 0444)
//   and each MIG device's GPU and compute instance access (0444), numbered as
//   the driver's capability table does. With IMEX channels
//   dev/nvidia-caps-imex-channels/channel<n> (X:n, mode 0666) for n below the
//   spec's count. U, C and X are dynamic majors picked so that no driver on
//   this host holds them (opening the nodes fails with ENXIO); proc/devices
//   names them "nvidia-uvm", "nvidia-caps" and "nvidia-caps-imex-channels"
//   (the last two only when there are MIG devices, IMEX channels).
//   proc/devices, proc/driver/nvidia/{version,params,registry},
//   proc/driver/nvidia/gpus/<dddd:bb:dd.f>/information in the driver's format;
//   with MIG proc/driver/nvidia/capabilities/mig/{config,monitor},
//   .../capabilities/gpu<minor>/mig/gi<G>/access and .../gi<G>/ci<C>/access,
//   and proc/driver/nvidia-caps/mig-minors listing every capability the driver
//   can create (all 32 GPUs x 15 GPU instances x 8 compute instances). Without
//   MIG devices in the spec there is no MIG capability at all.
//   usr/lib/x86_64-linux-gnu (and usr/lib/i386-linux-gnu for 32-bit copies;
//   on arm64 usr/lib/aarch64-linux-gnu alone, the stubs AArch64 objects):
//   lib<X>.so.<version> files, soname links and, for short sonames,
//   development links; libvdpau_nvidia in the vdpau/ subdirectory. The 64-bit
//   libnvidia-ml and libcuda are the fake driver (lib/fake), the rest minimal
//   ELF objects (elf_stub.hpp).
//   usr/bin: nvidia-smi (the fake, -L as the real one prints it) and stand-ins
//   for nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-control/-server.
//   run/nvidia-persistenced/socket, run/nvidia-fabricmanager/socket (unix
//   sockets), tmp/nvidia-mps/, lib/firmware/nvidia/<version>/gsp_{ga10x,tu10x}.bin.
//   With Spec::prefix the libraries and programs are in the prefix instead
//   (see Spec).
//   etc/ld.so.conf naming the library directories (vdpau/ included) and
//   etc/ld.so.cache built from it by the system's ldconfig (-r DIR), or the
//   one Spec::ldconfig names (an arm64 one under qemu for an arm64 node).
//   gpubind-simulated-node.json: the manifest.
//
// The fake driver sees what a process on the node would: see
// lib/fake/fake_scan.h for its rules (a GPU is visible when its procfs entry
// is there and its device node opens or fails with ENXIO; MIG devices need
// their access files and capability nodes too).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/util/platform.hpp"

namespace gpubind::sim {

// One MIG device: on GPU `gpu` (its index), GPU instance `gi`, compute instance `ci`.
struct MigSpec {
    unsigned gpu = 0;
    unsigned gi = 0;
    unsigned ci = 0;
};

// What to simulate. simulate() rejects (Error EINVAL) gpus outside 1..64, a
// driver version that is not numbers separated by dots, a model that is empty,
// longer than 95 characters or has control characters, and MIG devices on a
// GPU that does not exist or is beyond GPU 31, with gi > 14 or ci > 7, or
// listed twice, more than kMaxImexChannels IMEX channels, and a prefix that is
// not a relative path of [A-Za-z0-9._-] names without "." or "..".
struct Spec {
    unsigned gpus = 8;
    std::string driver_version = "550.54.15";
    std::string model = "NVIDIA H100 80GB HBM3";
    std::vector<MigSpec> mig;  // empty: MIG off everywhere; a GPU with MIG devices has MIG on
    bool compat32 = platform::kHasCompat32;  // write the 32-bit (i386) libraries
    bool ipcs = true;            // persistenced and fabricmanager sockets, MPS pipe directory
    bool firmware = true;        // lib/firmware/nvidia/<ver>/gsp*.bin
    bool graphics = true;        // graphics, display, video and ngx libraries
    unsigned imex_channels = 0;  // IMEX channel nodes 0 .. imex_channels-1
    // "": a distribution's layout (above). Else the driver in a prefix of its
    // own, as GPU sandboxes ship it ("usr/local/nvidia"): <prefix>/lib64 and
    // <prefix>/lib (32-bit) in etc/ld.so.conf, the programs in <prefix>/bin,
    // and usr/bin holding shell scripts that run them from there.
    std::string prefix;
    // The ldconfig that builds etc/ld.so.cache: an absolute path; empty: the
    // system's (/sbin/ldconfig, else /usr/sbin/ldconfig).
    std::string ldconfig;
};
inline constexpr unsigned kMaxImexChannels = 2048;  // the driver's default channel count

// The node's own description of what was written: the tests compare what
// gpubind discovers against this, never against gpubind's own output.
struct ManifestGpu {
    unsigned index = 0;
    unsigned minor = 0;      // equal to the index
    std::string uuid;        // a function of index and driver version
    std::string pci_bus_id;  // as procfs names it: "0000:18:00.0"
    std::string model;
    std::string brand;               // as the fake NVML reports it, spelled as
                                     // NVIDIA_REQUIRE_BRAND does: "nvidia", "tesla"
    std::string compute_capability;  // likewise, "9.0"
};
// In order of GPU, GPU instance, compute instance (NVML's order).
struct ManifestMig {
    unsigned gpu = 0;  // parent index
    unsigned gi = 0;
    unsigned ci = 0;
    std::string uuid;           // "MIG-..."
    unsigned gi_cap_minor = 0;  // /dev/nvidia-caps/nvidia-cap<minor>
    unsigned ci_cap_minor = 0;
};
struct ManifestNode {
    std::string path;  // "/dev/nvidia0" (relative to the dev root); IMEX
                       // channels "/dev/nvidia-caps-imex-channels/channel<n>"
    unsigned major = 0;
    unsigned minor = 0;
};
struct ManifestFile {
    std::string kind;        // "library", "binary", "ipc", "firmware"
    std::string name;        // soname; file name; for ipcs the daemon
                             // ("nvidia-persistenced", "nvidia-fabricmanager",
                             // "nvidia-mps")
    std::string path;        // absolute path as seen from the node's root: the soname
                             // link for libraries, the file for the rest
    std::string real_path;   // the file it ends at (versioned name for libraries)
    std::string capability;  // "utility", "compute", "video", "graphics", "display", "ngx";
                             // the daemons' sockets and the firmware are "utility",
                             // the MPS directory "compute"
    bool compat32 = false;
};
struct Manifest {
    Spec spec;
    std::string cuda_version;  // "12.4", what the driver branch ships (lib/fake/fake_node.h)
    std::vector<ManifestGpu> gpus;
    std::vector<ManifestMig> migs;
    std::vector<ManifestNode> nodes;
    std::vector<ManifestFile> files;
};

// {"spec": {...}, "cuda_version", "gpus": [...], "migs": [...], "nodes": [...],
// "files": [...]}, the field names as in the structs above.
void to_json(nlohmann::json& j, const Manifest& m);

// File name of the manifest written at the top of the simulated node.
inline constexpr const char* kManifestName = "gpubind-simulated-node.json";

// Writes a simulated node under `dir` (created if missing; it must be empty
// or a previous simulated node, which is replaced, else Error(ENOTEMPTY)) and
// returns its manifest, also written to dir/kManifestName. The driver, dev and
// proc roots for it are dir, dir and dir/proc. Making device nodes needs
// CAP_MKNOD: without it this throws Error(EPERM) "simulate DIR/dev/nvidia0:
// making device nodes needs root (CAP_MKNOD)". The system's ldconfig failing is
// an Error quoting what it said. A bad spec touches nothing; a failure once
// writing began leaves the directory empty (removed, if simulate created it).
Manifest simulate(const std::filesystem::path& dir, const Spec& spec);

}  // namespace gpubind::sim
