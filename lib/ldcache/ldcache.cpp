#include "gpubind/ldcache/ldcache.hpp"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "ldcache_format.hpp"

namespace gpubind::ldcache {

namespace {

using namespace format;

// True if [off, off + len) lies within a buffer of `size` bytes (no overflow).
constexpr bool fits(std::size_t size, std::size_t off, std::size_t len) noexcept {
    return off <= size && len <= size - off;
}

class Parser {
  public:
    Parser(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}

    Cache run() {
        if (bytes_.empty()) fail("empty file");
        if (bytes_.starts_with(kOldMagic)) return old_or_compat();
        if (bytes_.starts_with(kNewMagic)) return new_table(0, Layout::New);
        if (kOldMagic.starts_with(bytes_) || kNewMagic.starts_with(bytes_))
            fail(fmt::format("truncated header: {} bytes", bytes_.size()));
        fail("not an ld.so.cache (unknown magic)");
    }

  private:
    [[noreturn]] void fail(const std::string& detail) const {
        util::throw_invalid("parse ld.so.cache", what_, detail);
    }

    // Callers check bounds first. The cache is in the host's byte order.
    template <class T>
    T get(std::size_t off) const noexcept {
        T v;
        std::memcpy(&v, bytes_.data() + off, sizeof v);
        return v;
    }

    // The NUL-terminated string `off` bytes after file offset `origin`; it must
    // start and end within `strings`, the string table at file offset `strings_at`.
    std::string string_at(std::size_t origin, std::uint32_t off, std::string_view strings,
                          std::size_t strings_at, std::size_t index, const char* field) const {
        const std::size_t pos = origin + off;  // both far below SIZE_MAX / 2
        if (pos < strings_at || pos - strings_at >= strings.size())
            fail(
                fmt::format("entry {}: {} offset {} is outside the string table "
                            "({} bytes at file offset {})",
                            index, field, off, strings.size(), strings_at));
        const auto nul = strings.find('\0', pos - strings_at);
        if (nul == std::string_view::npos)
            fail(fmt::format("entry {}: {} at file offset {} is not NUL-terminated", index, field,
                             pos));
        return std::string(strings.substr(pos - strings_at, nul - (pos - strings_at)));
    }

    Cache old_or_compat() {
        if (bytes_.size() < kOldHeaderSize)
            fail(
                fmt::format("truncated old header: {} of {} bytes", bytes_.size(), kOldHeaderSize));
        const std::uint32_t nlibs = get<std::uint32_t>(kOldNlibsAt);
        if (nlibs > (bytes_.size() - kOldHeaderSize) / kOldEntrySize)
            fail(fmt::format("old table: {} entries do not fit in {} bytes", nlibs, bytes_.size()));
        const std::size_t table_end = kOldHeaderSize + std::size_t{nlibs} * kOldEntrySize;

        // ldconfig -c compat hides the new table at the next aligned offset,
        // where the old string table would start; glibc takes it if the file
        // extends beyond its header and the magic matches.
        const std::size_t new_at = (table_end + kNewAlign - 1) & ~(kNewAlign - 1);
        if (bytes_.size() > new_at + kNewHeaderSize &&
            bytes_.substr(new_at, kNewMagic.size()) == kNewMagic)
            return new_table(new_at, Layout::Compat);

        Cache cache;
        cache.layout = Layout::Old;
        cache.entries.reserve(nlibs);
        const std::string_view strings = bytes_.substr(table_end);
        for (std::size_t i = 0; i < nlibs; ++i) {
            const std::size_t at = kOldHeaderSize + i * kOldEntrySize;
            Entry& e = cache.entries.emplace_back();
            e.flags = get<std::int32_t>(at);
            e.soname =
                string_at(table_end, get<std::uint32_t>(at + 4), strings, table_end, i, "key");
            e.path =
                string_at(table_end, get<std::uint32_t>(at + 8), strings, table_end, i, "value");
        }
        return cache;
    }

    struct Extensions {
        std::optional<std::string_view> generator;
        std::size_t hwcaps_at = 0;     // file offset of the glibc-hwcaps array:
        std::size_t hwcaps_count = 0;  // uint32 file offsets of subdirectory names
    };

    // The new table whose header is at file offset `base`.
    Cache new_table(std::size_t base, Layout layout) {
        if (!fits(bytes_.size(), base, kNewHeaderSize))
            fail(fmt::format("truncated new header at file offset {}: {} bytes", base,
                             bytes_.size() - base));
        const std::uint32_t nlibs = get<std::uint32_t>(base + kNewNlibsAt);
        const std::uint32_t len_strings = get<std::uint32_t>(base + kNewLenStringsAt);
        const std::uint8_t endian = get<std::uint8_t>(base + kNewFlagsAt);
        if (endian != 0 && (endian & kEndianMask) != kEndianCurrent)
            fail(fmt::format("wrong endianness (flags {:#x})", endian));

        const std::size_t entries_at = base + kNewHeaderSize;
        if (nlibs > (bytes_.size() - entries_at) / kNewEntrySize)
            fail(fmt::format("new table: {} entries do not fit in {} bytes", nlibs, bytes_.size()));
        const std::size_t strings_at = entries_at + std::size_t{nlibs} * kNewEntrySize;
        if (!fits(bytes_.size(), strings_at, len_strings))
            fail(
                fmt::format("string table of {} bytes at file offset {} runs past the end "
                            "({} bytes)",
                            len_strings, strings_at, bytes_.size()));
        // String offsets count from the header; the strings follow the entries.
        const std::string_view strings = bytes_.substr(strings_at, len_strings);

        Cache cache;
        cache.layout = layout;
        const Extensions ext = extensions(get<std::uint32_t>(base + kNewExtensionAt));
        if (ext.generator) cache.generator = std::string(*ext.generator);

        cache.entries.reserve(nlibs);
        for (std::size_t i = 0; i < nlibs; ++i) {
            const std::size_t at = entries_at + i * kNewEntrySize;
            Entry& e = cache.entries.emplace_back();
            e.flags = get<std::int32_t>(at);
            e.soname = string_at(base, get<std::uint32_t>(at + 4), strings, strings_at, i, "key");
            e.path = string_at(base, get<std::uint32_t>(at + 8), strings, strings_at, i, "value");
            e.osversion = get<std::uint32_t>(at + 12);
            e.hwcap = get<std::uint64_t>(at + 16);
            hwcaps_name(ext, e, i);
        }
        return cache;
    }

    // The extension directory at file offset `at` (0: none), checked as glibc's
    // cache_extension_load does: any section outside the file is an error, an
    // unusable glibc-hwcaps section is ignored.
    Extensions extensions(std::uint32_t at) const {
        Extensions ext;
        if (at == 0) return ext;
        if (at % 4 != 0) fail(fmt::format("extension directory offset {} is misaligned", at));
        if (!fits(bytes_.size(), at, kExtensionHeaderSize))
            fail(fmt::format("extension directory at file offset {} runs past the end", at));
        if (get<std::uint32_t>(at) != kExtensionMagic)
            fail(fmt::format("extension directory at file offset {} has a bad magic", at));
        const std::uint32_t count = get<std::uint32_t>(at + 4);
        const std::size_t sections_at = at + kExtensionHeaderSize;
        if (count > (bytes_.size() - sections_at) / kSectionSize)
            fail(fmt::format("extension directory: {} sections do not fit in the file", count));

        std::optional<std::size_t> hwcaps_size;
        for (std::size_t i = 0; i < count; ++i) {
            const std::size_t s = sections_at + i * kSectionSize;
            const std::uint32_t tag = get<std::uint32_t>(s);
            const std::uint32_t off = get<std::uint32_t>(s + 8);
            const std::uint32_t size = get<std::uint32_t>(s + 12);
            if (!fits(bytes_.size(), off, size))
                fail(
                    fmt::format("extension section {} ({} bytes at file offset {}) runs past "
                                "the end",
                                i, size, off));
            if (tag == kTagGenerator) {
                ext.generator = bytes_.substr(off, size);
            } else if (tag == kTagGlibcHwcaps) {
                ext.hwcaps_at = off;
                hwcaps_size = size;
            }
        }
        if (hwcaps_size && *hwcaps_size != 0 && ext.hwcaps_at % 4 == 0 && *hwcaps_size % 4 == 0)
            ext.hwcaps_count = *hwcaps_size / 4;
        return ext;
    }

    // Resolves the glibc-hwcaps subdirectory name of `e`, as ldconfig -p and the
    // loader do: the array holds file offsets; one past the file means no name.
    void hwcaps_name(const Extensions& ext, Entry& e, std::size_t index) const {
        if (!is_hwcaps_index(e.hwcap)) return;
        const auto slot = static_cast<std::uint32_t>(e.hwcap);
        if (slot >= ext.hwcaps_count) return;
        const std::uint32_t name_at = get<std::uint32_t>(ext.hwcaps_at + std::size_t{slot} * 4);
        if (name_at >= bytes_.size()) return;
        const auto nul = bytes_.find('\0', name_at);
        if (nul == std::string_view::npos)
            fail(fmt::format("entry {}: glibc-hwcaps name at {} is not NUL-terminated", index,
                             name_at));
        e.has_hwcaps_subdir = true;
        e.hwcaps_subdir = std::string(bytes_.substr(name_at, nul - name_at));
    }

    std::string_view bytes_;
    const std::string& what_;
};

// The FLAG_*_LIB* values, by flags >> 8: what glibc 2.36's ldconfig -p prints
// and the architecture they stand for.
struct Required {
    const char* text;
    Arch arch;
};
constexpr Required kRequired[] = {
    {"", Arch::I386},                 // none: 32-bit x86 (and other 32-bit ABIs)
    {",64bit", Arch::Other},          // FLAG_SPARC_LIB64
    {",IA-64", Arch::Other},          // FLAG_IA64_LIB64
    {",x86-64", Arch::X86_64},        // FLAG_X8664_LIB64
    {",64bit", Arch::Other},          // FLAG_S390_LIB64
    {",64bit", Arch::Ppc64le},        // FLAG_POWERPC_LIB64
    {",N32", Arch::Other},            // FLAG_MIPS64_LIBN32
    {",64bit", Arch::Other},          // FLAG_MIPS64_LIBN64
    {",x32", Arch::X32},              // FLAG_X8664_LIBX32
    {",hard-float", Arch::Armhf},     // FLAG_ARM_LIBHF
    {",AArch64", Arch::Aarch64},      // FLAG_AARCH64_LIB64
    {",soft-float", Arch::Other},     // FLAG_ARM_LIBSF
    {",nan2008", Arch::Other},        // FLAG_MIPS_LIB32_NAN2008
    {",N32,nan2008", Arch::Other},    // FLAG_MIPS64_LIBN32_NAN2008
    {",64bit,nan2008", Arch::Other},  // FLAG_MIPS64_LIBN64_NAN2008
    {",soft-float", Arch::Other},     // FLAG_RISCV_FLOAT_ABI_SOFT
    {",double-float", Arch::Other},   // FLAG_RISCV_FLOAT_ABI_DOUBLE
    {nullptr, Arch::Other},           // FLAG_LARCH_FLOAT_ABI_SOFT (glibc 2.37)
    {nullptr, Arch::Other},           // FLAG_LARCH_FLOAT_ABI_DOUBLE (glibc 2.37)
};

const Required* required_of(std::int32_t flags) noexcept {
    const auto i = static_cast<std::size_t>((flags & kRequiredMask) >> 8);
    return i < std::size(kRequired) ? &kRequired[i] : nullptr;
}

std::string describe(std::int32_t flags, std::uint64_t hwcap, const std::string_view* subdir) {
    static constexpr const char* kTypes[] = {"libc4", "ELF", "libc5", "libc6"};
    const std::int32_t type = flags & kTypeMask;
    std::string out = type < 4 ? kTypes[type] : "unknown";
    const Required* required = required_of(flags);
    if (required && required->text)
        out += required->text;
    else
        out += fmt::format(",{}", flags & kRequiredMask);
    if (subdir)
        out += fmt::format(", hwcap: \"{}\"", *subdir);
    else if (hwcap != 0)
        out += fmt::format(", hwcap: {:#018x}", hwcap);
    return out;
}

}  // namespace

Cache parse(std::string_view bytes, const std::string& what) {
    return Parser(bytes, what).run();
}

Cache load(const std::filesystem::path& path) {
    const std::string bytes = util::read_file(path, kMaxCacheSize);
    return parse(bytes, path.string());
}

Arch arch_of(std::int32_t flags) noexcept {
    const std::int32_t type = flags & kTypeMask;  // ELF, libc5 or libc6
    if ((flags & ~(kTypeMask | kRequiredMask)) != 0 || type < 1 || type > 3) return Arch::Unknown;
    const Required* required = required_of(flags);
    return required ? required->arch : Arch::Unknown;
}

std::string describe_flags(std::int32_t flags, std::uint64_t hwcap,
                           std::string_view hwcaps_subdir) {
    return describe(flags, hwcap, hwcaps_subdir.empty() ? nullptr : &hwcaps_subdir);
}

std::string describe_flags(const Entry& entry) {
    const std::string_view subdir = entry.hwcaps_subdir;
    return describe(entry.flags, entry.hwcap, entry.has_hwcaps_subdir ? &subdir : nullptr);
}

std::string format_like_ldconfig(const Cache& cache, std::string_view path) {
    std::string out = fmt::format("{} libs found in cache `{}'\n", cache.entries.size(), path);
    for (const Entry& e : cache.entries)
        out += fmt::format("\t{} ({}) => {}\n", e.soname, describe_flags(e), e.path);
    if (cache.generator) out += fmt::format("Cache generated by: {}\n", *cache.generator);
    return out;
}

const Entry* lookup(const Cache& cache, std::string_view soname, Arch arch) {
    const Entry* first = nullptr;
    for (const Entry& e : cache.entries) {
        if (e.soname != soname || arch_of(e.flags) != arch) continue;
        if (e.hwcap == 0) return &e;
        if (!first) first = &e;
    }
    return first;
}

}  // namespace gpubind::ldcache
