// Resolving paths inside a hostile root: openat2 (open_in_root) and the
// fallback walk (detail::open_in_root_walk) must agree on every case.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "files.hpp"
#include "gpubind/os/safe_path.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
    ASSERT_TRUE(out.good()) << p;
}

// What an open file holds, capped: where resolution breaks and "zero"
// reaches the host's /dev/zero, the test fails at once instead of reading it
// for minutes.
std::string content_of(int fd) {
    return test::read_capped(fd, 1 << 16);
}

bool same_inode(int fd, const fs::path& p) {
    struct stat a {
    }, b{};
    return ::fstat(fd, &a) == 0 && ::stat(p.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

using OpenFn = int (*)(int, const fs::path&, int, unsigned);

int via_open_in_root(int root, const fs::path& p, int flags, unsigned mode) {
    try {
        return os::open_in_root(root, p, flags, mode).release();
    } catch (const util::Error& e) {
        errno = e.code().value();
        return -1;
    }
}

int via_walk(int root, const fs::path& p, int flags, unsigned mode) {
    return os::detail::open_in_root_walk(root, p, flags, mode);
}

// A root full of traps, and a host directory beside it with a secret.
class SafePath : public ::testing::TestWithParam<const char*> {
  protected:
    void SetUp() override {
        open_ = std::string(GetParam()) == "openat2" ? via_open_in_root : via_walk;
        if (open_ == via_open_in_root) {
            // The public path must really be using openat2 here, or the two
            // parameters would test the same code.
            struct open_how how {};
            how.flags = O_PATH | O_CLOEXEC;
            how.resolve = RESOLVE_IN_ROOT;
            long fd = ::syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
            ASSERT_GE(fd, 0) << "openat2: " << std::strerror(errno);
            ::close(static_cast<int>(fd));
        }
        root_ = dir_ / "root";
        host_ = dir_ / "host";
        fs::create_directories(root_ / "etc");
        fs::create_directories(root_ / "dir/sub");
        fs::create_directories(host_);
        write(root_ / "etc/real", "inside");
        write(host_ / "secret", "SECRET");
        write(host_ / "real", "host copy");
        fs::create_directories(host_ / "etc");
        write(host_ / "etc/real", "host etc");
        fs::create_symlink("/", root_ / "abs_root");
        fs::create_symlink("../../../../../../../..", root_ / "up");
        fs::create_symlink(host_ / "secret", root_ / "dangling");  // exists on the host only
        fs::create_symlink(host_, root_ / "hostdir");
        fs::create_symlink("loop_b", root_ / "loop_a");
        fs::create_symlink("loop_a", root_ / "loop_b");
        fs::create_symlink("/dev/zero", root_ / "zero");
        fs::create_symlink("etc/real", root_ / "link_to_real");
        fs::create_symlink("/etc", root_ / "dir/sub/abs_etc");
        ASSERT_EQ(::mkfifo((root_ / "fifo").c_str(), 0600), 0);
        root_fd_ = util::open_or_throw(root_, O_PATH | O_DIRECTORY);
    }

    // Opens and returns the content, or "errno:<name>".
    std::string open_read(const fs::path& p, int flags = O_RDONLY) {
        int fd = open_(root_fd_.get(), p, flags, 0);
        if (fd < 0) return std::string("errno:") + strerrorname_np(errno);
        util::Fd owner(fd);
        return content_of(fd);
    }

    test::TempDir dir_{"gpubind-safe-path"};
    fs::path root_, host_;
    util::Fd root_fd_;
    OpenFn open_ = nullptr;
};

TEST_P(SafePath, PlainPathsResolveInsideTheRoot) {
    EXPECT_EQ(open_read("etc/real"), "inside");
    EXPECT_EQ(open_read("/etc/real"), "inside");
    EXPECT_EQ(open_read("link_to_real"), "inside");
    EXPECT_EQ(open_read("dir/sub/../../etc/./real"), "inside");
    EXPECT_EQ(open_read("etc/missing"), "errno:ENOENT");
    EXPECT_EQ(open_read("etc/real/"), "errno:ENOTDIR");
    EXPECT_EQ(open_read("etc/real/x"), "errno:ENOTDIR");
}

TEST_P(SafePath, AbsoluteSymlinkToSlashIsTheRoot) {
    EXPECT_EQ(open_read("abs_root/etc/real"), "inside");
    EXPECT_EQ(open_read("dir/sub/abs_etc/real"), "inside");
    int fd = open_(root_fd_.get(), "abs_root", O_PATH | O_DIRECTORY, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    util::Fd owner(fd);
    EXPECT_TRUE(same_inode(fd, root_));
    EXPECT_FALSE(same_inode(fd, "/"));
}

TEST_P(SafePath, DotDotStopsAtTheRoot) {
    EXPECT_EQ(open_read("up/etc/real"), "inside");
    EXPECT_EQ(open_read("../../../../etc/real"), "inside");
    EXPECT_EQ(open_read("dir/../../../../dir/../etc/real"), "inside");
    // The host directory beside the root, by a relative climb: not reachable.
    EXPECT_EQ(open_read("up/host/secret"), "errno:ENOENT");
    EXPECT_EQ(open_read("../host/secret"), "errno:ENOENT");
    int fd = open_(root_fd_.get(), "up", O_PATH | O_DIRECTORY, 0);
    ASSERT_GE(fd, 0);
    util::Fd owner(fd);
    EXPECT_TRUE(same_inode(fd, root_));
}

TEST_P(SafePath, LinksToHostPathsResolveInsideTheRootOnly) {
    // The host path exists, but not under the root.
    EXPECT_EQ(open_read("dangling"), "errno:ENOENT");
    EXPECT_EQ(open_read("hostdir/secret"), "errno:ENOENT");
    EXPECT_EQ(open_read(host_ / "secret"), "errno:ENOENT");
    EXPECT_FALSE(os::try_open_in_root(root_fd_.get(), "dangling", O_RDONLY));
    // /dev/zero of the root, not the host's.
    EXPECT_EQ(open_read("zero"), "errno:ENOENT");
}

TEST_P(SafePath, CreatingThroughHostileLinksStaysInside) {
    // Through "up" the new file lands in the root.
    int fd = open_(root_fd_.get(), "up/created", O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::close(fd);
    EXPECT_TRUE(fs::exists(root_ / "created"));
    EXPECT_FALSE(fs::exists(dir_ / "created"));
    EXPECT_FALSE(fs::exists("/created"));

    // O_CREAT through a link to a host path creates nothing on the host, and
    // cannot create the missing directories inside either.
    fd = open_(root_fd_.get(), "dangling", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(fd, -1);
    EXPECT_EQ(errno, ENOENT);
    std::ifstream secret(host_ / "secret");
    std::string s((std::istreambuf_iterator<char>(secret)), {});
    EXPECT_EQ(s, "SECRET");

    // O_EXCL or O_NOFOLLOW never follow the last component.
    EXPECT_EQ(open_(root_fd_.get(), "link_to_real", O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
    EXPECT_EQ(errno, EEXIST);
    EXPECT_EQ(open_(root_fd_.get(), "link_to_real", O_RDONLY | O_NOFOLLOW, 0), -1);
    EXPECT_EQ(errno, ELOOP);
    fd = open_(root_fd_.get(), "abs_root", O_PATH | O_NOFOLLOW, 0);
    ASSERT_GE(fd, 0);
    util::Fd owner(fd);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_P(SafePath, SymlinkLoopsEndInEloop) {
    EXPECT_EQ(open_read("loop_a"), "errno:ELOOP");
    EXPECT_EQ(open_read("loop_a/x"), "errno:ELOOP");
    // A long chain: 30 links are followed, 60 are too many.
    fs::path prev = "etc/real";
    for (int i = 0; i < 60; ++i) {
        fs::path name = "chain" + std::to_string(i);
        fs::create_symlink(prev, root_ / name);
        prev = name;
    }
    EXPECT_EQ(open_read("chain29"), "inside");
    EXPECT_EQ(open_read("chain59"), "errno:ELOOP");
}

TEST_P(SafePath, TheRootItself) {
    for (const char* p : {"", "/", ".", "..", "/.."}) {
        int fd = open_(root_fd_.get(), p, O_PATH | O_DIRECTORY, 0);
        ASSERT_GE(fd, 0) << p << ": " << std::strerror(errno);
        util::Fd owner(fd);
        EXPECT_TRUE(same_inode(fd, root_)) << p;
    }
}

INSTANTIATE_TEST_SUITE_P(Both, SafePath, ::testing::Values("openat2", "walk"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// --- The public helpers ---

class SafePathApi : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = dir_ / "root";
        fs::create_directories(root_ / "etc");
        write(root_ / "etc/os-release", "ID=test\n");
        write(root_ / "big", std::string(100, 'x'));
        fs::create_symlink("/etc/os-release", root_ / "link");
        fs::create_symlink("/dev/zero", root_ / "zero");
        ASSERT_EQ(::mkfifo((root_ / "fifo").c_str(), 0600), 0);
        root_fd_ = util::open_or_throw(root_, O_PATH | O_DIRECTORY);
    }
    test::TempDir dir_{"gpubind-safe-path"};
    fs::path root_;
    util::Fd root_fd_;
};

TEST_F(SafePathApi, TryOpenReturnsEmptyOnlyForMissing) {
    EXPECT_FALSE(os::try_open_in_root(root_fd_.get(), "etc/nothing", O_RDONLY));
    EXPECT_FALSE(
        os::try_open_in_root(root_fd_.get(), "zero", O_RDONLY));  // no dev/zero in the root
    EXPECT_TRUE(os::try_open_in_root(root_fd_.get(), "etc/os-release", O_RDONLY));
    try {
        os::try_open_in_root(root_fd_.get(), "etc/os-release/x", O_RDONLY);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ENOTDIR);
        EXPECT_THAT(e.what(), HasSubstr("etc/os-release/x"));
    }
}

TEST_F(SafePathApi, OpenInRootNamesThePath) {
    try {
        os::open_in_root(root_fd_.get(), "/etc/missing", O_RDONLY);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ENOENT);
        EXPECT_THAT(e.what(), HasSubstr("/etc/missing"));
    }
}

TEST_F(SafePathApi, ReadFileInRootReadsRegularFilesOnly) {
    EXPECT_EQ(os::read_file_in_root(root_fd_.get(), "/etc/os-release", 1024), "ID=test\n");
    // The FIFO is refused without blocking; a directory is refused.
    EXPECT_THROW(os::read_file_in_root(root_fd_.get(), "fifo", 1024), util::Error);
    EXPECT_THROW(os::read_file_in_root(root_fd_.get(), "etc", 1024), util::Error);
    // A size cap.
    try {
        os::read_file_in_root(root_fd_.get(), "big", 99);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EFBIG);
    }
    EXPECT_EQ(os::read_file_in_root(root_fd_.get(), "big", 100).size(), 100u);
    // The last component is never followed.
    try {
        os::read_file_in_root(root_fd_.get(), "link", 1024);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ELOOP);
        EXPECT_THAT(e.what(), HasSubstr("is a symbolic link (not followed)"));
    }
    EXPECT_THROW(os::read_file_in_root(root_fd_.get(), "zero", 1024), util::Error);
}

TEST_F(SafePathApi, ReadFileInRootRefusesADeviceNode) {
    // With "/" as the root, /dev/zero is a real character device: refused, not
    // read forever.
    util::Fd slash = util::open_or_throw("/", O_PATH | O_DIRECTORY);
    try {
        os::read_file_in_root(slash.get(), "/dev/zero", 1 << 20);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
    }
}

TEST(SafePathMagic, Openat2RefusesMagicLinks) {
    // /proc/self/fd/N is a magic link: RESOLVE_NO_MAGICLINKS refuses it even
    // when it names something inside the root.
    test::TempDir dir("gpubind-safe-path");
    write(dir / "file", "x");
    util::Fd file = util::open_or_throw(dir / "file", O_RDONLY);
    util::Fd slash = util::open_or_throw("/", O_PATH | O_DIRECTORY);
    std::string magic = "/proc/self/fd/" + std::to_string(file.get());
    try {
        os::open_in_root(slash.get(), magic, O_RDONLY);
        FAIL() << "magic link followed";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ELOOP);
    }
}

}  // namespace
}  // namespace gpubind
