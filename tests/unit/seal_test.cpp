// The seal every test runs in (tests/support/seal.c): the host's file systems
// read-only, fresh /tmp, /var/tmp and /run, the kernel's interfaces writable.
// Runs as root (label root), as CI runs it; run unsealed (GPUBIND_SEAL=off, or
// without the launcher) these fail, and whatever they managed to make is removed.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
