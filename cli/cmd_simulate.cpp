// gpubind simulate: write a simulated node (device nodes, procfs and sysfs
// files, the fake driver, ld.so.cache) into a directory, for demos and tests
// without a GPU.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/platform.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cli {

namespace {

struct SimulateOptions {
    std::filesystem::path dir;
    sim::Spec spec;
    std::string mig;  // "GPU:GI:CI[,...]"
    bool no_compat32 = false, no_ipcs = false, no_firmware = false, no_graphics = false;
    bool json = false;
};

// "0:1:0,0:2:0" -> MIG specs; a bad field is a usage error naming it.
std::vector<sim::MigSpec> parse_mig(const std::string& text, unsigned gpus) {
    std::vector<sim::MigSpec> out;
    for (auto item : util::split(text, ',')) {
        item = util::trim(item);
        if (item.empty()) continue;
        auto fields = util::split(item, ':');
        std::optional<unsigned long> n[3];
        if (fields.size() == 3)
            for (std::size_t i = 0; i < 3; ++i) n[i] = util::parse_unsigned(util::trim(fields[i]));
        if (fields.size() != 3 || !n[0] || !n[1] || !n[2] || *n[0] > 0xffff || *n[1] > 0xffff ||
            *n[2] > 0xffff)
            throw CLI::ValidationError(
                "--mig", fmt::format("\"{}\" is not GPU:GI:CI (three numbers)", item));
        if (*n[0] >= gpus)
            throw CLI::ValidationError(
                "--mig", fmt::format("\"{}\": GPU {} does not exist, the node has {} (--gpus)",
                                     item, *n[0], gpus));
        out.push_back({static_cast<unsigned>(*n[0]), static_cast<unsigned>(*n[1]),
                       static_cast<unsigned>(*n[2])});
    }
    return out;
}

std::size_t count_files(const sim::Manifest& m, std::string_view kind) {
    return static_cast<std::size_t>(
        std::count_if(m.files.begin(), m.files.end(),
                      [&](const sim::ManifestFile& f) { return f.kind == kind; }));
}

void print_summary(const std::filesystem::path& dir, const sim::Manifest& m) {
    fmt::print("Simulated node written to {}\n", dir.string());
    fmt::print("  Driver {} (CUDA {}), {} x {}\n", m.spec.driver_version, m.cuda_version,
               m.gpus.size(), m.spec.model);
    for (const auto& gpu : m.gpus) {
        fmt::print("  GPU {}: {} {} /dev/nvidia{}\n", gpu.index, gpu.uuid, gpu.pci_bus_id,
                   gpu.minor);
        for (const auto& mig : m.migs)
            if (mig.gpu == gpu.index)
                fmt::print("    MIG gi {} ci {}: {}\n", mig.gi, mig.ci, mig.uuid);
    }
    if (m.spec.imex_channels > 0)
        fmt::print("  IMEX channels 0-{}: /dev/nvidia-caps-imex-channels/channel<n>\n",
                   m.spec.imex_channels - 1);
    for (const auto& hca : m.hcas)
        fmt::print("  HCA {}: {} {} (NUMA node {}, switch {})\n", hca.name, hca.pci_bus_id,
                   hca.uverbs.path, hca.numa_node, hca.switch_port);
    for (const auto& nvme : m.nvmes)
        fmt::print("  NVMe {}: {} (NUMA node {}, switch {})\n", nvme.name, nvme.pci_bus_id,
                   nvme.numa_node, nvme.switch_port);
    std::vector<std::string> families;
    for (const auto& f : m.family_nodes)
        if (std::find(families.begin(), families.end(), f.family) == families.end())
            families.push_back(f.family);
    fmt::print("  {} device nodes, {} libraries, {} binaries, {} ipcs, {} firmware files\n",
               m.nodes.size(), count_files(m, "library"), count_files(m, "binary"),
               count_files(m, "ipc"), count_files(m, "firmware"));
    if (!families.empty())
        fmt::print("  {} device family nodes ({})\n", m.family_nodes.size(),
                   fmt::join(families, ", "));
    fmt::print("  Manifest: {}\n", (dir / sim::kManifestName).string());
    fmt::print("  Roots: driver and dev {}, proc {}, sys {}\n", dir.string(),
               (dir / "proc").string(), m.sys_root);
    fmt::print(
        "  Use it with: gpubind info --root {} (or in a config, [node] driver-root, "
        "dev-root, proc-root and sys-root)\n",
        dir.string());
}

}  // namespace

void register_simulate(CLI::App& app, Action& action) {
    auto o = std::make_shared<SimulateOptions>();
    auto* cmd = app.add_subcommand(
        "simulate", "Write a simulated NVIDIA node (needs root to make device nodes)");
    cmd->add_option("dir", o->dir,
                    "Directory to write it to: missing, empty, or a previous simulated node")
        ->required();
    auto* gpus = cmd->add_option("--gpus", o->spec.gpus, "Number of GPUs")
                     ->check(CLI::Range(1u, 64u))
                     ->default_str(std::to_string(o->spec.gpus));
    cmd->add_option("--driver-version", o->spec.driver_version, "Driver version")
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
                bool ok = !v.empty() && v.front() != '.' && v.back() != '.' &&
                          v.find("..") == std::string::npos && v.find('.') != std::string::npos &&
                          std::all_of(v.begin(), v.end(),
                                      [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
                return ok ? std::string() : "not numbers separated by dots (like 550.54.15)";
            },
            "VERSION"))
        ->default_str(o->spec.driver_version);
    auto* model =
        cmd->add_option("--model", o->spec.model, "GPU model name")->default_str(o->spec.model);
    cmd->add_option("--topology", o->spec.topology,
                    "The NVLink topology the fake NVML reports: hgx8, hgx8-degraded, pcie-pairs, "
                    "dgx1, gh200, nvml-without-nvlink (sets --gpus and --model when not given)")
        ->check(CLI::IsMember(
            std::vector<std::string>(std::begin(sim::kTopologies), std::end(sim::kTopologies))));
    cmd->add_option("--mig", o->mig,
                    "MIG devices to create, as GPU:GI:CI (GPU index, GPU instance id 0-14, "
                    "compute instance id 0-7), comma separated");
    cmd->add_flag("--no-compat32", o->no_compat32,
                  "Leave out the 32-bit libraries (an arm64 node has none)");
    cmd->add_flag("--no-ipcs", o->no_ipcs, "Leave out the daemons' sockets and the MPS directory");
    cmd->add_flag("--no-firmware", o->no_firmware, "Leave out the GSP firmware");
    cmd->add_flag("--no-graphics", o->no_graphics,
                  "Leave out the video, graphics and NGX libraries (a compute-only node)");
    cmd->add_option("--imex-channels", o->spec.imex_channels,
                    "Number of IMEX channel nodes (/dev/nvidia-caps-imex-channels/channel<n>)")
        ->check(CLI::Range(0u, sim::kMaxImexChannels))
        ->default_str(std::to_string(o->spec.imex_channels));
    cmd->add_option("--prefix", o->spec.prefix,
                    "Install the driver in a prefix of its own, as GPU sandboxes do (e.g. "
                    "usr/local/nvidia: lib64/, lib/ and bin/ there, shell wrappers in usr/bin)");
    cmd->add_option("--ldconfig", o->spec.ldconfig,
                    "The ldconfig that builds the node's ld.so.cache (default: the system's; "
                    "for an arm64 node on an x86 machine, an arm64 one run through qemu)");
    cmd->add_option("--hcas", o->spec.hcas,
                    "Number of InfiniBand HCAs (mlx5_<n>: sysfs entries, /dev/infiniband nodes)")
        ->check(CLI::Range(0u, sim::kMaxHcas))
        ->default_str(std::to_string(o->spec.hcas));
    cmd->add_option("--nvmes", o->spec.nvmes, "Number of NVMe controllers (nvme<n>, in sysfs)")
        ->check(CLI::Range(0u, sim::kMaxNvmes))
        ->default_str(std::to_string(o->spec.nvmes));
    cmd->add_flag("--nvswitch", o->spec.nvswitch,
                  "Add 4 NVSwitches' nodes (/dev/nvidia-nvswitchctl, /dev/nvidia-nvswitch<n>)");
    cmd->add_flag("--gds", o->spec.gds,
                  "Add GPUDirect Storage: /dev/nvidia-fs<n> (16) and /etc/cufile.json");
    cmd->add_flag("--gdrcopy", o->spec.gdrcopy, "Add gdrcopy's /dev/gdrdrv");
    cmd->add_flag("--memory-limits", o->spec.memory_limits,
                  "The driver offers the per-cgroup GPU memory limit (NVML's "
                  "nvmlDeviceSetMemoryLimits_v1)");
    cmd->add_flag("--mps", o->spec.mps,
                  "The driver has MPS: a fake nvidia-cuda-mps-control daemon (without it, "
                  "no MPS programs)");
    cmd->add_flag("--drm", o->spec.drm,
                  "Add each GPU's DRM nodes (/dev/dri/card<i>, renderD<128+i>, by-path links)");
    cmd->add_flag("--json", o->json, "Print the manifest as JSON");
    cmd->callback([o, gpus, model, &action] {
        const std::string& t = o->spec.topology;
        if (gpus->count() == 0 && sim::topology_gpus(t) != 0) o->spec.gpus = sim::topology_gpus(t);
        if (model->count() == 0) {
            if (t == "dgx1") o->spec.model = "Tesla V100-SXM2-32GB";
            if (t == "pcie-pairs") o->spec.model = "NVIDIA A100 80GB PCIe";
            if (t == "gh200") o->spec.model = "NVIDIA GH200 480GB";
        }
        o->spec.mig = parse_mig(o->mig, o->spec.gpus);
        o->spec.compat32 = util::platform::kHasCompat32 && !o->no_compat32;
        o->spec.ipcs = !o->no_ipcs;
        o->spec.firmware = !o->no_firmware;
        o->spec.graphics = !o->no_graphics;
        action = [o] {
            sim::Manifest manifest = sim::simulate(o->dir, o->spec);
            if (o->json) {
                nlohmann::json j = manifest;
                fmt::print("{}\n", j.dump(2));
            } else {
                print_summary(std::filesystem::absolute(o->dir), manifest);
            }
            return 0;
        };
    });
}

}  // namespace gpubind::cli
