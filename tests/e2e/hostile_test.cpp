// Hostile input, end to end: each case runs through the real runc with
// gpubind-hook registered as users register it (or runs the hook itself with a
// hostile state), against a simulated node, and is judged on the host by a
// Tripwire (container.hpp): a bait tree the hostile links aim at, the host's
// own directories, /etc/ld.so.cache and the mount table. Every case must end
// with the container refused (gpubind's one line, naming what and where) or
// contained (started, the hostile thing without effect), and the tripwire
// unchanged. The SelfProof tests show the checks see the bad outcomes: the
// planted links do lead into the tripwire when followed, the markers do appear
// when the hostile programs run, the race does expose the host to a naive
// writer.
#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/strings.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr const char* kMultiarch = "/usr/lib/x86_64-linux-gnu";
// A start must end well before any runtime gives up on it (the hook's own
// budget is 45 s, its ldconfig's 30 s).
constexpr int kStartLimitSeconds = 50;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

void plant_link(const fs::path& link, const fs::path& target) {
    std::error_code ec;
    fs::remove_all(link, ec);
    fs::create_directories(link.parent_path());
    fs::create_symlink(target, link);
}

void plant_fifo(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
    fs::create_directories(p.parent_path());
    if (::mkfifo(p.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + p.string());
}

void plant_device(const fs::path& p, unsigned maj, unsigned min) {
    std::error_code ec;
    fs::remove_all(p, ec);
    fs::create_directories(p.parent_path());
    if (::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(maj, min)) != 0)
        throw std::runtime_error("mknod " + p.string());
}

// The hook's message inside runc's error ("... stderr: gpubind-hook: <msg>\n\"").
std::string hook_message(const std::string& err) {
    auto at = err.find("gpubind-hook: ");
    if (at == std::string::npos) return {};
    std::string msg = err.substr(at);
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    if (auto end = msg.rfind("\\n\""); end != std::string::npos) msg.resize(end);
    return msg;
}

struct HookRun {
    int exit_code = -1;
    std::string err;
    double seconds = 0;
    bool killed = false;  // still running after the limit
};

// Runs gpubind-hook as a runtime does (env GPUBIND_CONFIG only), the state
// made from the hook's own pid by `input`; stdin closed after it unless
// `close_stdin` is false. Killed after `limit_s`.
HookRun run_hook(const fs::path& config, const std::function<std::string(pid_t)>& input,
                 bool close_stdin = true, int limit_s = 60) {
    int in[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    const std::string hook = env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH);
    const std::string env0 = "GPUBIND_CONFIG=" + config.string();
    char* argv[] = {const_cast<char*>("gpubind-hook"), const_cast<char*>("prestart"), nullptr};
    char* envp[] = {const_cast<char*>(env0.c_str()), nullptr};
    pid_t pid = 0;
    const auto t0 = Clock::now();
    int rc = ::posix_spawn(&pid, hook.c_str(), &actions, nullptr, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(err[1]);
    HookRun result;
    if (rc != 0) {
        ::close(in[1]);
        ::close(err[0]);
        result.err = "spawn failed";
        return result;
    }
    const std::string data = input(pid);
    std::thread writer([fd = in[1], &data, close_stdin] {
        std::size_t done = 0;
        while (done < data.size()) {
            ssize_t n = ::write(fd, data.data() + done, data.size() - done);
            if (n <= 0) break;  // EPIPE: the hook stopped reading
            done += static_cast<std::size_t>(n);
        }
        if (close_stdin) ::close(fd);
    });
    const auto deadline = t0 + std::chrono::seconds(limit_s);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            result.killed = true;
            ::kill(pid, SIGKILL);
            break;
        }
        pollfd p{err[0], POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        char buf[4096];
        ssize_t n = ::read(err[0], buf, sizeof buf);
        if (n <= 0) break;
        result.err.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.seconds = seconds_since(t0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    writer.join();
    if (!close_stdin) ::close(in[1]);
    ::close(err[0]);
    return result;
}

std::string state_json(pid_t pid, const fs::path& bundle) {
    return nlohmann::json{{"ociVersion", "1.0.2"},
                          {"id", "gpubind-hostile"},
                          {"status", "creating"},
                          {"pid", pid},
                          {"bundle", bundle.string()}}
        .dump();
}

class HostileTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        ::signal(SIGPIPE, SIG_IGN);  // the hook may stop reading a 100 MB state
        sim::Spec spec;
        spec.gpus = 2;
        spec.graphics = false;
        node_ = std::make_unique<SimNode>(spec, "gpubind-hostile-node");
    }
    static void TearDownTestSuite() { node_.reset(); }

    void SetUp() override { trip_ = std::make_unique<Tripwire>(dir_.path() / "tripwire"); }

    Bundle bundle(Layout layout = Layout::Multiarch, bool with_hook = true) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)), layout);
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        return b;
    }

    // One real start (`runc run`, or `<runtime> run`: gpubind-runtime in
    // runc's place; killed after `limit_s`), the container deleted after.
    static RunResult start(Bundle& b, int limit_s = kStartLimitSeconds,
                           const std::string& runtime = "") {
        static std::atomic<int> counter{0};
        b.write_spec();
        const std::string runc = env_or("GPUBIND_RUNC", "runc");
        const std::string id =
            "gpubind-hostile-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
        const std::string state = b.state_root().string();
        auto r = run_command({"timeout", "-k", "5", std::to_string(limit_s),
                              runtime.empty() ? runc : runtime, "--root", state, "run", "--bundle",
                              b.dir().string(), id});
        run_command({runc, "--root", state, "delete", "--force", id});
        return r;
    }

    // Arms the tripwire, starts the container (printing "started"), and
    // checks the host and the time taken.
    RunResult run_case(Bundle& b, const std::string& script = "echo started",
                       const std::string& runtime = "") {
        b.command(script);
        trip_->arm();
        const auto t0 = Clock::now();
        auto r = start(b, kStartLimitSeconds, runtime);
        const double took = seconds_since(t0);
        EXPECT_NE(r.exit_code, 124)
            << "the start did not end within " << kStartLimitSeconds << " s";
        EXPECT_LT(took, kStartLimitSeconds);
        EXPECT_EQ(trip_->changes(), "");
        return r;
    }

    // Refused by gpubind: one line naming the offending path and the problem.
    static void expect_refused(const RunResult& r, const std::vector<std::string>& names) {
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("started")));
        const std::string msg = hook_message(r.err);
        ASSERT_FALSE(msg.empty()) << "not refused by gpubind: " << r.err;
        EXPECT_THAT(msg, Not(HasSubstr("\\n"))) << "more than one line: " << msg;
        for (const auto& n : names) EXPECT_THAT(msg, HasSubstr(n)) << msg;
    }
    static void expect_started(const RunResult& r) {
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("started"));
    }
    // Whatever the outcome, it is one of the two good ones.
    static void expect_refused_or_contained(const RunResult& r) {
        if (r.exit_code == 0)
            EXPECT_THAT(r.out, HasSubstr("started"));
        else
            EXPECT_FALSE(hook_message(r.err).empty()) << "not refused by gpubind: " << r.err;
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& node() { return node_->root(); }
    static std::string lib_file(const std::string& soname) {
        for (const auto& f : m().files)
            if (f.kind == "library" && f.name == soname && !f.compat32)
                return fs::path(f.real_path).filename().string();
        return soname;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-hostile"};
    std::unique_ptr<Tripwire> trip_;
    int count_ = 0;
};

// --- symlinked library directories and targets ---

TEST_F(HostileTest, LibraryDirectoryIsASymlinkToTheRoot) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu", "/");
    auto r = run_case(b);
    // Contained: "/" is the container's root, where the libraries now are.
    expect_started(r);
    EXPECT_TRUE(fs::exists(b.rootfs() / lib_file("libcuda.so.1")));
}

TEST_F(HostileTest, LibraryDirectoryIsAnAbsoluteSymlinkToAHostDirectory) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu", trip_->dir() / "usr/lib/x86_64-linux-gnu");
    auto r = run_case(b);
    expect_refused(r, {"/usr/lib/x86_64-linux-gnu", "symbolic link"});
}

// The same link with its target present inside the image: it resolves there.
TEST_F(HostileTest, AbsoluteSymlinkResolvesInsideTheRoot) {
    Bundle b = bundle();
    const fs::path host_dir = trip_->dir() / "usr/lib/x86_64-linux-gnu";
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu", host_dir);
    fs::create_directories(b.rootfs() / host_dir.relative_path());
    auto r = run_case(b);
    expect_started(r);
    EXPECT_TRUE(fs::exists(b.rootfs() / host_dir.relative_path() / lib_file("libcuda.so.1")));
    EXPECT_FALSE(fs::exists(host_dir / lib_file("libcuda.so.1")));
}

TEST_F(HostileTest, LibraryDirectoryEscapesWithDotDot) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu",
               "../../../../../../../.." + (trip_->dir() / "usr/lib/x86_64-linux-gnu").string());
    auto r = run_case(b);
    expect_refused(r, {"/usr/lib/x86_64-linux-gnu", "symbolic link"});
}

TEST_F(HostileTest, LibraryDirectoryIsARelativeLinkInsideTheImage) {
    Bundle b = bundle();
    fs::create_directories(b.rootfs() / "usr/lib/real-libs");
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu", "real-libs");
    auto r = run_case(b);
    expect_started(r);
    EXPECT_TRUE(fs::exists(b.rootfs() / "usr/lib/real-libs" / lib_file("libcuda.so.1")));
}

TEST_F(HostileTest, LibraryDirectoryIsADanglingLink) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu", "/nowhere/at/all");
    auto r = run_case(b);
    expect_refused(r, {"/usr/lib/x86_64-linux-gnu", "symbolic link"});
}

// A CUDA compat directory too big to read whole: which part a capped read
// saw would depend on the directory's order, so the container is refused.
TEST_F(HostileTest, AHugeCudaCompatDirectoryIsRefused) {
    Bundle b = bundle();
    const fs::path compat = b.rootfs() / "usr/local/cuda/compat";
    fs::create_directories(compat);
    for (int i = 0; i < 4097; ++i)
        fs::create_symlink("libcuda.so.1", compat / ("libcuda.so.999." + std::to_string(i)));
    auto r = run_case(b);
    expect_refused(r, {"/usr/local/cuda/compat", "more than 4096 entries"});
    EXPECT_FALSE(fs::exists(b.rootfs() / "usr/lib/x86_64-linux-gnu" / lib_file("libcuda.so.1")));
}

// A tmpfs the runtime mounts at /run (containerd's default spec has one) is
// the container's own: the persistenced socket is mounted on it. A host
// directory bound there is a volume: refused, nothing made in it.
TEST_F(HostileTest, RunAsTheRuntimesTmpfsTakesTheSocketAsAVolumeIsRefused) {
    Bundle b = bundle();
    b.spec()["mounts"].push_back({{"destination", "/run"},
                                  {"type", "tmpfs"},
                                  {"source", "tmpfs"},
                                  {"options", {"nosuid", "nodev", "mode=755"}}});
    auto r = run_case(b, "test -S /run/nvidia-persistenced/socket && echo started");
    expect_started(r);

    Bundle v = bundle();
    const fs::path host = dir_.path() / "host-run";
    fs::create_directories(host);
    v.bind(host, "/run");
    r = run_case(v);
    expect_refused(r, {"/run/nvidia-persistenced", "another mount"});
    EXPECT_TRUE(fs::is_empty(host));
}

// A tmpfs of the host's (as /dev/shm with --ipc=host, a secret, an
// emptyDir of medium Memory), mounted under a temporary directory while it lives.
class HostTmpfs {
  public:
    explicit HostTmpfs(fs::path dir) : dir_(std::move(dir)) {
        fs::create_directories(dir_);
        if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "mode=0755") != 0)
            throw std::runtime_error("mount tmpfs " + dir_.string());
    }
    ~HostTmpfs() { ::umount2(dir_.c_str(), MNT_DETACH); }
    HostTmpfs(const HostTmpfs&) = delete;
    HostTmpfs& operator=(const HostTmpfs&) = delete;
    const fs::path& dir() const { return dir_; }

  private:
    fs::path dir_;
};

// A host tmpfs where the spec has the runtime mount a fresh one is not the
// container's own, however it gets there: a later volume that the image's
// link at /run makes the runtime mount over the fresh tmpfs, or a tmpfs
// entry that only remounts the volume already at /run. Refused, nothing
// written into the host's tmpfs.
TEST_F(HostileTest, AHostTmpfsPassedOffAsTheRuntimesFreshTmpfsIsRefused) {
    const nlohmann::json run_tmpfs = {{"destination", "/run"},
                                      {"type", "tmpfs"},
                                      {"source", "tmpfs"},
                                      {"options", {"nosuid", "nodev", "mode=755"}}};
    {
        HostTmpfs shm(dir_.path() / "host-shm");
        Bundle b = bundle();
        plant_link(b.rootfs() / "run", "/dev/shm");
        b.spec()["mounts"].push_back(run_tmpfs);
        b.bind(shm.dir(), "/dev/shm");
        auto r = run_case(b);
        expect_refused(r, {"/run/nvidia-persistenced", "another mount"});
        EXPECT_TRUE(fs::is_empty(shm.dir()));
    }
    {
        HostTmpfs run(dir_.path() / "host-run");
        Bundle b = bundle();
        b.bind(run.dir(), "/run");
        nlohmann::json remount = run_tmpfs;
        remount["options"] = {"remount", "nosuid"};
        b.spec()["mounts"].push_back(remount);
        auto r = run_case(b);
        expect_refused(r, {"/run/nvidia-persistenced", "another mount"});
        EXPECT_TRUE(fs::is_empty(run.dir()));
    }
}

// A link at a driver file's name is gpubind's to replace (issue 9): removed
// through its directory, never followed, and the mount point made in its place.
void expect_link_replaced(const fs::path& p) {
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(p))) << p;
}

TEST_F(HostileTest, MountTargetIsADanglingSymlinkToAHostPath) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/bin/nvidia-smi", trip_->dir() / "usr/bin/nvidia-smi");
    auto r = run_case(b);
    expect_started(r);
    expect_link_replaced(b.rootfs() / "usr/bin/nvidia-smi");
}

TEST_F(HostileTest, MountTargetIsASymlinkToAnExistingHostFile) {
    Bundle b = bundle();
    const std::string lib = lib_file("libnvidia-ml.so.1");
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu" / lib, trip_->dir() / "usr/bin/host-data");
    auto r = run_case(b);
    expect_started(r);
    expect_link_replaced(b.rootfs() / "usr/lib/x86_64-linux-gnu" / lib);
}

TEST_F(HostileTest, MountTargetEscapesWithARelativeLink) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/bin/nvidia-smi",
               "../../../../../../../.." + (trip_->dir() / "usr/bin/nvidia-smi").string());
    auto r = run_case(b);
    expect_started(r);
    expect_link_replaced(b.rootfs() / "usr/bin/nvidia-smi");
}

// The soname link gpubind would make exists, pointing at a host file: it is
// replaced by the driver's, never followed.
TEST_F(HostileTest, SonameLinkPointsAtAHostFile) {
    Bundle b = bundle();
    plant_link(b.rootfs() / "usr/lib/x86_64-linux-gnu/libcuda.so.1",
               trip_->dir() / "etc/ld.so.cache");
    auto r = run_case(b);
    expect_started(r);
    EXPECT_EQ(fs::read_symlink(b.rootfs() / "usr/lib/x86_64-linux-gnu/libcuda.so.1"),
              lib_file("libcuda.so.1"));
}

// runc 1.1.5 itself follows an absolute /dev symlink to the host when it
// makes /dev/fd, /dev/stdin, ... (with or without any hook), so the bait's
// dev/ is compared with what runc alone does there: gpubind adds nothing.
TEST_F(HostileTest, DevIsASymlink) {
    auto dev_entries = [](const fs::path& dev) {
        std::set<std::string> names;
        for (const auto& e : fs::directory_iterator(dev)) {
            std::string n = e.path().filename().string();
            if (e.is_symlink()) n += " -> " + fs::read_symlink(e.path()).string();
            names.insert(n);
        }
        return names;
    };
    Tripwire alone_trip(dir_.path() / "tripwire-runc-alone");
    Bundle plain = bundle(Layout::Multiarch, /*with_hook=*/false);
    plant_link(plain.rootfs() / "dev", alone_trip.dir() / "dev");
    plain.command("true");
    start(plain);
    const auto runc_alone = dev_entries(alone_trip.dir() / "dev");

    Bundle b = bundle();
    plant_link(b.rootfs() / "dev", trip_->dir() / "dev");
    b.command("echo started");
    trip_->arm();
    auto r = start(b);
    expect_refused_or_contained(r);
    EXPECT_EQ(dev_entries(trip_->dir() / "dev"), runc_alone);
    // Nothing else anywhere: every change is runc's, in the bait's dev/.
    std::istringstream changes(trip_->changes());
    for (std::string line; std::getline(changes, line);)
        EXPECT_THAT(line, HasSubstr(trip_->dir().string() + "/dev")) << line;
}

TEST_F(HostileTest, ProcDriverNvidiaIsASymlink) {
    Bundle b = bundle();
    b.no_proc_mount();
    plant_link(b.rootfs() / "proc/driver/nvidia", trip_->dir() / "proc/driver/nvidia");
    auto r = run_case(b);
    expect_refused(r, {"/proc/driver/nvidia"});
}

TEST_F(HostileTest, ProcDriverIsARelativeEscape) {
    Bundle b = bundle();
    b.no_proc_mount();
    plant_link(b.rootfs() / "proc/driver",
               "../../../../../../../.." + (trip_->dir() / "proc/driver").string());
    auto r = run_case(b);
    expect_refused(r, {"/proc/driver"});
}

// --- targets that exist as something else ---

// The image's own /dev (no tmpfs over it) with planted nodes.
Bundle& without_dev_tmpfs(Bundle& b) {
    auto& mounts = b.spec()["mounts"];
    for (auto it = mounts.begin(); it != mounts.end(); ++it)
        if ((*it)["destination"] == "/dev") {
            mounts.erase(it);
            break;
        }
    return b;
}

// --- targets that are FIFOs or devices of the image ---

struct TargetCase {
    const char* name;
    const char* path;  // in the image
    const char* kind;  // "fifo", or "device" with major:minor
    unsigned major = 0, minor = 0;
    bool private_dev = false;  // the image's own /dev (no tmpfs on it)
};

class TargetTest : public HostileTest, public ::testing::WithParamInterface<TargetCase> {};

// Refused, naming the target and what it is; nothing opened or changed.
TEST_P(TargetTest, IsRefused) {
    const TargetCase c = GetParam();
    Bundle b = bundle();
    if (c.private_dev) without_dev_tmpfs(b);
    std::string path = c.path;
    if (path.find("%lib%") != std::string::npos)
        path.replace(path.find("%lib%"), 5, lib_file("libnvidia-ml.so.1"));
    const fs::path planted = b.rootfs() / fs::path(path).relative_path();
    std::string what;
    if (std::string(c.kind) == "fifo") {
        plant_fifo(planted);
        what = "FIFO";
    } else {
        plant_device(planted, c.major, c.minor);
        what = std::to_string(c.major) + ":" + std::to_string(c.minor);
    }
    auto r = run_case(b);
    expect_refused(r, {path, what});
}

INSTANTIATE_TEST_SUITE_P(
    Targets, TargetTest,
    ::testing::Values(TargetCase{"DeviceNodeIsAFifo", "/dev/nvidia0", "fifo", 0, 0, true},
                      // /dev/null's numbers where nvidiactl goes.
                      TargetCase{"DeviceNodeIsAnotherDevice", "/dev/nvidiactl", "device", 1, 3,
                                 true},
                      TargetCase{"LibraryIsAFifo", "/usr/lib/x86_64-linux-gnu/%lib%", "fifo"},
                      TargetCase{"BinaryIsADevice", "/usr/bin/nvidia-smi", "device", 1, 5}),
    [](const ::testing::TestParamInfo<TargetCase>& param) {
        return std::string(param.param.name);
    });

// --- image files gpubind (or its ldconfig) reads ---

struct ReadCase {
    const char* path;
    const char* kind;  // "fifo", "dev-zero-link", "zero-device"
};

class ImageFileTest : public HostileTest, public ::testing::WithParamInterface<ReadCase> {};

// Never a hang, never an unbounded read: refused (naming the file) or the
// file replaced by the refresh, well within the start limit.
TEST_P(ImageFileTest, EndsQuickly) {
    const ReadCase c = GetParam();
    Bundle b = bundle();
    const fs::path p = b.rootfs() / fs::path(c.path).relative_path();
    if (std::string(c.kind) == "fifo")
        plant_fifo(p);
    else if (std::string(c.kind) == "dev-zero-link")
        plant_link(p, "/dev/zero");
    else
        plant_device(p, 1, 5);
    auto r = run_case(b);
    expect_refused_or_contained(r);
    std::printf("%s as %s: %s\n", c.path, c.kind,
                r.exit_code == 0 ? "started" : hook_message(r.err).c_str());
    // A FIFO that held the refresh is named.
    if (r.exit_code != 0 && std::string(c.kind) == "fifo") {
        EXPECT_THAT(hook_message(r.err), HasSubstr(c.path));
    }
    if (r.exit_code == 0 && std::string(c.path) == "/etc/ld.so.cache") {
        // Replaced by the refresh: a regular file the system's ldconfig reads.
        EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(p)));
        auto cache = run_command({"ldconfig", "-p", "-C", p.string()});
        EXPECT_THAT(
            cache.out,
            HasSubstr("libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    }
}

INSTANTIATE_TEST_SUITE_P(
    Files, ImageFileTest,
    ::testing::Values(
        ReadCase{"/etc/ld.so.cache", "fifo"}, ReadCase{"/etc/ld.so.cache", "dev-zero-link"},
        ReadCase{"/etc/ld.so.cache", "zero-device"}, ReadCase{"/etc/ld.so.conf", "fifo"},
        ReadCase{"/etc/ld.so.conf", "dev-zero-link"},
        ReadCase{"/etc/ld.so.conf.d/x86_64-linux-gnu.conf", "fifo"},
        ReadCase{"/etc/ld.so.conf.d/x86_64-linux-gnu.conf", "dev-zero-link"},
        ReadCase{"/var/cache/ldconfig/aux-cache", "fifo"},
        ReadCase{"/var/cache/ldconfig/aux-cache", "dev-zero-link"},
        ReadCase{"/etc/debian_version", "fifo"}, ReadCase{"/etc/debian_version", "dev-zero-link"},
        ReadCase{"/usr/lib/x86_64-linux-gnu/libhang.so.1", "dev-zero-link"}),
    [](const ::testing::TestParamInfo<ReadCase>& param) {
        std::string name = std::string(param.param.path) + "_" + param.param.kind;
        for (char& ch : name)
            if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
        return name;
    });

TEST_F(HostileTest, CorruptLoaderCacheIsReplacedByTheRefresh) {
    for (const std::string how : {"garbage", "truncated", "huge-count"}) {
        SCOPED_TRACE(how);
        Bundle b = bundle();
        const fs::path cache = b.rootfs() / "etc/ld.so.cache";
        std::string bytes = read_text(cache);
        if (how == "garbage")
            bytes = std::string(4096, '\x5a');
        else if (how == "truncated")
            bytes.resize(bytes.size() / 3);
        else if (bytes.size() > 24)
            bytes.replace(20, 4, "\xff\xff\xff\x7f");  // nlibs
        std::ofstream(cache, std::ios::trunc) << bytes;
        auto r = run_case(b, "echo started; probe cuda");
        expect_refused_or_contained(r);
        if (r.exit_code == 0) {
            auto listed = run_command({"ldconfig", "-p", "-C", cache.string()});
            EXPECT_THAT(
                listed.out,
                HasSubstr("libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"));
            EXPECT_THAT(r.out, HasSubstr("cuda init=0"));  // the container's loader finds it
        }
    }
}

// Issue 12, item 1: a block device planted at /etc/ld.so.cache~ (here a loop
// device standing for a host disk) is refused at once, whichever method
// refreshes the cache; the disk keeps every byte. With the hook's ldconfig
// run over it (the code before), its first bytes became the cache.
TEST_F(HostileTest, BlockDeviceAtTheCacheTempFileIsNeverWritten) {
    const fs::path disk = dir_.path() / "disk.img";
    std::string content(1 << 20, '\0');
    for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>('a' + i % 23);
    std::ofstream(disk, std::ios::binary) << content;
    auto loop = run_command({"losetup", "-f", "--show", disk.string()});
    ASSERT_EQ(loop.exit_code, 0) << loop.err;
    const std::string dev = loop.out.substr(0, loop.out.find('\n'));
    struct Detach {
        std::string dev;
        ~Detach() { run_command({"losetup", "-d", dev}); }
    } detach{dev};
    struct stat st {};
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    const fs::path ldconfig_config = dir_.path() / "ldconfig.toml";
    std::ofstream(ldconfig_config)
        << read_text(node_->config()) << "[policy]\nldcache = \"ldconfig\"\n";
    for (const fs::path& config : {node_->config(), ldconfig_config}) {
        SCOPED_TRACE(config.filename().string());
        Bundle b = bundle(Layout::Multiarch, false);
        b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
        const fs::path temp = b.rootfs() / "etc/ld.so.cache~";
        ASSERT_EQ(::mknod(temp.c_str(), S_IFBLK | 0600, st.st_rdev), 0);
        auto r = run_case(b);
        expect_refused(r, {"/etc/ld.so.cache~", "block device"});
        EXPECT_EQ(read_text(disk), content) << "the disk behind " << dev << " was written";
        struct stat now {};
        ASSERT_EQ(::lstat(temp.c_str(), &now), 0);
        EXPECT_TRUE(S_ISBLK(now.st_mode));  // not renamed to ld.so.cache either
    }
}

// --- hostile programs and variables in the image ---

// A /sbin/ldconfig (and friends) that, if run, writes a marker into the
// rootfs and another on the host.
void plant_hostile_ldconfig(const fs::path& rootfs, const fs::path& host_marker) {
    for (const char* p : {"sbin/ldconfig", "sbin/ldconfig.real", "usr/sbin/ldconfig"}) {
        fs::create_directories((rootfs / p).parent_path());
        std::ofstream(rootfs / p) << "#!/bin/sh\necho ran > /ldconfig-ran\necho ran > "
                                  << host_marker.string() << "\nexit 0\n";
        fs::permissions(rootfs / p,
                        fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    }
}

TEST_F(HostileTest, ImageLdconfigIsNeverRun) {
    Bundle b = bundle();
    const fs::path marker = dir_.path() / "ldconfig-ran-on-the-host";
    plant_hostile_ldconfig(b.rootfs(), marker);
    auto r = run_case(b, "echo started; probe cuda");
    expect_started(r);
    EXPECT_FALSE(fs::exists(b.rootfs() / "ldconfig-ran"));
    EXPECT_FALSE(fs::exists(marker));
    // The cache was refreshed all the same (by the host's ldconfig).
    EXPECT_THAT(r.out, HasSubstr("cuda init=0"));
}

// The image's environment (process.env) reaches the container's process only.
TEST_F(HostileTest, LdPreloadInTheImageEnvironmentIsNotLoadedByGpubind) {
    Bundle b = bundle();
    const fs::path lib = env_or("GPUBIND_TEST_PRELOAD", GPUBIND_TEST_PRELOAD);
    const fs::path in_image = dir_.path() / "preload.so";
    fs::copy_file(lib, in_image);
    fs::create_directories(b.rootfs() / in_image.parent_path().relative_path());
    fs::copy_file(lib, b.rootfs() / in_image.relative_path());
    const fs::path marker = dir_.path() / "preload-marker";
    b.env("LD_PRELOAD=" + in_image.string()).env("GPUBIND_TEST_MARKER=" + marker.string());
    b.env("LD_LIBRARY_PATH=" + dir_.path().string());
    plant_hostile_ldconfig(b.rootfs(), dir_.path() / "ldconfig-ran-on-the-host");
    auto r = run_case(b, "echo started; GPUBIND_TEST_MARKER=/proof probe env LD_PRELOAD");
    expect_started(r);
    EXPECT_FALSE(fs::exists(marker)) << "loaded on the host (the hook or its helpers)";
    EXPECT_FALSE(fs::exists(b.rootfs() / marker.relative_path())) << "loaded by ldconfig";
    // Self-proof: the container's own dynamic program did load it.
    EXPECT_TRUE(fs::exists(b.rootfs() / "proof")) << r.out;
}

// The hook's registered environment carries LD_PRELOAD: the hook clears it
// before running anything (its NVML helper is a dynamic program).
TEST_F(HostileTest, LdPreloadInTheHooksOwnEnvironmentIsCleared) {
    Bundle b = bundle(Layout::Multiarch, /*with_hook=*/false);
    const fs::path marker = dir_.path() / "hook-preload-marker";
    b.spec()["hooks"]["prestart"] = {
        {{"path", env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH)},
         {"args", {"gpubind-hook", "prestart"}},
         {"env",
          {"GPUBIND_CONFIG=" + node_->config().string(),
           "LD_PRELOAD=" + env_or("GPUBIND_TEST_PRELOAD", GPUBIND_TEST_PRELOAD),
           "GPUBIND_TEST_MARKER=" + marker.string()}}}};
    auto r = run_case(b);
    expect_started(r);
    EXPECT_FALSE(fs::exists(marker));
}

// --- hostile state on the hook's stdin ---

class HostileStateTest : public HostileTest {
  protected:
    void SetUp() override {
        HostileTest::SetUp();
        gpu_ = std::make_unique<Bundle>(bundle());
        gpu_->write_spec();
        trip_->arm();
    }
    void TearDown() override { EXPECT_EQ(trip_->changes(), ""); }

    // Refused quickly with exactly one line on stderr naming `what`.
    static void expect_one_line(const HookRun& h, const std::vector<std::string>& names,
                                double limit_s = 10) {
        EXPECT_FALSE(h.killed);
        EXPECT_NE(h.exit_code, 0);
        EXPECT_LT(h.seconds, limit_s);
        EXPECT_THAT(h.err, ::testing::StartsWith("gpubind-hook: "));
        EXPECT_EQ(std::count(h.err.begin(), h.err.end(), '\n'), 1) << h.err;
        for (const auto& n : names) EXPECT_THAT(h.err, HasSubstr(n)) << h.err;
    }

    std::unique_ptr<Bundle> gpu_;
};

TEST_F(HostileStateTest, Garbage) {
    auto h =
        run_hook(node_->config(), [](pid_t) { return std::string("\x01\xff garbage {{{", 14); });
    expect_one_line(h, {"parse state stdin", "not valid JSON"});
}

TEST_F(HostileStateTest, Truncated) {
    const fs::path bundle = gpu_->dir();
    auto h = run_hook(node_->config(), [&](pid_t) {
        std::string s = state_json(12345, bundle);
        return s.substr(0, s.size() / 2);
    });
    expect_one_line(h, {"parse state stdin", "not valid JSON"});
}

TEST_F(HostileStateTest, HundredMegabytes) {
    auto h = run_hook(node_->config(), [](pid_t) { return std::string(100u << 20, ' '); });
    expect_one_line(h, {"stdin", "larger than"});
}

TEST_F(HostileStateTest, StdinNeverClosedEndsAtTheHooksDeadline) {
    const fs::path bundle = gpu_->dir();
    auto h = run_hook(
        node_->config(), [&](pid_t) { return state_json(12345, bundle).substr(0, 20); },
        /*close_stdin=*/false, /*limit_s=*/70);
    expect_one_line(h, {"stdin", "no end of input"}, 60);
}

TEST_F(HostileStateTest, PidOne) {
    const fs::path bundle = gpu_->dir();
    auto h = run_hook(node_->config(), [&](pid_t) { return state_json(1, bundle); });
    expect_one_line(h, {"pid 1"});
}

TEST_F(HostileStateTest, TheHooksOwnPid) {
    const fs::path bundle = gpu_->dir();
    pid_t hook_pid = 0;
    auto h = run_hook(node_->config(), [&](pid_t pid) {
        hook_pid = pid;
        return state_json(pid, bundle);
    });
    expect_one_line(h, {"pid " + std::to_string(hook_pid)});
}

TEST_F(HostileStateTest, AHostProcessOutsideAnyContainer) {
    const fs::path bundle = gpu_->dir();
    pid_t sleeper = 0;
    char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("60"), nullptr};
    ASSERT_EQ(::posix_spawnp(&sleeper, "sleep", nullptr, nullptr, argv, nullptr), 0);
    auto h = run_hook(node_->config(), [&](pid_t) { return state_json(sleeper, bundle); });
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, nullptr, 0);
    expect_one_line(h, {"pid " + std::to_string(sleeper), "mount namespace"});
}

TEST_F(HostileStateTest, OutOfRangePids) {
    const fs::path bundle = gpu_->dir();
    for (const char* pid : {"0", "-1", "4294967297", "1e3", "\"12\""}) {
        SCOPED_TRACE(pid);
        auto h = run_hook(node_->config(), [&](pid_t) {
            std::string s = state_json(12345, bundle);
            s.replace(s.find("12345"), 5, pid);
            return s;
        });
        expect_one_line(h, {"parse state stdin", "pid"});
    }
}

// --- hostile environment values ---

struct EnvCase {
    const char* name;
    std::string value;
    const char* says;  // what the one line must say
};

std::vector<EnvCase> env_cases() {
    std::string ids;
    for (int i = 0; i < 100000; ++i) ids += (i ? "," : "") + std::to_string(i % 2);
    return {
        {"HundredThousandIds", ids, "bytes, more than"},
        {"OneMegabyte", std::string(1u << 20, '0'), "bytes, more than"},
        {"NulByte",
         std::string("0\0"
                     "1",
                     3),
         "NVIDIA_VISIBLE_DEVICES"},
        {"Newline", "0\n1", "select device 0\\n1: not a device id"},  // escaped: one line
    };
}

// Straight to the hook with the bundle: gpubind's own refusal, quickly, one line.
TEST_F(HostileStateTest, EnvironmentValuesRefusedByTheHook) {
    for (const auto& c : env_cases()) {
        SCOPED_TRACE(c.name);
        Bundle b = bundle();
        b.env("NVIDIA_VISIBLE_DEVICES=" + c.value);
        b.write_spec();
        pid_t sleeper = 0;
        char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("60"), nullptr};
        ASSERT_EQ(::posix_spawnp(&sleeper, "sleep", nullptr, nullptr, argv, nullptr), 0);
        auto h = run_hook(node_->config(), [&](pid_t) { return state_json(sleeper, b.dir()); });
        ::kill(sleeper, SIGKILL);
        ::waitpid(sleeper, nullptr, 0);
        expect_one_line(h, {c.says}, 5);
        EXPECT_THAT(h.err, Not(HasSubstr("mount namespace"))) << "not refused for the value";
    }
}

// Through runc: refused (by runc or gpubind), nothing on the host changed.
TEST_F(HostileTest, EnvironmentValuesThroughRunc) {
    for (const auto& c : env_cases()) {
        SCOPED_TRACE(c.name);
        Bundle b = bundle();
        b.env("NVIDIA_VISIBLE_DEVICES=" + c.value);
        auto r = run_case(b);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("started")));
    }
}

// --- the race: a directory and a link to the host swapped while containers start ---

class Swapper {
  public:
    // Exchanges `a` and `b` (a directory and a symlink) as fast as it can.
    Swapper(std::vector<std::pair<fs::path, fs::path>> pairs) : pairs_(std::move(pairs)) {
        thread_ = std::thread([this] {
            while (!stop_) {
                for (const auto& [a, b] : pairs_)
                    if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                                  RENAME_EXCHANGE) == 0)
                        ++swaps_;
            }
        });
    }
    ~Swapper() { stop(); }
    void stop() {
        if (thread_.joinable()) {
            stop_ = true;
            thread_.join();
            // Back to the planted state: the directory at its own name.
            for (const auto& [a, b] : pairs_)
                if (fs::is_symlink(a))
                    ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                              RENAME_EXCHANGE);
        }
    }
    long swaps() const { return swaps_; }

  private:
    std::vector<std::pair<fs::path, fs::path>> pairs_;
    std::atomic<bool> stop_{false};
    std::atomic<long> swaps_{0};
    std::thread thread_;
};

std::vector<std::pair<fs::path, fs::path>> plant_swaps(const fs::path& rootfs,
                                                       const fs::path& bait) {
    std::vector<std::pair<fs::path, fs::path>> pairs;
    for (const char* d : {"usr/bin", "usr/lib/x86_64-linux-gnu"}) {
        const fs::path dir = rootfs / d, link = rootfs / (std::string(d) + ".swap");
        fs::create_symlink(bait / d, link);
        pairs.emplace_back(dir, link);
    }
    return pairs;
}

TEST_F(HostileTest, RaceSwappingADirectoryAndAHostLinkWhileContainersStart) {
    const int starts = std::stoi(env_or("GPUBIND_RACE_STARTS", "1000"));
    Bundle b = bundle();
    // The mounts a started container sees: nvidia-smi's must be in its
    // /usr/bin, under whichever name the swapper gave it at that moment.
    b.command("grep nvidia-smi /proc/self/mountinfo; echo started");
    auto pairs = plant_swaps(b.rootfs(), trip_->dir());
    trip_->arm();
    int started = 0, refused = 0;
    std::vector<std::string> bad;
    const auto t0 = Clock::now();
    {
        Swapper swapper(pairs);
        for (int i = 0; i < starts; ++i) {
            auto r = start(b, 30);
            if (r.exit_code == 0 && r.out.find("started") != std::string::npos) {
                ++started;
                std::istringstream lines(r.out);
                int smi = 0;
                for (std::string line; std::getline(lines, line);) {
                    if (line.find("nvidia-smi") == std::string::npos) continue;
                    std::istringstream f(line);
                    std::string field, mount_point;
                    for (int k = 0; k < 5 && f >> field; ++k) mount_point = field;
                    if (mount_point == "/usr/bin/nvidia-smi" ||
                        mount_point == "/usr/bin.swap/nvidia-smi")
                        ++smi;
                    else
                        bad.push_back("start " + std::to_string(i) + ": mount at " + mount_point);
                }
                if (smi != 1)
                    bad.push_back("start " + std::to_string(i) + ": nvidia-smi mounted " +
                                  std::to_string(smi) + " times");
            } else if (!hook_message(r.err).empty()) {
                ++refused;
            } else {
                bad.push_back("start " + std::to_string(i) +
                              ": neither started nor refused: " + r.err);
            }
            if (bad.size() > 20) break;
        }
        swapper.stop();
        std::printf("race: %d starts (%d started, %d refused) in %.1f s, %ld swaps\n", starts,
                    started, refused, seconds_since(t0), swapper.swaps());
    }
    EXPECT_EQ(bad, std::vector<std::string>{});
    EXPECT_EQ(started + refused, starts);
    EXPECT_EQ(trip_->changes(), "");
}

// --- self-proofs: the checks above see the bad outcomes ---

// Every kind of change the cases must never cause is reported.
TEST_F(HostileTest, SelfProofTripwireSeesEveryChange) {
    const fs::path d = trip_->dir();
    auto seen = [&](const std::function<void()>& change, const std::string& expect) {
        trip_->arm();
        change();
        EXPECT_THAT(trip_->changes(), HasSubstr(expect));
    };
    seen([&] { std::ofstream(d / "usr/bin/nvidia-smi"); },
         "new " + (d / "usr/bin/nvidia-smi").string());
    seen([&] { fs::create_directory(d / "usr/lib64/x"); }, "new " + (d / "usr/lib64/x").string());
    seen(
        [&] {  // same size, same mtime: only the content hash differs
            struct stat st {};
            ::stat((d / "etc/ld.so.cache").c_str(), &st);
            std::string s = read_text(d / "etc/ld.so.cache");
            s[0] = 'T';
            std::ofstream(d / "etc/ld.so.cache", std::ios::trunc) << s;
            timespec times[2] = {st.st_atim, st.st_mtim};
            ::utimensat(AT_FDCWD, (d / "etc/ld.so.cache").c_str(), times, 0);
        },
        "changed " + (d / "etc/ld.so.cache").string());
    seen(
        [&] {  // replaced by another inode with the same content
            fs::copy_file(d / "usr/bin/host-data", d / "usr/bin/copy");
            fs::rename(d / "usr/bin/copy", d / "usr/bin/host-data");
        },
        "changed " + (d / "usr/bin/host-data").string());
    seen(
        [&] {
            fs::remove(d / "usr/bin/host-link");
            plant_link(d / "usr/bin/host-link", "/");
        },
        "changed " + (d / "usr/bin/host-link").string());
    seen([&] { fs::remove(d / "dev/host-data"); }, "removed " + (d / "dev/host-data").string());
    const fs::path tmp_entry = "/tmp/libcuda.so.1-gpubind-tripwire-proof";
    seen([&] { std::ofstream{tmp_entry}; }, "new " + tmp_entry.string());
    fs::remove(tmp_entry);
    seen(
        [&] {
            ASSERT_EQ(run_command({"mount", "-t", "tmpfs", "tripwire-proof", (d / "tmp").string()})
                          .exit_code,
                      0);
        },
        "new mount: ");
    run_command({"umount", (d / "tmp").string()});
}

// The planted links do lead into the bait when followed as the host's kernel
// follows them: a writer less careful than gpubind is caught.
TEST_F(HostileTest, SelfProofPlantedLinksLeadIntoTheBait) {
    Bundle b = bundle();
    const std::string lib = lib_file("libcuda.so.1");
    auto caught = [&](const fs::path& link, const fs::path& target, const fs::path& write_at) {
        plant_link(link, target);
        trip_->arm();
        std::ofstream{write_at};
        EXPECT_THAT(trip_->changes(), HasSubstr("new " + trip_->dir().string())) << write_at;
        std::error_code ec;
        fs::remove(fs::weakly_canonical(write_at, ec), ec);  // what landed in the bait
        fs::remove(link, ec);
    };
    const fs::path libdir = b.rootfs() / "usr/lib/x86_64-linux-gnu";
    fs::rename(libdir, libdir.string() + ".real");
    caught(libdir, trip_->dir() / "usr/lib/x86_64-linux-gnu", libdir / lib);
    caught(libdir, "../../../../../../../.." + (trip_->dir() / "usr/lib/x86_64-linux-gnu").string(),
           libdir / lib);
    caught(b.rootfs() / "usr/bin/nvidia-smi", trip_->dir() / "usr/bin/nvidia-smi",
           b.rootfs() / "usr/bin/nvidia-smi");
    caught(b.rootfs() / "usr/bin/nvidia-smi",
           "../../../../../../../.." + (trip_->dir() / "usr/bin/nvidia-smi").string(),
           b.rootfs() / "usr/bin/nvidia-smi");
    fs::create_directories(b.rootfs() / "proc/driver");
    caught(b.rootfs() / "proc/driver/nvidia", trip_->dir() / "proc/driver/nvidia",
           b.rootfs() / "proc/driver/nvidia/version");
}

// The swapper exposes the host: a writer that follows paths lands in the bait.
TEST_F(HostileTest, SelfProofTheRaceExposesANaiveWriter) {
    Bundle b = bundle();
    auto pairs = plant_swaps(b.rootfs(), trip_->dir());
    trip_->arm();
    {
        Swapper swapper(pairs);
        for (int i = 0; i < 2000; ++i) {
            const fs::path p = b.rootfs() / "usr/bin" / ("naive-" + std::to_string(i));
            int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) ::close(fd);
        }
    }
    EXPECT_THAT(trip_->changes(), HasSubstr("new " + (trip_->dir() / "usr/bin/naive-").string()));
}

// The hostile programs do leave their markers when they run.
TEST_F(HostileTest, SelfProofHostileProgramsLeaveMarkersWhenRun) {
    Bundle b = bundle(Layout::Multiarch, /*with_hook=*/false);
    plant_hostile_ldconfig(b.rootfs(), "/ldconfig-host-marker-unreachable");
    const fs::path lib = env_or("GPUBIND_TEST_PRELOAD", GPUBIND_TEST_PRELOAD);
    fs::copy_file(lib, b.rootfs() / "preload.so");
    b.env("LD_PRELOAD=/preload.so");
    auto r = run_case(b, "/sbin/ldconfig; GPUBIND_TEST_MARKER=/proof probe env X; echo started");
    expect_started(r);
    EXPECT_TRUE(fs::exists(b.rootfs() / "ldconfig-ran"));
    EXPECT_TRUE(fs::exists(b.rootfs() / "proof"));
}

// --- issue 12: holes found by an attack review, each judged on the host ---

// A config like the suite's, the cache refreshed by the sandboxed ldconfig
// (explicitly: the in-process writer may become the default), with `node`
// lines added to [node] and `rest` (tables) after. Root's, 0644, absolute.
fs::path issue12_config(const fs::path& dir, const std::string& name, const fs::path& node_root,
                        const std::string& node = "", const std::string& rest = "") {
    const fs::path p = dir / (name + ".toml");
    const std::string root = node_root.string();
    std::ofstream(p) << "[node]\ndriver-root = \"" << root << "\"\ndev-root = \"" << root
                     << "\"\nproc-root = \"" << root << "/proc\"\nstate-dir = \""
                     << (dir / (name + "-state")).string() << "\"\n"
                     << node << "\n[cdi]\ndir = \"" << (dir / (name + "-cdi")).string()
                     << "\"\n[policy]\nldcache = \"ldconfig\"\n"
                     << rest;
    ::chmod(p.c_str(), 0644);
    return p;
}

// A loop device over a file: stands for a host disk.
class LoopDevice {
  public:
    explicit LoopDevice(const fs::path& backing) {
        std::string bytes(1 << 20, '\0');
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i % 23);
        std::ofstream(backing, std::ios::binary) << bytes;
        auto r = run_command({"losetup", "--find", "--show", backing.string()});
        if (r.exit_code != 0) throw std::runtime_error("losetup: " + r.err);
        dev_ = std::string(util::trim(r.out));
        struct stat st {};
        if (::stat(dev_.c_str(), &st) != 0) throw std::runtime_error("stat " + dev_);
        rdev_ = st.st_rdev;
    }
    ~LoopDevice() { run_command({"losetup", "--detach", dev_}); }
    LoopDevice(const LoopDevice&) = delete;
    LoopDevice& operator=(const LoopDevice&) = delete;
    // What the disk holds, as the host reads it.
    std::string hash() const { return run_command({"sha256sum", dev_}).out.substr(0, 64); }
    std::string head(std::size_t n) const {
        std::ifstream in(dev_, std::ios::binary);
        std::string out(n, '\0');
        in.read(out.data(), static_cast<std::streamsize>(n));
        return out;
    }
    dev_t rdev() const { return rdev_; }
    const std::string& path() const { return dev_; }

  private:
    std::string dev_;
    dev_t rdev_ = 0;
};

// 1. An image's block device at /etc/ld.so.cache~ (a loop device standing
// for a host disk): the refresh never writes it, the container is refused at
// once naming it, the disk's bytes are unchanged and the node is not renamed.
TEST_F(HostileTest, Issue12LoaderCacheTempIsAHostBlockDevice) {
    const fs::path config = issue12_config(dir_.path(), "sandbox", node());
    fs::permissions(dir_.path(), fs::perms(0711));  // a mapped root walks to its rootfs
    for (const bool userns : {false, true}) {
        SCOPED_TRACE(userns ? "user namespace, the node the mapped root's" : "no user namespace");
        LoopDevice disk(dir_.path() / "disk.img");
        const std::string before = disk.hash();
        ASSERT_EQ(before.size(), 64u);
        Bundle b(dir_.path() / ("blockdev-" + std::to_string(count_++)), Layout::Multiarch);
        b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        const fs::path node_path = b.rootfs() / "etc/ld.so.cache~";
        ASSERT_EQ(::mknod(node_path.c_str(), S_IFBLK | 0600, disk.rdev()), 0)
            << std::strerror(errno);
        if (userns) {
            constexpr unsigned kHostRoot = 100000;
            auto& linux_ = b.spec()["linux"];
            linux_["namespaces"].push_back({{"type", "user"}});
            const nlohmann::json map = {
                {{"containerID", 0}, {"hostID", kHostRoot}, {"size", 65536}}};
            linux_["uidMappings"] = map;
            linux_["gidMappings"] = map;
            ASSERT_EQ(run_command({"chown", "-hR",
                                   std::to_string(kHostRoot) + ":" + std::to_string(kHostRoot),
                                   b.rootfs().string()})
                          .exit_code,
                      0);
        }
        auto r = run_case(b);
        EXPECT_EQ(disk.hash(), before)
            << "the host disk was written: it begins with " << disk.head(20);
        EXPECT_TRUE(fs::is_block_file(fs::symlink_status(node_path)));
        EXPECT_FALSE(fs::is_block_file(fs::symlink_status(b.rootfs() / "etc/ld.so.cache")))
            << "the block device was renamed to ld.so.cache";
        expect_refused(r, {"/etc/ld.so.cache~", "block device"});
    }
}

// 2. Code in the sandbox (ldconfig's place taken by a probe) cannot write a
// host-wide sysctl: the host's value is unchanged.
TEST_F(HostileTest, Issue12SandboxedProgramCannotWriteAHostSysctl) {
    const fs::path sysctl = "/proc/sys/kernel/printk_ratelimit_burst";
    const std::string before = read_text(sysctl);
    ASSERT_FALSE(before.empty());
    ASSERT_NE(before, "4242\n");
    const fs::path probe = dir_.path() / "ldconfig-probe";
    fs::copy_file(env_or("GPUBIND_SYSCTL_PROBE", GPUBIND_SYSCTL_PROBE), probe);
    fs::permissions(probe, fs::perms(0755));
    const fs::path config =
        issue12_config(dir_.path(), "probe", node(), "ldconfig = \"" + probe.string() + "\"\n");
    Bundle b(dir_.path() / "sysctl", Layout::Multiarch);
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    auto r = run_case(b);
    const std::string after = read_text(sysctl);
    if (after != before) std::ofstream(sysctl) << before;  // put the host back
    EXPECT_EQ(after, before) << "the sandboxed program wrote " << sysctl << ": " << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("wrote /proc/sys")));
    expect_refused_or_contained(r);
}

// 3. The MPS pipe directory, configured, is given only when it is root's and
// reached without a link: a user's directory there, or a link to a root-only
// host directory, is not mounted into the container (which starts); the
// host's directories are unchanged.
TEST_F(HostileTest, Issue12MpsDirectoryOfAUserOrBehindALinkIsNotMounted) {
    const std::string compute =
        "[catalog.compute]\nlibraries = [\"libcuda.so\", \"libnvidia-ptxjitcompiler.so\"]\n"
        "binaries = []\nipcs = [\"/tmp/nvidia-mps\"]\nfirmware = []\n";
    const fs::path config = issue12_config(dir_.path(), "mps", node(), "", compute);
    const fs::path mps = node() / "tmp/nvidia-mps";
    const fs::path saved = node() / "tmp/nvidia-mps.saved";
    fs::rename(mps, saved);
    struct Restore {
        fs::path mps, saved;
        ~Restore() {
            std::error_code ec;
            fs::remove_all(mps, ec);
            fs::rename(saved, mps, ec);
        }
    } restore{mps, saved};

    const fs::path secret_dir = dir_.path() / "root-only";
    fs::create_directories(secret_dir);
    ::chmod(secret_dir.c_str(), 0700);
    std::ofstream(secret_dir / "secret") << "host secret\n";
    const fs::path user_dir = dir_.path() / "user-mps";
    for (const std::string how : {"user's directory", "link to a root-only directory"}) {
        SCOPED_TRACE(how);
        std::error_code ec;
        fs::remove_all(mps, ec);
        if (how == "user's directory") {
            fs::create_directories(mps);
            std::ofstream(mps / "planted-by-user") << "x\n";
            ASSERT_EQ(::chown(mps.c_str(), 1000, 1000), 0);
        } else {
            fs::create_symlink(secret_dir, mps);
        }
        const std::string host_before = snapshot_tree(secret_dir) + snapshot_tree(mps);
        Bundle b(dir_.path() / ("mps-" + std::to_string(count_++)), Layout::Multiarch);
        b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
        b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
        auto r = run_case(b,
                          "echo started; ls /tmp/nvidia-mps/; cat /tmp/nvidia-mps/secret;"
                          "echo from-container > /tmp/nvidia-mps/written; true");
        expect_started(r);
        EXPECT_THAT(r.out, Not(HasSubstr("host secret")));
        EXPECT_THAT(r.out, Not(HasSubstr("planted-by-user")));
        EXPECT_EQ(snapshot_tree(secret_dir) + snapshot_tree(mps), host_before);
        EXPECT_FALSE(fs::exists(secret_dir / "written"));
        EXPECT_FALSE(fs::exists(mps / "written"));
    }

    // The same user's directory, that user named in [policy] ipc-owners: given.
    std::error_code ec;
    fs::remove_all(mps, ec);
    fs::create_directories(mps);
    std::ofstream(mps / "planted-by-user") << "x\n";
    ASSERT_EQ(::chown(mps.c_str(), 1000, 1000), 0);
    const fs::path owned =
        issue12_config(dir_.path(), "mps-owned", node(), "", "ipc-owners = [1000]\n" + compute);
    Bundle b(dir_.path() / "mps-owned", Layout::Multiarch);
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), owned);
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_DRIVER_CAPABILITIES=compute,utility");
    auto r = run_case(b, "echo started; ls /tmp/nvidia-mps/");
    expect_started(r);
    EXPECT_THAT(r.out, HasSubstr("planted-by-user"));
}

// A host directory bound on itself and made shared, as a volume whose
// mounts propagate; unmounted (with whatever reached it) when it goes.
class SharedVolume {
  public:
    explicit SharedVolume(fs::path path) : path_(std::move(path)) {
        fs::create_directories(path_);
        ready_ = run_command({"mount", "--bind", path_.string(), path_.string()}).exit_code == 0 &&
                 run_command({"mount", "--make-shared", path_.string()}).exit_code == 0;
    }
    ~SharedVolume() {
        for (int i = 0; i < 16; ++i)
            if (run_command({"umount", "-R", "-l", path_.string()}).exit_code != 0) break;
    }
    SharedVolume(const SharedVolume&) = delete;
    SharedVolume& operator=(const SharedVolume&) = delete;

    bool ready() const { return ready_; }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
    bool ready_ = false;
};

// 4. An image whose /usr/bin is a link into a volume (/data, a host directory
// with rshared propagation, rootfsPropagation rshared): the container is
// refused naming the target, no hook mount reaches the host's mount table,
// and nothing is left in the host's volume.
TEST_F(HostileTest, Issue12TargetsInASharedVolumeAreRefused) {
    const SharedVolume shared(dir_.path() / "volume");
    ASSERT_TRUE(shared.ready());
    const fs::path& volume = shared.path();
    fs::create_directories(volume / "bin");
    const fs::path config = issue12_config(dir_.path(), "volume", node());
    // With the runtime's default propagation the volume's targets are refused;
    // with rootfsPropagation "rshared" every target is on a shared mount.
    for (const bool shared_root : {false, true}) {
        SCOPED_TRACE(shared_root ? "rootfsPropagation rshared" : "default propagation");
        Bundle b(dir_.path() / (shared_root ? "volume-bundle-shared" : "volume-bundle"),
                 Layout::Multiarch);
        b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        fs::remove_all(volume / "bin");
        fs::create_directories(volume / "bin");
        for (const auto& e : fs::directory_iterator(b.rootfs() / "usr/bin"))
            fs::copy(e.path(), volume / "bin" / e.path().filename());
        fs::remove_all(b.rootfs() / "usr/bin");
        fs::create_symlink("/data/bin", b.rootfs() / "usr/bin");
        fs::create_directories(b.rootfs() / "data");
        b.spec()["mounts"].push_back({{"destination", "/data"},
                                      {"type", "bind"},
                                      {"source", volume.string()},
                                      {"options", {"rbind", "rshared"}}});
        if (shared_root) b.spec()["linux"]["rootfsPropagation"] = "rshared";
        const std::string volume_before = snapshot_tree(volume);
        auto r = run_case(b);  // the tripwire holds the host's mount table
        EXPECT_EQ(snapshot_tree(volume), volume_before) << "left in the host's volume";
        EXPECT_THAT(host_mounts(), Not(HasSubstr((volume / "bin/nvidia-smi").string())));
        if (shared_root)
            expect_refused(r, {"shared mount"});
        else
            expect_refused(r, {"/usr/bin/", "another mount"});
    }
}

// Issue 21 (1): the same host volume, shared, bound at /usr/bin, through
// gpubind-runtime. It used to hand runc a bind mount for every driver
// binary in the volume: after the container, five mounts (nvidia-smi, ...)
// stayed in the host's mount table, and runc made root-owned mount-point
// files in the host's directory even without shared propagation. Now the
// shim refuses before runc runs, naming the target and the volume (or the
// shared rootfs), and the host's volume and mount table are as they were,
// for the volume's own propagation and for the rootfs's.
TEST_F(HostileTest, Issue21SharedVolumeThroughTheRuntimeIsRefused) {
    const SharedVolume shared(dir_.path() / "volume21");
    ASSERT_TRUE(shared.ready());
    const fs::path& volume = shared.path();
    // gpubind-runtime reads its config from the environment, as engines let it.
    const fs::path config = issue12_config(dir_.path(), "volume21", node());
    ::setenv("GPUBIND_CONFIG", config.c_str(), 1);
    struct Unset {
        ~Unset() { ::unsetenv("GPUBIND_CONFIG"); }
    } unset;
    struct Case {
        const char* name;
        std::vector<std::string> volume_options;
        const char* rootfs_propagation;  // nullptr: the runtime's default
        std::vector<std::string> refusal;
    };
    const Case cases[] = {
        {"a shared volume", {"rbind", "rshared"}, nullptr, {"/usr/bin/", "volume"}},
        {"a shared volume and rootfs", {"rbind", "rshared"}, "rshared", {"shared mount"}},
        {"a private volume", {"rbind"}, nullptr, {"/usr/bin/", "volume"}},
    };
    int n = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Bundle b(dir_.path() / ("volume21-bundle" + std::to_string(n++)), Layout::Multiarch);
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        b.spec()["mounts"].push_back({{"destination", "/usr/bin"},
                                      {"type", "bind"},
                                      {"source", volume.string()},
                                      {"options", c.volume_options}});
        if (c.rootfs_propagation) b.spec()["linux"]["rootfsPropagation"] = c.rootfs_propagation;
        fs::remove_all(volume / "tool");
        fs::create_directories(volume / "tool");
        std::ofstream(volume / "tool/host-file") << "the host's";
        const std::string volume_before = snapshot_tree(volume);
        auto r = run_case(b, "echo started", runtime());  // the tripwire holds the mount table
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("started")));
        const auto at = r.err.find("gpubind-runtime: ");
        ASSERT_NE(at, std::string::npos) << "not refused by gpubind-runtime: " << r.err;
        const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
        for (const auto& word : c.refusal) EXPECT_THAT(line, HasSubstr(word));
        EXPECT_EQ(snapshot_tree(volume), volume_before) << "left in the host's volume";
        EXPECT_THAT(host_mounts(), Not(HasSubstr((volume / "nvidia-smi").string())));
    }
}

// 5. Registered at createContainer without "env": runc gives the hook the
// container's environment and the rootfs as working directory. An image's
// GPUBIND_CONFIG (relative) naming its own config with a host log file does
// not make the hook create that host file; the hook refuses at once.
TEST_F(HostileTest, Issue12CreateContainerHookIgnoresTheImagesConfig) {
    const fs::path cron = dir_.path() / "host-etc/cron.d";
    fs::create_directories(cron);
    const fs::path planted = cron / "gpubind";
    Bundle b(dir_.path() / "createcontainer", Layout::Multiarch);
    b.spec()["hooks"]["createContainer"].push_back(
        {{"path", env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH)},
         {"args", {"gpubind-hook", "createContainer"}}});
    b.env("NVIDIA_VISIBLE_DEVICES=0").env("GPUBIND_CONFIG=evil.toml");
    std::ofstream(b.rootfs() / "evil.toml")
        << "[log]\nfile = \"" << planted.string() << "\"\nlevel = \"debug\"\n";
    const std::string before = snapshot_tree(cron);
    auto r = run_case(b);
    EXPECT_FALSE(fs::exists(planted)) << read_text(planted);
    EXPECT_EQ(snapshot_tree(cron), before);
    expect_refused(r, {"createContainer", "env"});
}

// Text from the image reaches the configured log file escaped, as on stderr:
// a variable's newline cannot forge a line of the log (a cron file, say).
// (A guard: every sink now escapes every message, hook/log_format.hpp.)
TEST_F(HostileTest, Issue12LogFileGetsImageTextEscaped) {
    const fs::path log = dir_.path() / "hook.log";
    const fs::path config =
        issue12_config(dir_.path(), "log", node(), "",
                       "[log]\nfile = \"" + log.string() + "\"\nlevel = \"debug\"\n");
    Bundle b(dir_.path() / "logged", Layout::Multiarch);
    b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), config);
    b.env("NVIDIA_VISIBLE_DEVICES=0\n* * * * * root touch /forged\n");
    auto r = run_case(b);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.out, Not(HasSubstr("started")));
    const std::string text = read_text(log);
    ASSERT_THAT(text, HasSubstr("select device"));
    for (const auto& line : util::split(text, '\n'))
        EXPECT_FALSE(line.starts_with("* * * * *")) << "a forged log line: " << line;
    EXPECT_THAT(text, HasSubstr("\\n* * * * * root touch /forged"));
}

}  // namespace
}  // namespace gpubind::test
