// YAML for CDI specs: writing a JSON document as block-style YAML, and
// reading YAML (libyaml's parser) into JSON. Only what CDI specs use:
// mappings with string keys, sequences, scalars.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace gpubind::cdi::yaml {

// Block-style YAML of `doc`: mapping keys plain when they are identifiers,
// strings always double-quoted (JSON's escapes, which YAML shares), numbers,
// booleans and null plain. Reading it back gives `doc`.
std::string dump(const nlohmann::json& doc);

// Limits of what parse() accepts.
inline constexpr unsigned kMaxDepth = 32;
inline constexpr std::size_t kMaxNodes = 100000;

// One YAML document into JSON. Plain scalars resolve as YAML 1.1 does for
// what CDI needs: null (~, null, empty), booleans (true/false), integers
// (decimal, 0x hex, leading-0 octal), floats; quoted scalars are strings.
// Anchors, aliases, tags, merge keys, more than one document, non-string keys,
// duplicate keys, nesting beyond kMaxDepth or more than kMaxNodes nodes throw
// Error(EINVAL, "parse YAML", what, "line N: why").
nlohmann::json parse(std::string_view text, const std::string& what);

}  // namespace gpubind::cdi::yaml
