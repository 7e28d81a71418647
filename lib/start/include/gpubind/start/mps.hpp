// `gpubind mps` (issue 48): runs and supervises one MPS control daemon per
// GPU of the node, in the foreground, each under <[mps] root>/<GPU UUID>/
// (decide/mps.hpp): pipe/, log/ and shm/ made root's and 0755, no link
// followed; the daemon (the driver's nvidia-cuda-mps-control -f) started
// with an environment of our own (CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY, CUDA_VISIBLE_DEVICES=<UUID>) in a private mount
// namespace where shm/ is /dev/shm; its ceilings set ([mps] memory and
// compute) and written to `limits`, which starts read. A daemon that dies is
// started again after a backoff; SIGTERM or SIGINT sends each `quit`, waits,
// and removes the `limits` files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::start {

// A daemon's ceilings from [mps] for `gpu`: memory in bytes (0: the whole
// GPU) and the active thread percentage. "replicas" divides by
// `replicas` (config::DevicePluginConfig's, 1 without sharing). Throws
// Error(EINVAL, "load config", "mps.memory"|"mps.compute", ...) for a value
// it cannot read, or "replicas" with no GPU memory known.
struct MpsCeilings {
    std::uint64_t memory = 0;
    unsigned compute = 100;
};
MpsCeilings mps_ceilings(const config::MpsConfig& mps, const node::Gpu& gpu, unsigned replicas);

// Runs until SIGTERM or SIGINT; returns the exit code. `gpus`: UUIDs or
// indices to run daemons for, empty: every GPU of `node`.
int run_mps(const config::Config& config, const node::Node& node,
            const std::vector<std::string>& gpus, unsigned replicas);

}  // namespace gpubind::start
