// NVIDIA_REQUIRE_* expressions: whitespace separates alternatives (any one may
// hold), a comma joins conditions (all must hold), a condition is
// `key op value`:
//
//   cuda    the CUDA version the driver supports (NVML)   versions: == = != < <= > >=
//   driver  the driver version                            versions: likewise
//   arch    each selected GPU's compute capability        versions: likewise
//   brand   each selected GPU's brand (case-insensitive)  = == !=
//
// Keys are case-insensitive; a version is decimal numbers joined by single
// dots, compared as util's compare_versions does (numerically component by
// component, a missing component counting as 0: "12" == "12.0"). Every
// variable must hold for every selected GPU (a MIG device counts as its
// parent); with no GPU selected, arch and brand conditions hold trivially.
#include <algorithm>
#include <cerrno>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/decide/request.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/version.hpp"

namespace gpubind::decide {

namespace {

enum class Key { Cuda, Driver, Arch, Brand };
enum class Op { Eq, Ne, Lt, Le, Gt, Ge };

struct Condition {
    std::string text;  // as written
    Key key = Key::Cuda;
    Op op = Op::Eq;
    std::string value;  // for cuda, driver and arch a version (is_numeric_version)
};
using Alternative = std::vector<Condition>;

// Decimal numbers (each within an unsigned long) joined by single dots.
bool is_numeric_version(std::string_view s) {
    for (auto part : util::split(s, '.'))
        if (!util::parse_unsigned(part)) return false;
    return true;
}

bool holds(int cmp, Op op) {
    switch (op) {
        case Op::Eq:
            return cmp == 0;
        case Op::Ne:
            return cmp != 0;
        case Op::Lt:
            return cmp < 0;
        case Op::Le:
            return cmp <= 0;
        case Op::Gt:
            return cmp > 0;
        case Op::Ge:
            return cmp >= 0;
    }
    return false;
}

Condition parse_condition(std::string_view text, const std::string& variable) {
    auto bad = [&](const std::string& why) {
        util::throw_invalid("check requirement", variable, fmt::format("'{}': {}", text, why));
    };
    Condition c;
    c.text = text;
    std::size_t k = 0;
    while (k < text.size() &&
           ((text[k] >= 'a' && text[k] <= 'z') || (text[k] >= 'A' && text[k] <= 'Z')))
        ++k;
    std::string key = util::to_lower(text.substr(0, k));
    static constexpr std::pair<std::string_view, Key> kKeys[] = {
        {"cuda", Key::Cuda}, {"driver", Key::Driver}, {"arch", Key::Arch}, {"brand", Key::Brand}};
    auto known = std::find_if(std::begin(kKeys), std::end(kKeys),
                              [&](const auto& entry) { return entry.first == key; });
    if (known == std::end(kKeys))
        bad(key.empty() ? "no key (cuda, driver, arch or brand)" : "unknown key '" + key + "'");
    c.key = known->second;

    static constexpr std::pair<std::string_view, Op> kOps[] = {
        {"==", Op::Eq}, {"!=", Op::Ne}, {"<=", Op::Le}, {">=", Op::Ge},
        {"=", Op::Eq},  {"<", Op::Lt},  {">", Op::Gt},
    };
    std::string_view rest = text.substr(k);
    bool found = false;
    for (const auto& [name, op] : kOps) {
        if (rest.starts_with(name)) {
            c.op = op;
            rest.remove_prefix(name.size());
            found = true;
            break;
        }
    }
    if (!found) bad("no operator (== = != < <= > >=) after '" + key + "'");
    if (rest.empty()) bad("no value");
    c.value = rest;
    if (c.key == Key::Brand) {
        if (c.op != Op::Eq && c.op != Op::Ne) bad("a brand compares only with =, == or !=");
    } else {
        if (!is_numeric_version(rest)) bad(fmt::format("'{}' is not a version", rest));
    }
    return c;
}

std::vector<Alternative> parse_expression(const Requirement& r) {
    std::vector<Alternative> out;
    std::string_view s = r.expression;
    constexpr std::string_view kSpace = " \t\r\n\v\f";
    while (true) {
        auto b = s.find_first_not_of(kSpace);
        if (b == std::string_view::npos) break;
        auto e = s.find_first_of(kSpace, b);
        std::string_view token = s.substr(b, e == std::string_view::npos ? e : e - b);
        s.remove_prefix(b + token.size());
        Alternative alt;
        for (auto field : util::split(token, ','))
            if (!field.empty()) alt.push_back(parse_condition(field, r.variable));
        if (!alt.empty()) out.push_back(std::move(alt));
    }
    return out;
}

// Why `c` does not hold, or nullopt when it does.
std::optional<std::string> failure(const Condition& c, const node::Node& node,
                                   const node::Gpu* gpu) {
    auto version_check = [&](const std::string& have, std::string_view what,
                             std::string_view says) -> std::optional<std::string> {
        if (have.empty()) return fmt::format("the {} is unknown", what);
        if (!is_numeric_version(have))
            return fmt::format("the {} '{}' is not a version", what, have);
        if (holds(util::compare_versions(have, c.value), c.op)) return std::nullopt;
        return fmt::format("{}{}", says, have);
    };
    switch (c.key) {
        case Key::Cuda:
            return version_check(node.cuda_version, "CUDA version the driver supports",
                                 "the driver supports CUDA ");
        case Key::Driver:
            return version_check(node.driver_version, "driver version", "the driver version is ");
        case Key::Arch:
            if (!gpu) return std::nullopt;
            return version_check(gpu->compute_capability,
                                 fmt::format("compute capability of {}", node::gpu_name(*gpu)),
                                 fmt::format("{} has compute capability ", node::gpu_name(*gpu)));
        case Key::Brand: {
            if (!gpu) return std::nullopt;
            if (gpu->brand.empty())
                return fmt::format("the brand of {} is unknown", node::gpu_name(*gpu));
            bool equal = util::to_lower(gpu->brand) == util::to_lower(c.value);
            if (equal == (c.op == Op::Eq)) return std::nullopt;
            return fmt::format("{} has brand {}", node::gpu_name(*gpu), gpu->brand);
        }
    }
    return std::nullopt;
}

// "<condition> not satisfied: <why>" for the first condition of `alt` that
// fails, or nullopt when they all hold.
std::optional<std::string> first_failure(const Alternative& alt, const node::Node& node,
                                         const node::Gpu* gpu) {
    for (const auto& c : alt)
        if (auto why = failure(c, node, gpu))
            return fmt::format("{} not satisfied: {}", c.text, *why);
    return std::nullopt;
}

}  // namespace

bool needs_nvml_facts(const Request& request) {
    for (const auto& id : request.devices.ids)
        if (util::to_lower(id).rfind("mig-", 0) == 0) return true;
    for (const auto& r : request.requirements)
        for (const auto& alt : parse_expression(r))
            for (const auto& c : alt)
                if (c.key != Key::Driver) return true;
    return false;
}

void check_requirements(const Request& request, const node::Node& node,
                        const node::Selection& selection) {
    if (request.requirements.empty()) return;
    // Parse everything first: a malformed expression is an error even where
    // an earlier variable would already fail.
    std::vector<std::vector<Alternative>> parsed;
    for (const auto& r : request.requirements) parsed.push_back(parse_expression(r));

    std::vector<const node::Gpu*> gpus;  // whole GPUs and the parents of MIG devices, in node order
    for (const auto& gpu : node.gpus) {
        bool selected = false;
        for (const node::Gpu* g : selection.gpus) selected = selected || g == &gpu;
        for (const node::MigDevice* m : selection.migs)
            selected = selected || m->gpu_index == gpu.index;
        if (selected) gpus.push_back(&gpu);
    }
    if (gpus.empty()) gpus.push_back(nullptr);  // cuda and driver only

    for (std::size_t i = 0; i < parsed.size(); ++i) {
        if (parsed[i].empty()) continue;
        for (const node::Gpu* gpu : gpus) {
            std::vector<std::string> reasons;  // one per failing alternative
            for (const auto& alt : parsed[i]) {
                auto why = first_failure(alt, node, gpu);
                if (!why) {
                    reasons.clear();
                    break;
                }
                reasons.push_back(std::move(*why));
            }
            if (reasons.empty()) continue;
            util::throw_refused("check requirement", request.requirements[i].variable,
                                reasons.size() == 1 ? reasons[0]
                                                    : fmt::format("no alternative holds: {}",
                                                                  fmt::join(reasons, "; ")));
        }
    }
}

}  // namespace gpubind::decide
