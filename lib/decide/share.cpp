// A share of a GPU a container asks for: see decide/share.hpp.
#include "gpubind/decide/share.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <limits>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "gpubind/decide/mps.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::decide {

namespace {

constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

// What a variable sets, and the unit of a bare number in it.
enum class Sets { Memory, Request, Compute, GpuIndex };
struct Variable {
    std::string_view name;
    Sets sets;
    std::uint64_t unit = 1;
};
constexpr std::array<Variable, 10> kVariables = {{
    {"GPUBIND_GPU_MEMORY", Sets::Memory, kMiB},
    {"GPUBIND_GPU_COMPUTE", Sets::Compute},
    {"NVIDIA_GPU_MEMORY_LIMIT", Sets::Memory},
    {"NVIDIA_GPU_MEMORY_LIMITS", Sets::Memory},
    {"NVIDIA_GPU_MEMORY_REQUEST", Sets::Request},
    {"NVIDIA_GPU_MEMORY_REQUESTS", Sets::Request},
    {"CUDA_DEVICE_MEMORY_LIMIT", Sets::Memory},
    {"CUDA_DEVICE_SM_LIMIT", Sets::Compute},
    {"ALIYUN_COM_GPU_MEM_CONTAINER", Sets::Memory, kGiB},
    {"ALIYUN_COM_GPU_MEM_IDX", Sets::GpuIndex},
}};
constexpr std::string_view kDevicePrefix = "CUDA_DEVICE_MEMORY_LIMIT_";

// One variable found in the environment: its name and value (the last one
// set wins, as execve sees them).
struct Found {
    std::string_view name;
    std::string_view value;
    const Variable* variable = nullptr;  // null: CUDA_DEVICE_MEMORY_LIMIT_<i>
    unsigned device = 0;
};

// Every share variable of `env`, in one pass: an entry's first letter rules
// out most of an environment before any comparison.
std::vector<Found> share_variables(const std::vector<std::string>& env) {
    std::vector<Found> found;
    for (const std::string& entry : env) {
        if (entry.empty() ||
            (entry[0] != 'G' && entry[0] != 'N' && entry[0] != 'C' && entry[0] != 'A'))
            continue;
        const auto eq = entry.find('=');
        if (eq == std::string::npos) continue;
        const std::string_view name(entry.data(), eq),
            value(entry.data() + eq + 1, entry.size() - eq - 1);
        Found f{name, value};
        if (name.starts_with(kDevicePrefix)) {
            const auto device = util::parse_unsigned(name.substr(kDevicePrefix.size()));
            if (!device || *device > 255 || name.size() == kDevicePrefix.size()) continue;
            f.device = static_cast<unsigned>(*device);
        } else {
            const auto it = std::find_if(kVariables.begin(), kVariables.end(),
                                         [&](const Variable& v) { return v.name == name; });
            if (it == kVariables.end()) continue;
            f.variable = &*it;
        }
        // A later entry of the same name replaces the earlier one.
        std::erase_if(found, [&](const Found& old) { return old.name == name; });
        found.push_back(f);
    }
    return found;
}

[[noreturn]] void malformed(const Found& f, const std::string& where, std::string_view why) {
    util::throw_invalid("read request", where, fmt::format("{}={}: {}", f.name, f.value, why));
}

// "10GiB", "10 G", "10240Mi", "1536m", "7": bytes (a bare number in `unit`).
std::uint64_t parse_size(const Found& f, std::uint64_t unit, const std::string& where) {
    const std::string_view v = util::trim(f.value);
    const auto digits = v.find_first_not_of("0123456789");
    const std::string_view number = v.substr(0, digits);
    std::string suffix(util::trim(digits == std::string_view::npos ? "" : v.substr(digits)));
    std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (suffix.size() > 1 && suffix.back() == 'b') suffix.pop_back();
    if (suffix.size() == 2 && suffix.back() == 'i') suffix.pop_back();
    static constexpr std::string_view kUnits = "bkmgt";
    const auto power = suffix.empty() ? std::string_view::npos : kUnits.find(suffix);
    // Up to 19 digits: any of them fits in 64 bits.
    if (number.empty() || number.size() > 19 ||
        (!suffix.empty() && (suffix.size() != 1 || power == std::string_view::npos)))
        malformed(f, where, "not a size (a number with B, K, M, G or T: \"10GiB\", \"512Mi\")");
    std::uint64_t n = 0;
    for (char c : number) n = n * 10 + static_cast<std::uint64_t>(c - '0');
    const std::uint64_t scale = suffix.empty() ? unit : 1ull << (10 * power);
    if (n == 0) malformed(f, where, "a share of no memory");
    if (n > std::numeric_limits<std::uint64_t>::max() / scale)
        malformed(f, where, "larger than any GPU's memory");
    return n * scale;
}

unsigned parse_percent(const Found& f, const std::string& where) {
    std::string_view v = util::trim(f.value);
    if (v.ends_with('%')) v.remove_suffix(1);
    const auto n = v.find_first_not_of("0123456789") == std::string_view::npos && !v.empty()
                       ? util::parse_unsigned(v)
                       : std::nullopt;
    if (!n || *n < 1 || *n > 100) malformed(f, where, "not a percent of a GPU (1 to 100)");
    return static_cast<unsigned>(*n);
}

// Sets `field` from `f`, or checks that it agrees with what set it before.
template <class T>
void agree(T& field, T value, std::string& set_by, const Found& f, const std::string& where,
           const std::function<std::string(T)>& text) {
    const std::string by = fmt::format("{}={}", f.name, f.value);
    if (set_by.empty()) {
        field = value;
        set_by = by;
    } else if (field != value) {
        util::throw_invalid("read request", where,
                            fmt::format("{} and {} ask for different shares ({} and {})", set_by,
                                        by, text(field), text(value)));
    }
}

}  // namespace

std::string size_text(std::uint64_t bytes) {
    if (bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
    if (bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
    return fmt::format("{} B", bytes);
}

ShareRequest read_share(const oci::Spec& spec, const std::string& where) {
    ShareRequest share;
    std::string memory_by, request_by, compute_by, gpu_by;
    const std::function<std::string(std::uint64_t)> size = size_text;
    const std::function<std::string(unsigned)> percent = [](unsigned p) {
        return fmt::format("{}%", p);
    };
    const std::function<std::string(std::optional<unsigned>)> gpu = [](auto i) {
        return fmt::format("GPU {}", i.value_or(0));
    };
    for (const Found& f : share_variables(spec.env)) {
        if (util::trim(f.value).empty()) continue;
        const std::string by = fmt::format("{}={}", f.name, f.value);
        if (!f.variable) {
            share.device_memory[f.device] = parse_size(f, 1, where);
            if (share.asked_by.empty()) share.asked_by = by;
            continue;
        }
        switch (f.variable->sets) {
            case Sets::Memory:
                agree(share.memory, parse_size(f, f.variable->unit, where), memory_by, f, where,
                      size);
                break;
            case Sets::Request:
                agree(share.memory_request, parse_size(f, f.variable->unit, where), request_by, f,
                      where, size);
                break;
            case Sets::Compute:
                agree(share.compute, parse_percent(f, where), compute_by, f, where, percent);
                break;
            case Sets::GpuIndex: {
                const auto i = util::parse_unsigned(util::trim(f.value));
                if (!i || *i > 255) malformed(f, where, "not a GPU index");
                agree(share.gpu, std::optional<unsigned>(static_cast<unsigned>(*i)), gpu_by, f,
                      where, gpu);
                break;
            }
        }
        if (share.asked_by.empty() && f.variable->sets != Sets::GpuIndex &&
            f.variable->sets != Sets::Request)
            share.asked_by = by;
    }
    if (share.memory_request && !share.asked()) {
        // A request alone asks for a share of that much.
        share.memory = share.memory_request;
        share.asked_by = request_by;
    }
    if (share.memory_request && share.memory && share.memory_request > share.memory)
        util::throw_invalid("read request", where,
                            fmt::format("{} is above the limit {}", request_by,
                                        memory_by.empty() ? share.asked_by : memory_by));
    if (share.gpu && !share.asked())
        util::throw_invalid(
            "read request", where,
            fmt::format("{} names a GPU for a share, but no variable asks for one", gpu_by));
    return share;
}

void check_share(const ShareRequest& share, const node::Node& node,
                 const node::Selection& selection, const config::Config& config) {
    if (!share.asked()) return;
    const std::string& by = share.asked_by;
    if (!selection.migs.empty())
        util::throw_refused(
            "check share", by,
            fmt::format("a share of MIG device {}: a MIG device is already a fixed "
                        "part of its GPU; ask for the whole MIG device",
                        selection.migs.front()->uuid.empty()
                            ? fmt::format("{}:{}", selection.migs.front()->gpu_index,
                                          selection.migs.front()->index)
                            : selection.migs.front()->uuid));
    if (share.gpu && std::none_of(selection.gpus.begin(), selection.gpus.end(),
                                  [&](const node::Gpu* g) { return g->index == *share.gpu; }))
        util::throw_refused(
            "check share", by,
            fmt::format("the share is on GPU {}, which the container is not given", *share.gpu));
    for (const auto& [position, bytes] : share.device_memory)
        if (position >= selection.gpus.size())
            util::throw_refused(
                "check share", by,
                fmt::format("CUDA_DEVICE_MEMORY_LIMIT_{} names the container's GPU {}, "
                            "but it is given {}",
                            position, position, selection.gpus.size()));
    for (std::size_t i = 0; i < selection.gpus.size(); ++i) {
        const node::Gpu& g = *selection.gpus[i];
        const auto per = share.device_memory.find(static_cast<unsigned>(i));
        const std::uint64_t limit = per != share.device_memory.end() ? per->second : share.memory;
        if (g.memory && limit > g.memory)
            util::throw_refused("check share", by,
                                fmt::format("a limit of {} on {}, which has {}", size_text(limit),
                                            node::gpu_name(g), size_text(g.memory)));
    }
    const ShareEnforcement enforcement = share_enforcement(node);
    std::string lacks = enforcement.lacks;
    if (lacks.empty() && share.compute && enforcement.by == kDriverMemoryLimit)
        lacks = fmt::format(
            "{} holds memory only, and a compute share needs MPS, which gpubind uses only "
            "where the driver offers no such limit",
            enforcement.by);
    if (lacks.empty()) return;
    if (config.policy.shares == config::SharesPolicy::Soft) {
        util::logger().warn("{}: the share is not enforced: {}; starting it anyway (shares = soft)",
                            by, lacks);
        return;
    }
    util::throw_refused(
        "check share", by,
        fmt::format("this node cannot enforce a GPU share: {}; [policy] shares = soft "
                    "starts it unenforced",
                    lacks));
}

std::vector<node::MemoryLimit> share_limits(const ShareRequest& share,
                                            const node::Selection& selection) {
    std::vector<node::MemoryLimit> limits;
    for (std::size_t i = 0; i < selection.gpus.size(); ++i) {
        const auto per = share.device_memory.find(static_cast<unsigned>(i));
        const std::uint64_t hard = per != share.device_memory.end() ? per->second : share.memory;
        if (hard == 0) continue;
        limits.push_back({selection.gpus[i]->minor, std::min(share.memory_request, hard), hard});
    }
    return limits;
}

ShareEnforcement share_enforcement(const node::Node& node) {
    if (node.memory_limits) return {kDriverMemoryLimit, {}};
    if (node_has_mps(node)) return {kMps, {}};
    return {{},
            fmt::format(
                "the driver offers no per-cgroup memory limit ({}), and has no MPS "
                "(nvidia-cuda-mps-control)",
                node.memory_limits_why.empty() ? "NVML was not asked" : node.memory_limits_why)};
}

}  // namespace gpubind::decide
