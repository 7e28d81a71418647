// Driver capabilities (NVIDIA_DRIVER_CAPABILITIES) as a bit set.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpubind::config {

enum Capability : unsigned {
    kCapUtility = 1u << 0,
    kCapCompute = 1u << 1,
    kCapVideo = 1u << 2,
    kCapGraphics = 1u << 3,
    kCapDisplay = 1u << 4,
    kCapNgx = 1u << 5,
    kCapCompat32 = 1u << 6,  // a modifier: also the 32-bit copies
};
using Capabilities = unsigned;

inline constexpr Capabilities kCapAll =
    kCapUtility | kCapCompute | kCapVideo | kCapGraphics | kCapDisplay | kCapNgx | kCapCompat32;
inline constexpr Capabilities kCapDefault = kCapUtility | kCapCompute;

// Parses a comma list of names ("compute,utility", "all"); empty fields are
// ignored. An unknown name is returned through `unknown` and yields nullopt.
std::optional<Capabilities> parse_capabilities(std::string_view csv,
                                               std::string* unknown = nullptr);
// Canonical comma list in a fixed order: "utility,compute,video,...".
std::string capability_names(Capabilities caps);

}  // namespace gpubind::config
