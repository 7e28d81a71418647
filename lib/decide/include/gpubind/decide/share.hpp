// A share of a GPU a container asks for (issue 48): a memory limit and a part
// of the GPU's compute, by gpubind's own variables or the hints other
// schedulers already write, read like every other request and checked at its
// start. A start that asks for no share pays one scan of the environment.
//
// The variables (sizes take a unit: B, K, M, G, T, with or without "i" and
// "B" - "10G", "10GiB", "10240Mi" - all powers of 1024; a bare number is in
// the variable's own unit):
//   GPUBIND_GPU_MEMORY=<size>        each GPU's limit; a bare number: MiB
//   GPUBIND_GPU_COMPUTE=<percent>    1 to 100 ("50" or "50%")
//   NVIDIA_GPU_MEMORY_LIMIT(S)=<size>, NVIDIA_GPU_MEMORY_REQUEST(S)=<size>
//                                    NVIDIA's hook's; a bare number: bytes
//   CUDA_DEVICE_MEMORY_LIMIT=<size>, CUDA_DEVICE_MEMORY_LIMIT_<i>=<size>
//                                    HAMi's (every GPU, or the container's i-th); bytes
//   CUDA_DEVICE_SM_LIMIT=<percent>   HAMi's
//   ALIYUN_COM_GPU_MEM_CONTAINER=<n> gpushare's, in GiB, with ALIYUN_COM_GPU_MEM_IDX=<GPU>
// Several may be given; those that set the same thing must agree.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/memory_limits.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::decide {

struct ShareRequest {
    std::uint64_t memory = 0;  // bytes: each GPU's limit; 0: none asked
    // bytes, by the container's GPU position (CUDA_DEVICE_MEMORY_LIMIT_<i>): wins over `memory`
    std::map<unsigned, std::uint64_t> device_memory;
    std::uint64_t memory_request = 0;  // bytes it must be able to use on each GPU; 0: none
    unsigned compute = 0;              // percent of each GPU's compute; 0: none asked
    std::optional<unsigned> gpu;       // ALIYUN_COM_GPU_MEM_IDX: the node's GPU it is on
    std::string asked_by;              // the first variable that asks ("GPUBIND_GPU_MEMORY=10GiB")

    bool asked() const { return memory || !device_memory.empty() || compute; }
    bool operator==(const ShareRequest&) const = default;
};

// The share `spec`'s environment asks for; none when no variable above is
// set (or each is empty). A malformed value, a request above the limit, a
// percent outside 1 to 100 or two variables that disagree throw
// Error(EINVAL, "read request", `where`, "<variable>: ...").
ShareRequest read_share(const oci::Spec& spec, const std::string& where);

// Where the device plugin carries a share beyond the pod's reach: /dev/null
// mounted at <kShareMountDir>/memory/<bytes> and <kShareMountDir>/compute/<percent>
// (a pod can put an emptyDir at any path, not a /dev/null mount; only a mount
// of /dev/null counts).
inline constexpr const char* kShareMountDir = "/var/run/gpubind/share";

// The share a container gets: its share mounts' where it has any (its share
// variables are then not read for it; one asking for another share is logged
// and not obeyed), else its variables' (read_share). A share mount that is not a size or a percent,
// or two that disagree, throw Error(EINVAL, "read request", `where`, ...). A share mount of each
// kind may be given once; the mounts and the variables ask the same way (ShareRequest::asked_by
// names the mount).
ShareRequest read_container_share(const oci::Spec& spec, const config::Policy& policy,
                                  const std::string& container, const std::string& where);

// "10 GiB", "1536 MiB", "100 B": a size as messages say it.
std::string size_text(std::uint64_t bytes);

// The share mechanism of a node whose driver offers the per-cgroup memory limit.
inline constexpr const char* kDriverMemoryLimit = "the driver's per-cgroup memory limit";
// The share mechanism of a node whose driver has MPS but no such limit (decide/mps.hpp).
inline constexpr const char* kMps = "MPS (a control daemon per GPU, `gpubind mps`)";

// How `node` enforces GPU shares, for messages, `gpubind info` and doctor,
// the strongest first: `by` names the mechanism (kDriverMemoryLimit, found by
// NVML at discovery, node::Node::memory_limits; else kMps where the driver
// has nvidia-cuda-mps-control), or is empty and `lacks` says in one line why
// none. The driver's limit holds memory only: a compute share there is
// refused (MPS is used only where the driver offers no limit).
struct ShareEnforcement {
    std::string by;
    std::string lacks;
};
ShareEnforcement share_enforcement(const node::Node& node);

// Checks a share request against the GPUs handed and what the node can
// enforce: nothing for a request that asks none. A share of a MIG device, a
// limit above a GPU's memory (as NVML reports it), a device position the
// container does not have or a gpushare GPU index it was not handed throw
// Error(ECANCELED, "check share", <asked by>, <why>). A share the node cannot
// enforce (a compute share where the driver's limit is the mechanism; any
// share on a node with neither mechanism) is refused with one line naming what the node lacks,
// unless [policy] shares = "soft" starts the container unenforced with that
// line logged as a warning.
void check_share(const ShareRequest& share, const node::Node& node,
                 const node::Selection& selection, const config::Config& config);

// The limits to set for `share` on the GPUs handed (the driver's per-cgroup
// limit): each GPU's limit (its CUDA_DEVICE_MEMORY_LIMIT_<i>, else the
// share's), the request as the soft limit. Empty when no memory is asked.
std::vector<node::MemoryLimit> share_limits(const ShareRequest& share,
                                            const node::Selection& selection);

}  // namespace gpubind::decide
