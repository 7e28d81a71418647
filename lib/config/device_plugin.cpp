// The config with gpubind-device-plugin's [device-plugin] table: see
// config/device_plugin.hpp.
#include "gpubind/config/device_plugin.hpp"

#include <cstdlib>

#include "config_builtin.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::config {

namespace {
using detail::kMaxConfigSize;
}

ConfigWithPlugin parse_config_with_plugin(std::string_view toml, const std::string& what) {
    ConfigWithPlugin out;
    // The packaged file's [device-plugin] table is DevicePluginConfig's defaults
    // (Config.DevicePluginDefaultsAreConfigToml).
    out.config = toml == detail::builtin_config_text()
                     ? default_config()
                     : detail::parse_config_over(default_config(), toml, what, &out.plugin);
    out.config.source = what;
    return out;
}

ConfigWithPlugin load_effective_config_with_plugin(const std::filesystem::path& explicit_path) {
    std::filesystem::path path = explicit_path;
    if (path.empty())
        if (const char* env = std::getenv(std::string(kConfigEnv).c_str()); env && *env) path = env;
    if (path.empty()) {
        std::error_code ec;
        if (!std::filesystem::exists(kDefaultConfigPath, ec)) return {default_config(), {}};
        path = kDefaultConfigPath;
    }
    return parse_config_with_plugin(util::read_file(path, kMaxConfigSize), path.string());
}

}  // namespace gpubind::config
