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

// This build's libraries, and the 32-bit ones its loader also serves (Unknown:
// none, as on arm64).
#if defined(__x86_64__)
inline constexpr Arch kNativeArch = Arch::X86_64;
inline constexpr Arch kCompat32Arch = Arch::I386;
#elif defined(__aarch64__)
inline constexpr Arch kNativeArch = Arch::Aarch64;
inline constexpr Arch kCompat32Arch = Arch::Unknown;
#endif

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
    std::vector<Entry> entries;  // in file order (the order ldconfig -p prints)
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

// ---- writing (ldcache_write.cpp) --------------------------------------------

// A library gpubind adds to a container's cache: an injected driver library,
// or one of the image's CUDA forward-compat libraries.
struct Library {
    std::string soname;  // the key, e.g. "libcuda.so.1"
    std::string path;    // the file in the container, e.g. "/usr/lib64/libcuda.so.1"
    // X86_64 (flags "libc6,x86-64"), I386 ("libc6") or Aarch64 ("libc6,AArch64").
    Arch arch = kNativeArch;
};

// What a refresh by `ldconfig -r ROOT <dirs>` would make of the image's cache,
// without scanning the image:
//  - each added library becomes an entry (flags FLAG_ELF_LIBC6, with
//    FLAG_X8664_LIB64 for X86_64 and FLAG_AARCH64_LIB64 for Aarch64; hwcap 0), in the given order
//    among entries of the same soname and architecture (the CUDA compat one before the driver's);
//  - an image entry with the soname and architecture of an added library is
//    dropped (the host's driver wins; an added CUDA compat library is listed
//    before the driver's one); an image entry of an architecture the writer
//    cannot describe again (a glibc-hwcaps index whose name is lost) or order
//    (a soname with a run of more than 9 digits: glibc's comparison of it
//    overflows, so the loader's binary search cannot rely on it) is dropped;
//    every other image entry is kept with its flags, hwcap and osversion;
//  - `dirs` is the directory order of the refresh (ldconfig's command line):
//    among entries glibc's order cannot tell apart (same soname, flags and
//    hwcaps), those whose directory (the file's, or the one holding its
//    glibc-hwcaps subdirectory) comes earlier in `dirs` come first, then the
//    rest in the image's order; added libraries come before image entries of
//    the same directory;
//  - the entries are in glibc's order (cache.c's compare): soname descending
//    by _dl_cache_libcmp (the loader binary-searches it), then flags
//    descending, glibc-hwcaps entries first and by subdirectory name, then the
//    most legacy hwcap bits, hwcap and osversion descending.
// The result is a Cache of Layout::New; glibc-hwcaps names of a compat-layout
// image (stored at the wrong base by glibc 2.33-2.36) are taken from the
// entry's path (<dir>/glibc-hwcaps/<name>/<file>), as ldconfig would rebuild them.
// `image` is taken (its entries moved, not copied); nullopt: no cache.
Cache merge(std::optional<Cache> image, const std::vector<Library>& added,
            const std::vector<std::string>& dirs);
// The new-format file glibc's loader and `ldconfig -p` read: header, entries
// in the order given, string table (a soname of adjacent entries stored once), extension
// directory with the generator text (when set) and the glibc-hwcaps array
// (names sorted by strcmp, as ldconfig numbers them). `cache` must be in
// glibc's order (merge's result is); an entry whose hwcaps subdirectory is set
// gets a glibc-hwcaps index (its ISA level bits kept). A string with a NUL,
// or a file beyond 4 GiB, is Error(EINVAL); so is, for merge, an added library
// of another architecture or with an unorderable soname.
std::string serialize(const Cache& cache);
// glibc's _dl_cache_libcmp: byte by byte (as signed char), but runs of digits
// compare by their value (int arithmetic as glibc's); <0, 0, >0.
int libcmp(std::string_view a, std::string_view b) noexcept;
// glibc's compare() of two cache entries (cache.c): <0 when `a` comes first in
// the file, >0 when `b` does, 0 when glibc keeps them in insertion order.
int compare_entries(const Entry& a, const Entry& b) noexcept;

}  // namespace gpubind::ldcache
