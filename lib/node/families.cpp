// Device families on the node: nodes found by glob under the dev root, the
// HCAs sysfs lists, the GPUs' DRM nodes. Every node's numbers are checked
// against what the kernel says of its driver (/proc/devices, /proc/misc,
// sysfs "dev" files), never taken from a name alone.
#include "gpubind/node/families.hpp"

#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "gpubind/node/node_read.hpp"
#include "gpubind/node/sysfs.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::node {

namespace fs = std::filesystem;

namespace {

using detail::under;

constexpr unsigned kMiscMajor = 10;
constexpr std::string_view kVerbsDriver = "infiniband_verbs";
constexpr std::string_view kMadDriver = "infiniband_mad";
constexpr std::string_view kDrmDriver = "drm";

using Majors = std::map<std::string, unsigned, std::less<>>;

// /proc/misc: "%3i %s" lines, minor by name.
std::map<std::string, unsigned, std::less<>> read_misc(const fs::path& path) {
    std::map<std::string, unsigned, std::less<>> out;
    std::string text;
    try {
        text = util::read_file(path, detail::kMaxProcFile);
    } catch (const util::Error& e) {
        util::logger().debug("families: {}", e.what());
        return out;
    }
    for (auto line : util::split(text, '\n')) {
        line = util::trim(line);
        const auto space = line.find(' ');
        if (space == std::string_view::npos) continue;
        if (auto minor = util::parse_unsigned(line.substr(0, space)); minor && *minor < 256)
            out.emplace(util::trim(line.substr(space + 1)), static_cast<unsigned>(*minor));
    }
    return out;
}

struct Kernel {
    const Majors& majors;
    std::map<std::string, unsigned, std::less<>> misc;
};

// The character device at `path` (a container path under /dev) on the dev
// root, not followed if a link, or why not.
std::optional<DeviceNode> char_node(const fs::path& dev_root, const std::string& path,
                                    std::string& why, bool* missing = nullptr) {
    DeviceNode node{path, under(dev_root, path), 0, 0, 0};
    struct stat st {};
    if (::lstat(node.host_path.c_str(), &st) != 0) {
        if (missing) *missing = errno == ENOENT;
        why = fmt::format("{}: {}", node.host_path, std::strerror(errno));
        return std::nullopt;
    }
    if (!S_ISCHR(st.st_mode)) {
        why = node.host_path + " is not a character device";
        return std::nullopt;
    }
    node.major = ::major(st.st_rdev);
    node.minor = ::minor(st.st_rdev);
    node.mode = st.st_mode & 07777;
    return node;
}

// Whether `node` carries the numbers its driver has: the major /proc/devices
// gives `driver`, or for "misc" major 10 and the minor /proc/misc lists
// under the node's file name.
std::string wrong_numbers(const DeviceNode& node, std::string_view driver, const Kernel& k) {
    if (driver == "misc") {
        const std::string name = fs::path(node.path).filename();
        const auto it = k.misc.find(name);
        if (it == k.misc.end()) return fmt::format("/proc/misc lists no {}", name);
        if (node.major != kMiscMajor || node.minor != it->second)
            return fmt::format("{} is {}:{}, /proc/misc says {}:{}", node.host_path, node.major,
                               node.minor, kMiscMajor, it->second);
        return {};
    }
    const auto it = k.majors.find(driver);
    if (it == k.majors.end()) return fmt::format("/proc/devices lists no {}", driver);
    if (node.major != it->second)
        return fmt::format("{} has major {}, /proc/devices gives {} major {}", node.host_path,
                           node.major, driver, it->second);
    return {};
}

// The nodes matching `pattern` ("/dev/nvidia-fs*": wildcards in the last
// name only), in name order.
std::vector<std::string> matches(const fs::path& dev_root, const std::string& pattern) {
    const fs::path p(pattern);
    const std::string name = p.filename();
    if (name.find_first_of("*?") == std::string::npos) return {pattern};
    std::vector<std::string> out;
    try {
        for (const auto& entry : detail::list_dir(under(dev_root, p.parent_path())))
            if (::fnmatch(name.c_str(), entry.c_str(), FNM_PERIOD) == 0)
                out.push_back((p.parent_path() / entry).string());
        std::sort(out.begin(), out.end(), sysfs::name_less);  // nvidia-fs2 before nvidia-fs10
    } catch (const util::Error& e) {
        util::logger().debug("families: {}", e.what());
    }
    return out;
}

// The nodes of `patterns` that exist with the driver's numbers; the others
// are warnings (a pattern's absence is not: a node may lack the family).
std::vector<DeviceNode> glob_nodes(Node& node, const config::Family& f,
                                   const std::vector<std::string>& patterns, const Kernel& k) {
    std::vector<DeviceNode> out;
    for (const auto& pattern : patterns)
        for (const auto& path : matches(node.roots.dev, pattern)) {
            if (std::any_of(out.begin(), out.end(), [&](auto& n) { return n.path == path; }))
                continue;
            std::string why;
            bool missing = false;
            auto found = char_node(node.roots.dev, path, why, &missing);
            if (!found) {
                if (!missing) node.warnings.push_back(fmt::format("family {}: {}", f.name, why));
                continue;
            }
            if (auto wrong = wrong_numbers(*found, f.major, k); !wrong.empty()) {
                node.warnings.push_back(
                    fmt::format("family {}: {} left out: {}", f.name, path, wrong));
                continue;
            }
            out.push_back(std::move(*found));
        }
    return out;
}

// The node a sysfs class device describes, at /dev/<dir><name>, if it is
// there with sysfs's numbers and its driver's major.
std::optional<DeviceNode> class_node(Node& node, const config::Family& f, const std::string& dir,
                                     const sysfs::ClassDevice& c, std::string_view driver,
                                     const Kernel& k) {
    std::string why;
    auto found = char_node(node.roots.dev, "/dev/" + dir + c.name, why);
    if (found && (found->major != c.major || found->minor != c.minor))
        why = fmt::format("{} is {}:{}, sysfs says {}:{}", found->host_path, found->major,
                          found->minor, c.major, c.minor);
    else if (found)
        why = wrong_numbers(*found, driver, k);
    if (!why.empty()) {
        node.warnings.push_back(fmt::format("family {}: {} left out: {}", f.name, c.name, why));
        return std::nullopt;
    }
    return found;
}

void infiniband(Node& node, const config::Family& f, FamilyNodes& out, const Kernel& k) {
    for (const auto& hca : sysfs::hcas(node.roots.sys)) {
        FamilyDevice d{hca.name, hca.pci_bus_id, hca.place, {}, {}, {}};
        for (const auto& v : hca.verbs)
            if (auto n = class_node(node, f, "infiniband/", v, kVerbsDriver, k))
                d.nodes.push_back(std::move(*n));
        for (const auto& u : hca.umad)
            if (auto n = class_node(node, f, "infiniband/", u, kMadDriver, k))
                d.extras.push_back(std::move(*n));
        if (d.nodes.empty()) {
            node.warnings.push_back(
                fmt::format("family {}: HCA {} has no usable uverbs node", f.name, hca.name));
            continue;
        }
        out.devices.push_back(std::move(d));
    }
}

void drm(Node& node, const config::Family& f, FamilyNodes& out, const Kernel& k) {
    for (const auto& gpu : node.gpus) {
        FamilyDevice d;
        d.pci_bus_id = gpu.pci_bus_id;
        for (const auto& c : sysfs::drm_nodes(node.roots.sys, gpu.pci_bus_id)) {
            auto n = class_node(node, f, "dri/", c, kDrmDriver, k);
            if (!n) continue;
            const bool card = c.name.starts_with("card");
            if (card && d.name.empty()) d.name = c.name;
            d.links.emplace_back(
                fmt::format("/dev/dri/by-path/pci-{}-{}", gpu.pci_bus_id, card ? "card" : "render"),
                "../" + c.name);
            d.nodes.push_back(std::move(*n));
        }
        if (d.nodes.empty()) continue;
        if (d.name.empty()) d.name = fs::path(d.nodes.front().path).filename();
        out.devices.push_back(std::move(d));
    }
}

}  // namespace

void discover_families(Node& node, const config::Config& config, const Majors& majors,
                       const Vouch& vouched) {
    for (auto& gpu : node.gpus) gpu.place = sysfs::pci_place(node.roots.sys, gpu.pci_bus_id);
    if (config.families.empty()) return;
    const Kernel k{majors, read_misc(node.roots.proc / "misc")};
    for (const auto& f : config.families) {
        FamilyNodes out{f.name, {}, {}, {}};
        switch (f.source) {
            case config::FamilySource::Glob:
                for (auto& n : glob_nodes(node, f, f.nodes, k)) {
                    std::string name = fs::path(n.path).filename();
                    out.devices.push_back({std::move(name), {}, {}, {std::move(n)}, {}, {}});
                }
                break;
            case config::FamilySource::Infiniband:
                infiniband(node, f, out, k);
                break;
            case config::FamilySource::Drm:
                drm(node, f, out, k);
                break;
        }
        if (out.devices.empty()) continue;
        if (f.source != config::FamilySource::Glob) out.shared = glob_nodes(node, f, f.nodes, k);
        for (const auto& file : f.files) {
            const fs::path host = under(node.roots.driver, file);
            struct stat st {};
            if (::lstat(host.c_str(), &st) != 0) continue;
            // An owner that cannot be told from another user's (a user
            // namespace without the host's root) only where root's stored
            // description gave the same file.
            const util::HostOwner owner = util::host_owner(st.st_uid);
            const bool vouched_for =
                owner == util::HostOwner::Unknown && vouched && vouched(host.string());
            if (!S_ISREG(st.st_mode) || (owner != util::HostOwner::Root && !vouched_for) ||
                (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
                node.warnings.push_back(fmt::format(
                    "family {}: {} left out: not a regular file of root's that only root "
                    "may write{}",
                    f.name, host.string(),
                    owner == util::HostOwner::Unknown
                        ? " (its owner is not mapped in this user namespace, and root's "
                          "description does not vouch for it)"
                        : ""));
                continue;
            }
            out.files.push_back(file);
        }
        util::logger().debug("discover: family {}: {} device(s)", f.name, out.devices.size());
        node.families.push_back(std::move(out));
    }
}

const FamilyNodes* find_family(const Node& node, std::string_view name) {
    for (const auto& f : node.families)
        if (f.name == name) return &f;
    return nullptr;
}

AffineChoice affine(const FamilyNodes& f, const std::vector<const Gpu*>& gpus) {
    AffineChoice out;
    out.chosen.assign(f.devices.size(), false);
    std::vector<const PciPlace*> places;
    for (const auto& d : f.devices) places.push_back(d.place ? &*d.place : nullptr);
    for (const Gpu* gpu : gpus) {
        if (!gpu->place) {
            out.notes.push_back(
                fmt::format("{}: {} has no PCI place in sysfs: no {} device is near it", f.name,
                            gpu_name(*gpu), f.name));
            continue;
        }
        const auto near = sysfs::nearest(*gpu->place, places);
        if (near.which.empty()) {
            out.notes.push_back(fmt::format(
                "{}: no {} device under {}'s PCIe switch or on its NUMA node: none given for it",
                f.name, f.name, gpu_name(*gpu)));
            continue;
        }
        std::string given;
        for (auto i : near.which) {
            out.chosen[i] = true;
            given += (given.empty() ? "" : ", ") + f.devices[i].name;
        }
        util::logger().debug("{}: {} nearest {} (by {})", f.name, given, gpu_name(*gpu),
                             sysfs::to_string(near.how));
    }
    return out;
}

std::map<std::string, std::vector<std::string>> family_dev_entries(const config::Config& config) {
    std::map<std::string, std::vector<std::string>> out;
    auto add = [&](const std::string& dir, std::string prefix) {
        auto& prefixes = out[dir];
        if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end())
            prefixes.push_back(std::move(prefix));
    };
    for (const auto& f : config.families) {
        for (const auto& pattern : f.nodes) {
            const fs::path p(pattern);
            std::string name = p.filename();
            name.resize(std::min(name.size(), name.find_first_of("*?")));
            add(p.parent_path().string(), std::move(name));
        }
        if (f.source == config::FamilySource::Infiniband) add("/dev/infiniband", "");
        if (f.source == config::FamilySource::Drm) add("/dev/dri", "");
    }
    return out;
}

}  // namespace gpubind::node
