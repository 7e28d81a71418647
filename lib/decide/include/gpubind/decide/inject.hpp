// The decision for one container on a node already known: what it asks for
// and, if it is a GPU container, the plan. Pure but for the image inspection;
// knowing the node is start.hpp's, executing the plan exec's.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::decide {

struct Decision {
    Request request;
    std::unique_ptr<node::Node> node;  // null when this is not a GPU container
    Plan plan;                         // empty when this is not a GPU container
    std::string reason;                // why gpubind does what it does, for logs and `gpubind plan`

    bool gpu_container() const { return request.gpu_container(); }
};

// A request that is not a GPU container's: the Decision to leave it alone.
Decision leave_alone(Request request);
// What `request` needs of the node (load_node's options): NVML asked only when
// it needs one of NVML's facts; `store` false writes nothing (gpubind doctor).
node::LoadOptions node_needs(const Request& request, bool store);
// The decision for `request` on the node given: selects the devices, checks
// the requirements, inspects the image at `rootfs` (opened through `sys`,
// only for a GPU container: the files part of the System the caller goes on
// to execute with, which tests replace) and makes the plan. A request that is not a GPU
// container's is left alone (leave_alone). Throws Error on a bad or refused
// request. Loading the node (and keeping its CDI specs current) is the
// caller's: start.hpp's decide() does both.
Decision decide_on(Request request, os::SystemFiles& sys, const std::filesystem::path& rootfs,
                   const config::Config& config, node::NodeKnowledge known);

// What a request source means, in words ("NVIDIA_VISIBLE_DEVICES=0,2").
std::string describe_request(const Request& request);

}  // namespace gpubind::decide
