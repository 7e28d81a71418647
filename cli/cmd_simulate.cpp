// placeholder: being written
#include "commands.hpp"

namespace gpubind::cli {

void register_simulate(CLI::App& app, Action& action) {
    auto* cmd = app.add_subcommand("simulate", "(not yet)");
    cmd->callback([&action] { action = [] { return 1; }; });
}

}  // namespace gpubind::cli
