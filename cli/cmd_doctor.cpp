// gpubind doctor: what is wrong with this GPU node (or a GPU container), and
// how to fix it. Reads only.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::cli {

namespace {

struct DoctorOptions {
    NodeOptions node;
    bool json = false;
    pid_t pid = 0;
    std::filesystem::path bundle;
    std::vector<std::filesystem::path> state_roots;
    std::filesystem::path prefix = "/";
    double timeout = 10;
};

// The config file a command would read ("" for the built-in defaults).
std::string config_path(const NodeOptions& o) {
    if (!o.config.empty()) return o.config.string();
    if (const char* env = std::getenv(std::string(config::kConfigEnv).c_str()); env && *env)
        return env;
    // There unless missing: a link there is the loader's to refuse, not the defaults.
    std::error_code ec;
    if (std::filesystem::symlink_status(config::kDefaultConfigPath, ec).type() !=
        std::filesystem::file_type::not_found)
        return std::string(config::kDefaultConfigPath);
    return {};
}

int run_doctor(const DoctorOptions& o) {
    doctor::Options opts;
    opts.gpubind.config_path = config_path(o.node);
    opts.gpubind.config_env_relative =
        o.node.config.empty() && !opts.gpubind.config_path.empty() &&
        !std::filesystem::path(opts.gpubind.config_path).is_absolute();
    config::Config config;
    try {
        // Judged as the hook and the runtime read it: its owner and mode,
        // and GPUBIND_CONFIG's path, too.
        config =
            with_node_options(o.node.config.empty() ? config::load_trusted_config()
                                                    : config::load_trusted_config(o.node.config),
                              o.node);
    } catch (const std::system_error& e) {
        // Judged as a check; the rest runs on the defaults.
        opts.gpubind.config_error = e.what();
        config = with_node_options(config::default_config(), o.node);
    }
    opts.engines.prefix = o.prefix;
    if (o.pid > 0 || !o.bundle.empty())
        opts.container = doctor::ContainerOptions{
            o.pid, o.bundle.empty() ? o.bundle : std::filesystem::absolute(o.bundle),
            o.state_roots};
    opts.deadline = std::chrono::milliseconds(static_cast<long>(o.timeout * 1000));
    const doctor::Report report = doctor::run(config, opts);
    if (o.json) {
        nlohmann::json j = report;
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::fputs(doctor::format_text(report).c_str(), stdout);
    }
    if (std::fflush(stdout) != 0) util::throw_errno("write", "standard output");
    return doctor::exit_code(report);
}

}  // namespace

void register_doctor(CLI::App& app, Action& action) {
    auto o = std::make_shared<DoctorOptions>();
    auto* cmd = app.add_subcommand(
        "doctor", "Say what is wrong with this GPU node or a GPU container, and how to fix it");
    add_node_options(*cmd, o->node);
    cmd->add_flag("--json", o->json,
                  "JSON output (schema gpubind.doctor/v1, docs/doctor.schema.json)");
    cmd->add_option("--pid", o->pid, "A container's init process: check that container")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--bundle", o->bundle,
                    "The container's bundle (default: found from --pid in runc's state)");
    cmd->add_option("--state-root", o->state_roots,
                    "runc state directory to look for --pid in (repeatable; default /run/runc "
                    "and containerd's and docker's)");
    cmd->add_option(
        "--prefix", o->prefix,
        "Root the engines' files, /run/systemd and /sys/fs/cgroup are under (default /)");
    cmd->add_option("--timeout", o->timeout, "Seconds each group of checks may take (default 10)")
        ->check(CLI::Range(0.1, 600.0));
    cmd->callback([o, &action] { action = [o] { return run_doctor(*o); }; });
}

}  // namespace gpubind::cli
