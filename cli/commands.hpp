// Each `gpubind` subcommand lives in cli/cmd_<name>.cpp and registers itself
// here. A command's callback returns the process exit code; errors are thrown
// as gpubind::Error and mapped to exit codes in main().
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "gpubind/config/config.hpp"
#include "gpubind/node/description.hpp"

namespace gpubind::cli {

// Options every node-reading command shares.
struct NodeOptions {
    std::filesystem::path config;   // --config
    std::filesystem::path root;     // --root: driver, dev and proc roots at once (proc = root/proc)
    std::filesystem::path ldcache;  // --ldcache
};

// The command to run once parsing is done.
using Action = std::function<int()>;

// Adds --compat32 to `cmd`: the 32-bit libraries too; refused as a usage
// error where the machine has none (arm64).
void add_compat32_flag(CLI::App& cmd, bool& compat32, const std::string& help);
// Adds --config, --root, --ldcache to `cmd`.
void add_node_options(CLI::App& cmd, NodeOptions& opts);
// The config the options describe: the config file, then --root and --ldcache over it.
config::Config node_config(const NodeOptions& opts);
// `config` with --root and --ldcache over it.
config::Config with_node_options(config::Config config, const NodeOptions& opts);
// How a command loads the node description: --root and --ldcache describe
// another node than the configured one, whose knowledge is never stored
// (nor its CDI specs refreshed).
node::LoadOptions load_options(const NodeOptions& opts);

void register_info(CLI::App& app, Action& action);
void register_list(CLI::App& app, Action& action);
void register_ldcache(CLI::App& app, Action& action);
void register_simulate(CLI::App& app, Action& action);
void register_plan(CLI::App& app, Action& action);
void register_configure(CLI::App& app, Action& action);
void register_setup(CLI::App& app, Action& action);
void register_cdi(CLI::App& app, Action& action);
void register_doctor(CLI::App& app, Action& action);
void register_place(CLI::App& app, Action& action);
void register_mps(CLI::App& app, Action& action);

}  // namespace gpubind::cli
