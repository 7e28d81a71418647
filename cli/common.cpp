#include "commands.hpp"

#include <fmt/format.h>

#include "gpubind/util/platform.hpp"

namespace gpubind::cli {

void add_compat32_flag(CLI::App& cmd, bool& compat32, const std::string& help) {
    cmd.add_flag_function(
        "--compat32",
        [&compat32](std::int64_t) {
            if (!util::platform::kHasCompat32)
                throw CLI::ValidationError("--compat32",
                                           fmt::format("an {} node has no 32-bit driver libraries",
                                                       util::platform::kMachine));
            compat32 = true;
        },
        help);
}

void add_node_options(CLI::App& cmd, NodeOptions& opts) {
    cmd.add_option("--config", opts.config,
                   "Config file (default $GPUBIND_CONFIG or /etc/gpubind/config.toml)");
    cmd.add_option("--root", opts.root,
                   "Node root: driver root and dev root, with the proc root at ROOT/proc and "
                   "the sys root at ROOT/sys");
    cmd.add_option("--ldcache", opts.ldcache, "ld.so.cache to read (default ROOT/etc/ld.so.cache)");
}

config::Config node_config(const NodeOptions& opts) {
    return with_node_options(config::load_effective_config(opts.config), opts);
}

node::LoadOptions load_options(const NodeOptions& opts) {
    node::LoadOptions load;
    load.write = opts.root.empty() && opts.ldcache.empty();
    return load;
}

config::Config with_node_options(config::Config config, const NodeOptions& opts) {
    if (!opts.root.empty()) {
        auto root = std::filesystem::absolute(opts.root);
        config.roots = {root, root, root / "proc", root / "sys"};
    }
    if (!opts.ldcache.empty()) config.ldcache = std::filesystem::absolute(opts.ldcache);
    return config;
}

}  // namespace gpubind::cli
