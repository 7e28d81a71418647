// /proc/<pid>/uid_map and gid_map texts: "inside outside count" lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind::util {

struct IdRange {
    std::uint64_t inside = 0;
    std::uint64_t outside = 0;
    std::uint64_t count = 0;
};

// The ranges of `id_map` in order (an empty map has none). A line that is
// not three 32-bit unsigned numbers is an Error(EINVAL, "read id map",
// `what`, "line N: ...").
std::vector<IdRange> id_ranges(std::string_view id_map, const std::string& what);

// Whether `id_map` is the initial user namespace's: every id to itself, one
// range "0 0 4294967295".
bool is_initial_id_map(std::string_view id_map, const std::string& what);

}  // namespace gpubind::util
