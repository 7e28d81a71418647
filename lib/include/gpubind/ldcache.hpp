// Reader for glibc's ld.so.cache, in all three layouts ldconfig writes.
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

// The architecture an entry is for, decoded from its flags.
enum class Arch { Unknown, X86_64, I386, X32, Aarch64, Armhf, Ppc64le, Other };

struct Entry {
    std::int32_t flags = 0;          // FLAG_* from glibc's ldconfig.h
    std::string soname;              // the key: what the loader looks up
    std::string path;                // the value: the file the loader opens
    std::uint32_t osversion = 0;     // new format only
    std::uint64_t hwcap = 0;         // new format only
    std::string hwcaps_subdir;       // glibc-hwcaps subdirectory name, empty if none
};

struct Cache {
    Layout layout = Layout::New;
    std::vector<Entry> entries;      // in file order (the order ldconfig -p prints)
};

// Largest cache load() accepts.
inline constexpr std::size_t kMaxCacheSize = 64u << 20;

// Parses a cache image. Every offset and count is bounds-checked; a truncated
// or corrupt image throws Error(EINVAL, "parse ld.so.cache", what, <detail>).
// For the compat layout the entries are those of the new table.
Cache parse(std::string_view bytes, const std::string& what);
// Reads and parses the cache at `path` (at most kMaxCacheSize bytes).
Cache load(const std::filesystem::path& path);

Arch arch_of(std::int32_t flags) noexcept;
// The flag text ldconfig -p prints between parentheses, e.g. "libc6,x86-64".
std::string describe_flags(std::int32_t flags, std::uint64_t hwcap, std::string_view hwcaps_subdir);
// The whole listing as `ldconfig -p` prints it for a cache read from `path`.
std::string format_like_ldconfig(const Cache& cache, std::string_view path);

// The entry the dynamic loader would use for `soname` on `arch`: among the
// entries with that key and architecture, the one without a glibc-hwcaps
// subdirectory (every CPU can load it), else the first in file order.
const Entry* lookup(const Cache& cache, std::string_view soname, Arch arch);

}  // namespace gpubind::ldcache
