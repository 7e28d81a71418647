#include "gpubind/util/id_map.hpp"

#include <charconv>

#include "gpubind/util/error.hpp"

namespace gpubind::util {

std::vector<IdRange> id_ranges(std::string_view id_map, const std::string& what) {
    constexpr std::string_view kBlank = " \t";
    std::vector<IdRange> out;
    std::size_t line_no = 0;
    while (!id_map.empty()) {
        const std::size_t nl = id_map.find('\n');
        std::string_view line = id_map.substr(0, nl);
        id_map.remove_prefix(nl == std::string_view::npos ? id_map.size() : nl + 1);
        ++line_no;
        auto bad = [&](const char* detail) {
            throw_invalid("read id map", what, "line " + std::to_string(line_no) + ": " + detail);
        };
        std::vector<std::uint64_t> v;
        while (true) {
            const std::size_t start = line.find_first_not_of(kBlank);
            if (start == std::string_view::npos) break;
            line.remove_prefix(start);
            const std::string_view word = line.substr(0, line.find_first_of(kBlank));
            std::uint64_t n = 0;
            const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), n);
            if (ec != std::errc() || ptr != word.data() + word.size() || n > 0xffffffffull)
                bad("not a 32-bit unsigned number");
            v.push_back(n);
            line.remove_prefix(word.size());
        }
        if (v.empty()) continue;
        if (v.size() != 3) bad("not three numbers (inside, outside, count)");
        out.push_back({v[0], v[1], v[2]});
    }
    return out;
}

bool is_initial_id_map(std::string_view id_map, const std::string& what) {
    const std::vector<IdRange> ranges = id_ranges(id_map, what);
    return ranges.size() == 1 && ranges[0].inside == 0 && ranges[0].outside == 0 &&
           ranges[0].count == 0xffffffffull;
}

}  // namespace gpubind::util
