// GPU shares in the device plugin: see share.hpp.
#include "share.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/placement.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::plugin::detail {

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

const Device& device(const std::vector<Device>& devices, const std::string& id) {
    auto it =
        std::find_if(devices.begin(), devices.end(), [&](const Device& d) { return d.id == id; });
    if (it == devices.end()) util::throw_invalid("prefer devices", "", "no device \"" + id + "\"");
    return *it;
}

}  // namespace

std::vector<Device> share_devices(const node::Node& node,
                                  const config::DevicePluginConfig& settings,
                                  const std::vector<Device>& gpus) {
    const bool replicas = settings.sharing == config::SharingMode::Replicas;
    const std::string what = fmt::format("sharing \"{}\"", config::strategy_name(settings.sharing));
    std::vector<Device> out;
    for (const Device& whole : gpus) {
        const node::Gpu& gpu = node.gpus[whole.position];
        if (!gpu.mig.empty())
            util::throw_invalid("list devices", gpu.proc_dir,
                                fmt::format("{}: {} has MIG devices; a share of a GPU in MIG "
                                            "mode is not offered",
                                            what, node::gpu_name(gpu)));
        if (gpu.memory == 0)
            util::throw_invalid("list devices", gpu.proc_dir,
                                fmt::format("{}: the memory of {} is unknown (NVML did not "
                                            "report it)",
                                            what, node::gpu_name(gpu)));
        if (replicas && settings.replicas == 0)
            util::throw_invalid("list devices", "", what + ": no replicas");
        const std::uint64_t parts = replicas ? settings.replicas : gpu.memory / kGiB;
        for (std::uint64_t k = 0; k < parts; ++k) {
            Device d = whole;
            d.id = fmt::format("{}::{}", whole.id, k);
            d.sharing = settings.sharing;
            d.gpu_id = whole.id;
            d.part = static_cast<int>(k);
            d.memory = replicas ? gpu.memory / parts / kMiB * kMiB : kGiB;
            d.compute = replicas ? static_cast<unsigned>(100 / parts) : 0;
            out.push_back(std::move(d));
        }
    }
    return out;
}

std::vector<std::string> preferred_shares(const node::Node& node,
                                          const std::vector<Device>& devices,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include,
                                          unsigned size) {
    // By GPU position: its free shares by part, and those that must be in.
    std::map<unsigned, std::map<int, std::string>> free;
    std::map<unsigned, std::vector<std::string>> must;
    bool memory = false;
    for (const auto& id : available) {
        const Device& d = device(devices, id);
        if (d.part < 0)
            util::throw_invalid("prefer devices", "",
                                fmt::format("device \"{}\" is not a share of a GPU", id));
        memory = d.sharing == config::SharingMode::Memory;
        free[d.position][d.part] = id;
    }
    for (const auto& id : must_include) must[device(devices, id).position].push_back(id);

    // The shares of GPU `p`: its must_include, then its lowest free parts.
    auto take = [&](unsigned p, std::size_t n, std::vector<std::string>& out) {
        std::vector<std::string> mine = must.count(p) ? must[p] : std::vector<std::string>{};
        for (const auto& [part, id] : free[p]) {
            if (mine.size() >= n) break;
            if (std::find(mine.begin(), mine.end(), id) == mine.end()) mine.push_back(id);
        }
        out.insert(out.end(), mine.begin(), mine.end());
    };
    std::vector<std::string> out;
    if (memory) {
        if (must.size() > 1)
            util::throw_invalid("prefer devices", "",
                                "the units that must be included are of more than one GPU; a "
                                "container's memory units are all of one GPU");
        std::optional<unsigned> best;
        std::size_t most = 0;
        for (const auto& [p, parts] : free) {
            if (!must.empty() && must.begin()->first != p) continue;
            if (parts.size() >= size && (!best || parts.size() > free[*best].size())) best = p;
            most = std::max(most, parts.size());
        }
        if (!best)
            util::throw_invalid(
                "prefer devices", "",
                fmt::format("no GPU has {} free memory units{} (the most on one "
                            "GPU: {})",
                            size, must.empty() ? "" : " with those that must be in", most));
        take(*best, size, out);
        return out;
    }
    for (const auto& [p, ids] : must)
        if (ids.size() > 1)
            util::throw_invalid("prefer devices", "",
                                fmt::format("replicas {} and {} must be included, of one GPU; a "
                                            "container gets at most one replica of a GPU",
                                            ids[0], ids[1]));
    if (free.size() < size)
        util::throw_invalid("prefer devices", "",
                            fmt::format("{} replicas asked for, and {} GPU{} have a free one; a "
                                        "container gets at most one replica of a GPU",
                                        size, free.size(), free.size() == 1 ? "" : "s"));
    std::vector<unsigned> chosen;
    if (size == 1 && must.empty()) {  // the least shared GPU
        unsigned best = free.begin()->first;
        for (const auto& [p, parts] : free)
            if (parts.size() > free[best].size()) best = p;
        chosen.push_back(best);
    } else {
        node::PlaceRequest request;
        request.count = size;
        request.nvlink = node::NvlinkNeed::Preferred;
        for (const auto& [p, parts] : free) request.from.push_back(p);
        for (const auto& [p, ids] : must) request.must_include.push_back(p);
        const auto topology = node::place_topology(node.gpus, node::nvlink_graph(node.gpus));
        chosen = node::place_gpus(topology, request).gpus;
    }
    for (unsigned p : chosen) take(p, 1, out);
    return out;
}

std::vector<std::string> allocate_shares(Allocation& a, const std::string& resource,
                                         const std::vector<const Device*>& chosen) {
    std::vector<std::string> gpus;
    std::map<std::string, std::string> first;  // by GPU id: its first share asked for
    std::uint64_t memory = 0;
    unsigned compute = 0;
    const bool replicas = chosen.front()->sharing == config::SharingMode::Replicas;
    for (const Device* d : chosen) {
        const auto [it, fresh] = first.emplace(d->gpu_id, d->id);
        if (fresh) gpus.push_back(d->gpu_id);
        if (replicas && !fresh)
            util::throw_refused("allocate devices", resource,
                                fmt::format("replicas {} and {} are of one GPU {}; a container "
                                            "gets at most one replica of a GPU",
                                            it->second, d->id, d->gpu_id));
        if (!replicas && gpus.size() > 1)
            util::throw_refused("allocate devices", resource,
                                fmt::format("memory units {} and {} are of two GPUs; a "
                                            "container's units must all be of one GPU",
                                            first[gpus[0]], d->id));
        memory = replicas && memory ? std::min(memory, d->memory) : memory + d->memory;
        compute = compute ? std::min(compute, d->compute) : d->compute;
    }
    a.envs["GPUBIND_GPU_MEMORY"] =
        replicas ? fmt::format("{}MiB", memory / kMiB) : fmt::format("{}GiB", memory / kGiB);
    if (replicas) a.envs["GPUBIND_GPU_COMPUTE"] = std::to_string(compute);
    // The same share where the pod cannot write it: /dev/null mounted at a
    // path naming it, which the hook takes over any variable (a pod can set
    // variables, and make an emptyDir at any path, but not mount /dev/null).
    const std::uint64_t bytes = replicas ? memory / kMiB * kMiB : memory / kGiB * kGiB;
    a.mounts.push_back({fmt::format("{}/memory/{}", kShareMountDir, bytes), "/dev/null", true});
    if (replicas)
        a.mounts.push_back(
            {fmt::format("{}/compute/{}", kShareMountDir, compute), "/dev/null", true});
    return gpus;
}

}  // namespace gpubind::plugin::detail
