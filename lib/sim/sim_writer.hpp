// The simulated node's writer, shared by its parts: sim.cpp (the device
// nodes, procfs files, the manifest), sim_driver.cpp (the driver's user-space
// files and the loader cache) and sim_sysfs.cpp (the sysfs tree, the device
// families' nodes). Private to lib/sim.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/platform.hpp"

namespace gpubind::sim::detail {

namespace fs = std::filesystem;

// The distribution layout's library directories (relative to the node).
constexpr std::string_view kLib64 = std::string_view(util::platform::kMultiarchLibDir).substr(1);
constexpr std::string_view kLib32 =
    util::platform::kHasCompat32 ? std::string_view(util::platform::kMultiarchLib32Dir).substr(1)
                                 : "";

// The kernel's fixed majors of the device families.
constexpr unsigned kMiscMajor = 10;
constexpr unsigned kDrmMajor = 226;
constexpr unsigned kInfinibandMajor = 231;

// One directory of the simulated sysfs PCI tree: a bridge or an endpoint.
struct PciDir {
    std::string bus_id;  // "0000:18:00.0"
    std::string dir;     // relative to the node: "sys/devices/pci0000:10/.../0000:18:00.0"
    std::string_view vendor, device, pci_class;
    int numa_node = 0;
};

// The manifest's fields of sim_sysfs.cpp, added to `j` by to_json.
void families_to_json(nlohmann::json& j, const Manifest& m);
// Spec::topology's checks (sim_topology.cpp).
void check_topology(const Spec& spec);

// Writes the node below `dir_`, recording every piece in the manifest.
class Writer {
  public:
    Writer(fs::path dir, const Spec& spec) : dir_(std::move(dir)) { manifest_.spec = spec; }

    Manifest run();

  private:
    fs::path at(std::string_view rel) const { return dir_ / fs::path(rel); }
    // The library directory, relative to the node.
    std::string lib_dir(bool compat32) const {
        const std::string& prefix = manifest_.spec.prefix;
        if (prefix.empty()) return std::string(compat32 ? kLib32 : kLib64);
        return prefix + (compat32 ? "/lib" : "/lib64");
    }

    void mkdirs(const fs::path& path) const {
        std::error_code ec;
        fs::create_directories(path, ec);
        if (ec) throw util::Error(ec.value(), "mkdir", path.string());
    }

    void write(const fs::path& path, std::string_view data, mode_t mode) const {
        mkdirs(path.parent_path());
        util::Fd fd = util::open_or_throw(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
        std::size_t done = 0;
        while (done < data.size()) {
            ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) util::throw_errno("write", path.string());
            done += static_cast<std::size_t>(n);
        }
        if (::fchmod(fd.get(), mode) != 0) util::throw_errno("chmod", path.string());
    }

    void symlink(std::string_view target, const fs::path& path) const {
        if (::symlink(std::string(target).c_str(), path.c_str()) != 0)
            util::throw_errno("symlink", path.string());
    }

    // Links `rel` to `target` (both relative to the node) by a relative path
    // as sysfs spells it: up to an ancestor of the target's directory, then
    // down ("../../../0000:5e:00.0" from <that device>/infiniband/mlx5_0/device).
    void relative_link(std::string_view rel, std::string_view target) const {
        fs::path path = at(rel);
        mkdirs(path.parent_path());
        fs::path to(target);
        fs::path up = to.parent_path().lexically_relative(fs::path(rel).parent_path());
        symlink((up == "." ? to.filename() : up / to.filename()).string(), path);
    }

    void make_node(std::string_view rel, unsigned major, unsigned minor, mode_t mode) const;
    void node(std::string_view rel, unsigned major, unsigned minor, mode_t mode);
    ManifestNode family_node(std::string_view family, std::string_view device, std::string_view rel,
                             unsigned major, unsigned minor, mode_t mode);
    void socket(std::string_view rel) const;
    void choose_majors();
    void choose_misc_minor();
    void gpus();
    void mig();
    void proc_devices() const;
    void proc_driver() const;
    void proc_misc() const;
    void pci_layout();
    const PciDir& pci_dir(std::string_view bus_id) const;
    void families();
    void sysfs() const;
    void libraries();
    void binaries();
    void ipcs();
    void firmware();
    void ldconfig() const;
    void topology();  // sim_topology.cpp

    void record(std::string kind, std::string name, std::string path, std::string real_path,
                std::string_view capability, bool compat32) {
        manifest_.files.push_back({std::move(kind), std::move(name), std::move(path),
                                   std::move(real_path), std::string(capability), compat32});
    }

    fs::path dir_;
    Manifest manifest_;
    unsigned uvm_major_ = 0;
    unsigned caps_major_ = 0;
    unsigned imex_major_ = 0;
    unsigned gdrdrv_major_ = 0;
    unsigned nvfs_major_ = 0;
    unsigned nvswitch_major_ = 0;
    unsigned rdma_cm_minor_ = 0;
    std::vector<PciDir> pci_;  // bridges before what sits under them
};

}  // namespace gpubind::sim::detail
