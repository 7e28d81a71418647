// GPU shares under MPS (issue 48): on a node whose driver has no per-cgroup
// memory limit but has nvidia-cuda-mps-control, `gpubind mps` runs one
// control daemon per GPU under <[mps] root>/<GPU UUID>/ (pipe/, log/, shm/
// and `limits`, the daemon's ceilings). A share start gets that GPU's pipe/
// at /tmp/nvidia-mps and shm/ at /dev/shm, and its share in the client's
// variables CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. The node guarantees the daemon's
// ceiling: a client's variables can only lower it, so the container's own
// smaller share holds only for a client that keeps its environment.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::decide {

// Where the container's MPS clients find their daemon.
inline constexpr const char* kMpsPipeTarget = "/tmp/nvidia-mps";
inline constexpr const char* kMpsShmTarget = "/dev/shm";
// The file beside pipe/ in which `gpubind mps` writes a daemon's ceilings:
// "memory <bytes>\ncompute <percent>\n" (memory 0: the whole GPU).
inline constexpr const char* kMpsLimitsFile = "limits";

// Whether the node's driver has the MPS control daemon (nvidia-cuda-mps-control).
bool node_has_mps(const node::Node& node);

// A GPU's daemon as a start sees it: no process is run or signalled.
struct MpsDaemon {
    std::string dir;           // <root>/<uuid>
    bool running = false;      // pipe/control is a socket of root's
    std::uint64_t memory = 0;  // its pinned memory ceiling, bytes; 0: the whole GPU
    unsigned compute = 100;    // its active thread percentage
    bool operator==(const MpsDaemon&) const = default;
};

// Reads the daemon of the GPU `uuid` under `root`: every directory opened
// without following a link and root's, pipe/control lstat'ed (a socket of
// root's), `limits` a regular file of root's. Not running: no such
// directory or socket. Throws Error(ECANCELED, "check MPS daemon", <path>,
// ...) for a path that is a link, not root's, or a `limits` it cannot read.
MpsDaemon read_mps_daemon(const std::filesystem::path& root, const std::string& uuid);

// For `gpubind info` and doctor: one line a GPU with a UUID, "GPU-...: the
// MPS control daemon runs (ceilings: 4 GiB, 100%)" or "...: no MPS control
// daemon runs (start `gpubind mps`)", or why its files were refused.
std::vector<std::string> mps_daemon_lines(const node::Node& node,
                                          const std::filesystem::path& root);

// What an MPS share adds to a plan: pure. Throws Error(ECANCELED, "check
// share", <asked by>, ...): not exactly one GPU, a GPU without a UUID, its
// daemon not running, a share above the daemon's ceiling.
struct MpsPlan {
    std::vector<PlannedMount> mounts;  // pipe/ at kMpsPipeTarget, shm/ at kMpsShmTarget
    std::vector<std::string> env;      // CUDA_MPS_* = the share
};
MpsPlan plan_mps(const ShareRequest& share, const node::Selection& selection,
                 const MpsDaemon& daemon);

// Adds `mps` to `plan`: its mounts replace any at the same target (the
// node's own /tmp/nvidia-mps), its variables go to plan.env.
void add_mps(Plan& plan, MpsPlan mps);

}  // namespace gpubind::decide
