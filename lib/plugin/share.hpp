// GPU shares in the device plugin ([device-plugin] sharing, issue 48): the
// share devices of each GPU, their preferred allocation, and what Allocate
// adds for them. plugin.hpp has the rules; plugin.cpp calls these.
#pragma once

#include <string>
#include <vector>

#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/plugin/plugin.hpp"

namespace gpubind::plugin::detail {

// The shares of the whole GPUs `gpus` (their devices as sharing "none" has
// them), by settings.sharing.
std::vector<Device> share_devices(const node::Node& node,
                                  const config::DevicePluginConfig& settings,
                                  const std::vector<Device>& gpus);

// preferred_allocation for shares (`available` and `must_include` checked:
// known, distinct, must_include in available, size 1..available).
std::vector<std::string> preferred_shares(const node::Node& node,
                                          const std::vector<Device>& devices,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include,
                                          unsigned size);

// Adds the share request of `chosen` (known, healthy shares of one resource)
// to `a` and returns their GPUs' ids, each once, in the order asked.
std::vector<std::string> allocate_shares(Allocation& a, const std::string& resource,
                                         const std::vector<const Device*>& chosen);

}  // namespace gpubind::plugin::detail
