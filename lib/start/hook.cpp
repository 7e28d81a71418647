#include "gpubind/start/hook.hpp"

#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/os/prefault.hpp"
#include "gpubind/start/share_limit.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/timing.hpp"

namespace gpubind::start {

namespace {

using Clock = std::chrono::steady_clock;

// Which of the hook's ways in a stage is.
enum class Stage { Request, Finish, Cdi };

Stage stage_of(const HookCall& call) {
    const std::string& s = call.stage;
    const bool finish = s == cdi::kFinishStage, cdi_stage = s == cdi::kHookStage;
    if ((s == "createContainer" || s == "startContainer" || cdi_stage) && call.inherited)
        util::throw_invalid("run hook", s,
                            "registered without \"env\", the hook would get the container's "
                            "environment; refusing (register it at prestart or createRuntime, or "
                            "give it env [\"GPUBIND_CONFIG=/absolute/path\"])");
    if (s != "prestart" && s != "createRuntime" && s != "createContainer" && !finish && !cdi_stage)
        util::throw_invalid("run hook", s,
                            "unknown stage (prestart, createRuntime, poststop, finish, cdi)");
    return finish ? Stage::Finish : cdi_stage ? Stage::Cdi : Stage::Request;
}

// Clears what a GPU share set on the container's cgroup (a record under the
// state directory says what; none: nothing to do). A container's teardown
// never fails for it: a state or config it cannot read leaves nothing to undo.
void poststop(const HookCall& call, const OnContainer& on_container) noexcept {
    try {
        const config::Config config = config::load_trusted_config();
        const os::harden::Deadline deadline(kBudget);
        // The state's id only: the process is gone (its pid may be 0).
        const auto doc = nlohmann::json::parse(
            os::harden::read_stream(call.state_fd, decide::oci::kMaxStateSize, "stdin", deadline),
            nullptr, false);
        if (!doc.is_object() || !doc.contains("id") || !doc["id"].is_string()) return;
        const std::string id = doc["id"].get<std::string>();
        on_container(config, id);
        undo_memory_limits(config, id);
    } catch (const std::exception& e) {
        util::logger().debug("poststop: nothing undone: {}", e.what());
    }
}

}  // namespace

int run_hook(const HookCall& call, const OnContainer& on_container) {
    const auto started = Clock::now();
    if (call.stage == "poststop") {
        poststop(call, on_container);
        return util::kExitOk;
    }
    // What every start touches first (the config, the state, the spec): its
    // heap and stack mapped in one call each, not a page fault per page.
    os::prefault({.heap = 64 * 1024, .stack = 16 * 1024});
    const Stage stage = stage_of(call);
    const os::harden::Deadline deadline(kBudget);
    const config::Config config = config::load_trusted_config();
    const decide::oci::State state = decide::oci::parse_state(
        os::harden::read_stream(call.state_fd, decide::oci::kMaxStateSize, "stdin", deadline),
        "stdin");
    on_container(config, state.id);

    deadline.check("read the spec");
    const decide::oci::Spec spec = decide::oci::load_spec(state.bundle);
    const auto read = Clock::now();
    if (stage != Stage::Cdi && cdi::marked(*spec.doc) != (stage == Stage::Finish)) {
        if (stage == Stage::Finish)
            util::throw_invalid("run hook", call.stage,
                                "the spec was not edited by gpubind-runtime");
        util::logger().debug("edited by gpubind-runtime: its finish hook completes the container");
        return util::kExitOk;
    }
    std::optional<node::NodeKnowledge> known;
    decide::Request request;
    std::string reason;
    if (stage == Stage::Cdi) {
        known = know_node(config, {});
        request = cdi_stage_request(known->node, spec, config, reason);
    } else {
        request = decide::read_request(spec, config.policy, config.families);
    }
    if (!request.gpu_container()) {
        if (stage == Stage::Cdi)
            util::logger().info("{}: nothing to do", reason);
        else
            util::logger().debug("{}: nothing to do", decide::describe_request(request));
        return util::kExitOk;
    }
    // The decision and the changes to come: their heap (a hundred pages and
    // more: one huge page where the kernel offers them) and stack.
    os::prefault({.huge_page = true});
    Start start{.config = config,
                .sys = call.sys,
                .rootfs = spec.rootfs,
                .pid = state.pid,
                .container_id = state.id,
                .deadline = deadline,
                // A rootless runtime runs its hooks as the user: no privilege
                // over the host, all of them in the container's own user namespace.
                .target = {.rootless = ::geteuid() != 0 && !spec.uid_mappings.empty(),
                           .fresh_tmpfs = spec.fresh_tmpfs()},
                .known = std::move(known),
                .reason = stage == Stage::Cdi ? reason : std::string()};
    const Act act = stage == Stage::Finish ? Act::FinishEdited
                    : stage == Stage::Cdi  ? Act::FinishCdi
                                           : Act::Execute;
    run(start, std::move(request), act);
    util::logger().info("container configured");
    util::logger().debug("timing: config, state and spec {} us, decision {} us, execution {} us",
                         util::micros(started, read), util::micros(read, start.decided),
                         util::micros(start.decided, Clock::now()));
    return util::kExitOk;
}

}  // namespace gpubind::start
