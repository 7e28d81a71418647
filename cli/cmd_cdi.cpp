// gpubind cdi: the node as Container Device Interface specs.
//   generate  the GPU spec (or the IMEX channels' with --imex, a device
//             family's with --family NAME) as JSON or YAML,
//             to stdout or atomically to --output (rewritten only when it changes)
//   refresh   the node's specs under [cdi] dir, rewritten only when they change
//   remove    those specs removed (package removal)
//   list      the qualified device names the node's specs (or --spec files) offer
//   check     every spec an engine would read, whoever wrote it, against the node now
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::cli {

namespace {

struct CdiOptions {
    NodeOptions node;
    std::string format = "json";
    std::filesystem::path output;
    std::filesystem::path hook;
    std::filesystem::path dir;
    bool imex = false;
    std::string family;  // --family: that device family's spec
    bool json = false;
    double timeout = 10;
    std::vector<std::filesystem::path> specs;
};

// The config with the command line's overrides.
config::Config cdi_config(const CdiOptions& o) {
    config::Config config = node_config(o.node);
    if (!o.hook.empty()) config.cdi.hook = std::filesystem::absolute(o.hook);
    if (!o.dir.empty()) config.cdi.dir = std::filesystem::absolute(o.dir);
    return config;
}

// The node as the description knows it, with NVML's facts: the spec names
// MIG devices by UUID too, which only NVML knows (asked once per driver state).
// load_node, not know_node: the specs are written here, by the command
// itself (refresh reports what it changed), never behind its back. So what
// it learns is stored only by `refresh` (`store`), which brings the specs up
// to date with it: a description stored without them would keep the
// starts, which rewrite the specs when they recompute, from seeing the
// specs are stale.
node::Node cdi_node(const config::Config& config, const CdiOptions& o, bool store) {
    node::LoadOptions load = load_options(o.node);
    load.need_nvml = true;
    load.write = load.write && store;
    return node::load_node(config, load).node;
}

int generate(const CdiOptions& o) {
    if (o.format != "json" && o.format != "yaml")
        util::throw_invalid("parse arguments", "--format",
                            "'" + o.format + "' is not json or yaml");
    const config::Config config = cdi_config(o);
    const node::Node node = cdi_node(config, o, false);
    nlohmann::json spec;
    if (!o.family.empty()) {
        if (o.imex)
            util::throw_invalid("parse arguments", "--family",
                                "--imex and --family exclude each other");
        const config::Family* f = config.family(o.family);
        if (!f)
            util::throw_invalid("generate CDI spec", "--family",
                                "no family " + o.family + " in the config");
        if (f->cdi_kind.empty())
            util::throw_invalid("generate CDI spec", "--family",
                                "family " + o.family + " has no cdi-kind in the config");
        auto family = cdi::family_spec(node, config, o.family);
        if (!family)
            throw util::Error(ENOENT, "generate CDI spec", "--family",
                              "the node has no device of family " + o.family);
        spec = *family;
    } else if (o.imex) {
        auto imex = cdi::imex_spec(node, config);
        if (!imex)
            throw util::Error(ENOENT, "generate CDI spec", "--imex",
                              "the node has no IMEX channel");
        spec = *imex;
    } else {
        spec = cdi::gpu_spec(node, config);
    }
    const std::string text =
        cdi::serialize(spec, o.format == "yaml" ? cdi::Format::Yaml : cdi::Format::Json);
    if (o.output.empty()) {
        fmt::print("{}", text);
        return 0;
    }
    // A file the user names, wherever they keep it (a /tmp file too): its
    // temporary is still made exclusively.
    const bool wrote = cdi::write_if_changed(o.output, text, false);
    fmt::print(stderr, "{} {}\n", o.output.string(), wrote ? "written" : "unchanged");
    return 0;
}

int refresh(const CdiOptions& o) {
    const config::Config config = cdi_config(o);
    const auto changed = cdi::refresh(cdi_node(config, o, true), config);
    for (const auto& f : changed) fmt::print("{}\n", f.string());
    return 0;
}

int remove(const CdiOptions& o) {
    for (const auto& f : cdi::remove(cdi_config(o))) fmt::print("{}\n", f.string());
    return 0;
}

int list(const CdiOptions& o) {
    std::vector<std::string> names;
    if (o.specs.empty()) {
        const config::Config config = cdi_config(o);
        const node::Node node = cdi_node(config, o, false);
        names = cdi::device_names(cdi::gpu_spec(node, config));
        if (auto imex = cdi::imex_spec(node, config))
            for (auto& n : cdi::device_names(*imex)) names.push_back(std::move(n));
        for (const auto& f : config.families)
            if (auto spec = cdi::family_spec(node, config, f.name))
                for (auto& n : cdi::device_names(*spec)) names.push_back(std::move(n));
    } else {
        for (const auto& file : o.specs) {
            const auto spec = cdi::parse_spec(util::read_file(file, cdi::kMaxSpecFileSize),
                                              file.extension() == ".yaml", file.string());
            for (auto& n : cdi::device_names(spec)) names.push_back(std::move(n));
        }
    }
    std::string text;
    for (const auto& n : names) text += n + "\n";
    fmt::print("{}", text);
    return 0;
}

// Every spec in [cdi] spec-dirs (or the files named) against this node now.
int check(const CdiOptions& o) {
    // In a child with a deadline, as doctor's groups: a spec naming a path on
    // a hung mount never hangs the command.
    const config::Config config = cdi_config(o);
    doctor::Report report;
    report.checks = doctor::run_bounded(
        "cdi-specs",
        [&] { return doctor::check_cdi_specs(doctor::gather_cdi_specs(config, o.specs)); },
        std::chrono::milliseconds(static_cast<long>(o.timeout * 1000)));
    if (o.json) {
        const nlohmann::json j = report;
        fmt::print("{}\n", j.dump(2));
    } else {
        fmt::print("{}", doctor::format_text(report));
    }
    if (std::fflush(stdout) != 0) util::throw_errno("write", "standard output");
    return doctor::exit_code(report);
}

}  // namespace

void register_cdi(CLI::App& app, Action& action) {
    auto o = std::make_shared<CdiOptions>();
    auto* cdi_cmd = app.add_subcommand("cdi", "Describe the node's GPUs as CDI specs");
    cdi_cmd->require_subcommand(1);

    auto* gen = cdi_cmd->add_subcommand("generate", "Print or write the node's CDI spec");
    add_node_options(*gen, o->node);
    gen->add_option("--format", o->format, "json (default) or yaml");
    gen->add_option("-o,--output", o->output,
                    "Write the spec to FILE atomically, only when it changed (default stdout)");
    gen->add_option("--hook-path", o->hook, "gpubind-hook's path in the spec (default [cdi] hook)");
    gen->add_flag("--imex", o->imex, "The IMEX channels' spec (<vendor>/imex-channel)");
    gen->add_option("--family", o->family,
                    "A device family's spec (its cdi-kind: nvidia.com/mofed, nvidia.com/gds, ...)");
    gen->callback([o, &action] { action = [o] { return generate(*o); }; });

    auto* ref = cdi_cmd->add_subcommand(
        "refresh", "Rewrite the node's specs under [cdi] dir where they changed; print those");
    add_node_options(*ref, o->node);
    ref->add_option("--dir", o->dir, "Directory to write to (default [cdi] dir)");
    ref->add_option("--hook-path", o->hook, "gpubind-hook's path in the spec (default [cdi] hook)");
    ref->callback([o, &action] { action = [o] { return refresh(*o); }; });

    auto* rm =
        cdi_cmd->add_subcommand("remove", "Remove the node's specs from [cdi] dir; print those");
    add_node_options(*rm, o->node);
    rm->add_option("--dir", o->dir, "Directory to remove them from (default [cdi] dir)");
    rm->callback([o, &action] { action = [o] { return remove(*o); }; });

    auto* ls = cdi_cmd->add_subcommand("list", "Print the CDI device names the node's specs offer");
    add_node_options(*ls, o->node);
    ls->add_option("--spec", o->specs, "Spec files to read instead of the node (JSON or .yaml)");
    ls->callback([o, &action] { action = [o] { return list(*o); }; });

    auto* chk = cdi_cmd->add_subcommand(
        "check",
        "Check every CDI spec of [cdi] spec-dirs (or FILEs), whoever wrote it, against "
        "this node; exit 5 on a problem");
    add_node_options(*chk, o->node);
    chk->add_option("files", o->specs, "Spec files to check instead ([cdi] spec-dirs)");
    chk->add_flag("--json", o->json,
                  "JSON output (schema gpubind.doctor/v1, docs/doctor.schema.json)");
    chk->add_option("--timeout", o->timeout, "Seconds the checks may take (default 10)")
        ->check(CLI::Range(0.1, 3600.0));
    chk->callback([o, &action] { action = [o] { return check(*o); }; });
}

}  // namespace gpubind::cli
