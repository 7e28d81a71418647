// The loader cache written by gpubind in execute(), against RecordingSystem.
#include "exec_world.hpp"
#include "failing_system.hpp"

namespace gpubind {
namespace {

using namespace exec_test;

// --- the loader cache written by gpubind ---

exec::Target writer_target() {
    exec::Target t = target();
    t.ldcache = config::LdcacheMethod::Gpubind;
    return t;
}

decide::Plan writer_plan() {
    decide::Plan plan = sample_plan();
    plan.ldcache_libraries = {
        {"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", ldcache::Arch::X86_64},
        {"libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so", ldcache::Arch::X86_64}};
    return plan;
}

// The image's cache: one library of its own and an old libcuda.so.1 of its own.
std::string image_cache() {
    ldcache::Cache c;
    for (const char* path : {"/usr/lib/x86_64-linux-gnu/libz.so.1", "/opt/old/libcuda.so.1"}) {
        ldcache::Entry& e = c.entries.emplace_back();
        e.flags = 0x0303;
        e.path = path;
        e.soname = e.path.substr(e.path.rfind('/') + 1);
    }
    return ldcache::serialize(ldcache::merge(c, {}, {}));
}

// The image has /etc and the cache `bytes` there, of `owner` and `mode`.
void give_cache(RecordingSystem& sys, const std::string& bytes, os::Owner owner = {},
                unsigned mode = 0644) {
    sys.root["/etc"] = {Type::Directory, 0, 0};
    sys.root["/etc/ld.so.cache"] = {Type::Regular, 0, 0};
    sys.contents["root:/etc/ld.so.cache"] = bytes;
    sys.attrs["root:/etc/ld.so.cache"] = {owner, mode};
}

std::vector<std::string> listed(const std::string& bytes) {
    std::vector<std::string> out;
    for (const auto& e : ldcache::parse(bytes, "written").entries)
        out.push_back(e.soname + " " + ldcache::describe_flags(e) + " " + e.path);
    return out;
}

// /etc and its cache files are looked at once per start, whichever method
// refreshes the cache: /etc's type once, /etc opened once, each name once.
TEST(LoaderCache, EtcAndItsFilesAreCheckedOncePerStart) {
    for (const config::LdcacheMethod method :
         {config::LdcacheMethod::Gpubind, config::LdcacheMethod::Ldconfig}) {
        SCOPED_TRACE(method == config::LdcacheMethod::Gpubind ? "gpubind" : "ldconfig");
        decide::Plan plan = writer_plan();
        // A directory mount makes the executor open what it resolved anew
        // (the mount may hide it): none here, so /etc is opened once.
        std::erase_if(plan.mounts, [](const decide::PlannedMount& m) { return m.directory; });
        RecordingSystem sys;
        setup_world(sys, plan);
        give_cache(sys, image_cache());
        sys.root["/etc/ld.so.conf"] = {Type::Regular, 0, 0};
        exec::Target t = target();
        t.ldcache = method;
        execute(plan, t, sys);
        auto count = [&](const std::string& line) {
            return std::count(sys.calls.begin(), sys.calls.end(), line);
        };
        EXPECT_EQ(count("stat_at root:/etc"), 1);
        EXPECT_EQ(count("open_dir_in_root /etc"), 1);
        EXPECT_EQ(count("stat_at root:/etc/ld.so.cache"), 1);
        EXPECT_EQ(count("stat_at root:/etc/ld.so.cache~"), 1);
        EXPECT_EQ(count("stat_at root:/etc/ld.so.conf"), 1);
        // And the cache is refreshed all the same.
        EXPECT_NE(sys.contents["root:/etc/ld.so.cache"], image_cache());
    }
}

// No process: the image's cache is read by descriptor, merged, written to
// ld.so.cache~ and renamed over it, keeping the original's owner and mode.
TEST(LoaderCache, WrittenInsteadOfRunningLdconfig) {
    const decide::Plan plan = writer_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    give_cache(sys, image_cache(), {0, 0}, 0640);
    sys.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory, 0, 0};
    sys.root["/usr/lib/x86_64-linux-gnu/libz.so.1"] = {Type::Regular, 0, 0};
    execute(plan, writer_target(), sys);
    const auto& c = sys.calls;
    for (const auto& line : c) {
        EXPECT_FALSE(starts(line, "run")) << line;
        EXPECT_FALSE(starts(line, "open_executable")) << line;
    }
    const std::size_t read = index_of(c, "read_regular_at root:/etc/ld.so.cache");
    EXPECT_LT(index_of(c, "stat_at root:/etc/ld.so.cache~"), read);
    ASSERT_GE(c.size(), 3u);
    EXPECT_EQ(c[c.size() - 3], "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 416");
    EXPECT_EQ(listed(sys.contents["root:/etc/ld.so.cache"]),
              (std::vector<std::string>{
                  "libz.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libz.so.1",
                  "libcuda.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so.1",
                  "libcuda.so libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so",
              }));
    EXPECT_EQ(sys.attrs["root:/etc/ld.so.cache"].mode, 0640u);
    EXPECT_FALSE(sys.root.count("/etc/ld.so.cache~"));
}

// ldconfig rescans the refreshed directories: the image's entries for files
// there that are gone (an earlier start's driver library, removed) go too;
// entries of other directories are kept as they are, present or not, and so
// is an entry whose file name is also another directory's.
TEST(LoaderCache, EntriesOfFilesGoneFromTheRefreshedDirectoriesAreDropped) {
    const decide::Plan plan = writer_plan();
    ldcache::Cache image;
    for (const char* path :
         {"/usr/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libgone.so.2",
          "/usr/lib/x86_64-linux-gnu/libkept.so.3", "/opt/other/libgone.so.2",
          "/opt/other/libabsent.so.1"}) {
        ldcache::Entry& e = image.entries.emplace_back();
        e.flags = 0x0303;
        e.path = path;
        e.soname = e.path.substr(e.path.rfind('/') + 1);
    }
    RecordingSystem sys;
    setup_world(sys, plan);
    give_cache(sys, ldcache::serialize(ldcache::merge(image, {}, {})));
    sys.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory, 0, 0};
    for (const char* name : {"libz.so.1", "libkept.so.3", "libother.so.9"})
        sys.root[std::string("/usr/lib/x86_64-linux-gnu/") + name] = {Type::Regular, 0, 0};
    execute(plan, writer_target(), sys);
    EXPECT_EQ(listed(sys.contents["root:/etc/ld.so.cache"]),
              (std::vector<std::string>{
                  "libz.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libz.so.1",
                  "libkept.so.3 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libkept.so.3",
                  "libgone.so.2 libc6,x86-64 /opt/other/libgone.so.2",
                  "libcuda.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so.1",
                  "libcuda.so libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so",
                  "libabsent.so.1 libc6,x86-64 /opt/other/libabsent.so.1",
              }));
}

// A library directory the driver's names are looked for in is listed once
// per start: an earlier start's mount point there (an empty file at a
// driver library's name) goes, and the image's cache entry for it goes
// with it, as ldconfig's rescan would drop it.
TEST(LoaderCache, ALibraryDirectoryIsListedOncePerStart) {
    const std::string dir = "/usr/lib/x86_64-linux-gnu";
    decide::Plan plan = writer_plan();
    plan.owned = {{dir, {"libcuda.so."}, {"libcuda.so.1", "libcuda.so"}, {}}};
    ldcache::Cache image;
    for (const char* name : {"libz.so.1", "libcuda.so.535.104.05"}) {
        ldcache::Entry& e = image.entries.emplace_back();
        e.flags = 0x0303;
        e.path = dir + "/" + name;
        e.soname = std::string_view(name) == "libz.so.1" ? "libz.so.1" : "libold.so.1";
    }
    RecordingSystem sys;
    setup_world(sys, plan);
    give_cache(sys, ldcache::serialize(ldcache::merge(image, {}, {})));
    sys.root[dir] = {Type::Directory, 0, 0};
    sys.root[dir + "/libz.so.1"] = {Type::Regular, 0, 0};
    sys.root[dir + "/libcuda.so.535.104.05"] = {Type::Regular, 0, 0};  // empty: a mount point
    execute(plan, writer_target(), sys);
    EXPECT_FALSE(sys.root.count(dir + "/libcuda.so.535.104.05"));
    EXPECT_EQ(std::count(sys.calls.begin(), sys.calls.end(), "list_dir root:" + dir), 1);
    EXPECT_EQ(listed(sys.contents["root:/etc/ld.so.cache"]),
              (std::vector<std::string>{
                  "libz.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libz.so.1",
                  "libcuda.so.1 libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so.1",
                  "libcuda.so libc6,x86-64 /usr/lib/x86_64-linux-gnu/libcuda.so",
              }));
}

// Under a user namespace the new cache is created as the container's root
// (the ids switched around that call alone); an original of other ids keeps
// them, set by the host's root.
TEST(LoaderCache, OwnerUnderAUserNamespace) {
    const decide::Plan plan = writer_plan();
    for (const bool original : {false, true}) {
        SCOPED_TRACE(original);
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.uid_map = "         0     100000      65536\n";
        sys.gid_map = "         0     200000      65536\n";
        if (original) {
            give_cache(sys, image_cache(), {5, 6}, 0644);
        }
        execute(plan, writer_target(), sys);
        const auto& c = sys.calls;
        const auto& attr = sys.attrs["root:/etc/ld.so.cache"];
        if (original) {
            EXPECT_EQ(attr.owner, (os::Owner{5, 6}));
            EXPECT_EQ(c[c.size() - 3],
                      "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420 owner 5:6");
            EXPECT_LT(index_of(c, "read_regular_at root:/etc/ld.so.cache"), c.size() - 3);
        } else {
            EXPECT_EQ(attr.owner, (os::Owner{100000, 200000}));
            EXPECT_EQ(c[c.size() - 5], "set_fs_ids 100000:200000");
            EXPECT_EQ(c[c.size() - 4],
                      "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420");
            EXPECT_EQ(c[c.size() - 3], "set_fs_ids 0:0");
            EXPECT_EQ(sys.owners["root:/etc"], "100000:200000");  // created: the image had none
        }
        EXPECT_EQ(sys.fs_ids, "0:0");
    }
}

// A failure at any later call puts the image's cache back as it was, or
// removes the one gpubind created.
TEST(LoaderCache, RollbackRestoresOrRemovesTheCache) {
    const decide::Plan plan = writer_plan();
    for (const bool original : {false, true}) {
        SCOPED_TRACE(original);
        auto world = [&](RecordingSystem& sys) {
            setup_world(sys, plan);
            sys.root["/etc"] = {Type::Directory, 0, 0};
            if (original) give_cache(sys, image_cache());
        };
        RecordingSystem ok;
        world(ok);
        execute(plan, writer_target(), ok);
        const std::size_t write =
            index_of(ok.calls, "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420");
        for (std::size_t k = write; k < ok.calls.size(); ++k) {
            SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
            RecordingSystem sys;
            world(sys);
            const auto before = sys.root;
            sys.fail_if = [k](std::size_t i, const std::string& line) {
                return i == k &&
                       !starts(
                           line,
                           "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420 owner");
            };
            EXPECT_THROW(execute(plan, writer_target(), sys), util::Error);
            EXPECT_EQ(sys.root, before);
            if (original) {
                EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], image_cache());
            }
        }
    }
}

// ldconfig's cache put in place over the image's: a failure at any later
// call (the way back to the host's namespace) puts the image's cache back as
// it was, its bytes, owner and mode (issue 49: the walk with the real System
// found it replaced, 0:0 0644, after the image's was removed).
TEST(LoaderCache, LdconfigsCacheRolledBackToTheImagesAfterItIsInPlace) {
    const decide::Plan plan = writer_plan();
    auto world = [&](RecordingSystem& sys) {
        setup_world(sys, plan);
        give_cache(sys, image_cache(), {12, 34}, 0640);
    };
    RecordingSystem ok;
    world(ok);
    execute(plan, target(), ok);
    ASSERT_EQ(ok.contents["root:/etc/ld.so.cache"], ok.ldconfig_output);
    const std::size_t exchange =
        std::find_if(
            ok.calls.begin(), ok.calls.end(),
            [](const auto& l) { return starts(l, "exchange_at root:/etc/ld.so.cache.gpubind-"); }) -
        ok.calls.begin();
    ASSERT_LT(exchange, ok.calls.size());
    for (std::size_t k = exchange; k < ok.calls.size(); ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys;
        world(sys);
        const auto before = sys.root;
        sys.fail_at(k);
        EXPECT_THROW(execute(plan, target(), sys), util::Error);
        EXPECT_EQ(sys.root, before);
        EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], image_cache());
        EXPECT_EQ(sys.attrs["root:/etc/ld.so.cache"].owner, (os::Owner{12, 34}));
        EXPECT_EQ(sys.attrs["root:/etc/ld.so.cache"].mode, 0640u);
    }
}

// An ld.so.cache~ the image left (an ldconfig that died) is the image's:
// the writer goes through a name of its own and leaves it as it is, whether
// the start succeeds or fails at any call from the write on (issue 49: it
// was removed first, and a failed start did not put it back).
TEST(LoaderCache, ALeftoverTemporaryOfTheImageIsLeftAsItIs) {
    const decide::Plan plan = writer_plan();
    auto world = [&](RecordingSystem& sys) {
        setup_world(sys, plan);
        give_cache(sys, image_cache());
        sys.root["/etc/ld.so.cache~"] = {Type::Regular, 0, 0};
        sys.contents["root:/etc/ld.so.cache~"] = "half a cache";
    };
    RecordingSystem ok;
    world(ok);
    execute(plan, writer_target(), ok);
    EXPECT_NE(ok.contents["root:/etc/ld.so.cache"], image_cache());
    EXPECT_EQ(ok.root.count("/etc/ld.so.cache~"), 1u);
    EXPECT_EQ(ok.contents["root:/etc/ld.so.cache~"], "half a cache");
    const std::size_t write =
        std::find_if(
            ok.calls.begin(), ok.calls.end(),
            [](const auto& l) { return starts(l, "replace_file_at root:/etc/ld.so.cache via"); }) -
        ok.calls.begin();
    ASSERT_LT(write, ok.calls.size());
    EXPECT_THAT(ok.calls[write], HasSubstr("via ld.so.cache.gpubind-"));
    for (std::size_t k = write; k < ok.calls.size(); ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys;
        world(sys);
        const auto before = sys.root;
        sys.fail_at(k);
        EXPECT_THROW(execute(plan, writer_target(), sys), util::Error);
        EXPECT_EQ(sys.root, before);
        EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], image_cache());
        EXPECT_EQ(sys.contents["root:/etc/ld.so.cache~"], "half a cache");
    }
}

// Every call of a start refreshing the cache, failed once (both methods):
// the error is one line naming the step before the call (issue 49: the walk
// with the real System found the host side, entering and leaving the
// container's namespace and opening its root naming none: "enter_mount_ns
// ...: Input/output error" for the way back out).
TEST(LoaderCache, EveryFailedCallOfAStartNamesItsStep) {
    for (const config::LdcacheMethod method :
         {config::LdcacheMethod::Gpubind, config::LdcacheMethod::Ldconfig}) {
        exec::Target t = target();
        t.ldcache = method;
        const decide::Plan plan = writer_plan();
        RecordingSystem ok;
        setup_world(ok, plan);
        give_cache(ok, image_cache());
        execute(plan, t, ok);
        for (std::size_t k = 0; k < ok.calls.size(); ++k) {
            SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
            RecordingSystem sys;
            setup_world(sys, plan);
            give_cache(sys, image_cache());
            sys.fail_at(k);
            const std::string what = test::error_of([&] { execute(plan, t, sys); }).what();
            EXPECT_THAT(what, HasSubstr(": injected " + ok.calls[k]));
            EXPECT_FALSE(starts(what, "injected")) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        }
    }
}

// FailingSystem over the recording one: its k-th call fails with the errno
// chosen, never reaching the System below; the calls before it are the
// calls of a run without the fault; past the last call the run completes.
TEST(LoaderCache, AFailingSystemOverTheRecordingOneFailsItsKthCall) {
    const decide::Plan plan = writer_plan();
    RecordingSystem ok;
    setup_world(ok, plan);
    test::FailingSystem through(ok);  // no fault: the calls it passes on, by name
    execute(plan, writer_target(), through);
    const std::vector<std::string> names = through.calls();
    ASSERT_GT(names.size(), 20u);
    for (std::size_t k = 1; k <= names.size() + 1; ++k) {
        SCOPED_TRACE("call " + std::to_string(k));
        RecordingSystem below;
        setup_world(below, plan);
        test::FailingSystem sys(below);
        sys.fail_at(k, ENOSPC);
        if (k > names.size()) {
            execute(plan, writer_target(), sys);
            EXPECT_FALSE(sys.fired());
            EXPECT_EQ(below.calls, ok.calls);
            break;
        }
        const util::Error e = test::error_of([&] { execute(plan, writer_target(), sys); });
        EXPECT_EQ(e.code().value(), ENOSPC);
        ASSERT_TRUE(sys.fired());
        EXPECT_EQ(sys.failed_call(), names[k - 1]);
        EXPECT_THAT(e.what(), HasSubstr(names[k - 1] + " (fault injected into call " +
                                        std::to_string(k) + ")"));
        ASSERT_GE(sys.calls().size(), k);
        EXPECT_EQ(std::vector<std::string>(sys.calls().begin(), sys.calls().begin() + k),
                  std::vector<std::string>(names.begin(), names.begin() + k));
    }
}

// A FIFO, device, socket or symlink where the cache, ld.so.cache~ or /etc
// belongs is refused at once with one line, never opened or read; ldconfig
// is not run over it either.
TEST(LoaderCache, NonRegularFilesAreRefusedBeforeAnyOpen) {
    struct Case {
        const char* path;
        os::FileInfo info;
        const char* says;
    };
    for (const Case& k :
         {Case{"/etc/ld.so.cache~", {Type::Fifo, 0, 0}, "/etc/ld.so.cache~: is a FIFO"},
          Case{"/etc/ld.so.cache~",
               {Type::BlockDevice, 7, 0},
               "/etc/ld.so.cache~: is a block device"},
          Case{"/etc/ld.so.cache",
               {Type::CharDevice, 1, 3},
               "/etc/ld.so.cache: is a character device"},
          Case{"/etc/ld.so.cache", {Type::Symlink, 0, 0}, "/etc/ld.so.cache: is a symbolic link"},
          Case{"/etc/ld.so.cache", {Type::Socket, 0, 0}, "/etc/ld.so.cache: is a socket"},
          Case{"/etc", {Type::Symlink, 0, 0}, "/etc: is a symbolic link"},
          Case{"/etc", {Type::Fifo, 0, 0}, "/etc: is a FIFO"}}) {
        for (const config::LdcacheMethod method :
             {config::LdcacheMethod::Gpubind, config::LdcacheMethod::Ldconfig}) {
            SCOPED_TRACE(std::string(k.path) +
                         (method == config::LdcacheMethod::Gpubind ? " gpubind" : " ldconfig"));
            const decide::Plan plan = writer_plan();
            RecordingSystem sys;
            setup_world(sys, plan);
            if (std::string(k.path) != "/etc") sys.root["/etc"] = {Type::Directory, 0, 0};
            sys.root[k.path] = k.info;
            const auto before = sys.root;
            exec::Target t = writer_target();
            t.ldcache = method;
            const std::string what = test::error_of([&] { execute(plan, t, sys); }).what();
            EXPECT_THAT(what, HasSubstr(k.says));
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
            for (const auto& line : sys.calls) {
                EXPECT_FALSE(starts(line, "read_regular_at")) << line;
                EXPECT_FALSE(starts(line, "replace_file_at")) << line;
                EXPECT_FALSE(starts(line, "run")) << line;
            }
            EXPECT_EQ(sys.root, before);
        }
    }
}

// What the writer cannot serve goes to ldconfig: an image without a cache
// whose ld.so.conf names directories (plan.ldcache_scan).
TEST(LoaderCache, ScanOfTheImagesDirectoriesFallsBackToLdconfig) {
    decide::Plan plan = writer_plan();
    plan.ldcache_scan = true;
    RecordingSystem sys;
    setup_world(sys, plan);
    execute(plan, writer_target(), sys);
    EXPECT_EQ(sys.ldconfig_args,
              (std::vector<std::string>{"-r", "/rootfs", "-X", "-C", "/dev/ld.so.cache",
                                        "/usr/lib/x86_64-linux-gnu"}));
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "replace_file_at")) << line;
}

// A corrupt image cache is not kept (the loader ignores it too); an oversized
// one is refused.
TEST(LoaderCache, CorruptCacheReplacedOversizedRefused) {
    const decide::Plan plan = writer_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    give_cache(sys, "glibc-ld.so.cache1.1 truncated");
    execute(plan, writer_target(), sys);
    EXPECT_EQ(listed(sys.contents["root:/etc/ld.so.cache"]).size(), 2u);

    RecordingSystem big;
    setup_world(big, plan);
    give_cache(big, std::string(ldcache::kMaxCacheSize + 1, 'x'));
    EXPECT_THAT(test::error_of([&] { execute(plan, writer_target(), big); }).what(),
                HasSubstr("/etc/ld.so.cache"));
    EXPECT_FALSE(big.root.count("/etc/ld.so.cache~"));
}

}  // namespace
}  // namespace gpubind
