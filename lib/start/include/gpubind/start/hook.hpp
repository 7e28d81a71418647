// gpubind-hook's work: one OCI hook invocation, from its stage and the
// container's state to the container configured. Registered as prestart or
// createRuntime it reads the container's request from its spec; the "finish"
// stage is the hook a spec gpubind-runtime edited registers (the runtime made
// the devices: the rest is done here), any other registration of such a spec
// does nothing; the "cdi" stage is the createRuntime hook of gpubind's CDI
// spec (the GPUs are those the engine put in the spec's linux.devices);
// poststop clears what a GPU share set (share_limit.hpp). Each of the others
// makes one Start and calls run() (start.hpp).
#pragma once

#include <unistd.h>

#include <functional>
#include <string>

#include "gpubind/config/config.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::start {

// How the hook was called.
struct HookCall {
    std::string stage = "prestart";  // its first argument
    // Its environment held more than the config file's name: it was
    // registered without "env" and got the container's.
    bool inherited = false;
    int state_fd = STDIN_FILENO;  // the container's state (the runtime's stdin)
    // What the image is read and the container changed through: none, this
    // host's (LinuxSystem); the tests' recording one.
    os::System* sys = nullptr;
};

// Called once the config and the state are read, before anything else is
// logged: the executable sets up its logging for `container` there.
using OnContainer = std::function<void(const config::Config& config, const std::string& container)>;

// Carries out one hook invocation (kExitOk when done or when there is
// nothing to do). Throws Error: an unknown stage, a stage that needs "env"
// registered without it, a bad state or spec, a refused request, a failed step.
int run_hook(const HookCall& call, const OnContainer& on_container);

}  // namespace gpubind::start
