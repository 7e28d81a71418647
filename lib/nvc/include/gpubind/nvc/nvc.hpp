// gpubind-nvc: nvidia-container-cli's command line over gpubind, for the
// tools that run it themselves (enroot's and Apptainer's hooks, NVIDIA's
// legacy hook). Its options, its `info` and `list` output, its `configure`;
// gpubind's node knowledge, decision and executor behind them.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::nvc {

enum class Command { Help, Version, Info, List, Configure };

// nvidia-container-cli's global options.
struct Global {
    std::string debug;                 // --debug=FILE
    std::string root;                  // --root: the driver root ("" is /)
    std::string ldcache;               // --ldcache: inside the driver root ("" is /etc/ld.so.cache)
    bool user = false;                 // --user[=UID[:GID]]: accepted, the caller's ids are used
    std::vector<std::string> ignored;  // accepted with no effect here, for the debug log
};

// What `list` and `configure` select, as their options say it.
struct Selection {
    std::string devices;                  // --device, joined with ","
    std::string mig_config, mig_monitor;  // --mig-config, --mig-monitor
    std::string imex_channels;            // --imex-channel, joined with ","
    bool compat32 = false;
    bool no_persistenced = false, no_fabricmanager = false, no_gsp_firmware = false;
};

struct ListArgs {
    Selection select;
    bool libraries = false, binaries = false, ipcs = false, firmwares = false;
    // No option, or only one --imex-channel=N word: everything, every device.
    bool everything = false;
};

struct ConfigureArgs {
    Selection select;
    std::optional<pid_t> pid;               // --pid; else the parent process
    std::vector<std::string> requires_;     // --require, at most kMaxRequires
    std::string ldconfig;                   // --ldconfig: "@host path" or a container path
    std::vector<std::string> capabilities;  // "compute", "utility", ... as given
    bool no_cgroups = false, no_devbind = false, no_cntlibs = false;
    std::string cuda_compat_mode;  // --cuda-compat-mode: mount, ldconfig or disabled
    std::string rootfs;
};

inline constexpr std::size_t kMaxRequires = 32;

struct Args {
    std::string program;  // the name invoked as, for messages ("nvidia-container-cli")
    Command command = Command::Help;
    Command help_for = Command::Help;  // Help: whose (Help itself: the program's)
    Global global;
    bool csv = false;  // info --csv
    ListArgs list;
    ConfigureArgs configure;
    std::string usage_error;  // set: the command line is wrong, nothing else is
};

// Parses argv as nvidia-container-cli does (getopt_long: the global options
// up to the first word, the command, then its own options; `--opt=value`,
// `--opt value`, `-o value`, `-ovalue`; --user's value only attached). An
// unknown option, a missing value, a bad pid, a missing or second ROOTFS
// set usage_error to one line naming it. Not thread-safe (getopt's state).
Args parse(int argc, char* const* argv);

// The usage text of `command` (Help: the whole program's).
std::string help_text(const std::string& program, Command command);
// --version: "cli-version: <v>", "lib-version: <v>", "build platform: <arch>".
std::string version_text(const std::string& version);

// `info`: the driver and each GPU in nvidia-container-cli's layout, text or CSV.
std::string info_text(const node::Node& node, bool csv);
// `list`: one path a line, in nvidia-container-cli's order; driver files as
// found under the driver root and printed relative to it, device nodes and
// /proc files by their usual names. Device ids the node lacks throw Error.
std::string list_text(const node::Node& node, const ListArgs& args);

// The config gpubind-nvc runs with: the trusted config file (beside the
// program, else /etc/gpubind/config.toml) with --root and --ldcache over it.
config::Config with_global(config::Config config, const Global& global);

// Runs the parsed command (not Help or Version): knows the node, prints, or
// configures the container (through `sys`; none: this host's, LinuxSystem;
// the tests' failing one). Returns the exit code; throws Error.
int run(const Args& args, const config::Config& config, os::System* sys = nullptr);

}  // namespace gpubind::nvc
