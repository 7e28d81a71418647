// Reader for glibc's ld.so.cache, in all three layouts ldconfig writes.
//
// The format (glibc's sysdeps/generic/dl-cache.h), in the host's byte order:
//   old table   "ld.so-1.7.0", nlibs, nlibs x {flags, key, value}; string
//               offsets count from the end of the table.
//   new table   "glibc-ld.so.cache1.1", nlibs, len_strings, flags (endianness),
//               extension_offset, nlibs x {flags, key, value, osversion, hwcap},
//               then the string table; string offsets count from the table's
//               header. The extension directory (at a file offset) holds the
//               "generator" text and the glibc-hwcaps array: file offsets of
//               subdirectory names. An entry whose hwcap has bit 62 set and no
//               other high bits but the ISA level (bits 32-41) indexes that
//               array with its low 32 bits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind::ldcache {

// `ldconfig -c old` writes the libc5-era "ld.so-1.7.0" table alone, `-c compat`
// writes it followed by the "glibc-ld.so.cache1.1" table, `-c new` (the default)
// writes the new table alone.
enum class Layout { Old, Compat, New };

// The architecture an entry is for, decoded from its flags (see arch_of).
enum class Arch { Unknown, X86_64, I386, X32, Aarch64, Armhf, Ppc64le, Other };

struct Entry {
    std::int32_t flags = 0;          // FLAG_* from glibc's ldconfig.h
    std::string soname;              // the key: what the loader looks up
    std::string path;                // the value: the file the loader opens
    std::uint32_t osversion = 0;     // new format only; ldconfig -p (2.36) omits it
    std::uint64_t hwcap = 0;         // new format only: legacy hwcap bits, or the
                                     // glibc-hwcaps extension value
    bool has_hwcaps_subdir = false;  // hwcap names a glibc-hwcaps subdirectory
    std::string hwcaps_subdir;       // its name; empty if none. A compat-layout
                                     // cache (glibc 2.33-2.36 ldconfig) resolves
                                     // names at the wrong base, so there it is
                                     // whatever bytes sit there, as ldconfig -p
                                     // and the loader see them.
};

struct Cache {
    Layout layout = Layout::New;
    std::vector<Entry> entries;      // in file order (the order ldconfig -p prints)
    // New table only: the generator extension section ("ldconfig (...) release
    // version 2.36"), byte for byte; ldconfig -p prints it last.
    std::optional<std::string> generator;
};

// Largest cache load() accepts.
inline constexpr std::size_t kMaxCacheSize = 64u << 20;

// Parses a cache image. Every offset and count is bounds-checked; a truncated
// or corrupt image throws Error(EINVAL, "parse ld.so.cache", what, <detail>).
// For the compat layout the entries are those of the new table, as ldconfig -p
// and the loader use them. What glibc rejects (bad magic, wrong endianness, a
// malformed extension directory) is rejected; beyond that gpubind is stricter
// than ldconfig -p, which reads past the end of a corrupt file: an empty file,
// a short header, entries that do not fit, a string outside its string table
// (old table: the rest of the file; new table: the len_strings bytes after the
// entries) or not NUL-terminated within it, and a glibc-hwcaps name not
// NUL-terminated within the file are errors. Whatever parse() accepts,
// format_like_ldconfig() prints as ldconfig -p does.
Cache parse(std::string_view bytes, const std::string& what);
// Reads and parses the cache at `path`; a larger file than kMaxCacheSize is
// Error(EFBIG), a missing one Error(ENOENT).
Cache load(const std::filesystem::path& path);

// X86_64 (FLAG_X8664_LIB64), X32 (FLAG_X8664_LIBX32), Aarch64 (FLAG_AARCH64_LIB64),
// Armhf (FLAG_ARM_LIBHF), Ppc64le (FLAG_POWERPC_LIB64: gpubind reads caches in
// the host's little-endian order), I386 (no architecture bits: what ldconfig
// writes for 32-bit x86 and every other 32-bit ABI without its own flag), Other
// (an architecture flag glibc defines for another ABI), Unknown (a library type
// other than ELF, libc5 or libc6, or bits glibc does not define).
Arch arch_of(std::int32_t flags) noexcept;
// The flag text ldconfig -p prints between parentheses, e.g. "libc6,x86-64" or
// `libc6,x86-64, hwcap: "x86-64-v3"`: a non-empty hwcaps_subdir is quoted,
// otherwise a non-zero hwcap is printed in hex.
std::string describe_flags(std::int32_t flags, std::uint64_t hwcap, std::string_view hwcaps_subdir);
// The same for an entry, also right when its subdirectory name is empty.
std::string describe_flags(const Entry& entry);
// The whole listing as `ldconfig -p` (glibc 2.36) prints it for a cache read
// from `path`: header line, one line per entry, the generator line.
std::string format_like_ldconfig(const Cache& cache, std::string_view path);

// The entry the dynamic loader would use for `soname` on `arch` on a CPU with
// no optional features: among the entries with that key and architecture, the
// first in file order whose hwcap is 0 (no glibc-hwcaps subdirectory and no
// legacy hwcap bits: every CPU can load it), else the first in file order.
// Null if there is none.
const Entry* lookup(const Cache& cache, std::string_view soname, Arch arch);

}  // namespace gpubind::ldcache
