// gpubind plan --bundle DIR: what the hook would do for a bundle, and why.
// Reads only: nothing is created, mounted or changed.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/start/start.hpp"

namespace gpubind::cli {

namespace {

struct PlanOptions {
    NodeOptions node;
    std::filesystem::path bundle = ".";
    bool json = false;
};

}  // namespace

void register_plan(CLI::App& app, Action& action) {
    auto o = std::make_shared<PlanOptions>();
    auto* cmd = app.add_subcommand(
        "plan", "Show what would be injected into a bundle's container, and why (changes nothing)");
    add_node_options(*cmd, o->node);
    cmd->add_option("-b,--bundle", o->bundle, "OCI bundle directory (default .)");
    cmd->add_flag("--json", o->json, "JSON output (schema gpubind.plan/v1)");
    cmd->callback([o, &action] {
        action = [o] {
            const config::Config config = node_config(o->node);
            const decide::oci::Spec spec =
                decide::oci::load_spec(std::filesystem::absolute(o->bundle));
            const decide::Decision d = start::decide(spec, config);
            if (o->json) {
                nlohmann::json out = {{"schema", "gpubind.plan/v1"},
                                      {"gpu_container", d.gpu_container()},
                                      {"reason", d.reason},
                                      {"plan", d.plan}};
                fmt::print("{}\n", out.dump(2));
            } else {
                fmt::print("{}\n", d.reason);
                if (d.gpu_container()) fmt::print("{}", describe(d.plan));
            }
            return 0;
        };
    });
}

}  // namespace gpubind::cli
