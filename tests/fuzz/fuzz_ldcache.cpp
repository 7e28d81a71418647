// libFuzzer target: whatever the bytes, parse() returns a cache or throws
// Error(EINVAL); nothing it returns can make the other functions misbehave.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpubind/error.hpp"
#include "gpubind/ldcache.hpp"

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
    } catch (const Error& e) {
        if (e.code().value() != EINVAL) std::abort();
    }
    return 0;
}
