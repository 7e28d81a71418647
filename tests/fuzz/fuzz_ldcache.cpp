// libFuzzer target: whatever the bytes, parse() returns a cache or throws
// Error(EINVAL); nothing it returns can make the other functions misbehave.
// The writer too: parse -> merge -> serialize -> parse gives back the merged
// entries, in glibc's order, and writing them again gives the same bytes.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace gpubind;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    try {
        const ldcache::Cache cache = ldcache::parse(bytes, "fuzz");
        const std::string text = ldcache::format_like_ldconfig(cache, "fuzz");
        if (text.size() < cache.entries.size()) std::abort();
        // Every key finds an entry with that key (the first few: lookup is linear).
        for (std::size_t i = 0; i < cache.entries.size() && i < 16; ++i) {
            const ldcache::Entry& e = cache.entries[i];
            const ldcache::Entry* found =
                ldcache::lookup(cache, e.soname, ldcache::arch_of(e.flags));
            if (found == nullptr || found->soname != e.soname) std::abort();
        }
        // The writer keeps what it can describe and order, and reads back as written.
        const ldcache::Cache merged = ldcache::merge(cache, {}, {});
        if (merged.entries.size() > cache.entries.size()) std::abort();
        const std::string written = ldcache::serialize(merged);
        const ldcache::Cache back = ldcache::parse(written, "written");
        if (back.layout != ldcache::Layout::New || back.generator != merged.generator ||
            back.entries.size() != merged.entries.size())
            std::abort();
        for (std::size_t i = 0; i < back.entries.size(); ++i) {
            const ldcache::Entry& a = back.entries[i];
            const ldcache::Entry& b = merged.entries[i];
            if (a.soname != b.soname || a.path != b.path || a.flags != b.flags ||
                a.osversion != b.osversion || a.has_hwcaps_subdir != b.has_hwcaps_subdir ||
                a.hwcaps_subdir != b.hwcaps_subdir)
                std::abort();
            // A glibc-hwcaps entry keeps its ISA level (an old table's had none);
            // any other entry its hwcap bits.
            constexpr std::uint64_t kIsa = 0x3ffULL << 32;
            if (a.has_hwcaps_subdir ? (a.hwcap & kIsa) != (b.hwcap & kIsa) : a.hwcap != b.hwcap)
                std::abort();
            if (i > 0 && ldcache::compare_entries(back.entries[i - 1], a) > 0) std::abort();
        }
        if (ldcache::serialize(ldcache::merge(back, {}, {})) != written) std::abort();
    } catch (const util::Error& e) {
        if (e.code().value() != EINVAL) std::abort();
    }
    return 0;
}
