// The simulated node: a directory holding what an NVIDIA driver install
// leaves on a host, for the demo and the tests on machines without a GPU.
//
// Layout of a node at DIR (driver root DIR, dev root DIR, proc root DIR/proc,
// sys root DIR/sys):
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
//   sys/: sysfs as Linux lays it out (sim_sysfs.cpp): in each PCI domain
//   holding GPUs two PCIe switches, switch k on NUMA node k, each under a root
//   port of its own host bridge: sys/devices/pci<D>:<B>/<D>:<B>:01.0 (root
//   port)/<D>:<B+1>:00.0 (the switch's upstream port)/<D>:<B+2>:<slot>.0 (a
//   downstream port for each endpoint)/<endpoint>, where B is 0x10 for switch 0
//   and for switch 1 its first GPU's bus - 3 (0x80 without GPUs). GPU i keeps
//   its bus id (domain i / 8); the first half (rounded up) of a domain's GPUs
//   sit under switch 0, the rest under switch 1. HCAs and NVMe controllers
//   sit in domain 0, the first half (rounded up) under switch 0, on the buses
//   after the switch's last GPU's (after B+2 without GPUs). Every bridge's and
//   endpoint's directory holds vendor, device, class, numa_node and
//   local_cpulist (node 0 "0-15", node 1 "16-31"), and
//   sys/bus/pci/devices/<bus id> links to it (relative);
//   sys/devices/system/node/{online,node<k>/cpulist}. HCA mlx5_<N>: in its PCI
//   directory infiniband/mlx5_<N>/{node_type,device}, infiniband_verbs/
//   uverbs<N>/{ibdev,dev,device}, infiniband_mad/{umad<N>,issm<N>}/{ibdev,port,
//   dev,device} ("device" links back to the PCI directory), linked from
//   sys/class/infiniband, infiniband_verbs, infiniband_mad (each also holding
//   abi_version). NVMe nvme<N>: nvme/nvme<N>/device, sys/class/nvme/nvme<N>.
//   With Spec::drm each GPU's drm/card<i>/{dev,device} and
//   drm/renderD<128+i>/{dev,device}, linked from sys/class/drm.
//   The device families' nodes (never in Manifest::nodes, in
//   Manifest::family_nodes): with HCAs dev/infiniband/uverbs<N> (231:192+N,
//   0666), umad<N> (231:N, 0600), issm<N> (231:64+N, 0600) and rdma_cm (10:R,
//   0666, R a misc minor this host's /proc/misc does not list); with gdrcopy
//   dev/gdrdrv (G:0); with gds dev/nvidia-fs<n> (F:n, n < 16) and
//   etc/cufile.json; with nvswitch dev/nvidia-nvswitchctl (S:255) and
//   dev/nvidia-nvswitch<n> (S:n, n < 4); with drm dev/dri/card<i> (226:i, 0660)
//   and dev/dri/renderD<128+i> (226:128+i, 0666), with the links
//   dev/dri/by-path/pci-<bus id>-card -> ../card<i> and -render ->
//   ../renderD<128+i>. G, F and S are dynamic majors chosen as U is, named in
//   proc/devices "gdrdrv", "nvidia-fs" and "nvidia-nvswitch"; proc/devices
//   also names 226 "drm" (with drm) and 231 "infiniband_mad" and
//   "infiniband_verbs" (with HCAs); proc/misc ("%3i %s" lines) lists a few
//   usual misc devices and, with HCAs, "rdma_cm". Modes are 0666 unless said.
//   gpubind-simulated-node.json: the manifest.
//
// Xid events: a test appends lines "<GPU index> <Xid>" (or "<GPU index> <Xid>
// <GI> <CI>": an Xid of one MIG instance) to
// DIR/gpubind-fake-nvml/xid (made by the test; the simulator writes none);
// the fake NVML's event API (nvmlEventSetWait_v2) sends each as a critical
// Xid event of that GPU (lib/fake/nvml.c). nvmlDeviceGetMemoryInfo answers
// the model's "<N>GB" in GiB.
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
// listed twice, more than kMaxImexChannels IMEX channels, more than kMaxHcas
// HCAs or kMaxNvmes NVMe controllers, and a prefix that is not a relative path
// of [A-Za-z0-9._-] names without "." or "..".
struct Spec {
    unsigned gpus = 8;
    std::string driver_version = "550.54.15";
    std::string model = "NVIDIA H100 80GB HBM3";
    std::vector<MigSpec> mig;  // empty: MIG off everywhere; a GPU with MIG devices has MIG on
    bool compat32 = util::platform::kHasCompat32;  // write the 32-bit (i386) libraries
    bool ipcs = true;            // persistenced and fabricmanager sockets, MPS pipe directory
    bool firmware = true;        // lib/firmware/nvidia/<ver>/gsp*.bin
    bool graphics = true;        // graphics, display, video and ngx libraries
    unsigned imex_channels = 0;  // IMEX channel nodes 0 .. imex_channels-1
    unsigned hcas = 0;           // InfiniBand HCAs mlx5_0 .. mlx5_<hcas-1>
    unsigned nvmes = 0;          // NVMe controllers nvme0 .. nvme<nvmes-1>
    bool nvswitch = false;       // 4 NVSwitches' nodes
    bool gds = false;            // GPUDirect Storage: nvidia-fs nodes, etc/cufile.json
    bool gdrcopy = false;        // gdrcopy's gdrdrv node
    bool drm = false;            // each GPU's DRM nodes (card<i>, renderD<128+i>)
    // The driver offers the per-cgroup GPU memory limit (NVML's
    // nvmlDeviceSetMemoryLimits_v1): gpubind-fake-nvml/memory-limits, the
    // limits set (lib/fake/fake_limits.h), which the fake CUDA's cuMemAlloc
    // keeps to where a container sees it at /gpubind-fake-nvml.
    bool memory_limits = false;
    // The driver has MPS: nvidia-cuda-mps-control is the fake daemon
    // (lib/fake/mps_control.c; the fake CUDA asks it for its ceiling) and
    // nvidia-cuda-mps-server the stand-in tool. Without it neither is installed.
    bool mps = false;
    // "": a distribution's layout (above). Else the driver in a prefix of its
    // own, as GPU sandboxes ship it ("usr/local/nvidia"): <prefix>/lib64 and
    // <prefix>/lib (32-bit) in etc/ld.so.conf, the programs in <prefix>/bin,
    // and usr/bin holding shell scripts that run them from there.
    std::string prefix;
    // The ldconfig that builds etc/ld.so.cache: an absolute path; empty: the
    // system's (/sbin/ldconfig, else /usr/sbin/ldconfig).
    std::string ldconfig;
    // The NVLink topology the fake NVML reports (gpubind-fake-nvml/nvlink,
    // lib/fake/nvml.c), one of kTopologies; "": no GPU has NVLink.
    //   hgx8           8 GPUs, each with 18 links to four NVSwitches (links
    //                  0-4, 5-8, 9-12, 13-17 to switches 0-3)
    //   hgx8-degraded  the same, with GPUs 2 and 5's links to switch 0 down and
    //                  2 of GPU 6's (links 0 and 1)
    //   pcie-pairs     cards bridged in pairs (0-1, 2-3, ...), 12 links a pair
    //   dgx1           DGX-1's hybrid cube mesh of 8 GPUs, 6 links each: each
    //                  linked to 4 others, some pairs by two links
    //   gh200          one GH200 whose 18 links reach NVSwitches outside the
    //                  node, registered in a multi-node fabric (clique 7)
    //   nvml-without-nvlink  NVML answers no NVLink, P2P or fabric call
    // simulate() rejects another name, and hgx8*, dgx1 without 8 GPUs, gh200
    // without 1, pcie-pairs with fewer than 2.
    std::string topology;
};
inline constexpr const char* kTopologies[] = {"hgx8", "hgx8-degraded", "pcie-pairs",
                                              "dgx1", "gh200",         "nvml-without-nvlink"};
// The GPUs a topology needs (0: any number).
unsigned topology_gpus(const std::string& topology);
inline constexpr unsigned kMaxImexChannels = 2048;  // the driver's default channel count
inline constexpr unsigned kMaxHcas = 16;
inline constexpr unsigned kMaxNvmes = 8;

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
    // Where it sits in sysfs (likewise for HCAs and NVMe controllers):
    int numa_node = 0;                 // its numa_node file
    std::string cpulist;               // its local_cpulist without the newline: "0-15"
    std::vector<std::string> bridges;  // bus ids of the bridges above it, the root port first
    std::string switch_port;           // JSON "switch": its switch's upstream port's bus id
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
struct ManifestHca {
    std::string name;        // "mlx5_0"
    std::string pci_bus_id;  // "0000:5e:00.0"
    int numa_node = 0;
    std::string cpulist;
    std::vector<std::string> bridges;
    std::string switch_port;  // JSON "switch"
    ManifestNode uverbs;      // /dev/infiniband/uverbs<N> (231:192+N)
    ManifestNode umad;        // /dev/infiniband/umad<N> (231:N)
    ManifestNode issm;        // /dev/infiniband/issm<N> (231:64+N)
};
struct ManifestNvme {
    std::string name;  // "nvme0"
    std::string pci_bus_id;
    int numa_node = 0;
    std::string cpulist;
    std::vector<std::string> bridges;
    std::string switch_port;  // JSON "switch"
};
// A device node of a device family, in the order written.
struct ManifestFamilyNode {
    std::string family;  // "rdma", "gdrcopy", "gds", "nvswitch", "drm"
    std::string device;  // "mlx5_0", "gdrdrv", "nvidia-fs3", "nvidia-nvswitch0", "card0"
                         // (card<i> for both of GPU i's DRM nodes); "" for the shared
                         // rdma_cm and nvidia-nvswitchctl
    std::string path;    // "/dev/infiniband/uverbs0" (relative to the dev root)
    unsigned major = 0;
    unsigned minor = 0;
    unsigned mode = 0;  // permission bits, 0666
};
// A symbolic link under the dev root: the DRM nodes' by-path links.
struct ManifestLink {
    std::string path;    // "/dev/dri/by-path/pci-0000:18:00.0-card"
    std::string target;  // as the link holds it: "../card0"
};
// The topology as `nvidia-smi topo -m` shows it, written from the
// simulator's own layout (never from gpubind's reading of it).
struct ManifestTopology {
    bool nvlink_known = true;                    // false: NVML lacks the NVLink calls
    std::vector<std::vector<unsigned>> nvlinks;  // [a][b] NVLinks between GPUs a and b
    std::vector<std::vector<unsigned>> cliques;  // maximal NVLink cliques (2+ GPUs), sorted
    std::vector<std::string> fabric;             // per GPU "<cluster uuid>.<clique id>", or ""
    // Per GPU: a cell per GPU, then per HCA: "X", "NV<n>", "PIX" (one PCIe
    // switch), "NODE" (another switch of its NUMA node), "SYS".
    std::vector<std::vector<std::string>> matrix;
};
struct Manifest {
    Spec spec;
    ManifestTopology topology;
    std::string cuda_version;  // "12.4", what the driver branch ships (lib/fake/fake_node.h)
    std::vector<ManifestGpu> gpus;
    std::vector<ManifestMig> migs;
    std::vector<ManifestNode> nodes;  // the NVIDIA driver's nodes only
    std::vector<ManifestFile> files;
    std::vector<ManifestHca> hcas;  // by name
    std::vector<ManifestNvme> nvmes;
    std::vector<ManifestFamilyNode> family_nodes;
    std::vector<ManifestLink> links;
    std::string sys_root;  // the node's sys root on this host: absolute, "<DIR>/sys"
    std::string cufile;    // "/etc/cufile.json" (from the node's root) with gds, else ""
};

// {"spec": {...}, "cuda_version", "gpus": [...], "migs": [...], "nodes": [...],
// "files": [...], "hcas": [...], "nvmes": [...], "family_nodes": [...],
// "links": [...], "sys_root", "cufile", "topology": {"nvlink_known", "nvlinks",
// "cliques", "fabric", "matrix"}}, the field names as in the structs
// above but switch_port, which is "switch".
void to_json(nlohmann::json& j, const Manifest& m);

// File name of the manifest written at the top of the simulated node.
inline constexpr const char* kManifestName = "gpubind-simulated-node.json";

// Writes a simulated node under `dir` (created if missing; it must be empty
// or a previous simulated node, which is replaced, else Error(ENOTEMPTY)) and
// returns its manifest, also written to dir/kManifestName. The driver, dev,
// proc and sys roots for it are dir, dir, dir/proc and dir/sys. Making device nodes needs
// CAP_MKNOD: without it this throws Error(EPERM) "simulate DIR/dev/nvidia0:
// making device nodes needs root (CAP_MKNOD)". The system's ldconfig failing is
// an Error quoting what it said. A bad spec touches nothing; a failure once
// writing began leaves the directory empty (removed, if simulate created it).
Manifest simulate(const std::filesystem::path& dir, const Spec& spec);

}  // namespace gpubind::sim
