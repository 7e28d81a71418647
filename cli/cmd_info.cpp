// gpubind info: the driver and its GPUs, as text, CSV or JSON; with
// --topology, where each GPU sits (PCIe, NUMA) and its nearest HCAs and NVMe.
#include <cstdio>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/decide/mps.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/node/nvlink.hpp"
#include "gpubind/node/sysfs.hpp"
#include "gpubind/node/topology.hpp"
#include "gpubind/start/start.hpp"

namespace gpubind::cli {

namespace {

struct InfoOptions {
    NodeOptions node;
    bool csv = false;
    bool json = false;
    bool refresh = false;
    bool topology = false;
};

const char* nvml_status(node::NvmlStatus s) {
    switch (s) {
        case node::NvmlStatus::NotAsked:
            return "not-asked";
        case node::NvmlStatus::Answered:
            return "answered";
        case node::NvmlStatus::Failed:
            return "failed";
    }
    return "";
}

std::string age(std::int64_t at) {
    const std::int64_t s = static_cast<std::int64_t>(std::time(nullptr)) - at;
    return s < 120 ? fmt::format("{} s ago", s) : fmt::format("{} min ago", s / 60);
}

// Where the facts come from and how old they are.
void print_source(const node::NodeKnowledge& k) {
    fmt::print("Description:      {} ({}, computed {})\n", k.path.string(),
               !k.stored                      ? "in memory only"
               : k.recomputed || k.nvml_asked ? "written now"
                                              : "read",
               age(k.computed_at));
    if (!k.recomputed)
        fmt::print("                  fingerprint of the driver state matches\n");
    else if (!k.why.empty())
        fmt::print("                  recomputed: {}\n", k.why);
    if (k.nvml.status == node::NvmlStatus::Answered)
        fmt::print("NVML:             answered {} (took {} ms)\n", age(k.nvml.asked_at),
                   k.nvml.took_ms);
    else if (k.nvml.status == node::NvmlStatus::Failed)
        fmt::print("NVML:             failed {} (after {} ms): {}\n", age(k.nvml.asked_at),
                   k.nvml.took_ms, k.nvml.error);
    else
        fmt::print("NVML:             not asked\n");
}

std::string or_unknown(const std::string& s) {
    return s.empty() ? "unknown" : s;
}

// IMEX channel numbers with consecutive runs folded: "0-3, 7".
std::string channel_ranges(const std::vector<node::DeviceNode>& channels) {
    std::string out;
    for (std::size_t i = 0; i < channels.size();) {
        std::size_t j = i;
        while (j + 1 < channels.size() && channels[j + 1].minor == channels[j].minor + 1) ++j;
        out += (out.empty() ? "" : ", ") + std::to_string(channels[i].minor);
        if (j > i) out += "-" + std::to_string(channels[j].minor);
        i = j + 1;
    }
    return out;
}

void print_text(const node::Node& node, const std::filesystem::path& mps_root) {
    fmt::print("Driver version:   {}\n", node.driver_version);
    fmt::print("CUDA version:     {}\n", or_unknown(node.cuda_version));
    fmt::print("GPUs:             {}\n", node.gpus.size());
    if (!node.imex_channels.empty())
        fmt::print("IMEX channels:    {}\n", channel_ranges(node.imex_channels));
    for (const auto& gpu : node.gpus) {
        fmt::print("\nGPU {}\n", gpu.index);
        fmt::print("  Model:          {}\n", gpu.model);
        fmt::print("  Brand:          {}\n", or_unknown(gpu.brand));
        fmt::print("  UUID:           {}\n", gpu.uuid);
        fmt::print("  Bus location:   {}\n", gpu.pci_bus_id);
        fmt::print("  Device minor:   {}\n", gpu.minor);
        fmt::print("  Architecture:   {}\n", or_unknown(gpu.compute_capability));
        fmt::print("  Memory:         {}\n",
                   gpu.memory ? decide::size_text(gpu.memory) : "unknown");
        for (const auto& mig : gpu.mig)
            fmt::print("  MIG {}:{}          GPU instance {}, compute instance {}, {}\n", gpu.index,
                       mig.index, mig.gi, mig.ci, or_unknown(mig.uuid));
    }
    const decide::ShareEnforcement shares = decide::share_enforcement(node);
    if (shares.by.empty())
        fmt::print("\nGPU shares:       not enforced: {}\n", shares.lacks);
    else if (shares.by == decide::kMps) {
        fmt::print("\nGPU shares:       memory and compute enforced by {}\n", shares.by);
        for (const auto& line : decide::mps_daemon_lines(node, mps_root))
            fmt::print("  {}\n", line);
    } else
        fmt::print("\nGPU shares:       memory enforced by {}\n", shares.by);
    for (const auto& w : node.warnings) fmt::print(stderr, "gpubind: warning: {}\n", w);
}

nlohmann::json share_json(const decide::ShareEnforcement& e) {
    if (e.by.empty()) return {{"enforced_by", nullptr}, {"why", e.lacks}};
    return {{"enforced_by", e.by}, {"why", ""}};
}

// CSV: a header row and one row per GPU; fields never contain commas but are
// quoted when they do (models are free text).
std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

void print_csv(const node::Node& node) {
    fmt::print("Driver version,CUDA version\n{},{}\n\n", node.driver_version,
               csv_field(node.cuda_version));
    fmt::print("Index,Minor,Model,Brand,UUID,Bus location,Architecture\n");
    for (const auto& gpu : node.gpus)
        fmt::print("{},{},{},{},{},{},{}\n", gpu.index, gpu.minor, csv_field(gpu.model),
                   csv_field(gpu.brand), gpu.uuid, gpu.pci_bus_id, gpu.compute_capability);
    bool any_mig = false;
    for (const auto& gpu : node.gpus) any_mig |= !gpu.mig.empty();
    if (!any_mig) return;
    fmt::print("\nGPU,MIG index,GPU instance,Compute instance,UUID\n");
    for (const auto& gpu : node.gpus)
        for (const auto& mig : gpu.mig)
            fmt::print("{},{},{},{},{}\n", gpu.index, mig.index, mig.gi, mig.ci, mig.uuid);
}

nlohmann::json to_json(const node::DeviceNode& n) {
    return {{"path", n.path}, {"host_path", n.host_path}, {"major", n.major}, {"minor", n.minor}};
}

void print_json(const node::NodeKnowledge& k) {
    const node::Node& node = k.node;
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& gpu : node.gpus) {
        nlohmann::json migs = nlohmann::json::array();
        for (const auto& mig : gpu.mig)
            migs.push_back({{"index", mig.index},
                            {"gpu_instance", mig.gi},
                            {"compute_instance", mig.ci},
                            {"uuid", mig.uuid},
                            {"devices", {to_json(mig.gi_cap), to_json(mig.ci_cap)}}});
        gpus.push_back({{"index", gpu.index},
                        {"minor", gpu.minor},
                        {"model", gpu.model},
                        {"brand", gpu.brand},
                        {"uuid", gpu.uuid},
                        {"pci_bus_id", gpu.pci_bus_id},
                        {"compute_capability", gpu.compute_capability},
                        {"memory", gpu.memory ? nlohmann::json(gpu.memory) : nlohmann::json()},
                        {"vbios", gpu.vbios},
                        {"device", to_json(gpu.node)},
                        {"mig", migs}});
    }
    nlohmann::json imex = nlohmann::json::array();
    for (const auto& c : node.imex_channels) {
        nlohmann::json j = to_json(c);
        j["channel"] = c.minor;
        imex.push_back(std::move(j));
    }
    nlohmann::json out = {{"schema", "gpubind.info/v1"},
                          {"driver_version", node.driver_version},
                          {"cuda_version", node.cuda_version},
                          {"gpus", gpus},
                          {"imex_channels", imex},
                          {"shares", share_json(decide::share_enforcement(node))},
                          {"warnings", node.warnings},
                          {"description",
                           {{"path", k.path.string()},
                            {"stored", k.stored},
                            {"recomputed", k.recomputed},
                            {"why", k.why},
                            {"computed_at", k.computed_at}}},
                          {"nvml",
                           {{"status", nvml_status(k.nvml.status)},
                            {"asked_at", k.nvml.asked_at},
                            {"took_ms", k.nvml.took_ms},
                            {"error", k.nvml.error}}}};
    fmt::print("{}\n", out.dump(2));
}

// --topology: the node's GPUs placed in the sys root's PCIe tree and the
// NVLink graph the description keeps.
void print_topology(const node::Node& node, const std::filesystem::path& sys, bool json) {
    const std::vector<node::sysfs::Hca> hcas = node::sysfs::hcas(sys);
    const std::vector<node::sysfs::Nvme> nvmes = node::sysfs::nvmes(sys);
    const std::vector<node::GpuTopology> gpus = node::read_topology(node, sys, hcas, nvmes);
    const node::NvlinkGraph graph = node::nvlink_graph(node.gpus);
    if (json) {
        fmt::print("{}\n", node::to_json(gpus, hcas, nvmes, node, graph).dump(2));
        return;
    }
    fmt::print("{}\n{}", node::matrix_text(gpus, hcas, node, graph),
               to_text(gpus, hcas, nvmes, sys));
}

}  // namespace

void register_info(CLI::App& app, Action& action) {
    auto opts = std::make_shared<InfoOptions>();
    auto* cmd = app.add_subcommand("info", "Show the driver and the GPUs of this node");
    add_node_options(*cmd, opts->node);
    auto* csv = cmd->add_flag("--csv", opts->csv, "Comma-separated output");
    cmd->add_flag("--topology", opts->topology,
                  "The GPUs' NVLink and PCIe matrix (as nvidia-smi topo -m), NVLink cliques, "
                  "where each GPU sits (NUMA node, CPUs, PCIe path) and its nearest HCAs and "
                  "NVMe (JSON with --json: schema gpubind.topology/v2)")
        ->excludes(csv);
    cmd->add_flag("--json", opts->json, "JSON output (schema gpubind.info/v1)")->excludes(csv);
    cmd->add_flag("--refresh", opts->refresh,
                  "Discover the node and ask NVML now, and rewrite the node description");
    cmd->callback([opts, &action] {
        action = [opts] {
            node::LoadOptions load = load_options(opts->node);
            load.need_nvml = true;  // the topology's NVLinks are NVML's too
            load.refresh = opts->refresh;
            const config::Config config = node_config(opts->node);
            const node::NodeKnowledge k = start::know_node(config, load);
            if (opts->topology)
                print_topology(k.node, config.roots.sys, opts->json);
            else if (opts->json)
                print_json(k);
            else if (opts->csv)
                print_csv(k.node);
            else {
                print_text(k.node, config.mps.root);
                fmt::print("\n");
                print_source(k);
            }
            return 0;
        };
    });
}

}  // namespace gpubind::cli
