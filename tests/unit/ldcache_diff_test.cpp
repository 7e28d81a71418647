// gpubind's ld.so.cache writer against the target's ldconfig, judged by the
// image's own loader (the host's glibc copied in, run in a chroot; for an
// arm64 build, Debian's arm64 ldconfig and glibc under qemu): over
// generated images (multiarch and lib64 layouts, with no cache or one made by
// ldconfig in the old, compat or new format, glibc-hwcaps subdirectories,
// 32-bit libraries, sonames repeated across directories, the image's own
// copies of injected sonames, the CUDA compat directory), the same driver
// libraries are injected into two copies of the image; one is refreshed by
// `ldconfig -r ROOT <dirs>`, the other by the writer. Each soname must then
// resolve to the same file in both, and `ldconfig -p` must list every
// injected library in the written cache. Needs root (chroot).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/decide/image.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"
#include "target.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using ldcache::Arch;
using ldcache::Library;
namespace fs = std::filesystem;

using test::Output;
using test::run;

std::string quote(const std::string& s) {
    return "'" + s + "'";
}

void put(const fs::path& p, const std::string& data) {
    fs::create_directories(p.parent_path());
    test::write(p, data);
}

void copy_in(const fs::path& host, const fs::path& to) {
    fs::create_directories(to.parent_path());
    fs::copy_file(host, to, fs::copy_options::overwrite_existing);
}

// One generated image and what is injected into it.
struct Scenario {
    bool multiarch = false;
    std::string cache;  // "", "old", "compat", "new"
    bool compat = false;
    bool lib32 = false;
    std::string lib_dir, lib32_dir;
    std::set<std::string> sonames64, sonames32;  // everything worth resolving
    // 64-bit sonames planted only in glibc-hwcaps levels this CPU lacks: the
    // loader finds them in neither copy (both must still agree).
    std::set<std::string> beyond_cpu;
};

namespace target = test::target;

// The target's glibc: its ldconfig, and the glibc-hwcaps subdirectories the
// test plants (arm64's loader searches none of them).
const std::string kLdconfig = GPUBIND_TARGET_LDCONFIG;
constexpr Arch kArch = target::kArch;
#if defined(__aarch64__)
constexpr const char* kHwcapsDirs[] = {"sve", "sve2", "armv9"};
#else
constexpr const char* kHwcapsDirs[] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};
#endif

// The glibc-hwcaps subdirectories this machine's loader searches (`ld.so
// --help` marks them "supported, searched"; a CPU without AVX-512 lacks
// x86-64-v4). Its legacy hwcap subdirectories, listed the same way after
// them under a "Legacy HWCAP" heading, are left out.
const std::set<std::string>& searched_hwcaps() {
    static const std::set<std::string> levels = [] {
        std::set<std::string> found;
        const Output out = run(std::string(target::kLoader) + " --help");
        const std::string levels_part = out.text.substr(0, out.text.find("Legacy HWCAP"));
        static const std::regex level(R"(^\s+(\S+) \(supported, searched\))");
        for (auto line : util::split(levels_part, '\n')) {
            std::smatch m;
            const std::string text(line);
            if (std::regex_search(text, m, level)) found.insert(m[1]);
        }
        return found;
    }();
    return levels;
}

class Image {
  public:
    explicit Image(unsigned seed) : rng_(seed) {}

    Scenario generate(const fs::path& root) {
        Scenario s;
        s.multiarch = pick(0, 1) == 1;
        static const char* const kCaches[] = {"", "old", "compat", "new"};
        s.cache = kCaches[pick(0, 3)];
        s.compat = pick(0, 3) == 0;
        s.lib32 = target::kHas32 && pick(0, 2) != 0;
        s.lib_dir = s.multiarch ? target::kLibDir : "/usr/lib64";
        s.lib32_dir = s.multiarch ? target::kLib32Dir : "/usr/lib";
        const bool has_cache = !s.cache.empty();

        // glibc: the loaders, libc where the loader finds it.
        copy_in(target::kLoader, root / (target::kLoader + 1));
        const std::string libc_dir = s.multiarch || !has_cache ? target::kLoaderDir : s.lib_dir;
        copy_in(std::string(target::kLoaderDir) + "/libc.so.6",
                root / libc_dir.substr(1) / "libc.so.6");
        put(root / "probe64.so", sim::elf::make_shared_object(target::kMachine, "probe64.so"));
        if (target::kHas32) {
            copy_in("/usr/lib32/ld-linux.so.2", root / "lib/ld-linux.so.2");
            copy_in("/usr/lib32/libc.so.6", root / "usr/lib32/libc.so.6");
            put(root / "probe32.so",
                sim::elf::make_shared_object(sim::elf::Machine::I386, "probe32.so"));
        }
        if (s.multiarch) put(root / "etc/debian_version", "12.0\n");
        fs::create_directories(root / s.lib_dir.substr(1));
        fs::create_directories(root / "etc");
        if (target::kHas32) {
            fs::create_directories(root / s.lib32_dir.substr(1));
            s.sonames32.insert("libc.so.6");
        }
        s.sonames64.insert("libc.so.6");

        // Directories: ld.so.conf ones (only with a cache: without one, the
        // writer serves images whose ld.so.conf names nothing) and the lib dirs.
        std::vector<std::string> dirs;
        std::string conf;
        if (has_cache) {
            for (std::size_t i = 0, n = pick(1, 3); i < n; ++i) {
                const std::string d = pick(0, 1) ? "/opt/v" + std::to_string(i) + "/lib"
                                                 : "/usr/local/lib" + std::to_string(i);
                dirs.push_back(d);
                conf += d + "\n";
            }
            if (!s.multiarch) conf += s.lib_dir + "\n";
            // The image's 32-bit libraries are in its cache, as its packages list them.
            if (s.lib32) conf += s.lib32_dir + "\n";
            if (pick(0, 1)) conf = "include /etc/ld.so.conf.d/*.conf\n" + conf;
            put(root / "etc/ld.so.conf", conf);
        }
        // The lib dir: a system directory of the loader (multiarch) or listed.
        // Without a cache, the image's libraries are where its loader looks
        // (this loader, Debian's, does not search /usr/lib64).
        dirs.push_back(s.multiarch || has_cache ? s.lib_dir : target::kLoaderDir);

        std::vector<std::string> pool = {"libz.so.1",   "libGL.so.1", "libfoo.so.2", "libfoo.so.10",
                                         "libbar-3.so", "libA.so.1",  "libx1.so.9"};
        for (std::size_t i = 0, n = pick(1, 5); i < n; ++i)
            pool.push_back("libr" + std::to_string(pick(0, 99)) + ".so." +
                           std::to_string(pick(0, 20)));
        for (const std::string& dir : dirs) {
            // 32-bit libraries in their own directories, not in a 64-bit one
            // of the loader (where it would not look for them).
            const bool other = dir != dirs.back();
            std::set<std::string> used;
            for (std::size_t i = 0, n = pick(1, 7); i < n; ++i) {
                const std::string& so = pool[pick(0, pool.size() - 1)];
                if (!used.insert(so).second) continue;
                const bool is32 = target::kHas32 && other && pick(0, 4) == 0;
                plant(root, dir + "/" + so, is32, so, s);
            }
            // The image's own copies of driver sonames, outside the lib dir.
            if (pick(0, 2) == 0 && dir != s.lib_dir)
                plant(root, dir + "/libcuda.so.1", false, "libcuda.so.1", s);
            if (target::kHas32 && pick(0, 3) == 0 && other)
                plant(root, dir + "/libcuda.so.1", true, "libcuda.so.1", s);
            if (pick(0, 1)) {  // glibc-hwcaps subdirectories
                for (std::size_t i = 0, n = pick(1, 4); i < n; ++i) {
                    const std::string& so = pool[pick(0, pool.size() - 1)];
                    plant(root, dir + "/glibc-hwcaps/" + kHwcapsDirs[pick(0, 2)] + "/" + so, false,
                          so, s);
                }
            }
        }
        if (has_cache && s.lib32)  // 32-bit libraries of the image beside the injected ones
            for (std::size_t i = 0, n = pick(0, 3); i < n; ++i) {
                const std::string& so = pool[pick(0, pool.size() - 1)];
                plant(root, s.lib32_dir + "/" + so, true, so, s);
            }
        if (s.compat) {
            const std::string c = decide::kCudaCompatDir;
            put(root / c.substr(1) / "libcuda.so.999.1",
                sim::elf::make_shared_object(target::kMachine, "libcuda.so.1"));
            fs::create_symlink("libcuda.so.999.1", root / c.substr(1) / "libcuda.so.1");
            put(root / c.substr(1) / "libnvidia-ptxjitcompiler.so.1",
                sim::elf::make_shared_object(target::kMachine, "libnvidia-ptxjitcompiler.so.1"));
            s.sonames64.insert("libnvidia-ptxjitcompiler.so.1");
        }

        if (has_cache) {
            const Output out =
                run(kLdconfig + " -X -r " + quote(root.string()) + " -c " + s.cache + " 2>&1");
            EXPECT_EQ(out.status, 0) << out.text;
        }
        return s;
    }

  private:
    std::size_t pick(std::size_t lo, std::size_t hi) {
        return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_);
    }
    void plant(const fs::path& root, const std::string& path, bool is32, const std::string& so,
               Scenario& s) {
        if (fs::exists(root / path.substr(1))) return;
        put(root / path.substr(1),
            sim::elf::make_shared_object(is32 ? sim::elf::Machine::I386 : target::kMachine, so));
        (is32 ? s.sonames32 : s.sonames64).insert(so);
        if (is32) return;
        const auto at = path.find("/glibc-hwcaps/");
        const bool searched =
            at == std::string::npos ||
            searched_hwcaps().count(path.substr(at + 14, path.find('/', at + 14) - at - 14));
        if (searched) {
            found64_.insert(so);
            s.beyond_cpu.erase(so);
        } else if (!found64_.count(so)) {
            s.beyond_cpu.insert(so);
        }
    }
    std::set<std::string> found64_;  // planted where this CPU's loader looks
    std::mt19937 rng_;
};

// The driver's files as the hook puts them (mounted file, soname link,
// development link) and the entries the plan gives the writer for them.
std::vector<Library> inject(const fs::path& root, const Scenario& s) {
    std::vector<Library> added;
    auto library = [&](const std::string& dir, const std::string& soname, bool is32,
                       const char* dev_link) {
        const std::string file = soname.substr(0, soname.rfind(".so.") + 3) + ".550.54.15";
        put(root / dir.substr(1) / file,
            sim::elf::make_shared_object(is32 ? sim::elf::Machine::I386 : target::kMachine,
                                         soname));
        fs::create_symlink(file, root / dir.substr(1) / soname);
        const Arch arch = is32 ? Arch::I386 : kArch;
        added.push_back({soname, dir + "/" + soname, arch});
        if (dev_link) {
            fs::create_symlink(soname, root / dir.substr(1) / dev_link);
            added.push_back({dev_link, dir + "/" + dev_link, arch});
        }
    };
    library(s.lib_dir, "libcuda.so.1", false, "libcuda.so");
    library(s.lib_dir, "libnvidia-ml.so.1", false, "libnvidia-ml.so");
    library(s.lib_dir, "libnvidia-ptxjitcompiler.so.1", false, nullptr);
    if (s.lib32) {
        library(s.lib32_dir, "libcuda.so.1", true, nullptr);
        library(s.lib32_dir, "libnvidia-ml.so.1", true, nullptr);
    }
    return added;
}

std::string chroot_path() {
    for (const char* p : {"/usr/sbin/chroot", "/sbin/chroot", "/usr/bin/chroot"})
        if (::access(p, X_OK) == 0) return p;
    return "chroot";
}

// Whether this kernel runs 32-bit x86 programs: one built or booted without
// IA-32 emulation refuses the 32-bit loader (ENOEXEC).
bool kernel_runs_32bit() {
    static const bool runs =
        target::kHas32 && run("/usr/lib32/ld-linux.so.2 --version >/dev/null 2>&1").status == 0;
    return runs;
}

// What the loader of `root` resolves `soname` to: its --list with the
// library preloaded by name (found like a DT_NEEDED entry: cache, then the
// system directories), addresses dropped. A 32-bit library where the kernel
// cannot run the 32-bit loader: what that loader's search gives, in the same
// form: the root's cache as glibc reads it (the host's `ldconfig -p`, in the
// cache's order, which the loader searches: the first plain 32-bit entry of
// that name, "(libc6)"), then its system directories (Debian's libc6-i386:
// /lib32, /usr/lib32, /lib, /usr/lib), the first 32-bit ELF file of that name.
std::string resolve(const fs::path& root, const std::string& soname, bool is32) {
    if (is32 && !kernel_runs_32bit()) {
        const fs::path cache = root / "etc/ld.so.cache";
        if (fs::exists(cache)) {
            const std::string entry = "\t" + soname + " (libc6) => ";
            std::istringstream listed(run("ldconfig -p -C " + quote(cache.string())).text);
            for (std::string line; std::getline(listed, line);)
                if (line.rfind(entry, 0) == 0)
                    return "\t" + soname + " => " + line.substr(entry.size()) + "\n";
        }
        for (const char* dir : {"/lib32", "/usr/lib32", "/lib", "/usr/lib"}) {
            std::ifstream f(root / (dir + 1) / soname, std::ios::binary);
            char ident[5] = {};
            if (f.read(ident, sizeof ident) &&
                std::string_view(ident, 4) ==
                    "\x7f"
                    "ELF" &&
                ident[4] == 1)
                return "\t" + soname + " => " + dir + "/" + soname + "\n";
        }
        return "\t" + soname + " => not found\n";
    }
    const std::string loader = is32 ? "/lib/ld-linux.so.2" : target::kLoader;
    const std::string probe = is32 ? "/probe32.so" : "/probe64.so";
    const Output out = run("env -i " + chroot_path() + " " + quote(root.string()) + " " + loader +
                           " --preload " + quote(soname) + " --list " + probe + " 2>&1");
    static const std::regex address(R"( \(0x[0-9a-f]+\))");
    return std::regex_replace(out.text, address, "");
}

class Differential : public ::testing::TestWithParam<unsigned> {};

TEST_P(Differential, LoaderResolvesEverySonameAsAfterLdconfig) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chroot)";
    test::TempDir dir("gpubind-lddiff");
    const fs::path base = dir / "image", by_ldconfig = dir / "ldconfig",
                   by_gpubind = dir / "gpubind";
    Image image(GetParam());
    const Scenario s = image.generate(base);
    SCOPED_TRACE(std::string(s.multiarch ? "multiarch" : "lib64") + ", cache " +
                 (s.cache.empty() ? "none" : s.cache) + (s.compat ? ", CUDA compat" : "") +
                 (s.lib32 ? ", 32-bit" : ""));
    for (const fs::path& copy : {by_ldconfig, by_gpubind})
        ASSERT_EQ(run("cp -a " + quote(base.string()) + " " + quote(copy.string())).status, 0);

    // The plan's directory order and libraries: CUDA compat first when there.
    std::vector<std::string> dirs;
    if (s.compat) dirs.push_back(decide::kCudaCompatDir);
    dirs.push_back(s.lib_dir);
    if (s.lib32) dirs.push_back(s.lib32_dir);
    std::vector<Library> added;
    if (s.compat) {
        for (const std::string& name : decide::inspect_image(by_gpubind).cuda_compat_sonames)
            added.push_back({name, std::string(decide::kCudaCompatDir) + "/" + name, kArch});
    }
    for (const fs::path& copy : {by_ldconfig, by_gpubind}) {
        std::vector<Library> injected = inject(copy, s);
        if (copy == by_gpubind) added.insert(added.end(), injected.begin(), injected.end());
        if (s.compat)
            put(copy / "etc/ld.so.conf.d/000-cuda-compat.conf",
                std::string(decide::kCudaCompatDir) + "\n");
    }

    // (a) the target's ldconfig, as the fallback runs it.
    std::string args;
    for (const std::string& d : dirs) args += " " + d;
    const Output out = run(kLdconfig + " -r " + quote(by_ldconfig.string()) + args + " 2>&1");
    ASSERT_EQ(out.status, 0) << out.text;
    // (b) gpubind's writer, as the executor calls it.
    std::optional<ldcache::Cache> original;
    const fs::path cache = by_gpubind / "etc/ld.so.cache";
    if (fs::exists(cache)) original = ldcache::load(cache);
    ASSERT_EQ(original.has_value(), !s.cache.empty());
    put(cache, ldcache::serialize(ldcache::merge(original, added, dirs)));

    // Every soname resolves to the same file in both.
    std::set<std::string> s64 = s.sonames64, s32 = s.sonames32;
    for (const Library& l : added) (l.arch == Arch::I386 ? s32 : s64).insert(l.soname);
    for (const auto& [set, is32] : {std::pair{&s64, false}, std::pair{&s32, true}})
        for (const std::string& so : *set) {
            SCOPED_TRACE(so + (is32 ? " (32-bit)" : ""));
            const std::string want = resolve(by_ldconfig, so, is32);
            // Found at all (a failure alike in both copies must not pass).
            if (is32 || !s.beyond_cpu.count(so)) {
                EXPECT_NE(want.find(so + " => /"), std::string::npos) << want;
            }
            EXPECT_EQ(resolve(by_gpubind, so, is32), want);
        }
    // The injected driver wins (or the image's newer CUDA compat libcuda).
    EXPECT_NE(resolve(by_gpubind, "libnvidia-ml.so.1", false)
                  .find("libnvidia-ml.so.1 => " + s.lib_dir + "/libnvidia-ml.so.1"),
              std::string::npos);
    EXPECT_NE(
        resolve(by_gpubind, "libcuda.so.1", false)
            .find("libcuda.so.1 => " +
                  (s.compat ? std::string(decide::kCudaCompatDir) : s.lib_dir) + "/libcuda.so.1"),
        std::string::npos);

    // ldconfig -p reading the written cache lists every injected library.
    const Output listing = run(kLdconfig + " -p -C " + quote(cache.string()));
    ASSERT_EQ(listing.status, 0);
    for (const Library& l : added) {
        const std::string line = "\t" + l.soname + " (" +
                                 (l.arch == Arch::I386 ? target::kFlags32 : target::kFlags) +
                                 ") => " + l.path + "\n";
        EXPECT_NE(listing.text.find(line), std::string::npos) << line << listing.text;
    }
}

// 64 images: seeds pick the layout, the cache format (or none), the CUDA
// compat directory, 32-bit libraries, directories and libraries.
INSTANTIATE_TEST_SUITE_P(Images, Differential, ::testing::Range(0u, 64u));

}  // namespace
}  // namespace gpubind
