// Hostile input, end to end (hostile.hpp): a directory and a host link swapped
// while containers start, the self-proofs that the tripwire and markers see
// the bad outcomes, and the holes an attack review found (issues 12 and 21),
// each judged on the host.
#include "hostile.hpp"

namespace gpubind::test {
namespace {

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
