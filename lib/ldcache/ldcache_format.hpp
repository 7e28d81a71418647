// The layout of glibc's ld.so.cache (sysdeps/generic/dl-cache.h, ldconfig.h),
// shared by the reader (ldcache.cpp) and the writer (ldcache_write.cpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpubind::ldcache::format {

constexpr std::string_view kOldMagic = "ld.so-1.7.0";
constexpr std::size_t kOldHeaderSize = 16;  // magic[11], pad, uint32 nlibs
constexpr std::size_t kOldNlibsAt = 12;
constexpr std::size_t kOldEntrySize = 12;  // int32 flags, uint32 key, value

constexpr std::string_view kNewMagic = "glibc-ld.so.cache1.1";
constexpr std::size_t kNewHeaderSize = 48;
constexpr std::size_t kNewNlibsAt = 20;
constexpr std::size_t kNewLenStringsAt = 24;
constexpr std::size_t kNewFlagsAt = 28;  // uint8: endianness
constexpr std::size_t kNewExtensionAt = 32;
constexpr std::size_t kNewEntrySize = 24;  // + uint32 osversion, uint64 hwcap
constexpr std::size_t kNewAlign = 8;       // alignof(cache_file_new) on 64-bit

constexpr std::uint8_t kEndianMask = 3;
constexpr std::uint8_t kEndianCurrent = std::endian::native == std::endian::little ? 2 : 3;

constexpr std::uint32_t kExtensionMagic = 0xeaa42174;  // (uint32_t) -358342284
constexpr std::size_t kExtensionHeaderSize = 8;        // magic, count
constexpr std::size_t kSectionSize = 16;               // tag, flags, offset, size
constexpr std::uint32_t kTagGenerator = 0;
constexpr std::uint32_t kTagGlibcHwcaps = 1;

constexpr std::uint64_t kHwcapExtension = 1ULL << 62;
constexpr std::uint64_t kIsaLevelMask = (1U << 10) - 1;

constexpr std::int32_t kTypeMask = 0x00ff;
constexpr std::int32_t kRequiredMask = 0xff00;
constexpr std::int32_t kFlagElfLibc6 = 0x0003;
constexpr std::int32_t kFlagX8664Lib64 = 0x0300;
constexpr std::int32_t kFlagAarch64Lib64 = 0x0a00;

// True if the hwcap field holds a glibc-hwcaps index (dl_cache_hwcap_extension).
constexpr bool is_hwcaps_index(std::uint64_t hwcap) noexcept {
    return ((hwcap >> 32) & ~kIsaLevelMask) == (kHwcapExtension >> 32);
}

}  // namespace gpubind::ldcache::format
