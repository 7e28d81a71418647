// End to end (issue 23): the device families beside the GPU, with runc and
// gpubind-hook on a simulated node of 4 GPUs under two PCIe switches, an HCA
// under each, NVSwitches, GPUDirect Storage, gdrcopy and DRM. What a
// container must get is computed from the node's manifest; the same checks
// fail without the hook. Every node a container may get is also bound from
// the host at /hostdev, so that only the device cgroup decides whether it
// opens (ENXIO: allowed, no driver behind it; EPERM: refused).
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "container.hpp"
#include "files.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FamiliesE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        spec.hcas = 2;
        spec.nvmes = 2;
        spec.nvswitch = true;
        spec.gds = true;
        spec.gdrcopy = true;
        spec.drm = true;
        node_ = std::make_unique<SimNode>(spec, "gpubind-e2e-families");
    }
    static void TearDownTestSuite() { node_.reset(); }
    void TearDown() override { node_->write_config(); }
    static const sim::Manifest& m() { return node_->manifest(); }

    // Every family node of the manifest (and each GPU's node) bound at
    // /hostdev/<n>; the script prints "== ls <dir>" listings, "== stat" and
    // "== open" of every family node's container path, and of the /hostdev
    // copies, and the by-path links and cufile.json.
    Bundle bundle(bool with_hook = true) {
        Bundle b(work_.path() / ("b" + std::to_string(count_++)));
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        std::string stat = "probe stat", open = "probe open";
        for (std::size_t i = 0; i < m().family_nodes.size(); ++i) {
            const auto& n = m().family_nodes[i];
            b.bind(node_->root() / fs::path(n.path).relative_path(), host_copy(i));
            stat += " " + n.path;
            open += " " + host_copy(i);
        }
        std::string links = "for l in";
        for (const auto& l : m().links) links += " " + l.path;
        links += "; do echo \"$l -> $(readlink $l)\"; done";
        b.command(fmt::format(
            "echo '== ls'; ls /dev/infiniband /dev/dri 2>&1; echo '== stat'; {}; echo '== open'; "
            "{}; echo '== links'; {}; echo '== cufile'; cat /etc/cufile.json 2>&1; true",
            stat, open, links));
        return b;
    }
    static std::string host_copy(std::size_t i) { return "/hostdev/f" + std::to_string(i); }

    // Problems with a container that must hold exactly the family nodes `want`
    // (indices into the manifest's family_nodes) and, `cufile`, the GDS file.
    static std::vector<std::string> check(const RunResult& r, const std::set<std::size_t>& want,
                                          bool cufile = false) {
        std::vector<std::string> problems;
        auto s = sections(r.out);
        for (std::size_t i = 0; i < m().family_nodes.size(); ++i) {
            const auto& n = m().family_nodes[i];
            const bool given = want.count(i) != 0;
            const std::string stat =
                given ? fmt::format("{} c {}:{}", n.path, n.major, n.minor) : n.path + " ENOENT";
            if (!contains(s["stat"], stat)) problems.push_back("missing: " + stat);
            // Allowed by the device cgroup: the open reaches the (absent)
            // driver. The misc major has a driver: an unknown minor is ENODEV.
            const std::string refused = host_copy(i) + " EPERM";
            if (given == contains(s["open"], refused))
                problems.push_back(n.path + (given ? " refused by the device cgroup"
                                                   : " not refused by the device cgroup"));
        }
        const bool want_cufile = cufile && !m().cufile.empty();
        const bool has_cufile = !s["cufile"].empty() && s["cufile"][0].rfind("cat:", 0) != 0;
        if (want_cufile != has_cufile)
            problems.push_back(want_cufile ? "no /etc/cufile.json" : "an /etc/cufile.json");
        return problems;
    }

    static std::set<std::size_t> nodes_of(const std::string& family,
                                          const std::set<std::string>& devices = {}) {
        std::set<std::size_t> out;
        for (std::size_t i = 0; i < m().family_nodes.size(); ++i) {
            const auto& n = m().family_nodes[i];
            if (n.family == family && (devices.empty() || devices.count(n.device))) out.insert(i);
        }
        return out;
    }
    static std::set<std::size_t> join(std::set<std::size_t> a, const std::set<std::size_t>& b) {
        a.insert(b.begin(), b.end());
        return a;
    }

    // The HCAs under GPU `gpu`'s switch, by the manifest.
    static std::set<std::string> hcas_near(unsigned gpu) {
        std::set<std::string> out;
        for (const auto& h : m().hcas)
            if (h.switch_port == m().gpus[gpu].switch_port) out.insert(h.name);
        return out;
    }
    // rdma's nodes a container gets with `hcas`: their uverbs and rdma_cm.
    static std::set<std::size_t> rdma(const std::set<std::string>& hcas) {
        std::set<std::size_t> out;
        for (std::size_t i = 0; i < m().family_nodes.size(); ++i) {
            const auto& n = m().family_nodes[i];
            if (n.family != "rdma") continue;
            if (n.path == "/dev/infiniband/rdma_cm" ||
                (hcas.count(n.device) && n.path.find("/uverbs") != std::string::npos))
                out.insert(i);
        }
        return out;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir work_{"gpubind-e2e-families-bundle"};
    int count_ = 0;
};

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += s + "\n";
    return out;
}

TEST_F(FamiliesE2e, TheNodeIsWhatTheTestNeeds) {
    // Two switches, an HCA under each, GPUs 0 and 1 under the first.
    ASSERT_EQ(m().hcas.size(), 2u);
    EXPECT_EQ(hcas_near(0).size(), 1u);
    EXPECT_EQ(hcas_near(0), hcas_near(1));
    EXPECT_NE(hcas_near(0), hcas_near(2));
    for (const char* f : {"rdma", "gdrcopy", "gds", "nvswitch", "drm"})
        EXPECT_FALSE(nodes_of(f).empty()) << f;
}

TEST_F(FamiliesE2e, RdmaAffineGivesExactlyTheHcaUnderTheGpusSwitch) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("GPUBIND_RDMA=affine");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(check(r, rdma(hcas_near(0))), IsEmpty()) << r.out;
    // The same for GPU 2, under the other switch.
    Bundle b2 = bundle();
    b2.env("NVIDIA_VISIBLE_DEVICES=2").env("GPUBIND_RDMA=affine");
    r = b2.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(check(r, rdma(hcas_near(2))), IsEmpty()) << r.out;
}

TEST_F(FamiliesE2e, ChecksFailWithoutTheHook) {
    Bundle b = bundle(/*with_hook=*/false);
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("GPUBIND_RDMA=affine").env("NVIDIA_GDS=enabled");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Each wanted node: absent and refused; and no cufile.json.
    EXPECT_GE(check(r, join(rdma(hcas_near(0)), nodes_of("gds")), true).size(),
              2 * (rdma(hcas_near(0)).size() + nodes_of("gds").size()) + 1)
        << r.out;
}

TEST_F(FamiliesE2e, MofedGivesEveryHcaButNeverUmadOrIssm) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_MOFED=enabled");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> all;
    for (const auto& h : m().hcas) all.insert(h.name);
    EXPECT_THAT(check(r, rdma(all)), IsEmpty()) << r.out;
}

TEST_F(FamiliesE2e, EachFamilyWhenAskedAndNoneWhenNot) {
    {
        Bundle b = bundle();
        b.env("NVIDIA_VISIBLE_DEVICES=1")
            .env("NVIDIA_GDRCOPY=enabled")
            .env("NVIDIA_GDS=enabled")
            .env("NVIDIA_NVSWITCH=enabled")
            .env("NVIDIA_DRIVER_CAPABILITIES=utility,graphics");
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
        const auto want =
            join(join(nodes_of("gdrcopy"), nodes_of("gds")),
                 join(nodes_of("nvswitch"), nodes_of("drm", {"card" + std::to_string(1)})));
        EXPECT_THAT(check(r, want, true), IsEmpty()) << r.out;
        // GPU 1's by-path links, recreated; not the other GPUs'.
        auto s = sections(r.out);
        for (const auto& l : m().links) {
            const bool mine = l.path.find(m().gpus[1].pci_bus_id) != std::string::npos;
            EXPECT_EQ(contains(s["links"], l.path + " -> " + l.target), mine) << joined(s["links"]);
        }
    }
    {
        Bundle b = bundle();
        b.env("NVIDIA_VISIBLE_DEVICES=1").env("NVIDIA_GDS=disabled");
        auto r = b.run();
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(check(r, {}), IsEmpty()) << r.out;
    }
}

TEST_F(FamiliesE2e, AnUnknownHcaIsRefusedNamingIt) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("GPUBIND_RDMA=mlx5_9");
    b.command("echo started");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_THAT(r.err, HasSubstr("gpubind-hook: select device mlx5_9: no rdma device mlx5_9 on "
                                 "this node (it has mlx5_0, mlx5_1"));
}

// A family added in the config alone: a made-up device with a dynamic major
// the node's /proc/devices names. A node of that name with another major is
// left out; the container gets the good one, and the cgroup lets it open it.
TEST_F(FamiliesE2e, AFamilyAddedInTheConfigAloneIsInjected) {
    const fs::path root = node_->root();
    // A major neither this host nor the node uses.
    std::set<unsigned> taken;
    for (const fs::path& devices : {fs::path("/proc/devices"), root / "proc/devices"}) {
        std::ifstream in(devices);
        for (std::string line; std::getline(in, line);)
            if (unsigned major = 0; std::sscanf(line.c_str(), "%u", &major) == 1)
                taken.insert(major);
    }
    unsigned major = 500;
    while (taken.count(major)) ++major;
    const std::string devices = slurp(root / "proc/devices");
    const auto block = devices.find("\nBlock devices:");
    ASSERT_NE(block, std::string::npos);
    const fs::path proc_devices = root / "proc/devices";
    fs::permissions(proc_devices, fs::perms::owner_write, fs::perm_options::add);
    std::ofstream(proc_devices) << devices.substr(0, block) << fmt::format("\n{} widget", major)
                                << devices.substr(block);
    ASSERT_EQ(::mknod((root / "dev/widget0").c_str(), S_IFCHR | 0666, ::makedev(major, 0)), 0);
    ASSERT_EQ(::mknod((root / "dev/widget1").c_str(), S_IFCHR | 0666, ::makedev(major + 1, 0)), 0);
    struct Cleanup {
        fs::path root;
        std::string devices;
        ~Cleanup() {
            fs::remove(root / "dev/widget0");
            fs::remove(root / "dev/widget1");
            std::ofstream(root / "proc/devices") << devices;
        }
    } cleanup{root, devices};
    node_->write_config(
        "[family.widget]\nnodes = [\"/dev/widget*\"]\nmajor = \"widget\"\n"
        "variables = [\"WIDGET_DEVICES\"]\n");

    Bundle b(work_.path() / "widget");
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
    b.bind(root / "dev/widget0", "/hostdev/widget0");
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("WIDGET_DEVICES=enabled");
    b.command("probe stat /dev/widget0 /dev/widget1; probe open /hostdev/widget0");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(r.out, HasSubstr(fmt::format("/dev/widget0 c {}:0", major)));
    EXPECT_THAT(r.out, HasSubstr("/dev/widget1 ENOENT"));
    EXPECT_THAT(r.out, HasSubstr("/hostdev/widget0 ENXIO"));
    EXPECT_THAT(slurp(node_->log()), HasSubstr("/dev/widget1 left out"));

    // Not asked: not there.
    Bundle b2(work_.path() / "widget2");
    b2.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
    b2.env("NVIDIA_VISIBLE_DEVICES=0");
    b2.command("probe stat /dev/widget0");
    r = b2.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("/dev/widget0 ENOENT"));
}

// cgroup v2: the device program runc attaches is replaced by one allowing the
// family's nodes too.
TEST_F(FamiliesE2e, RdmaAffineUnderCgroupV2) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("GPUBIND_RDMA=affine");
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
    EXPECT_THAT(check(r, rdma(hcas_near(0))), IsEmpty()) << r.out;
}

// A family asked for that the node lacks refuses the container, or with
// on-refused = warn starts it without.
TEST_F(FamiliesE2e, AFamilyTheNodeLacksRefusesOrWarns) {
    sim::Spec spec;
    spec.gpus = 1;
    SimNode bare(spec, "gpubind-e2e-families-bare");
    Bundle b(work_.path() / "bare");
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), bare.config());
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_GDS=enabled");
    b.command("echo started");
    auto r = b.run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_THAT(r.err,
                HasSubstr("gpubind-hook: plan NVIDIA_GDS=enabled: asks for gds devices and "
                          "this node has none (no /dev/nvidia-fs* with the nvidia-fs major)"));
    bare.write_config("[policy]\non-refused = \"warn\"\n");
    Bundle b2(work_.path() / "bare2");
    b2.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), bare.config());
    b2.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_GDS=enabled");
    b2.command("echo started");
    r = b2.run();
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("started"));
    EXPECT_THAT(slurp(bare.log()), HasSubstr("starting without them"));
}

// gpubind-runtime: the spec edited with the families' nodes and cgroup rules
// (the finish hook makes DRM's links), by variable and by a CDI annotation
// naming a family's device in the node's specs.
TEST_F(FamiliesE2e, TheShimGivesTheSameByVariableAndByCdi) {
    node_->write_config(
        fmt::format("[runtime]\nruntimes = [\"{}\"]\n[cdi]\ndir = \"{}\"\n"
                    "spec-dirs = [\"{}\"]\nhook = \"{}\"\n",
                    env_or("GPUBIND_RUNC", "runc"), node_->cdi_dir().string(),
                    node_->cdi_dir().string(), env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH)));
    ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    struct Unset {
        ~Unset() { ::unsetenv("GPUBIND_CONFIG"); }
    } unset;
    const std::string shim = env_or("GPUBIND_RUNTIME", GPUBIND_RUNTIME_PATH);
    {
        Bundle b = bundle(/*with_hook=*/false);
        b.env("NVIDIA_VISIBLE_DEVICES=2")
            .env("GPUBIND_RDMA=affine")
            .env("NVIDIA_DRIVER_CAPABILITIES=utility,graphics");
        auto r = b.run_with(shim);
        ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
        EXPECT_THAT(check(r, join(rdma(hcas_near(2)), nodes_of("drm", {"card2"}))), IsEmpty())
            << r.out;
        auto s = sections(r.out);
        for (const auto& l : m().links) {
            if (l.path.find(m().gpus[2].pci_bus_id) == std::string::npos) continue;
            EXPECT_TRUE(contains(s["links"], l.path + " -> " + l.target)) << r.out;
        }
    }
    {
        const auto refresh = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "cdi", "refresh",
                                          "--config", node_->config().string()});
        ASSERT_EQ(refresh.exit_code, 0) << refresh.err;
        const std::string hca = m().hcas.back().name;
        Bundle b = bundle(/*with_hook=*/false);
        b.spec()["annotations"] = {{"cdi.k8s.io/e2e", "nvidia.com/gpu=0,nvidia.com/mofed=" + hca}};
        auto r = b.run_with(shim);
        ASSERT_EQ(r.exit_code, 0) << r.err << slurp(node_->log());
        EXPECT_THAT(check(r, rdma({hca})), IsEmpty()) << r.out;
    }
}

// gpubind doctor: a check a family, naming what it found; a node with numbers
// the kernel does not give its driver is a problem naming it.
TEST_F(FamiliesE2e, DoctorChecksEachFamily) {
    auto doctor = [&] {
        const auto r = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "doctor", "--json",
                                    "--config", node_->config().string()});
        const auto report = nlohmann::json::parse(r.out);
        std::map<std::string, nlohmann::json> checks;
        for (const auto& c : report["checks"]) checks[c["name"].get<std::string>()] = c;
        return checks;
    };
    auto checks = doctor();
    for (const char* f : {"rdma", "gdrcopy", "gds", "nvswitch", "drm"}) {
        ASSERT_TRUE(checks.count(std::string("family-") + f)) << f;
        EXPECT_EQ(checks["family-" + std::string(f)]["verdict"], "ok")
            << checks["family-" + std::string(f)];
    }
    std::string hcas;
    for (const auto& h : m().hcas) hcas += (hcas.empty() ? "" : ", ") + h.name;
    EXPECT_EQ(checks["family-rdma"]["summary"],
              fmt::format("{} device(s): {}", m().hcas.size(), hcas));

    // gdrdrv made again with a wrong major.
    const fs::path gdrdrv = node_->root() / "dev/gdrdrv";
    struct stat st {};
    ASSERT_EQ(::stat(gdrdrv.c_str(), &st), 0);
    ASSERT_EQ(::unlink(gdrdrv.c_str()), 0);
    ASSERT_EQ(::mknod(gdrdrv.c_str(), S_IFCHR | 0666, ::makedev(major(st.st_rdev) + 1, 0)), 0);
    struct Restore {
        fs::path path;
        dev_t rdev;
        ~Restore() {
            ::unlink(path.c_str());
            ::mknod(path.c_str(), S_IFCHR | 0666, rdev);
        }
    } restore{gdrdrv, st.st_rdev};
    checks = doctor();
    EXPECT_EQ(checks["family-gdrcopy"]["verdict"], "problem") << checks["family-gdrcopy"];
    EXPECT_THAT(checks["family-gdrcopy"]["evidence"].dump(), HasSubstr(gdrdrv.string()));
}

// gpubind list --family: the nodes a request would get, for the GPUs listed.
TEST_F(FamiliesE2e, ListShowsTheFamilyNodesARequestWouldGet) {
    auto list = [&](const std::string& device, const std::string& family) {
        const auto r = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "list", "-d", device,
                                    "--family", family, "--config", node_->config().string()});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return r.out;
    };
    const std::string out = list("2", "rdma=affine");
    for (const auto& h : m().hcas) {
        const std::string host = (node_->root() / fs::path(h.uverbs.path).relative_path()).string();
        EXPECT_EQ(out.find(host + "\n") != std::string::npos, hcas_near(2).count(h.name) == 1)
            << h.name << "\n"
            << out;
    }
    EXPECT_THAT(out, HasSubstr("/dev/infiniband/rdma_cm\n"));
    EXPECT_THAT(list("0", "gds"), HasSubstr(m().cufile.empty() ? "?" : "etc/cufile.json\n"));
    const auto bad = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "list", "--family",
                                  "rdma=mlx5_7", "--config", node_->config().string()});
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_THAT(bad.err, HasSubstr("mlx5_7"));
}

// gpubind info --topology --json against the tree the simulator built.
TEST_F(FamiliesE2e, TopologyMatchesTheSimulatedTree) {
    const auto r = run_command({env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "info", "--topology",
                                "--json", "--config", node_->config().string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["gpus"].size(), m().gpus.size());
    for (std::size_t i = 0; i < m().gpus.size(); ++i) {
        const auto& g = m().gpus[i];
        const auto& t = j["gpus"][i];
        EXPECT_EQ(t["pci_bus_id"], g.pci_bus_id);
        EXPECT_EQ(t["numa_node"], g.numa_node);
        EXPECT_EQ(t["cpulist"], g.cpulist);
        EXPECT_EQ(t["bridges"], g.bridges);
        EXPECT_EQ(t["switch"], g.switch_port);
        // The nearest HCAs: under its switch, else on its NUMA node.
        std::vector<std::string> want;
        for (const auto& h : m().hcas)
            if (h.switch_port == g.switch_port) want.push_back(h.name);
        std::string by = "switch";
        if (want.empty()) {
            by = "numa";
            for (const auto& h : m().hcas)
                if (h.numa_node == g.numa_node) want.push_back(h.name);
        }
        if (want.empty()) by = "none";
        EXPECT_EQ(t["nearest_hcas"]["names"], want) << i;
        EXPECT_EQ(t["nearest_hcas"]["by"], by) << i;
        std::vector<std::string> nvmes;
        for (const auto& n : m().nvmes)
            if (n.switch_port == g.switch_port) nvmes.push_back(n.name);
        EXPECT_EQ(t["nearest_nvmes"]["names"], nvmes) << i;
    }
    ASSERT_EQ(j["hcas"].size(), m().hcas.size());
    for (std::size_t i = 0; i < m().hcas.size(); ++i) {
        EXPECT_EQ(j["hcas"][i]["name"], m().hcas[i].name);
        EXPECT_EQ(j["hcas"][i]["switch"], m().hcas[i].switch_port);
        EXPECT_EQ(j["hcas"][i]["numa_node"], m().hcas[i].numa_node);
    }
}

}  // namespace
}  // namespace gpubind::test
