// End to end: `gpubind doctor --pid` on a GPU container started by runc
// with gpubind-hook on a simulated node. Healthy, it reports ok; after its
// GPU device rules are taken away the way `systemctl daemon-reload` does
// (cgroup v1: the rules denied; cgroup v2: the runtime's own device program
// put back in place of the hook's), it reports exactly that, with the fix.
// A probe in the container proves the access really is gone; expectations
// come from the simulated node's manifest.
#include <unistd.h>

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/os/bpf.hpp"
#include "gpubind/os/cgroup.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Doctor {
    int status = -1;
    nlohmann::json report;
    std::string text;

    const nlohmann::json& check(const std::string& name) const {
        for (const auto& c : report.at("checks"))
            if (c.at("name") == name) return c;
        throw std::runtime_error("no check " + name + " in\n" + text);
    }
    std::string all(const std::string& name) const { return check(name).dump(); }
};

class DoctorE2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 2;
        node_ = std::make_unique<SimNode>(spec);
    }
    static void TearDownTestSuite() { node_.reset(); }
    static const sim::Manifest& m() { return node_->manifest(); }

    std::string id() {
        return "gpubind-doctor-" + std::to_string(::getpid()) + "-" + std::to_string(count_++);
    }

    // A sleeping container asking for GPU 0 (utility, compute).
    Bundle bundle() {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)));
        b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        b.env("NVIDIA_VISIBLE_DEVICES=0").command("exec /bin/busybox sleep 600");
        b.write_spec();
        return b;
    }

    // The nodes it is given, from the manifest: GPU 0's, nvidiactl and the uvm nodes.
    static std::vector<sim::ManifestNode> given() {
        std::vector<sim::ManifestNode> out;
        const std::string gpu0 = "/dev/nvidia" + std::to_string(m().gpus.at(0).minor);
        for (const auto& n : m().nodes)
            if (n.path == gpu0 || n.path == "/dev/nvidiactl" || n.path == "/dev/nvidia-uvm" ||
                n.path == "/dev/nvidia-uvm-tools")
                out.push_back(n);
        return out;
    }

    static Doctor doctor(std::vector<std::string> where) {
        std::vector<std::string> argv = {env_or("GPUBIND_CLI", GPUBIND_CLI_PATH), "doctor",
                                         "--json", "--config", node_->config().string()};
        argv.insert(argv.end(), where.begin(), where.end());
        auto r = run_command(argv);
        Doctor d;
        d.status = r.exit_code;
        d.text = r.out + r.err;
        d.report = nlohmann::json::parse(r.out);
        return d;
    }

    // What `probe open` prints for the given nodes: ENXIO when the cgroup
    // lets the open through (no driver behind them), EPERM when it does not.
    static std::pair<std::vector<std::string>, std::string> open_check(const std::string& result) {
        std::vector<std::string> args = {"probe", "open"};
        std::string want;
        for (const auto& n : given()) {
            args.push_back(n.path);
            want += n.path + " " + result + "\n";
        }
        return {args, want};
    }

    // A healthy container: every check ok, exit 0.
    static void expect_healthy(const Doctor& d) {
        EXPECT_EQ(d.status, 0) << d.text;
        for (const auto& c : d.report.at("checks")) EXPECT_EQ(c.at("verdict"), "ok") << c.dump();
        EXPECT_THAT(d.check("container-request").at("summary").get<std::string>(),
                    HasSubstr("NVIDIA_VISIBLE_DEVICES=0"));
        const std::string plan = d.all("container-plan");
        for (const auto& n : given())
            EXPECT_THAT(plan, HasSubstr(n.path + " " + std::to_string(n.major) + ":" +
                                        std::to_string(n.minor)));
    }

    // Access lost: device-cgroup names every given node, says why and how to fix it.
    static void expect_lost(const Doctor& d, const std::string& how) {
        EXPECT_EQ(d.status, doctor::kExitProblem) << d.text;
        const auto& cg = d.check("device-cgroup");
        EXPECT_EQ(cg.at("verdict"), "problem");
        const std::string summary = cg.at("summary");
        EXPECT_THAT(summary, HasSubstr("device access lost"));
        EXPECT_THAT(summary, HasSubstr(how));
        EXPECT_THAT(summary, HasSubstr("systemctl daemon-reload"));
        for (const auto& n : given()) EXPECT_THAT(summary, HasSubstr(n.path));
        EXPECT_THAT(cg.at("fix").get<std::string>(), HasSubstr("restart the container"));
        EXPECT_THAT(cg.at("fix").get<std::string>(), HasSubstr("gpubind setup --engine"));
        // The nodes and mounts are still there: only the cgroup changed.
        EXPECT_EQ(d.check("container-devices").at("verdict"), "ok") << d.text;
        EXPECT_EQ(d.check("container-mounts").at("verdict"), "ok") << d.text;
        EXPECT_EQ(d.report.at("problems"), 1) << d.text;
    }

    // Checks that `c` started; its init's pid and its device cgroup.
    static void started(const Detached& c, int& pid, os::cgroup::DeviceCgroup& cg) {
        ASSERT_TRUE(c.created()) << c.error() << read_text(node_->log());
        pid = c.pid();
        ASSERT_GT(pid, 0);
        cg = os::cgroup::locate(c.proc_cgroup(), read_text("/proc/self/mountinfo"), "test");
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-doctor"};
    int count_ = 0;
};

TEST_F(DoctorE2e, V1RulesDeniedAsByDaemonReload) {
    Bundle b = bundle();
    Detached c(b, id());
    int pid = -1;
    os::cgroup::DeviceCgroup cg;
    ASSERT_NO_FATAL_FAILURE(started(c, pid, cg));
    if (cg.kind != os::cgroup::DeviceCgroup::Kind::V1) GTEST_SKIP() << "not a cgroup v1 host";

    auto [args, enxio] = open_check("ENXIO");
    auto r = c.exec(args);
    ASSERT_EQ(r.out, enxio) << r.err;
    // Found from the pid alone, through runc's state.
    expect_healthy(doctor({"--pid", std::to_string(pid), "--state-root", b.state_root().string()}));

    // What systemd's reload leaves: the unit's own list, without the hook's rules.
    for (const auto& n : given()) {
        std::ofstream deny(cg.dir / "devices.deny");
        deny << "c " << n.major << ":" << n.minor << " rwm\n";
    }
    auto [args2, eperm] = open_check("EPERM");
    r = c.exec(args2);
    ASSERT_EQ(r.out, eperm) << r.err;

    const Doctor d = doctor({"--pid", std::to_string(pid), "--bundle", b.dir().string()});
    expect_lost(d, "the rules were denied");
    for (const auto& n : given())
        EXPECT_THAT(d.all("device-cgroup"),
                    HasSubstr("devices.list lacks c " + std::to_string(n.major) + ":" +
                              std::to_string(n.minor) + " rw (" + n.path + ")"));
}

TEST_F(DoctorE2e, V2RuntimesProgramPutBack) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    Bundle b = bundle();
    Detached c(b, id());
    int pid = -1;
    os::cgroup::DeviceCgroup cg;
    ASSERT_NO_FATAL_FAILURE(started(c, pid, cg));
    ASSERT_EQ(cg.kind, os::cgroup::DeviceCgroup::Kind::V2);
    expect_healthy(doctor({"--pid", std::to_string(pid), "--bundle", b.dir().string()}));

    // The hook's program is the runtime's behind a prologue of one rule per
    // given node: the runtime's own, taken back out of it, goes back in its place.
    os::LinuxSystem sys;
    util::Fd dir = sys.open_cgroup_dir(cg.dir);
    const os::DevicePrograms progs = sys.query_device_programs(dir.get());
    ASSERT_EQ(progs.ids.size(), 1u);
    util::Fd ours = sys.open_program(progs.ids[0]);
    const auto insns = sys.program_instructions(ours.get());
    std::vector<os::bpf::DeviceRule> rules(given().size());
    const std::size_t prologue = os::bpf::extend_device_program(rules, {}).size();
    ASSERT_GT(insns.size(), prologue);
    const std::vector<os::bpf::Insn> runtimes(insns.begin() + static_cast<long>(prologue),
                                              insns.end());
    for (const auto& n : given())
        ASSERT_EQ(os::bpf::run_device_program(
                      runtimes, {os::bpf::kDevChar, os::bpf::kAccRead | os::bpf::kAccWrite, n.major,
                                 n.minor}),
                  0u)
            << "not the runtime's program: it allows " << n.path;
    ASSERT_NE(os::bpf::run_device_program(
                  runtimes, {os::bpf::kDevChar, os::bpf::kAccRead | os::bpf::kAccWrite, 1, 3}),
              0u)
        << "not the runtime's program: it denies /dev/null";
    util::Fd back = sys.load_device_program(runtimes, "runc_devices");
    sys.replace_device_program(dir.get(), back.get(), ours.get(), progs.attach_flags,
                               cg.dir.string());

    auto [args, eperm] = open_check("EPERM");
    auto r = c.exec(args);
    ASSERT_EQ(r.out, eperm) << r.err;

    const Doctor d = doctor({"--pid", std::to_string(pid), "--bundle", b.dir().string()});
    expect_lost(d, "the runtime's own program is back");
    EXPECT_THAT(d.all("device-cgroup"), HasSubstr("denies /dev/nvidia0"));
}

TEST_F(DoctorE2e, NotAGpuContainer) {
    Bundle b(dir_.path() / "plain");
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
    b.command("exec /bin/busybox sleep 600");
    b.write_spec();
    Detached c(b, id());
    ASSERT_TRUE(c.created()) << c.error();
    const Doctor d = doctor({"--pid", std::to_string(c.pid()), "--bundle", b.dir().string()});
    EXPECT_EQ(d.status, 0) << d.text;
    EXPECT_EQ(d.check("container-request").at("summary"), "not a GPU container");
    EXPECT_THAT(d.text, Not(HasSubstr("device-cgroup")));
}

}  // namespace
}  // namespace gpubind::test
