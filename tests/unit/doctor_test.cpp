// gpubind doctor on broken simulated nodes: one test per problem, each node
// written by sim::simulate and then broken the way hosts break; expectations
// (paths, numbers, versions) come from the node's manifest. A healthy node
// has nothing to say. `--json` is checked against docs/doctor.schema.json.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/start/start.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using doctor::Check;
using doctor::Verdict;
using ::testing::HasSubstr;
using ::testing::Not;

void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string joined(const Check& c) {
    std::string s = c.summary + "\n";
    for (const auto& e : c.evidence) s += e + "\n";
    return s + c.fix;
}

class Doctor : public SimNodeTest {
  protected:
    Doctor() : SimNodeTest("gpubind-doctor") { node_options().gpus(2); }
    void SetUp() override {
        SimNodeTest::SetUp();
        // A healthy node has its /dev/char links (the fix doctor offers for their absence).
        setup::dev_char_links(root(), root() / "proc", false);
    }

    std::vector<Check> node_checks() const {
        return doctor::check_node(doctor::gather_node(config()));
    }

    // The check so named; fails the test when there is none.
    static Check named(const std::vector<Check>& checks, const std::string& name) {
        for (const auto& c : checks)
            if (c.name == name) return c;
        ADD_FAILURE() << "no check " << name;
        return {};
    }

    // Every check but `name` is ok.
    static void only_this(const std::vector<Check>& checks, const std::vector<std::string>& names) {
        for (const auto& c : checks) {
            if (std::find(names.begin(), names.end(), c.name) != names.end()) continue;
            EXPECT_EQ(c.verdict, Verdict::Ok) << c.name << ": " << joined(c);
        }
    }

    // A config file for the CLI naming the node, and the state and CDI
    // directories in the test's own directories (never the host's).
    std::string config_file() const {
        const fs::path p = root() / "config.toml";
        const std::string r = root().string();
        const std::string k = kept_.path().string();
        write(p, "[node]\ndriver-root = \"" + r + "\"\ndev-root = \"" + r + "\"\nproc-root = \"" +
                     r + "/proc\"\nstate-dir = \"" + k + "/state\"\n[cdi]\ndir = \"" + k +
                     "/cdi\"\n");
        return p.string();
    }
    void own_state_dirs() {
        config().state_dir = kept_.path() / "state";
        config().cdi.dir = kept_.path() / "cdi";
        fs::create_directories(config().state_dir);
        fs::permissions(config().state_dir, fs::perms(0755));
    }
    std::vector<Check> state_checks() const {
        return doctor::check_state(doctor::gather_state(config()));
    }

    const sim::ManifestFile& file(const std::string& name) const {
        for (const auto& f : manifest().files)
            if (f.name == name && !f.compat32) return f;
        throw std::runtime_error("no " + name + " in the manifest");
    }
    const sim::ManifestNode& node(const std::string& path) const {
        for (const auto& n : manifest().nodes)
            if (n.path == path) return n;
        throw std::runtime_error("no " + path + " in the manifest");
    }
    fs::path host(const std::string& abs) const { return root() / abs.substr(1); }

    void set_param(const std::string& key, const std::string& value) {
        const fs::path p = root() / "proc/driver/nvidia/params";
        std::string text = read(p);
        const auto at = text.find(key + ": ");
        ASSERT_NE(at, std::string::npos);
        const auto nl = text.find('\n', at);
        text.replace(at, nl - at, key + ": " + value);
        ::chmod(p.c_str(), 0644);
        write(p, text);
    }

    TempDir kept_{"gpubind-doctor-kept"};  // outside the node: simulate() rewrites that
};

TEST_F(Doctor, HealthyNodeHasNothingToSay) {
    const auto checks = node_checks();
    ASSERT_GE(checks.size(), 10u);
    only_this(checks, {});
    EXPECT_THAT(named(checks, "kernel-module").summary, HasSubstr(manifest().spec.driver_version));
}

TEST_F(Doctor, DriverLibraryVersionMismatch) {
    // The module of the previous driver still loaded: the libraries were upgraded, no reboot.
    const std::string old_version = "535.161.07";
    write(root() / "proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + old_version +
              "  Thu Feb 22 00:00:00 UTC 2024\nGCC version:  gcc version 12.2.0\n");
    const auto checks = node_checks();
    const Check c = named(checks, "driver-libraries");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(c.summary, HasSubstr("version mismatch"));
    const std::string all = joined(c);
    EXPECT_THAT(all, HasSubstr(file("libcuda.so.1").real_path));
    EXPECT_THAT(all, HasSubstr(file("libnvidia-ml.so.1").real_path));
    EXPECT_THAT(all, HasSubstr("kernel module version " + old_version));
    EXPECT_THAT(c.fix, HasSubstr("reboot"));
}

TEST_F(Doctor, MissingUvmNode) {
    const auto& uvm = node("/dev/nvidia-uvm");
    fs::remove(host(uvm.path));
    const auto checks = node_checks();
    const Check c = named(checks, "uvm-device-nodes");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(joined(c), HasSubstr(host(uvm.path).string() +
                                     ": missing, the driver's is "
                                     "character device " +
                                     std::to_string(uvm.major) + ":" + std::to_string(uvm.minor)));
    EXPECT_THAT(c.fix, HasSubstr("mknod -m 666 " + host(uvm.path).string() + " c " +
                                 std::to_string(uvm.major) + " " + std::to_string(uvm.minor)));
    // Its /dev/char link now leads nowhere: that is said too, nothing else.
    only_this(checks, {"uvm-device-nodes", "dev-char-links"});
    // The fix gpubind offers first, run as given: the node is right again.
    const std::string setup =
        "gpubind setup --device-nodes --root " + root().string() + " --simulated-proc";
    ASSERT_THAT(c.fix, HasSubstr(setup + " (or by hand: mknod"));
    const auto r = test::run(GPUBIND_CLI_PATH + setup.substr(std::string_view("gpubind").size()));
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(named(node_checks(), "uvm-device-nodes").verdict, Verdict::Ok);
}

TEST_F(Doctor, WrongMajor) {
    const auto& gpu = node("/dev/nvidia" + std::to_string(manifest().gpus[1].minor));
    const unsigned wrong = gpu.major + 1;
    fs::remove(host(gpu.path));
    ASSERT_EQ(::mknod(host(gpu.path).c_str(), S_IFCHR | 0666, ::makedev(wrong, gpu.minor)), 0);
    const auto checks = node_checks();
    const Check c = named(checks, "gpu-device-nodes");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(joined(c),
                HasSubstr(host(gpu.path).string() + ": character device " + std::to_string(wrong) +
                          ":" + std::to_string(gpu.minor) + ", the driver's is character device " +
                          std::to_string(gpu.major) + ":" + std::to_string(gpu.minor)));
    EXPECT_THAT(c.fix, HasSubstr("rm " + host(gpu.path).string() + " && mknod -m 666 " +
                                 host(gpu.path).string() + " c " + std::to_string(gpu.major)));
    // The node has other numbers: the setup command replaces it only with --force.
    EXPECT_THAT(c.fix, HasSubstr("gpubind setup --device-nodes --force --root " + root().string()));
}

// A regular file where a node should be: setup never replaces it, so only
// the command by hand is offered.
TEST_F(Doctor, AFileWhereANodeShouldBeIsFixedByHandOnly) {
    const auto& gpu = node("/dev/nvidia" + std::to_string(manifest().gpus[1].minor));
    fs::remove(host(gpu.path));
    std::ofstream(host(gpu.path)) << "not a device\n";
    const Check c = named(node_checks(), "gpu-device-nodes");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(c.fix, HasSubstr("rm " + host(gpu.path).string() + " && mknod -m 666 "));
    EXPECT_THAT(c.fix, Not(HasSubstr("gpubind setup --device-nodes")));
}

TEST_F(Doctor, MissingLibraryOfACapability) {
    const auto& lib = file("libnvidia-ptxjitcompiler.so.1");
    ASSERT_EQ(lib.capability, "compute");
    fs::remove(host(lib.real_path));
    const auto checks = node_checks();
    const Check c = named(checks, "capability-compute");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(c.summary, HasSubstr("libnvidia-ptxjitcompiler.so.1"));
    EXPECT_THAT(joined(c), HasSubstr(lib.path + ": no such file"));
    EXPECT_THAT(c.fix, HasSubstr("reinstall"));
    only_this(checks, {"capability-compute"});
}

TEST_F(Doctor, AbsentPersistenceSocket) {
    fs::path socket;
    for (const auto& f : manifest().files)
        if (f.kind == "ipc" && f.name == "nvidia-persistenced") socket = host(f.path);
    ASSERT_FALSE(socket.empty());
    fs::remove(socket);
    const auto checks = node_checks();
    const Check c = named(checks, "persistence-daemon");
    EXPECT_EQ(c.verdict, Verdict::Warning);
    EXPECT_THAT(joined(c), HasSubstr(socket.string() + ": missing"));
    EXPECT_THAT(c.fix, HasSubstr("nvidia-persistenced"));
    only_this(checks, {"persistence-daemon"});
}

TEST_F(Doctor, GpuSharesAreRefusedOrUnenforcedAsThePolicySays) {
    const Check strict = named(node_checks(), "gpu-shares");
    EXPECT_EQ(strict.verdict, Verdict::Ok);
    EXPECT_THAT(strict.summary, HasSubstr("is refused"));
    EXPECT_THAT(joined(strict), HasSubstr("enforced by: nothing (the driver offers no per-cgroup "
                                          "memory limit"));
    EXPECT_THAT(joined(strict), HasSubstr("[policy] shares = \"strict\""));
    config().policy.shares = config::SharesPolicy::Soft;
    const auto checks = node_checks();
    const Check soft = named(checks, "gpu-shares");
    EXPECT_EQ(soft.verdict, Verdict::Warning);
    EXPECT_THAT(soft.summary, HasSubstr("unenforced"));
    EXPECT_THAT(soft.fix, HasSubstr("shares = \"strict\""));
    only_this(checks, {"gpu-shares"});
}

// Where the driver offers the per-cgroup memory limit, the check names it
// whatever the policy: a memory share is enforced, not refused.
class DoctorMemoryLimits : public Doctor {
  protected:
    DoctorMemoryLimits() { node_options().spec().memory_limits = true; }
};

TEST_F(DoctorMemoryLimits, GpuSharesAreEnforcedByTheDriversLimit) {
    const auto checks = node_checks();
    const Check c = named(checks, "gpu-shares");
    EXPECT_EQ(c.verdict, Verdict::Ok);
    EXPECT_THAT(c.summary, HasSubstr("enforced by the driver's per-cgroup memory limit"));
    EXPECT_THAT(joined(c), HasSubstr("enforced by: the driver's per-cgroup memory limit"));
}

TEST_F(Doctor, ModifyDeviceFilesOffWithoutNodes) {
    set_param("ModifyDeviceFiles", "0");
    for (const char* n : {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) fs::remove(host(n));
    const auto checks = node_checks();
    const Check c = named(checks, "uvm-device-nodes");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(joined(c), HasSubstr("params: ModifyDeviceFiles: 0"));
    EXPECT_THAT(c.fix, HasSubstr("ModifyDeviceFiles: 0"));
    for (const char* n : {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
        const auto& want = node(n);
        EXPECT_THAT(c.fix,
                    HasSubstr("mknod -m 666 " + host(n).string() + " c " +
                              std::to_string(want.major) + " " + std::to_string(want.minor)));
    }
}

TEST_F(Doctor, MigCapabilityNodeMissing) {
    node_options().mig({{0, 1, 0}});
    simulate();
    setup::dev_char_links(root(), root() / "proc", false);
    only_this(node_checks(), {});
    ASSERT_EQ(manifest().migs.size(), 1u);
    const std::string cap =
        "/dev/nvidia-caps/nvidia-cap" + std::to_string(manifest().migs[0].ci_cap_minor);
    fs::remove(host(cap));
    const Check c = named(node_checks(), "mig-capability-nodes");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(joined(c), HasSubstr(host(cap).string() + ": missing"));
}

TEST_F(Doctor, LdconfigWithTheHostPathMarker) {
    config() =
        config::parse_config("[node]\nldconfig = \"@/nonexistent/sbin/ldconfig.real\"\n", "test");
    config().roots = {root(), root(), root() / "proc"};
    const Check c = named(node_checks(), "ldconfig");
    EXPECT_EQ(c.verdict, Verdict::Warning);
    EXPECT_THAT(joined(c), HasSubstr("/nonexistent/sbin/ldconfig.real: missing"));
    EXPECT_THAT(c.fix, HasSubstr("@/sbin/ldconfig"));
}

TEST_F(Doctor, MissingDevCharLinksAndTheirFix) {
    fs::remove_all(root() / "dev/char");
    Check c = named(node_checks(), "dev-char-links");
    EXPECT_EQ(c.verdict, Verdict::Warning);
    const auto& ctl = node("/dev/nvidiactl");
    EXPECT_THAT(joined(c),
                HasSubstr((root() / "dev/char").string() + "/" + std::to_string(ctl.major) + ":" +
                          std::to_string(ctl.minor) + ": missing (for /dev/nvidiactl)"));
    EXPECT_THAT(c.fix, HasSubstr("gpubind setup --dev-char-links --root " + root().string()));
    // The fix, twice: the second run changes nothing.
    auto first = setup::dev_char_links(root(), root() / "proc", false);
    EXPECT_EQ(first.size(), manifest().nodes.size());
    for (const auto& line : setup::dev_char_links(root(), root() / "proc", false))
        EXPECT_THAT(line, HasSubstr("unchanged"));
    for (const auto& n : manifest().nodes)
        EXPECT_EQ(fs::canonical(root() / "dev/char" /
                                (std::to_string(n.major) + ":" + std::to_string(n.minor))),
                  host(n.path));
    EXPECT_EQ(named(node_checks(), "dev-char-links").verdict, Verdict::Ok);
}

// Issue 21: a node named like NVIDIA's with another major (a disk's, 8:0)
// got a /dev/char link, replacing the system device's. Only the majors an
// NVIDIA driver registered in /proc/devices get one; the rest is skipped,
// said in a line, and an existing link for that major is left alone.
TEST_F(Doctor, DevCharLinksOnlyForNvidiaMajors) {
    const fs::path fake = root() / "dev/nvidia-fake";
    ASSERT_EQ(::mknod(fake.c_str(), S_IFCHR | 0600, ::makedev(8, 0)), 0);
    const fs::path system_link = root() / "dev/char/8:0";
    fs::create_directories(system_link.parent_path());
    fs::create_symlink("../sda", system_link);
    const auto report = setup::dev_char_links(root(), root() / "proc", false);
    EXPECT_EQ(fs::read_symlink(system_link), "../sda");
    bool said = false;
    for (const auto& line : report)
        said |= line.find("skipped " + fake.string() + ": major 8 is not an NVIDIA driver's") !=
                std::string::npos;
    EXPECT_TRUE(said) << ::testing::PrintToString(report);
    // NVIDIA's own nodes still have theirs.
    for (const auto& n : manifest().nodes)
        EXPECT_EQ(fs::canonical(root() / "dev/char" /
                                (std::to_string(n.major) + ":" + std::to_string(n.minor))),
                  host(n.path));
}

// --- gpubind itself, through the command line ---

TEST_F(Doctor, BadConfigNamesItsLine) {
    const fs::path bad = root() / "bad.toml";
    write(bad, "[node]\nldconfig = \"/sbin/ldconfig\"\nthis is not toml\n");
    auto out = run(std::string(GPUBIND_CLI_PATH) + " doctor --json --config " + bad.string() +
                   " --root " + root().string() + " --prefix " + root().string());
    EXPECT_EQ(out.status, doctor::kExitProblem);
    auto j = nlohmann::json::parse(out.text);
    bool found = false;
    for (const auto& c : j["checks"])
        if (c["name"] == "config") {
            found = true;
            EXPECT_EQ(c["verdict"], "problem");
            EXPECT_THAT(c["evidence"][0].get<std::string>(), HasSubstr(bad.string()));
            EXPECT_THAT(c["evidence"][0].get<std::string>(), HasSubstr("line 3"));
            EXPECT_THAT(c["fix"].get<std::string>(), HasSubstr(bad.string()));
        }
    EXPECT_TRUE(found);
}

// `gpubind doctor --json`'s output: a problem, its "config" check one whose
// first evidence says `why`.
void expect_config_problem(const test::Output& out, const std::string& why) {
    EXPECT_EQ(out.status, doctor::kExitProblem);
    const auto j = nlohmann::json::parse(out.text);
    bool found = false;
    for (const auto& c : j["checks"])
        if (c["name"] == "config") {
            found = true;
            EXPECT_EQ(c["verdict"], "problem");
            ASSERT_FALSE(c["evidence"].empty());
            EXPECT_THAT(c["evidence"][0].get<std::string>(), HasSubstr(why));
        }
    EXPECT_TRUE(found);
}

TEST_F(Doctor, AConfigTheHookWouldRefuseIsAProblem) {
    // It parses, but other users may write it: the hook and the runtime
    // refuse it, so doctor must not call it fine.
    const fs::path open = root() / "open.toml";
    write(open, "[log]\nlevel = \"info\"\n");
    ::chmod(open.c_str(), 0666);
    auto out = run(std::string(GPUBIND_CLI_PATH) + " doctor --json --config " + open.string() +
                   " --root " + root().string() + " --prefix " + root().string());
    expect_config_problem(out, open.string() + ": writable by other users; refusing");
}

// GPUBIND_CONFIG naming a good file by a relative path: the hook and the
// runtime refuse it (their working directory is the runtime's), so doctor
// must say so rather than read the file it happens to find.
TEST_F(Doctor, ARelativeGpubindConfigIsAProblem) {
    write(root() / "good.toml", "[log]\nlevel = \"info\"\n");
    auto out = run("cd " + root().string() + " && GPUBIND_CONFIG=good.toml " +
                   std::string(GPUBIND_CLI_PATH) + " doctor --json --root " + root().string() +
                   " --prefix " + root().string());
    expect_config_problem(out, "good.toml: GPUBIND_CONFIG is not an absolute path; refusing");
    for (const auto& c : nlohmann::json::parse(out.text)["checks"]) {
        if (c["name"] != "config") continue;
        EXPECT_THAT(c["fix"].get<std::string>(),
                    HasSubstr("give GPUBIND_CONFIG as an absolute path"));
    }
}

// The node description and the CDI spec: missing is a warning and "not in
// use"; once written, current; after a driver upgrade, stale (the spec a
// problem: engines apply it themselves) until the node is learned again.
TEST_F(Doctor, DescriptionAndCdiSpecFollowTheDriverState) {
    own_state_dirs();
    auto checks = state_checks();
    EXPECT_EQ(named(checks, "node-description").verdict, Verdict::Warning);
    EXPECT_THAT(named(checks, "node-description").fix, HasSubstr("gpubind info --refresh"));
    EXPECT_EQ(named(checks, "cdi-spec").verdict, Verdict::Ok);
    EXPECT_THAT(named(checks, "cdi-spec").summary, HasSubstr("not in use"));

    const node::NodeKnowledge known = start::know_node(config(), {});  // what a start does
    ASSERT_TRUE(known.stored);
    const fs::path spec = config().cdi.dir / "nvidia.com-gpu.json";
    EXPECT_FALSE(fs::exists(spec));      // a start creates no CDI spec
    cdi::refresh(known.node, config());  // `gpubind cdi refresh`, the boot unit
    ASSERT_TRUE(fs::exists(spec));
    checks = state_checks();
    only_this(checks, {});
    EXPECT_THAT(joined(named(checks, "cdi-spec")), HasSubstr(spec.string() + ": current"));

    node_options().driver_version("560.35.03");
    simulate();
    checks = state_checks();
    EXPECT_EQ(named(checks, "node-description").verdict, Verdict::Warning);
    const Check cdi = named(checks, "cdi-spec");
    EXPECT_EQ(cdi.verdict, Verdict::Problem) << joined(cdi);
    EXPECT_THAT(cdi.summary, HasSubstr(spec.string()));
    EXPECT_THAT(cdi.fix, HasSubstr("gpubind cdi refresh"));
    // Doctor changed nothing: the spec still names the old driver's files.
    EXPECT_THAT(read(spec), Not(HasSubstr("560.35.03")));

    ASSERT_TRUE(start::know_node(config(), {}).recomputed);  // the next start
    EXPECT_THAT(read(spec), HasSubstr("560.35.03"));
    only_this(state_checks(), {});
}

TEST_F(Doctor, HealthyNodeExitsZeroAndABrokenOneFive) {
    const std::string cmd = std::string(GPUBIND_CLI_PATH) + " doctor --config " + config_file() +
                            " --prefix " + root().string();
    auto ok = run(cmd);
    EXPECT_EQ(ok.status, 0) << ok.text;
    EXPECT_THAT(ok.text, HasSubstr("0 problems"));
    fs::remove(host("/dev/nvidia-uvm"));
    auto broken = run(cmd);
    EXPECT_EQ(broken.status, doctor::kExitProblem);
    EXPECT_THAT(broken.text, HasSubstr("[problem] node/uvm-device-nodes"));
}

// --- engines, under a prefix ---

class DoctorEngines : public ::testing::Test {
  protected:
    void touch_binary(const std::string& rel) {
        write(dir_ / rel, "#!/bin/sh\n");
        fs::permissions(dir_ / rel, fs::perms(0755));
    }
    std::vector<Check> checks() const {
        return doctor::check_engines(doctor::gather_engines({dir_.path()}));
    }
    TempDir dir_{"gpubind-doctor-engines"};
};

TEST_F(DoctorEngines, RegistrationPointingAtAMissingHook) {
    touch_binary("usr/bin/podman");
    setup::Options o;
    o.hook_path = (dir_ / "gone/gpubind-hook").string();
    write(dir_ / setup::kHooksFile, setup::hooks_json(o));
    const auto all = checks();
    ASSERT_EQ(all.size(), 1u);
    const Check& c = all[0];
    EXPECT_EQ(c.name, "engine-podman");
    EXPECT_EQ(c.verdict, Verdict::Problem);
    EXPECT_THAT(c.summary, HasSubstr((dir_ / setup::kHooksFile).string()));
    EXPECT_THAT(c.summary, HasSubstr(o.hook_path + ", which is missing"));
    EXPECT_THAT(c.fix, HasSubstr("--hook-path"));
}

TEST_F(DoctorEngines, BareHookOnASystemdCgroup2Host) {
    touch_binary("usr/bin/podman");
    touch_binary("usr/bin/dockerd");
    fs::create_directories(dir_ / "run/systemd/system");
    write(dir_ / "sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
    setup::Options o;
    o.hook_path = GPUBIND_HOOK_PATH;        // static, executable
    o.runtime_path = GPUBIND_RUNTIME_PATH;  // likewise
    write(dir_ / setup::kHooksFile, setup::hooks_json(o));
    write(dir_ / setup::kDockerConfig, setup::docker_add(std::nullopt, o, "daemon.json"));
    const auto all = checks();
    ASSERT_EQ(all.size(), 2u);
    const Check& docker = all[0];
    EXPECT_EQ(docker.name, "engine-docker");
    EXPECT_EQ(docker.verdict, Verdict::Ok) << joined(docker);
    EXPECT_THAT(docker.summary, HasSubstr("runtime"));
    const Check& podman = all[1];
    EXPECT_EQ(podman.name, "engine-podman");
    EXPECT_EQ(podman.verdict, Verdict::Warning);
    EXPECT_THAT(podman.summary, HasSubstr("daemon-reload"));
    EXPECT_THAT(podman.fix, HasSubstr("gpubind-runtime"));
    // Without systemd the hook is fine.
    fs::remove_all(dir_ / "run/systemd");
    EXPECT_EQ(checks()[1].verdict, Verdict::Ok);
}

TEST_F(DoctorEngines, ContainerdShimAsSetupWritesIt) {
    touch_binary("usr/bin/containerd");
    setup::Options o;
    o.runtime_path = GPUBIND_RUNTIME_PATH;
    o.set_default = true;
    const std::string import = "/" + std::string(setup::kContainerdDropIn);
    write(dir_ / setup::kContainerdDropIn, setup::containerd_drop_in(std::nullopt, o, "config"));
    auto c = checks();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].name, "engine-containerd");
    // Not imported by config.toml: containerd never reads it.
    EXPECT_EQ(c[0].verdict, Verdict::Problem);
    EXPECT_THAT(joined(c[0]), HasSubstr("is not imported by"));
    write(dir_ / setup::kContainerdConfig, setup::containerd_add_import(std::nullopt, import, "c"));
    c = checks();
    EXPECT_EQ(c[0].verdict, Verdict::Ok) << joined(c[0]);
    EXPECT_EQ(c[0].summary, "gpubind is registered: runtime (default)");
    EXPECT_THAT(joined(c[0]), HasSubstr(std::string(GPUBIND_RUNTIME_PATH) + " (regular file"));
    // Pointing at a runtime that is gone.
    o.runtime_path = (dir_ / "gone/gpubind-runtime").string();
    write(dir_ / setup::kContainerdDropIn, setup::containerd_drop_in(std::nullopt, o, "config"));
    c = checks();
    EXPECT_EQ(c[0].verdict, Verdict::Problem);
    EXPECT_THAT(c[0].summary, HasSubstr(o.runtime_path + ", which is missing"));
    EXPECT_THAT(c[0].fix, HasSubstr("--runtime-path"));
}

TEST_F(DoctorEngines, CrioShimOnASystemdHostIsFine) {
    touch_binary("usr/bin/crio");
    fs::create_directories(dir_ / "run/systemd/system");
    write(dir_ / "sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
    setup::Options o;
    o.runtime_path = GPUBIND_RUNTIME_PATH;
    write(dir_ / setup::kCrioDropIn, setup::crio_drop_in(o));
    auto c = checks();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].name, "engine-crio");
    EXPECT_EQ(c[0].verdict, Verdict::Ok) << joined(c[0]);
    EXPECT_EQ(c[0].summary, "gpubind is registered: runtime");
    // The hook beside it (CRI-O reads hooks.d too) is the hazard.
    o.hook_path = GPUBIND_HOOK_PATH;
    write(dir_ / setup::kHooksFile, setup::hooks_json(o));
    c = checks();
    EXPECT_EQ(c[0].verdict, Verdict::Warning);
    EXPECT_THAT(c[0].summary, HasSubstr("bare hook"));
    EXPECT_THAT(c[0].fix, HasSubstr("gpubind setup --engine crio"));
}

TEST_F(DoctorEngines, ABrokenConfigurationIsNamed) {
    touch_binary("usr/bin/dockerd");
    write(dir_ / setup::kDockerConfig, "{\"runtimes\": ");
    const auto all = checks();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].verdict, Verdict::Problem);
    EXPECT_THAT(joined(all[0]), HasSubstr((dir_ / setup::kDockerConfig).string()));
}

// --- a container, judged from facts ---

TEST(DoctorContainer, LostDeviceAccessIsDiagnosedAsSuch) {
    doctor::ContainerFacts f;
    f.pid = 1234;
    f.bundle = "/b";
    f.request = "NVIDIA_VISIBLE_DEVICES=0";
    f.gpu = true;
    doctor::FileFact node;
    node.type = doctor::FileFact::Type::CharDevice;
    node.major = 195;
    node.minor = 0;
    f.devices.push_back({"/dev/nvidia0", "GPU 0", 195, 0, node, false});
    node.minor = 255;
    f.devices.push_back({"/dev/nvidiactl", "nvidiactl", 195, 255, node, true});
    f.cgroup_kind = "v1";
    f.cgroup_dir = "/sys/fs/cgroup/devices/x";
    const auto checks = doctor::check_container(f);
    const Check* cg = nullptr;
    for (const auto& c : checks)
        if (c.name == "device-cgroup") cg = &c;
    ASSERT_NE(cg, nullptr);
    EXPECT_EQ(cg->verdict, Verdict::Problem);
    EXPECT_THAT(cg->summary, HasSubstr("device access lost"));
    EXPECT_THAT(cg->summary, HasSubstr("/dev/nvidia0"));
    EXPECT_THAT(cg->summary, ::testing::Not(HasSubstr("/dev/nvidiactl")));
    EXPECT_THAT(cg->summary, HasSubstr("daemon-reload"));
    EXPECT_THAT(cg->fix, HasSubstr("gpubind setup --engine"));
    // Allowed again: ok.
    f.devices[0].allowed = true;
    for (const auto& c : doctor::check_container(f)) EXPECT_EQ(c.verdict, Verdict::Ok) << c.name;
}

// --- bounded ---

TEST(DoctorBounded, AHungGroupIsAProblemNotAHang) {
    const auto start = std::chrono::steady_clock::now();
    auto checks = doctor::run_bounded(
        "node",
        [] {
            std::this_thread::sleep_for(std::chrono::seconds(30));
            return std::vector<Check>{};
        },
        std::chrono::milliseconds(300));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    ASSERT_EQ(checks.size(), 1u);
    EXPECT_EQ(checks[0].verdict, Verdict::Problem);
    EXPECT_THAT(checks[0].summary, HasSubstr("no answer within 300 ms"));
}

TEST(DoctorBounded, AnExceptionInTheChildIsAProblem) {
    auto checks = doctor::run_bounded(
        "engines", []() -> std::vector<Check> { throw std::runtime_error("boom"); },
        std::chrono::seconds(5));
    ASSERT_EQ(checks.size(), 1u);
    EXPECT_EQ(checks[0].verdict, Verdict::Problem);
    EXPECT_THAT(checks[0].summary, HasSubstr("boom"));
}

// --- the JSON schema ---

// Checks `v` against the subset of JSON Schema docs/doctor.schema.json uses
// (type, const, enum, minimum, minLength, required, properties,
// additionalProperties: false, items); every violation, with its place.
void validate(const nlohmann::json& schema, const nlohmann::json& v, const std::string& at,
              std::vector<std::string>& errors) {
    if (schema.contains("type")) {
        const std::string t = schema["type"];
        const bool ok = (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
                        (t == "string" && v.is_string()) ||
                        (t == "integer" && v.is_number_integer()) ||
                        (t == "boolean" && v.is_boolean());
        if (!ok) {
            errors.push_back(at + ": not " + t);
            return;
        }
    }
    if (schema.contains("const") && v != schema["const"]) errors.push_back(at + ": not the const");
    if (schema.contains("enum") &&
        std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
        errors.push_back(at + ": " + v.dump() + " not in the enum");
    if (schema.contains("minimum") && v.is_number() && v < schema["minimum"])
        errors.push_back(at + ": below the minimum");
    if (schema.contains("minLength") && v.is_string() &&
        v.get<std::string>().size() < schema["minLength"].get<std::size_t>())
        errors.push_back(at + ": too short");
    if (v.is_object()) {
        for (const auto& r : schema.value("required", nlohmann::json::array()))
            if (!v.contains(r)) errors.push_back(at + ": no " + r.get<std::string>());
        const auto props = schema.value("properties", nlohmann::json::object());
        for (const auto& [k, sub] : v.items()) {
            if (props.contains(k))
                validate(props[k], sub, at + "." + k, errors);
            else if (schema.value("additionalProperties", true) == false)
                errors.push_back(at + ": unexpected " + k);
        }
    }
    if (v.is_array() && schema.contains("items"))
        for (std::size_t i = 0; i < v.size(); ++i)
            validate(schema["items"], v[i], at + "[" + std::to_string(i) + "]", errors);
}

TEST_F(Doctor, JsonOutputFollowsItsSchema) {
    const auto schema =
        nlohmann::json::parse(read(fs::path(GPUBIND_SOURCE_DIR) / "docs/doctor.schema.json"));
    // A node with a problem, a warning and oks.
    fs::remove(host("/dev/nvidia-uvm"));
    fs::remove(host("/run/nvidia-persistenced/socket"));
    auto out = run(std::string(GPUBIND_CLI_PATH) + " doctor --json --config " + config_file() +
                   " --prefix " + root().string());
    EXPECT_EQ(out.status, doctor::kExitProblem);
    const auto j = nlohmann::json::parse(out.text);
    std::vector<std::string> errors;
    validate(schema, j, "$", errors);
    EXPECT_EQ(errors, std::vector<std::string>{});
    // The counts agree with the checks, and every verdict is there.
    int problems = 0, warnings = 0, oks = 0;
    for (const auto& c : j["checks"]) {
        problems += c["verdict"] == "problem";
        warnings += c["verdict"] == "warning";
        oks += c["verdict"] == "ok";
    }
    EXPECT_EQ(j["problems"], problems);
    EXPECT_EQ(j["warnings"], warnings);
    EXPECT_GT(problems, 0);
    EXPECT_GT(warnings, 0);
    EXPECT_GT(oks, 0);
    // The validator catches what the schema forbids.
    auto wrong = j;
    wrong["checks"][0]["verdict"] = "fine";
    wrong["checks"][0].erase("fix");
    wrong["extra"] = 1;
    errors.clear();
    validate(schema, wrong, "$", errors);
    EXPECT_EQ(errors.size(), 3u);
}

}  // namespace
}  // namespace gpubind::test
