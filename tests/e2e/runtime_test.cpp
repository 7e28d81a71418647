// End to end: gpubind-runtime in place of runc, handing over to the real
// runc, a simulated node and a busybox+glibc rootfs. The device access must
// come from the spec alone: runc creates and grants the nodes, gpubind writes
// no cgroup rule, and re-applying the runtime's own rules (what a systemd
// reload does) keeps the GPU usable. Expectations come from the simulated
// node's manifest and from what plain runc does with the same spec.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::string runc() {
    return env_or("GPUBIND_RUNC", "runc");
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A container created by one runtime binary and started, sleeping; deleted
// with runc when it goes out of scope.
class Detached {
  public:
    Detached(const std::string& creator, const Bundle& b, const std::string& id)
        : state_(b.state_root().string()), id_(id) {
        // The container keeps its stdio: give it a file, not our pipes.
        const std::string log = (b.dir() / (id + ".out")).string();
        auto r = run_command({"sh", "-c", "exec \"$0\" \"$@\" >" + log + " 2>&1", creator, "--root",
                              state_, "create", "--bundle", b.dir().string(), id});
        created_ = r.exit_code == 0;
        error_ = read_text(log);
        if (created_) {
            r = run_command({runc(), "--root", state_, "start", id_});
            if (r.exit_code != 0) error_ += r.err;
        }
    }
    ~Detached() { run_command({runc(), "--root", state_, "delete", "--force", id_}); }
    Detached(const Detached&) = delete;
    Detached& operator=(const Detached&) = delete;

    bool created() const { return created_; }
    const std::string& error() const { return error_; }
    RunResult exec(std::vector<std::string> args) const {
        args.insert(args.begin(), {runc(), "--root", state_, "exec", id_});
        return run_command(args);
    }
    pid_t pid() const {
        auto r = run_command({runc(), "--root", state_, "state", id_});
        return json::parse(r.out).at("pid").get<pid_t>();
    }
    // The device rules runc keeps in its state for the container (what a
    // systemd unit's DeviceAllow= holds), as devices.allow/deny lines.
    std::vector<std::pair<bool, std::string>> stored_rules() const {
        json state = json::parse(read_text(fs::path(state_) / id_ / "state.json"));
        std::vector<std::pair<bool, std::string>> out;
        for (const auto& r : state.at("config").at("cgroups").at("devices")) {
            auto num = [](long n) { return n < 0 ? std::string("*") : std::to_string(n); };
            std::string rule(1, static_cast<char>(r.at("type").get<int>()));
            if (rule != "a")
                rule += " " + num(r.at("major").get<long>()) + ":" +
                        num(r.at("minor").get<long>()) + " " +
                        r.at("permissions").get<std::string>();
            out.emplace_back(r.at("allow").get<bool>(), rule);
        }
        return out;
    }
    // Its cgroup v1 devices directory.
    fs::path devices_dir() const {
        std::istringstream in(read_text("/proc/" + std::to_string(pid()) + "/cgroup"));
        std::string line;
        while (std::getline(in, line)) {
            auto a = line.find(':'), b = line.find(':', a + 1);
            if (line.substr(a + 1, b - a - 1) == "devices")
                return fs::path("/sys/fs/cgroup/devices") / line.substr(b + 2);
        }
        return {};
    }

  private:
    std::string state_, id_;
    bool created_ = false;
    std::string error_;
};

// Re-applies the runtime's stored rules to a cgroup v1 devices directory the
// way systemd does on a reload: deny everything, then the unit's rules.
void reapply_v1(const fs::path& dir, const std::vector<std::pair<bool, std::string>>& rules) {
    std::ofstream(dir / "devices.deny") << "a";
    for (const auto& [allow, rule] : rules)
        std::ofstream(dir / (allow ? "devices.allow" : "devices.deny")) << rule;
}

class RuntimeTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        node_ = std::make_unique<SimNode>(spec);
        node_->write_config("[runtime]\nruntimes = [\"" + runc() + "\"]\n");
        // gpubind-runtime finds its config as engines let it: in its environment.
        ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    }
    static void TearDownTestSuite() {
        ::unsetenv("GPUBIND_CONFIG");
        node_.reset();
    }

    Bundle bundle() { return Bundle(dir_.path() / ("b" + std::to_string(count_++))); }
    std::string id() {
        return "gpubind-rt-" + std::to_string(::getpid()) + "-" + std::to_string(count_++);
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& config() { return node_->config(); }

    // Every GPU node of the host at /hostdev: the device cgroup must refuse
    // the ones the container was not given.
    static void bind_all_gpus(Bundle& b) {
        for (const auto& [host, dest] : node_->host_gpus()) b.bind(host, dest);
    }
    // Each library is mounted once: by the runtime from the spec or by the finish hook.
    static inline const GpuChecks kChecks{.mounted_once = true};

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-rt"};
    int count_ = 0;
};

TEST_F(RuntimeTest, GpuContainerGetsExactlyTheSelectedGpusFromTheSpec) {
    Bundle b = bundle();
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=0,2").command(gpu_script(m(), kChecks));
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 2}, kChecks), "") << r.out;

    // The nodes and the grants are in the spec runc ran, with the host's numbers.
    const json spec = json::parse(read_text(b.dir() / "config.json"));
    EXPECT_TRUE(cdi::marked(spec)) << spec["hooks"].dump();
    std::set<std::string> devices, rules;
    for (const auto& d : spec["linux"]["devices"])
        devices.insert(d["path"].get<std::string>() + " " + std::to_string(d["major"].get<int>()) +
                       ":" + std::to_string(d["minor"].get<int>()));
    for (const auto& d : spec["linux"]["resources"]["devices"])
        if (d["allow"] == true)
            rules.insert(std::to_string(d["major"].get<int>()) + ":" +
                         std::to_string(d["minor"].get<int>()));
    std::set<std::string> unselected;
    for (const auto& g : m().gpus)
        if (g.index != 0 && g.index != 2)
            unselected.insert("/dev/nvidia" + std::to_string(g.minor));
    for (const auto& n : m().nodes) {
        if (n.path.find("caps") != std::string::npos || n.path.find("modeset") != std::string::npos)
            continue;  // MIG capabilities and display are not asked for
        const std::string nums = std::to_string(n.major) + ":" + std::to_string(n.minor);
        EXPECT_EQ(devices.count(n.path + " " + nums), unselected.count(n.path) ? 0u : 1u) << n.path;
        EXPECT_EQ(rules.count(nums), unselected.count(n.path) ? 0u : 1u) << n.path;
    }

    // At debug level the shim says where its create went (bench_start.py's
    // --timings reads these lines).
    const std::string log = read_text(node_->log());
    EXPECT_THAT(log, ::testing::ContainsRegex("runtime: [^\n]*: timing: spec read [0-9]+ us, "
                                              "decision [0-9]+ us, edit and serialization "
                                              "[0-9]+ us, written [0-9]+ us"));
    EXPECT_THAT(log, ::testing::ContainsRegex("runtime: timing: config [0-9]+ us, bundle and "
                                              "runtime [0-9]+ us, main to exec [0-9]+ us"));
}

// Under the engine's /run tmpfs (one the runtime makes fresh for the
// container) the daemons' sockets are mounted by the finish hook like every
// other driver file: the spec runc runs holds none of gpubind's mounts
// (issue 21: runc given a bind mount in a volume made mount points in the
// host's directory).
TEST_F(RuntimeTest, AFreshRunTmpfsGetsTheSocketsFromTheFinishHook) {
    Bundle b = bundle();
    bind_all_gpus(b);
    b.spec()["mounts"].push_back({{"destination", "/run"},
                                  {"type", "tmpfs"},
                                  {"source", "tmpfs"},
                                  {"options", {"nosuid", "nodev", "mode=755"}}});
    std::set<std::string> sockets;
    for (const auto& f : m().files)
        if (f.path.rfind("/run/", 0) == 0) sockets.insert(f.path);
    ASSERT_FALSE(sockets.empty()) << "the simulated node has no daemon socket";
    std::string script = gpu_script(m(), kChecks) + "\necho '== sockets'\n";
    for (const auto& s : sockets) script += "[ -S " + s + " ] && echo " + s + "\n";
    b.env("NVIDIA_VISIBLE_DEVICES=all").command(script);
    b.write_spec();
    const json mounts_before = json::parse(read_text(b.dir() / "config.json"))["mounts"];
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<unsigned> all;
    for (const auto& g : m().gpus) all.push_back(g.index);
    EXPECT_EQ(expect_gpus(m(), r.out, all, kChecks), "") << r.out;
    const auto out = sections(r.out);
    for (const auto& s : sockets) EXPECT_TRUE(contains(out.at("sockets"), s)) << s << "\n" << r.out;
    // The spec runc ran has the mounts it had.
    EXPECT_EQ(json::parse(read_text(b.dir() / "config.json"))["mounts"], mounts_before);
}

TEST_F(RuntimeTest, ChecksFailThroughPlainRunc) {
    // The same container through runc alone: the checks above must fail.
    Bundle b = bundle();
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=0,2").command(gpu_script(m(), kChecks));
    auto r = b.run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto problems = gpu_problems(m(), r.out, {0, 2}, kChecks);
    for (const char* check : {"devices", "cgroup", "libraries", "loader", "nvidia-smi", "proc"})
        EXPECT_TRUE(problems.count(check)) << check << " passed through plain runc:\n" << r.out;
}

// cgroup v1: the container's devices.list is what runc makes of the edited
// spec (gpubind wrote no rule of its own), and the GPU stays usable when the
// runtime's rules are re-applied (a systemd reload) and after `runc update`.
// The same re-application revokes a GPU granted by gpubind-hook: the check
// can fail.
TEST_F(RuntimeTest, CgroupV1AccessComesFromTheSpecAlone) {
    Bundle b = bundle();
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=1").command("exec /bin/busybox sleep 600");
    b.write_spec();
    const std::string shim_id = id();
    Detached shim(runtime(), b, shim_id);
    ASSERT_TRUE(shim.created()) << shim.error();
    const fs::path dir = shim.devices_dir();
    ASSERT_FALSE(dir.empty());
    const std::string open_gpu1 = "/hostdev/nvidia" + std::to_string(m().gpus[1].minor);
    EXPECT_EQ(shim.exec({"probe", "open", open_gpu1}).out, open_gpu1 + " ENXIO\n");

    // Plain runc with the edited spec, gpubind's hook taken out.
    Bundle plain = bundle();
    json spec = json::parse(read_text(b.dir() / "config.json"));
    spec["hooks"].erase("createRuntime");
    spec["root"]["path"] = b.rootfs().string();
    plain.spec() = spec;
    plain.write_spec();
    Detached reference(runc(), plain, id());
    ASSERT_TRUE(reference.created()) << reference.error();
    EXPECT_EQ(read_text(dir / "devices.list"), read_text(reference.devices_dir() / "devices.list"));

    // A reload: runc's stored rules applied afresh.
    reapply_v1(dir, shim.stored_rules());
    EXPECT_EQ(shim.exec({"probe", "open", open_gpu1}).out, open_gpu1 + " ENXIO\n");
    fs::path resources = b.dir() / "resources.json";
    std::ofstream(resources) << R"({"pids": {"limit": 1000}})";
    // runc 1.1 leaves device rules alone on update (SkipDevices); it must still work.
    auto u = run_command({runtime(), "--root", b.state_root().string(), "update", "--resources",
                          resources.string(), shim_id});
    EXPECT_EQ(u.exit_code, 0) << u.err;
    EXPECT_EQ(shim.exec({"probe", "open", open_gpu1}).out, open_gpu1 + " ENXIO\n");
    EXPECT_EQ(shim.exec({"probe", "open", "/hostdev/nvidia0"}).out, "/hostdev/nvidia0 EPERM\n");

    // The hook's way: granted behind runc's back, revoked by the reload.
    Bundle hooked = bundle();
    bind_all_gpus(hooked);
    hooked.env("NVIDIA_VISIBLE_DEVICES=1").command("exec /bin/busybox sleep 600");
    hooked.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config());
    hooked.write_spec();
    Detached old(runc(), hooked, id());
    ASSERT_TRUE(old.created()) << old.error();
    EXPECT_EQ(old.exec({"probe", "open", open_gpu1}).out, open_gpu1 + " ENXIO\n");
    reapply_v1(old.devices_dir(), old.stored_rules());
    EXPECT_EQ(old.exec({"probe", "open", open_gpu1}).out, open_gpu1 + " EPERM\n");
}

// cgroup v2: no devices.list; the eBPF program runc attaches from the spec is
// what grants. The selected GPU opens, the others are refused (the process
// sits in the v1 devices root, so nothing else could refuse them), the same
// as plain runc with the edited spec, before and after `runc update`.
TEST_F(RuntimeTest, CgroupV2AccessComesFromTheSpecAlone) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    Bundle b = bundle();
    bind_all_gpus(b);
    b.env("NVIDIA_VISIBLE_DEVICES=1").command("exec /bin/busybox sleep 600");
    b.write_spec();
    const std::string shim_id = id();
    Detached shim(runtime(), b, shim_id);
    ASSERT_TRUE(shim.created()) << shim.error();
    const std::string cgroups = read_text("/proc/" + std::to_string(shim.pid()) + "/cgroup");
    EXPECT_THAT(cgroups, HasSubstr("0::/" + shim_id + "\n")) << "not in a cgroup v2 of its own";
    EXPECT_THAT(cgroups, HasSubstr(":devices:/\n")) << "confined by cgroup v1 devices too";

    std::string want;
    for (const auto& g : m().gpus)
        want +=
            "/hostdev/nvidia" + std::to_string(g.minor) + (g.index == 1 ? " ENXIO\n" : " EPERM\n");
    std::vector<std::string> open = {"probe", "open"};
    for (const auto& g : m().gpus) open.push_back("/hostdev/nvidia" + std::to_string(g.minor));
    EXPECT_EQ(shim.exec(open).out, want);
    EXPECT_EQ(shim.exec({"probe", "stat", "/dev/nvidia" + std::to_string(m().gpus[1].minor)}).out,
              "/dev/nvidia" + std::to_string(m().gpus[1].minor) +
                  " c 195:" + std::to_string(m().gpus[1].minor) + "\n");

    Bundle plain = bundle();
    json spec = json::parse(read_text(b.dir() / "config.json"));
    spec["hooks"].erase("createRuntime");
    spec["root"]["path"] = b.rootfs().string();
    plain.spec() = spec;
    plain.write_spec();
    Detached reference(runc(), plain, id());
    ASSERT_TRUE(reference.created()) << reference.error();
    EXPECT_EQ(reference.exec(open).out, want);

    fs::path resources = b.dir() / "resources.json";
    std::ofstream(resources) << "{}";
    auto u = run_command({runtime(), "--root", b.state_root().string(), "update", "--resources",
                          resources.string(), shim_id});
    EXPECT_EQ(u.exit_code, 0) << u.err;
    EXPECT_EQ(shim.exec(open).out, want);
}

TEST_F(RuntimeTest, NonGpuContainerSpecIsByteForByteUntouched) {
    for (const char* env :
         {"UNRELATED=1", "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES="}) {
        SCOPED_TRACE(env);
        Bundle b = bundle();
        b.env(env).command("ls /dev; ls /proc/driver 2>&1; true");
        b.write_spec();
        const std::string before = read_text(b.dir() / "config.json"),
                          rootfs = snapshot_tree(b.rootfs());
        struct stat st_before {};
        ASSERT_EQ(::stat((b.dir() / "config.json").c_str(), &st_before), 0);
        auto r = b.run_with(runtime());  // writes the same text into the same file first
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, ::testing::Not(HasSubstr("nvidia")));
        struct stat st_after {};
        ASSERT_EQ(::stat((b.dir() / "config.json").c_str(), &st_after), 0);
        EXPECT_EQ(read_text(b.dir() / "config.json"), before);
        EXPECT_EQ(st_after.st_ino, st_before.st_ino) << "config.json was replaced";
        EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs);
    }
}

TEST_F(RuntimeTest, OtherCommandsAreTheRealRuntimes) {
    for (std::vector<std::string> args :
         {std::vector<std::string>{"--version"}, {"--help"}, {"features"}, {"list"}}) {
        SCOPED_TRACE(args[0]);
        if (args[0] == "list") args = {"--root", dir_.path().string(), "list"};
        std::vector<std::string> real = args, shim = args;
        real.insert(real.begin(), runc());
        shim.insert(shim.begin(), runtime());
        auto want = run_command(real), got = run_command(shim);
        EXPECT_EQ(got.exit_code, want.exit_code);
        EXPECT_EQ(got.out, want.out);
    }
    auto want = run_command({runc(), "--root", dir_.path().string(), "state", "nosuch"});
    auto got = run_command({runtime(), "--root", dir_.path().string(), "state", "nosuch"});
    EXPECT_NE(want.exit_code, 0);
    EXPECT_EQ(got.exit_code, want.exit_code);
    EXPECT_THAT(got.err, HasSubstr("container does not exist"));
}

TEST_F(RuntimeTest, HookRegisteredAsWellInjectsNothingTwice) {
    Bundle b = bundle();
    bind_all_gpus(b);
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config(), "prestart");
    b.env("NVIDIA_VISIBLE_DEVICES=0,2").command(gpu_script(m(), kChecks));
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(expect_gpus(m(), r.out, {0, 2}, kChecks), "") << r.out;  // each library mounted once
    // The view is one tmpfs at /proc/driver/nvidia (or /proc/driver on a
    // host without the module); mountinfo lines are counted by mount id.
    std::set<std::string> proc_views;
    auto s = sections(r.out);  // named: a temporary's element would dangle in the loop
    for (const auto& line : s["mounts"]) {
        std::istringstream fields(line);
        std::string id, parent, dev, root, point, word;
        fields >> id >> parent >> dev >> root >> point;
        while (fields >> word && word != "-") {
        }
        fields >> word;  // the filesystem type
        if ((point == "/proc/driver" || point == "/proc/driver/nvidia") && word == "tmpfs")
            proc_views.insert(id);
    }
    EXPECT_EQ(proc_views.size(), 1U) << r.out;
}

TEST_F(RuntimeTest, RefusedRequestCreatesNothingAndLogsInTheEnginesFormat) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0,7").command("echo started");
    b.write_spec();
    const std::string before = read_text(b.dir() / "config.json");
    const fs::path log = b.dir() / "engine-log.json";
    const std::string container = id();
    auto r = run_command({runtime(), "--root", b.state_root().string(), "--log", log.string(),
                          "--log-format", "json", "run", "--bundle", b.dir().string(), container});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_THAT(r.err, HasSubstr("gpubind-runtime: select device 7: no GPU with this index"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_EQ(read_text(b.dir() / "config.json"), before);
    EXPECT_NE(
        run_command({runc(), "--root", b.state_root().string(), "state", container}).exit_code, 0);

    std::istringstream lines(read_text(log));
    std::string line, error_line;
    while (std::getline(lines, line)) {
        const json entry = json::parse(line);  // every line is one JSON object
        EXPECT_TRUE(entry.contains("time") && entry.contains("level") && entry.contains("msg"));
        if (entry["level"] == "error") error_line = entry["msg"];
    }
    EXPECT_THAT(error_line, HasSubstr("select device 7"));
}

TEST_F(RuntimeTest, AConfigOtherUsersMayWriteIsRefusedAndTheSpecLeftAlone) {
    // As the hook does: the runtime runs as root for every container.
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").command("echo started");
    b.write_spec();
    const std::string before = read_text(b.dir() / "config.json");
    const std::string container = id();
    RunResult r;
    {
        // The fixture's config is shared by the tests after this one: its
        // mode goes back however this ends.
        struct Restore {
            std::string path;
            ~Restore() { ::chmod(path.c_str(), 0644); }
        } restore{config().string()};
        ASSERT_EQ(::chmod(config().c_str(), 0666), 0);
        r = run_command({runtime(), "--root", b.state_root().string(), "run", "--bundle",
                         b.dir().string(), container});
    }
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr(config().string() + ": writable by other users; refusing"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_EQ(read_text(b.dir() / "config.json"), before);
    EXPECT_NE(
        run_command({runc(), "--root", b.state_root().string(), "state", container}).exit_code, 0);
}

// OCI conformance (issue 21): a GPU container without a mount namespace of
// its own is refused by the shim, with the hook's line, before runc sets
// anything up (the hook refused it only after runc had made its mounts).
TEST_F(RuntimeTest, ASpecWithoutAMountNamespaceIsRefusedBeforeRunc) {
    Bundle b = bundle();
    json namespaces = json::array();
    for (const auto& n : b.spec()["linux"]["namespaces"])
        if (n["type"] != "mount") namespaces.push_back(n);
    ASSERT_LT(namespaces.size(), b.spec()["linux"]["namespaces"].size());
    b.spec()["linux"]["namespaces"] = namespaces;
    b.env("NVIDIA_VISIBLE_DEVICES=0").command("echo started");
    b.write_spec();
    const std::string before = read_text(b.dir() / "config.json");
    const std::string rootfs = snapshot_tree(b.rootfs());
    const std::string container = id();
    auto r = run_command({runtime(), "--root", b.state_root().string(), "run", "--bundle",
                          b.dir().string(), container});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("gpubind-runtime: edit spec linux.namespaces: the container "
                                 "shares this process's mount namespace"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("started")));
    EXPECT_EQ(read_text(b.dir() / "config.json"), before);
    EXPECT_EQ(snapshot_tree(b.rootfs()), rootfs) << "runc ran: mount points in the rootfs";
    EXPECT_NE(
        run_command({runc(), "--root", b.state_root().string(), "state", container}).exit_code, 0);
}

// OCI conformance (issue 21): the state runc hands the container's hooks
// holds the annotations the caller set, and none of gpubind's (the edit's
// mark is its finish hook, not an annotation).
TEST_F(RuntimeTest, TheStateHooksSeeHoldsOnlyTheCallersAnnotations) {
    Bundle b = bundle();
    const json annotations = {{"org.example/owner", "me"}};
    b.spec()["annotations"] = annotations;
    const fs::path seen = b.dir() / "state-seen.json";
    b.spec()["hooks"]["prestart"] = {
        {{"path", "/bin/sh"}, {"args", {"sh", "-c", "cat > " + seen.string()}}}};
    b.env("NVIDIA_VISIBLE_DEVICES=0").command("echo started");
    auto r = b.run_with(runtime());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("started"));
    const json state = json::parse(read_text(seen));
    EXPECT_EQ(state.value("annotations", json::object()), annotations) << state.dump();
    // And the container still got its GPU from the shim and its finish hook.
    const json spec = json::parse(read_text(b.dir() / "config.json"));
    EXPECT_EQ(spec["hooks"]["createRuntime"].back()["args"], json({"gpubind-hook", "finish"}));
}

// Issue 21 (5): a config.json with a member nested 200,000 deep ended
// gpubind-runtime with SIGSEGV (its copy of the document recursed once a
// level). It is one line naming the file and the limit, an ordinary exit.
TEST_F(RuntimeTest, ADeeplyNestedSpecIsOneLineNotACrash) {
    Bundle b = bundle();
    b.env("NVIDIA_VISIBLE_DEVICES=0").command("echo started");
    b.write_spec();
    const fs::path file = b.dir() / "config.json";
    std::string text = read_text(file);
    const auto end = text.rfind('}');
    ASSERT_NE(end, std::string::npos);
    text.insert(end, ",\"x-deep\":" + std::string(200000, '[') + std::string(200000, ']'));
    std::ofstream(file, std::ios::trunc) << text;
    const std::string container = id();
    auto r = run_command({runtime(), "--root", b.state_root().string(), "create", "--bundle",
                          b.dir().string(), container});
    EXPECT_GT(r.exit_code, 0);
    EXPECT_LT(r.exit_code, 126) << "ended by a signal: " << r.err;
    EXPECT_THAT(r.err, HasSubstr("gpubind-runtime: parse spec " + file.string() +
                                 ": nested deeper than 1000 levels"));
    EXPECT_EQ(read_text(file), text);
}

}  // namespace
}  // namespace gpubind::test
