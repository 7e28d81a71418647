// gpubind setup: register gpubind with a container engine (docker, containerd,
// CRI-O, podman, runc), or take it out again with --remove; point
// nvidia-container-cli at gpubind-nvc.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/setup/host.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/journal.hpp"

namespace gpubind::cli {

namespace {

struct SetupOptions {
    std::vector<std::string> engines;
    setup::Request request;
    bool dry_run = false;
    bool dev_char_links = false;
    bool nvc_link = false;
    std::string nvc{setup::kNvcProgram};
    bool device_nodes = false;
    bool control_only = false;
    bool all_nodes = false;
    std::string mode = "0666";
    bool load_modules = false;
    std::string modprobe{setup::kModprobe};
    setup::DeviceNodeOptions nodes;
    std::filesystem::path dev_root = "/";
    setup::HostInstall host;
    std::filesystem::path install_config = "/etc/gpubind/config.toml";
};

// Into a host mounted here (the Kubernetes node installer): the programs
// found beside this one (or in ../libexec/gpubind) unless --programs says.
std::vector<std::string> run_host_install(const SetupOptions& o) {
    setup::HostInstall in = o.host;
    for (const auto& name : o.engines) {
        const auto engine = *setup::parse_engine(name);
        if (engine == setup::Engine::Runc)
            util::throw_invalid(
                "parse arguments", "--engine runc",
                "has no host config to register in; use --bundle without --host-root");
        in.engines.push_back(engine);
    }
    if (in.program_dirs.empty()) {
        const auto self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
        in.program_dirs = {self, self.parent_path() / "libexec/gpubind"};
    }
    std::error_code ec;
    if (!in.remove && (std::filesystem::exists(o.install_config, ec) ||
                       o.install_config != "/etc/gpubind/config.toml")) {
        in.config_text = util::read_file(o.install_config, 1u << 20);
        in.config_what = o.install_config.string();
    } else {
        in.config_what = "the built-in config";
    }
    in.set_default = o.request.options.set_default;
    in.cdi = o.request.options.cdi;
    in.remove = o.request.remove;
    return setup::install_host(in, o.dry_run);
}

// "0666", "666", "0600": an octal permission mode; nullopt for anything else.
std::optional<mode_t> parse_mode(const std::string& text) {
    if (text.empty() || text.size() > 4) return std::nullopt;
    mode_t mode = 0;
    for (char c : text) {
        if (c < '0' || c > '7') return std::nullopt;
        mode = static_cast<mode_t>(mode * 8 + static_cast<mode_t>(c - '0'));
    }
    if (mode > 0777) return std::nullopt;
    return mode;
}

int run_setup(const SetupOptions& o) {
    if (!o.host.host_root.empty()) {
        for (const auto& line : run_host_install(o)) std::printf("%s\n", line.c_str());
        if (std::fflush(stdout) != 0) util::throw_errno("write", "standard output");
        return util::kExitOk;
    }
    // Every engine's files are read and checked before any is written, and
    // written as one: a step that fails undoes the others (apply_setup).
    std::vector<setup::Change> plan;
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
        for (auto& c : setup::plan_setup(r)) plan.push_back(std::move(c));
    }
    // The engines' files, then nvidia-container-cli's link, as one: a link
    // refused or failing undoes the engines' changes (the journal), and the
    // link is its own last step.
    util::Journal journal;
    std::vector<std::string> lines = setup::apply_setup(plan, o.dry_run, journal);
    if (o.nvc_link)
        for (auto& line : setup::nvc_link(
                 {.prefix = o.request.prefix, .nvc = o.nvc, .remove = o.request.remove}, o.dry_run))
            lines.push_back(std::move(line));
    journal.commit();
    for (const auto& line : lines) std::printf("%s\n", line.c_str());
    const std::filesystem::path proc_root =
        o.dev_root == "/" ? std::filesystem::path("/proc") : o.dev_root / "proc";
    unsigned left = 0;
    if (o.device_nodes) {  // before the links, which the new nodes get too
        if (o.load_modules && !o.dry_run)
            setup::load_modules(
                o.modprobe, o.all_nodes
                                ? std::vector<std::string>{"nvidia", "nvidia-uvm", "nvidia-modeset"}
                                : std::vector<std::string>{"nvidia", "nvidia-uvm"});
        setup::DeviceNodeOptions nodes = o.nodes;
        nodes.dry_run = o.dry_run;
        nodes.which = o.control_only ? setup::NodeSet::Control
                      : o.all_nodes  ? setup::NodeSet::All
                                     : setup::NodeSet::Gpus;
        nodes.mode = *parse_mode(o.mode);  // checked when parsed
        const auto report = setup::make_device_nodes(o.dev_root, proc_root, nodes);
        for (const auto& line : report.lines) std::printf("%s\n", line.c_str());
        left = report.left;
    }
    if (o.dev_char_links)
        for (const auto& line : setup::dev_char_links(o.dev_root, proc_root, o.dry_run))
            std::printf("%s\n", line.c_str());
    if (std::fflush(stdout) != 0) util::throw_errno("write", "standard output");
    if (left > 0) {
        std::fprintf(stderr, "gpubind setup: %u device nodes are not the driver's and were left\n",
                     left);
        return doctor::kExitProblem;
    }
    return util::kExitOk;
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
    cmd->add_option(
        "--prefix", o->request.prefix,
        "Root the engines' files (and usr/bin/nvidia-container-cli) are under (default /)");
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
    auto* nvc_link = cmd->add_flag(
        "--nvidia-container-cli", o->nvc_link,
        "Point PREFIX/usr/bin/nvidia-container-cli at gpubind-nvc (what was there kept as "
        "nvidia-container-cli.gpubind-backup); with --remove take gpubind's link out and put "
        "the backup back");
    cmd->add_option("--nvc", o->nvc,
                    "With --nvidia-container-cli: gpubind-nvc as the host runs it (what the "
                    "link points at)")
        ->needs(nvc_link)
        ->capture_default_str();
    auto* nodes = cmd->add_flag(
        "--device-nodes", o->device_nodes,
        "Create the driver's missing device nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools and "
        "each GPU's) with the numbers its procfs gives; exit 5 when one exists with others");
    auto* control = cmd->add_flag("--control", o->control_only,
                                  "With --device-nodes: the control nodes only (no GPU node)");
    auto* all = cmd->add_flag("--all", o->all_nodes,
                              "With --device-nodes: also nvidia-modeset and the MIG capability "
                              "nodes");
    control->excludes(all)->needs(nodes);
    all->needs(nodes);
    cmd->add_option("--imex-channel", o->nodes.imex_channels,
                    "With --device-nodes: also IMEX channel N's node (repeatable)")
        ->needs(nodes)
        ->check(CLI::Range(0u, setup::kMaxImexChannel - 1));
    cmd->add_flag("--force", o->nodes.force,
                  "With --device-nodes: replace a character device that has other numbers")
        ->needs(nodes);
    cmd->add_option("--mode", o->mode, "With --device-nodes: the new nodes' mode (default 0666)")
        ->needs(nodes)
        ->check(CLI::Validator(
            [](const std::string& text) {
                return parse_mode(text) ? std::string()
                                        : "'" + text + "' is not an octal mode (0 to 0777)";
            },
            "MODE"));
    cmd->add_flag("--load-modules", o->load_modules,
                  "With --device-nodes: modprobe nvidia and nvidia-uvm first (and nvidia-modeset "
                  "with --all)")
        ->needs(nodes);
    cmd->add_option("--modprobe", o->modprobe, "With --load-modules: the modprobe to run")
        ->needs(nodes)
        ->capture_default_str();
    cmd->add_flag("--simulated-proc", o->nodes.simulated_proc,
                  "With --device-nodes: take the majors from ROOT/proc/devices even when it is "
                  "not on procfs (a simulated node's); without it only the kernel's are read")
        ->needs(nodes);
    cmd->add_option("--root", o->dev_root,
                    "With --dev-char-links or --device-nodes: the dev root, and ROOT/proc the proc "
                    "root (default /)");
    auto* host = cmd->add_option(
        "--host-root", o->host.host_root,
        "Install into the host whose / is mounted at DIR (from a container: the Kubernetes node "
        "installer): the programs and config into --install-dir, registered with --engine; with "
        "--cdi the node's CDI specs too; --remove takes out exactly what it put there");
    cmd->add_option("--install-dir", o->host.install_dir,
                    "With --host-root: where the host gets the programs and config")
        ->needs(host)
        ->capture_default_str();
    cmd->add_option("--install-config", o->install_config,
                    "With --host-root: the config to install (its [cdi] hook set to the installed "
                    "hook); default this one's, else the built-in")
        ->needs(host);
    cmd->add_option("--programs", o->host.program_dirs,
                    "With --host-root: where gpubind-hook, gpubind-runtime and gpubind-nvml are "
                    "(repeatable; default beside this program and ../libexec/gpubind)")
        ->needs(host);
    for (const char* name : {"--prefix", "--runtime-path", "--hook-path", "--config-path",
                             "--bundle", "--nvidia-container-cli"})
        host->excludes(cmd->get_option(name));
    cmd->callback([o, engine, links, nodes, nvc_link, host, &action] {
        if (host->count() > 0 && engine->count() == 0)
            throw CLI::RequiredError("--engine (with --host-root)");
        if (engine->count() == 0 && links->count() == 0 && nodes->count() == 0 &&
            nvc_link->count() == 0)
            throw CLI::RequiredError(
                "--engine, --device-nodes, --dev-char-links or --nvidia-container-cli");
        action = [o] { return run_setup(*o); };
    });
}

}  // namespace gpubind::cli
