// toml++, included the one way gpubind uses it: declarations only
// (TOML_HEADER_ONLY 0); its implementation is compiled once, in toml_impl.cpp.
//
// toml++ 3.3 (Debian 12) marks impossible branches with __builtin_unreachable(),
// and some are reachable (found by tests/fuzz/fuzz_config): toml_guard.hpp
// refuses the characters that reach them before toml++ sees the text; should
// another such branch be reached, the process aborts instead of running on
// with undefined behaviour.
#pragma once

#include <cstdlib>

#ifndef TOML_HEADER_ONLY
#define TOML_HEADER_ONLY 0
#endif
#include <toml++/impl/preprocessor.h>

#undef TOML_UNREACHABLE
#define TOML_UNREACHABLE std::abort()

#include <toml++/toml.h>

#include "gpubind/util/toml_guard.hpp"
