// The simulated node's sysfs tree (where its PCI devices sit, the HCAs, the
// NVMe controllers, the GPUs' DRM nodes) and the device families' nodes: see
// gpubind/sim/sim.hpp for the layout.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "sim_writer.hpp"

namespace gpubind::sim::detail {

namespace {

// The families' fixed minors and counts.
constexpr unsigned kUverbsBase = 192;  // uverbs<N>: 231:192+N
constexpr unsigned kIssmBase = 64;     // issm<N>: 231:64+N
constexpr unsigned kRenderBase = 128;  // renderD<128+i>: 226:128+i
constexpr unsigned kNvfsNodes = 16;
constexpr unsigned kNvswitches = 4;
constexpr unsigned kNvswitchCtlMinor = 255;

// PCI ids, as sysfs prints them.
struct PciIds {
    std::string_view vendor, device, pci_class;
};
constexpr PciIds kGpuIds = {"0x10de", "0x2330", "0x030200"};   // H100 SXM5: 3D controller
constexpr PciIds kHcaIds = {"0x15b3", "0x1021", "0x020700"};   // ConnectX-7: InfiniBand
constexpr PciIds kNvmeIds = {"0x144d", "0xa80a", "0x010802"};  // PM9A3: NVM Express
constexpr PciIds kRootPortIds = {"0x8086", "0x352a", "0x060400"};
constexpr PciIds kUpstreamIds = {"0x8086", "0x4fa0", "0x060400"};
constexpr PciIds kDownstreamIds = {"0x8086", "0x4fa1", "0x060400"};

// Host bridge buses: switch 0's; switch 1's when it has no GPU (else its
// first GPU's bus - 3: the GPU buses are at least 0x0f apart).
constexpr unsigned kSwitch0Bus = 0x10;
constexpr unsigned kSwitch1BusWithoutGpus = 0x80;
// NUMA node k's CPUs; switch k sits on node k.
constexpr std::string_view kCpulists[] = {"0-15", "16-31"};

// Misc devices a typical host lists in /proc/misc, newest first (rdma_cm,
// with HCAs, comes before them).
constexpr std::pair<unsigned, std::string_view> kOtherMisc[] = {
    {237, "loop-control"}, {236, "device-mapper"},  {235, "autofs"}, {229, "fuse"},
    {200, "tun"},          {183, "hw_random"},      {228, "hpet"},   {227, "mcelog"},
    {144, "nvram"},        {62, "cpu_dma_latency"},
};

constexpr std::string_view kCufile = R"({
  "logging": {
    "dir": "/var/log",
    "level": "ERROR"
  },
  "profile": {
    "nvtx": false,
    "cufile_stats": 0
  },
  "properties": {
    "max_direct_io_size_kb": 16384,
    "max_device_cache_size_kb": 131072,
    "max_device_pinned_mem_size_kb": 33554432,
    "use_poll_mode": false,
    "allow_compat_mode": true
  },
  "fs": {
    "generic": {
      "posix_unaligned_writes": false
    }
  }
}
)";

// An endpoint to place under a switch, and the manifest entry that learns where.
struct Endpoint {
    unsigned bus = 0;  // a GPU's own; 0: the next free one
    PciIds ids;
    std::string* bus_id;
    int* numa_node;
    std::string* cpulist;
    std::vector<std::string>* bridges;
    std::string* switch_port;
};

template <typename Device>
Endpoint endpoint(Device& d, unsigned bus, PciIds ids) {
    return {bus, ids, &d.pci_bus_id, &d.numa_node, &d.cpulist, &d.bridges, &d.switch_port};
}

// "0001:18:00.0" -> {1, 0x18}
std::pair<unsigned, unsigned> domain_and_bus(const std::string& bus_id) {
    return {static_cast<unsigned>(std::stoul(bus_id.substr(0, 4), nullptr, 16)),
            static_cast<unsigned>(std::stoul(bus_id.substr(5, 2), nullptr, 16))};
}

std::string bdf(unsigned domain, unsigned bus, unsigned device, unsigned function = 0) {
    return fmt::format("{:04x}:{:02x}:{:02x}.{}", domain, bus, device, function);
}

}  // namespace

ManifestNode Writer::family_node(std::string_view family, std::string_view device,
                                 std::string_view rel, unsigned major, unsigned minor,
                                 mode_t mode) {
    make_node(rel, major, minor, mode);
    std::string path = "/" + std::string(rel);
    manifest_.family_nodes.push_back({std::string(family), std::string(device), path, major, minor,
                                      static_cast<unsigned>(mode)});
    return {path, major, minor};
}

// Two switches a PCI domain holding GPUs, the HCAs and NVMe controllers in
// domain 0 (see sim.hpp); fills in pci_ and the manifest's places.
void Writer::pci_layout() {
    const Spec& spec = manifest_.spec;
    for (unsigned n = 0; n < spec.hcas; ++n) {
        ManifestHca hca;
        hca.name = fmt::format("mlx5_{}", n);
        manifest_.hcas.push_back(std::move(hca));
    }
    for (unsigned n = 0; n < spec.nvmes; ++n) {
        ManifestNvme nvme;
        nvme.name = fmt::format("nvme{}", n);
        manifest_.nvmes.push_back(std::move(nvme));
    }
    std::map<unsigned, std::vector<ManifestGpu*>> by_domain;  // GPUs in the order of their buses
    for (auto& gpu : manifest_.gpus)
        by_domain[domain_and_bus(gpu.pci_bus_id).first].push_back(&gpu);

    for (auto& [domain, gpus] : by_domain) {
        std::vector<Endpoint> under[2];
        std::size_t half = (gpus.size() + 1) / 2;
        for (std::size_t i = 0; i < gpus.size(); ++i)
            under[i < half ? 0 : 1].push_back(
                endpoint(*gpus[i], domain_and_bus(gpus[i]->pci_bus_id).second, kGpuIds));
        if (domain == 0) {
            half = (manifest_.hcas.size() + 1) / 2;
            for (std::size_t i = 0; i < manifest_.hcas.size(); ++i)
                under[i < half ? 0 : 1].push_back(endpoint(manifest_.hcas[i], 0, kHcaIds));
            half = (manifest_.nvmes.size() + 1) / 2;
            for (std::size_t i = 0; i < manifest_.nvmes.size(); ++i)
                under[i < half ? 0 : 1].push_back(endpoint(manifest_.nvmes[i], 0, kNvmeIds));
        }
        unsigned next = 0;  // the first bus switch 1 may take
        for (int k = 0; k < 2; ++k) {
            auto& eps = under[k];
            unsigned first_gpu = eps.empty() ? 0 : eps.front().bus;
            unsigned base = k == 0      ? kSwitch0Bus
                            : first_gpu ? first_gpu - 3
                                        : std::max(next, kSwitch1BusWithoutGpus);
            unsigned free = base + 3;
            for (const auto& e : eps) free = std::max(free, e.bus + 1);
            for (auto& e : eps)
                if (e.bus == 0) e.bus = free++;
            if (base < next || free > 0x100 || eps.size() > 32)
                throw util::Error(
                    EOVERFLOW, "simulate", "sys/devices",
                    fmt::format("PCI domain {:04x}: no room for switch {}'s buses", domain, k));
            next = free;

            std::string root_port = bdf(domain, base, 1);
            std::string upstream = bdf(domain, base + 1, 0);
            std::string dir =
                fmt::format("sys/devices/pci{:04x}:{:02x}/{}", domain, base, root_port);
            pci_.push_back({root_port, dir, kRootPortIds.vendor, kRootPortIds.device,
                            kRootPortIds.pci_class, k});
            dir += "/" + upstream;
            pci_.push_back({upstream, dir, kUpstreamIds.vendor, kUpstreamIds.device,
                            kUpstreamIds.pci_class, k});
            for (unsigned slot = 0; slot < eps.size(); ++slot) {
                Endpoint& e = eps[slot];
                std::string downstream = bdf(domain, base + 2, slot);
                std::string down_dir = dir + "/" + downstream;
                pci_.push_back({downstream, down_dir, kDownstreamIds.vendor, kDownstreamIds.device,
                                kDownstreamIds.pci_class, k});
                std::string id = bdf(domain, e.bus, 0);
                if (!e.bus_id->empty() && *e.bus_id != id)  // GPUs keep theirs
                    throw util::Error(EINVAL, "simulate", "sys/devices",
                                      fmt::format("{} placed as {}", *e.bus_id, id));
                *e.bus_id = id;
                *e.numa_node = k;
                *e.cpulist = std::string(kCpulists[k]);
                *e.bridges = {root_port, upstream, downstream};
                *e.switch_port = upstream;
                pci_.push_back(
                    {id, down_dir + "/" + id, e.ids.vendor, e.ids.device, e.ids.pci_class, k});
            }
        }
    }
}

const PciDir& Writer::pci_dir(std::string_view bus_id) const {
    for (const auto& d : pci_)
        if (d.bus_id == bus_id) return d;
    throw util::Error(ENOENT, "simulate", "sys/bus/pci/devices/" + std::string(bus_id),
                      "not in the simulated PCI tree");
}

// rdma_cm's minor is dynamic: pick one that this host's /proc/misc does not
// list, as the kernel does from 63 down.
void Writer::choose_misc_minor() {
    if (manifest_.spec.hcas == 0) return;
    std::set<unsigned> used;
    for (const auto& [minor, name] : kOtherMisc) used.insert(minor);
    try {
        for (auto line : util::split(util::read_file("/proc/misc", 1 << 16), '\n')) {
            line = util::trim(line);
            if (auto number = util::parse_unsigned(line.substr(0, line.find(' '))))
                used.insert(static_cast<unsigned>(*number));
        }
    } catch (const util::Error& e) {
        util::logger().warn(
            "simulate: cannot read this host's /proc/misc ({}); assuming misc minor "
            "63 and below are free",
            e.what());
    }
    for (unsigned m = 63; m >= 1; --m)
        if (!used.count(m)) {
            rdma_cm_minor_ = m;
            return;
        }
    for (unsigned m = 64; m <= 255; ++m)
        if (!used.count(m)) {
            rdma_cm_minor_ = m;
            return;
        }
    throw util::Error(EBUSY, "simulate", "/proc/misc", "no free misc minor for rdma_cm");
}

void Writer::proc_misc() const {
    std::string text;
    if (manifest_.spec.hcas > 0) text += fmt::format("{:3} rdma_cm\n", rdma_cm_minor_);
    for (const auto& [minor, name] : kOtherMisc) text += fmt::format("{:3} {}\n", minor, name);
    write(at("proc/misc"), text, 0444);
}

void Writer::families() {
    const Spec& spec = manifest_.spec;
    for (unsigned n = 0; n < manifest_.hcas.size(); ++n) {
        ManifestHca& hca = manifest_.hcas[n];
        hca.uverbs = family_node("rdma", hca.name, fmt::format("dev/infiniband/uverbs{}", n),
                                 kInfinibandMajor, kUverbsBase + n, 0666);
        hca.umad = family_node("rdma", hca.name, fmt::format("dev/infiniband/umad{}", n),
                               kInfinibandMajor, n, 0600);
        hca.issm = family_node("rdma", hca.name, fmt::format("dev/infiniband/issm{}", n),
                               kInfinibandMajor, kIssmBase + n, 0600);
    }
    if (spec.hcas > 0)
        family_node("rdma", "", "dev/infiniband/rdma_cm", kMiscMajor, rdma_cm_minor_, 0666);
    if (spec.gdrcopy) family_node("gdrcopy", "gdrdrv", "dev/gdrdrv", gdrdrv_major_, 0, 0666);
    if (spec.gds) {
        for (unsigned n = 0; n < kNvfsNodes; ++n)
            family_node("gds", fmt::format("nvidia-fs{}", n), fmt::format("dev/nvidia-fs{}", n),
                        nvfs_major_, n, 0666);
        write(at("etc/cufile.json"), kCufile, 0644);
        manifest_.cufile = "/etc/cufile.json";
    }
    if (spec.nvswitch) {
        family_node("nvswitch", "", "dev/nvidia-nvswitchctl", nvswitch_major_, kNvswitchCtlMinor,
                    0666);
        for (unsigned n = 0; n < kNvswitches; ++n)
            family_node("nvswitch", fmt::format("nvidia-nvswitch{}", n),
                        fmt::format("dev/nvidia-nvswitch{}", n), nvswitch_major_, n, 0666);
    }
    if (!spec.drm) return;
    for (const auto& gpu : manifest_.gpus) {
        std::string card = fmt::format("card{}", gpu.index);
        std::string render = fmt::format("renderD{}", kRenderBase + gpu.index);
        family_node("drm", card, "dev/dri/" + card, kDrmMajor, gpu.index, 0660);
        family_node("drm", card, "dev/dri/" + render, kDrmMajor, kRenderBase + gpu.index, 0666);
        for (const auto& [suffix, name] : {std::pair{"card", card}, std::pair{"render", render}}) {
            std::string rel = fmt::format("dev/dri/by-path/pci-{}-{}", gpu.pci_bus_id, suffix);
            mkdirs(at(rel).parent_path());
            symlink("../" + name, at(rel));
            manifest_.links.push_back({"/" + rel, "../" + name});
        }
    }
}

void Writer::sysfs() const {
    auto file = [&](const std::string& rel, std::string_view text) { write(at(rel), text, 0444); };
    for (const PciDir& d : pci_) {
        file(d.dir + "/vendor", fmt::format("{}\n", d.vendor));
        file(d.dir + "/device", fmt::format("{}\n", d.device));
        file(d.dir + "/class", fmt::format("{}\n", d.pci_class));
        file(d.dir + "/numa_node", fmt::format("{}\n", d.numa_node));
        file(d.dir + "/local_cpulist", fmt::format("{}\n", kCpulists[d.numa_node]));
        relative_link("sys/bus/pci/devices/" + d.bus_id, d.dir);
    }
    file("sys/devices/system/node/online", "0-1\n");
    for (int k = 0; k < 2; ++k)
        file(fmt::format("sys/devices/system/node/node{}/cpulist", k),
             fmt::format("{}\n", kCpulists[k]));

    // A class device below the PCI device at `dir`: its directory, its "dev"
    // file (for a node), its "device" link back and its class link.
    auto class_device = [&](const std::string& dir, std::string_view cls, const std::string& name,
                            const ManifestNode* node) {
        std::string at_dir = fmt::format("{}/{}/{}", dir, cls, name);
        if (node) file(at_dir + "/dev", fmt::format("{}:{}\n", node->major, node->minor));
        relative_link(at_dir + "/device", dir);
        relative_link(fmt::format("sys/class/{}/{}", cls, name), at_dir);
        return at_dir;
    };
    if (!manifest_.hcas.empty()) {
        file("sys/class/infiniband_verbs/abi_version", "6\n");
        file("sys/class/infiniband_mad/abi_version", "5\n");
    }
    for (unsigned n = 0; n < manifest_.hcas.size(); ++n) {
        const ManifestHca& hca = manifest_.hcas[n];
        const std::string& dir = pci_dir(hca.pci_bus_id).dir;
        file(class_device(dir, "infiniband", hca.name, nullptr) + "/node_type", "1: CA\n");
        file(class_device(dir, "infiniband_verbs", fmt::format("uverbs{}", n), &hca.uverbs) +
                 "/ibdev",
             hca.name + "\n");
        for (const auto& [name, node] : {std::pair{fmt::format("umad{}", n), &hca.umad},
                                         std::pair{fmt::format("issm{}", n), &hca.issm}}) {
            std::string mad = class_device(dir, "infiniband_mad", name, node);
            file(mad + "/ibdev", hca.name + "\n");
            file(mad + "/port", "1\n");
        }
    }
    for (const auto& nvme : manifest_.nvmes)
        class_device(pci_dir(nvme.pci_bus_id).dir, "nvme", nvme.name, nullptr);
    if (!manifest_.spec.drm) return;
    for (const auto& gpu : manifest_.gpus) {
        const std::string& dir = pci_dir(gpu.pci_bus_id).dir;
        ManifestNode card{"", kDrmMajor, gpu.index};
        ManifestNode render{"", kDrmMajor, kRenderBase + gpu.index};
        class_device(dir, "drm", fmt::format("card{}", gpu.index), &card);
        class_device(dir, "drm", fmt::format("renderD{}", render.minor), &render);
    }
}

void families_to_json(nlohmann::json& j, const Manifest& m) {
    using nlohmann::json;
    auto node = [](const ManifestNode& n) {
        return json{{"path", n.path}, {"major", n.major}, {"minor", n.minor}};
    };
    j["hcas"] = json::array();
    for (const auto& h : m.hcas)
        j["hcas"].push_back({{"name", h.name},
                             {"pci_bus_id", h.pci_bus_id},
                             {"numa_node", h.numa_node},
                             {"cpulist", h.cpulist},
                             {"bridges", h.bridges},
                             {"switch", h.switch_port},
                             {"uverbs", node(h.uverbs)},
                             {"umad", node(h.umad)},
                             {"issm", node(h.issm)}});
    j["nvmes"] = json::array();
    for (const auto& n : m.nvmes)
        j["nvmes"].push_back({{"name", n.name},
                              {"pci_bus_id", n.pci_bus_id},
                              {"numa_node", n.numa_node},
                              {"cpulist", n.cpulist},
                              {"bridges", n.bridges},
                              {"switch", n.switch_port}});
    j["family_nodes"] = json::array();
    for (const auto& f : m.family_nodes)
        j["family_nodes"].push_back({{"family", f.family},
                                     {"device", f.device},
                                     {"path", f.path},
                                     {"major", f.major},
                                     {"minor", f.minor},
                                     {"mode", f.mode}});
    j["links"] = json::array();
    for (const auto& l : m.links) j["links"].push_back({{"path", l.path}, {"target", l.target}});
    j["sys_root"] = m.sys_root;
    j["cufile"] = m.cufile;
}

}  // namespace gpubind::sim::detail
