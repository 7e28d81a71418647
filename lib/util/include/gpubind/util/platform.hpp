// The machine this build is for: its names and library directories. gpubind
// is built for x86_64 and arm64 (Grace); everything that differs between them
// is named here.
#pragma once

#include <string_view>

namespace gpubind::util::platform {

#if defined(__x86_64__)
inline constexpr std::string_view kMachine = "x86_64";  // `uname -m`, and NVRM's version line
// Debian's library directories: the native one, and the one of the 32-bit
// libraries its loader also serves (compat32); empty: none.
inline constexpr const char* kMultiarchLibDir = "/usr/lib/x86_64-linux-gnu";
inline constexpr const char* kMultiarchLib32Dir = "/usr/lib/i386-linux-gnu";
#elif defined(__aarch64__)
inline constexpr std::string_view kMachine = "aarch64";
inline constexpr const char* kMultiarchLibDir = "/usr/lib/aarch64-linux-gnu";
// NVIDIA ships no 32-bit driver libraries for arm64.
inline constexpr const char* kMultiarchLib32Dir = "";
#else
#error "gpubind is built for x86_64 and aarch64"
#endif

inline constexpr bool kHasCompat32 = kMultiarchLib32Dir[0] != '\0';

}  // namespace gpubind::util::platform
