// The whole decision for one container: what it asks for and, if it is a GPU
// container, the plan. Shared by gpubind-hook, `gpubind plan` and
// `gpubind configure`; executing the plan is exec's job.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "gpubind/config.hpp"
#include "gpubind/description.hpp"
#include "gpubind/node.hpp"
#include "gpubind/oci.hpp"
#include "gpubind/plan.hpp"
#include "gpubind/request.hpp"

namespace gpubind {

struct Decision {
    Request request;
    std::unique_ptr<Node> node;   // null when this is not a GPU container
    Plan plan;                    // empty when this is not a GPU container
    std::string reason;           // why gpubind does what it does, for logs and `gpubind plan`

    bool gpu_container() const { return request.gpu_container(); }
};

// Reads the container's request from its spec and, for a GPU container,
// loads the node (load_node: the node description, NVML asked only when the
// request needs one of its facts), selects the devices, checks the requirements, inspects
// the image and makes the plan. Throws Error on a bad or refused request.
// `store` false: nothing is written (no node description, no CDI spec), as
// for gpubind doctor, which only reads.
Decision decide(const oci::Spec& spec, const Config& config, bool store = true);
// The same with the node this process has just known (know_node), used as
// it is unless the request needs NVML's facts and NVML was never asked in
// this driver state.
Decision decide(const oci::Spec& spec, const Config& config, NodeKnowledge known);
// The same for a request made by hand (gpubind configure) and a rootfs.
Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                bool store = true);

// The node as load_node() knows it. When what is stored changed (the driver
// state changed, or NVML was asked for the first time in this state), the
// node's CDI specs are refreshed too, so every path that learns something
// keeps them current (a failure there is a warning). Every caller that needs
// the node goes through here. On a MIG node a spec written without NVML's
// answer has no MIG UUID names until NVML is asked (gpubind cdi refresh, a
// request that needs NVML's facts): a start never waits for NVML for the spec.
NodeKnowledge know_node(const Config& config, const LoadOptions& options);

// What a request source means, in words ("NVIDIA_VISIBLE_DEVICES=0,2").
std::string describe_request(const Request& request);

}  // namespace gpubind
