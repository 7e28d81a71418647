// gpubind mps: one MPS control daemon per GPU, supervised in the foreground
// (start/mps.hpp; the gpubind-mps unit, or a container of the DaemonSet).
#include "commands.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/start/mps.hpp"
#include "gpubind/start/start.hpp"

namespace gpubind::cli {

namespace {

struct MpsOptions {
    std::filesystem::path config;
    std::vector<std::string> gpus;
};

}  // namespace

void register_mps(CLI::App& app, Action& action) {
    auto opts = std::make_shared<MpsOptions>();
    auto* cmd =
        app.add_subcommand("mps", "Run one MPS control daemon per GPU ([mps]), until SIGTERM");
    cmd->add_option("--config", opts->config,
                    "Config file (default: $GPUBIND_CONFIG, then "
                    "/etc/gpubind/config.toml)");
    cmd->add_option("--gpu", opts->gpus, "Only this GPU (UUID or index); repeatable");
    cmd->callback([opts, &action] {
        action = [opts] {
            const config::ConfigWithPlugin both =
                config::load_effective_config_with_plugin(opts->config);
            node::LoadOptions load;
            load.need_nvml = true;  // the GPUs' UUIDs and memory
            const node::NodeKnowledge k = start::know_node(both.config, load);
            const unsigned replicas =
                both.plugin.sharing == config::SharingMode::Replicas ? both.plugin.replicas : 1;
            return start::run_mps(both.config, k.node, opts->gpus, replicas);
        };
    });
}

}  // namespace gpubind::cli
