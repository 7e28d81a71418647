// gpubind setup: register gpubind with a container engine (docker, containerd,
// CRI-O, podman, runc), or take it out again with --remove.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::cli {

namespace {

struct SetupOptions {
    std::vector<std::string> engines;
    setup::Request request;
    bool dry_run = false;
    bool dev_char_links = false;
    std::filesystem::path dev_root = "/";
};

int run_setup(const SetupOptions& o) {
    // Every engine's files are read and checked before any is written.
    std::vector<std::vector<setup::Change>> plans;
    for (const auto& name : o.engines) {
        setup::Request r = o.request;
        r.engine = *setup::parse_engine(name);
        if (r.engine == setup::Engine::Runc && r.bundle.empty()) {
            std::printf(
                "# gpubind-hook for a runc bundle: add to its config.json "
                "(or give --bundle DIR to have it done)\n%s",
                setup::runc_hooks_snippet(r.options).c_str());
            continue;
        }
        plans.push_back(setup::plan_setup(r));
    }
    for (const auto& plan : plans)
        for (const auto& line : setup::apply_setup(plan, o.dry_run))
            std::printf("%s\n", line.c_str());
    if (o.dev_char_links)
        for (const auto& line : setup::dev_char_links(
                 o.dev_root,
                 o.dev_root == "/" ? std::filesystem::path("/proc") : o.dev_root / "proc",
                 o.dry_run))
            std::printf("%s\n", line.c_str());
    if (std::fflush(stdout) != 0) throw_errno("write", "standard output");
    return kExitOk;
}

}  // namespace

void register_setup(CLI::App& app, Action& action) {
    auto o = std::make_shared<SetupOptions>();
    auto* cmd = app.add_subcommand(
        "setup",
        "Register gpubind with container engines (docker, containerd, crio, podman, runc)");
    auto* engine = cmd->add_option("-e,--engine", o->engines, "Engine to set up (repeatable)");
    engine->check(CLI::IsMember({"docker", "containerd", "crio", "cri-o", "podman", "runc"}));
    cmd->add_flag("--remove", o->request.remove,
                  "Take gpubind out again: restore the backups, else remove what gpubind added");
    cmd->add_flag("--set-default", o->request.options.set_default,
                  "Make gpubind the default runtime (docker, containerd, crio)");
    cmd->add_flag("--cdi", o->request.options.cdi,
                  "Also turn on the engine's own CDI support (containerd 1.7+, docker 25+, CRI-O)");
    cmd->add_flag("-n,--dry-run", o->dry_run, "Print what would change; write nothing");
    cmd->add_option("--prefix", o->request.prefix, "Root the engines' files are under (default /)");
    cmd->add_option("--runtime-path", o->request.options.runtime_path,
                    "gpubind-runtime as the engine runs it (default /usr/bin/gpubind-runtime)");
    cmd->add_option("--config-path", o->request.options.config_path,
                    "Config file the registered hook is told to read (its env)")
        ->capture_default_str();
    cmd->add_option("--hook-path", o->request.options.hook_path,
                    "gpubind-hook as the engine runs it (default /usr/bin/gpubind-hook)");
    cmd->add_option("--bundle", o->request.bundle,
                    "runc: the bundle whose config.json gets the hook (without it the snippet "
                    "is printed)");
    auto* links = cmd->add_flag(
        "--dev-char-links", o->dev_char_links,
        "Create the /dev/char/MAJOR:MINOR links of the NVIDIA device nodes (systemd needs them to "
        "keep device rules across `systemctl daemon-reload`)");
    cmd->add_option("--root", o->dev_root,
                    "With --dev-char-links: the dev root, and ROOT/proc the proc root (default /)");
    cmd->callback([o, engine, links, &action] {
        if (engine->count() == 0 && links->count() == 0)
            throw CLI::RequiredError("--engine or --dev-char-links");
        action = [o] { return run_setup(*o); };
    });
}

}  // namespace gpubind::cli
