#include "gpubind/util/version.hpp"

#include <algorithm>

namespace gpubind::util {

namespace {

struct Parts {
    std::string_view release;  // digits and dots
    std::string_view suffix;   // the rest
};

Parts parts_of(std::string_view v) {
    if (v.starts_with('v')) v.remove_prefix(1);
    auto end = v.find_first_not_of("0123456789.");
    if (end == std::string_view::npos) end = v.size();
    return {v.substr(0, end), v.substr(end)};
}

// The component before the next dot, taken off `release` with the dot; "" when none is left.
std::string_view take_component(std::string_view& release) {
    const auto dot = release.find('.');
    const std::string_view part = release.substr(0, dot);
    release = dot == std::string_view::npos ? std::string_view() : release.substr(dot + 1);
    return part;
}

// Two runs of digits as numbers, however long: no overflow, leading zeros ignored.
int compare_numbers(std::string_view x, std::string_view y) {
    x.remove_prefix(std::min(x.find_first_not_of('0'), x.size()));
    y.remove_prefix(std::min(y.find_first_not_of('0'), y.size()));
    if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
    const int c = x.compare(y);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}

}  // namespace

int compare_versions(std::string_view a, std::string_view b) noexcept {
    const Parts pa = parts_of(a), pb = parts_of(b);
    std::string_view ra = pa.release, rb = pb.release;
    while (!ra.empty() || !rb.empty())
        if (const int c = compare_numbers(take_component(ra), take_component(rb))) return c;
    if (pa.suffix == pb.suffix) return 0;
    if (pa.suffix.empty()) return 1;
    if (pb.suffix.empty()) return -1;
    return pa.suffix < pb.suffix ? -1 : 1;
}

}  // namespace gpubind::util
