// Facts only NVML knows, asked in a child process with a deadline so a slow
// or hung driver cannot hang the caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "gpubind/node/nvlink_facts.hpp"

namespace gpubind::node {

struct NvmlGpuFacts {
    std::string brand;               // "tesla", "nvidia", "geforce", ...
    std::string compute_capability;  // "9.0"
    std::uint64_t memory = 0;        // bytes (nvmlDeviceGetMemoryInfo's total); 0: unknown
    std::map<std::pair<unsigned, unsigned>, std::string> mig_uuids;  // (gi, ci) -> "MIG-..."
    std::optional<GpuNvlink> nvlink;  // empty: the report said nothing of it (an older helper)
};

struct NvmlFacts {
    std::string cuda_version;               // "12.4"
    bool memory_limits = false;             // the driver's per-cgroup memory limit
    std::string memory_limits_why;          // why not, where NVML said
    std::map<unsigned, NvmlGpuFacts> gpus;  // by device minor
};

// Loads `library` (libnvidia-ml.so.1 of the node) in a forked child and reads
// the facts. Throws Error (ETIMEDOUT when the deadline passes; the child is
// killed) if NVML cannot answer.
NvmlFacts query_nvml(const std::filesystem::path& library, std::chrono::milliseconds timeout);

// The helper a statically linked program (gpubind-hook) runs for NVML,
// found next to it or in ../libexec/gpubind: `gpubind-nvml LIBRARY` writes the
// report to stdout. A dynamically linked program loads NVML in a forked child.
inline constexpr const char* kNvmlHelperName = "gpubind-nvml";

// The report itself (the one copy of the NVML-reading code): loads `library`,
// writes "cuda", "gpu", "mig", NVLink ("nvlink", "link", "p2p", "fabric") and
// "error" lines to `out_fd`. Returns the exit
// status for the process (0 when NVML answered). Run it in a child only.
int write_nvml_report(const char* library, int out_fd) noexcept;

// The helper's option for the per-cgroup memory limit:
// `gpubind-nvml LIBRARY --memory-limits CGROUP_DIR MINOR:SOFT:HARD...` sets
// each and writes "limit <minor> <soft> <hard>" as NVML reads it back.
inline constexpr const char* kMemoryLimitsOption = "--memory-limits";
int write_memory_limits(const char* library, const char* cgroup_dir, char** limits, int count,
                        int out_fd) noexcept;

// `gpubind-nvml LIBRARY --compute-mode MODE MINOR...` sets NVML's compute
// mode MODE on each GPU and writes "mode <minor> <mode>" as NVML reads it back.
inline constexpr const char* kComputeModeOption = "--compute-mode";
int write_compute_mode(const char* library, unsigned mode, char** minors, int count,
                       int out_fd) noexcept;

// Parses the child's report (exposed for tests).
NvmlFacts parse_nvml_report(std::string_view report, const std::string& what);

}  // namespace gpubind::node
