// execute()'s order and rollback, against RecordingSystem (no root needed).
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/error.hpp"
#include "gpubind/exec.hpp"
#include "recording_system.hpp"

namespace gpubind {
namespace {

using test::RecordingSystem;
using ::testing::HasSubstr;
using Type = FileInfo::Type;

constexpr unsigned kLibFlags = kMountReadOnly | kMountNoSuid | kMountNoDev;
const std::string kAllow = "cgroup:/sys/fs/cgroup/devices/ctr/devices.allow";
const std::string kDeny = "cgroup:/sys/fs/cgroup/devices/ctr/devices.deny";

pid_t fake_pid() {
    return ::getpid() == 4242 ? 4243 : 4242;
}

Target target() {
    Target t;
    t.pid = fake_pid();
    t.rootfs = "/rootfs";
    return t;
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
    if (starts(line, "attach ")) return "detach " + line.substr(line.find(" -> ") + 4);
    if (starts(line, "write_rule " + kAllow + " "))
        return "write_rule " + kDeny + line.substr(("write_rule " + kAllow).size());
    return "";
}

bool is_undo(const std::string& line) {
    return starts(line, "remove ") || starts(line, "detach ") ||
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

    // ldconfig last, then back home.
    EXPECT_EQ(sys.ldconfig_args,
              (std::vector<std::string>{"-r", "/rootfs", "/usr/lib/x86_64-linux-gnu"}));
    ASSERT_GE(c.size(), 3u);
    EXPECT_EQ(c[c.size() - 3], "run exe:/sbin/ldconfig -r /rootfs /usr/lib/x86_64-linux-gnu");
    EXPECT_EQ(c[c.size() - 2], "enter_mount_ns ns:own");
    EXPECT_EQ(c[c.size() - 1], "change_dir cwd");
    EXPECT_FALSE(sys.in_container);
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
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = {Type::Symlink};
            s.links["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = "/etc/shadow";
        },
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1: exists and is a symbolic link");
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
    expect_refused(
        [](RecordingSystem& s, Plan&) {
            s.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so"] = {Type::Symlink};
            s.links["/usr/lib/x86_64-linux-gnu/libcuda.so"] = "libcuda.so.stub";
        },
        "points to libcuda.so.stub, not libcuda.so.1");
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

TEST(Execute, CgroupRulesOnlyWhereNeededAndCgroupV2IsAClearError) {
    Plan plan = sample_plan();
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        Target t = target();
        t.cgroups = false;
        execute(plan, t, sys);
        for (const auto& line : sys.calls) {
            EXPECT_FALSE(starts(line, "write_rule")) << line;
            EXPECT_FALSE(starts(line, "read_proc")) << line;
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
        sys.proc_cgroup = "0::/system.slice/ctr.scope\n";
        try {
            execute(plan, target(), sys);
            FAIL() << "cgroup v2 accepted";
        } catch (const Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("cgroup v2 device access is not supported yet"));
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
                     "set device cgroup pid 7: cgroup v2 device access is not supported yet");
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

}  // namespace
}  // namespace gpubind
