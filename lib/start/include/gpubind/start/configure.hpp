// `gpubind configure` and `gpubind-nvc configure`: a running container (its
// process and root filesystem) given GPUs by a request made by hand, with
// nvidia-container-cli's rules for who may do what.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::start {

struct ConfigureCall {
    decide::Request request{};
    std::string rootfs{};  // as given: absolute, and not "/"
    // The container's process; none: the caller's parent, as
    // nvidia-container-cli takes it (enroot's and Apptainer's hooks), in
    // place when it shares this process's mount namespace.
    std::optional<pid_t> pid{};
    bool no_cgroups = false;           // leave the device cgroup alone
    bool no_devbind = false;           // device cgroup access only, no device nodes
    std::filesystem::path ldconfig{};  // the host's ldconfig, if not the config's
    bool store = true;                 // store what is learned of the node
    std::function<void(decide::Plan&, const node::Node&)> leave_out{};  // Start::leave_out
    os::System* sys = nullptr;  // none: this host's (LinuxSystem); the tests' recording one
};

// Checks the call, then start::run(Act::Execute). A caller without
// privileges over the host (not root, or root of a user namespace other than
// the initial one) is refused device cgroup changes (Error, Refused: give
// --no-cgroups) and joins the container's user namespace unless in place.
void configure(const config::Config& config, const ConfigureCall& call);

}  // namespace gpubind::start
