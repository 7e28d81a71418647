// The driver's per-cgroup GPU memory limit (issue 48): NVML's
// nvmlDeviceSetMemoryLimits_v1 and nvmlDeviceGetMemoryLimits_v1 (CUDA 13.4+
// drivers), asked like every NVML fact: in a child with a deadline, through
// the gpubind-nvml helper from a static program.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpubind/node/node.hpp"

namespace gpubind::node {

// One GPU's limits for one cgroup, in bytes. NVML's soft limit is what the
// cgroup is guaranteed, its hard limit what an allocation may never pass.
struct MemoryLimit {
    unsigned minor = 0;  // the GPU's /dev/nvidia<minor>
    std::uint64_t soft = 0;
    std::uint64_t hard = 0;  // kNoMemoryLimit: none (what clearing sets)
    bool operator==(const MemoryLimit&) const = default;
};
inline constexpr std::uint64_t kNoMemoryLimit = ~std::uint64_t{0};

// Sets `limits` on the cgroup directory `cgroup_dir` (a host path: what the
// driver opens, "/sys/fs/cgroup/system.slice/docker-<id>.scope") through the
// node's libnvidia-ml.so.1, then reads each back. Returns what NVML read
// back, one a limit. Throws Error: no NVML, a GPU NVML does not know, an
// NVML call that fails (EIO, naming the call and its result), the deadline.
std::vector<MemoryLimit> set_memory_limits(const Node& node, const std::string& cgroup_dir,
                                           const std::vector<MemoryLimit>& limits,
                                           std::chrono::milliseconds timeout);

// NVML's compute modes (nvmlComputeMode_t) an MPS daemon's GPU is put in and
// back (gpubind mps).
inline constexpr unsigned kComputeModeDefault = 0;
inline constexpr unsigned kComputeModeExclusiveProcess = 3;

// Sets compute mode `mode` on the GPUs of `minors` through the node's NVML
// (as set_memory_limits: a child with a deadline), then reads each back:
// (minor, mode) pairs as NVML reads them. Throws Error as set_memory_limits.
std::vector<std::pair<unsigned, unsigned>> set_compute_mode(const Node& node,
                                                            const std::vector<unsigned>& minors,
                                                            unsigned mode,
                                                            std::chrono::milliseconds timeout);

}  // namespace gpubind::node
