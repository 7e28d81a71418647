// The simulated node: see gpubind/sim.hpp for what it holds.
#include "gpubind/sim/sim.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fake_node.h"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "sim_writer.hpp"

namespace gpubind::sim {

namespace {

namespace fs = std::filesystem;
using detail::Writer;

// NVIDIA's fixed device numbers.
constexpr unsigned kFrontendMajor = 195;
constexpr unsigned kCtlMinor = 255;
constexpr unsigned kModesetMinor = 254;

// The driver's nvidia-caps minors (its capability table, in order): fabric-mgmt
// 0, mig config 1, mig monitor 2, then for each of 32 GPU minors and 15 GPU
// instances: the instance's access and its 8 compute instances' access.
constexpr unsigned kCapConfigMinor = 1;
constexpr unsigned kCapMonitorMinor = 2;
constexpr unsigned kCapsPerGi = 1 + FAKE_MIG_MAX_CI;
constexpr unsigned kCapsPerGpu = FAKE_MIG_MAX_GI * kCapsPerGi;
constexpr unsigned gi_cap_minor(unsigned gpu_minor, unsigned gi) {
    return 3 + gpu_minor * kCapsPerGpu + gi * kCapsPerGi;
}
constexpr unsigned ci_cap_minor(unsigned gpu_minor, unsigned gi, unsigned ci) {
    return gi_cap_minor(gpu_minor, gi) + 1 + ci;
}
// Permission bits the driver gives these capabilities (DeviceFileMode).
constexpr mode_t kCapConfigMode = 0400;
constexpr mode_t kCapMonitorMode = 0444;
constexpr mode_t kCapAccessMode = 0444;

constexpr unsigned kMaxGpus = 64;

// PCI buses of an 8-GPU HGX baseboard; GPU i sits on bus kBuses[i % 8] of
// PCI domain i / 8, so bus ids are distinct and ascend with the index.
constexpr unsigned kBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

// The module parameters /proc/driver/nvidia/params lists, in the driver's
// order, with its defaults.
constexpr std::pair<std::string_view, std::string_view> kParams[] = {
    {"ResmanDebugLevel", "4294967295"},
    {"RmLogonRC", "1"},
    {"ModifyDeviceFiles", "1"},
    {"DeviceFileUID", "0"},
    {"DeviceFileGID", "0"},
    {"DeviceFileMode", "438"},
    {"InitializeSystemMemoryAllocations", "1"},
    {"UsePageAttributeTable", "4294967295"},
    {"EnableMSI", "1"},
    {"RegisterForACPIEvents", "1"},
    {"EnablePCIeGen3", "0"},
    {"MemoryPoolSize", "0"},
    {"KMallocHeapMaxSize", "0"},
    {"VMallocHeapMaxSize", "0"},
    {"IgnoreMMIOCheck", "0"},
    {"TCEBypassMode", "0"},
    {"EnableStreamMemOPs", "0"},
    {"EnableUserNUMAManagement", "1"},
    {"NvLinkDisable", "0"},
    {"RmProfilingAdminOnly", "1"},
    {"PreserveVideoMemoryAllocations", "0"},
    {"EnableS0ixPowerManagement", "0"},
    {"S0ixPowerManagementVideoMemoryThreshold", "256"},
    {"DynamicPowerManagement", "3"},
    {"DynamicPowerManagementVideoMemoryThreshold", "200"},
    {"RegisterPCIDriver", "1"},
    {"EnablePCIeRelaxedOrderingMode", "0"},
    {"EnableGpuFirmware", "18"},
    {"EnableGpuFirmwareLogs", "2"},
    {"EnableDbgBreakpoint", "0"},
    {"OpenRmEnableUnsupportedGpus", "0"},
    {"RegistryDwords", "\"\""},
    {"RegistryDwordsPerDevice", "\"\""},
    {"RmMsg", "\"\""},
    {"GpuBlacklist", "\"\""},
    {"TemporaryFilePath", "\"\""},
    {"ExcludedGpus", "\"\""},
};

// Character devices a typical host lists besides NVIDIA's (all below 195,
// so never in the way of the dynamic majors chosen below).
constexpr std::pair<unsigned, std::string_view> kOtherCharDevices[] = {
    {1, "mem"},      {4, "/dev/vc/0"},    {4, "tty"},       {4, "ttyS"},
    {5, "/dev/tty"}, {5, "/dev/console"}, {5, "/dev/ptmx"}, {7, "vcs"},
    {10, "misc"},    {13, "input"},       {21, "sg"},       {29, "fb"},
    {128, "ptm"},    {136, "pts"},        {180, "usb"},     {189, "usb_device"},
};
constexpr std::string_view kBlockDevices =
    "  7 loop\n  8 sd\n  9 md\n 11 sr\n 65 sd\n 66 sd\n 67 sd\n259 blkext\n";

// ---------------------------------------------------------------------------
// Validation

void check_spec(const Spec& spec) {
    const std::string what = "simulated node spec";
    detail::check_topology(spec);
    if (spec.gpus < 1 || spec.gpus > kMaxGpus)
        util::throw_invalid("simulate", what,
                            fmt::format("gpus must be 1 to {}, not {}", kMaxGpus, spec.gpus));
    const auto& v = spec.driver_version;
    bool version_ok =
        !v.empty() && v.size() <= 32 && v.front() != '.' && v.back() != '.' &&
        v.find("..") == std::string::npos && v.find('.') != std::string::npos &&
        std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
    if (!version_ok)
        util::throw_invalid("simulate", what,
                            fmt::format("driver version \"{}\" is not numbers separated by dots "
                                        "(like 550.54.15)",
                                        v));
    const auto& m = spec.model;
    bool model_ok = !m.empty() && m.size() < 96 && util::trim(m) == m &&
                    std::none_of(m.begin(), m.end(), [](char c) {
                        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                    });
    if (!model_ok)
        util::throw_invalid("simulate", what,
                            fmt::format("model \"{}\" must be 1 to 95 printable characters without "
                                        "surrounding blanks",
                                        m));
    const auto& prefix = spec.prefix;
    bool prefix_ok = prefix.size() < 128;
    if (!prefix.empty())
        for (const auto& part : util::split(prefix, '/'))
            prefix_ok = prefix_ok && !part.empty() && part != "." && part != ".." &&
                        std::all_of(part.begin(), part.end(), [](char c) {
                            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                   c == '_' || c == '-';
                        });
    if (!prefix_ok)
        util::throw_invalid(
            "simulate", what,
            fmt::format("prefix \"{}\" is not a relative path of names made of letters, "
                        "digits, '.', '_' and '-'",
                        prefix));
    if (!spec.ldconfig.empty() && spec.ldconfig.front() != '/')
        util::throw_invalid("simulate", what,
                            fmt::format("ldconfig \"{}\" is not an absolute path", spec.ldconfig));
    if (spec.compat32 && !util::platform::kHasCompat32)
        util::throw_invalid("simulate", what,
                            fmt::format("32-bit libraries: a {} node has none (no compat32)",
                                        util::platform::kMachine));
    std::set<std::tuple<unsigned, unsigned, unsigned>> seen;
    for (const auto& mig : spec.mig) {
        std::string id = fmt::format("{}:{}:{}", mig.gpu, mig.gi, mig.ci);
        if (mig.gpu >= spec.gpus)
            util::throw_invalid(
                "simulate", what,
                fmt::format("MIG device {}: GPU {} does not exist (the node has {})", id, mig.gpu,
                            spec.gpus));
        if (mig.gpu >= FAKE_MIG_MAX_GPU_MINORS)
            util::throw_invalid(
                "simulate", what,
                fmt::format("MIG device {}: the driver supports MIG on GPUs 0 to {} only", id,
                            FAKE_MIG_MAX_GPU_MINORS - 1));
        if (mig.gi >= FAKE_MIG_MAX_GI || mig.ci >= FAKE_MIG_MAX_CI)
            util::throw_invalid(
                "simulate", what,
                fmt::format("MIG device {}: GPU instance must be 0 to {} and compute "
                            "instance 0 to {}",
                            id, FAKE_MIG_MAX_GI - 1, FAKE_MIG_MAX_CI - 1));
        if (!seen.insert({mig.gpu, mig.gi, mig.ci}).second)
            util::throw_invalid("simulate", what, fmt::format("MIG device {} is listed twice", id));
    }
    if (spec.imex_channels > kMaxImexChannels)
        util::throw_invalid("simulate", what,
                            fmt::format("imex channels must be 0 to {}, not {}", kMaxImexChannels,
                                        spec.imex_channels));
    if (spec.hcas > kMaxHcas)
        util::throw_invalid("simulate", what,
                            fmt::format("hcas must be 0 to {}, not {}", kMaxHcas, spec.hcas));
    if (spec.nvmes > kMaxNvmes)
        util::throw_invalid("simulate", what,
                            fmt::format("nvmes must be 0 to {}, not {}", kMaxNvmes, spec.nvmes));
}

// ---------------------------------------------------------------------------

}  // namespace

namespace detail {

void Writer::make_node(std::string_view rel, unsigned major, unsigned minor, mode_t mode) const {
    fs::path path = at(rel);
    mkdirs(path.parent_path());
    if (::mknod(path.c_str(), S_IFCHR | mode, makedev(major, minor)) != 0) {
        if (errno == EPERM)
            throw util::Error(EPERM, "simulate", path.string(),
                              "making device nodes needs root (CAP_MKNOD)");
        util::throw_errno("mknod", path.string());
    }
    if (::chmod(path.c_str(), mode) != 0) util::throw_errno("chmod", path.string());
}

void Writer::node(std::string_view rel, unsigned major, unsigned minor, mode_t mode) {
    make_node(rel, major, minor, mode);
    manifest_.nodes.push_back({"/" + std::string(rel), major, minor});
}

// A unix socket left behind by bind(): what a listening daemon's looks like.
void Writer::socket(std::string_view rel) const {
    fs::path path = at(rel);
    mkdirs(path.parent_path());
    util::Fd dirfd = util::open_or_throw(path.parent_path(), O_PATH | O_DIRECTORY);
    // Bound through the directory's descriptor: the full path may be longer
    // than sun_path allows.
    std::string name = fmt::format("/proc/self/fd/{}/{}", dirfd.get(), path.filename().string());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (name.size() >= sizeof addr.sun_path) throw util::Error(ENAMETOOLONG, "bind", path.string());
    std::copy(name.begin(), name.end(), addr.sun_path);
    util::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) util::throw_errno("socket", path.string());
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        util::throw_errno("bind", path.string());
    // Anyone may connect, as to the daemons' own sockets.
    if (::fchmodat(dirfd.get(), path.filename().c_str(), 0777, 0) != 0)
        util::throw_errno("chmod", path.string());
}

// nvidia-uvm's, nvidia-caps', the IMEX channels', gdrdrv's, nvidia-fs' and
// nvidia-nvswitch's majors are dynamic: pick ones that no driver on this host
// holds, so that opening the nodes fails with ENXIO here.
void Writer::choose_majors() {
    std::set<unsigned> used = {kFrontendMajor, kMiscMajor, kDrmMajor, kInfinibandMajor};
    try {
        std::string text = util::read_file("/proc/devices", 1 << 16);
        bool chars = false;
        for (auto line : util::split(text, '\n')) {
            line = util::trim(line);
            if (line.empty()) continue;
            if (line.back() == ':') {
                chars = line == "Character devices:";
                continue;
            }
            auto number = util::parse_unsigned(line.substr(0, line.find(' ')));
            if (chars && number) used.insert(static_cast<unsigned>(*number));
        }
    } catch (const util::Error& e) {
        util::logger().warn(
            "simulate: cannot read this host's /proc/devices ({}); assuming majors "
            "235, 236 and 234 down to 200 are free",
            e.what());
    }
    std::vector<unsigned> candidates = {235, 236};
    for (unsigned m = 234; m >= 200; --m) candidates.push_back(m);
    for (unsigned m = 511; m >= 384; --m) candidates.push_back(m);
    std::vector<unsigned> free;
    for (unsigned m : candidates)
        if (!used.count(m) && std::find(free.begin(), free.end(), m) == free.end())
            free.push_back(m);
    if (free.size() < 6)
        throw util::Error(EBUSY, "simulate", "/proc/devices", "no free character device majors");
    uvm_major_ = free[0];
    caps_major_ = free[1];
    imex_major_ = free[2];
    gdrdrv_major_ = free[3];
    nvfs_major_ = free[4];
    nvswitch_major_ = free[5];
}

void Writer::gpus() {
    const Spec& spec = manifest_.spec;
    fake_model_facts facts = fake_model_lookup(spec.model.c_str());
    for (unsigned i = 0; i < spec.gpus; ++i) {
        char uuid[FAKE_UUID_SIZE];
        fake_gpu_uuid(i, spec.driver_version.c_str(), uuid, sizeof uuid);
        ManifestGpu gpu;
        gpu.index = i;
        gpu.minor = i;
        gpu.uuid = uuid;
        gpu.pci_bus_id = fmt::format("{:04x}:{:02x}:00.0", i / 8, kBuses[i % 8]);
        gpu.model = spec.model;
        gpu.brand = fake_brand_name(facts.brand);
        gpu.compute_capability = fmt::format("{}.{}", facts.cc_major, facts.cc_minor);
        manifest_.gpus.push_back(std::move(gpu));
    }
}

void Writer::mig() {
    std::vector<MigSpec> migs = manifest_.spec.mig;
    std::sort(migs.begin(), migs.end(), [](const MigSpec& a, const MigSpec& b) {
        return std::tie(a.gpu, a.gi, a.ci) < std::tie(b.gpu, b.gi, b.ci);
    });
    for (const auto& m : migs) {
        const ManifestGpu& gpu = manifest_.gpus.at(m.gpu);
        char uuid[FAKE_UUID_SIZE];
        fake_mig_uuid(gpu.uuid.c_str(), m.gi, m.ci, uuid, sizeof uuid);
        manifest_.migs.push_back({m.gpu, m.gi, m.ci, uuid, gi_cap_minor(gpu.minor, m.gi),
                                  ci_cap_minor(gpu.minor, m.gi, m.ci)});
    }
}

void Writer::proc_devices() const {
    std::vector<std::pair<unsigned, std::string_view>> chars(std::begin(kOtherCharDevices),
                                                             std::end(kOtherCharDevices));
    chars.emplace_back(kFrontendMajor, "nvidia-frontend");
    chars.emplace_back(uvm_major_, "nvidia-uvm");
    if (!manifest_.migs.empty()) chars.emplace_back(caps_major_, "nvidia-caps");
    if (manifest_.spec.imex_channels > 0)
        chars.emplace_back(imex_major_, "nvidia-caps-imex-channels");
    const Spec& spec = manifest_.spec;
    if (spec.drm) chars.emplace_back(kDrmMajor, "drm");
    if (spec.hcas > 0) {  // the kernel's order within a major: by first minor
        chars.emplace_back(kInfinibandMajor, "infiniband_mad");
        chars.emplace_back(kInfinibandMajor, "infiniband_verbs");
    }
    if (spec.gdrcopy) chars.emplace_back(gdrdrv_major_, "gdrdrv");
    if (spec.gds) chars.emplace_back(nvfs_major_, "nvidia-fs");
    if (spec.nvswitch) chars.emplace_back(nvswitch_major_, "nvidia-nvswitch");
    std::stable_sort(chars.begin(), chars.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string text = "Character devices:\n";
    for (const auto& [major, name] : chars) text += fmt::format("{:3} {}\n", major, name);
    text += "\nBlock devices:\n";
    text += kBlockDevices;
    write(at("proc/devices"), text, 0444);
}

std::string cap_file(unsigned minor, mode_t mode) {
    return fmt::format("DeviceFileMinor: {}\nDeviceFileMode: {}\nDeviceFileModify: 1\n", minor,
                       static_cast<unsigned>(mode));
}

void Writer::proc_driver() const {
    const Spec& spec = manifest_.spec;
    write(at("proc/driver/nvidia/version"),
          fmt::format("NVRM version: NVIDIA UNIX {} Kernel Module  {}  Tue Mar  5 22:23:56 "
                      "UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n",
                      util::platform::kMachine, spec.driver_version),
          0444);
    std::string params;
    for (const auto& [key, value] : kParams) params += fmt::format("{}: {}\n", key, value);
    write(at("proc/driver/nvidia/params"), params, 0444);
    write(at("proc/driver/nvidia/registry"), "Binary: \"\"\n", 0644);

    for (const auto& gpu : manifest_.gpus) {
        // The driver's own layout: "Key: <tabs> value".
        std::string info = fmt::format(
            "Model: \t\t {}\nIRQ:   \t\t {}\nGPU UUID: \t {}\nVideo BIOS: \t 96.00.99.00.01\n"
            "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
            "Bus Location: \t {}\nDevice Minor: \t {}\nGPU Excluded:\t No\n",
            gpu.model, 100 + gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.minor);
        write(at("proc/driver/nvidia/gpus/" + gpu.pci_bus_id + "/information"), info, 0444);
    }

    if (manifest_.migs.empty()) return;
    write(at("proc/driver/nvidia/capabilities/mig/config"),
          cap_file(kCapConfigMinor, kCapConfigMode), 0444);
    write(at("proc/driver/nvidia/capabilities/mig/monitor"),
          cap_file(kCapMonitorMinor, kCapMonitorMode), 0444);
    std::set<std::pair<unsigned, unsigned>> gis;
    for (const auto& m : manifest_.migs) {
        unsigned minor = manifest_.gpus.at(m.gpu).minor;
        std::string gi_dir =
            fmt::format("proc/driver/nvidia/capabilities/gpu{}/mig/gi{}", minor, m.gi);
        if (gis.insert({m.gpu, m.gi}).second)
            write(at(gi_dir + "/access"), cap_file(m.gi_cap_minor, kCapAccessMode), 0444);
        write(at(fmt::format("{}/ci{}/access", gi_dir, m.ci)),
              cap_file(m.ci_cap_minor, kCapAccessMode), 0444);
    }
    // The driver lists every capability it can ever create, used or not.
    std::string minors = fmt::format("config {}\nmonitor {}\n", kCapConfigMinor, kCapMonitorMinor);
    for (unsigned g = 0; g < FAKE_MIG_MAX_GPU_MINORS; ++g)
        for (unsigned gi = 0; gi < FAKE_MIG_MAX_GI; ++gi) {
            minors += fmt::format("gpu{}/gi{}/access {}\n", g, gi, gi_cap_minor(g, gi));
            for (unsigned ci = 0; ci < FAKE_MIG_MAX_CI; ++ci)
                minors +=
                    fmt::format("gpu{}/gi{}/ci{}/access {}\n", g, gi, ci, ci_cap_minor(g, gi, ci));
        }
    write(at("proc/driver/nvidia-caps/mig-minors"), minors, 0444);
}

Manifest Writer::run() {
    const Spec& spec = manifest_.spec;
    int cuda = fake_cuda_version(fake_driver_major(spec.driver_version.c_str()));
    manifest_.cuda_version = fmt::format("{}.{}", cuda / 1000, (cuda % 1000) / 10);
    choose_majors();
    choose_misc_minor();
    manifest_.sys_root = at("sys").string();
    gpus();
    mig();
    pci_layout();

    // Device nodes first: without CAP_MKNOD nothing else gets written.
    for (const auto& gpu : manifest_.gpus)
        node(fmt::format("dev/nvidia{}", gpu.minor), kFrontendMajor, gpu.minor, 0666);
    struct statvfs fs_info {};
    if (::statvfs(dir_.c_str(), &fs_info) == 0 && (fs_info.f_flag & ST_NODEV) != 0)
        util::logger().warn(
            "simulate: {} is on a filesystem mounted nodev: its device nodes cannot "
            "be opened, so the fake driver will see no GPU there",
            dir_.string());
    node("dev/nvidiactl", kFrontendMajor, kCtlMinor, 0666);
    node("dev/nvidia-modeset", kFrontendMajor, kModesetMinor, 0666);
    node("dev/nvidia-uvm", uvm_major_, 0, 0666);
    node("dev/nvidia-uvm-tools", uvm_major_, 1, 0666);
    if (!manifest_.migs.empty()) {
        node(fmt::format("dev/nvidia-caps/nvidia-cap{}", kCapConfigMinor), caps_major_,
             kCapConfigMinor, kCapConfigMode);
        node(fmt::format("dev/nvidia-caps/nvidia-cap{}", kCapMonitorMinor), caps_major_,
             kCapMonitorMinor, kCapMonitorMode);
        std::set<unsigned> made;
        for (const auto& m : manifest_.migs)
            for (unsigned minor : {m.gi_cap_minor, m.ci_cap_minor})
                if (made.insert(minor).second)
                    node(fmt::format("dev/nvidia-caps/nvidia-cap{}", minor), caps_major_, minor,
                         kCapAccessMode);
    }

    for (unsigned n = 0; n < spec.imex_channels; ++n)
        node(fmt::format("dev/nvidia-caps-imex-channels/channel{}", n), imex_major_, n, 0666);
    families();

    proc_devices();
    proc_misc();
    proc_driver();
    sysfs();
    libraries();
    binaries();
    if (spec.ipcs) ipcs();
    if (spec.firmware) firmware();
    ldconfig();
    topology();
    if (spec.memory_limits) write(at("gpubind-fake-nvml/memory-limits"), "", 0644);

    nlohmann::json j = manifest_;
    write(at(kManifestName), j.dump(2) + "\n", 0644);
    return manifest_;
}

}  // namespace detail

namespace {

// Removes everything inside `dir` (never following symlinks).
void clear(const fs::path& dir) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code rm;
        fs::remove_all(it->path(), rm);
        if (rm) throw util::Error(rm.value(), "remove", it->path().string());
    }
    if (ec) throw util::Error(ec.value(), "read directory", dir.string());
}

}  // namespace

void to_json(nlohmann::json& j, const Manifest& m) {
    nlohmann::json mig = nlohmann::json::array();
    for (const auto& s : m.spec.mig) mig.push_back({{"gpu", s.gpu}, {"gi", s.gi}, {"ci", s.ci}});
    j = nlohmann::json::object();
    j["spec"] = {{"gpus", m.spec.gpus},
                 {"driver_version", m.spec.driver_version},
                 {"model", m.spec.model},
                 {"mig", mig},
                 {"compat32", m.spec.compat32},
                 {"ipcs", m.spec.ipcs},
                 {"firmware", m.spec.firmware},
                 {"graphics", m.spec.graphics},
                 {"imex_channels", m.spec.imex_channels},
                 {"hcas", m.spec.hcas},
                 {"nvmes", m.spec.nvmes},
                 {"nvswitch", m.spec.nvswitch},
                 {"gds", m.spec.gds},
                 {"gdrcopy", m.spec.gdrcopy},
                 {"drm", m.spec.drm},
                 {"memory_limits", m.spec.memory_limits},
                 {"mps", m.spec.mps},
                 {"prefix", m.spec.prefix},
                 {"topology", m.spec.topology}};
    j["cuda_version"] = m.cuda_version;
    j["gpus"] = nlohmann::json::array();
    for (const auto& g : m.gpus)
        j["gpus"].push_back({{"index", g.index},
                             {"minor", g.minor},
                             {"uuid", g.uuid},
                             {"pci_bus_id", g.pci_bus_id},
                             {"model", g.model},
                             {"brand", g.brand},
                             {"compute_capability", g.compute_capability},
                             {"numa_node", g.numa_node},
                             {"cpulist", g.cpulist},
                             {"bridges", g.bridges},
                             {"switch", g.switch_port}});
    j["migs"] = nlohmann::json::array();
    for (const auto& g : m.migs)
        j["migs"].push_back({{"gpu", g.gpu},
                             {"gi", g.gi},
                             {"ci", g.ci},
                             {"uuid", g.uuid},
                             {"gi_cap_minor", g.gi_cap_minor},
                             {"ci_cap_minor", g.ci_cap_minor}});
    j["nodes"] = nlohmann::json::array();
    for (const auto& n : m.nodes)
        j["nodes"].push_back({{"path", n.path}, {"major", n.major}, {"minor", n.minor}});
    j["files"] = nlohmann::json::array();
    for (const auto& f : m.files)
        j["files"].push_back({{"kind", f.kind},
                              {"name", f.name},
                              {"path", f.path},
                              {"real_path", f.real_path},
                              {"capability", f.capability},
                              {"compat32", f.compat32}});
    detail::families_to_json(j, m);
    j["topology"] = {{"nvlink_known", m.topology.nvlink_known},
                     {"nvlinks", m.topology.nvlinks},
                     {"cliques", m.topology.cliques},
                     {"fabric", m.topology.fabric},
                     {"matrix", m.topology.matrix}};
}

Manifest simulate(const fs::path& dir_arg, const Spec& spec) {
    check_spec(spec);
    if (dir_arg.empty()) util::throw_invalid("simulate", "", "no directory given");
    std::error_code ec;
    fs::path dir = fs::absolute(dir_arg, ec).lexically_normal();
    if (ec) throw util::Error(ec.value(), "simulate", dir_arg.string());
    if (dir.has_relative_path() && !dir.has_filename()) dir = dir.parent_path();
    if (dir == dir.root_path())
        util::throw_invalid("simulate", dir.string(), "refusing to write a simulated node at /");

    bool created = false;
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw util::Error(ENOTDIR, "simulate", dir.string(), "exists and is not a directory");
        struct stat manifest_st {};
        bool ours = ::lstat((dir / kManifestName).c_str(), &manifest_st) == 0 &&
                    S_ISREG(manifest_st.st_mode);
        if (ours) {
            util::logger().info("simulate: replacing the simulated node at {}", dir.string());
            clear(dir);
        } else if (!fs::is_empty(dir, ec) || ec) {
            throw util::Error(ENOTEMPTY, "simulate", dir.string(),
                              fmt::format("not empty and not a simulated node (no {}): refusing to "
                                          "write into it",
                                          kManifestName));
        }
    } else if (errno == ENOENT) {
        std::error_code mk;
        fs::create_directories(dir, mk);
        if (mk) throw util::Error(mk.value(), "mkdir", dir.string());
        created = true;
    } else {
        util::throw_errno("simulate", dir.string());
    }

    try {
        return Writer(dir, spec).run();
    } catch (...) {
        // Leave nothing half-written behind: the directory was empty or ours.
        std::error_code ignored;
        if (created)
            fs::remove_all(dir, ignored);
        else
            for (fs::directory_iterator it(dir, ignored), end; !ignored && it != end;
                 it.increment(ignored))
                fs::remove_all(it->path(), ignored);
        throw;
    }
}

}  // namespace gpubind::sim
