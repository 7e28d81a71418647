// The ld.so.cache writer: round trips through the parser, glibc's order
// against caches the system's ldconfig writes, replacement of the image's
// entries, 32-bit and glibc-hwcaps entries. The truth is ldconfig's own cache
// and `ldconfig -p`.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using ldcache::Arch;
using ldcache::Cache;
using ldcache::Entry;
using ldcache::Layout;
using ldcache::Library;
namespace fs = std::filesystem;

using test::run;

// A root with stub libraries, its cache written by the system's ldconfig.
struct LdconfigRoot {
    test::TempDir dir{"gpubind-ldwrite"};
    std::string conf;

    void plant(const std::string& path, sim::elf::Machine m, const std::string& soname) {
        fs::create_directories((dir.path() / path.substr(1)).parent_path());
        test::write(dir.path() / path.substr(1), sim::elf::make_shared_object(m, soname));
    }
    Cache build(const char* layout = "new") {
        fs::create_directories(dir.path() / "etc");
        test::write(dir.path() / "etc/ld.so.conf", conf);
        const test::Output out =
            run("ldconfig -X -r '" + dir.path().string() + "' -c " + layout + " 2>&1");
        EXPECT_EQ(out.status, 0) << out.text;
        return ldcache::load(dir.path() / "etc/ld.so.cache");
    }
};

void expect_same_entries(const std::vector<Entry>& got, const std::vector<Entry>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(got[i].soname, want[i].soname);
        EXPECT_EQ(got[i].path, want[i].path);
        EXPECT_EQ(got[i].flags, want[i].flags);
        EXPECT_EQ(got[i].hwcap & ~0xffffffffULL, want[i].hwcap & ~0xffffffffULL);
        EXPECT_EQ(got[i].has_hwcaps_subdir, want[i].has_hwcaps_subdir);
        EXPECT_EQ(got[i].hwcaps_subdir, want[i].hwcaps_subdir);
    }
}

// A random root of 64- and 32-bit stubs, repeated sonames across directories,
// names whose digits sort numerically, and glibc-hwcaps subdirectories.
void populate(LdconfigRoot& root, unsigned seed) {
    std::mt19937 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {
        return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    std::vector<std::string> pool = {
        "libcuda.so.1", "libcuda.so.10", "libcuda.so.2", "libnvidia-ml.so.1", "libGL.so.1",
        "libz.so.1",    "libA.so.1",     "lib_x.so.3",   "libfoo-9.so",       "libfoo-10.so"};
    for (std::size_t i = 0, n = pick(2, 8); i < n; ++i)
        pool.push_back("libr" + std::to_string(pick(0, 300)) + ".so." +
                       std::to_string(pick(0, 12)));
    for (std::size_t d = 0, nd = pick(1, 4); d < nd; ++d) {
        const std::string dir = "/opt/d" + std::to_string(d);
        root.conf += dir + "\n";
        for (std::size_t i = 0, n = pick(1, 10); i < n; ++i) {
            const std::string& so = pool[pick(0, pool.size() - 1)];
            root.plant(dir + "/" + so,
                       pick(0, 3) ? sim::elf::Machine::X86_64 : sim::elf::Machine::I386, so);
        }
        if (pick(0, 1)) {
            static const char* const kSub[] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};
            for (std::size_t i = 0, n = pick(1, 4); i < n; ++i) {
                const std::string& so = pool[pick(0, 5)];
                root.plant(dir + "/glibc-hwcaps/" + kSub[pick(0, 2)] + "/" + so,
                           sim::elf::Machine::X86_64, so);
            }
        }
    }
}

TEST(Libcmp, ComparesDigitRunsByValueAsGlibcDoes) {
    EXPECT_GT(ldcache::libcmp("libfoo.so.10", "libfoo.so.9"), 0);
    EXPECT_LT(ldcache::libcmp("libfoo.so.1", "libfoo.so.1.0"), 0);
    EXPECT_EQ(ldcache::libcmp("libfoo.so.01", "libfoo.so.1"), 0);
    EXPECT_GT(ldcache::libcmp("lib1", "libA"), 0);  // a digit sorts after any other byte
    EXPECT_LT(ldcache::libcmp("libA", "lib1"), 0);
    EXPECT_LT(ldcache::libcmp("liba", "libb"), 0);
    EXPECT_GT(ldcache::libcmp("liba", "lib"), 0);
    // Bytes compare as the machine's char: signed on x86 (0xe9 before the
    // end of the string), unsigned on arm64 (after it), as its ldconfig and
    // loader compare them.
    if (std::is_signed_v<char>)
        EXPECT_LT(ldcache::libcmp("lib\xe9", "lib"), 0);
    else
        EXPECT_GT(ldcache::libcmp("lib\xe9", "lib"), 0);
}

// For many roots: ldconfig's entries, shuffled and written by gpubind with
// ldconfig's directory order, come back in ldconfig's order with the same
// fields: the order is glibc's.
TEST(Write, ReproducesLdconfigsOrderFromShuffledEntries) {
    for (unsigned seed = 0; seed < 40; ++seed) {
        SCOPED_TRACE(seed);
        LdconfigRoot root;
        populate(root, seed);
        const Cache truth = root.build();
        Cache shuffled = truth;
        std::shuffle(shuffled.entries.begin(), shuffled.entries.end(), std::mt19937(seed));
        // Entries glibc cannot order (same key, flags, hwcaps) follow the
        // directory order, here ld.so.conf's.
        const std::vector<std::string> dirs = {"/opt/d0", "/opt/d1", "/opt/d2", "/opt/d3"};
        const Cache merged = ldcache::merge(shuffled, {}, dirs);
        const Cache back = ldcache::parse(ldcache::serialize(merged), "written");
        expect_same_entries(back.entries, truth.entries);
    }
}

// parse(serialize(merge(x))) is merge(x); ldconfig -p reads the file as gpubind does.
TEST(Write, RoundTripsAndLdconfigReadsIt) {
    LdconfigRoot root;
    populate(root, 7);
    const Cache image = root.build();
    const std::vector<Library> added = {
        {"libcuda.so.1", "/usr/lib64/libcuda.so.1", Arch::X86_64},
        {"libcuda.so", "/usr/lib64/libcuda.so", Arch::X86_64},
        {"libcuda.so.1", "/usr/lib/libcuda.so.1", Arch::I386},
        {"libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", Arch::X86_64},
    };
    const Cache merged = ldcache::merge(image, added, {"/usr/lib64", "/usr/lib"});
    const std::string bytes = ldcache::serialize(merged);
    const Cache back = ldcache::parse(bytes, "written");
    EXPECT_EQ(back.layout, Layout::New);
    EXPECT_EQ(back.generator, merged.generator);
    expect_same_entries(back.entries, merged.entries);
    // Stable: writing what was read gives the same bytes.
    EXPECT_EQ(ldcache::serialize(ldcache::merge(back, {}, {})), bytes);

    const fs::path file = root.dir.path() / "written.cache";
    test::write(file, bytes);
    const test::Output out = run("ldconfig -p -C '" + file.string() + "'");
    EXPECT_EQ(out.status, 0);
    const std::string& listing = out.text;
    EXPECT_EQ(listing, ldcache::format_like_ldconfig(back, file.string()));
    EXPECT_NE(listing.find("\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1\n"),
              std::string::npos)
        << listing;
    EXPECT_NE(listing.find("\tlibcuda.so.1 (libc6) => /usr/lib/libcuda.so.1\n"), std::string::npos)
        << listing;
}

// The image's entries for an injected soname and architecture give way; its
// other architectures and other sonames stay.
TEST(Write, ReplacesTheImagesEntriesOfAnInjectedSoname) {
    LdconfigRoot root;
    root.conf = "/opt/a\n/opt/b\n";
    root.plant("/opt/a/libcuda.so.1", sim::elf::Machine::X86_64, "libcuda.so.1");
    root.plant("/opt/b/libcuda.so.1", sim::elf::Machine::I386, "libcuda.so.1");
    root.plant("/opt/b/glibc-hwcaps/x86-64-v3/libcuda.so.1", sim::elf::Machine::X86_64,
               "libcuda.so.1");
    root.plant("/opt/b/libkeep.so.2", sim::elf::Machine::X86_64, "libkeep.so.2");
    const Cache image = root.build();
    const Cache merged = ldcache::merge(
        image, {{"libcuda.so.1", "/usr/lib64/libcuda.so.1", Arch::X86_64}}, {"/usr/lib64"});
    std::vector<std::string> got;
    for (const Entry& e : merged.entries)
        got.push_back(e.soname + " " + ldcache::describe_flags(e) + " " + e.path);
    EXPECT_EQ(got, (std::vector<std::string>{
                       "libkeep.so.2 libc6,x86-64 /opt/b/libkeep.so.2",
                       "libcuda.so.1 libc6,x86-64 /usr/lib64/libcuda.so.1",
                       "libcuda.so.1 libc6 /opt/b/libcuda.so.1",
                   }));
}

// glibc-hwcaps entries of every layout survive a rewrite with their names:
// compat-layout names (stored at the wrong base) and old-layout entries (no
// hwcap field) come back from their paths, as ldconfig rebuilds them.
TEST(Write, KeepsGlibcHwcapsEntriesOfEveryLayout) {
    LdconfigRoot root;
    root.conf = "/opt/a\n";
    root.plant("/opt/a/libv.so.1", sim::elf::Machine::X86_64, "libv.so.1");
    root.plant("/opt/a/glibc-hwcaps/x86-64-v3/libv.so.1", sim::elf::Machine::X86_64, "libv.so.1");
    root.plant("/opt/a/glibc-hwcaps/x86-64-v2/libv.so.1", sim::elf::Machine::X86_64, "libv.so.1");
    const Cache truth = root.build("new");
    for (const char* layout : {"new", "compat", "old"}) {
        SCOPED_TRACE(layout);
        const Cache image = root.build(layout);
        const Cache back =
            ldcache::parse(ldcache::serialize(ldcache::merge(image, {}, {})), "written");
        expect_same_entries(back.entries, truth.entries);
    }
}

TEST(Write, AddedLibrariesKeepTheirOrderAmongEqualKeys) {
    // The CUDA compat directory comes first: its libcuda.so.1 is the one listed first.
    const Cache merged =
        ldcache::merge(std::nullopt,
                       {{"libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1", Arch::X86_64},
                        {"libcuda.so.1", "/usr/lib64/libcuda.so.1", Arch::X86_64}},
                       {"/usr/local/cuda/compat", "/usr/lib64"});
    ASSERT_EQ(merged.entries.size(), 2u);
    EXPECT_EQ(merged.entries[0].path, "/usr/local/cuda/compat/libcuda.so.1");
    EXPECT_EQ(merged.entries[1].path, "/usr/lib64/libcuda.so.1");
    EXPECT_THROW(ldcache::merge(std::nullopt, {{"x.so", "/x.so", Arch::Ppc64le}}, {}), util::Error);
}

// An arm64 image's libraries are filed as arm64's ldconfig files them:
// FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64, which `ldconfig -p` shows as
// "libc6,AArch64"; an x86 entry of the same soname stays beside it.
TEST(Write, FilesAarch64LibrariesAsLdconfigDoes) {
    const std::string dir = "/usr/lib/aarch64-linux-gnu";
    const Cache merged =
        ldcache::merge(std::nullopt,
                       {{"libcuda.so.1", dir + "/libcuda.so.1", Arch::Aarch64},
                        {"libcuda.so.1", "/usr/lib64/libcuda.so.1", Arch::X86_64},
                        {"libnvidia-ml.so.1", dir + "/libnvidia-ml.so.1", Arch::Aarch64}},
                       {dir, "/usr/lib64"});
    ASSERT_EQ(merged.entries.size(), 3u);
    test::TempDir tmp;
    const fs::path file = tmp / "arm64.cache";
    test::write(file, ldcache::serialize(merged));
    const test::Output out =
        run(std::string(GPUBIND_TARGET_LDCONFIG) + " -p -C '" + file.string() + "'");
    ASSERT_EQ(out.status, 0) << out.text;
    for (const char* line :
         {"\tlibcuda.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libcuda.so.1\n",
          "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1\n",
          "\tlibnvidia-ml.so.1 (libc6,AArch64) => "
          "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1\n"})
        EXPECT_NE(out.text.find(line), std::string::npos) << line << out.text;
    const Cache back = ldcache::parse(ldcache::serialize(merged), "written");
    const Entry* arm = ldcache::lookup(back, "libcuda.so.1", Arch::Aarch64);
    ASSERT_NE(arm, nullptr);
    EXPECT_EQ(arm->path, dir + "/libcuda.so.1");
}

}  // namespace
}  // namespace gpubind
