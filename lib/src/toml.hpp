// toml++, included the one way gpubind uses it.
//
// toml++ 3.3 (Debian 12) marks impossible branches with __builtin_unreachable(),
// and one is reachable: a non-ASCII character where whitespace may stand
// (found by tests/fuzz/fuzz_config). TOML allows non-ASCII only inside strings
// and comments, so check_toml_text() rejects it anywhere else before toml++
// sees the text; should another such branch be reached, the process aborts
// instead of running on with undefined behaviour.
#pragma once

#include <cstdlib>
#include <optional>
#include <string_view>

#include <toml++/impl/preprocessor.h>

#undef TOML_UNREACHABLE
#define TOML_UNREACHABLE std::abort()

#include <toml++/toml.h>

namespace gpubind::detail {

// The 1-based line of the first non-ASCII byte outside a string or a comment.
inline std::optional<std::size_t> non_ascii_outside_strings(std::string_view text) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\n') {
            ++line;
        } else if (c == '#') {
            while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (c == '"' || c == '\'') {
            const bool multi = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "'''");
            const std::string_view close = multi ? text.substr(i, 3) : text.substr(i, 1);
            i += close.size();
            while (i < text.size() && text.substr(i, close.size()) != close) {
                if (text[i] == '\n') {
                    if (!multi) break;  // toml++ reports the unterminated string
                    ++line;
                }
                if (c == '"' && text[i] == '\\') ++i;  // an escape: skip the next byte
                ++i;
            }
            i += close.size() - 1;
        } else if (static_cast<unsigned char>(c) >= 0x80) {
            return line;
        }
    }
    return std::nullopt;
}

}  // namespace gpubind::detail
