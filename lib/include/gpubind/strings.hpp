// Small string helpers shared by the parsers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind {

std::string_view trim(std::string_view s) noexcept;
// Splits on `sep`, keeping empty fields.
std::vector<std::string_view> split(std::string_view s, char sep);
// Decimal unsigned parse of the whole string; nullopt on anything else or overflow.
std::optional<unsigned long> parse_unsigned(std::string_view s) noexcept;
std::string to_lower(std::string_view s);
// `s` as one line of printable text: a newline as "\\n", every other control
// character (and DEL) as "\\xNN". For text that came from an image or a spec.
std::string escape_control(std::string_view s);

}  // namespace gpubind
