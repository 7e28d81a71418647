// gpubind-hook: the OCI hook (prestart, createRuntime; "finish" and "cdi" as
// gpubind-runtime and gpubind's CDI spec register it). The work is
// start::run_hook's (lib/start/hook.hpp); here: the environment cleared, the
// logging, one line on stderr when it fails and its exit code.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

#include "gpubind/config/config.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/start/hook.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "log_format.hpp"

namespace {

// Errors always reach stderr (the runtime shows them); everything at the
// configured level goes to the log file. No threads: setns needs a
// single-threaded process. The sinks are made by the first message at that
// level: a start that has nothing to say (at the default level, one that
// works) builds none and opens no file.
void set_up_logging(const gpubind::config::Config& config, const std::string& container) {
    const auto level = spdlog::level::from_str(config.log.level);
    gpubind::util::set_lazy_logger(level, [level, file = config.log.file, container] {
        return gpubind::make_start_logger(
            "gpubind-hook", level, file,
            "%Y-%m-%dT%H:%M:%S.%e %l [" + gpubind::pattern_text(container) + "] %v");
    });
}

}  // namespace

int main(int argc, char** argv) {
    // Root, started by a runtime: nothing of the caller's environment but the
    // config file's name (the registered hook's "env" carries it); whether
    // there was more (a registration without "env").
    gpubind::start::HookCall call;
    call.inherited = gpubind::os::harden::clear_environment_but(gpubind::config::kConfigEnv);
    // The stage comes as the first argument (argv[0] is the hook's own name,
    // as config.json's "args" give it).
    if (argc > 1) call.stage = argv[1];
    try {
        return gpubind::start::run_hook(call, set_up_logging);
    } catch (const std::system_error& e) {
        const std::string message = gpubind::util::escape_control(e.what());
        gpubind::util::logger().error("{}", e.what());
        if (!gpubind::util::spdlog_logger().should_log(spdlog::level::err) ||
            gpubind::util::spdlog_logger().sinks().empty())
            std::fprintf(stderr, "gpubind-hook: %s\n", message.c_str());
        return gpubind::util::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-hook: %s\n", gpubind::util::escape_control(e.what()).c_str());
        return gpubind::util::kExitFailure;
    }
}
