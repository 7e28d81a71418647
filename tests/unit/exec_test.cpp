// execute()'s order and rollback, against RecordingSystem (no root needed).
#include <unistd.h>

#include <tuple>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "errors.hpp"
#include "gpubind/error.hpp"
#include "gpubind/exec.hpp"
#include "device_program.hpp"
#include "recording_system.hpp"

namespace gpubind {
namespace {

using test::RecordingSystem;
using ::testing::HasSubstr;
using Type = FileInfo::Type;

constexpr unsigned kLibFlags = kMountReadOnly | kMountNoSuid | kMountNoDev;
const std::string kAllow = "cgroup:/sys/fs/cgroup/devices/ctr/devices.allow";
const std::string kDeny = "cgroup:/sys/fs/cgroup/devices/ctr/devices.deny";

using test::fake_pid;

// The tests before "--- the loader cache written by gpubind ---" follow the
// cache refresh through the ldconfig method; the writer has its own below.
Target target() {
    return test::recording_target();
}

Plan sample_plan() {
    Plan plan;
    plan.devices.push_back(
        {{"/dev/nvidiactl", "/host/dev/nvidiactl", 195, 255, 0666}, "nvidiactl"});
    plan.devices.push_back({{"/dev/nvidia0", "/host/dev/nvidia0", 195, 0, 0666}, "GPU 0"});
    plan.mounts.push_back({"/host/usr/lib/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                           false, kLibFlags, "compute library"});
    plan.mounts.push_back(
        {"/host/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", false, kLibFlags, "utility binary"});
    plan.mounts.push_back({"/host/lib/firmware/nvidia/550.54.15", "/lib/firmware/nvidia/550.54.15",
                           true, kLibFlags | kMountNoExec, "firmware"});
    plan.symlinks.push_back({"/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.1"});
    ProcView view;
    view.version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
    view.params = "ModifyDeviceFiles: 0\n";
    view.gpus.push_back({"0000:3b:00.0", "Model: \t\t Fake GPU\n"});
    view.capability_files.push_back("/host/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access");
    plan.proc = view;
    plan.library_dirs = {"/usr/lib/x86_64-linux-gnu"};
    plan.refresh_ldcache = true;
    return plan;
}

// The host holds every source; the image has /dev, /usr/lib, /usr/bin, /lib,
// /proc/driver but no /usr/lib/x86_64-linux-gnu or /lib/firmware.
void setup_world(RecordingSystem& sys, const Plan& plan) {
    for (const auto& d : plan.devices)
        sys.host[d.node.host_path.string()] = {Type::CharDevice, d.node.major, d.node.minor};
    for (const auto& m : plan.mounts)
        sys.host[m.source.string()] = {m.directory ? Type::Directory : Type::Regular, 0, 0};
    if (plan.proc)
        for (const auto& c : plan.proc->capability_files) sys.host[c.string()] = {Type::Regular};
    for (const char* d : {"/dev", "/usr", "/usr/lib", "/usr/bin", "/lib", "/proc", "/proc/driver"})
        sys.root[d] = {Type::Directory, 0, 0};
}

std::size_t index_of(const std::vector<std::string>& calls, const std::string& line) {
    auto it = std::find(calls.begin(), calls.end(), line);
    if (it == calls.end()) {
        ADD_FAILURE() << "no call '" << line << "'";
        return calls.size();
    }
    return static_cast<std::size_t>(it - calls.begin());
}

bool starts(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

// What undoes a call that changed the container or its cgroup, "" for none.
// Written from the meaning of the calls, not from the executor's code.
std::string undo_of(const std::string& line) {
    auto after = [&](const std::string& prefix) { return line.substr(prefix.size()); };
    if (starts(line, "make_dir root:")) return "remove " + after("make_dir ") + " (dir)";
    if (starts(line, "make_file root:")) return "remove " + after("make_file ");
    if (starts(line, "make_symlink root:")) {
        std::string rest = after("make_symlink ");
        return "remove " + rest.substr(0, rest.find(" -> "));
    }
    if (starts(line, "write_file_at root:")) return "remove " + after("write_file_at ");
    if (starts(line, "rename_at root:")) {
        const std::string rest = after("rename_at ");
        const std::size_t arrow = rest.find(" -> ");
        return "rename_at " + rest.substr(arrow + 4) + " -> " + rest.substr(0, arrow);
    }
    if (starts(line, "exchange_at root:")) return line;  // its own inverse
    if (starts(line, "attach ")) return "detach " + line.substr(line.find(" -> ") + 4);
    if (starts(line, "write_rule " + kAllow + " "))
        return "write_rule " + kDeny + line.substr(("write_rule " + kAllow).size());
    return "";
}

bool is_undo(const std::string& line) {
    return starts(line, "remove ") || starts(line, "detach ") || starts(line, "rename_at ") ||
           starts(line, "exchange_at ") ||
           starts(line, "write_rule " + kDeny);
}

TEST(Execute, HostSideFirstThenEachMountResolvedCreatedFlaggedAttached) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    execute(plan, target(), sys);
    const auto& c = sys.calls;

    // Everything opened on the host comes before entering the container.
    std::size_t enter = index_of(c, "enter_mount_ns ns:container");
    for (std::size_t i = 0; i < c.size(); ++i) {
        for (const char* host_op : {"open_tree ", "open_executable ", "open_cgroup_file ",
                                    "read_proc ", "read_host_file ", "open_mount_ns "})
            if (starts(c[i], host_op)) {
                EXPECT_LT(i, enter) << c[i];
            }
    }
    EXPECT_LT(index_of(c, "open_mount_ns " + std::to_string(fake_pid())),
              index_of(c, "read_proc " + std::to_string(fake_pid()) + " cgroup"));
    EXPECT_LT(enter, index_of(c, "open_root /rootfs"));

    // Every device and mount: checked, created, opened, flagged, attached, in that order,
    // one after the other.
    struct Item {
        std::string source, target, flags;
        bool created_file;
    };
    std::vector<Item> items;
    for (const auto& d : plan.devices)
        items.push_back({d.node.host_path.string(), d.node.path.string(), "nosuid,noexec", true});
    for (const auto& m : plan.mounts)
        items.push_back({m.source.string(), m.target.string(), RecordingSystem::flag_names(m.flags),
                         !m.directory});
    std::size_t previous = enter;
    for (const auto& it : items) {
        SCOPED_TRACE(it.target);
        std::size_t st = index_of(c, "stat_at root:" + it.target);
        std::size_t mk =
            index_of(c, (it.created_file ? "make_file root:" : "make_dir root:") + it.target);
        std::size_t op = index_of(c, "open_at root:" + it.target);
        std::size_t fl = index_of(c, "set_mount_flags tree:" + it.source + " " + it.flags);
        std::size_t at = index_of(c, "attach tree:" + it.source + " -> root:" + it.target);
        EXPECT_LT(previous, st);
        EXPECT_LT(st, mk);
        EXPECT_LT(mk, op);
        EXPECT_LT(op, fl);
        EXPECT_LT(fl, at);
        previous = at;
    }
    // Missing parents were made one component at a time, outermost first.
    EXPECT_LT(index_of(c, "make_dir root:/lib/firmware"),
              index_of(c, "make_dir root:/lib/firmware/nvidia"));
    EXPECT_LT(index_of(c, "make_dir root:/usr/lib/x86_64-linux-gnu"),
              index_of(c, "stat_at root:/usr/lib/x86_64-linux-gnu/libcuda.so.1"));

    // What the container ends up with.
    for (const auto& m : plan.mounts) {
        ASSERT_TRUE(sys.mounted.count("root:" + m.target.string())) << m.target;
        EXPECT_EQ(sys.mounted["root:" + m.target.string()].source, "tree:" + m.source.string());
        EXPECT_EQ(sys.mounted["root:" + m.target.string()].flags, m.flags);
    }
    for (const auto& d : plan.devices) {
        const auto& mnt = sys.mounted["root:" + d.node.path.string()];
        EXPECT_EQ(mnt.source, "tree:" + d.node.host_path.string());
        EXPECT_EQ(mnt.flags, kMountNoSuid | kMountNoExec) << "devices must not be nodev";
        EXPECT_EQ(sys.root["/dev/" + d.node.path.filename().string()].type, Type::Regular);
    }
    EXPECT_EQ(sys.root["/usr/lib/x86_64-linux-gnu/libcuda.so"].type, Type::Symlink);
    EXPECT_EQ(sys.links["/usr/lib/x86_64-linux-gnu/libcuda.so"], "libcuda.so.1");
    EXPECT_EQ(sys.allowed, (std::set<std::string>{"c 195:255 rw", "c 195:0 rw"}));

    // The proc view: written through the tmpfs descriptor, made read-only, then attached.
    const ProcView& view = *plan.proc;
    EXPECT_EQ(sys.contents["tmpfs:/version"], view.version);
    EXPECT_EQ(sys.contents["tmpfs:/params"], view.params);
    EXPECT_EQ(sys.contents["tmpfs:/gpus/0000:3b:00.0/information"], view.gpus[0].information);
    const auto& proc = sys.mounted["root:/proc/driver/nvidia"];
    EXPECT_EQ(proc.source, "tmpfs:/");
    EXPECT_EQ(proc.flags, kMountReadOnly | kMountNoSuid | kMountNoDev | kMountNoExec);
    std::size_t proc_attach = index_of(c, "attach tmpfs:/ -> root:/proc/driver/nvidia");
    EXPECT_LT(index_of(c, "write_file_at tmpfs:/params"), proc_attach);
    EXPECT_LT(index_of(c, "set_mount_flags tmpfs:/ ro,nosuid,nodev,noexec"), proc_attach);
    const auto& cap = sys.mounted["tmpfs:/capabilities/gpu0/mig/gi1/access"];
    EXPECT_EQ(cap.source, "tree:" + view.capability_files[0].string());
    EXPECT_EQ(sys.tmpfs["/capabilities/gpu0/mig/gi1/access"].type, Type::Regular);

    // ldconfig last, writing its cache to its scratch (never the image's
    // /etc), then the cache put in place by descriptor, then back home.
    EXPECT_EQ(sys.ldconfig_args,
              (std::vector<std::string>{"-r", "/rootfs", "-X", "-C", "/dev/ld.so.cache",
                                        "/usr/lib/x86_64-linux-gnu"}));
    const std::size_t run = index_of(
        c, "run exe:/sbin/ldconfig -r /rootfs -X -C /dev/ld.so.cache /usr/lib/x86_64-linux-gnu");
    const std::string temp = "root:/etc/ld.so.cache.gpubind-" + std::to_string(::getpid());
    EXPECT_LT(run, index_of(c, "write_file_at " + temp));
    ASSERT_GE(c.size(), 3u);
    EXPECT_EQ(c[c.size() - 3], "rename_at " + temp + " -> root:/etc/ld.so.cache");
    EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], sys.ldconfig_output);
    EXPECT_EQ(c[c.size() - 2], "enter_mount_ns ns:own");
    EXPECT_EQ(c[c.size() - 1], "change_dir cwd");
    EXPECT_FALSE(sys.in_container);
}

// A container with a user namespace whose root is host 100000:200000: what
// gpubind creates in its root (directories, mount points, links) is created as
// that root; what the image had keeps its owner; ldconfig runs as those ids.
// Without a user namespace everything is created as root.
TEST(Execute, UserNamespaceRootOwnsWhatIsCreated) {
    const Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.uid_map = "         0     100000      65536\n";
    sys.gid_map = "         0     200000      65536\n";
    const auto before = sys.root;
    execute(plan, target(), sys);
    const auto& c = sys.calls;

    std::set<std::string> created{"root:/etc/ld.so.cache"};  // renamed from its temp
    for (const auto& line : c)
        for (const char* op : {"make_dir root:", "make_file root:", "make_symlink root:"})
            if (starts(line, op)) {
                std::string p = line.substr(std::string(op).size() - 5);
                created.insert(p.substr(0, p.find(" -> ")));
            }
    ASSERT_FALSE(created.empty());
    for (const auto& p : created) EXPECT_EQ(sys.owners[p], "100000:200000") << p;
    for (const auto& [p, info] : before)
        EXPECT_FALSE(sys.owners.count("root:" + p)) << p << " was the image's own";
    for (const auto& [p, ids] : sys.owners) EXPECT_TRUE(created.count(p)) << p;
    // The ids are switched for each creation alone, and back to root's at once.
    for (std::size_t i = 0; i < c.size(); ++i) {
        if (c[i] != "set_fs_ids 100000:200000") continue;
        ASSERT_LT(i + 2, c.size());
        EXPECT_TRUE(starts(c[i + 1], "make_") ||
                    starts(c[i + 1], "write_file_at root:/etc/ld.so.cache.gpubind-"))
            << c[i + 1];
        EXPECT_EQ(c[i + 2], "set_fs_ids 0:0");
    }
    EXPECT_EQ(sys.fs_ids, "0:0");
    EXPECT_EQ(sys.run_as_owner, "100000:200000");
    for (const auto& line : c) EXPECT_FALSE(starts(line, "run exe:")) << line;

    // No user namespace (the identity map), or one whose root is not mapped.
    for (const char* map : {"         0          0 4294967295\n", "1 100000 10\n"}) {
        SCOPED_TRACE(map);
        RecordingSystem plain;
        setup_world(plain, plan);
        plain.uid_map = plain.gid_map = map;
        execute(plan, target(), plain);
        EXPECT_TRUE(plain.owners.empty());
        EXPECT_EQ(plain.run_as_owner, "");
        EXPECT_EQ(std::count_if(plain.calls.begin(), plain.calls.end(),
                                [](const std::string& l) { return starts(l, "run exe:"); }),
                  1);
    }

    // A failure at any step after the first chown still leaves the root as it was.
    const std::size_t n = c.size();
    const std::size_t first = static_cast<std::size_t>(
        std::find_if(c.begin(), c.end(),
                     [](const std::string& l) { return starts(l, "set_fs_ids"); }) -
        c.begin());
    ASSERT_LT(first, n);
    for (std::size_t k = first; k < n; ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + c[k]);
        RecordingSystem failing;
        setup_world(failing, plan);
        failing.uid_map = sys.uid_map;
        failing.gid_map = sys.gid_map;
        failing.fail_at(k);
        EXPECT_THROW(execute(plan, target(), failing), Error);
        EXPECT_EQ(failing.root, before);
        EXPECT_TRUE(failing.mounted.empty());
        EXPECT_EQ(failing.fs_ids, "0:0");
    }
}

// Rootless: the hook runs as the user. It joins the container's user
// namespace before its mount namespace, clones the host's files from there
// (before the container's pivot_root they are visible), chowns nothing (what
// it creates is the container root's already), runs ldconfig as that root and
// stays in the container's namespaces: there is no way back out.
TEST(Execute, RootlessJoinsTheUserNamespaceFirstAndStays) {
    const Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.uid_map = sys.gid_map = "         0       4343          1\n";
    Target t = target();
    t.join_user_ns = true;
    execute(plan, t, sys);
    const auto& c = sys.calls;
    const std::size_t user = index_of(c, "enter_user_ns ns:user");
    const std::size_t mnt = index_of(c, "enter_mount_ns ns:container");
    EXPECT_LT(index_of(c, "open_user_ns " + std::to_string(fake_pid())), user);
    EXPECT_LT(user, mnt);
    for (std::size_t i = 0; i < c.size(); ++i) {
        if (starts(c[i], "open_tree ")) {
            EXPECT_GT(i, mnt) << c[i];
        }
        EXPECT_FALSE(starts(c[i], "set_fs_ids")) << c[i];
        EXPECT_NE(c[i], "enter_mount_ns ns:own");
    }
    EXPECT_EQ(std::count(c.begin(), c.end(), "enter_mount_ns ns:container"), 1);
    // ldconfig's user namespace root is the container's root (0 where we are).
    EXPECT_LT(index_of(c, "run_as 0:0 exe:/sbin/ldconfig -r /rootfs -X -C /dev/ld.so.cache "
                          "/usr/lib/x86_64-linux-gnu"),
              c.size() - 1);
    EXPECT_TRUE(starts(c.back(), "rename_at ")) << c.back();
    EXPECT_EQ(sys.mounted.size(), plan.devices.size() + plan.mounts.size() + 2);

    // A failure anywhere leaves the container's root as it was.
    for (std::size_t k = 0; k < c.size(); ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + c[k]);
        RecordingSystem failing;
        setup_world(failing, plan);
        const auto before = failing.root;
        failing.fail_at(k);
        EXPECT_THROW(execute(plan, t, failing), Error);
        EXPECT_EQ(failing.root, before);
        EXPECT_TRUE(failing.mounted.empty());
        EXPECT_TRUE(failing.links.empty());
    }
}

TEST(MapId, ReadsTheKernelsIdMaps) {
    // The formats the kernel prints: columns padded to 10.
    EXPECT_EQ(map_id("         0          0 4294967295\n", 0, "m"), 0u);
    EXPECT_EQ(map_id("         0     100000      65536\n", 0, "m"), 100000u);
    EXPECT_EQ(map_id("         0     100000      65536\n", 65535, "m"), 165535u);
    EXPECT_EQ(map_id("         0     100000      65536\n", 65536, "m"), std::nullopt);
    // Rootless runc: the user as root, subordinate ids above.
    const std::string rootless =
        "         0       1000          1\n         1     100000      65536\n";
    EXPECT_EQ(map_id(rootless, 0, "m"), 1000u);
    EXPECT_EQ(map_id(rootless, 1, "m"), 100000u);
    EXPECT_EQ(map_id("1 100000 10", 0, "m"), std::nullopt);
    EXPECT_EQ(map_id("", 0, "m"), std::nullopt);  // not written yet: nothing is mapped
    for (const char* bad : {"0 100000\n", "0 100000 10 4\n", "0 x 10\n", "-1 0 10\n",
                            "0 4294967296 1\n"}) {
        SCOPED_TRACE(bad);
        auto e = test::error_of([&] { map_id(std::string("0 5 0\n") + bad, 0, "pid 9 uid_map"); });
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr("pid 9 uid_map"));
        EXPECT_THAT(e.what(), HasSubstr("line 2"));
    }
}

TEST(Execute, FailureAtAnyStepUndoesEverythingInReverseAndRethrowsIt) {
    const Plan plan = sample_plan();
    RecordingSystem ok;
    setup_world(ok, plan);
    execute(plan, target(), ok);
    const std::size_t n = ok.calls.size();
    ASSERT_GT(n, 40u);

    for (std::size_t k = 0; k < n; ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys;
        setup_world(sys, plan);
        const auto root_before = sys.root;
        sys.fail_at(k);
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EIO);
            EXPECT_THAT(e.what(), HasSubstr("injected " + ok.calls[k]));
        }
        ASSERT_GT(sys.calls.size(), k);
        for (std::size_t i = 0; i <= k; ++i) ASSERT_EQ(sys.calls[i], ok.calls[i]);

        std::vector<std::string> expected;
        for (std::size_t i = k; i-- > 0;)
            if (std::string u = undo_of(sys.calls[i]); !u.empty()) expected.push_back(u);
        std::vector<std::string> undone;
        for (std::size_t i = k + 1; i < sys.calls.size(); ++i)
            if (is_undo(sys.calls[i])) undone.push_back(sys.calls[i]);
        EXPECT_EQ(undone, expected);

        // The container is as it was, and we are back in our own namespace.
        EXPECT_EQ(sys.root, root_before);
        EXPECT_TRUE(sys.links.empty());
        EXPECT_TRUE(sys.mounted.empty());
        EXPECT_TRUE(sys.allowed.empty());
        EXPECT_FALSE(sys.in_container);
    }
}

TEST(Execute, RollbackGoesOnPastAFailedUndoAndTheFirstErrorWins) {
    const Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    const auto root_before = sys.root;
    sys.fail_if = [](std::size_t, const std::string& line) {
        return line == "attach tree:/host/usr/bin/nvidia-smi -> root:/usr/bin/nvidia-smi" ||
               line == "detach root:/dev/nvidia0";
    };
    try {
        execute(plan, target(), sys);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("injected attach tree:/host/usr/bin/nvidia-smi"));
        EXPECT_THAT(e.what(), HasSubstr("/usr/bin/nvidia-smi (utility binary)"));
    }
    // Only what the failed undo pinned is left: the mount and its mount point.
    ASSERT_EQ(sys.mounted.size(), 1u);
    EXPECT_TRUE(sys.mounted.count("root:/dev/nvidia0"));
    auto left = sys.root;
    EXPECT_EQ(left.erase("/dev/nvidia0"), 1u);
    EXPECT_EQ(left, root_before);
    EXPECT_FALSE(sys.in_container);
    // The ones before and after it were still undone.
    EXPECT_NE(std::find(sys.calls.begin(), sys.calls.end(), "detach root:/dev/nvidiactl"),
              sys.calls.end());
    EXPECT_NE(std::find(sys.calls.begin(), sys.calls.end(),
                        "detach root:/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
              sys.calls.end());
}

TEST(Execute, RefusesInitOurselvesAndASharedNamespaceBeforeTouchingAnything) {
    Plan plan = sample_plan();
    for (pid_t pid : {pid_t{0}, pid_t{1}, pid_t{-5}, ::getpid()}) {
        RecordingSystem sys;
        setup_world(sys, plan);
        Target t = target();
        t.pid = pid;
        try {
            execute(plan, t, sys);
            ADD_FAILURE() << "pid " << pid << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL) << e.what();
            EXPECT_THAT(e.what(), HasSubstr("pid " + std::to_string(pid)));
        }
        EXPECT_TRUE(sys.calls.empty());
    }
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.shares_namespace = true;
    try {
        execute(plan, target(), sys);
        FAIL() << "shared namespace accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EPERM);
        EXPECT_THAT(e.what(), HasSubstr("shares this process's mount namespace"));
    }
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;

    for (const char* bad : {"rootfs", "/", ""}) {
        RecordingSystem s2;
        Target t = target();
        t.rootfs = bad;
        EXPECT_THROW(execute(plan, t, s2), Error) << bad;
        EXPECT_TRUE(s2.calls.empty());
    }
}

TEST(Execute, RefusesPlanPathsThatAreNotCleanAbsolutePaths) {
    for (const char* bad : {"usr/lib/libx.so", "/usr/../etc/passwd", "/usr/./lib/x", "/"}) {
        Plan plan = sample_plan();
        plan.mounts[0].target = bad;
        RecordingSystem sys;
        setup_world(sys, plan);
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << bad << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
        }
        EXPECT_TRUE(sys.calls.empty()) << bad;
    }
    Plan plan = sample_plan();
    plan.proc->gpus[0].bus_id = "../../etc";
    RecordingSystem sys;
    EXPECT_THROW(execute(plan, target(), sys), Error);
    EXPECT_TRUE(sys.calls.empty());
}

// Runs the sample plan against a world the test changed, expecting an error
// that mentions `needle`, and the container exactly as it was.
void expect_refused(const std::function<void(RecordingSystem&, Plan&)>& change,
                    const std::string& needle) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    change(sys, plan);
    const auto root_before = sys.root;
    const auto links_before = sys.links;
    try {
        execute(plan, target(), sys);
        ADD_FAILURE() << "accepted; wanted an error with '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr(needle));
    }
    EXPECT_EQ(sys.root, root_before);
    EXPECT_EQ(sys.links, links_before);
    EXPECT_TRUE(sys.mounted.empty());
    EXPECT_TRUE(sys.allowed.empty());
    EXPECT_FALSE(sys.in_container);
}

TEST(Execute, MountTargetsOfTheWrongTypeAreErrorsNamingThemNeverFollowed) {
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = {Type::Directory};
        },
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1: exists and is a directory");
    expect_refused([](RecordingSystem& s, Plan&) { s.root["/usr/bin/nvidia-smi"] = {Type::Fifo}; },
                   "/usr/bin/nvidia-smi: exists and is a FIFO");
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/dev/nvidia0"] = {Type::CharDevice, 1, 3};
        },
        "/dev/nvidia0: exists and is a character device 1:3");
    expect_refused([](RecordingSystem& s, Plan&) { s.root["/lib/firmware"] = {Type::Regular}; },
                   "/lib/firmware: Not a directory");
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/proc/driver/nvidia"] = {Type::Symlink};
            s.links["/proc/driver/nvidia"] = "/";
        },
        "/proc/driver/nvidia: exists and is a symbolic link");
    // /dev itself a symlink that leads nowhere inside the root (a host path).
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/dev"] = {Type::Symlink};
            s.links["/dev"] = "/host-dev";
        },
        "/dev: is a symbolic link that leads nowhere inside the container");
    // A directory where the driver's link goes.
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so"] = {Type::Directory};
        },
        "symlink /usr/lib/x86_64-linux-gnu/libcuda.so: create symlink "
        "/usr/lib/x86_64-linux-gnu/libcuda.so: is a directory where the driver's link goes; "
        "refusing to replace it");
}

TEST(Execute, ExistingMountPointsOfTheRightTypeAreUsedAndKept) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.root["/dev/nvidia0"] = {Type::CharDevice, 195, 0};
    sys.root["/usr/bin/nvidia-smi"] = {Type::Regular};
    sys.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
    sys.root["/usr/lib/x86_64-linux-gnu/libcuda.so"] = {Type::Symlink};
    sys.links["/usr/lib/x86_64-linux-gnu/libcuda.so"] = "libcuda.so.1";
    const auto root_before = sys.root;
    execute(plan, target(), sys);
    EXPECT_EQ(sys.mounted["root:/dev/nvidia0"].source, "tree:/host/dev/nvidia0");
    EXPECT_EQ(sys.mounted["root:/usr/bin/nvidia-smi"].source, "tree:/host/usr/bin/nvidia-smi");
    for (const auto& line : sys.calls) {
        EXPECT_NE(line, "make_file root:/dev/nvidia0");
        EXPECT_NE(line, "make_file root:/usr/bin/nvidia-smi");
        EXPECT_FALSE(starts(line, "make_symlink root:/usr/lib/x86_64-linux-gnu/libcuda.so "));
    }

    // And a later failure leaves them in place: only what was created goes.
    RecordingSystem again;
    setup_world(again, plan);
    again.root = root_before;
    again.links = {{"/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.1"}};
    again.fail_if = [](std::size_t, const std::string& line) { return starts(line, "run "); };
    EXPECT_THROW(execute(plan, target(), again), Error);
    EXPECT_EQ(again.root, root_before);
    EXPECT_EQ(again.links.size(), 1u);
}

TEST(Execute, SourcesAreCheckedOnTheHostBeforeEnteringTheContainer) {
    auto expect_source_error = [](const std::function<void(RecordingSystem&)>& change,
                                  const std::string& needle) {
        Plan plan = sample_plan();
        RecordingSystem sys;
        setup_world(sys, plan);
        change(sys);
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_THAT(e.what(), HasSubstr(needle));
        }
        for (const auto& line : sys.calls) {
            EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
        }
    };
    expect_source_error([](RecordingSystem& s) { s.host["/host/dev/nvidia0"] = {Type::Regular}; },
                        "/host/dev/nvidia0: is a regular file, not the character device 195:0");
    expect_source_error(
        [](RecordingSystem& s) {
            s.host["/host/dev/nvidia0"] = {Type::CharDevice, 195, 1};
        },
        "is a character device 195:1, not the character device 195:0");
    expect_source_error([](RecordingSystem& s) { s.host.erase("/host/usr/bin/nvidia-smi"); },
                        "open mount source /host/usr/bin/nvidia-smi: No such file or directory");
    expect_source_error(
        [](RecordingSystem& s) { s.host["/host/lib/firmware/nvidia/550.54.15"] = {Type::Regular}; },
        "the plan wants a directory");
}

TEST(Execute, CgroupRulesOnlyWhereNeededAndAMissingHierarchyIsAClearError) {
    Plan plan = sample_plan();
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        Target t = target();
        t.cgroups = false;
        execute(plan, t, sys);
        for (const auto& line : sys.calls) {
            EXPECT_FALSE(starts(line, "write_rule")) << line;
            EXPECT_FALSE(starts(line, "read_proc") && line.ends_with(" cgroup")) << line;
        }
    }
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.devices_list = "c 195:* rwm\nc 1:3 rwm\n";
        execute(plan, target(), sys);
        for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "write_rule")) << line;
    }
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.devices_list = "c 195:255 rw\n";
        execute(plan, target(), sys);
        EXPECT_EQ(sys.allowed, std::set<std::string>{"c 195:0 rw"});
    }
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        // A cgroup v2 process, but no cgroup2 mount holding it.
        sys.proc_cgroup = "0::/system.slice/ctr.scope\n";
        try {
            execute(plan, target(), sys);
            FAIL() << "no hierarchy accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), ENOENT);
            EXPECT_THAT(e.what(), HasSubstr("no cgroup2 hierarchy holding "
                                            "/system.slice/ctr.scope is mounted"));
        }
        for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
    }
}

TEST(Execute, DevicesWithoutBindGetCgroupAccessOnly) {
    Plan plan = sample_plan();
    for (auto& d : plan.devices) d.bind = false;
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.host.erase("/host/dev/nvidia0");  // not even opened
    execute(plan, target(), sys);
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "open_tree /host/dev/")) << line;
        EXPECT_FALSE(starts(line, "stat_at root:/dev/")) << line;
    }
    EXPECT_FALSE(sys.root.count("/dev/nvidia0"));
    EXPECT_FALSE(sys.mounted.count("root:/dev/nvidia0"));
    EXPECT_EQ(sys.allowed, (std::set<std::string>{"c 195:255 rw", "c 195:0 rw"}));
}

TEST(Execute, NoLdconfigUnlessAskedAndEmptyPlanTouchesNothingInside) {
    Plan plan = sample_plan();
    plan.refresh_ldcache = false;
    RecordingSystem sys;
    setup_world(sys, plan);
    execute(plan, target(), sys);
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "run ")) << line;
        EXPECT_FALSE(starts(line, "open_executable ")) << line;
    }

    RecordingSystem empty;
    execute(Plan{}, target(), empty);
    for (const auto& line : empty.calls) {
        EXPECT_FALSE(starts(line, "make_")) << line;
        EXPECT_FALSE(starts(line, "attach")) << line;
        EXPECT_FALSE(starts(line, "write_rule")) << line;
    }
    EXPECT_FALSE(empty.in_container);
}

// --- issue 12: the cache files, the rootfs's own mount ---

// A loader-cache file of the image that is not a regular file (a block device
// named ld.so.cache~, a FIFO for ld.so.conf) refuses the container at once,
// naming it, before anything is created or mounted.
TEST(Execute, NonRegularLoaderCacheFilesRefuseBeforeAnythingIsDone) {
    const Plan plan = sample_plan();
    for (const auto& [dir, name, info] :
         {std::tuple<std::string, std::string, FileInfo>{"/etc", "ld.so.cache~",
                                                         {Type::BlockDevice, 7, 0}},
          {"/etc", "ld.so.conf", {Type::Fifo, 0, 0}},
          {"/etc", "ld.so.cache", {Type::Symlink, 0, 0}},
          {"/var/cache/ldconfig", "aux-cache~", {Type::CharDevice, 1, 5}}}) {
        SCOPED_TRACE(dir + "/" + name);
        RecordingSystem sys;
        setup_world(sys, plan);
        for (std::string d = dir; d != "/"; d = std::filesystem::path(d).parent_path().string())
            sys.root[d] = {Type::Directory, 0, 0};
        sys.root[dir + "/" + name] = info;
        const auto before = sys.root;
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "not refused";
        } catch (const Error& e) {
            EXPECT_THAT(e.what(), HasSubstr(dir + "/" + name));
            EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
        }
        EXPECT_EQ(sys.root, before);
        for (const auto& line : sys.calls) {
            EXPECT_FALSE(starts(line, "make_")) << line;
            EXPECT_FALSE(starts(line, "attach")) << line;
            EXPECT_FALSE(starts(line, "run")) << line;
        }
    }
}

// The image's own cache is swapped for the new one (never written in place),
// and its old contents go; nothing temporary is left.
TEST(Execute, TheImagesCacheIsExchangedForTheNewOne) {
    const Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.root["/etc"] = {Type::Directory, 0, 0};
    sys.root["/etc/ld.so.cache"] = {Type::Regular, 0, 0};
    sys.contents["root:/etc/ld.so.cache"] = "the image's old cache";
    execute(plan, target(), sys);
    const std::string temp = "root:/etc/ld.so.cache.gpubind-" + std::to_string(::getpid());
    const auto& c = sys.calls;
    EXPECT_LT(index_of(c, "write_file_at " + temp),
              index_of(c, "exchange_at " + temp + " <-> root:/etc/ld.so.cache"));
    EXPECT_LT(index_of(c, "exchange_at " + temp + " <-> root:/etc/ld.so.cache"),
              index_of(c, "remove " + temp));
    EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], sys.ldconfig_output);
    EXPECT_FALSE(sys.root.count(temp.substr(5)));
}

// A target whose directory is on another mount than the root's (a volume
// behind /usr/bin) is refused naming it; nothing is left there. The
// runtime's /dev mount takes the device nodes.
TEST(Execute, TargetsOffTheRootsOwnMountAreRefused) {
    const Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.mount_ids["root:/dev"] = 5;  // the runtime's tmpfs: device nodes go there
    sys.mount_ids["root:/usr/bin"] = 9;
    const auto before = sys.root;
    try {
        execute(plan, target(), sys);
        ADD_FAILURE() << "not refused";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("/usr/bin/nvidia-smi"));
        EXPECT_THAT(e.what(), HasSubstr("another mount"));
    }
    EXPECT_EQ(sys.root, before);
    EXPECT_TRUE(sys.mounted.empty());
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "make_file root:/usr/bin")) << line;

    RecordingSystem dev_only;
    setup_world(dev_only, plan);
    dev_only.mount_ids["root:/dev"] = 5;
    EXPECT_NO_THROW(execute(plan, target(), dev_only));
}

// --- plan.files (CUDA compat's loader entry) ---

Plan compat_plan() {
    Plan plan = sample_plan();
    plan.files.push_back({"/etc/ld.so.conf.d/000-cuda-compat.conf", "/usr/local/cuda/compat\n",
                          "CUDA forward compatibility"});
    plan.library_dirs.insert(plan.library_dirs.begin(), "/usr/local/cuda/compat");
    return plan;
}

TEST(Execute, PlannedFileIsWrittenInsideTheRootBeforeTheCacheRefresh) {
    const Plan plan = compat_plan();
    RecordingSystem sys;
    setup_world(sys, plan);  // no /etc in the image
    execute(plan, target(), sys);
    const auto& c = sys.calls;
    const std::string file = "root:/etc/ld.so.conf.d/000-cuda-compat.conf";
    const std::size_t write = index_of(c, "write_file_at " + file);
    EXPECT_LT(index_of(c, "make_dir root:/etc"), write);
    EXPECT_LT(index_of(c, "make_dir root:/etc/ld.so.conf.d"), write);
    EXPECT_LT(index_of(c, "stat_at " + file), write);
    EXPECT_LT(index_of(c, "make_symlink root:/usr/lib/x86_64-linux-gnu/libcuda.so -> libcuda.so.1"),
              write);
    EXPECT_LT(write, index_of(c, "run exe:/sbin/ldconfig -r /rootfs -X -C /dev/ld.so.cache "
                                 "/usr/local/cuda/compat /usr/lib/x86_64-linux-gnu"));
    EXPECT_EQ(sys.contents[file], "/usr/local/cuda/compat\n");
    EXPECT_EQ(sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"].type, Type::Regular);
}

TEST(Execute, FailureAfterThePlannedFileRemovesItAndItsNewDirectories) {
    const Plan plan = compat_plan();
    RecordingSystem ok;
    setup_world(ok, plan);
    execute(plan, target(), ok);
    const std::size_t write =
        index_of(ok.calls, "write_file_at root:/etc/ld.so.conf.d/000-cuda-compat.conf");
    for (std::size_t k = write; k < ok.calls.size(); ++k) {
        if (!ok.calls[k].starts_with("run ") && k != write && k != write + 1) continue;
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys;
        setup_world(sys, plan);
        const auto root_before = sys.root;
        sys.fail_at(k);
        EXPECT_THROW(execute(plan, target(), sys), Error);
        EXPECT_EQ(sys.root, root_before);
        if (k > write) {
            EXPECT_NE(std::find(sys.calls.begin(), sys.calls.end(),
                                "remove root:/etc/ld.so.conf.d/000-cuda-compat.conf"),
                      sys.calls.end());
        }
        EXPECT_FALSE(sys.in_container);
    }
}

TEST(Execute, PlannedFileAlreadyThereIsKeptAnythingElseIsRefused) {
    const Plan plan = compat_plan();
    RecordingSystem kept;
    setup_world(kept, plan);
    kept.root["/etc"] = {Type::Directory, 0, 0};
    kept.root["/etc/ld.so.conf.d"] = {Type::Directory, 0, 0};
    kept.root["/etc/ld.so.conf.d/000-cuda-compat.conf"] = {Type::Regular, 0, 0, 23};
    kept.contents["root:/etc/ld.so.conf.d/000-cuda-compat.conf"] = "/usr/local/cuda/compat\n";
    execute(plan, target(), kept);
    for (const auto& line : kept.calls)
        EXPECT_FALSE(starts(line, "write_file_at root:/etc/ld.so.conf.d/")) << line;

    // Another content (an earlier decision), or a link there: rewritten, the link not followed.
    for (Type earlier : {Type::Regular, Type::Symlink}) {
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.root["/etc"] = {Type::Directory, 0, 0};
        sys.root["/etc/ld.so.conf.d"] = {Type::Directory, 0, 0};
        sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"] = {earlier, 0, 0, 5};
        sys.contents["root:/etc/ld.so.conf.d/000-cuda-compat.conf"] = "/old\n";
        if (earlier == Type::Symlink) sys.links["/etc/ld.so.conf.d/000-cuda-compat.conf"] = "/etc/passwd";
        execute(plan, target(), sys);
        EXPECT_EQ(sys.contents["root:/etc/ld.so.conf.d/000-cuda-compat.conf"],
                  "/usr/local/cuda/compat\n");
        EXPECT_EQ(sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"].type, Type::Regular);
        for (const auto& line : sys.calls)
            EXPECT_NE(line, "read_file_at root:/etc/passwd") << line;
    }

    for (Type odd : {Type::Directory, Type::Fifo}) {
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.root["/etc"] = {Type::Directory, 0, 0};
        sys.root["/etc/ld.so.conf.d"] = {Type::Directory, 0, 0};
        sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"] = {odd, 0, 0};
        const auto root_before = sys.root;
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "accepted " << to_string(odd);
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EEXIST);
            EXPECT_THAT(e.what(), HasSubstr("/etc/ld.so.conf.d/000-cuda-compat.conf"));
            EXPECT_THAT(e.what(), HasSubstr(std::string(to_string(odd))));
        }
        for (const auto& line : sys.calls)
            EXPECT_FALSE(starts(line, "write_file_at root:")) << line;
        EXPECT_EQ(sys.root, root_before);
    }

    Plan relative = compat_plan();
    relative.files[0].path = "etc/x.conf";
    RecordingSystem sys;
    setup_world(sys, relative);
    EXPECT_THROW(execute(relative, target(), sys), Error);
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "write_file_at root:")) << line;
}

// --- cgroup parsing ---

TEST(Cgroup, DevicesDirFromProcCgroupAndMountinfo) {
    const std::string mountinfo =
        "25 1 0:23 / / rw,relatime - overlay overlay rw\n"
        "36 31 0:33 / /sys/fs/cgroup/devices rw,nosuid shared:9 - cgroup cgroup rw,devices\n"
        "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    const std::string proc = "9:name=systemd:/\n5:devices:/docker/abc\n0::/\n";
    EXPECT_EQ(cgroup::devices_dir(proc, mountinfo, "pid 7"), "/sys/fs/cgroup/devices/docker/abc");

    // A combined hierarchy, a mount point with an escaped space, a non-root mount root.
    const std::string odd =
        "40 31 0:40 /kubepods /my\\040cgroups/dev rw - cgroup cgroup rw,cpu,devices\n";
    EXPECT_EQ(cgroup::devices_dir("3:cpu,devices:/kubepods/pod1/c2\n", odd, "pid 7"),
              "/my cgroups/dev/pod1/c2");
    // The mount root does not hold the cgroup.
    EXPECT_THROW(cgroup::devices_dir("3:cpu,devices:/system/c2\n", odd, "pid 7"), Error);
    // Root cgroup.
    EXPECT_EQ(cgroup::devices_dir("5:devices:/\n", mountinfo, "pid 7"), "/sys/fs/cgroup/devices");

    try {
        cgroup::devices_dir("0::/system.slice/docker-abc.scope\n", mountinfo, "pid 7");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "set device cgroup pid 7: the process has no cgroup v1 devices controller");
    }
    EXPECT_THROW(cgroup::devices_dir("5:devices:/a/../../etc\n", mountinfo, "pid 7"), Error);
    EXPECT_THROW(cgroup::devices_dir("garbage\n", mountinfo, "pid 7"), Error);
    EXPECT_THROW(cgroup::devices_dir("5:devices:/x\n", "", "pid 7"), Error);
}

TEST(Cgroup, AllowsReadsTheKernelsList) {
    EXPECT_TRUE(cgroup::allows("a *:* rwm\n", 195, 0));
    EXPECT_TRUE(cgroup::allows("c 1:3 rwm\nc 195:* rwm\n", 195, 7));
    EXPECT_TRUE(cgroup::allows("c 195:0 rw\n", 195, 0));
    EXPECT_FALSE(cgroup::allows("c 195:0 r\n", 195, 0));
    EXPECT_FALSE(cgroup::allows("b 195:0 rwm\n", 195, 0));
    EXPECT_FALSE(cgroup::allows("c 195:1 rwm\n", 195, 0));
    EXPECT_FALSE(cgroup::allows("c *:0 m\n", 195, 0));
    EXPECT_TRUE(cgroup::allows("c *:0 rw\n", 195, 0));
    EXPECT_FALSE(cgroup::allows("", 195, 0));
    EXPECT_FALSE(cgroup::allows("c 195:x rw\nc 195 rw\n", 195, 0));
}

// --- cgroup v2 ---

// This host's layout with a private cgroup2 mount over /sys/fs/cgroup (what
// makes runc run in unified mode): the v1 hierarchies are still listed, hidden.
const std::string kPrivateV2Mountinfo =
    "22 1 8:1 / / rw,relatime - ext4 /dev/root rw\n"
    "23 22 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    "90 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
const std::string kHybridMountinfo =
    "22 1 8:1 / / rw,relatime - ext4 /dev/root rw\n"
    "23 22 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
const std::string kV2Dir = "/sys/fs/cgroup/ctr";
const std::string kV2Label = "cgroupdir:" + kV2Dir;

std::vector<test::RuntimeRule> runtime_rules() {
    return {{bpf::kDevChar, 1, 3, 7, true},
            {bpf::kDevChar, 195, 254, 7, false},
            {bpf::kDevChar, 136, std::nullopt, 7, true}};
}

void setup_v2(RecordingSystem& sys, std::vector<std::uint32_t> ids = {7}) {
    sys.proc_cgroup = "5:devices:/\n0::/ctr\n";
    sys.mountinfo = kPrivateV2Mountinfo;
    for (auto id : ids) sys.programs[id] = test::runtime_like_program(runtime_rules());
    sys.device_programs = {kBpfAllowMulti, ids};
}

// Our rules (the sample plan's two nodes) in front of the runtime's, nothing else.
void expect_extended(const std::vector<bpf::Insn>& prog) {
    const auto original = test::runtime_like_program(runtime_rules());
    for (unsigned minor : {0u, 1u, 3u, 254u, 255u})
        for (unsigned access = 1; access <= 7; ++access)
            for (unsigned major : {1u, 136u, 195u}) {
                SCOPED_TRACE(std::to_string(major) + ":" + std::to_string(minor) + " access " +
                             std::to_string(access));
                test::DeviceRequest req{bpf::kDevChar, access, major, minor};
                const bool ours = major == 195 && (minor == 0 || minor == 255) &&
                                  (access & bpf::kAccMknod) == 0;
                EXPECT_EQ(test::run_device_program(prog, req),
                          ours ? 1u : test::run_device_program(original, req));
            }
}

TEST(ExecuteV2, RuntimesProgramIsExtendedOnTheHostSideAndSwappedInTheCgroupStep) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys);
    execute(plan, target(), sys);
    const auto& c = sys.calls;
    const std::size_t enter = index_of(c, "enter_mount_ns ns:container");
    std::size_t previous = 0;
    for (const std::string& line :
         {"open_cgroup_dir " + kV2Dir, "query_device_programs " + kV2Label,
          std::string("open_program 7"), std::string("program_instructions prog:7"),
          std::string("load_device_program gpubind_dev")}) {
        std::size_t i = index_of(c, line);
        EXPECT_LT(i, enter) << line;
        EXPECT_LE(previous, i) << line;
        previous = i;
    }
    const std::size_t swap = index_of(c, "replace_device_program " + kV2Label + " prog:1000 for prog:7");
    EXPECT_LT(index_of(c, "attach tree:/host/dev/nvidia0 -> root:/dev/nvidia0"), swap);
    EXPECT_LT(swap, index_of(c, "make_tmpfs"));
    for (const auto& line : c) {
        EXPECT_FALSE(starts(line, "write_rule")) << line;
        EXPECT_FALSE(starts(line, "open_cgroup_file")) << line;
        EXPECT_FALSE(starts(line, "read_host_file /sys/fs/cgroup/devices")) << line;
    }
    // One program in place of the runtime's: ours, named, allowing the two nodes.
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});
    EXPECT_EQ(sys.program_names[1000], "gpubind_dev");
    expect_extended(sys.programs[1000]);
    EXPECT_EQ(std::count_if(c.begin(), c.end(),
                            [](const std::string& l) { return starts(l, "load_device_program"); }),
              1);
}

TEST(ExecuteV2, EveryProgramAttachedHereIsExtendedOnceEvenWithoutMulti) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys, {7, 9});
    execute(plan, target(), sys);
    EXPECT_EQ(sys.device_programs.ids, (std::vector<std::uint32_t>{1000, 1001}));
    expect_extended(sys.programs[1000]);
    expect_extended(sys.programs[1001]);

    RecordingSystem single;  // attached without BPF_F_ALLOW_MULTI: the same flags replace it
    setup_world(single, plan);
    setup_v2(single);
    single.device_programs.attach_flags = 0;
    execute(plan, target(), single);
    EXPECT_EQ(single.device_programs.ids, std::vector<std::uint32_t>{1000});

    // The runtime attached another program while gpubind extended its old
    // one: without BPF_F_REPLACE the attach would replace the newer one; refused.
    RecordingSystem raced;
    setup_world(raced, plan);
    setup_v2(raced);
    raced.device_programs.attach_flags = 0;
    raced.fail_if = [&raced](std::size_t, const std::string& line) {
        if (starts(line, "load_device_program")) raced.device_programs.ids = {77};
        return false;
    };
    try {
        execute(plan, target(), raced);
        ADD_FAILURE() << "not refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EAGAIN);
        EXPECT_THAT(e.what(), HasSubstr("changed while gpubind extended it"));
    }
    EXPECT_EQ(raced.device_programs.ids, std::vector<std::uint32_t>{77});
    for (const auto& line : raced.calls) EXPECT_FALSE(starts(line, "replace_device_program")) << line;
}

TEST(ExecuteV2, NoProgramAttachedMeansNothingToDo) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys, {});
    execute(plan, target(), sys);
    EXPECT_NE(std::find(sys.calls.begin(), sys.calls.end(), "query_device_programs " + kV2Label),
              sys.calls.end());
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "load_device_program")) << line;
        EXPECT_FALSE(starts(line, "replace_device_program")) << line;
    }
    EXPECT_TRUE(sys.device_programs.ids.empty());
}

TEST(ExecuteV2, FailureAtAnyStepPutsTheRuntimesProgramBack) {
    const Plan plan = sample_plan();
    RecordingSystem ok;
    setup_world(ok, plan);
    setup_v2(ok);
    execute(plan, target(), ok);
    const std::size_t n = ok.calls.size();
    const std::size_t swap =
        index_of(ok.calls, "replace_device_program " + kV2Label + " prog:1000 for prog:7");
    for (std::size_t k = 0; k < n; ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys;
        setup_world(sys, plan);
        setup_v2(sys);
        const auto root_before = sys.root;
        sys.fail_at(k);
        EXPECT_THROW(execute(plan, target(), sys), Error);
        EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{7});
        const bool restored =
            std::find(sys.calls.begin(), sys.calls.end(),
                      "replace_device_program " + kV2Label + " prog:7 for prog:1000") !=
            sys.calls.end();
        EXPECT_EQ(restored, k > swap) << "swapped back exactly when it had been swapped";
        EXPECT_EQ(sys.root, root_before);
        EXPECT_TRUE(sys.mounted.empty());
        EXPECT_FALSE(sys.in_container);
    }
}

TEST(ExecuteV2, KernelRefusalFailsWithOneLineOrIsSkippedWithAWarning) {
    const Plan plan = sample_plan();
    for (const char* step : {"open_cgroup_dir", "query_device_programs", "open_program",
                                   "program_instructions", "load_device_program",
                                   "replace_device_program"}) {
        SCOPED_TRACE(step);
        for (int err : {EPERM, EACCES}) {
            RecordingSystem sys;
            setup_world(sys, plan);
            setup_v2(sys);
            sys.fail_errno = err;
            sys.fail_if = [&](std::size_t, const std::string& l) { return starts(l, step); };
            try {
                execute(plan, target(), sys);
                ADD_FAILURE() << "refusal ignored";
            } catch (const Error& e) {
                EXPECT_EQ(e.code().value(), err);
                EXPECT_THAT(e.what(), HasSubstr(kV2Dir));
                EXPECT_THAT(e.what(), HasSubstr(std::strerror(err)));
                EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
            }
            EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{7});
            EXPECT_TRUE(sys.mounted.empty());

            RecordingSystem warned;
            setup_world(warned, plan);
            setup_v2(warned);
            warned.fail_errno = err;
            warned.fail_if = sys.fail_if;
            Target t = target();
            t.on_refused = OnRefused::Warn;
            execute(plan, t, warned);
            EXPECT_EQ(warned.device_programs.ids, std::vector<std::uint32_t>{7});
            EXPECT_TRUE(warned.mounted.count("root:/dev/nvidia0"));
            EXPECT_TRUE(warned.mounted.count("root:/proc/driver/nvidia"));
        }
    }
    // Not a refusal: an error whatever the policy.
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys);
    sys.fail_if = [](std::size_t, const std::string& l) { return starts(l, "load_device_program"); };
    Target t = target();
    t.on_refused = OnRefused::Warn;
    EXPECT_THROW(execute(plan, t, sys), Error);
}

TEST(ExecuteV2, ProgramsThatCannotBeReloadedAreAClearError) {
    Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys);
    sys.programs[7].insert(sys.programs[7].begin(), bpf::Insn::make(0x85, 0, 0, 0, 14));  // call
    try {
        execute(plan, target(), sys);
        FAIL() << "accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), ENOTSUP);
        EXPECT_THAT(e.what(), HasSubstr("program 7 on " + kV2Dir));
    }
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
        EXPECT_FALSE(starts(line, "load_device_program")) << line;
    }
}

TEST(Execute, CgroupV1RefusalWarnsWhenAskedTo) {
    Plan plan = sample_plan();
    for (const std::string& step : {std::string("open_cgroup_file"), "write_rule " + kAllow}) {
        SCOPED_TRACE(step);
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.fail_errno = EROFS;
        sys.fail_if = [&](std::size_t, const std::string& l) { return starts(l, step); };
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "refusal ignored";
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EROFS);
            EXPECT_THAT(e.what(), HasSubstr("/sys/fs/cgroup/devices/ctr"));
        }
        RecordingSystem warned;
        setup_world(warned, plan);
        warned.fail_errno = EROFS;
        warned.fail_if = sys.fail_if;
        Target t = target();
        t.on_refused = OnRefused::Warn;
        execute(plan, t, warned);
        EXPECT_TRUE(warned.allowed.empty());
        EXPECT_TRUE(warned.mounted.count("root:/dev/nvidia0"));
    }
}

TEST(Cgroup, LocateV1HybridPrivateV2AndPureV2) {
    // This host (hybrid): the v1 devices controller decides.
    EXPECT_EQ(cgroup::locate("5:devices:/docker/abc\n0::/docker/abc\n", kHybridMountinfo, "pid 7"),
              (cgroup::DeviceCgroup{cgroup::DeviceCgroup::Kind::V1,
                                    "/sys/fs/cgroup/devices/docker/abc"}));
    // cgroup2 mounted over /sys/fs/cgroup: the v1 mount is still listed but hidden.
    EXPECT_EQ(cgroup::locate("5:devices:/\n0::/ctr\n", kPrivateV2Mountinfo, "pid 7"),
              (cgroup::DeviceCgroup{cgroup::DeviceCgroup::Kind::V2, "/sys/fs/cgroup/ctr"}));
    EXPECT_THROW(cgroup::devices_dir("5:devices:/\n", kPrivateV2Mountinfo, "pid 7"), Error);
    // A pure v2 host.
    const std::string pure =
        "22 1 8:1 / / rw - ext4 /dev/root rw\n"
        "23 22 0:21 / /sys rw - sysfs sysfs rw\n"
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n";
    EXPECT_EQ(cgroup::locate("0::/system.slice/docker-abc.scope\n", pure, "pid 7"),
              (cgroup::DeviceCgroup{cgroup::DeviceCgroup::Kind::V2,
                                    "/sys/fs/cgroup/system.slice/docker-abc.scope"}));
    EXPECT_EQ(cgroup::locate("0::/\n", pure, "pid 7").dir, "/sys/fs/cgroup");
    // cgroup2 somewhere odd, its root a sub-cgroup, an escaped space.
    const std::string odd = pure + "50 22 0:26 /kubepods /run/my\\040cg rw - cgroup2 none rw\n";
    // Both hold it: the deepest root wins.
    EXPECT_EQ(cgroup::unified_dir("0::/kubepods/pod1/c2\n", odd, "pid 7"), "/run/my cg/pod1/c2");
    EXPECT_EQ(cgroup::unified_dir("0::/system/c2\n", odd, "pid 7"), "/sys/fs/cgroup/system/c2");
    const std::string only_odd =
        "22 1 8:1 / / rw - ext4 /dev/root rw\n"
        "50 22 0:26 /kubepods /run/my\\040cg rw - cgroup2 none rw\n";
    EXPECT_EQ(cgroup::unified_dir("0::/kubepods/pod1/c2\n", only_odd, "pid 7"),
              "/run/my cg/pod1/c2");
    try {
        cgroup::unified_dir("0::/system/c2\n", only_odd, "pid 7");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "set device cgroup pid 7: no cgroup2 hierarchy holding /system/c2 is mounted");
    }
}

TEST(Cgroup, LocateRefusesMissingAndOddEntriesClearly) {
    auto error_of = [](const std::string& proc, const std::string& mountinfo) {
        try {
            cgroup::locate(proc, mountinfo, "pid 7");
            return std::string("no error");
        } catch (const Error& e) {
            return std::string(e.what());
        }
    };
    EXPECT_EQ(error_of("", kHybridMountinfo),
              "set device cgroup pid 7: the process has neither a cgroup v1 devices controller "
              "nor a cgroup v2 cgroup");
    EXPECT_EQ(error_of("0::/ctr\n", kHybridMountinfo.substr(0, kHybridMountinfo.find("41 "))),
              "set device cgroup pid 7: no cgroup2 hierarchy holding /ctr is mounted");
    // A cgroup outside our cgroup namespace shows as "/../..".
    EXPECT_EQ(error_of("0::/../../ctr\n", kPrivateV2Mountinfo),
              "set device cgroup pid 7: odd cgroup2 cgroup path '/../../ctr'");
    EXPECT_EQ(error_of("0::ctr\n", kPrivateV2Mountinfo),
              "set device cgroup pid 7: odd cgroup2 cgroup path 'ctr'");
    EXPECT_THAT(error_of("nonsense\n", kPrivateV2Mountinfo), HasSubstr("malformed line"));
    // v1 lines only and the hierarchy hidden: no fallback to a v2 that is not there.
    EXPECT_THAT(error_of("5:devices:/\n", kPrivateV2Mountinfo),
                HasSubstr("no cgroup v1 devices hierarchy holding / is mounted"));
    // Truncated or garbled mountinfo lines are skipped, not read out of bounds.
    EXPECT_EQ(error_of("0::/ctr\n", "90 31 0:38 / /sys/fs/cgroup\n- cgroup2\n"),
              "set device cgroup pid 7: no cgroup2 hierarchy holding /ctr is mounted");
}


// --- the loader cache written by gpubind ---

Target writer_target() {
    Target t = target();
    t.ldcache = LdcacheMethod::Gpubind;
    return t;
}

Plan writer_plan() {
    Plan plan = sample_plan();
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
    return ldcache::serialize(ldcache::merge(&c, {}, {}));
}

// The image has /etc and the cache `bytes` there, of `owner` and `mode`.
void give_cache(RecordingSystem& sys, const std::string& bytes, Owner owner = {},
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

// No process: the image's cache is read by descriptor, merged, written to
// ld.so.cache~ and renamed over it, keeping the original's owner and mode.
TEST(LoaderCache, WrittenInsteadOfRunningLdconfig) {
    const Plan plan = writer_plan();
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

// Under a user namespace the new cache is created as the container's root
// (the ids switched around that call alone); an original of other ids keeps
// them, set by the host's root.
TEST(LoaderCache, OwnerUnderAUserNamespace) {
    const Plan plan = writer_plan();
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
            EXPECT_EQ(attr.owner, (Owner{5, 6}));
            EXPECT_EQ(c[c.size() - 3],
                      "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420 owner 5:6");
            EXPECT_LT(index_of(c, "read_regular_at root:/etc/ld.so.cache"), c.size() - 3);
        } else {
            EXPECT_EQ(attr.owner, (Owner{100000, 200000}));
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
    const Plan plan = writer_plan();
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
        const std::size_t write = index_of(
            ok.calls, "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420");
        for (std::size_t k = write; k < ok.calls.size(); ++k) {
            SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
            RecordingSystem sys;
            world(sys);
            const auto before = sys.root;
            sys.fail_if = [k](std::size_t i, const std::string& line) {
                return i == k && !starts(line, "replace_file_at root:/etc/ld.so.cache via ld.so.cache~ mode 420 owner");
            };
            EXPECT_THROW(execute(plan, writer_target(), sys), Error);
            EXPECT_EQ(sys.root, before);
            if (original) {
                EXPECT_EQ(sys.contents["root:/etc/ld.so.cache"], image_cache());
            }
        }
    }
}

// A FIFO, device, socket or symlink where the cache, ld.so.cache~ or /etc
// belongs is refused at once with one line, never opened or read; ldconfig
// is not run over it either.
TEST(LoaderCache, NonRegularFilesAreRefusedBeforeAnyOpen) {
    struct Case {
        const char* path;
        FileInfo info;
        const char* says;
    };
    for (const Case& k : {Case{"/etc/ld.so.cache~", {Type::Fifo, 0, 0}, "/etc/ld.so.cache~: is a FIFO"},
                          Case{"/etc/ld.so.cache~", {Type::BlockDevice, 7, 0}, "/etc/ld.so.cache~: is a block device"},
                          Case{"/etc/ld.so.cache", {Type::CharDevice, 1, 3}, "/etc/ld.so.cache: is a character device"},
                          Case{"/etc/ld.so.cache", {Type::Symlink, 0, 0}, "/etc/ld.so.cache: is a symbolic link"},
                          Case{"/etc/ld.so.cache", {Type::Socket, 0, 0}, "/etc/ld.so.cache: is a socket"},
                          Case{"/etc", {Type::Symlink, 0, 0}, "/etc: is a symbolic link"},
                          Case{"/etc", {Type::Fifo, 0, 0}, "/etc: is a FIFO"}}) {
        for (const LdcacheMethod method : {LdcacheMethod::Gpubind, LdcacheMethod::Ldconfig}) {
            SCOPED_TRACE(std::string(k.path) + (method == LdcacheMethod::Gpubind ? " gpubind" : " ldconfig"));
            const Plan plan = writer_plan();
            RecordingSystem sys;
            setup_world(sys, plan);
            if (std::string(k.path) != "/etc") sys.root["/etc"] = {Type::Directory, 0, 0};
            sys.root[k.path] = k.info;
            const auto before = sys.root;
            Target t = writer_target();
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
    Plan plan = writer_plan();
    plan.ldcache_scan = true;
    RecordingSystem sys;
    setup_world(sys, plan);
    execute(plan, writer_target(), sys);
    EXPECT_EQ(sys.ldconfig_args, (std::vector<std::string>{"-r", "/rootfs", "-X", "-C", "/dev/ld.so.cache",
                                                           "/usr/lib/x86_64-linux-gnu"}));
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "replace_file_at")) << line;
}

// A corrupt image cache is not kept (the loader ignores it too); an oversized
// one is refused.
TEST(LoaderCache, CorruptCacheReplacedOversizedRefused) {
    const Plan plan = writer_plan();
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
