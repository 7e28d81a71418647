// gpubind-nvc: nvidia-container-cli for the tools that run it themselves
// (enroot's and Apptainer's hooks, NVIDIA's legacy hook), also when invoked
// through a link of that name. One line on stderr says why it failed; the
// exit codes are gpubind's (man gpubind-nvc).
#include <cstdio>
#include <filesystem>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "gpubind/config/config.hpp"
#include "gpubind/nvc/nvc.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "log_format.hpp"
#include "own_program.hpp"

namespace {

using namespace gpubind;

// Warnings on stderr; with --debug, everything to that file too (opened as
// the caller: /dev/stderr is what enroot and NVIDIA's hook give).
void set_up_logging(const nvc::Args& args) {
    std::vector<spdlog::sink_ptr> sinks;
    // --debug=/dev/stderr (enroot's and NVIDIA's hook's) writes to the
    // stderr this process has: reopening it (a pipe of another user's, say)
    // may be refused.
    const bool debug_to_stderr = args.global.debug == "/dev/stderr";
    auto err = std::make_shared<spdlog::sinks::stderr_sink_st>();
    err->set_level(debug_to_stderr ? spdlog::level::debug : spdlog::level::warn);
    set_escaped_pattern(*err, pattern_text(args.program) + ": %l: %v");
    sinks.push_back(err);
    if (!args.global.debug.empty() && !debug_to_stderr) {
        try {
            auto file = std::make_shared<spdlog::sinks::basic_file_sink_st>(args.global.debug);
            set_escaped_pattern(*file, "%Y-%m-%dT%H:%M:%S.%e %l gpubind-nvc: %v");
            sinks.push_back(file);
        } catch (const spdlog::spdlog_ex& e) {
            std::fprintf(stderr, "%s: warning: debug log %s: %s\n", args.program.c_str(),
                         args.global.debug.c_str(), e.what());
        }
    }
    auto logger = std::make_shared<spdlog::logger>("gpubind-nvc", sinks.begin(), sinks.end());
    logger->set_level(args.global.debug.empty() ? spdlog::level::warn : spdlog::level::debug);
    logger->flush_on(spdlog::level::trace);
    util::set_logger(std::move(logger));
}

}  // namespace

int main(int argc, char** argv) {
    // enroot runs its hooks with the container's environment: none of it is read.
    os::harden::clear_environment({});
    const nvc::Args args = nvc::parse(argc, argv);
    const std::string& program = args.program;
    if (!args.usage_error.empty()) {
        std::fprintf(stderr, "%s: %s (see %s --help)\n", program.c_str(),
                     util::escape_control(args.usage_error).c_str(), program.c_str());
        return util::kExitUsage;
    }
    if (args.command == nvc::Command::Help) {
        std::fputs(nvc::help_text(program, args.help_for).c_str(), stdout);
        return util::kExitOk;
    }
    if (args.command == nvc::Command::Version) {
        std::fputs(nvc::version_text(GPUBIND_VERSION).c_str(), stdout);
        return util::kExitOk;
    }
    set_up_logging(args);
    try {
        const config::Config config = nvc::with_global(
            config::load_trusted_config_beside(own_program().parent_path()), args.global);
        return nvc::run(args, config);
    } catch (const std::system_error& e) {
        util::logger().debug("failed: {}", e.what());
        std::fprintf(stderr, "%s: %s\n", program.c_str(), util::escape_control(e.what()).c_str());
        return util::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program.c_str(), util::escape_control(e.what()).c_str());
        return util::kExitFailure;
    }
}
