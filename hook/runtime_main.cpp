// gpubind-runtime: a drop-in for runc. Every command and flag goes straight
// to the real runtime (execve: same argv, same environment). Only on `create`
// and `run` of a GPU container does it first edit the bundle's config.json
// (start::prepare, lib/start/shim.hpp): the runtime then creates the device
// nodes and grants them in the device cgroup, and gpubind-hook, registered by
// the edit, makes the driver mounts and does the rest. A failure is reported
// (stderr, the configured log, the engine's --log) and nothing is executed,
// so no container is created half-configured.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/os/prefault.hpp"
#include "gpubind/start/shim.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/timing.hpp"
#include "own_program.hpp"
#include "runtime_log.hpp"

extern char** environ;

int main(int argc, char** argv) {
    using namespace gpubind;
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    try {
        const start::Invocation args = start::parse_invocation(argc, argv);
        const bool creates = args.command == "create" || args.command == "run";
        // The spec's edit to come: its heap and stack mapped in one call each
        // (os/prefault.hpp; 128 KiB is what an edit for four GPUs touches).
        if (creates) os::prefault({.heap = 128 * 1024, .stack = 32 * 1024});
        RuntimeLog log{.engine_log = args.log, .json = args.log_format == "json"};
        set_up_logging(log);
        const std::filesystem::path own_dir = own_program().parent_path();
        const config::Config config = config::load_trusted_config_beside(own_dir);
        log.level = spdlog::level::from_str(config.log.level);
        log.file = config.log.file;
        log.id = args.id;
        set_up_logging(log);
        const auto configured = Clock::now();
        std::string runtime = start::prepare(args, config, own_dir / "gpubind-hook").string();
        if (creates) {
            const auto found = Clock::now();
            util::logger().debug(
                "timing: config {} us, bundle and runtime {} us, main to exec {} us",
                util::micros(started, configured), util::micros(configured, found),
                util::micros(started, found));
        }
        // The log files are closed (a logger made is dropped): the runtime
        // inherits no descriptor of ours. Should execve fail, stderr says so.
        set_up_logging({.level = spdlog::level::err});
        std::vector<char*> real(argv, argv + argc);
        real[0] = runtime.data();
        real.push_back(nullptr);
        ::execve(runtime.c_str(), real.data(), environ);
        util::throw_errno("execute", runtime);
    } catch (const std::system_error& e) {
        util::logger().error("{}", e.what());
        return util::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-runtime: %s\n", e.what());
        return util::kExitFailure;
    }
}
