// What sysfs says of the node's PCI devices: see node/sysfs.hpp.
//
// Every link is resolved inside the sys root (detail::resolve_in: an absolute
// target or a ".." past the root stays in it), every file is opened with
// O_NOFOLLOW under the resolved directory and read bounded, and every value
// is checked before it is used: what a node lacks, or has odd, is left out
// with a log line, never thrown.
#include "gpubind/node/sysfs.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "gpubind/node/node_read.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::node::sysfs {

namespace fs = std::filesystem;

namespace {

// A sysfs attribute's st_size is a page (64 KiB on some arm64 kernels).
constexpr std::size_t kMaxAttribute = detail::kMaxProcFile;
constexpr unsigned kMaxMajor = 4096;       // MAJORBITS 12
constexpr unsigned kMaxMinor = 1u << 20;   // MINORBITS 20
constexpr long kMaxNumaNode = 1L << 16;    // far above MAX_NUMNODES (1 << 10)
constexpr std::size_t kMaxCpulist = 4096;  // a page of "0-15,32-47,..."

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

bool is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f');
}

bool all_hex(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_hex);
}

bool all_digits(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// `prefix` then a decimal number ("uverbs0", "renderD128").
bool is_numbered(std::string_view name, std::string_view prefix) {
    return name.starts_with(prefix) && all_digits(name.substr(prefix.size()));
}

// A bus id as the kernel names it: lower case, a domain of at least four
// digits without further leading zeros (NVML's "00000000:3B:00.0" is sysfs's
// "0000:3b:00.0").
std::string normal_bus_id(std::string_view id) {
    std::string out = util::to_lower(util::trim(id));
    const auto colon = out.find(':');
    if (colon != std::string::npos && colon > 4) {
        std::size_t zeros = 0;
        while (zeros < colon - 4 && out[zeros] == '0') ++zeros;
        out.erase(0, zeros);
    }
    return out;
}

// A file under a resolved (root-relative) directory, opened without following
// a final link and read bounded. nullopt when it is absent (silently) or
// cannot be read (with a log line).
std::optional<std::string> read_attribute(const fs::path& sys, const fs::path& dir,
                                          std::string_view name) {
    const fs::path path = detail::under(sys, dir / name);
    try {
        const util::Fd fd = util::open_or_throw(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
        return util::read_fd(fd.get(), kMaxAttribute, path.string());
    } catch (const util::Error& e) {
        if (e.code().value() == ENOENT) return std::nullopt;
        util::logger().warn("sysfs: {}; left out", e.what());
        return std::nullopt;
    }
}

// `rel` (absolute, inside the root) with every link resolved inside the root.
std::optional<fs::path> resolve(const fs::path& sys, const fs::path& rel) {
    try {
        return detail::resolve_in(sys, rel);
    } catch (const std::exception& e) {  // allocation only; never a node's fault
        util::logger().warn("sysfs: resolve {}: {}", rel.string(), e.what());
        return std::nullopt;
    }
}

// The names in <sys>/class/<cls>, valid ones only, naturally sorted. Empty
// when the class is absent.
std::vector<std::string> class_entries(const fs::path& sys, std::string_view cls) {
    const fs::path rel = fs::path("/class") / cls;
    const auto dir = resolve(sys, rel);
    if (!dir) {
        util::logger().debug("sysfs: no {}", detail::under(sys, rel).string());
        return {};
    }
    std::vector<std::string> names;
    try {
        names = detail::list_dir(detail::under(sys, *dir));
    } catch (const util::Error& e) {
        util::logger().warn("sysfs: {}; no {} devices", e.what(), cls);
        return {};
    }
    std::erase_if(names, [&](const std::string& name) {
        if (is_name(name)) return false;
        util::logger().warn("sysfs: {} in {} is not a device name; left out",
                            util::escape_control(name), detail::under(sys, rel).string());
        return true;
    });
    std::sort(names.begin(), names.end(), name_less);
    return names;
}

// The device directory a PCI device resolves to, checked: under /devices,
// named by its bus id.
bool is_pci_device_dir(const fs::path& dir, std::string_view id) {
    const fs::path rel = dir.relative_path();
    return !rel.empty() && *rel.begin() == "devices" && dir.filename() == id;
}

// The place of the PCI device whose directory (resolved, root-relative) is `dir`.
PciPlace place_at(const fs::path& sys, const fs::path& dir) {
    PciPlace place;
    const fs::path rel = dir.relative_path();
    for (auto it = rel.begin(); it != rel.end(); ++it)
        if (std::next(it) != rel.end() && is_pci_address(it->string()))
            place.bridges.push_back(it->string());
    if (const auto text = read_attribute(sys, dir, "numa_node")) {
        const std::string_view v = util::trim(*text);
        if (v == "-1") {
        } else if (const auto n = util::parse_unsigned(v); n && *n < kMaxNumaNode) {
            place.numa_node = static_cast<int>(*n);
        } else {
            util::logger().warn("sysfs: {}: numa_node \"{}\" is not a NUMA node; taken as unknown",
                                detail::under(sys, dir).string(),
                                util::escape_control(v.substr(0, 64)));
        }
    }
    if (const auto text = read_attribute(sys, dir, "local_cpulist")) {
        const std::string_view v = util::trim(*text);
        if (v.size() <= kMaxCpulist && v.find_first_not_of("0123456789,-") == v.npos)
            place.cpulist = v;
        else
            util::logger().warn("sysfs: {}: local_cpulist \"{}\" is not a CPU list; left out",
                                detail::under(sys, dir).string(),
                                util::escape_control(v.substr(0, 64)));
    }
    return place;
}

// A class device's directory and "dev" file: nullopt (with a line) when it
// has none or a malformed one.
std::optional<ClassDevice> class_device(const fs::path& sys, const fs::path& dir,
                                        const std::string& name) {
    const auto text = read_attribute(sys, dir, "dev");
    if (!text) {
        util::logger().debug("sysfs: {} has no dev file; left out",
                             detail::under(sys, dir).string());
        return std::nullopt;
    }
    const auto numbers = parse_dev(*text);
    if (!numbers) {
        util::logger().warn("sysfs: {}/dev: \"{}\" is not MAJOR:MINOR; left out",
                            detail::under(sys, dir).string(),
                            util::escape_control(util::trim(*text).substr(0, 64)));
        return std::nullopt;
    }
    return ClassDevice{name, numbers->first, numbers->second};
}

// The PCI device a class device's "device" link names: its bus id and
// place, or nothing (with a debug line) when it has none that is PCI.
void pci_device_of(const fs::path& sys, const fs::path& dir, std::string& bus_id,
                   std::optional<PciPlace>& place) {
    const auto device = resolve(sys, dir / "device");
    if (!device) {
        util::logger().debug("sysfs: {} has no device", detail::under(sys, dir).string());
        return;
    }
    const std::string id = device->filename().string();
    if (!is_pci_address(id) || !is_pci_device_dir(*device, id)) {
        util::logger().debug("sysfs: {}'s device is {}, not a PCI device",
                             detail::under(sys, dir).string(), device->string());
        return;
    }
    bus_id = id;
    place = place_at(sys, *device);
}

// The class devices named `prefix`<N> of class `cls`, by the HCA their
// "ibdev" file names.
void add_by_ibdev(const fs::path& sys, std::string_view cls, std::string_view prefix,
                  std::map<std::string, std::vector<ClassDevice>, std::less<>>& out) {
    for (const auto& name : class_entries(sys, cls)) {
        if (!is_numbered(name, prefix)) continue;  // abi_version, another kind
        const auto dir = resolve(sys, fs::path("/class") / cls / name);
        if (!dir) continue;
        const auto ibdev = read_attribute(sys, *dir, "ibdev");
        if (!ibdev || !is_name(util::trim(*ibdev))) {
            util::logger().warn("sysfs: {} names no HCA (ibdev); left out",
                                detail::under(sys, *dir).string());
            continue;
        }
        if (auto device = class_device(sys, *dir, name))
            out[std::string(util::trim(*ibdev))].push_back(std::move(*device));
    }
}

// The PCI device's directory, resolved and checked; nullopt with a line.
std::optional<fs::path> pci_device_dir(const fs::path& sys, std::string_view bus_id,
                                       std::string& id) {
    id = normal_bus_id(bus_id);
    if (!is_pci_address(id)) {
        util::logger().warn("sysfs: \"{}\" is not a PCI address",
                            util::escape_control(bus_id.substr(0, 64)));
        return std::nullopt;
    }
    const fs::path rel = fs::path("/bus/pci/devices") / id;
    const auto dir = resolve(sys, rel);
    if (!dir) {
        util::logger().debug("sysfs: no {}", detail::under(sys, rel).string());
        return std::nullopt;
    }
    if (!is_pci_device_dir(*dir, id)) {
        util::logger().warn("sysfs: {} leads to {}, not a PCI device under devices/; left out",
                            detail::under(sys, rel).string(), dir->string());
        return std::nullopt;
    }
    return dir;
}

}  // namespace

bool is_pci_address(std::string_view s) noexcept {
    // domain (4 to 8 hex digits) ':' bus (2) ':' device (2, below 0x20) '.' function (0-7)
    const auto colon = s.find(':');
    if (colon == s.npos || colon < 4 || colon > 8 || s.size() != colon + 8) return false;
    const std::string_view rest = s.substr(colon + 1);
    return all_hex(s.substr(0, colon)) && all_hex(rest.substr(0, 2)) && rest[2] == ':' &&
           all_hex(rest.substr(3, 2)) && rest[3] <= '1' && rest[5] == '.' && rest[6] >= '0' &&
           rest[6] <= '7';
}

bool is_name(std::string_view s) noexcept {
    return !s.empty() && s.size() <= 255 && s != "." && s != ".." &&
           std::all_of(s.begin(), s.end(), [](char c) {
               return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                      c == '.' || c == '-';
           });
}

std::optional<std::pair<unsigned, unsigned>> parse_dev(std::string_view text) noexcept {
    text = util::trim(text);
    const auto colon = text.find(':');
    if (colon == text.npos) return std::nullopt;
    const auto major = util::parse_unsigned(text.substr(0, colon));
    const auto minor = util::parse_unsigned(text.substr(colon + 1));
    if (!major || !minor || *major >= kMaxMajor || *minor >= kMaxMinor) return std::nullopt;
    return std::pair{static_cast<unsigned>(*major), static_cast<unsigned>(*minor)};
}

bool name_less(std::string_view a, std::string_view b) noexcept {
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (is_digit(a[i]) && is_digit(b[j])) {
            std::size_t ie = i, je = j;
            while (ie < a.size() && is_digit(a[ie])) ++ie;
            while (je < b.size() && is_digit(b[je])) ++je;
            std::string_view x = a.substr(i, ie - i), y = b.substr(j, je - j);
            while (x.size() > 1 && x.front() == '0') x.remove_prefix(1);
            while (y.size() > 1 && y.front() == '0') y.remove_prefix(1);
            if (x.size() != y.size()) return x.size() < y.size();
            if (x != y) return x < y;
            i = ie;
            j = je;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i;
            ++j;
        }
    }
    if ((i == a.size()) != (j == b.size())) return i == a.size();
    return a < b;  // equal but for leading zeros: any strict order
}

std::optional<PciPlace> pci_place(const fs::path& sys, std::string_view bus_id) {
    std::string id;
    const auto dir = pci_device_dir(sys, bus_id, id);
    if (!dir) return std::nullopt;
    return place_at(sys, *dir);
}

std::vector<Hca> hcas(const fs::path& sys) {
    std::vector<Hca> out;
    for (const auto& name : class_entries(sys, "infiniband")) {
        const auto dir = resolve(sys, fs::path("/class/infiniband") / name);
        if (!dir) {
            util::logger().warn("sysfs: {} leads nowhere in {}; left out",
                                detail::under(sys, fs::path("/class/infiniband") / name).string(),
                                sys.string());
            continue;
        }
        Hca hca;
        hca.name = name;
        pci_device_of(sys, *dir, hca.pci_bus_id, hca.place);
        out.push_back(std::move(hca));
    }
    if (out.empty()) return out;

    std::map<std::string, std::vector<ClassDevice>, std::less<>> verbs, umad, issm;
    add_by_ibdev(sys, "infiniband_verbs", "uverbs", verbs);
    add_by_ibdev(sys, "infiniband_mad", "umad", umad);
    add_by_ibdev(sys, "infiniband_mad", "issm", issm);
    auto take = [](auto& by_ibdev, const std::string& name) {
        std::vector<ClassDevice> v;
        if (const auto it = by_ibdev.find(name); it != by_ibdev.end()) v = std::move(it->second);
        std::sort(v.begin(), v.end(), [](const ClassDevice& x, const ClassDevice& y) {
            return name_less(x.name, y.name);
        });
        return v;
    };
    for (auto& hca : out) {
        hca.verbs = take(verbs, hca.name);
        hca.umad = take(umad, hca.name);
        hca.issm = take(issm, hca.name);
    }
    return out;
}

std::vector<ClassDevice> drm_nodes(const fs::path& sys, std::string_view bus_id) {
    std::string id;
    const auto device = pci_device_dir(sys, bus_id, id);
    if (!device) return {};
    const auto drm = resolve(sys, *device / "drm");
    if (!drm) return {};
    std::vector<std::string> names;
    try {
        names = detail::list_dir(detail::under(sys, *drm));
    } catch (const util::Error& e) {
        util::logger().warn("sysfs: {}; no DRM nodes for {}", e.what(), id);
        return {};
    }
    std::vector<ClassDevice> out;
    for (const auto& name : names) {
        if (!is_numbered(name, "card") && !is_numbered(name, "renderD")) continue;
        const auto dir = resolve(sys, *drm / name);
        if (!dir) continue;
        if (auto node = class_device(sys, *dir, name)) out.push_back(std::move(*node));
    }
    std::sort(out.begin(), out.end(), [](const ClassDevice& a, const ClassDevice& b) {
        const bool ca = a.name.starts_with("card"), cb = b.name.starts_with("card");
        if (ca != cb) return ca;
        return name_less(a.name, b.name);
    });
    return out;
}

std::vector<Nvme> nvmes(const fs::path& sys) {
    std::vector<Nvme> out;
    for (const auto& name : class_entries(sys, "nvme")) {
        const auto dir = resolve(sys, fs::path("/class/nvme") / name);
        if (!dir) continue;
        Nvme nvme;
        nvme.name = name;
        pci_device_of(sys, *dir, nvme.pci_bus_id, nvme.place);
        out.push_back(std::move(nvme));
    }
    return out;
}

std::string_view to_string(Nearness n) {
    switch (n) {
        case Nearness::Switch:
            return "switch";
        case Nearness::Numa:
            return "numa";
        case Nearness::None:
            return "none";
    }
    return "none";
}

Nearest nearest(const PciPlace& to, const std::vector<const PciPlace*>& others) {
    Nearest out;
    for (std::size_t i = 0; i < others.size(); ++i) {
        const PciPlace* other = others[i];
        if (!other) continue;
        const bool shares = std::any_of(to.bridges.begin(), to.bridges.end(), [&](const auto& b) {
            return std::find(other->bridges.begin(), other->bridges.end(), b) !=
                   other->bridges.end();
        });
        if (shares) out.which.push_back(i);
    }
    if (!out.which.empty()) {
        out.how = Nearness::Switch;
        return out;
    }
    if (to.numa_node < 0) return out;
    for (std::size_t i = 0; i < others.size(); ++i)
        if (others[i] && others[i]->numa_node == to.numa_node) out.which.push_back(i);
    if (!out.which.empty()) out.how = Nearness::Numa;
    return out;
}

}  // namespace gpubind::node::sysfs
