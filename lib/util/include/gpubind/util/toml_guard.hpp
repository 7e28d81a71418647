// The characters toml++ 3.3 (Debian 12) cannot look at safely.
//
// Its generated is_non_ascii_horizontal_whitespace() marks some lookup-table
// branches "unreachable" (__builtin_unreachable) that are reachable: any code
// point below lists, met wherever the parser asks "is this whitespace?" —
// after a value, between tokens, and inside multi-line strings after a
// line-ending backslash. What the compiler then does is undefined, so such a
// character is refused everywhere before toml++ sees the text. Strings can
// still hold it as a \u escape. tests/unit/toml_guard_test.cpp checks every
// code point against the installed toml++.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace gpubind::util::detail {

constexpr bool toml_unsafe_code_point(char32_t c) noexcept {
    return (c >= 0xA1 && c <= 0x499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
           (c >= 0xFB26 && c <= 0xFEFE);
}

// "line N: ..." for the first unsafe character in text, if any. Bytes are
// decoded by their UTF-8 lead-byte pattern alone, without rejecting overlong
// or surrogate forms, so no spelling of an unsafe code point slips through;
// whatever is not UTF-8 is left for toml++ to report.
inline std::optional<std::string> toml_unsafe_text(std::string_view text) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto lead = static_cast<unsigned char>(text[i]);
        if (lead == '\n') ++line;
        if (lead < 0xC0) continue;
        const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (i + length > text.size()) break;
        char32_t c = lead & (0x7F >> length);
        for (std::size_t k = 1; k < length; ++k)
            c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        if (toml_unsafe_code_point(c))
            return fmt::format(
                "line {}: character U+{:04X} is not supported here; inside a "
                "string write it as \\u{:04X}",
                line, static_cast<unsigned>(c), static_cast<unsigned>(c));
    }
    return std::nullopt;
}

}  // namespace gpubind::util::detail
