// execute() for real (needs root): a throwaway "container" (a child process in
// a private mount namespace of its own) with a rootfs directory, real mounts,
// a device node, the proc view tmpfs, v1 device cgroups and ldconfig; hostile
// rootfs trees. What the container sees is read through /proc/<pid>/root and
// /proc/<pid>/mountinfo; the host is checked to be unchanged.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "command.hpp"
#include "fake_container.hpp"
#include "files.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/os/cgroup.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using test::FakeContainer;
using ::testing::HasSubstr;

using test::slurp;
using test::write;

struct MountEntry {
    std::string point;
    std::set<std::string> options;  // per-mount options
    std::string fstype;
};

std::string unescape(const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            out.push_back(
                static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
            i += 3;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

std::vector<MountEntry> parse_mountinfo(const std::string& text) {
    std::vector<MountEntry> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::vector<std::string> f;
        std::string w;
        while (ls >> w) f.push_back(w);
        if (f.size() < 7) continue;
        MountEntry e;
        e.point = unescape(f[4]);
        for (auto o : util::split(f[5], ',')) e.options.insert(std::string(o));
        for (std::size_t i = 6; i + 1 < f.size(); ++i)
            if (f[i] == "-") e.fstype = f[i + 1];
        out.push_back(e);
    }
    return out;
}

// The topmost mount at `point`, or nullptr.
const MountEntry* mount_at(const std::vector<MountEntry>& mounts, const fs::path& point) {
    const MountEntry* found = nullptr;
    for (const auto& m : mounts)
        if (m.point == point.string()) found = &m;
    return found;
}

// Every entry under `dir` (not following symlinks), with its type and what matters of it.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        std::string what;
        if (S_ISLNK(st.st_mode))
            what = "link:" + fs::read_symlink(it->path()).string();
        else if (S_ISDIR(st.st_mode))
            what = "dir";
        else if (S_ISREG(st.st_mode))
            what = "file:" + std::to_string(st.st_size) + ":" + slurp(it->path());
        else if (S_ISCHR(st.st_mode))
            what = "chr:" + std::to_string(major(st.st_rdev)) + ":" +
                   std::to_string(minor(st.st_rdev));
        else
            what = "other:" + std::to_string(st.st_mode & S_IFMT);
        out[fs::relative(it->path(), dir).string()] = what;
    }
    return out;
}

std::set<std::string> lines_of(const std::string& text) {
    std::set<std::string> out;
    for (auto l : util::split(text, '\n'))
        if (!l.empty()) out.insert(std::string(l));
    return out;
}

std::string run_command(const std::string& cmd) {
    return test::run(cmd).text;
}

constexpr unsigned kLibFlags = util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev;
constexpr const char* kLib = "libgpubind-exec-test.so.1";
constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu";
constexpr const char* kLibDirRel = "usr/lib/x86_64-linux-gnu";

class ExecLinux : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
        rootfs_ = dir_ / "rootfs";
        host_ = dir_ / "host";
        tripwire_ = dir_ / "tripwire";
        for (const char* d : {"dev", "usr/lib", "usr/bin", "etc", "proc", "lib"})
            fs::create_directories(rootfs_ / d);
        write(rootfs_ / "etc/ld.so.conf", "");
        for (const char* d :
             {"lib", "bin", "dev", "firmware/1.0", "proc/driver/nvidia/capabilities/gpu0/mig/gi1"})
            fs::create_directories(host_ / d);
        write(host_ / "lib" / kLib, "LIBFAKE");
        write(host_ / "bin/fake-smi", "#!/bin/sh\necho fake\n", fs::perms(0755));
        write(host_ / "firmware/1.0/gsp.bin", "FIRMWARE");
        write(host_ / "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
              "DeviceFileMinor: 1\n");
        ASSERT_EQ(::mknod((host_ / "dev/nvidia-test0").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
        fs::create_directories(tripwire_);
        write(tripwire_ / "file", "TRIPWIRE");

        host_mountinfo_ = util::read_file("/proc/self/mountinfo", 16u << 20);
        host_root_ = list_dir("/");
        host_ns_ = fs::read_symlink("/proc/self/ns/mnt");
        cwd_ = fs::current_path();
        host_ldcache_ = slurp("/etc/ld.so.cache");
    }

    static std::set<std::string> list_dir(const fs::path& p) {
        std::set<std::string> out;
        for (const auto& e : fs::directory_iterator(p)) out.insert(e.path().filename().string());
        return out;
    }

    decide::Plan make_plan() const {
        decide::Plan plan;
        plan.devices.push_back({{"/dev/nvidia0", host_ / "dev/nvidia-test0", 1, 3, 0666}, "GPU 0"});
        plan.mounts.push_back(
            {host_ / "lib" / kLib, fs::path(kLibDir) / kLib, false, kLibFlags, "compute library"});
        plan.mounts.push_back(
            {host_ / "bin/fake-smi", "/usr/bin/fake-smi", false, kLibFlags, "utility"});
        plan.mounts.push_back({host_ / "firmware/1.0", "/lib/firmware/nvidia/1.0", true,
                               kLibFlags | util::kMountNoExec, "firmware"});
        plan.symlinks.push_back({fs::path(kLibDir) / "libgpubind-exec-test.so", kLib});
        decide::ProcView view;
        view.version = "NVRM version: test 1.0\n";
        view.params = "ModifyDeviceFiles: 0\n";
        view.gpus.push_back({"0000:01:00.0", "Model: \t\t Test GPU\n"});
        view.capability_files.push_back(host_ /
                                        "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access");
        plan.proc = view;
        return plan;
    }

    // The ldconfig method: some tests fail late through it (an empty root,
    // /bin/false); the writer has its own test (LoaderCacheWrittenByGpubind).
    exec::Target target_for(const FakeContainer& c, bool cgroups = false) const {
        exec::Target t;
        t.pid = c.pid();
        t.rootfs = rootfs_;
        t.cgroups = cgroups;
        t.ldcache = config::LdcacheMethod::Ldconfig;
        return t;
    }

    // Nothing outside the rootfs changed: the host's mounts, its "/", the
    // tripwire, the sources, the host's ld.so.cache; the new mounts in the
    // container are all under the rootfs; we are back in our namespace.
    void expect_contained(const FakeContainer& c, const std::string& container_before) {
        EXPECT_EQ(util::read_file("/proc/self/mountinfo", 16u << 20), host_mountinfo_);
        EXPECT_EQ(list_dir("/"), host_root_);
        EXPECT_EQ(list_dir(tripwire_), std::set<std::string>{"file"});
        EXPECT_EQ(slurp(tripwire_ / "file"), "TRIPWIRE");
        EXPECT_EQ(slurp(c.view(tripwire_ / "file")), "TRIPWIRE");
        EXPECT_EQ(slurp(host_ / "lib" / kLib), "LIBFAKE");
        EXPECT_EQ(slurp("/etc/ld.so.cache"), host_ldcache_);
        EXPECT_EQ(fs::read_symlink("/proc/self/ns/mnt"), host_ns_);
        EXPECT_EQ(fs::current_path(), cwd_);
        std::set<std::string> before = lines_of(container_before);
        for (const auto& line : lines_of(c.mountinfo())) {
            if (before.count(line)) continue;
            auto m = parse_mountinfo(line);
            ASSERT_EQ(m.size(), 1u) << line;
            EXPECT_EQ(m[0].point.rfind(rootfs_.string() + "/", 0), 0u)
                << "a mount outside the rootfs: " << line;
        }
    }

    // A failed execute left the container as it was.
    void expect_rolled_back(const FakeContainer& c, const std::string& container_before,
                            const std::map<std::string, std::string>& rootfs_before) {
        EXPECT_EQ(c.mountinfo(), container_before);
        EXPECT_EQ(snapshot(rootfs_), rootfs_before);
        expect_contained(c, container_before);
    }

    // Runs the plan expecting an Error mentioning `needle` and a full rollback.
    void expect_refused(const decide::Plan& plan, const std::string& needle,
                        std::chrono::milliseconds ldconfig_timeout = std::chrono::seconds(30)) {
        FakeContainer c;
        const std::string before = c.mountinfo();
        const auto rootfs_before = snapshot(rootfs_);
        try {
            exec::Target t = target_for(c);
            t.ldconfig_timeout = ldconfig_timeout;
            execute(plan, t);
            ADD_FAILURE() << "accepted; wanted an error with '" << needle << "'";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr(needle));
        }
        expect_rolled_back(c, before, rootfs_before);
    }

    test::TempDir dir_{"gpubind-exec"};
    fs::path rootfs_, host_, tripwire_;
    std::string host_mountinfo_, host_ldcache_;
    std::set<std::string> host_root_;
    fs::path host_ns_, cwd_;
};

TEST_F(ExecLinux, CarriesOutThePlanInsideTheContainerOnly) {
    FakeContainer c;
    const std::string before = c.mountinfo();
    const decide::Plan plan = make_plan();
    execute(plan, target_for(c));
    const auto mounts = parse_mountinfo(c.mountinfo());

    // The device: the host's node, usable (not nodev), nosuid and noexec.
    struct stat st {};
    ASSERT_EQ(::stat(c.view(rootfs_ / "dev/nvidia0").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(major(st.st_rdev), 1u);
    EXPECT_EQ(minor(st.st_rdev), 3u);
    {
        util::Fd dev(::open(c.view(rootfs_ / "dev/nvidia0").c_str(), O_WRONLY | O_CLOEXEC));
        ASSERT_TRUE(dev) << std::strerror(errno);
        EXPECT_EQ(::write(dev.get(), "x", 1), 1);
    }
    const MountEntry* m = mount_at(mounts, rootfs_ / "dev/nvidia0");
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(m->options.count("nosuid"));
    EXPECT_TRUE(m->options.count("noexec"));
    EXPECT_FALSE(m->options.count("nodev"));

    // Files and a directory, read-only, nosuid, nodev.
    EXPECT_EQ(slurp(c.view(rootfs_ / kLibDirRel / kLib)), "LIBFAKE");
    m = mount_at(mounts, rootfs_ / "usr/lib/x86_64-linux-gnu" / kLib);
    ASSERT_NE(m, nullptr);
    for (const char* o : {"ro", "nosuid", "nodev"}) EXPECT_TRUE(m->options.count(o)) << o;
    EXPECT_EQ(::open(c.view(rootfs_ / kLibDirRel / kLib).c_str(), O_WRONLY | O_CLOEXEC), -1);
    EXPECT_EQ(errno, EROFS);
    EXPECT_EQ(slurp(c.view(rootfs_ / "usr/bin/fake-smi")), "#!/bin/sh\necho fake\n");
    EXPECT_EQ(slurp(c.view(rootfs_ / "lib/firmware/nvidia/1.0/gsp.bin")), "FIRMWARE");
    m = mount_at(mounts, rootfs_ / "lib/firmware/nvidia/1.0");
    ASSERT_NE(m, nullptr);
    for (const char* o : {"ro", "nosuid", "nodev", "noexec"}) EXPECT_TRUE(m->options.count(o)) << o;

    // The symlink is on disk.
    EXPECT_EQ(fs::read_symlink(rootfs_ / kLibDirRel / "libgpubind-exec-test.so"), kLib);

    // The proc view: a read-only tmpfs with the plan's contents and the capability file.
    const fs::path proc = rootfs_ / "proc/driver/nvidia";
    EXPECT_EQ(slurp(c.view(proc / "version")), plan.proc->version);
    EXPECT_EQ(slurp(c.view(proc / "params")), plan.proc->params);
    EXPECT_EQ(slurp(c.view(proc / "gpus/0000:01:00.0/information")),
              plan.proc->gpus[0].information);
    EXPECT_EQ(slurp(c.view(proc / "capabilities/gpu0/mig/gi1/access")), "DeviceFileMinor: 1\n");
    m = mount_at(mounts, proc);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->fstype, "tmpfs");
    for (const char* o : {"ro", "nosuid", "nodev", "noexec"}) EXPECT_TRUE(m->options.count(o)) << o;
    EXPECT_EQ(::mkdir(c.view(proc / "extra").c_str(), 0755), -1);

    // On the host the mount points are plain empty files and directories.
    struct stat host_st {};
    ASSERT_EQ(::lstat((rootfs_ / "dev/nvidia0").c_str(), &host_st), 0);
    EXPECT_TRUE(S_ISREG(host_st.st_mode));
    EXPECT_EQ(host_st.st_size, 0);
    EXPECT_EQ(fs::file_size(rootfs_ / kLibDirRel / kLib), 0u);
    EXPECT_TRUE(fs::is_empty(rootfs_ / "proc/driver/nvidia"));
    expect_contained(c, before);
}

TEST_F(ExecLinux, AFailingStepLeavesTheContainerAsItWas) {
    // A source that does not exist: found on the host side, nothing is touched.
    {
        decide::Plan plan = make_plan();
        plan.mounts.push_back(
            {host_ / "lib/missing.so", "/usr/lib/missing.so", false, kLibFlags, "missing"});
        expect_refused(plan, "missing.so: No such file or directory");
    }
    // A conflict after devices, mounts and directories were made.
    {
        decide::Plan plan = make_plan();
        write(rootfs_ / "etc/taken", "image file");
        plan.symlinks.push_back({"/etc/taken", "elsewhere"});
        expect_refused(plan, "/etc/taken: exists and is a regular file");
    }
    // ldconfig fails (the image's ld.so.conf.d holds a FIFO nobody writes: it
    // is killed at its deadline) after everything, proc view included.
    {
        fs::remove_all(rootfs_ / "etc");
        fs::create_directories(rootfs_ / "etc/ld.so.conf.d");
        write(rootfs_ / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
        ASSERT_EQ(::mkfifo((rootfs_ / "etc/ld.so.conf.d/stuck.conf").c_str(), 0644), 0);
        decide::Plan plan = make_plan();
        plan.library_dirs = {kLibDir};
        plan.refresh_ldcache = true;
        expect_refused(plan, "killed after 500 ms", std::chrono::milliseconds(500));
    }
}

TEST_F(ExecLinux, LibraryDirectorySymlinkedToSlashStaysInTheRoot) {
    fs::remove_all(rootfs_ / "usr/lib");
    fs::create_directories(rootfs_ / "usr");
    fs::create_symlink("/", rootfs_ / "usr/lib");
    fs::create_directories(rootfs_ / "x86_64-linux-gnu");
    FakeContainer c;
    const std::string before = c.mountinfo();
    execute(make_plan(), target_for(c));
    // /usr/lib/x86_64-linux-gnu is <rootfs>/x86_64-linux-gnu.
    EXPECT_EQ(slurp(c.view(rootfs_ / "x86_64-linux-gnu" / kLib)), "LIBFAKE");
    EXPECT_FALSE(fs::exists(fs::path("/x86_64-linux-gnu") / kLib));
    EXPECT_FALSE(fs::exists(c.view(fs::path("/x86_64-linux-gnu") / kLib)));
    expect_contained(c, before);
}

// A link at a driver file's name is replaced by the mount point, never followed.
TEST_F(ExecLinux, MountTargetThatIsALinkToAHostPathIsReplacedNotFollowed) {
    for (const char* target : {"fake-smi", "file"}) {  // dangling, or an existing host file
        fs::create_symlink(tripwire_ / target, rootfs_ / "usr/bin/fake-smi");
        {
            FakeContainer c;
            const std::string before = c.mountinfo();
            execute(make_plan(), target_for(c));
            EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(rootfs_ / "usr/bin/fake-smi")));
            expect_contained(c, before);
        }
        fs::remove(rootfs_ / "usr/bin/fake-smi");
    }
}

TEST_F(ExecLinux, DevSymlinkedToTheHostIsRefused) {
    fs::remove_all(rootfs_ / "dev");
    fs::create_symlink(tripwire_, rootfs_ / "dev");
    expect_refused(make_plan(), "/dev: is a symbolic link that leads nowhere");
    fs::remove(rootfs_ / "dev");
    fs::create_symlink("/dev", rootfs_ / "dev");  // to itself: a loop inside the root
    expect_refused(make_plan(), "/dev");
}

TEST_F(ExecLinux, ProcDriverNvidiaSymlinkIsRefused) {
    fs::create_directories(rootfs_ / "proc/driver");
    fs::create_symlink(tripwire_, rootfs_ / "proc/driver/nvidia");
    expect_refused(make_plan(), "/proc/driver/nvidia: exists and is a symbolic link");
    fs::remove(rootfs_ / "proc/driver/nvidia");
    fs::create_symlink("/", rootfs_ / "proc/driver/nvidia");
    expect_refused(make_plan(), "/proc/driver/nvidia: exists and is a symbolic link");
}

TEST_F(ExecLinux, DeviceMountPointOfTheWrongKindIsRefused) {
    ASSERT_EQ(::mkfifo((rootfs_ / "dev/nvidia0").c_str(), 0600), 0);
    expect_refused(make_plan(), "/dev/nvidia0: exists and is a FIFO");
    fs::remove(rootfs_ / "dev/nvidia0");
    ASSERT_EQ(::mknod((rootfs_ / "dev/nvidia0").c_str(), S_IFCHR | 0600, makedev(1, 5)), 0);
    expect_refused(make_plan(), "/dev/nvidia0: exists and is a character device 1:5");
}

// A v1 devices cgroup of our own, removed afterwards (after the container).
class DevicesCgroup {
  public:
    DevicesCgroup() {
        path_ = fs::path("/sys/fs/cgroup/devices") / ("gpubind-test-" + std::to_string(::getpid()));
        ::rmdir(path_.c_str());
        if (::mkdir(path_.c_str(), 0755) != 0) throw util::Error(errno, "mkdir", path_.string());
    }
    ~DevicesCgroup() {
        // The container has gone by now; retry briefly while the kernel lets go.
        for (int i = 0; i < 100 && ::rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i)
            ::usleep(10000);
    }
    void put(const std::string& file, const std::string& value) const {
        util::Fd fd(::open((path_ / file).c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd || ::write(fd.get(), value.data(), value.size()) < 0)
            throw util::Error(errno, "write", (path_ / file).string());
    }
    std::set<std::string> list() const { return lines_of(slurp(path_ / "devices.list")); }

  private:
    fs::path path_;
};

TEST_F(ExecLinux, CgroupV1RulesAreAddedAndRolledBack) {
    ASSERT_TRUE(fs::exists("/sys/fs/cgroup/devices/devices.allow"))
        << "cgroup v1 devices hierarchy not mounted at /sys/fs/cgroup/devices";
    ASSERT_EQ(::mknod((host_ / "dev/nvidia-test1").c_str(), S_IFCHR | 0666, makedev(1, 5)), 0);
    ASSERT_EQ(::mknod((host_ / "dev/nvidia-test7").c_str(), S_IFCHR | 0666, makedev(1, 7)), 0);
    DevicesCgroup cg;
    FakeContainer c;
    cg.put("devices.deny", "a");
    cg.put("cgroup.procs", std::to_string(c.pid()));
    ASSERT_TRUE(cg.list().empty());

    decide::Plan plan = make_plan();
    plan.devices.push_back({{"/dev/nvidia1", host_ / "dev/nvidia-test1", 1, 5, 0666}, "GPU 1"});
    execute(plan, target_for(c, true));
    EXPECT_EQ(cg.list(), (std::set<std::string>{"c 1:3 rw", "c 1:5 rw"}));

    // A later execute that fails (ldconfig, at the very end) takes its rule back.
    decide::Plan more;
    more.devices.push_back({{"/dev/nvidia7", host_ / "dev/nvidia-test7", 1, 7, 0666}, "GPU 7"});
    more.refresh_ldcache = true;
    exec::Target t = target_for(c, true);
    t.ldconfig = "/bin/false";
    EXPECT_THROW(execute(more, t), util::Error);
    EXPECT_EQ(cg.list(), (std::set<std::string>{"c 1:3 rw", "c 1:5 rw"}));
    EXPECT_FALSE(fs::exists(rootfs_ / "dev/nvidia7"));
}

// A plan mounting one library (a stub with `soname`, written on the host) in kLibDir.
decide::Plan one_library(const fs::path& host, const std::string& soname) {
    write(host / "lib" / soname, sim::elf::make_shared_object(sim::elf::Machine::X86_64, soname));
    decide::Plan plan;
    plan.mounts.push_back(
        {host / "lib" / soname, fs::path(kLibDir) / soname, false, kLibFlags, "library"});
    plan.library_dirs = {kLibDir};
    plan.refresh_ldcache = true;
    plan.ldcache_libraries = {{soname, std::string(kLibDir) + "/" + soname, ldcache::Arch::X86_64}};
    return plan;
}

TEST_F(ExecLinux, LdconfigRunsForTheContainerAndCoversTheInjectedDirectory) {
    const std::string soname = "libgpubindexec.so.1";
    const decide::Plan plan = one_library(host_, soname);
    FakeContainer c;
    const std::string before = c.mountinfo();
    execute(plan, target_for(c));
    // The cache lands in the rootfs. It can only list the library if ldconfig
    // ran where the mount is: on the host the mount point is an empty file.
    ASSERT_TRUE(fs::exists(rootfs_ / "etc/ld.so.cache"));
    EXPECT_EQ(fs::file_size(rootfs_ / kLibDirRel / soname), 0u);
    std::string listing =
        run_command("/sbin/ldconfig -p -C " + (rootfs_ / "etc/ld.so.cache").string());
    EXPECT_THAT(listing, HasSubstr(soname + " (libc6,x86-64) => " + kLibDir + "/" + soname));
    expect_contained(c, before);
}

// The default: no process; the image's cache kept and the library added, the
// original's owner and mode kept; a FIFO at ld.so.cache~ refused at once.
TEST_F(ExecLinux, LoaderCacheWrittenByGpubind) {
    const std::string soname = "libgpubindexec.so.1";
    const decide::Plan plan = one_library(host_, soname);
    // The image's own cache, made by the system's ldconfig, owned by 12:34, mode 0640.
    const std::string own = "libimageown.so.3";
    fs::create_directories(rootfs_ / "opt/own");
    write(rootfs_ / "opt/own" / own, sim::elf::make_shared_object(sim::elf::Machine::X86_64, own));
    write(rootfs_ / "etc/ld.so.conf", "/opt/own\n");
    run_command("/sbin/ldconfig -X -r " + rootfs_.string());
    const fs::path cache = rootfs_ / "etc/ld.so.cache";
    ASSERT_TRUE(fs::exists(cache));
    ASSERT_EQ(::chown(cache.c_str(), 12, 34), 0);
    ASSERT_EQ(::chmod(cache.c_str(), 0640), 0);
    FakeContainer c;
    const std::string before = c.mountinfo();
    exec::Target t = target_for(c);
    t.ldcache = config::LdcacheMethod::Gpubind;
    t.ldconfig = "/nonexistent/ldconfig";  // never opened
    execute(plan, t);
    const std::string listing = run_command("/sbin/ldconfig -p -C " + cache.string());
    EXPECT_THAT(listing, HasSubstr(soname + " (libc6,x86-64) => " + kLibDir + "/" + soname));
    EXPECT_THAT(listing, HasSubstr(own + " (libc6,x86-64) => /opt/own/" + own));
    struct stat st {};
    ASSERT_EQ(::lstat(cache.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_uid, 12u);
    EXPECT_EQ(st.st_gid, 34u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_FALSE(fs::exists(rootfs_ / "etc/ld.so.cache~"));
    expect_contained(c, before);

    // A FIFO at ld.so.cache~: refused with one line, quickly, the cache untouched.
    const std::string written = slurp(cache);
    ASSERT_EQ(::mkfifo((rootfs_ / "etc/ld.so.cache~").c_str(), 0644), 0);
    FakeContainer again;
    const auto t0 = std::chrono::steady_clock::now();
    exec::Target t2 = target_for(again);
    t2.ldcache = config::LdcacheMethod::Gpubind;
    try {
        execute(plan, t2);
        ADD_FAILURE() << "a FIFO at ld.so.cache~ was accepted";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("/etc/ld.so.cache~: is a FIFO"));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(slurp(cache), written);
}

// --- LinuxSystem::run on its own ---

// ldconfig runs confined to "-r ROOT" (sandbox.cpp; more in harden_test.cpp).
TEST(LinuxSystemRun, ConfinedToTheRootExitStatusAndTimeout) {
    ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
    os::LinuxSystem sys;
    test::TempDir dir("gpubind-exec");
    const fs::path root = dir / "root";
    fs::create_directories(root);
    util::Fd ldconfig = sys.open_executable("/sbin/ldconfig");
    // Without a root to confine it to, nothing runs.
    EXPECT_THROW(sys.run(ldconfig.get(), "/sbin/ldconfig", {"-p"}, std::chrono::seconds(10)),
                 util::Error);
    // A root without /dev (where its scratch goes): the sandbox says so.
    const std::vector<std::string> args = {"-r", root.string(), "-X", "-C", "/dev/ld.so.cache"};
    try {
        sys.run(ldconfig.get(), "/sbin/ldconfig", args, std::chrono::seconds(10));
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("scratch"));
    }
    // With /dev it returns the cache it wrote there, and writes nothing in the root.
    fs::create_directories(root / "dev");
    fs::create_directories(root / "etc");
    const std::string host_cache = slurp("/etc/ld.so.cache");
    std::string cache;
    EXPECT_NO_THROW(cache =
                        sys.run(ldconfig.get(), "/sbin/ldconfig", args, std::chrono::seconds(10)));
    EXPECT_EQ(cache.rfind("glibc-ld.so.cache", 0), 0u) << cache.substr(0, 32);
    EXPECT_FALSE(fs::exists(root / "etc/ld.so.cache"));
    EXPECT_FALSE(fs::exists(root / "dev/ld.so.cache"));
    EXPECT_EQ(slurp("/etc/ld.so.cache"), host_cache);
    // A program that exits non-zero: its status and last words come back.
    try {
        sys.run(ldconfig.get(), "/sbin/ldconfig", {"-r", root.string(), "-C", "/etc/ld.so.cache"},
                std::chrono::seconds(10));
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("exited with status 1"));  // the root is read-only
        EXPECT_THAT(e.what(), HasSubstr("/etc/ld.so.cache~"));
    }
    // An ld.so.conf that never ends (a FIFO nobody writes): killed at the deadline.
    ASSERT_EQ(::mkfifo((root / "etc/ld.so.conf").c_str(), 0644), 0);
    auto start = std::chrono::steady_clock::now();
    try {
        sys.run(ldconfig.get(), "/sbin/ldconfig", args, std::chrono::milliseconds(300));
        FAIL() << "no timeout";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    write(dir / "data", "not a program");
    EXPECT_THROW(sys.open_executable(dir / "data"), util::Error);
    EXPECT_THROW(sys.open_executable("/etc"), util::Error);
}

// Runs `body` in a forked child (no exception crosses the fork: one is exit
// status 127) and returns its exit status (-1: it did not exit).
int status_of_child(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int status = 127;
        try {
            status = body();
        } catch (...) {
        }
        ::_exit(status);
    }
    int ws = 0;
    if (::waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return -1;
    return WEXITSTATUS(ws);
}

// statmount(2) and the mountinfo line agree on a mount's propagation, private
// and then shared; a kernel of 6.8 or later answers without mountinfo.
// The executor creates mount points and links first: a free name is
// created, a taken one (whatever it is, a link never followed) answers an
// empty Fd or false and is left exactly as it was.
TEST(LinuxSystemCreate, TryMakeCreatesOnlyAFreeNameAndNeverFollows) {
    test::TempDir dir("gpubind-trymake");
    const util::Fd at(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(at);
    fs::create_directories(dir / "taken-dir");
    write(dir / "taken-file", "x");
    fs::create_symlink(dir / "elsewhere", dir / "dangling");  // would create elsewhere if followed
    fs::create_symlink(dir / "taken-dir", dir / "to-dir");
    os::LinuxSystem sys;

    util::Fd file = sys.try_make_file(at.get(), "file", 0644);
    ASSERT_TRUE(file);
    EXPECT_EQ(sys.stat_fd(file.get()).type, os::FileInfo::Type::Regular);
    util::Fd made_dir = sys.try_make_dir(at.get(), "dir", 0755);
    ASSERT_TRUE(made_dir);
    EXPECT_EQ(sys.stat_fd(made_dir.get()).type, os::FileInfo::Type::Directory);
    EXPECT_TRUE(sys.try_make_symlink("target", at.get(), "link"));
    EXPECT_EQ(fs::read_symlink(dir / "link"), "target");

    for (const char* name : {"taken-dir", "taken-file", "dangling", "to-dir", "file", "link"}) {
        SCOPED_TRACE(name);
        const os::FileInfo before = sys.stat_at(at.get(), name);
        EXPECT_FALSE(sys.try_make_file(at.get(), name, 0644));
        EXPECT_FALSE(sys.try_make_dir(at.get(), name, 0755));
        EXPECT_FALSE(sys.try_make_symlink("other", at.get(), name));
        EXPECT_EQ(sys.stat_at(at.get(), name).type, before.type);
    }
    EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "elsewhere")));
    EXPECT_EQ(slurp(dir / "taken-file"), "x");
    EXPECT_EQ(fs::read_symlink(dir / "link"), "target");
    // Any other failure is still an Error.
    EXPECT_THROW(sys.try_make_file(at.get(), "missing/file", 0644), util::Error);
    EXPECT_THROW(sys.try_make_dir(at.get(), "missing/dir", 0755), util::Error);
    EXPECT_THROW(sys.try_make_symlink("t", at.get(), "missing/link"), util::Error);
}

TEST(LinuxSystemMounts, StatmountAgreesWithMountinfo) {
    ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
    test::TempDir dir("gpubind-statmount");
    const fs::path point = dir / "m";
    fs::create_directories(point);
    utsname u{};
    ASSERT_EQ(::uname(&u), 0);
    unsigned major = 0, minor = 0;
    std::sscanf(u.release, "%u.%u", &major, &minor);
    const bool kernel_has_statmount = major > 6 || (major == 6 && minor >= 8);
    // In a child of its own mount namespace: exit status bit 0 = statmount
    // answered, 1 = agreed private, 2 = agreed shared.
    const int status = status_of_child([&] {
        int bits = 0;
        if (::unshare(CLONE_NEWNS) != 0 ||
            ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", point.c_str(), "tmpfs", 0, nullptr) != 0)
            return 64;
        os::LinuxSystem sys;
        for (int round = 0; round < 2; ++round) {
            if (round == 1 && ::mount(nullptr, point.c_str(), nullptr, MS_SHARED, nullptr) != 0)
                return 65;
            util::Fd fd(::open(point.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
            const bool by_mountinfo =
                os::mount_is_shared(sys.read_mountinfo(), sys.mount_id(fd.get()));
            const auto fast = sys.mount_shared(fd.get());
            if (fast) bits |= 1;
            if (by_mountinfo == (round == 1) && (!fast || *fast == by_mountinfo))
                bits |= round == 0 ? 2 : 4;
        }
        return bits;
    });
    ASSERT_GE(status, 0);
    ASSERT_LT(status, 64) << "the child could not set up its mounts: " << status;
    EXPECT_TRUE(status & 2) << "private tmpfs: statmount and mountinfo disagree";
    EXPECT_TRUE(status & 4) << "shared tmpfs: statmount and mountinfo disagree";
    if (kernel_has_statmount) {
        EXPECT_TRUE(status & 1) << u.release << ": statmount did not answer";
    }
}

// The runtime's mountinfo, opened before a setns and read after, shows the
// opener's namespace: a tmpfs mounted only in the namespace entered is not
// in it, one of the opener's is. Read as a stream: a file of many mounts,
// lines across its buffer's edges, any size.
TEST(LinuxSystemMounts, MountinfoOpenedBeforeASetnsShowsTheOpenersMounts) {
    ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
    test::TempDir dir("gpubind-mountinfo");
    const fs::path own = dir / "own", other = dir / "other";
    fs::create_directories(own);
    fs::create_directories(other);
    // In a child: it mounts a tmpfs in its own namespace, opens its
    // mountinfo, enters a new namespace, mounts another, then asks. Exit
    // status bit 0: the first shown, 1: the second not.
    const int status = status_of_child([&] {
        int bits = 0;
        if (::unshare(CLONE_NEWNS) != 0 ||
            ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", own.c_str(), "tmpfs", 0, nullptr) != 0)
            return 64;
        os::LinuxSystem sys;
        util::Fd opened = sys.open_mountinfo();
        if (::unshare(CLONE_NEWNS) != 0 ||
            ::mount("tmpfs", other.c_str(), "tmpfs", 0, nullptr) != 0)
            return 65;
        std::vector<std::pair<unsigned, unsigned>> devices;
        for (const fs::path& p : {own, other}) {
            util::Fd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
            struct stat st {};
            if (::fstat(fd.get(), &st) != 0) return 66;
            const auto device = sys.tmpfs_device(fd.get());
            if (!device || *device != std::pair{::major(st.st_dev), ::minor(st.st_dev)}) return 67;
            devices.push_back(*device);
        }
        const auto shown = sys.mountinfo_shows(opened.get(), devices);
        if (shown.size() == 2 && shown[0]) bits |= 1;
        if (shown.size() == 2 && !shown[1]) bits |= 2;
        return bits;
    });
    ASSERT_GE(status, 0);
    ASSERT_LT(status, 64) << "the child failed: " << status;
    EXPECT_TRUE(status & 1) << "a tmpfs of the opener's namespace is not shown";
    EXPECT_TRUE(status & 2) << "a tmpfs of the namespace entered later is shown";

    // The stream: 200,000 lines (megabytes), the device asked last, one line
    // longer than the buffer.
    const fs::path text = dir / "mountinfo";
    {
        std::ofstream out(text);
        for (int i = 0; i < 200000; ++i)
            out << i << " 1 0:" << (i % 50) << " / /m" << i << " rw - tmpfs tmpfs rw\n";
        out << "9 1 0:4242 / /" << std::string(100000, 'x') << " rw - tmpfs tmpfs rw\n";
        out << "10 1 0:4343 / /last rw - tmpfs tmpfs rw";  // no newline at the end
    }
    os::LinuxSystem sys;
    util::Fd fd(::open(text.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    EXPECT_EQ(sys.mountinfo_shows(fd.get(), {{0, 4242}, {0, 7}, {0, 77}, {0, 4343}, {0, 424}}),
              (std::vector<bool>{true, true, false, true, false}));
    EXPECT_EQ(os::mountinfo_device("36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw"), "98:0");
    EXPECT_EQ(os::mountinfo_device("36 35"), "");
}

// The usual cgroup mounts as statmount describes them locate this process's
// device cgroup exactly where the host's whole mountinfo does.
TEST(LinuxSystemMounts, UsualCgroupMountsLocateLikeMountinfo) {
    os::LinuxSystem sys;
    const std::string proc = slurp("/proc/self/cgroup");
    const auto usual = sys.cgroup_mounts(proc.find("devices") != std::string::npos);
    utsname u{};
    ASSERT_EQ(::uname(&u), 0);
    unsigned major = 0, minor = 0;
    std::sscanf(u.release, "%u.%u", &major, &minor);
    if (major > 6 || (major == 6 && minor >= 8)) {
        ASSERT_TRUE(usual.has_value()) << u.release;
    }
    if (!usual) return;
    const auto by_mountinfo = os::cgroup::locate(proc, slurp("/proc/self/mountinfo"), "self");
    EXPECT_EQ(os::cgroup::locate(proc, *usual, "self"), by_mountinfo) << *usual;
}

}  // namespace
}  // namespace gpubind
