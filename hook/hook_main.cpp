// gpubind-hook: the OCI hook. Registered as prestart or createRuntime, it
// reads the container's state on stdin and its spec from the bundle, and
// gives a GPU container its devices and driver files. A non-GPU container is
// left alone; poststop does nothing. One line on stderr says why it failed.
// A spec gpubind-runtime edited (runtime::marked) already has the devices:
// the hook that edit registers ("finish" stage) does the rest
// (runtime::edited_finish_plan), any other registration nothing. The "cdi" stage is the
// createRuntime hook of gpubind's CDI spec (cdi.hpp): the GPUs are those the engine put in the
// spec's linux.devices.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/os/prefault.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/timing.hpp"
#include "log_format.hpp"

namespace {

using namespace gpubind;

// The whole run, shorter than a runtime's patience (containerd and CRI-O give
// a container start minutes): checked between steps, bounding stdin and ldconfig.
constexpr std::chrono::milliseconds kHookBudget{45000};

// Errors always reach stderr (the runtime shows them); everything at the
// configured level goes to the log file. No threads: setns needs a
// single-threaded process. The sinks are made by the first message at that
// level: a start that has nothing to say (at the default level, one that
// works) builds none and opens no file.
void set_up_logging(const Config& config, const std::string& container) {
    const auto level = spdlog::level::from_str(config.log.level);
    set_lazy_logger(level, [level, file = config.log.file, container] {
        return make_start_logger("gpubind-hook", level, file,
                                 "%Y-%m-%dT%H:%M:%S.%e %l [" + pattern_text(container) + "] %v");
    });
}

using Clock = std::chrono::steady_clock;

// When the hook started, read its input and decided (debug timing).
struct Times {
    Clock::time_point started = Clock::now(), read{}, decided{};
};

// Carries out `plan` in the container (the state's pid), through the System
// the decision read the image with.
void configure(const Plan& plan, const oci::State& state, const oci::Spec& spec,
               const Config& config, System& sys, const harden::Deadline& deadline,
               const Times& times) {
    Target target = make_target(config, state.pid, spec.rootfs);
    target.fresh_tmpfs = spec.fresh_tmpfs();
    // A rootless runtime runs its hooks as the user: no privilege over the
    // host, all of them in the container's own user namespace.
    target.join_user_ns = ::geteuid() != 0 && !spec.uid_mappings.empty();
    if (target.join_user_ns) logger().debug("rootless: joining the container's user namespace");
    deadline.check("configure the container");
    target.ldconfig_timeout = std::min(target.ldconfig_timeout, deadline.left());
    execute(plan, target, sys);
    const auto done = Clock::now();
    logger().info("container configured");
    logger().debug("timing: config, state and spec {} us, decision {} us, execution {} us",
                   micros(times.started, times.read), micros(times.read, times.decided),
                   micros(times.decided, done));
}

// The "cdi" stage (the createRuntime hook of gpubind's CDI spec): the
// engine applied the spec's devices and mounts; the links, the loader cache
// and the /proc/driver/nvidia view of the GPUs the spec gave are done here.
int run_cdi(const Config& config, const oci::State& state, const oci::Spec& spec, System& sys,
            const harden::Deadline& deadline, Times times) {
    const cdi::HookDecision decision = cdi::hook_plan(know_node(config, {}), spec, config, sys);
    times.decided = Clock::now();
    if (!decision.gpu_container) {
        logger().info("{}: nothing to do", decision.reason);
        return kExitOk;
    }
    logger().info("{}: {} links", decision.reason, decision.plan.symlinks.size());
    configure(decision.plan, state, spec, config, sys, deadline, times);
    return kExitOk;
}

int run(const std::string& stage, bool inherited) {
    if (stage == "poststop") return kExitOk;
    // What every start touches first (the config, the state, the spec): its
    // heap and stack mapped in one call each, not a page fault per page.
    prefault({.heap = 64 * 1024, .stack = 16 * 1024});
    const bool finish = stage == runtime::kFinishStage;
    const bool cdi_stage = stage == cdi::kHookStage;
    if ((stage == "createContainer" || stage == "startContainer" || cdi_stage) && inherited)
        throw_invalid("run hook", stage,
                      "registered without \"env\", the hook would get the container's "
                      "environment; refusing (register it at prestart or createRuntime, or "
                      "give it env [\"GPUBIND_CONFIG=/absolute/path\"])");
    if (stage != "prestart" && stage != "createRuntime" && stage != "createContainer" && !finish &&
        !cdi_stage)
        throw_invalid("run hook", stage,
                      "unknown stage (prestart, createRuntime, poststop, finish, cdi)");

    const harden::Deadline deadline(kHookBudget);
    Times times;
    const Config config = load_trusted_config();
    const oci::State state = oci::parse_state(
        harden::read_stream(STDIN_FILENO, oci::kMaxStateSize, "stdin", deadline), "stdin");
    set_up_logging(config, state.id);

    deadline.check("read the spec");
    const oci::Spec spec = oci::load_spec(state.bundle);
    times.read = Clock::now();
    if (cdi_stage) {
        prefault({.huge_page = true});
        LinuxSystem sys;  // one per process: the decision reads the image through it, then acts
        return run_cdi(config, state, spec, sys, deadline, times);
    }
    if (runtime::marked(*spec.doc) != finish) {
        if (finish) throw_invalid("run hook", stage, "the spec was not edited by gpubind-runtime");
        logger().debug("edited by gpubind-runtime: its finish hook completes the container");
        return kExitOk;
    }
    Request request = read_request(spec, config.policy, config.families);
    if (!request.gpu_container()) {
        logger().debug("{}: nothing to do", describe_request(request));
        return kExitOk;
    }
    // The decision and the changes to come: their heap (a hundred pages and
    // more: one huge page where the kernel offers them) and stack.
    prefault({.huge_page = true});
    LinuxSystem sys;  // one per process: the decision reads the image through it, then acts
    Decision decision = decide(std::move(request), spec.rootfs, config, sys);
    times.decided = Clock::now();
    const Plan plan =
        finish ? runtime::edited_finish_plan(std::move(decision.plan)) : std::move(decision.plan);
    logger().info("{}: {} devices, {} mounts, {} links", decision.reason, plan.devices.size(),
                  plan.mounts.size(), plan.symlinks.size());
    configure(plan, state, spec, config, sys, deadline, times);
    return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    // Root, started by a runtime: nothing of the caller's environment but the
    // config file's name (the registered hook's "env" carries it); whether
    // there was more (a registration without "env").
    const bool inherited = gpubind::harden::clear_environment_but(gpubind::kConfigEnv);
    // The stage comes as the first argument (argv[0] is the hook's own name, as
    // config.json's "args" give it).
    const std::string stage = argc > 1 ? argv[1] : "prestart";
    try {
        return run(stage, inherited);
    } catch (const std::system_error& e) {
        const std::string message = gpubind::escape_control(e.what());
        gpubind::logger().error("{}", e.what());
        if (!gpubind::spdlog_logger().should_log(spdlog::level::err) ||
            gpubind::spdlog_logger().sinks().empty())
            std::fprintf(stderr, "gpubind-hook: %s\n", message.c_str());
        return gpubind::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-hook: %s\n", gpubind::escape_control(e.what()).c_str());
        return gpubind::kExitFailure;
    }
}
