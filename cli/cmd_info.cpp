// placeholder: being written
#include "commands.hpp"

namespace gpubind::cli {

void register_info(CLI::App& app, Action& action) {
    auto* cmd = app.add_subcommand("info", "(not yet)");
    cmd->callback([&action] { action = [] { return 1; }; });
}

}  // namespace gpubind::cli
