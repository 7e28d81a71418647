// What the tests expect of the machine they are built for, from glibc's and
// Debian's own facts (not from gpubind's code): an x86_64 build is checked
// against x86_64 glibc, an arm64 one against arm64 glibc under qemu.
#pragma once

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/sim/elf_stub.hpp"

namespace gpubind::test::target {

#if defined(__aarch64__)
inline constexpr sim::elf::Machine kMachine = sim::elf::Machine::Aarch64;
inline constexpr ldcache::Arch kArch = ldcache::Arch::Aarch64;  // its cache entries' architecture
inline constexpr const char* kFlags = "libc6,AArch64";          // `ldconfig -p` of a native library
inline constexpr const char* kLibDir = "/usr/lib/aarch64-linux-gnu";
inline constexpr const char* kLoader = "/lib/ld-linux-aarch64.so.1";  // its PT_INTERP
inline constexpr const char* kLoaderDir = "/lib/aarch64-linux-gnu";   // where libc.so.6 is
inline constexpr bool kHas32 = false;  // no 32-bit loader or driver libraries
#else
inline constexpr sim::elf::Machine kMachine = sim::elf::Machine::X86_64;
inline constexpr ldcache::Arch kArch = ldcache::Arch::X86_64;
inline constexpr const char* kFlags = "libc6,x86-64";
inline constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu";
inline constexpr const char* kLoader = "/lib64/ld-linux-x86-64.so.2";
inline constexpr const char* kLoaderDir = "/lib/x86_64-linux-gnu";
inline constexpr bool kHas32 = true;
#endif
// The 32-bit side, where there is one (x86_64's i386).
inline constexpr const char* kLib32Dir = kHas32 ? "/usr/lib/i386-linux-gnu" : "";
inline constexpr const char* kFlags32 = "libc6";

}  // namespace gpubind::test::target
