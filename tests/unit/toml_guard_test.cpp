// toml_guard.hpp against the installed toml++: every code point that reaches
// one of toml++'s "unreachable" branches must be refused before parsing.
//
// This file includes toml++'s classifier with TOML_UNREACHABLE recording the
// hit instead of invoking undefined behaviour, so it is its own executable:
// linked with the library, the two spellings of the inline function would
// break the one-definition rule.
#include <cstdint>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "gpubind/util/toml_guard.hpp"

namespace {
bool g_reached_unreachable = false;
}

#include <toml++/impl/preprocessor.h>
// Plain functions: as [[gnu::const]] the recording store could be optimised away.
#undef TOML_CONST_GETTER
#define TOML_CONST_GETTER
#undef TOML_CONST_INLINE_GETTER
#define TOML_CONST_INLINE_GETTER
#undef TOML_UNREACHABLE
#define TOML_UNREACHABLE          \
    g_reached_unreachable = true; \
    return false
#include <toml++/impl/forward_declarations.h>
#include <toml++/impl/unicode.h>

namespace {

bool reaches_unreachable(char32_t c) {
    g_reached_unreachable = false;
    (void)toml::impl::is_whitespace(c);
    (void)toml::impl::is_value_terminator(c);
    (void)toml::impl::is_bare_key_character(c);
    return g_reached_unreachable;
}

std::string utf8(char32_t c) {
    std::string s;
    if (c < 0x80) {
        s += static_cast<char>(c);
    } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += static_cast<char>(0xE0 | (c >> 12));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (c >> 18));
        s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    }
    return s;
}

TEST(TomlGuard, RefusesEveryCodePointThatReachesAnUnreachableBranch) {
    std::size_t reached = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
        if (!reaches_unreachable(c)) continue;
        ++reached;
        ASSERT_TRUE(gpubind::util::detail::toml_unsafe_code_point(c)) << std::hex << "U+" << +c;
        ASSERT_TRUE(gpubind::util::detail::toml_unsafe_text("a = 1" + utf8(c)).has_value())
            << std::hex << "U+" << +c;
    }
    // Debian 12's toml++ 3.3 has the bug (a fixed toml++ would reach none).
    std::printf("%zu code points reach an unreachable branch\n", reached);
}

TEST(TomlGuard, AcceptsAsciiAndTheCharactersTomlPlusPlusHandles) {
    using gpubind::util::detail::toml_unsafe_text;
    for (char32_t c = 0; c < 0x80; ++c)
        EXPECT_FALSE(gpubind::util::detail::toml_unsafe_text(utf8(c))) << +c;
    EXPECT_FALSE(
        gpubind::util::detail::toml_unsafe_text("path = \"/srv/\u00A0\u3000\u4E2D\U0001F600\"\n"));
    EXPECT_FALSE(gpubind::util::detail::toml_unsafe_text("path = \"/srv/caf\\u00E9\"\n"));
}

TEST(TomlGuard, NamesTheLineAndTheCharacter) {
    using gpubind::util::detail::toml_unsafe_text;
    EXPECT_EQ(
        gpubind::util::detail::toml_unsafe_text("# ok\n[log]\nfile = \"/var/log/caf\u00E9\"\n"),
        "line 3: character U+00E9 is not supported here; inside a string write it as "
        "\\u00E9");
    // An overlong spelling of U+00A1 is caught too.
    EXPECT_EQ(gpubind::util::detail::toml_unsafe_text("a = 1\xE0\x82\xA1"),
              "line 1: character U+00A1 is not supported here; inside a string write it as "
              "\\u00A1");
    // A truncated sequence at the end is left for toml++ to report.
    EXPECT_FALSE(gpubind::util::detail::toml_unsafe_text("a = 1\xE0\x82"));
}

}  // namespace
