// gpubind-runtime's work before it executes the real runtime: reading its
// command line as runc and crun read theirs, and editing a GPU container's
// bundle (CDI devices applied from the node's specs, then cdi::edit_spec).
// The executable sets up logging, finds the real runtime and execs it.
#pragma once

#include <filesystem>
#include <string>

#include "gpubind/config/config.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::start {

// What gpubind-runtime reads of its command line; everything else is the
// real runtime's business.
struct Invocation {
    std::string log;                     // --log
    std::string log_format = "text";     // --log-format
    std::string command;                 // create, run, state, ... (empty: none)
    std::filesystem::path bundle = ".";  // create/run --bundle, -b
    std::string id;                      // create/run: the container id
};

// argv (argv[0] the shim's own name) read as runc and crun read it: global
// flags (those taking a value: log, log-format, log-level, root, criu,
// rootless, cgroup-manager; "--name value", "--name=value", "-name value"),
// then the command; for create and run, their flags and the id. A flag of
// create or run neither runc nor crun has with that meaning (crun's
// --config names another config.json) is an Error (EINVAL) naming it: the
// spec edited must be the one the runtime reads.
Invocation parse_invocation(int argc, const char* const* argv);

// create/run: the bundle's config.json, if the container asks for GPUs or
// CDI devices, edited and written back in place (its mode kept, a link or a
// non-regular file refused). CDI devices the container names are applied
// first, the node known before (a driver change rewrites the node's own
// specs); then the decision, and for a GPU container cdi::edit_spec with
// `hook` (gpubind-hook's path) registered as its finish hook. A spec already
// edited, or one asking for nothing, is left as it is, byte for byte.
// `id` names the container in the log.
// The image is read through `sys` (none: this host's; the tests' recording one).
void edit_bundle(const std::filesystem::path& bundle, const std::string& id,
                 const config::Config& config, const std::filesystem::path& hook,
                 os::System* sys = nullptr);

// The real runtime: the first of config.runtimes that is an executable file
// and not gpubind-runtime itself (/proc/self/exe); a name without '/' is
// searched in PATH (a default PATH when it is unset). Error (ENOENT) naming
// them all when none is.
std::filesystem::path find_runtime(const config::Config& config);

// gpubind-runtime's work before it executes the real runtime: for create and
// run, edit_bundle (args.bundle, args.id, `hook` registered); then
// find_runtime. Returns the real runtime's path.
std::filesystem::path prepare(const Invocation& args, const config::Config& config,
                              const std::filesystem::path& hook);

}  // namespace gpubind::start
