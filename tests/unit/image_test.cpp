// inspect_image through the system layer, against RecordingSystem: what it
// finds in an image, and that every access to the rootfs is a recorded,
// descriptor-based call that follows no link.
#include <fcntl.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/decide/image.hpp"
#include "gpubind/util/error.hpp"
#include "recording_system.hpp"
#include "target.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using test::RecordingSystem;
using Type = os::FileInfo::Type;

struct World {
    RecordingSystem sys;
    World() { sys.in_container = true; }
    void dir(const std::string& p) { sys.root[p] = {Type::Directory, 0, 0}; }
    void file(const std::string& p, const std::string& data = {}) {
        sys.root[p] = {Type::Regular, 0, 0, data.size()};
        sys.contents["root:" + p] = data;
    }
    void node(const std::string& p, Type type) { sys.root[p] = {type, 0, 0}; }
    decide::Image inspect() {
        const util::Fd root = sys.open_root("/rootfs");
        return decide::inspect_image(sys, root.get());
    }
};

TEST(InspectImage, AnEmptyImageIsLib64WithNothingElse) {
    World w;
    const decide::Image image = w.inspect();
    EXPECT_EQ(image.lib_dir, "/usr/lib64");
    EXPECT_EQ(image.lib32_dir, test::target::kHas32 ? "/usr/lib" : "");
    EXPECT_TRUE(image.cuda_compat_version.empty());
    EXPECT_TRUE(image.cuda_compat_sonames.empty());
    EXPECT_FALSE(image.has_ldcache);
    EXPECT_FALSE(image.ld_so_conf);
}

TEST(InspectImage, DebianVersionOrTheMultiarchDirectoryMeanMultiarch) {
    World debian;
    debian.dir("/etc");
    debian.file("/etc/debian_version", "12.5\n");
    EXPECT_EQ(debian.inspect().lib_dir, test::target::kLibDir);
    EXPECT_EQ(debian.inspect().lib32_dir, test::target::kLib32Dir);

    World multiarch;
    multiarch.dir("/usr");
    multiarch.dir("/usr/lib");
    multiarch.dir(test::target::kLibDir);
    EXPECT_EQ(multiarch.inspect().lib_dir, test::target::kLibDir);

    // A file where the directory would be, or under a file: lib64.
    World file;
    file.dir("/usr");
    file.dir("/usr/lib");
    file.file(test::target::kLibDir);
    EXPECT_EQ(file.inspect().lib_dir, "/usr/lib64");
    World under_file;
    under_file.dir("/usr");
    under_file.file("/usr/lib");
    EXPECT_EQ(under_file.inspect().lib_dir, "/usr/lib64");
}

TEST(InspectImage, CudaCompatTakesTheHighestVersionAndSonameLikeEntries) {
    World w;
    for (const char* d : {"/usr", "/usr/local", "/usr/local/cuda", "/usr/local/cuda/compat"})
        w.dir(d);
    w.file("/usr/local/cuda/compat/libcuda.so.550.54.15");
    w.node("/usr/local/cuda/compat/libcuda.so.560.28.3", Type::Symlink);
    w.node("/usr/local/cuda/compat/libcuda.so.999.1", Type::Fifo);  // neither: ignored
    w.file("/usr/local/cuda/compat/libcuda.so.1");
    w.node("/usr/local/cuda/compat/libnvidia-ptxjitcompiler.so.1", Type::Symlink);
    w.file("/usr/local/cuda/compat/README");
    w.file("/usr/local/cuda/compat/libcuda.so.not.a.version");
    const decide::Image image = w.inspect();
    EXPECT_EQ(image.cuda_compat_version, "560.28.3");
    EXPECT_EQ(image.cuda_compat_sonames,
              (std::vector<std::string>{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"}));
    // The entries are typed, never opened or read.
    for (const auto& line : w.sys.calls) {
        EXPECT_FALSE(line.starts_with("read_")) << line;
        if (line.starts_with("open_at ")) {
            EXPECT_EQ(line, "open_at root:/usr/local/cuda/compat");
        }
    }
}

TEST(InspectImage, ACompatThatIsNotADirectoryOrACudaLinkLeadingNowhereIsNone) {
    for (Type type : {Type::Symlink, Type::Regular, Type::Fifo}) {
        World w;
        for (const char* d : {"/usr", "/usr/local", "/usr/local/cuda"}) w.dir(d);
        w.node("/usr/local/cuda/compat", type);
        const decide::Image image = w.inspect();
        EXPECT_TRUE(image.cuda_compat_version.empty()) << to_string(type);
        for (const auto& line : w.sys.calls) EXPECT_FALSE(line.starts_with("list_dir")) << line;
    }
    World dangling;  // the model's symlinks lead nowhere
    dangling.dir("/usr");
    dangling.dir("/usr/local");
    dangling.node("/usr/local/cuda", Type::Symlink);
    EXPECT_TRUE(dangling.inspect().cuda_compat_version.empty());
}

TEST(InspectImage, LoaderSetupCacheOrAConfNamingSomething) {
    World cache;
    cache.dir("/etc");
    cache.file("/etc/ld.so.cache", "glibc-ld.so.cache1.1");
    cache.file("/etc/ld.so.conf", "/opt/lib\n");
    EXPECT_TRUE(cache.inspect().has_ldcache);
    EXPECT_FALSE(cache.inspect().ld_so_conf);  // the cache is what the writer starts from

    World conf;
    conf.dir("/etc");
    conf.file("/etc/ld.so.conf", "# comment\n\ninclude /etc/ld.so.conf.d/*.conf\n");
    EXPECT_FALSE(conf.inspect().has_ldcache);
    EXPECT_TRUE(conf.inspect().ld_so_conf);

    World comments;
    comments.dir("/etc");
    comments.file("/etc/ld.so.conf", "# only\n   \t\n#comments\n");
    EXPECT_FALSE(comments.inspect().ld_so_conf);

    for (Type type : {Type::Fifo, Type::Symlink, Type::CharDevice}) {
        World odd;
        odd.dir("/etc");
        odd.node("/etc/ld.so.conf", type);
        EXPECT_FALSE(odd.inspect().ld_so_conf) << to_string(type);
    }
}

// Every access is a call of the system layer, by descriptor from the root
// opened once: paths resolved inside it, the compat entries and ld.so.conf
// looked at without following them.
TEST(InspectImage, EveryAccessIsARecordedCallFromTheOneRoot) {
    World w;
    w.dir("/etc");
    w.file("/etc/ld.so.conf", "/opt/lib\n");
    for (const char* d : {"/usr", "/usr/local", "/usr/local/cuda", "/usr/local/cuda/compat"})
        w.dir(d);
    w.file("/usr/local/cuda/compat/libcuda.so.560.28.3");
    w.inspect();
    std::size_t roots = 0;
    for (const auto& line : w.sys.calls) {
        if (line.starts_with("open_root ")) ++roots;
        const bool known =
            line.starts_with("open_root ") || line.starts_with("open_dir_in_root ") ||
            line.starts_with("stat_in_root ") || line.starts_with("stat_at root:") ||
            line.starts_with("open_at root:") || line.starts_with("list_dir root:") ||
            line == "read_regular_at root:/etc/ld.so.conf";
        EXPECT_TRUE(known) << line;
    }
    EXPECT_EQ(roots, 1u);
    EXPECT_THAT(w.sys.calls, ::testing::Contains("stat_in_root /etc/debian_version"));
    EXPECT_THAT(w.sys.calls, ::testing::Contains("stat_in_root /etc/ld.so.cache"));
}

// A failure of the system (not a missing file) is an Error, a system failure.
TEST(InspectImage, ASystemFailureIsAnError) {
    World w;
    w.dir("/etc");
    w.sys.fail_if = [](std::size_t, const std::string& line) {
        return line == "open_dir_in_root /etc";
    };
    w.sys.fail_errno = EINVAL;
    try {
        w.inspect();
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_EQ(e.kind(), util::ErrorKind::System);
    }
}

TEST(InspectImage, AHugeCompatDirectoryIsRefusedAfterReadingNoFurtherThanTheCap) {
    // 5000 soname-like links in the compat directory: which 4096 of them a
    // capped read sees depends on the directory's order, so none is taken.
    // An image whose compat directory holds `n` soname-like links.
    auto image = [](int n) {
        auto w = std::make_unique<World>();
        for (const char* d : {"/usr", "/usr/local", "/usr/local/cuda", "/usr/local/cuda/compat"})
            w->dir(d);
        for (int i = 0; i < n; ++i)
            w->node("/usr/local/cuda/compat/libx" + std::to_string(i) + ".so.1", Type::Symlink);
        return w;
    };
    auto huge = image(5000);
    World& w = *huge;
    try {
        w.inspect();
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.kind(), util::ErrorKind::Invalid);
        EXPECT_STREQ(e.what(),
                     "list directory /usr/local/cuda/compat: has more than 4096 entries; refusing");
    }
    // Not one of its entries is looked at.
    for (const auto& call : w.sys.calls)
        EXPECT_EQ(call.find("compat/libx"), std::string::npos) << call;
    // At the cap it is read.
    EXPECT_EQ(image(4096)->inspect().cuda_compat_sonames.size(), 4096u);
}

TEST(LinuxSystemListDir, KeepsWhatTheFilterAcceptsAndStopsReadingAtTheCap) {
    test::TempDir dir;
    for (int i = 0; i < 10; ++i) std::ofstream(dir / ("f" + std::to_string(i)));
    const util::Fd fd(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    os::LinuxSystem sys;
    const os::DirNames all = sys.list_dir(fd.get(), 100, {});
    EXPECT_EQ(all.names.size(), 10u);
    EXPECT_FALSE(all.more);
    const os::DirNames capped = sys.list_dir(fd.get(), 3, {});
    EXPECT_EQ(capped.names.size(), 3u);
    EXPECT_TRUE(capped.more);
    EXPECT_TRUE(sys.list_dir(fd.get(), 10, {}).names.size() == 10u);
    EXPECT_FALSE(sys.list_dir(fd.get(), 10, {}).more);
    // The filter keeps what it accepts; the cap counts every entry read.
    const os::DirNames kept =
        sys.list_dir(fd.get(), 100, [](std::string_view n) { return n == "f3" || n == "f7"; });
    EXPECT_EQ(std::set<std::string>(kept.names.begin(), kept.names.end()),
              (std::set<std::string>{"f3", "f7"}));
    EXPECT_TRUE(sys.list_dir(fd.get(), 9, [](std::string_view) { return false; }).more);
}

}  // namespace
}  // namespace gpubind
