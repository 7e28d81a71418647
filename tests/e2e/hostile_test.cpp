// Hostile input, end to end: each case runs through the real runc with
// gpubind-hook registered as users register it (or runs the hook itself with a
// hostile state), against a simulated node, and is judged on the host by a
// Tripwire (container.hpp): a bait tree the hostile links aim at, the host's
// own directories, /etc/ld.so.cache and the mount table. Every case must end
// with the container refused (gpubind's one line, naming what and where) or
// contained (started, the hostile thing without effect), and the tripwire
// unchanged. The race, the self-proofs (the checks see the bad outcomes) and
// the attack review's holes are in hostile_holes_test.cpp.
#include "hostile.hpp"

namespace gpubind::test {
namespace {

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

}  // namespace
}  // namespace gpubind::test
