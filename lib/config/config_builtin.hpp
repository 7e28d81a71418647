// The built-in config. config/config.toml is its one source: at build time
// gpubind_config_gen (lib/gen/config_gen.cpp) reads that file with the same
// reader as any config file and writes default_config.cpp (build tree), which
// defines make_builtin_config() with plain initialisers, so that no process
// parses the defaults at run time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"

namespace gpubind::config::detail {

// The largest config file read (config.cpp, device_plugin.cpp).
inline constexpr std::size_t kMaxConfigSize = 1u << 20;

// Parses TOML text over `base`: parse_config() with the defaults as base, the
// generator with Config{}. Errors as parse_config's.
// `plugin`, when given, receives the [device-plugin] table (device_plugin.hpp).
Config parse_config_over(Config base, std::string_view toml, const std::string& what,
                         DevicePluginConfig* plugin = nullptr);

// What config/config.toml says, read the way the generator reads it.
inline Config parse_builtin_config(std::string_view toml, const std::string& what) {
    return parse_config_over(Config{}, toml, what);
}

// The generated built-in config (default_config.cpp in the build tree).
Config make_builtin_config();

// config/config.toml's bytes, as built in (default_config.cpp). A config file
// with exactly these bytes, the one the packages install, says the defaults:
// parse_config() takes them without parsing it.
std::string_view builtin_config_text();

// The C++ source of a make_builtin_config() that returns `config`, field by
// field, and of a builtin_config_text() that returns `text`: what
// gpubind_config_gen writes.
std::string builtin_config_source(const Config& config, std::string_view text);

}  // namespace gpubind::config::detail
