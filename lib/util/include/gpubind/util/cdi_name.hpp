// Container Device Interface names: kinds ("vendor/class") and qualified
// device names ("vendor/class=name"), checked by the rules of the CDI
// specification (the same rules as its reference library's parser).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpubind::util {

// Why `kind` is not "vendor/class" (each starts with a letter, ends with a
// letter or digit, and holds letters, digits, '_', '-' and '.'), or nullopt.
std::optional<std::string> kind_error(std::string_view kind);
// Why `vendor` is not a CDI vendor ("nvidia.com"), or nullopt.
std::optional<std::string> vendor_error(std::string_view vendor);
// The vendor part of a kind ("nvidia.com" of "nvidia.com/gpu").
std::string_view vendor_of(std::string_view kind);
// Why `name` is not a device name (starts and ends with a letter or digit,
// holds letters, digits, '_', '-', '.' and ':'), or nullopt.
std::optional<std::string> device_name_error(std::string_view name);

struct QualifiedName {
    std::string kind;  // "nvidia.com/gpu"
    std::string name;  // "0"
    std::string text() const { return kind + "=" + name; }
};
// "vendor/class=name" with every part valid, else nullopt.
std::optional<QualifiedName> parse_qualified(std::string_view device);
// Whether it looks like a CDI name at all (has '/' before '='): what request
// parsers use to tell CDI names from gpubind's device ids.
bool looks_qualified(std::string_view device);

}  // namespace gpubind::util
