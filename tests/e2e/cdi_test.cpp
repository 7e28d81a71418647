// CDI end to end (issue 10): podman from Debian applying the spec
// `gpubind cdi generate` wrote into /var/run/cdi (JSON and YAML), and containerd
// 1.6 (no CDI of its own) with gpubind-runtime as its runc binary applying a
// cdi.k8s.io annotation (a container naming no CDI device is left byte for
// byte alone: EnginesTest.ContainerdNonGpuContainerIsByteForByteUnaffected); the node's spec
// rewritten at the first start after a driver upgrade; podman applying device families' specs
// (issue 23: an HCA's beside a GPU, GPUDirect Storage's). Expectations come from the simulated
// node's manifest; each check also runs where it must fail.
#include <unistd.h>

#include <fstream>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "engines.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// A spec file in /var/run/cdi, one of the two directories podman 4.3 reads
// (it has no setting for others): on the fresh /run the tests run with
// (tests/support/seal.c), never the host's. The GPU spec, or with `family`
// that device family's (`gpubind cdi generate --family`). Removed when it
// goes (and the directory if made here and empty then).
class RunCdiSpec {
  public:
    RunCdiSpec(const fs::path& config, const std::string& format, const std::string& family = {})
        : made_dir_(!fs::exists(kDir)),
          file_(kDir / ("gpubind-e2e" + (family.empty() ? "" : "-" + family) + "." + format)) {
        fs::create_directories(kDir);
        std::vector<std::string> args = {cli(),      "cdi",           "generate",
                                         "--config", config.string(), "--format",
                                         format,     "--output",      file_.string()};
        if (!family.empty()) args.insert(args.end(), {"--family", family});
        result_ = run_command(args);
    }
    ~RunCdiSpec() {
        std::error_code ec;
        fs::remove(file_, ec);
        if (made_dir_) fs::remove(kDir, ec);
    }
    RunCdiSpec(const RunCdiSpec&) = delete;
    RunCdiSpec& operator=(const RunCdiSpec&) = delete;

    const RunResult& result() const { return result_; }
    const fs::path& file() const { return file_; }

  private:
    static inline const fs::path kDir = "/var/run/cdi";
    bool made_dir_;
    fs::path file_;
    RunResult result_;
};

class CdiTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        node_ = std::make_unique<SimNode>(sim_spec());
        // Beside the node, which simulate() replaces as a whole.
        state_ = std::make_unique<TempDir>("gpubind-e2e-cdi-state");
        write_runc_recorder(recorder(), runc_got());
        node_->write_config("[runtime]\nruntimes = [\"" + recorder().string() +
                            "\"]\n[cdi]\nhook = \"" + hook() + "\"\ndir = \"" + run_cdi().string() +
                            "\"\nspec-dirs = [\"" + etc_cdi().string() + "\", \"" +
                            run_cdi().string() + "\"]\n");
        ::setenv("GPUBIND_CONFIG", config().c_str(), 1);
    }
    static void TearDownTestSuite() {
        ::unsetenv("GPUBIND_CONFIG");
        node_.reset();
        state_.reset();
    }
    // With the device families' devices (issue 23): 2 HCAs, NVMe controllers,
    // NVSwitches, GPUDirect Storage and gdrcopy.
    static sim::Spec sim_spec(const std::string& driver = "550.54.15") {
        sim::Spec spec;
        spec.gpus = 3;
        spec.mig = {{2, 1, 0}, {2, 2, 0}};
        spec.driver_version = driver;
        spec.hcas = 2;
        spec.nvmes = 2;
        spec.nvswitch = true;
        spec.gds = true;
        spec.gdrcopy = true;
        return spec;
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& config() { return node_->config(); }
    static fs::path etc_cdi() { return state_->path() / "etc-cdi"; }
    static fs::path run_cdi() { return state_->path() / "run-cdi"; }
    static fs::path recorder() { return state_->path() / "record-runc"; }
    static fs::path runc_got() { return state_->path() / "runc-got.json"; }

    // Libraries and the loader, the GPUs' nodes and the control nodes, NVML,
    // nvidia-smi, the device cgroup and /proc/driver/nvidia.
    static inline const GpuChecks kChecks{.lib_dir = "/usr/lib/x86_64-linux-gnu",
                                          .all_nodes = true};

    // The family node at `path` (relative to the dev root), by the manifest.
    static const sim::ManifestFamilyNode& family_node(const std::string& path) {
        for (const auto& n : m().family_nodes)
            if (n.path == path) return n;
        throw std::runtime_error("no family node " + path + " in the manifest");
    }
    static std::string stat_line(const std::string& path, unsigned major, unsigned minor) {
        return path + " c " + std::to_string(major) + ":" + std::to_string(minor);
    }

    // `extra`: more of the node's files bound into the container (host, container path).
    RunResult podman(const std::vector<std::string>& devices, const std::string& script,
                     const std::vector<std::pair<fs::path, std::string>>& extra = {}) {
        std::vector<std::string> options;
        for (const auto& [src, dst] : node_->host_gpus())
            options.insert(options.end(), {"-v", src.string() + ":" + dst});
        for (const auto& [src, dst] : extra)
            options.insert(options.end(), {"-v", src.string() + ":" + dst});
        for (const auto& d : devices) options.insert(options.end(), {"--device", d});
        fs::create_directories(dir_ / "no-hooks");
        Bundle b(dir_ / ("b" + std::to_string(count_++)));
        return podman_run(dir_ / "podman", dir_ / "no-hooks", b.rootfs(), options, script);
    }

    static inline std::unique_ptr<SimNode> node_;
    static inline std::unique_ptr<TempDir> state_;
    TempDir dir_{"gpubind-e2e-cdi"};
    int count_ = 0;
};

// --- podman applies the spec itself ---

TEST_F(CdiTest, PodmanDeviceByIndexSeesExactlyThatGpu) {
    RunCdiSpec spec(config(), "json");
    ASSERT_EQ(spec.result().exit_code, 0) << spec.result().err;
    auto r = podman({"nvidia.com/gpu=1"}, gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {1}, kChecks), "") << r.out;
    // The legacy variable the spec sets keeps a registered hook from injecting again.
    r = podman({"nvidia.com/gpu=1"}, "echo \"$NVIDIA_VISIBLE_DEVICES\"");
    EXPECT_EQ(r.out, "void\n");
}

TEST_F(CdiTest, PodmanAllSeesEveryGpu) {
    RunCdiSpec spec(config(), "json");
    ASSERT_EQ(spec.result().exit_code, 0) << spec.result().err;
    auto r = podman({"nvidia.com/gpu=all"}, gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 1, 2}, kChecks), "") << r.out;
}

TEST_F(CdiTest, PodmanYamlSpecByUuid) {
    RunCdiSpec spec(config(), "yaml");
    ASSERT_EQ(spec.result().exit_code, 0) << spec.result().err;
    auto r = podman({"nvidia.com/gpu=" + m().gpus[0].uuid}, gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0}, kChecks), "") << r.out;
}

TEST_F(CdiTest, PodmanMigDeviceSeesExactlyItsNodes) {
    RunCdiSpec spec(config(), "json");
    ASSERT_EQ(spec.result().exit_code, 0) << spec.result().err;
    const sim::ManifestMig& mig = m().migs[1];  // GPU 2's second MIG device: "2:1"
    std::string script = "probe stat /dev/nvidia0 /dev/nvidia1 /dev/nvidia2";
    for (const auto& x : m().migs)
        for (unsigned minor : {x.gi_cap_minor, x.ci_cap_minor})
            script += " /dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
    script += "; ls /proc/driver/nvidia/gpus";
    for (const std::string& name : {std::string("2:1"), mig.uuid}) {
        SCOPED_TRACE(name);
        auto r = podman({"nvidia.com/gpu=" + name}, script);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("/dev/nvidia2 c 195:2"));
        EXPECT_THAT(r.out, HasSubstr("/dev/nvidia0 ENOENT"));
        EXPECT_THAT(r.out, HasSubstr("/dev/nvidia1 ENOENT"));
        for (const auto& x : m().migs)
            for (unsigned minor : {x.gi_cap_minor, x.ci_cap_minor}) {
                const std::string path = "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
                EXPECT_THAT(r.out, HasSubstr(&x == &mig ? path + " c " : path + " ENOENT"))
                    << r.out;
            }
        EXPECT_THAT(r.out, HasSubstr(m().gpus[2].pci_bus_id));
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr(m().gpus[0].pci_bus_id)));
    }
}

// Device families' specs beside the GPU's (issue 23): a GPU with an HCA
// gives that HCA's uverbs node and the shared rdma_cm, the other HCA's
// nothing; only the nodes given open (the node's copies bound at /hostdev).
TEST_F(CdiTest, PodmanGpuWithHcaSeesItsUverbsAndRdmaCm) {
    RunCdiSpec gpus(config(), "json");
    ASSERT_EQ(gpus.result().exit_code, 0) << gpus.result().err;
    RunCdiSpec mofed(config(), "json", "rdma");
    ASSERT_EQ(mofed.result().exit_code, 0) << mofed.result().err;
    ASSERT_THAT(read_text(mofed.file()), HasSubstr("\"kind\": \"nvidia.com/mofed\""));
    ASSERT_EQ(m().hcas.size(), 2u);
    const sim::ManifestHca& hca0 = m().hcas[0];
    const sim::ManifestHca& hca1 = m().hcas[1];
    ASSERT_EQ(hca0.name, "mlx5_0");
    const sim::ManifestFamilyNode& rdma_cm = family_node("/dev/infiniband/rdma_cm");
    const std::vector<std::string> devices = {"nvidia.com/gpu=0", "nvidia.com/mofed=mlx5_0"};

    // The GPU as without the HCA.
    auto r = podman(devices, gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0}, kChecks), "") << r.out;

    // The HCA's nodes with the manifest's numbers, and no other.
    const std::vector<std::pair<fs::path, std::string>> copies = {
        {node_->root() / "dev/infiniband/uverbs0", "/hostdev/uverbs0"},
        {node_->root() / "dev/infiniband/uverbs1", "/hostdev/uverbs1"}};
    const std::string script = "probe stat /dev/nvidia0 /dev/nvidia1 " + hca0.uverbs.path + " " +
                               hca1.uverbs.path + " " + rdma_cm.path + " " + hca0.umad.path + " " +
                               hca0.issm.path + "; probe open /hostdev/uverbs0 /hostdev/uverbs1";
    r = podman(devices, script, copies);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(stat_line("/dev/nvidia0", 195, 0))) << r.out;
    EXPECT_THAT(r.out, HasSubstr("/dev/nvidia1 ENOENT")) << r.out;
    EXPECT_THAT(r.out, HasSubstr(stat_line(hca0.uverbs.path, hca0.uverbs.major, hca0.uverbs.minor)))
        << r.out;
    EXPECT_THAT(r.out, HasSubstr(stat_line(rdma_cm.path, rdma_cm.major, rdma_cm.minor))) << r.out;
    for (const std::string& absent : {hca1.uverbs.path, hca0.umad.path, hca0.issm.path})
        EXPECT_THAT(r.out, HasSubstr(absent + " ENOENT")) << r.out;
    // uverbs0 is allowed (no driver behind it), uverbs1 refused by the device cgroup.
    EXPECT_THAT(r.out, HasSubstr("/hostdev/uverbs1 EPERM")) << r.out;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("/hostdev/uverbs0 EPERM"))) << r.out;

    // Without the HCA's device, none of its nodes.
    r = podman({"nvidia.com/gpu=0"}, script, copies);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const std::string& absent : {hca0.uverbs.path, rdma_cm.path})
        EXPECT_THAT(r.out, HasSubstr(absent + " ENOENT")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("/hostdev/uverbs0 EPERM")) << r.out;
}

// GPUDirect Storage's "all": every nvidia-fs node and cuFile's configuration,
// read-only; no GPU.
TEST_F(CdiTest, PodmanGdsAllGivesNvidiaFsNodesAndCufile) {
    RunCdiSpec gds(config(), "json", "gds");
    ASSERT_EQ(gds.result().exit_code, 0) << gds.result().err;
    ASSERT_FALSE(m().cufile.empty());
    std::vector<const sim::ManifestFamilyNode*> fs_nodes;
    std::string script = "probe stat /dev/nvidia0 /dev/gdrdrv";
    for (const auto& n : m().family_nodes)
        if (n.family == "gds") {
            fs_nodes.push_back(&n);
            script += " " + n.path;
        }
    ASSERT_FALSE(fs_nodes.empty());
    script += "; echo '== cufile'; cat " + m().cufile + "; echo '== mounts'; grep ' " + m().cufile +
              " ' /proc/self/mounts; echo '== write'; (echo x >>" + m().cufile + ") 2>&1; true";
    auto r = podman({"nvidia.com/gds=all"}, script);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto* n : fs_nodes)
        EXPECT_THAT(r.out, HasSubstr(stat_line(n->path, n->major, n->minor))) << r.out;
    EXPECT_THAT(r.out, HasSubstr("/dev/nvidia0 ENOENT")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("/dev/gdrdrv ENOENT")) << r.out;
    const std::string cufile = read_text(node_->root() / fs::path(m().cufile).relative_path());
    ASSERT_FALSE(cufile.empty());
    EXPECT_THAT(r.out, HasSubstr("== cufile\n" + cufile)) << r.out;
    const auto mounts = r.out.substr(r.out.find("== mounts"));
    EXPECT_THAT(mounts, ::testing::ContainsRegex(" " + m().cufile + " [^ ]+ (ro,|ro )")) << r.out;
    EXPECT_THAT(r.out.substr(r.out.find("== write")), HasSubstr("Read-only file system")) << r.out;
}

TEST_F(CdiTest, PodmanWithoutTheSpecRefusesTheDevice) {
    auto r = podman({"nvidia.com/gpu=1"}, "true");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("nvidia.com/gpu=1"));
}

// Specs in /var/run/cdi beside gpubind's (issue 25): the broken kinds
// `gpubind cdi check` reports, and a current DRA-style one, each declaring the
// lowest cdiVersion its features need. podman refuses or fails exactly the
// devices `check` calls a problem, and runs the others.
TEST_F(CdiTest, PodmanRunsExactlyWhatCdiCheckPasses) {
    RunCdiSpec current(config(), "json");
    ASSERT_EQ(current.result().exit_code, 0) << current.result().err;
    const fs::path dir = current.file().parent_path();
    const fs::path dev = node_->root() / "dev";
    auto node_edit = [&](const std::string& path) {
        return json{
            {"deviceNodes", {{{"path", path}, {"hostPath", (dev / path.substr(5)).string()}}}}};
    };
    auto spec = [](const std::string& kind, const std::string& name, const json& edits) {
        json s = {{"kind", kind}, {"devices", {{{"name", name}, {"containerEdits", edits}}}}};
        s["cdiVersion"] = cdi::minimum_version(s);  // podman 4.3's CDI library refuses 0.6.0
        return s;
    };
    auto lib_edit = [&](const std::string& version) {
        json e = node_edit("/dev/nvidia0");
        const std::string lib = "/usr/lib/x86_64-linux-gnu/libcuda.so." + version;
        e["mounts"] = {{{"hostPath", (node_->root() / lib.substr(1)).string()},
                        {"containerPath", lib},
                        {"options", {"ro", "nosuid", "nodev", "bind"}}}};
        return e;
    };
    json hooked = spec("example.com/hooked", "0", node_edit("/dev/nvidia0"));
    hooked["containerEdits"] = {
        {"hooks", {{{"hookName", "createContainer"}, {"path", "/nonexistent/bin/hook"}}}}};
    hooked["cdiVersion"] = cdi::minimum_version(hooked);
    // file name -> (the device asked of podman, the spec)
    const std::map<std::string, std::pair<std::string, json>> files = {
        {"dra-current.json",
         {"k8s.gpu.nvidia.com/device=claim-1",
          spec("k8s.gpu.nvidia.com/device", "claim-1", lib_edit(m().spec.driver_version))}},
        {"dra-stale.json",
         {"k8s.gpu.nvidia.com/device=claim-0",
          spec("k8s.gpu.nvidia.com/device", "claim-0", lib_edit("535.104.05"))}},
        {"nvidia3.json",
         {"example.com/gpu=3", spec("example.com/gpu", "3", node_edit("/dev/nvidia3"))}},
        {"again.json",
         {"example.com/twice=0", spec("example.com/twice", "0", node_edit("/dev/nvidia1"))}},
        {"again-too.json",
         {"example.com/twice=0", spec("example.com/twice", "0", node_edit("/dev/nvidia2"))}},
        {"hook-gone.json", {"example.com/hooked=0", hooked}},
    };
    for (const auto& [name, what] : files) std::ofstream(dir / name) << what.second.dump(2);
    struct Remove {
        const fs::path& dir;
        const std::map<std::string, std::pair<std::string, json>>& files;
        ~Remove() {
            for (const auto& [name, what] : files) fs::remove(dir / name);
        }
    } remove{dir, files};

    std::vector<std::string> args = {
        cli(), "cdi", "check", "--json", "--config", config().string(), current.file().string()};
    for (const auto& [name, what] : files) args.push_back((dir / name).string());
    const auto checked = run_command(args);
    EXPECT_EQ(checked.exit_code, 5) << checked.out << checked.err;
    std::map<std::string, std::string> verdict;  // file name -> "ok", "warning", "problem"
    const json report = json::parse(checked.out);
    for (const auto& c : report.at("checks"))
        verdict[fs::path(c.at("name").get<std::string>()).filename()] =
            c.at("verdict").get<std::string>();
    EXPECT_EQ(verdict[current.file().filename()], "ok");
    EXPECT_EQ(verdict["dra-current.json"], "ok");
    for (const char* broken :
         {"dra-stale.json", "nvidia3.json", "again.json", "again-too.json", "hook-gone.json"})
        EXPECT_EQ(verdict[broken], "problem") << broken;

    // podman, device by device: a container runs exactly where check said ok.
    std::vector<std::pair<std::string, std::string>> devices = {
        {"nvidia.com/gpu=0", current.file().filename()}};
    for (const auto& [name, what] : files) devices.emplace_back(what.first, name);
    for (const auto& [device, file] : devices) {
        const auto r = podman({device}, "true");
        EXPECT_EQ(r.exit_code == 0, verdict[file] == "ok")
            << device << " (" << file << ", check said " << verdict[file] << "): exit "
            << r.exit_code << ": " << r.err;
    }
}

// --- containerd 1.6: gpubind-runtime applies the annotation ---

TEST_F(CdiTest, ContainerdAnnotationThroughGpubindRuntime) {
    ASSERT_EQ(run_command({cli(), "cdi", "refresh", "--config", config().string()}).exit_code, 0);
    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    std::vector<std::string> options = ctr_mounts(node_->host_gpus());
    options.insert(options.end(),
                   {"--annotation", "cdi.k8s.io/gpubind-e2e=nvidia.com/gpu=0,nvidia.com/gpu=2"});
    Bundle b(dir_ / "ctr-gpu");
    auto r = containerd.run(runtime(), b.rootfs(), "cdi", options, gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err << read_text(containerd.log());
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 2}, kChecks), "") << r.out;
    const json got = json::parse(read_text(runc_got()));
    EXPECT_EQ(got["annotations"]["gpubind.cdi"], "applied");

    // Through plain runc the annotation does nothing: every check fails.
    Bundle plain(dir_ / "ctr-plain");
    r = containerd.run(env_or("GPUBIND_RUNC", "runc"), plain.rootfs(), "cdi", options,
                       gpu_script(m(), kChecks));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto problems = gpu_problems(m(), r.out, {0, 2}, kChecks);
    for (const char* check : {"devices", "libraries", "loader", "nvidia-smi", "cgroup", "proc"})
        EXPECT_TRUE(problems.count(check)) << check << " passed without gpubind:\n" << r.out;
}

// A hostile spec in a CDI directory: the container is refused with one line
// naming the file, and runc never runs.
TEST_F(CdiTest, ContainerdRefusesAHostileSpecNamingIt) {
    const fs::path etc = etc_cdi();
    fs::create_directories(etc);
    json hostile = {{"cdiVersion", "0.5.0"},
                    {"kind", "example.com/evil"},
                    {"devices",
                     {{{"name", "x"},
                       {"containerEdits",
                        {{"mounts", {{{"hostPath", "etc"}, {"containerPath", "/host-etc"}}}}}}}}}};
    write_text(etc / "evil.json", hostile.dump());
    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    // A container without CAP_SYS_ADMIN names only NVIDIA's devices (issue
    // 21): refused for the vendor before any spec is read.
    Bundle b(dir_ / "evil");
    fs::remove(runc_got());
    auto r = containerd.run(runtime(), b.rootfs(), "evil",
                            {"--annotation", "cdi.k8s.io/x=example.com/evil=x"}, "true");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("annotation cdi.k8s.io/x names example.com/evil=x, a device of "
                                 "vendor example.com"));
    EXPECT_FALSE(fs::exists(runc_got())) << "runc ran";
    // A privileged one may name it: the spec file is then refused, naming it.
    Bundle p(dir_ / "evil-privileged");
    r = containerd.run(runtime(), p.rootfs(), "evil-privileged",
                       {"--privileged", "--annotation", "cdi.k8s.io/x=example.com/evil=x"}, "true");
    fs::remove(etc / "evil.json");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr((etc / "evil.json").string()));
    EXPECT_THAT(r.err, HasSubstr("'etc' is not an absolute path"));
    EXPECT_FALSE(fs::exists(runc_got())) << "runc ran";
}

// After the driver is upgraded in place, the first start through gpubind
// rewrites the node's spec, and the container gets the new libraries.
TEST_F(CdiTest, SpecFollowsADriverUpgradeAtTheNextStart) {
    ASSERT_EQ(run_command({cli(), "cdi", "refresh", "--config", config().string()}).exit_code, 0);
    const fs::path file = run_cdi() / "nvidia.com-gpu.json";
    ASSERT_THAT(read_text(file), HasSubstr("550.54.15"));
    node_->simulate(sim_spec("555.42.06"));
    // The cdi commands that only print learn the new state but do not keep
    // it: kept, it would hide from the start that the spec is stale.
    for (const char* command : {"list", "generate"})
        ASSERT_EQ(run_command({cli(), "cdi", command, "--config", config().string()}).exit_code, 0);
    EXPECT_THAT(read_text(file), HasSubstr("550.54.15"));  // stale until a start
    Containerd containerd(dir_ / "containerd");
    ASSERT_TRUE(containerd.ready()) << containerd.error();
    std::vector<std::string> options = ctr_mounts(node_->host_gpus());
    options.insert(options.end(), {"--annotation", "cdi.k8s.io/x=nvidia.com/gpu=1"});
    Bundle b(dir_ / "upgraded");
    auto r = containerd.run(runtime(), b.rootfs(), "up", options, gpu_script(m(), kChecks));
    const std::string after = read_text(file);
    const std::string problems = expect_gpus(m(), r.out, {1}, kChecks);
    node_->simulate(sim_spec());  // the suite's node as it was
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(after, HasSubstr("555.42.06"));
    EXPECT_THAT(after, ::testing::Not(HasSubstr("550.54.15")));
    EXPECT_EQ(problems, "") << r.out;
}

}  // namespace
}  // namespace gpubind::test
