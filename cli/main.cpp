// gpubind: inspect the node and what containers get from it.
#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"

int main(int argc, char** argv) {
    using namespace gpubind;
    auto log = spdlog::stderr_color_st("gpubind");
    log->set_pattern("gpubind: %l: %v");
    log->set_level(spdlog::level::warn);
    util::set_logger(log);

    CLI::App app{"gpubind: give containers NVIDIA GPUs", "gpubind"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string(GPUBIND_VERSION));
    cli::Action action;
    cli::register_info(app, action);
    cli::register_list(app, action);
    cli::register_ldcache(app, action);
    cli::register_simulate(app, action);
    cli::register_plan(app, action);
    cli::register_configure(app, action);
    cli::register_setup(app, action);
    cli::register_cdi(app, action);
    cli::register_doctor(app, action);
    cli::register_place(app, action);
    cli::register_mps(app, action);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? util::kExitOk : util::kExitUsage;
    }
    try {
        return action ? action() : util::kExitOk;
    } catch (const std::system_error& e) {
        std::fprintf(stderr, "gpubind: %s\n", e.what());
        return util::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind: %s\n", e.what());
        return util::kExitFailure;
    }
}
