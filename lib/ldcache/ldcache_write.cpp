// Writing glibc's ld.so.cache in the new layout: the order and the layout are
// glibc's (elf/cache.c: compare, save_cache, write_extensions; elf/dl-cache.c:
// _dl_cache_libcmp, search_cache), described in ldcache.hpp.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/error.hpp"
#include "ldcache_format.hpp"

namespace gpubind::ldcache {

namespace {

using namespace format;

constexpr std::string_view kHwcapsDir = "/glibc-hwcaps/";

constexpr bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

// glibc compares with int arithmetic that wraps for long runs of digits; a
// run of at most 9 digits cannot, and then libcmp is a strict weak order
// (sorting stays O(n log n) whatever an image's cache holds).
bool orderable(std::string_view s) noexcept {
    std::size_t run = 0;
    for (char c : s) {
        run = is_digit(c) ? run + 1 : 0;
        if (run > 9) return false;
    }
    return true;
}

// "<dir>/glibc-hwcaps/<name>/<file>": <name>, or empty.
std::string_view hwcaps_name_of(std::string_view path) noexcept {
    const std::size_t at = path.rfind(kHwcapsDir);
    if (at == std::string_view::npos) return {};
    const std::string_view rest = path.substr(at + kHwcapsDir.size());
    const std::size_t slash = rest.find('/');
    if (slash == 0 || slash == std::string_view::npos ||
        rest.find('/', slash + 1) != std::string_view::npos || slash + 1 == rest.size())
        return {};
    return rest.substr(0, slash);
}

// The directory ldconfig listed a library under: the file's, or for a file in
// a glibc-hwcaps subdirectory the one holding that subdirectory.
std::string_view directory_of(std::string_view path) noexcept {
    const std::size_t hw = path.rfind(kHwcapsDir);
    if (hw != std::string_view::npos && !hwcaps_name_of(path).empty()) return path.substr(0, hw);
    const std::size_t slash = path.rfind('/');
    if (slash == std::string_view::npos) return {};
    return path.substr(0, slash == 0 ? 1 : slash);
}

// The flags ldconfig gives a library of `arch`; nullopt for one the writer
// does not describe.
std::optional<std::int32_t> flags_of(Arch arch) noexcept {
    switch (arch) {
        case Arch::X86_64:
            return kFlagElfLibc6 | kFlagX8664Lib64;
        case Arch::I386:
            return kFlagElfLibc6;
        case Arch::Aarch64:
            return kFlagElfLibc6 | kFlagAarch64Lib64;
        default:
            return std::nullopt;
    }
}

struct Item {
    Entry entry;
    std::size_t rank;  // index of its directory in the refresh's order, or past the end
};

template <class T>
void put(std::string& out, std::size_t at, T v) {
    std::memcpy(out.data() + at, &v, sizeof v);
}

[[noreturn]] void refuse(const std::string& detail) {
    util::throw_invalid("write ld.so.cache", "new layout", detail);
}

// glibc-hwcaps subdirectories in use, numbered in strcmp order; `text`
// grows by the size of every string the table will hold, at most.
std::map<std::string, std::uint32_t> number_hwcaps(const Cache& cache, std::size_t& text) {
    std::map<std::string, std::uint32_t> hwcaps;
    for (const Entry& e : cache.entries) {
        if (e.has_hwcaps_subdir) hwcaps.emplace(e.hwcaps_subdir, 0);
        text += e.soname.size() + e.path.size() + 2;
    }
    std::uint32_t i = 0;
    for (auto& [name, index] : hwcaps) {
        index = i++;
        text += name.size() + 1;
    }
    return hwcaps;
}

// `s` added at the end of the string table (entry `index`'s): its offset.
std::uint32_t add_string(std::string& out, std::string_view s, std::size_t index) {
    if (s.find('\0') != std::string_view::npos)
        refuse(fmt::format("entry {}: a string holds a NUL byte", index));
    if (out.size() + s.size() + 1 > std::numeric_limits<std::uint32_t>::max())
        refuse("the string table does not fit in 4 GiB");
    const auto at = static_cast<std::uint32_t>(out.size());
    out.append(s);
    out.push_back('\0');
    return at;
}

// The header and the entries, their strings added to the table. An entry's
// soname equal to the one before it (equal sonames are adjacent in glibc's
// order) is shared; every other string is written where it is first used.
void write_entries(std::string& out, const Cache& cache,
                   const std::map<std::string, std::uint32_t>& hwcaps) {
    const std::size_t n = cache.entries.size();
    std::memcpy(out.data(), kNewMagic.data(), kNewMagic.size());
    put(out, kNewNlibsAt, static_cast<std::uint32_t>(n));
    put(out, kNewFlagsAt, kEndianCurrent);
    std::uint32_t soname_at = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const Entry& e = cache.entries[i];
        const std::size_t at = kNewHeaderSize + i * kNewEntrySize;
        std::uint64_t hwcap = e.hwcap;
        if (e.has_hwcaps_subdir) {
            const std::uint64_t isa =
                is_hwcaps_index(e.hwcap) ? (e.hwcap >> 32) & kIsaLevelMask : 0;
            hwcap = kHwcapExtension | (isa << 32) | hwcaps.at(e.hwcaps_subdir);
        } else if (is_hwcaps_index(hwcap)) {
            refuse(fmt::format("entry {} ({}): a glibc-hwcaps index without a name", i, e.path));
        }
        if (i == 0 || e.soname != cache.entries[i - 1].soname)
            soname_at = add_string(out, e.soname, i);
        put(out, at, e.flags);
        put(out, at + 4, soname_at);
        put(out, at + 8, add_string(out, e.path, i));
        put(out, at + 12, e.osversion);
        put(out, at + 16, hwcap);
    }
}

// Extension directory after the strings, aligned to 4: its header and
// sections, the glibc-hwcaps array (`names`: their offsets in the string
// table), the generator text.
void write_extensions(std::string& out, const Cache& cache,
                      const std::vector<std::uint32_t>& names) {
    out.resize((out.size() + 3) & ~std::size_t{3}, '\0');
    const std::size_t ext_at = out.size();
    const std::uint32_t count = (cache.generator ? 1u : 0u) + (names.empty() ? 0u : 1u);
    const std::size_t data_at = ext_at + kExtensionHeaderSize + kSectionSize * count;
    const std::size_t gen_at = data_at + 4 * names.size();
    const std::size_t end = gen_at + (cache.generator ? cache.generator->size() : 0);
    if (end > std::numeric_limits<std::uint32_t>::max()) refuse("the file does not fit in 4 GiB");
    out.resize(end, '\0');
    put(out, kNewExtensionAt, static_cast<std::uint32_t>(ext_at));
    put(out, ext_at, kExtensionMagic);
    put(out, ext_at + 4, count);
    std::size_t section = ext_at + kExtensionHeaderSize;
    auto put_section = [&](std::uint32_t tag, std::size_t offset, std::size_t size) {
        put(out, section, tag);
        put(out, section + 4, std::uint32_t{0});
        put(out, section + 8, static_cast<std::uint32_t>(offset));
        put(out, section + 12, static_cast<std::uint32_t>(size));
        section += 16;
    };
    if (cache.generator) put_section(kTagGenerator, gen_at, cache.generator->size());
    if (!names.empty()) put_section(kTagGlibcHwcaps, data_at, 4 * names.size());
    for (std::size_t i = 0; i < names.size(); ++i) put(out, data_at + 4 * i, names[i]);
    if (cache.generator)
        std::memcpy(out.data() + gen_at, cache.generator->data(), cache.generator->size());
}

}  // namespace

int libcmp(std::string_view a, std::string_view b) noexcept {
    // glibc walks NUL-terminated strings; past the end of a view reads as NUL.
    std::size_t i = 0, j = 0;
    auto at = [](std::string_view s, std::size_t k) { return k < s.size() ? s[k] : '\0'; };
    while (at(a, i) != '\0') {
        if (is_digit(at(a, i))) {
            if (!is_digit(at(b, j))) return 1;
            unsigned v1 = static_cast<unsigned>(at(a, i++) - '0');
            unsigned v2 = static_cast<unsigned>(at(b, j++) - '0');
            while (is_digit(at(a, i))) v1 = v1 * 10 + static_cast<unsigned>(at(a, i++) - '0');
            while (is_digit(at(b, j))) v2 = v2 * 10 + static_cast<unsigned>(at(b, j++) - '0');
            if (v1 != v2) return static_cast<int>(v1 - v2);
        } else if (is_digit(at(b, j))) {
            return -1;
        } else if (at(a, i) != at(b, j)) {
            return at(a, i) - at(b, j);
        } else {
            ++i;
            ++j;
        }
    }
    return at(a, i) - at(b, j);
}

int compare_entries(const Entry& e1, const Entry& e2) noexcept {
    // Swapped, as glibc does: the file is in descending order of the keys.
    const int res = libcmp(e2.soname, e1.soname);
    if (res != 0) return res;
    if (e1.flags != e2.flags) return e1.flags < e2.flags ? 1 : -1;
    if (e1.has_hwcaps_subdir != e2.has_hwcaps_subdir) return e1.has_hwcaps_subdir ? -1 : 1;
    if (e1.has_hwcaps_subdir) {
        const int names = std::strcmp(e1.hwcaps_subdir.c_str(), e2.hwcaps_subdir.c_str());
        if (names != 0) return names;
    }
    // Legacy hwcap bits: the most specific first. A glibc-hwcaps entry has none.
    const std::uint64_t h1 = e1.has_hwcaps_subdir ? 0 : e1.hwcap;
    const std::uint64_t h2 = e2.has_hwcaps_subdir ? 0 : e2.hwcap;
    const int bits1 = std::popcount(h1), bits2 = std::popcount(h2);
    if (bits1 != bits2) return bits2 > bits1 ? 1 : -1;
    if (h1 != h2) return h2 > h1 ? 1 : -1;
    // ldconfig before glibc 2.33 also sorted by the (unused) OS version.
    if (e1.osversion != e2.osversion) return e2.osversion > e1.osversion ? 1 : -1;
    return 0;
}

Cache merge(std::optional<Cache> image, const std::vector<Library>& added,
            const std::vector<std::string>& dirs) {
    auto rank_of = [&](std::string_view path) {
        const std::string_view dir = directory_of(path);
        const auto it = std::find(dirs.begin(), dirs.end(), dir);
        return static_cast<std::size_t>(it - dirs.begin());
    };
    // glibc's order, then the refresh's directory order, then input order.
    auto before = [](const Entry& a, std::size_t rank_a, const Entry& b, std::size_t rank_b) {
        const int c = compare_entries(a, b);
        return c < 0 || (c == 0 && rank_a < rank_b);
    };
    auto item_before = [&](const Item& a, const Item& b) {
        return before(a.entry, a.rank, b.entry, b.rank);
    };

    std::vector<Item> items;  // the added libraries, sorted
    items.reserve(added.size());
    std::set<std::pair<std::string_view, Arch>> replaced;  // views of `added`
    for (const Library& lib : added) {
        const std::optional<std::int32_t> flags = flags_of(lib.arch);
        if (!flags)
            util::throw_invalid("write ld.so.cache", lib.path,
                                "only x86-64, 32-bit x86 and AArch64 libraries can be added");
        if (!orderable(lib.soname))
            util::throw_invalid(
                "write ld.so.cache", lib.path,
                "a soname with more than 9 digits in a row cannot be ordered as glibc does");
        Entry e;
        e.flags = *flags;
        e.soname = lib.soname;
        e.path = lib.path;
        replaced.emplace(lib.soname, lib.arch);
        items.push_back({std::move(e), rank_of(lib.path)});
    }
    std::stable_sort(items.begin(), items.end(), item_before);

    // The image's entries kept, compacted in place, with their ranks.
    std::vector<Entry> kept;
    std::vector<std::size_t> ranks;
    if (image) {
        kept = std::move(image->entries);
        ranks.reserve(kept.size());
        std::size_t n = 0;
        for (Entry& e : kept) {
            if (replaced.count({e.soname, arch_of(e.flags)})) continue;
            // glibc's comparison of such keys overflows: no order holds them.
            if (!orderable(e.soname)) continue;
            const std::string_view from_path = hwcaps_name_of(e.path);
            const bool index = is_hwcaps_index(e.hwcap);
            if (index && image->layout == Layout::New && e.has_hwcaps_subdir) {
                // As the file names it.
            } else if (!from_path.empty() && (index || image->layout != Layout::New)) {
                // Compat: the name was stored at the wrong base; old: the table
                // has no hwcap field. ldconfig would rebuild it from the directory.
                e.has_hwcaps_subdir = true;
                e.hwcaps_subdir = std::string(from_path);
                if (!index) e.hwcap = 0;
            } else if (index) {
                continue;  // a glibc-hwcaps index whose name is lost
            } else {
                e.has_hwcaps_subdir = false;
                e.hwcaps_subdir.clear();
            }
            ranks.push_back(rank_of(e.path));
            if (&kept[n] != &e) kept[n] = std::move(e);
            ++n;
        }
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(n), kept.end());
        // Usually in that order already (ldconfig wrote it); else sorted, stably.
        bool sorted = true;
        for (std::size_t i = 1; i < n && sorted; ++i)
            sorted = !before(kept[i], ranks[i], kept[i - 1], ranks[i - 1]);
        if (!sorted) {
            std::vector<Item> rest;
            rest.reserve(n);
            for (std::size_t i = 0; i < n; ++i) rest.push_back({std::move(kept[i]), ranks[i]});
            std::stable_sort(rest.begin(), rest.end(), item_before);
            for (std::size_t i = 0; i < n; ++i) {
                kept[i] = std::move(rest[i].entry);
                ranks[i] = rest[i].rank;
            }
        }
    }

    // Both parts merged, an added library first among equals: what one
    // stable sort of the added libraries followed by the image's gives.
    Cache cache;
    cache.layout = Layout::New;
    cache.generator = "gpubind";
    cache.entries.reserve(items.size() + kept.size());
    std::size_t a = 0, i = 0;
    while (a < items.size() || i < kept.size()) {
        if (i == kept.size() ||
            (a < items.size() && !before(kept[i], ranks[i], items[a].entry, items[a].rank)))
            cache.entries.push_back(std::move(items[a++].entry));
        else
            cache.entries.push_back(std::move(kept[i++]));
    }
    return cache;
}

std::string serialize(const Cache& cache) {
    const std::size_t n = cache.entries.size();
    if (n > (std::numeric_limits<std::uint32_t>::max() - kNewHeaderSize) / kNewEntrySize)
        refuse(fmt::format("{} entries", n));
    const std::size_t strings_at = kNewHeaderSize + n * kNewEntrySize;
    std::size_t text = 0;  // the string table's size, at most
    const auto hwcaps = number_hwcaps(cache, text);

    // Header and entries, then the string table (offsets count from the
    // file's start), in one buffer sized once.
    std::string out;
    out.reserve(strings_at + text + 3 + kExtensionHeaderSize + 2 * kSectionSize +
                4 * hwcaps.size() + (cache.generator ? cache.generator->size() : 0));
    out.resize(strings_at, '\0');
    write_entries(out, cache, hwcaps);
    std::vector<std::uint32_t> names;
    for (const auto& [name, index] : hwcaps) names.push_back(add_string(out, name, n));
    put(out, kNewLenStringsAt, static_cast<std::uint32_t>(out.size() - strings_at));
    write_extensions(out, cache, names);
    return out;
}

}  // namespace gpubind::ldcache
