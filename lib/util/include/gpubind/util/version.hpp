// The one comparison of version strings: driver and CUDA versions, the CUDA
// compat libraries', NVIDIA_REQUIRE_* conditions, CDI spec versions.
#pragma once

#include <string_view>

namespace gpubind::util {

// Compares two versions: <0 when `a` is older, 0 when equal, >0 when newer.
// One rule, whatever the caller:
// - an optional leading "v" is ignored ("v1.0.0" == "1.0.0");
// - the release is the leading run of digits and dots; its dot-separated
//   components compare as numbers, left to right ("10" > "9", "550.100" >
//   "550.54"), of any length; leading zeros do not count ("535.104.05" ==
//   "535.104.5"); a missing or empty component is 0 ("12" == "12.0.0");
// - whatever follows the release is its suffix ("-rc1" of "1.0.0-rc1",
//   "beta" of "2.0beta"). The releases decide when they differ; of equal
//   releases, one without a suffix is newer than one with, as a pre-release
//   comes before its release ("1.0.0-rc1" < "1.0.0"), and two suffixes
//   compare byte by byte ("-rc10" < "-rc9", "-alpha" < "-beta").
// A caller that accepts only some versions checks them itself first.
int compare_versions(std::string_view a, std::string_view b) noexcept;

}  // namespace gpubind::util
