// Minimal ELF shared objects: what the simulated node and the ld.so.cache
// tests use as driver libraries for which no real code is needed.
#pragma once

#include <string>
#include <string_view>

namespace gpubind::sim::elf {

enum class Machine { X86_64, I386, Aarch64 };

// This build's own machine, and the 32-bit one its loader also serves.
#if defined(__aarch64__)
inline constexpr Machine kNativeMachine = Machine::Aarch64;
#else
inline constexpr Machine kNativeMachine = Machine::X86_64;
#endif
inline constexpr Machine kCompat32Machine = Machine::I386;

// A shared object (ET_DYN) for `machine` whose dynamic section names
// `soname`: ELF header, program headers (PT_LOAD, PT_DYNAMIC, PT_GNU_STACK), and
// a dynamic section with DT_NEEDED libc.so.6, DT_SONAME, DT_STRTAB, DT_STRSZ,
// DT_SYMTAB, DT_SYMENT, DT_HASH; no section headers, no symbols. Both ldconfig
// (flags "libc6,x86-64" / "libc6" / "libc6,AArch64") and the dynamic loader
// of its architecture accept it. An empty
// soname, or one with '/' or NUL, is Error(EINVAL).
std::string make_shared_object(Machine machine, std::string_view soname);

}  // namespace gpubind::sim::elf
