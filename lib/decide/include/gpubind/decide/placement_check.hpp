// The placement a container was promised, checked at its start (issue 46):
// a container declares it by the annotation gpubind.io/placement or the
// variable GPUBIND_PLACEMENT; the only placement is "nvlink": the GPUs it is
// handed are one NVLink clique (every pair linked). A start that declares
// nothing pays nothing: one look at the annotations, one scan of the
// environment, no system call, no allocation.
#pragma once

#include <string>
#include <string_view>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::decide {

inline constexpr std::string_view kPlacementAnnotation = "gpubind.io/placement";
inline constexpr std::string_view kPlacementVariable = "GPUBIND_PLACEMENT";

// The placement declared in `spec` into request.placement and
// request.placement_asked_by ("GPUBIND_PLACEMENT=nvlink", or the annotation).
// Unset or empty: none. Both may be given; each must then be "nvlink". Any
// other value throws Error(EINVAL, "read request", `where`,
// "<annotation or variable>: '<value>' is not a placement (nvlink)").
void read_placement(Request& request, const oci::Spec& spec, const std::string& where);

// Why the GPUs of `selection` (whole GPUs and the parents of MIG devices)
// are not one NVLink clique of `node`, in one line naming the GPUs and each
// pair's path ("GPU 1 - GPU 2: PHB"), or "" when they are: one GPU or none
// always is; a GPU whose NVLink NVML could not say is not.
std::string nvlink_placement_failure(const node::Node& node, const node::Selection& selection);

// Checks request.placement against the GPUs handed: nothing for a request
// that declares none. Unmet, it throws Error(ECANCELED, "check placement",
// <asked by>, <nvlink_placement_failure>), or with [policy] on-refused =
// "warn" logs that line as a warning and returns.
void check_placement(const Request& request, const node::Node& node,
                     const node::Selection& selection, const config::Config& config);

}  // namespace gpubind::decide
