// placeholder: being written
#include "commands.hpp"

namespace gpubind::cli {

void register_list(CLI::App& app, Action& action) {
    auto* cmd = app.add_subcommand("list", "(not yet)");
    cmd->callback([&action] { action = [] { return 1; }; });
}

}  // namespace gpubind::cli
