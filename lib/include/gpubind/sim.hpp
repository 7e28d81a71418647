// The simulated node: a directory holding what an NVIDIA driver install
// leaves on a host, for the demo and the tests on machines without a GPU.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpubind::sim {

// One MIG device: on GPU `gpu` (its index), GPU instance `gi`, compute instance `ci`.
struct MigSpec {
    unsigned gpu = 0;
    unsigned gi = 0;
    unsigned ci = 0;
};

struct Spec {
    unsigned gpus = 8;
    std::string driver_version = "550.54.15";
    std::string model = "NVIDIA H100 80GB HBM3";
    std::vector<MigSpec> mig;       // empty: MIG off everywhere
    bool compat32 = true;           // write the 32-bit (i386) libraries
    bool ipcs = true;               // persistenced and fabricmanager sockets, MPS pipe directory
    bool firmware = true;           // lib/firmware/nvidia/<ver>/gsp*.bin
    bool graphics = true;           // graphics, display, video and ngx libraries
};

// The node's own description of what was written: the tests compare what
// gpubind discovers against this, never against gpubind's own output.
struct ManifestGpu {
    unsigned index = 0;
    unsigned minor = 0;
    std::string uuid;
    std::string pci_bus_id;
    std::string model;
    std::string brand;              // as the fake NVML reports it
    std::string compute_capability; // likewise, "9.0"
};
struct ManifestMig {
    unsigned gpu = 0;               // parent index
    unsigned gi = 0;
    unsigned ci = 0;
    std::string uuid;               // "MIG-..."
    unsigned gi_cap_minor = 0;      // /dev/nvidia-caps/nvidia-cap<minor>
    unsigned ci_cap_minor = 0;
};
struct ManifestNode {
    std::string path;               // "/dev/nvidia0" (relative to the dev root)
    unsigned major = 0;
    unsigned minor = 0;
};
struct ManifestFile {
    std::string kind;               // "library", "binary", "ipc", "firmware"
    std::string name;               // soname, or file name
    std::string path;               // absolute path as seen from the node's root: the soname
                                    // link for libraries, the file for the rest
    std::string real_path;          // the file it ends at (versioned name for libraries)
    std::string capability;         // "utility", "compute", "video", "graphics", "display", "ngx"
    bool compat32 = false;
};
struct Manifest {
    Spec spec;
    std::string cuda_version;       // "12.4"
    std::vector<ManifestGpu> gpus;
    std::vector<ManifestMig> migs;
    std::vector<ManifestNode> nodes;
    std::vector<ManifestFile> files;
};

void to_json(nlohmann::json& j, const Manifest& m);

// File name of the manifest written at the top of the simulated node.
inline constexpr const char* kManifestName = "gpubind-simulated-node.json";

// Writes a simulated node under `dir` (created if missing; it must be empty
// or a previous simulated node, which is replaced) and returns its manifest.
// The driver, dev and proc roots for it are dir, dir and dir/proc.
// Making device nodes needs CAP_MKNOD: without it this throws Error(EPERM)
// with a message saying so.
Manifest simulate(const std::filesystem::path& dir, const Spec& spec);

}  // namespace gpubind::sim
