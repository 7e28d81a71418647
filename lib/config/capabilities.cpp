#include "gpubind/config/capabilities.hpp"

#include <array>
#include <utility>

#include "gpubind/util/strings.hpp"

namespace gpubind::config {

namespace {

constexpr std::array<std::pair<std::string_view, Capability>, 7> kNames{{
    {"utility", kCapUtility},
    {"compute", kCapCompute},
    {"video", kCapVideo},
    {"graphics", kCapGraphics},
    {"display", kCapDisplay},
    {"ngx", kCapNgx},
    {"compat32", kCapCompat32},
}};

}  // namespace

std::optional<Capabilities> parse_capabilities(std::string_view csv, std::string* unknown) {
    Capabilities caps = 0;
    for (auto field : util::split(csv, ',')) {
        field = util::trim(field);
        if (field.empty()) continue;
        if (field == "all") {
            caps |= kCapAll;
            continue;
        }
        bool found = false;
        for (const auto& [name, bit] : kNames) {
            if (field == name) {
                caps |= bit;
                found = true;
                break;
            }
        }
        if (!found) {
            if (unknown) *unknown = std::string(field);
            return std::nullopt;
        }
    }
    return caps;
}

std::string capability_names(Capabilities caps) {
    std::string out;
    for (const auto& [name, bit] : kNames) {
        if (!(caps & bit)) continue;
        if (!out.empty()) out += ',';
        out += name;
    }
    return out;
}

}  // namespace gpubind::config
