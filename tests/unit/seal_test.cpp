// The seal every test runs in (tests/support/seal.c): the host's file systems
// read-only, fresh /tmp, /var/tmp and /run, the kernel's interfaces writable
// but for the machine's settings (sysctls, sysrq) and its disks.
// Runs as root (label root), as CI runs it; run unsealed (GPUBIND_SEAL=off, or
// without the launcher) these fail, and whatever they managed to make is removed.
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/major.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

// A name no other run uses.
std::string unique(const std::string& dir) {
    return dir + "/gpubind-seal-test-" + std::to_string(::getpid());
}

// Creates PATH exclusively, expecting EROFS; removes it if it was made.
int create_errno(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    ::close(fd);
    ::unlink(path.c_str());
    return 0;
}

long fs_type(const char* path) {
    struct statfs st {};
    return ::statfs(path, &st) == 0 ? static_cast<long>(st.f_type) : -1;
}

TEST(Seal, TheHostsFilesCannotBeMadeOrChanged) {
    ASSERT_EQ(::geteuid(), 0u) << "run as root: the seal is what keeps a root test off the host";
    for (const char* dir : {"/", "/etc", "/usr/lib", "/work", "/var/lib"}) {
        if (!fs::is_directory(dir)) continue;
        EXPECT_EQ(create_errno(unique(dir)), EROFS) << dir;
    }
    const std::string node = unique("/dev");
    const int rc = ::mknod(node.c_str(), S_IFCHR | 0600, ::makedev(195, 0));
    const int err = errno;
    if (rc == 0) ::unlink(node.c_str());
    EXPECT_EQ(rc == 0 ? 0 : err, EROFS) << node;
    // An existing file is not writable either.
    EXPECT_EQ(::open("/etc/ld.so.cache", O_WRONLY | O_CLOEXEC), -1);
    EXPECT_EQ(errno, EROFS);
}

TEST(Seal, TheTestsOwnDirectoriesAreFreshAndWritable) {
    for (const char* dir : {"/tmp", "/var/tmp", "/run"}) {
        EXPECT_EQ(fs_type(dir), static_cast<long>(TMPFS_MAGIC)) << dir;
        EXPECT_EQ(create_errno(unique(dir)), 0) << dir;
    }
    // Fresh: nothing of the host's /run (its runc state, its CDI specs) is seen.
    EXPECT_TRUE(fs::is_empty("/run"));
    EXPECT_STREQ(::getenv("TMPDIR"), "/tmp");
}

TEST(Seal, TheKernelsInterfacesStayWritable) {
    // What runc writes: /proc (its own files) and the cgroup file systems.
    EXPECT_NE(::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC), -1) << std::strerror(errno);
    EXPECT_NE(::open("/dev/null", O_WRONLY | O_CLOEXEC), -1) << std::strerror(errno);
    // The unified hierarchy; on a hybrid host its v2 mount; on a v1 host pids.
    fs::path hierarchy = "/sys/fs/cgroup";
    if (fs::exists(hierarchy / "unified"))
        hierarchy /= "unified";
    else if (!fs::exists(hierarchy / "cgroup.procs"))
        hierarchy /= "pids";
    const std::string group = unique(hierarchy.string());
    EXPECT_EQ(::mkdir(group.c_str(), 0755), 0) << group << ": " << std::strerror(errno);
    ::rmdir(group.c_str());
}

// Opens PATH for writing (never writing), expecting a failure: its errno, or 0
// when it opened.
int open_for_writing_errno(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
}

// Issue 44, F9: a sealed test changed the host's printk_ratelimit_burst.
TEST(Seal, TheMachinesSettingsCannotBeChanged) {
    ASSERT_TRUE(fs::exists("/proc/sys/kernel/printk_ratelimit_burst"));
    EXPECT_EQ(open_for_writing_errno("/proc/sys/kernel/printk_ratelimit_burst"), EROFS);
    EXPECT_EQ(open_for_writing_errno("/proc/sys/vm/drop_caches"), EROFS);
    // A kernel without CONFIG_MAGIC_SYSRQ has none.
    if (fs::exists("/proc/sysrq-trigger")) {
        EXPECT_EQ(open_for_writing_errno("/proc/sysrq-trigger"), EROFS);
    }
    // PCI config space: /proc/bus/pci/<bus>/<device>.<function>, where there is one.
    std::error_code ec;
    for (const auto& bus : fs::directory_iterator("/proc/bus/pci", ec))
        for (const auto& function : fs::directory_iterator(bus.path(), ec))
            EXPECT_EQ(open_for_writing_errno(function.path().string()), EROFS) << function.path();
    // Still readable, as the tests read them (overflowuid, the old value).
    EXPECT_FALSE(std::ifstream("/proc/sys/kernel/printk_ratelimit_burst").get() == EOF);
}

// Issue 44, F9: block devices stayed writable. Every block device node in
// /dev but the loop devices (the hostile suite attaches its own) refuses to
// be opened.
TEST(Seal, TheMachinesDisksCannotBeOpened) {
    std::vector<std::string> disks;
    for (const auto& entry :
         fs::recursive_directory_iterator("/dev", fs::directory_options::skip_permission_denied)) {
        struct stat st {};
        if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) continue;
        if (major(st.st_rdev) == LOOP_MAJOR) continue;
        disks.push_back(entry.path().string());
    }
    if (disks.empty()) GTEST_SKIP() << "no block device but loop devices in /dev";
    for (const auto& disk : disks) {
        EXPECT_EQ(open_for_writing_errno(disk), EACCES) << disk;
        const int fd = ::open(disk.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        EXPECT_EQ(fd, -1) << disk;
        if (fd >= 0) ::close(fd);
    }
}

// What the rootless and id-mapped runc tests do: a new user, mount and pid
// namespace mounts a proc of its own. The kernel allows it only where a proc
// mount that nothing covers is in the namespace; the read-only /proc/sys
// covers part of /proc.
TEST(Seal, AUserNamespaceStillMountsItsOwnProc) {
    const std::string dir = unique("/tmp");
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
    const pid_t child = ::fork();
    ASSERT_NE(child, -1);
    if (child == 0) {
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID) != 0) ::_exit(10);
        const pid_t init = ::fork();
        if (init == -1) ::_exit(11);
        if (init == 0) {
            if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(12);
            if (::mount("proc", dir.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
                0)
                ::_exit(errno == EPERM ? 13 : 14);
            ::_exit(0);
        }
        int status = 0;
        if (::waitpid(init, &status, 0) != init || !WIFEXITED(status)) ::_exit(15);
        ::_exit(WEXITSTATUS(status));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ::rmdir(dir.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "10: unshare, 12: private /, 13: the proc mount refused (EPERM), 14: it failed";
}

}  // namespace
