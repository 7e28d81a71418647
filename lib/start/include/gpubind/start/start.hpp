// What every path that starts or inspects a container does first: know the
// node (keeping its CDI specs current) and decide. Above both decide/ and
// cdi/: deciding one container never rewrites the node's specs by itself.
// Used by gpubind-hook, the shim, `gpubind plan`, `configure` and `doctor`.
#pragma once

#include <filesystem>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/inject.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind {

// The node as load_node() knows it. When what is stored changed (the driver
// state changed, or NVML was asked for the first time in this state), the
// node's CDI specs are refreshed too, so every path that learns something
// keeps them current (a failure there is a warning). Every caller that needs
// the node goes through here. On a MIG node a spec written without NVML's
// answer has no MIG UUID names until NVML is asked (gpubind cdi refresh, a
// request that needs NVML's facts): a start never waits for NVML for the spec.
NodeKnowledge know_node(const Config& config, const LoadOptions& options);

// Reads the container's request from its spec and, for a GPU container,
// knows the node (NVML asked only when the request needs one of its facts)
// and decides (decide_on). Throws Error on a bad or refused request.
// `store` false: nothing is written (no node description, no CDI spec), as
// for gpubind doctor, which only reads.
Decision decide(const oci::Spec& spec, const Config& config, bool store = true);
// The same with the node this process has just known (know_node), used as
// it is unless the request needs NVML's facts and NVML was never asked in
// this driver state.
Decision decide(const oci::Spec& spec, const Config& config, NodeKnowledge known);
// The same for a request read already, the image read through `sys`:
// gpubind-hook decides and executes with one System.
Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                System& sys);
// The same for a request made by hand (gpubind configure) and a rootfs.
Decision decide(Request request, const std::filesystem::path& rootfs, const Config& config,
                bool store = true);

}  // namespace gpubind
