// Small string helpers shared by the parsers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind::util {

std::string_view trim(std::string_view s) noexcept;
// Splits on `sep`, keeping empty fields.
std::vector<std::string_view> split(std::string_view s, char sep);
// Decimal unsigned parse of the whole string; nullopt on anything else or overflow.
std::optional<unsigned long> parse_unsigned(std::string_view s) noexcept;
std::string to_lower(std::string_view s);
// `s` as one line of printable text: a newline as "\\n", every other control
// character (and DEL) as "\\xNN". For text that came from an image or a spec.
std::string escape_control(std::string_view s);
// Whether JSON text nests arrays and objects no deeper than `max_depth`
// (brackets inside strings not counted; the text need not be valid). A
// document's copy, dump and comparison recurse once per level: a parser asks
// this first, so a deep document is refused instead of overflowing the stack.
bool json_depth_within(std::string_view text, std::size_t max_depth) noexcept;

// Paths as plain text, for the node's and the plan's (a std::filesystem::path
// splits itself into components, allocating, at every construction: the
// start path builds hundreds). `dir` + "/" + `name`, one slash between.
std::string join_path(std::string_view dir, std::string_view name);
// What follows the last slash ("libcuda.so.1" of "/usr/lib/libcuda.so.1").
std::string_view base_name(std::string_view path) noexcept;
// What precedes the last slash ("/usr/lib"; "/" for "/x"; "" without a slash).
std::string_view dir_name(std::string_view path) noexcept;
// `path` lexically normal, as std::filesystem::path::lexically_normal() makes
// it, without a trailing slash ("/a/b" of "/a//./c/../b/"; "/" of "/..";
// "." of "a/.."): for comparing paths an image or a spec names.
std::string normal_path(std::string_view path);

}  // namespace gpubind::util
