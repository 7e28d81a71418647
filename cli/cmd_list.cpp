// gpubind list: the host files a container would get, one path per line or JSON.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cli {

namespace {

struct ListOptions {
    NodeOptions node;
    std::string device;                 // --device ids; empty: all
    std::string capabilities = "all";   // which driver files
    std::string imex_channels = "all";  // NVIDIA_IMEX_CHANNELS syntax
    bool libraries = false, binaries = false, ipcs = false, firmwares = false;
    bool compat32 = false, mig_config = false, mig_monitor = false, json = false;
    std::vector<std::string> families;  // --family NAME[=all|affine|devices]
};

struct Listing {
    std::vector<const node::DeviceNode*> devices;
    std::vector<const node::DriverFile*> files;
    decide::FamilyItems families;  // what --family asks, for the GPUs listed
};

// --family NAME[=VALUE]: the family's devices a container given the listed
// GPUs would get, VALUE as the family's selecting variable reads it (default all).
decide::Request family_request(const std::vector<std::string>& args, const config::Config& config) {
    decide::Request req;
    for (const auto& arg : args) {
        const auto eq = arg.find('=');
        const std::string name = arg.substr(0, eq);
        const config::Family* family = config.family(name);
        if (!family)
            util::throw_invalid("parse arguments", "--family",
                                "no family " + name + " in the config");
        // Read as a container's selecting variable would be.
        config::Family only = *family;
        only.variables.clear();
        only.caps = 0;
        only.select = "GPUBIND_LIST_FAMILY";
        decide::oci::Spec spec;
        spec.env = {
            "NVIDIA_VISIBLE_DEVICES=none",
            "GPUBIND_LIST_FAMILY=" + (eq == std::string::npos ? "all" : arg.substr(eq + 1))};
        for (auto fr : decide::read_request(spec, config::Policy{}, {only}).families) {
            fr.asked_by = "--family " + arg;
            req.families.push_back(std::move(fr));
        }
    }
    return req;
}

Listing make_listing(const node::Node& node, const config::Config& config, const ListOptions& o,
                     config::Capabilities caps) {
    const bool any_kind = o.libraries || o.binaries || o.ipcs || o.firmwares;
    const bool want_devices = !any_kind || !o.device.empty();
    Listing out;
    if (want_devices) {
        node::DeviceIds ids = node::parse_device_ids(o.device.empty() ? "all" : o.device);
        node::Selection sel = node::select_devices(node, ids);
        for (const auto& n : node.control) out.devices.push_back(&n);
        for (const node::Gpu* gpu : sel.gpus) out.devices.push_back(&gpu->node);
        for (const node::MigDevice* mig : sel.migs) {
            const node::DeviceNode* parent = &node.gpus[mig->gpu_index].node;
            if (std::find(out.devices.begin(), out.devices.end(), parent) == out.devices.end())
                out.devices.push_back(parent);
            out.devices.push_back(&mig->gi_cap);
            out.devices.push_back(&mig->ci_cap);
        }
        if (o.mig_config && !node.mig_control.empty()) out.devices.push_back(&node.mig_control[0]);
        if (o.mig_monitor && node.mig_control.size() > 1)
            out.devices.push_back(&node.mig_control[1]);
        for (const node::DeviceNode* c : node::select_imex_channels(
                 node,
                 decide::parse_imex_channels(o.imex_channels, "--imex-channels", "command line")))
            out.devices.push_back(c);
        std::vector<const node::Gpu*> gpus;
        for (const auto& gpu : node.gpus)
            if (std::find(out.devices.begin(), out.devices.end(), &gpu.node) != out.devices.end())
                gpus.push_back(&gpu);
        if (!o.families.empty())
            out.families =
                decide::plan_families(family_request(o.families, config), node, gpus, config);
        for (const auto& d : out.families.devices) out.devices.push_back(&d.node);
    }
    for (const auto& f : node.files) {
        if (!(f.caps & caps)) continue;
        if (f.compat32 && !o.compat32) continue;
        bool want = !any_kind || (f.kind == node::FileKind::Library && o.libraries) ||
                    (f.kind == node::FileKind::Binary && o.binaries) ||
                    (f.kind == node::FileKind::Ipc && o.ipcs) ||
                    (f.kind == node::FileKind::Firmware && o.firmwares);
        if (want) out.files.push_back(&f);
    }
    return out;
}

const char* kind_key(node::FileKind k) {
    switch (k) {
        case node::FileKind::Library:
            return "libraries";
        case node::FileKind::Binary:
            return "binaries";
        case node::FileKind::Ipc:
            return "ipcs";
        case node::FileKind::Firmware:
            return "firmware";
    }
    return "files";
}

nlohmann::json caps_json(config::Capabilities caps) {
    nlohmann::json out = nlohmann::json::array();
    std::string names = config::capability_names(caps & ~config::kCapCompat32);
    std::size_t start = 0;
    while (start < names.size()) {
        auto comma = names.find(',', start);
        if (comma == std::string::npos) comma = names.size();
        out.push_back(names.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

void print_json(const Listing& l) {
    nlohmann::json out = {
        {"schema", "gpubind.list/v1"},          {"devices", nlohmann::json::array()},
        {"libraries", nlohmann::json::array()}, {"binaries", nlohmann::json::array()},
        {"ipcs", nlohmann::json::array()},      {"firmware", nlohmann::json::array()}};
    for (const auto* d : l.devices) {
        nlohmann::json j = {{"path", d->path},
                            {"host_path", d->host_path},
                            {"major", d->major},
                            {"minor", d->minor}};
        if (gpubind::util::dir_name(d->path) == "/dev/nvidia-caps-imex-channels")
            j["imex_channel"] = d->minor;
        for (const auto& f : l.families.devices)
            if (&f.node == d) j["family"] = f.why;
        out["devices"].push_back(std::move(j));
    }
    if (!l.families.files.empty() || !l.families.links.empty()) {
        out["family_files"] = nlohmann::json::array();
        for (const auto& m : l.families.files)
            out["family_files"].push_back(
                {{"path", m.source}, {"target", m.target}, {"why", m.why}});
        out["family_links"] = nlohmann::json::array();
        for (const auto& s : l.families.links)
            out["family_links"].push_back({{"path", s.path}, {"target", s.target}});
    }
    for (const auto* f : l.files) {
        nlohmann::json j = {{"name", f->name},
                            {"path", f->host_path},
                            {"real_path", f->real_path},
                            {"capabilities", caps_json(f->caps)}};
        if (f->kind == node::FileKind::Library) j["compat32"] = f->compat32;
        out[kind_key(f->kind)].push_back(std::move(j));
    }
    fmt::print("{}\n", out.dump(2));
}

void print_text(const Listing& l) {
    std::string text;
    for (const auto* d : l.devices) text += d->host_path + "\n";
    for (const auto& m : l.families.files) text += m.source + "\n";
    for (const auto* f : l.files)
        text += (f->kind == node::FileKind::Library ? f->real_path : f->host_path) + "\n";
    fmt::print("{}", text);
}

}  // namespace

void register_list(CLI::App& app, Action& action) {
    auto o = std::make_shared<ListOptions>();
    auto* cmd = app.add_subcommand(
        "list", "List the host's device nodes and driver files a container would get");
    add_node_options(*cmd, o->node);
    cmd->add_option("-d,--device", o->device,
                    "Devices to list: all, none, indices, GPU-<uuid>, MIG-<uuid>, G:M, PCI bus "
                    "ids (default all)");
    cmd->add_option("-c,--capabilities", o->capabilities,
                    "Driver capabilities whose files to list (default all)");
    cmd->add_flag("-l,--libraries", o->libraries, "List the driver libraries");
    cmd->add_flag("-b,--binaries", o->binaries, "List the driver utilities");
    cmd->add_flag("-i,--ipcs", o->ipcs, "List the driver IPC sockets and directories");
    cmd->add_flag("-f,--firmwares", o->firmwares, "List the driver firmware");
    add_compat32_flag(*cmd, o->compat32, "Include the 32-bit libraries");
    cmd->add_flag("--mig-config", o->mig_config, "Include the MIG config capability node");
    cmd->add_flag("--mig-monitor", o->mig_monitor, "Include the MIG monitor capability node");
    cmd->add_option("--imex-channels", o->imex_channels,
                    "IMEX channels whose nodes to list with the devices: all, none or channel "
                    "numbers, comma separated (default all)");
    cmd->add_option("--family", o->families,
                    "Device family whose nodes to list with the devices, for the GPUs listed: "
                    "NAME or NAME=SELECTION (all, affine, device names; default all); repeatable");
    cmd->add_flag("--json", o->json, "JSON output (schema gpubind.list/v1)");
    cmd->callback([o, &action] {
        action = [o] {
            std::string unknown;
            auto caps = config::parse_capabilities(o->capabilities, &unknown);
            if (!caps)
                util::throw_invalid("parse capabilities", "--capabilities",
                                    "unknown capability \"" + unknown + "\"");
            node::LoadOptions load = load_options(o->node);
            // NVML is needed only to resolve MIG UUIDs.
            load.need_nvml = o->device.find("MIG-") != std::string::npos ||
                             o->device.find("mig-") != std::string::npos;
            const config::Config config = node_config(o->node);
            const node::Node node = start::know_node(config, load).node;
            Listing listing = make_listing(node, config, *o, *caps);
            if (o->json)
                print_json(listing);
            else
                print_text(listing);
            return 0;
        };
    });
}

}  // namespace gpubind::cli
