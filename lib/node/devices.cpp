#include "gpubind/node/devices.hpp"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::node {

std::string gpu_name(const Gpu& gpu) {
    return gpu.uuid.empty() ? fmt::format("GPU {}", gpu.index)
                            : fmt::format("GPU {} ({})", gpu.index, gpu.uuid);
}

namespace {

[[noreturn]] void no_such(const std::string& id, const std::string& why) {
    util::throw_invalid("select device", id, why);
}

// "0000:3b:00.0", "00000000:3B:00.0" and "3b:00.0" all name the same function.
std::string normalize_bus_id(std::string_view id) {
    std::string s = util::to_lower(id);
    if (std::count(s.begin(), s.end(), ':') == 1) s = "0000:" + s;
    auto colon = s.find(':');
    if (colon > 4 && s.find_first_not_of('0') >= colon - 4) s.erase(0, colon - 4);
    return s;
}

bool is_bus_id(std::string_view id) {
    auto dot = id.rfind('.');
    return dot != std::string_view::npos && id.find(':') != std::string_view::npos &&
           id.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
}

}  // namespace

DeviceIds parse_device_ids(std::string_view value) {
    value = util::trim(value);
    DeviceIds out;
    if (value.empty() || value == "void") return out;
    if (value == "none") {
        out.kind = DeviceIdsKind::None;
        return out;
    }
    out.kind = DeviceIdsKind::List;
    for (auto field : util::split(value, ',')) {
        field = util::trim(field);
        if (field.empty()) continue;
        if (field == "all") {
            out.kind = DeviceIdsKind::All;
            out.ids.clear();
            return out;
        }
        if (std::find(out.ids.begin(), out.ids.end(), field) == out.ids.end())
            out.ids.emplace_back(field);
    }
    if (out.ids.empty()) out.kind = DeviceIdsKind::Void;
    return out;
}

Selection select_devices(const Node& node, const DeviceIds& ids) {
    Selection sel;
    if (ids.kind == DeviceIdsKind::All) {
        for (const auto& gpu : node.gpus) sel.gpus.push_back(&gpu);
        return sel;
    }
    if (ids.kind != DeviceIdsKind::List) return sel;

    auto add_gpu = [&](const Gpu& gpu) {
        if (std::find(sel.gpus.begin(), sel.gpus.end(), &gpu) == sel.gpus.end())
            sel.gpus.push_back(&gpu);
    };
    auto add_mig = [&](const MigDevice& mig) {
        if (std::find(sel.migs.begin(), sel.migs.end(), &mig) == sel.migs.end())
            sel.migs.push_back(&mig);
    };
    for (const auto& id : ids.ids) {
        const std::string lower = util::to_lower(id);
        if (auto index = util::parse_unsigned(id)) {
            if (*index >= node.gpus.size())
                no_such(id, "no GPU with this index (the node has " +
                                std::to_string(node.gpus.size()) + ")");
            add_gpu(node.gpus[*index]);
        } else if (auto colon = id.find(':');
                   colon != std::string::npos && id.find(':', colon + 1) == std::string::npos &&
                   util::parse_unsigned(std::string_view(id).substr(0, colon)) &&
                   util::parse_unsigned(std::string_view(id).substr(colon + 1))) {
            auto g = *util::parse_unsigned(std::string_view(id).substr(0, colon));
            auto m = *util::parse_unsigned(std::string_view(id).substr(colon + 1));
            if (g >= node.gpus.size()) no_such(id, "no GPU with this index");
            if (m >= node.gpus[g].mig.size())
                no_such(id, "GPU " + std::to_string(g) + " has no MIG device " + std::to_string(m));
            add_mig(node.gpus[g].mig[m]);
        } else if (lower.rfind("gpu-", 0) == 0) {
            auto it = std::find_if(node.gpus.begin(), node.gpus.end(),
                                   [&](const Gpu& g) { return util::to_lower(g.uuid) == lower; });
            if (it == node.gpus.end()) no_such(id, "no GPU with this UUID");
            add_gpu(*it);
        } else if (lower.rfind("mig-", 0) == 0) {
            const MigDevice* found = nullptr;
            for (const auto& g : node.gpus)
                for (const auto& m : g.mig)
                    if (!m.uuid.empty() && util::to_lower(m.uuid) == lower) found = &m;
            if (!found) no_such(id, "no MIG device with this UUID");
            add_mig(*found);
        } else if (is_bus_id(id)) {
            const std::string bus = normalize_bus_id(id);
            auto it = std::find_if(node.gpus.begin(), node.gpus.end(), [&](const Gpu& g) {
                return normalize_bus_id(g.pci_bus_id) == bus;
            });
            if (it == node.gpus.end()) no_such(id, "no GPU at this PCI bus id");
            add_gpu(*it);
        } else {
            no_such(id,
                    "not a device id (an index, GPU-<uuid>, MIG-<uuid>, G:M, a PCI bus id, "
                    "all or none)");
        }
    }
    std::sort(sel.gpus.begin(), sel.gpus.end(),
              [](const Gpu* a, const Gpu* b) { return a->index < b->index; });
    std::sort(sel.migs.begin(), sel.migs.end(), [](const MigDevice* a, const MigDevice* b) {
        return std::tie(a->gpu_index, a->index) < std::tie(b->gpu_index, b->index);
    });
    return sel;
}

std::vector<const DeviceNode*> select_imex_channels(const Node& node,
                                                    const std::vector<std::string>& channels) {
    std::vector<const DeviceNode*> out;
    for (const auto& c : channels) {
        if (c == "all") {
            for (const auto& n : node.imex_channels)
                if (std::find(out.begin(), out.end(), &n) == out.end()) out.push_back(&n);
            continue;
        }
        auto number = util::parse_unsigned(c);
        auto it = std::find_if(node.imex_channels.begin(), node.imex_channels.end(),
                               [&](const DeviceNode& n) { return number && n.minor == *number; });
        if (it == node.imex_channels.end()) {
            std::string have;
            for (const auto& n : node.imex_channels)
                have += (have.empty() ? "" : ", ") + std::to_string(n.minor);
            util::throw_invalid("select IMEX channel", c,
                                "no /dev/nvidia-caps-imex-channels/channel" + c +
                                    " on this node (" +
                                    (have.empty() ? std::string("it has no IMEX channel")
                                                  : "it has channel " + have) +
                                    ")");
        }
        if (std::find(out.begin(), out.end(), &*it) == out.end()) out.push_back(&*it);
    }
    return out;
}

}  // namespace gpubind::node
