// Device ids as users type them: all, none, void, indices, GPU-<uuid>,
// PCI bus ids, MIG G:M and MIG-<uuid>, comma lists.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpubind/node/node.hpp"

namespace gpubind::node {

enum class DeviceIdsKind { Void, None, All, List };

struct DeviceIds {
    DeviceIdsKind kind = DeviceIdsKind::Void;
    std::vector<std::string> ids;  // for List: trimmed, duplicates dropped, first order kept
};

// "void" or empty: Void; "none": None; "all" anywhere in the list: All.
DeviceIds parse_device_ids(std::string_view value);

struct Selection {
    std::vector<const Gpu*> gpus;        // whole GPUs, in node order
    std::vector<const MigDevice*> migs;  // MIG devices, in node order
    bool empty() const { return gpus.empty() && migs.empty(); }
};

// Resolves ids against the node. An id that names nothing throws
// Error(EINVAL, "select device", <id>, "no such GPU on this node").
Selection select_devices(const Node& node, const DeviceIds& ids);

// The node's IMEX channels that `channels` names ({"all"}: every one the node
// has, maybe none; else channel numbers as parse_imex_channels returns them),
// in the order asked. A channel the node lacks throws Error(EINVAL,
// "select IMEX channel", "<n>", "no /dev/nvidia-caps-imex-channels/channel<n> on
// this node (it has ...)").
std::vector<const DeviceNode*> select_imex_channels(const Node& node,
                                                    const std::vector<std::string>& channels);

}  // namespace gpubind::node
