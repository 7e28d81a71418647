// node/sysfs.hpp and node/topology.hpp against sysfs-like trees built in a
// temporary directory: PCIe places, HCAs and their class devices, DRM nodes,
// NVMe controllers, nearness, and hostile or malformed entries.
#include <spdlog/sinks/ringbuffer_sink.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "files.hpp"
#include "gpubind/node/sysfs.hpp"
#include "gpubind/node/topology.hpp"
#include "gpubind/util/log_sink.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A sysfs-like tree, as the kernel lays it out: each PCI device a directory
// devices/pci<domain>:<bus>/<root port>/.../<id>, bus/pci/devices/<id> a
// link to it; a class device a directory under its parent device
// (<device>/<class>/<name>) and class/<class>/<name> a link to it.
class SysTree {
  public:
    explicit SysTree(fs::path root) : root_(std::move(root)) {}
    const fs::path& root() const { return root_; }

    // A PCI device under `bridges` (root port first), each bridge made too.
    SysTree& pci(const std::string& id, const std::vector<std::string>& bridges,
                 const std::string& numa = "-1\n", const std::string& cpus = "") {
        const std::string& top = bridges.empty() ? id : bridges.front();
        fs::path dir = fs::path("devices") / ("pci" + top.substr(0, top.find(':') + 3));
        for (const auto& b : bridges) add_device(b, dir /= b);
        add_device(id, dir /= id);
        file(dir / "numa_node", numa);
        if (!cpus.empty()) file(dir / "local_cpulist", cpus + "\n");
        return *this;
    }
    // An InfiniBand HCA on PCI device `id`.
    SysTree& hca(const std::string& name, const std::string& id) {
        const fs::path dir = class_device("infiniband", name, id);
        link(dir / "device", "../../../" + id);
        return *this;
    }
    // A verbs, umad or issm node of HCA `ibdev` (on PCI device `id`).
    SysTree& ib_node(const std::string& name, const std::string& ibdev, const std::string& id,
                     const std::string& dev) {
        const std::string cls = name.starts_with("uverbs") ? "infiniband_verbs" : "infiniband_mad";
        const fs::path dir = class_device(cls, name, id);
        file(dir / "ibdev", ibdev + "\n");
        file(dir / "dev", dev + "\n");
        if (!fs::exists(root_ / "class" / cls / "abi_version"))
            file(fs::path("class") / cls / "abi_version", "6\n");
        return *this;
    }
    SysTree& drm(const std::string& id, const std::string& name, const std::string& dev) {
        file(class_device("drm", name, id) / "dev", dev + "\n");
        return *this;
    }
    SysTree& nvme(const std::string& name, const std::string& id) {
        link(class_device("nvme", name, id) / "device", "../../../" + id);
        return *this;
    }
    SysTree& file(const fs::path& rel, const std::string& text) {
        fs::create_directories((root_ / rel).parent_path());
        test::write(root_ / rel, text);
        return *this;
    }
    SysTree& link(const fs::path& rel, const std::string& target) {
        fs::create_directories((root_ / rel).parent_path());
        fs::remove(root_ / rel);
        fs::create_symlink(target, root_ / rel);
        return *this;
    }
    // Where PCI device `id` is, relative to the root.
    fs::path device(const std::string& id) const { return devices_.at(id); }

  private:
    void add_device(const std::string& id, const fs::path& dir) {
        if (devices_.contains(id)) return;
        devices_[id] = dir;
        fs::create_directories(root_ / dir);
        link(fs::path("bus/pci/devices") / id, "../../../" + dir.string());
    }
    fs::path class_device(const std::string& cls, const std::string& name, const std::string& id) {
        const fs::path dir = device(id) / cls / name;
        fs::create_directories(root_ / dir);
        link(fs::path("class") / cls / name, "../../" + dir.string());
        return dir;
    }

    fs::path root_;
    std::map<std::string, fs::path> devices_;
};

// Switch A (root port 0000:00:01.0, NUMA 0): GPU 0, mlx5_0, nvme0.
// Switch B (root port 0000:80:01.0, NUMA 1): GPU 1, mlx5_1.
// Root port 0000:40:01.0 (NUMA 1): GPU 2 alone, near mlx5_1 by NUMA only.
// Root port 0000:c0:01.0 (NUMA unknown): GPU 3, near nothing.
const std::vector<std::string> kSwitchA = {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"};
const std::vector<std::string> kSwitchA2 = {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"};
const std::vector<std::string> kSwitchB = {"0000:80:01.0", "0000:81:00.0", "0000:82:00.0"};
const std::vector<std::string> kSwitchB2 = {"0000:80:01.0", "0000:81:00.0", "0000:82:01.0"};

void two_switches(SysTree& t) {
    t.pci("0000:03:00.0", kSwitchA, "0\n", "0-15,32-47")
        .pci("0000:04:00.0", kSwitchA2, "0\n", "0-15,32-47")
        .pci("0000:05:00.0", kSwitchA2, "0\n")
        .pci("0000:83:00.0", kSwitchB, "1\n", "16-31,48-63")
        .pci("0000:84:00.0", kSwitchB2, "1\n")
        .pci("0000:41:00.0", {"0000:40:01.0"}, "1\n", "16-31,48-63")
        .pci("0000:c1:00.0", {"0000:c0:01.0"})
        .hca("mlx5_0", "0000:04:00.0")
        .hca("mlx5_1", "0000:84:00.0")
        // mlx5_0's verbs node is uverbs1, mlx5_1's uverbs0: paired by ibdev.
        .ib_node("uverbs1", "mlx5_0", "0000:04:00.0", "231:193")
        .ib_node("uverbs0", "mlx5_1", "0000:84:00.0", "231:192")
        .ib_node("umad0", "mlx5_0", "0000:04:00.0", "231:0")
        .ib_node("umad1", "mlx5_0", "0000:04:00.0", "231:1")
        .ib_node("umad2", "mlx5_1", "0000:84:00.0", "231:2")
        .ib_node("issm0", "mlx5_0", "0000:04:00.0", "231:64")
        .ib_node("issm1", "mlx5_0", "0000:04:00.0", "231:65")
        .ib_node("issm2", "mlx5_1", "0000:84:00.0", "231:66")
        .drm("0000:03:00.0", "renderD128", "226:128")
        .drm("0000:03:00.0", "card1", "226:1")
        .nvme("nvme0", "0000:05:00.0");
}

std::vector<std::string> names(const std::vector<node::sysfs::ClassDevice>& v) {
    std::vector<std::string> out;
    for (const auto& d : v)
        out.push_back(d.name + "=" + std::to_string(d.major) + ":" + std::to_string(d.minor));
    return out;
}

// The library's log lines while it lives ("warning <message>").
class LogCapture {
  public:
    LogCapture() : ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_st>(256)) {
        ring_->set_pattern("%l %v");
        auto log = std::make_shared<spdlog::logger>("test", ring_);
        log->set_level(spdlog::level::trace);
        util::set_logger(log);
    }
    ~LogCapture() { util::set_logger(std::make_shared<spdlog::logger>("test")); }
    std::string text() const {
        std::string out;
        for (const auto& line : ring_->last_formatted()) out += line + "\n";
        return out;
    }

  private:
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_st> ring_;
};

class Sysfs : public ::testing::Test {
  protected:
    void SetUp() override { two_switches(tree_); }
    const fs::path& sys() const { return tree_.root(); }

    test::TempDir dir_{"gpubind-sysfs"};
    SysTree tree_{dir_.path() / "sys"};
};

TEST_F(Sysfs, PlaceHasBridgesNumaAndCpus) {
    const auto place = node::sysfs::pci_place(sys(), "0000:03:00.0");
    ASSERT_TRUE(place);
    EXPECT_EQ(place->bridges, kSwitchA);
    EXPECT_EQ(place->numa_node, 0);
    EXPECT_EQ(place->cpulist, "0-15,32-47");

    const auto alone = node::sysfs::pci_place(sys(), "0000:c1:00.0");
    ASSERT_TRUE(alone);
    EXPECT_THAT(alone->bridges, ElementsAre("0000:c0:01.0"));
    EXPECT_EQ(alone->numa_node, -1);
    EXPECT_EQ(alone->cpulist, "");
}

TEST_F(Sysfs, PlaceOfNvmlsBusIdIsSysfss) {
    const auto place = node::sysfs::pci_place(sys(), "00000000:83:00.0");
    ASSERT_TRUE(place);
    EXPECT_EQ(place->bridges, kSwitchB);
    EXPECT_EQ(node::sysfs::pci_place(sys(), "0000:83:00.0"), place);
}

TEST_F(Sysfs, AbsentDeviceHasNoPlace) {
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
    EXPECT_FALSE(node::sysfs::pci_place(dir_ / "nothing", "0000:03:00.0"));
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "../../etc"));
    EXPECT_FALSE(node::sysfs::pci_place(sys(), ""));
}

TEST_F(Sysfs, RootComplexDeviceHasNoBridges) {
    tree_.pci("0000:00:05.0", {}, "0\n");
    const auto place = node::sysfs::pci_place(sys(), "0000:00:05.0");
    ASSERT_TRUE(place);
    EXPECT_THAT(place->bridges, IsEmpty());
    EXPECT_EQ(place->numa_node, 0);
}

TEST_F(Sysfs, HcasPairedWithTheirNodesByIbdev) {
    const auto hcas = node::sysfs::hcas(sys());
    ASSERT_EQ(hcas.size(), 2u);
    EXPECT_EQ(hcas[0].name, "mlx5_0");
    EXPECT_EQ(hcas[0].pci_bus_id, "0000:04:00.0");
    ASSERT_TRUE(hcas[0].place);
    EXPECT_EQ(hcas[0].place->bridges, kSwitchA2);
    EXPECT_EQ(hcas[0].place->numa_node, 0);
    EXPECT_THAT(names(hcas[0].verbs), ElementsAre("uverbs1=231:193"));
    EXPECT_THAT(names(hcas[0].umad), ElementsAre("umad0=231:0", "umad1=231:1"));
    EXPECT_THAT(names(hcas[0].issm), ElementsAre("issm0=231:64", "issm1=231:65"));

    EXPECT_EQ(hcas[1].name, "mlx5_1");
    EXPECT_EQ(hcas[1].pci_bus_id, "0000:84:00.0");
    ASSERT_TRUE(hcas[1].place);
    EXPECT_EQ(hcas[1].place->numa_node, 1);
    EXPECT_THAT(names(hcas[1].verbs), ElementsAre("uverbs0=231:192"));
    EXPECT_THAT(names(hcas[1].umad), ElementsAre("umad2=231:2"));
    EXPECT_THAT(names(hcas[1].issm), ElementsAre("issm2=231:66"));
}

TEST_F(Sysfs, HcasInNaturalOrder) {
    tree_.pci("0000:85:00.0", kSwitchB2, "1\n")
        .hca("mlx5_10", "0000:85:00.0")
        .pci("0000:86:00.0", kSwitchB2, "1\n")
        .hca("mlx5_2", "0000:86:00.0");
    std::vector<std::string> got;
    for (const auto& h : node::sysfs::hcas(sys())) got.push_back(h.name);
    EXPECT_THAT(got, ElementsAre("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10"));
}

TEST_F(Sysfs, SoftwareHcaHasNoPciDevice) {
    tree_.file("devices/virtual/infiniband/rxe0/.keep", "");
    tree_.link("class/infiniband/rxe0", "../../devices/virtual/infiniband/rxe0");
    const auto hcas = node::sysfs::hcas(sys());
    ASSERT_EQ(hcas.size(), 3u);
    EXPECT_EQ(hcas[2].name, "rxe0");
    EXPECT_EQ(hcas[2].pci_bus_id, "");
    EXPECT_FALSE(hcas[2].place);
}

TEST_F(Sysfs, DrmNodesCardFirst) {
    tree_.drm("0000:03:00.0", "controlD64", "226:64");  // not a node gpubind gives
    EXPECT_THAT(names(node::sysfs::drm_nodes(sys(), "0000:03:00.0")),
                ElementsAre("card1=226:1", "renderD128=226:128"));
    EXPECT_THAT(node::sysfs::drm_nodes(sys(), "0000:83:00.0"), IsEmpty());
    EXPECT_THAT(node::sysfs::drm_nodes(sys(), "0000:99:00.0"), IsEmpty());
}

TEST_F(Sysfs, Nvmes) {
    const auto nvmes = node::sysfs::nvmes(sys());
    ASSERT_EQ(nvmes.size(), 1u);
    EXPECT_EQ(nvmes[0].name, "nvme0");
    EXPECT_EQ(nvmes[0].pci_bus_id, "0000:05:00.0");
    ASSERT_TRUE(nvmes[0].place);
    EXPECT_EQ(nvmes[0].place->bridges, kSwitchA2);
}

TEST_F(Sysfs, NearestBySwitchThenNumaThenNone) {
    const auto hcas = node::sysfs::hcas(sys());
    std::vector<const node::PciPlace*> places;
    for (const auto& h : hcas) places.push_back(h.place ? &*h.place : nullptr);

    const auto gpu0 = node::sysfs::nearest(*node::sysfs::pci_place(sys(), "0000:03:00.0"), places);
    EXPECT_EQ(gpu0.how, node::sysfs::Nearness::Switch);
    EXPECT_THAT(gpu0.which, ElementsAre(0u));

    const auto gpu1 = node::sysfs::nearest(*node::sysfs::pci_place(sys(), "0000:83:00.0"), places);
    EXPECT_EQ(gpu1.how, node::sysfs::Nearness::Switch);
    EXPECT_THAT(gpu1.which, ElementsAre(1u));

    // Under another root port, on mlx5_1's NUMA node.
    const auto gpu2 = node::sysfs::nearest(*node::sysfs::pci_place(sys(), "0000:41:00.0"), places);
    EXPECT_EQ(gpu2.how, node::sysfs::Nearness::Numa);
    EXPECT_THAT(gpu2.which, ElementsAre(1u));

    // No shared bridge, NUMA node unknown: -1 matches nothing, not even -1.
    node::PciPlace other_unknown{{"0000:e0:01.0"}, -1, ""};
    places.push_back(&other_unknown);
    const auto gpu3 = node::sysfs::nearest(*node::sysfs::pci_place(sys(), "0000:c1:00.0"), places);
    EXPECT_EQ(gpu3.how, node::sysfs::Nearness::None);
    EXPECT_THAT(gpu3.which, IsEmpty());
}

TEST(SysfsNearest, IsPure) {
    const node::PciPlace gpu{{"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, 0, "0-7"};
    const node::PciPlace same_root_port{{"0000:00:01.0", "0000:05:00.0"}, 1, ""};
    const node::PciPlace numa{{"0000:40:01.0"}, 0, ""};
    const node::PciPlace far{{"0000:80:01.0"}, 1, ""};
    // A shared root port counts as a shared bridge; nulls are never near.
    auto n = node::sysfs::nearest(gpu, {nullptr, &far, &same_root_port, &numa});
    EXPECT_EQ(n.how, node::sysfs::Nearness::Switch);
    EXPECT_THAT(n.which, ElementsAre(2u));
    n = node::sysfs::nearest(gpu, {&far, nullptr, &numa, &numa});
    EXPECT_EQ(n.how, node::sysfs::Nearness::Numa);
    EXPECT_THAT(n.which, ElementsAre(2u, 3u));
    n = node::sysfs::nearest(gpu, {&far, nullptr});
    EXPECT_EQ(n.how, node::sysfs::Nearness::None);
    EXPECT_THAT(n.which, IsEmpty());
    EXPECT_EQ(node::sysfs::nearest(gpu, {}).how, node::sysfs::Nearness::None);
    EXPECT_EQ(node::sysfs::to_string(node::sysfs::Nearness::Switch), "switch");
    EXPECT_EQ(node::sysfs::to_string(node::sysfs::Nearness::Numa), "numa");
    EXPECT_EQ(node::sysfs::to_string(node::sysfs::Nearness::None), "none");
}

TEST(SysfsChecks, Values) {
    EXPECT_TRUE(node::sysfs::is_pci_address("0000:3b:00.0"));
    EXPECT_TRUE(node::sysfs::is_pci_address("10000:e1:1f.7"));  // a VMD domain
    EXPECT_FALSE(node::sysfs::is_pci_address("0000:3B:00.0"));
    EXPECT_FALSE(node::sysfs::is_pci_address("0000:3b:20.0"));
    EXPECT_FALSE(node::sysfs::is_pci_address("0000:3b:00.8"));
    EXPECT_FALSE(node::sysfs::is_pci_address("pci0000:00"));
    EXPECT_FALSE(node::sysfs::is_pci_address("000:3b:00.0"));
    EXPECT_FALSE(node::sysfs::is_pci_address("0000:3b:00.0\n"));
    EXPECT_FALSE(node::sysfs::is_pci_address(""));
    EXPECT_TRUE(node::sysfs::is_name("mlx5_0"));
    EXPECT_TRUE(node::sysfs::is_name("nvme-fabrics.1"));
    EXPECT_FALSE(node::sysfs::is_name(".."));
    EXPECT_FALSE(node::sysfs::is_name("a/b"));
    EXPECT_FALSE(node::sysfs::is_name("a b"));
    EXPECT_FALSE(node::sysfs::is_name(""));
    EXPECT_EQ(node::sysfs::parse_dev("231:192\n"), std::pair(231u, 192u));
    EXPECT_EQ(node::sysfs::parse_dev("4095:1048575"), std::pair(4095u, 1048575u));
    for (const char* bad : {"231", "x:y", "99999:0", "4096:0", "0:1048576", "-1:0", ":", "1:2:3"})
        EXPECT_FALSE(node::sysfs::parse_dev(bad)) << bad;
    EXPECT_TRUE(node::sysfs::name_less("mlx5_2", "mlx5_10"));
    EXPECT_FALSE(node::sysfs::name_less("mlx5_10", "mlx5_2"));
    EXPECT_TRUE(node::sysfs::name_less("card9", "renderD128"));
    EXPECT_TRUE(node::sysfs::name_less("a", "a0"));
    EXPECT_FALSE(node::sysfs::name_less("a1", "a1"));
}

// Hostile or malformed trees: nothing is followed out of the root, nothing
// throws, the odd entry is left out with a line.

TEST_F(Sysfs, LinkOutOfTheRootIsNotFollowed) {
    // Outside the sys root, a tree that would read as a device on NUMA node 0.
    SysTree outside(dir_.path());
    outside.file("devices/pci0000:00/0000:00:01.0/0000:99:00.0/numa_node", "0\n");
    tree_.link("bus/pci/devices/0000:99:00.0",
               "../../../../devices/pci0000:00/0000:00:01.0/0000:99:00.0");
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
    tree_.link("bus/pci/devices/0000:99:00.0",
               (dir_.path() / "devices/pci0000:00/0000:00:01.0/0000:99:00.0").string());
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
    // Out to /etc, which the root has too: not a PCI device under devices/.
    tree_.link("bus/pci/devices/0000:99:00.0", "../../../../etc");
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
    tree_.file("etc/numa_node", "0\n");
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
    // A device link named like another device.
    tree_.link("bus/pci/devices/0000:99:00.0", "../../../" + tree_.device("0000:03:00.0").string());
    EXPECT_FALSE(node::sysfs::pci_place(sys(), "0000:99:00.0"));
}

TEST_F(Sysfs, ClassLinkOutOfTheRootIsNotFollowed) {
    SysTree outside(dir_.path());
    outside.pci("0000:98:00.0", {"0000:97:01.0"}, "0\n").hca("mlx5_9", "0000:98:00.0");
    tree_.link("class/infiniband/mlx5_9",
               "../../../devices/pci0000:97/0000:97:01.0/"
               "0000:98:00.0/infiniband/mlx5_9");
    for (const auto& h : node::sysfs::hcas(sys())) EXPECT_NE(h.name, "mlx5_9");
    // The same HCA whose device link alone leads out: no PCI device.
    tree_.file("devices/virtual/infiniband/mlx5_9/.keep", "")
        .link("class/infiniband/mlx5_9", "../../devices/virtual/infiniband/mlx5_9")
        .link("devices/virtual/infiniband/mlx5_9/device",
              (dir_.path() / "devices/pci0000:97/0000:97:01.0/0000:98:00.0").string());
    const auto hcas = node::sysfs::hcas(sys());
    ASSERT_EQ(hcas.size(), 3u);
    EXPECT_EQ(hcas[2].name, "mlx5_9");
    EXPECT_EQ(hcas[2].pci_bus_id, "");
    EXPECT_FALSE(hcas[2].place);
}

TEST_F(Sysfs, MalformedDevFileSkipsThatNode) {
    tree_.file(tree_.device("0000:04:00.0") / "infiniband_verbs/uverbs1/dev", "231\n")
        .file(tree_.device("0000:04:00.0") / "infiniband_mad/umad1/dev", "x:y\n")
        .file(tree_.device("0000:04:00.0") / "infiniband_mad/issm0/dev", "99999:0\n")
        .file(tree_.device("0000:03:00.0") / "drm/card1/dev", "")
        .link(tree_.device("0000:03:00.0") / "drm/renderD128/dev", "/etc/hostname");
    LogCapture log;
    const auto hcas = node::sysfs::hcas(sys());
    ASSERT_EQ(hcas.size(), 2u);
    EXPECT_THAT(hcas[0].verbs, IsEmpty());
    EXPECT_THAT(names(hcas[0].umad), ElementsAre("umad0=231:0"));
    EXPECT_THAT(names(hcas[0].issm), ElementsAre("issm1=231:65"));
    EXPECT_THAT(names(hcas[1].verbs), ElementsAre("uverbs0=231:192"));
    EXPECT_THAT(node::sysfs::drm_nodes(sys(), "0000:03:00.0"), IsEmpty());
    const std::string lines = log.text();
    EXPECT_THAT(lines, ::testing::HasSubstr("uverbs1/dev: \"231\" is not MAJOR:MINOR"));
    EXPECT_THAT(lines, ::testing::HasSubstr("umad1/dev: \"x:y\" is not MAJOR:MINOR"));
    EXPECT_THAT(lines, ::testing::HasSubstr("issm0/dev: \"99999:0\" is not MAJOR:MINOR"));
}

TEST_F(Sysfs, OddIbdevAndNamesAreLeftOut) {
    tree_.file(tree_.device("0000:04:00.0") / "infiniband_verbs/uverbs1/ibdev", "../mlx5_0\n")
        .file(tree_.device("0000:04:00.0") / "infiniband_mad/umad0/ibdev", "mlx5_7\n")
        .file("devices/virtual/infiniband/bad name/.keep", "")
        .link("class/infiniband/bad name", "../../devices/virtual/infiniband/bad name");
    const auto hcas = node::sysfs::hcas(sys());
    ASSERT_EQ(hcas.size(), 2u);
    EXPECT_THAT(hcas[0].verbs, IsEmpty());
    EXPECT_THAT(names(hcas[0].umad), ElementsAre("umad1=231:1"));
}

TEST_F(Sysfs, MissingClassDirectoryIsNoDevices) {
    fs::remove_all(sys() / "class/infiniband");
    EXPECT_THAT(node::sysfs::hcas(sys()), IsEmpty());
    fs::remove_all(sys() / "class");
    EXPECT_THAT(node::sysfs::hcas(sys()), IsEmpty());
    EXPECT_THAT(node::sysfs::nvmes(sys()), IsEmpty());
    EXPECT_THAT(node::sysfs::hcas(dir_ / "nothing"), IsEmpty());
    // The class without its verbs class: HCAs without nodes.
    SysTree bare(dir_.path() / "bare");
    bare.pci("0000:04:00.0", kSwitchA2, "0\n").hca("mlx5_0", "0000:04:00.0");
    const auto hcas = node::sysfs::hcas(bare.root());
    ASSERT_EQ(hcas.size(), 1u);
    EXPECT_THAT(hcas[0].verbs, IsEmpty());
    EXPECT_THAT(hcas[0].umad, IsEmpty());
}

TEST_F(Sysfs, ClassIsAFile) {
    fs::remove_all(sys() / "class/infiniband");
    tree_.file("class/infiniband", "not a directory\n");
    EXPECT_THAT(node::sysfs::hcas(sys()), IsEmpty());
}

TEST_F(Sysfs, MalformedNumaAndCpulist) {
    tree_.file(tree_.device("0000:03:00.0") / "numa_node", "abc\n")
        .file(tree_.device("0000:03:00.0") / "local_cpulist", "0-15;rm -rf /\n");
    LogCapture log;
    const auto place = node::sysfs::pci_place(sys(), "0000:03:00.0");
    ASSERT_TRUE(place);
    EXPECT_EQ(place->numa_node, -1);
    EXPECT_EQ(place->cpulist, "");
    EXPECT_EQ(place->bridges, kSwitchA);
    EXPECT_THAT(log.text(), ::testing::HasSubstr("numa_node \"abc\" is not a NUMA node"));
    for (const char* bad : {"-2\n", "99999999999999999999\n", "1 2\n", ""}) {
        tree_.file(tree_.device("0000:03:00.0") / "numa_node", bad);
        EXPECT_EQ(node::sysfs::pci_place(sys(), "0000:03:00.0")->numa_node, -1) << bad;
    }
    // A numa_node that is a link, or a FIFO, is not read.
    tree_.link(tree_.device("0000:03:00.0") / "numa_node",
               "../../../../../../" + tree_.device("0000:83:00.0").string() + "/numa_node");
    EXPECT_EQ(node::sysfs::pci_place(sys(), "0000:03:00.0")->numa_node, -1);
    fs::remove(sys() / tree_.device("0000:03:00.0") / "numa_node");
    ASSERT_EQ(::mkfifo((sys() / tree_.device("0000:03:00.0") / "numa_node").c_str(), 0644), 0);
    EXPECT_EQ(node::sysfs::pci_place(sys(), "0000:03:00.0")->numa_node, -1);
}

// The topology of a node's GPUs.

node::Node node_of(const std::vector<std::string>& bus_ids) {
    node::Node node;
    for (unsigned i = 0; i < bus_ids.size(); ++i) {
        node::Gpu gpu;
        gpu.index = i;
        gpu.uuid = "GPU-" + std::to_string(i);
        gpu.pci_bus_id = bus_ids[i];
        node.gpus.push_back(gpu);
    }
    return node;
}

TEST_F(Sysfs, TopologyOfEachGpu) {
    node::Node node =
        node_of({"0000:03:00.0", "0000:83:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:99:00.0"});
    // A place discovery filled is used as it is.
    node.gpus[1].place = node::PciPlace{{"0000:00:01.0"}, 0, "0-3"};
    const auto topo = node::read_topology(node, sys());
    ASSERT_EQ(topo.size(), 5u);
    EXPECT_EQ(topo[0].hca_nearness, node::sysfs::Nearness::Switch);
    EXPECT_THAT(topo[0].hcas, ElementsAre("mlx5_0"));
    EXPECT_EQ(topo[0].nvme_nearness, node::sysfs::Nearness::Switch);
    EXPECT_THAT(topo[0].nvmes, ElementsAre("nvme0"));
    EXPECT_EQ(topo[1].place->cpulist, "0-3");
    EXPECT_EQ(topo[1].hca_nearness, node::sysfs::Nearness::Switch);
    EXPECT_THAT(topo[1].hcas, ElementsAre("mlx5_0"));
    EXPECT_EQ(topo[2].hca_nearness, node::sysfs::Nearness::Numa);
    EXPECT_THAT(topo[2].hcas, ElementsAre("mlx5_1"));
    EXPECT_EQ(topo[2].nvme_nearness, node::sysfs::Nearness::None);
    EXPECT_EQ(topo[3].hca_nearness, node::sysfs::Nearness::None);
    EXPECT_FALSE(topo[4].place);
    EXPECT_EQ(topo[4].hca_nearness, node::sysfs::Nearness::None);
    EXPECT_THAT(topo[4].hcas, IsEmpty());
}

TEST_F(Sysfs, TopologyJson) {
    const node::Node node =
        node_of({"0000:03:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:99:00.0"});
    const auto hcas = node::sysfs::hcas(sys());
    const auto nvmes = node::sysfs::nvmes(sys());
    const nlohmann::json j = to_json(node::read_topology(node, sys(), hcas, nvmes), hcas, nvmes);
    EXPECT_EQ(j["schema"], "gpubind.topology/v1");
    ASSERT_EQ(j["gpus"].size(), 4u);
    const auto& g0 = j["gpus"][0];
    EXPECT_EQ(g0["index"], 0);
    EXPECT_EQ(g0["uuid"], "GPU-0");
    EXPECT_EQ(g0["pci_bus_id"], "0000:03:00.0");
    EXPECT_EQ(g0["numa_node"], 0);
    EXPECT_EQ(g0["cpulist"], "0-15,32-47");
    EXPECT_EQ(g0["bridges"], nlohmann::json(kSwitchA));
    EXPECT_EQ(g0["switch"], "0000:01:00.0");
    EXPECT_EQ(g0["nearest_hcas"], nlohmann::json::parse(R"({"by":"switch","names":["mlx5_0"]})"));
    EXPECT_EQ(g0["nearest_nvmes"], nlohmann::json::parse(R"({"by":"switch","names":["nvme0"]})"));
    EXPECT_EQ(j["gpus"][1]["switch"], "0000:40:01.0");  // a root port alone
    EXPECT_EQ(j["gpus"][1]["nearest_hcas"],
              nlohmann::json::parse(R"({"by":"numa","names":["mlx5_1"]})"));
    EXPECT_EQ(j["gpus"][1]["nearest_nvmes"], nlohmann::json::parse(R"({"by":"none","names":[]})"));
    EXPECT_EQ(j["gpus"][2]["numa_node"], -1);
    const auto& absent = j["gpus"][3];
    for (const char* key : {"numa_node", "cpulist", "bridges", "switch"})
        EXPECT_TRUE(absent[key].is_null()) << key;
    EXPECT_EQ(absent["nearest_hcas"]["by"], "none");

    ASSERT_EQ(j["hcas"].size(), 2u);
    EXPECT_EQ(j["hcas"][0], nlohmann::json::parse(R"({"name":"mlx5_0","pci_bus_id":"0000:04:00.0",
        "numa_node":0,"cpulist":"0-15,32-47","switch":"0000:01:00.0","uverbs":"uverbs1",
        "bridges":["0000:00:01.0","0000:01:00.0","0000:02:01.0"]})"));
    ASSERT_EQ(j["nvmes"].size(), 1u);
    EXPECT_EQ(j["nvmes"][0]["name"], "nvme0");
    EXPECT_EQ(j["nvmes"][0]["pci_bus_id"], "0000:05:00.0");
    EXPECT_EQ(j["nvmes"][0]["switch"], "0000:01:00.0");
    EXPECT_FALSE(j["nvmes"][0].contains("uverbs"));
}

TEST_F(Sysfs, TopologyText) {
    const node::Node node = node_of({"0000:03:00.0", "0000:41:00.0", "0000:99:00.0"});
    const auto hcas = node::sysfs::hcas(sys());
    const auto nvmes = node::sysfs::nvmes(sys());
    const std::string text =
        to_text(node::read_topology(node, sys(), hcas, nvmes), hcas, nvmes, sys());
    EXPECT_THAT(text, ::testing::HasSubstr("GPU 0 (GPU-0)\n"
                                           "  Bus location:   0000:03:00.0\n"
                                           "  NUMA node:      0\n"
                                           "  CPUs:           0-15,32-47\n"
                                           "  PCIe path:      0000:00:01.0 > 0000:01:00.0 > "
                                           "0000:02:00.0 > 0000:03:00.0\n"
                                           "  Nearest HCAs:   mlx5_0 (under the same PCIe "
                                           "switch or root port)\n"));
    EXPECT_THAT(text, ::testing::HasSubstr("  Nearest HCAs:   mlx5_1 (on the same NUMA node)\n"));
    EXPECT_THAT(text, ::testing::HasSubstr("  Bus location:   0000:99:00.0, not in " +
                                           (sys() / "bus/pci/devices").string() + "\n"));
    EXPECT_THAT(text, ::testing::HasSubstr(
                          "  mlx5_0: 0000:04:00.0, NUMA node 0, switch 0000:01:00.0, uverbs1\n"));
    EXPECT_THAT(text, ::testing::HasSubstr("  nvme0: 0000:05:00.0, NUMA node 0, switch "
                                           "0000:01:00.0\n"));
}

}  // namespace
}  // namespace gpubind
