// execute()'s order and rollback, against RecordingSystem (no root needed).
#include "exec_world.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind {
namespace {

using namespace exec_test;

TEST(Execute, HostSideFirstThenEachMountResolvedCreatedFlaggedAttached) {
    decide::Plan plan = sample_plan();
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

    // Every device and mount: created, flagged, attached, in that order, one
    // after the other. The mount point is created first (no lookup of a name
    // that is free), and what was created is the mount point itself (its
    // descriptor from the creation): never looked up again by name.
    struct Item {
        std::string source, target, flags;
        bool created_file;
    };
    std::vector<Item> items;
    for (const auto& d : plan.devices)
        items.push_back({d.node.host_path, d.node.path, "nosuid,noexec", true});
    for (const auto& m : plan.mounts)
        items.push_back({m.source, m.target, RecordingSystem::flag_names(m.flags), !m.directory});
    std::size_t previous = enter;
    for (const auto& it : items) {
        SCOPED_TRACE(it.target);
        std::size_t mk =
            index_of(c, (it.created_file ? "make_file root:" : "make_dir root:") + it.target);
        std::size_t fl = index_of(c, "set_mount_flags tree:" + it.source + " " + it.flags);
        std::size_t at = index_of(c, "attach tree:" + it.source + " -> root:" + it.target);
        EXPECT_EQ(std::count(c.begin(), c.end(), "open_at root:" + it.target), 0);
        EXPECT_EQ(std::count(c.begin(), c.end(), "stat_at root:" + it.target), 0);
        EXPECT_LT(previous, mk);
        EXPECT_LT(mk, fl);
        EXPECT_LT(fl, at);
        previous = at;
    }
    // Missing parents were made one component at a time, outermost first.
    EXPECT_LT(index_of(c, "make_dir root:/lib/firmware"),
              index_of(c, "make_dir root:/lib/firmware/nvidia"));
    EXPECT_LT(index_of(c, "make_dir root:/usr/lib/x86_64-linux-gnu"),
              index_of(c, "make_file root:/usr/lib/x86_64-linux-gnu/libcuda.so.1"));

    // What the container ends up with.
    for (const auto& m : plan.mounts) {
        ASSERT_TRUE(sys.mounted.count("root:" + m.target)) << m.target;
        EXPECT_EQ(sys.mounted["root:" + m.target].source, "tree:" + m.source);
        EXPECT_EQ(sys.mounted["root:" + m.target].flags, m.flags);
    }
    for (const auto& d : plan.devices) {
        const auto& mnt = sys.mounted["root:" + d.node.path];
        EXPECT_EQ(mnt.source, "tree:" + d.node.host_path);
        EXPECT_EQ(mnt.flags, util::kMountNoSuid | util::kMountNoExec)
            << "devices must not be nodev";
        EXPECT_EQ(sys.root["/dev/" + std::string(util::base_name(d.node.path))].type,
                  Type::Regular);
    }
    EXPECT_EQ(sys.root["/usr/lib/x86_64-linux-gnu/libcuda.so"].type, Type::Symlink);
    EXPECT_EQ(sys.links["/usr/lib/x86_64-linux-gnu/libcuda.so"], "libcuda.so.1");
    EXPECT_EQ(sys.allowed, (std::set<std::string>{"c 195:255 rw", "c 195:0 rw"}));

    // The proc view: written through the tmpfs descriptor, made read-only, then attached.
    const decide::ProcView& view = *plan.proc;
    EXPECT_EQ(sys.contents["tmpfs:/version"], view.version);
    EXPECT_EQ(sys.contents["tmpfs:/params"], view.params);
    EXPECT_EQ(sys.contents["tmpfs:/gpus/0000:3b:00.0/information"], view.gpus[0].information);
    const auto& proc = sys.mounted["root:/proc/driver/nvidia"];
    EXPECT_EQ(proc.source, "tmpfs:/");
    EXPECT_EQ(proc.flags,
              util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec);
    std::size_t proc_attach = index_of(c, "attach tmpfs:/ -> root:/proc/driver/nvidia");
    EXPECT_LT(index_of(c, "write_file_at tmpfs:/params"), proc_attach);
    EXPECT_LT(index_of(c, "set_mount_flags tmpfs:/ ro,nosuid,nodev,noexec"), proc_attach);
    const auto& cap = sys.mounted["tmpfs:/capabilities/gpu0/mig/gi1/access"];
    EXPECT_EQ(cap.source, "tree:" + view.capability_files[0]);
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
    const decide::Plan plan = sample_plan();
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
        EXPECT_THROW(execute(plan, target(), failing), util::Error);
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
    const decide::Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.uid_map = sys.gid_map = "         0       4343          1\n";
    exec::Target t = target();
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
    EXPECT_LT(index_of(c,
                       "run_as 0:0 exe:/sbin/ldconfig -r /rootfs -X -C /dev/ld.so.cache "
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
        EXPECT_THROW(execute(plan, t, failing), util::Error);
        EXPECT_EQ(failing.root, before);
        EXPECT_TRUE(failing.mounted.empty());
        EXPECT_TRUE(failing.links.empty());
    }
}

// The hook and `gpubind configure` build their target from the config alike.
TEST(MakeTarget, TakesThePolicyAndLdconfigFromTheConfig) {
    config::Config config = config::default_config();
    const exec::Target defaults = exec::make_target(config, 42, "/run/ctr/rootfs");
    EXPECT_EQ(defaults.pid, 42);
    EXPECT_EQ(defaults.rootfs, "/run/ctr/rootfs");
    EXPECT_EQ(defaults.cgroups, config.policy.cgroups);
    EXPECT_EQ(defaults.on_refused, config.policy.on_refused);
    EXPECT_EQ(defaults.ldcache, config.policy.ldcache);
    EXPECT_EQ(defaults.ldconfig, config.ldconfig);
    EXPECT_FALSE(defaults.join_user_ns);

    config.policy.cgroups = !config.policy.cgroups;
    config.policy.on_refused = config.policy.on_refused == config::OnRefused::Fail
                                   ? config::OnRefused::Warn
                                   : config::OnRefused::Fail;
    config.policy.ldcache = config.policy.ldcache == config::LdcacheMethod::Gpubind
                                ? config::LdcacheMethod::Ldconfig
                                : config::LdcacheMethod::Gpubind;
    config.ldconfig = "/opt/glibc/sbin/ldconfig";
    const exec::Target t = exec::make_target(config, 7, "/r");
    EXPECT_EQ(t.cgroups, config.policy.cgroups);
    EXPECT_EQ(t.on_refused, config.policy.on_refused);
    EXPECT_EQ(t.ldcache, config.policy.ldcache);
    EXPECT_EQ(t.ldconfig, "/opt/glibc/sbin/ldconfig");
}

TEST(MapId, ReadsTheKernelsIdMaps) {
    // The formats the kernel prints: columns padded to 10.
    EXPECT_EQ(os::map_id("         0          0 4294967295\n", 0, "m"), 0u);
    EXPECT_EQ(os::map_id("         0     100000      65536\n", 0, "m"), 100000u);
    EXPECT_EQ(os::map_id("         0     100000      65536\n", 65535, "m"), 165535u);
    EXPECT_EQ(os::map_id("         0     100000      65536\n", 65536, "m"), std::nullopt);
    // Rootless runc: the user as root, subordinate ids above.
    const std::string rootless =
        "         0       1000          1\n         1     100000      65536\n";
    EXPECT_EQ(os::map_id(rootless, 0, "m"), 1000u);
    EXPECT_EQ(os::map_id(rootless, 1, "m"), 100000u);
    EXPECT_EQ(os::map_id("1 100000 10", 0, "m"), std::nullopt);
    EXPECT_EQ(os::map_id("", 0, "m"), std::nullopt);  // not written yet: nothing is mapped
    for (const char* bad :
         {"0 100000\n", "0 100000 10 4\n", "0 x 10\n", "-1 0 10\n", "0 4294967296 1\n"}) {
        SCOPED_TRACE(bad);
        auto e =
            test::error_of([&] { os::map_id(std::string("0 5 0\n") + bad, 0, "pid 9 uid_map"); });
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_THAT(e.what(), HasSubstr("pid 9 uid_map"));
        EXPECT_THAT(e.what(), HasSubstr("line 2"));
    }
}

TEST(Execute, FailureAtAnyStepUndoesEverythingInReverseAndRethrowsIt) {
    const decide::Plan plan = sample_plan();
    RecordingSystem ok;
    setup_world(ok, plan);
    execute(plan, target(), ok);
    const std::size_t n = ok.calls.size();
    ASSERT_GT(n, 40u);

    // EINVAL too: the kernel's EINVAL (a mount, a setns, an open refused) is
    // a system failure, exit code 1, whichever step it comes from, never
    // "bad input" (3).
    for (const int err : {EIO, EINVAL})
        for (std::size_t k = 0; k < n; ++k) {
            SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k] + " with errno " +
                         std::to_string(err));
            RecordingSystem sys;
            setup_world(sys, plan);
            const auto root_before = sys.root;
            sys.fail_errno = err;
            sys.fail_at(k);
            try {
                execute(plan, target(), sys);
                ADD_FAILURE() << "no error";
            } catch (const util::Error& e) {
                EXPECT_EQ(e.code().value(), err);
                EXPECT_THAT(e.what(), HasSubstr("injected " + ok.calls[k]));
                EXPECT_EQ(e.kind(), util::ErrorKind::System);
                EXPECT_EQ(util::exit_code_for(e), util::kExitFailure) << e.what();
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
    const decide::Plan plan = sample_plan();
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
    } catch (const util::Error& e) {
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
    decide::Plan plan = sample_plan();
    for (pid_t pid : {pid_t{0}, pid_t{1}, pid_t{-5}, ::getpid()}) {
        RecordingSystem sys;
        setup_world(sys, plan);
        exec::Target t = target();
        t.pid = pid;
        try {
            execute(plan, t, sys);
            ADD_FAILURE() << "pid " << pid << " accepted";
        } catch (const util::Error& e) {
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
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EPERM);
        EXPECT_THAT(e.what(), HasSubstr("shares this process's mount namespace"));
    }
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;

    for (const char* bad : {"rootfs", "/", ""}) {
        RecordingSystem s2;
        exec::Target t = target();
        t.rootfs = bad;
        EXPECT_THROW(execute(plan, t, s2), util::Error) << bad;
        EXPECT_TRUE(s2.calls.empty());
    }
}

TEST(Execute, RefusesPlanPathsThatAreNotCleanAbsolutePaths) {
    for (const char* bad : {"usr/lib/libx.so", "/usr/../etc/passwd", "/usr/./lib/x", "/"}) {
        decide::Plan plan = sample_plan();
        plan.mounts[0].target = bad;
        RecordingSystem sys;
        setup_world(sys, plan);
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << bad << " accepted";
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
        }
        EXPECT_TRUE(sys.calls.empty()) << bad;
    }
    decide::Plan plan = sample_plan();
    plan.proc->gpus[0].bus_id = "../../etc";
    RecordingSystem sys;
    EXPECT_THROW(execute(plan, target(), sys), util::Error);
    EXPECT_TRUE(sys.calls.empty());
}

// Runs the sample plan against a world the test changed, expecting an error
// that mentions `needle`, and the container exactly as it was.
void expect_refused(const std::function<void(RecordingSystem&, decide::Plan&)>& change,
                    const std::string& needle) {
    decide::Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    change(sys, plan);
    const auto root_before = sys.root;
    const auto links_before = sys.links;
    try {
        execute(plan, target(), sys);
        ADD_FAILURE() << "accepted; wanted an error with '" << needle << "'";
    } catch (const util::Error& e) {
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
        [](RecordingSystem& s, decide::Plan&) {
            s.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = {Type::Directory};
        },
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1: exists and is a directory");
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) { s.root["/usr/bin/nvidia-smi"] = {Type::Fifo}; },
        "/usr/bin/nvidia-smi: exists and is a FIFO");
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) {
            s.root["/dev/nvidia0"] = {Type::CharDevice, 1, 3};
        },
        "/dev/nvidia0: exists and is a character device 1:3");
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) { s.root["/lib/firmware"] = {Type::Regular}; },
        "/lib/firmware: Not a directory");
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) {
            s.root["/proc/driver/nvidia"] = {Type::Symlink};
            s.links["/proc/driver/nvidia"] = "/";
        },
        "/proc/driver/nvidia: exists and is a symbolic link");
    // /dev itself a symlink that leads nowhere inside the root (a host path).
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) {
            s.root["/dev"] = {Type::Symlink};
            s.links["/dev"] = "/host-dev";
        },
        "/dev: is a symbolic link that leads nowhere inside the container");
    // A directory where the driver's link goes.
    expect_refused(
        [](RecordingSystem& s, decide::Plan&) {
            s.root["/usr/lib/x86_64-linux-gnu"] = {Type::Directory};
            s.root["/usr/lib/x86_64-linux-gnu/libcuda.so"] = {Type::Directory};
        },
        "symlink /usr/lib/x86_64-linux-gnu/libcuda.so: create symlink "
        "/usr/lib/x86_64-linux-gnu/libcuda.so: is a directory where the driver's link goes; "
        "refusing to replace it");
}

TEST(Execute, ExistingMountPointsOfTheRightTypeAreUsedAndKept) {
    decide::Plan plan = sample_plan();
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
    EXPECT_THROW(execute(plan, target(), again), util::Error);
    EXPECT_EQ(again.root, root_before);
    EXPECT_EQ(again.links.size(), 1u);
}

TEST(Execute, SourcesAreCheckedOnTheHostBeforeEnteringTheContainer) {
    auto expect_source_error = [](const std::function<void(RecordingSystem&)>& change,
                                  const std::string& needle) {
        decide::Plan plan = sample_plan();
        RecordingSystem sys;
        setup_world(sys, plan);
        change(sys);
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "accepted";
        } catch (const util::Error& e) {
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
    decide::Plan plan = sample_plan();
    {
        RecordingSystem sys;
        setup_world(sys, plan);
        exec::Target t = target();
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
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), ENOENT);
            EXPECT_THAT(e.what(), HasSubstr("no cgroup2 hierarchy holding "
                                            "/system.slice/ctr.scope is mounted"));
        }
        for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
    }
}

TEST(Execute, DevicesWithoutBindGetCgroupAccessOnly) {
    decide::Plan plan = sample_plan();
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
    decide::Plan plan = sample_plan();
    plan.refresh_ldcache = false;
    RecordingSystem sys;
    setup_world(sys, plan);
    execute(plan, target(), sys);
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "run ")) << line;
        EXPECT_FALSE(starts(line, "open_executable ")) << line;
    }

    RecordingSystem empty;
    execute(decide::Plan{}, target(), empty);
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
    const decide::Plan plan = sample_plan();
    for (const auto& [dir, name, info] :
         {std::tuple<std::string, std::string, os::FileInfo>{
              "/etc", "ld.so.cache~", {Type::BlockDevice, 7, 0}},
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
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr(dir + "/" + name));
            EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
            // The image's bad file is bad input, through the step's context too.
            EXPECT_EQ(util::exit_code_for(e), util::kExitInvalid);
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
    const decide::Plan plan = sample_plan();
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
    const decide::Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.mount_ids["root:/dev"] = 5;  // the runtime's tmpfs: device nodes go there
    sys.mount_ids["root:/usr/bin"] = 9;
    const auto before = sys.root;
    try {
        execute(plan, target(), sys);
        ADD_FAILURE() << "not refused";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("/usr/bin/nvidia-smi"));
        EXPECT_THAT(e.what(), HasSubstr("another mount"));
    }
    EXPECT_EQ(sys.root, before);
    EXPECT_TRUE(sys.mounted.empty());
    for (const auto& line : sys.calls)
        EXPECT_FALSE(starts(line, "make_file root:/usr/bin")) << line;

    RecordingSystem dev_only;
    setup_world(dev_only, plan);
    dev_only.mount_ids["root:/dev"] = 5;
    EXPECT_NO_THROW(execute(plan, target(), dev_only));
}

// A tmpfs the runtime mounted for the container (containerd's /run) takes
// what gpubind mounts there: once the spec says so (Target::fresh_tmpfs) and
// what is there is a tmpfs that the runtime's namespace does not show.
// Anything else on another mount stays refused: a volume of any type, a
// host tmpfs (its mount seen in the runtime's mountinfo), something else
// mounted under /run.
TEST(Execute, TargetsOnATmpfsTheRuntimeMountedAreTheContainersOwn) {
    decide::Plan plan = sample_plan();
    plan.mounts.push_back({"/host/run/nvidia-persistenced/socket",
                           "/run/nvidia-persistenced/socket", false, kLibFlags, "IPC"});
    struct Case {
        const char* what;
        bool given, tmpfs, on_host, nested;
    };
    auto world = [&](const Case& c) {
        auto sys = std::make_unique<RecordingSystem>();
        sys->statmount = true;  // shared mounts asked of statmount: mountinfo is the host's
        setup_world(*sys, plan);
        sys->host["/host/run/nvidia-persistenced/socket"] = {os::FileInfo::Type::Socket, 0, 0};
        sys->root["/run"] = {os::FileInfo::Type::Directory, 0, 0};
        sys->mount_ids["root:/dev"] = 5;
        sys->mount_ids["root:/run"] = 7;
        if (c.tmpfs) sys->tmpfs_mounts.insert(7);
        if (c.on_host) sys->host_mounts.insert(7);
        if (c.nested) {  // a host tmpfs volume at /run/nvidia-persistenced
            sys->root["/run/nvidia-persistenced"] = {os::FileInfo::Type::Directory, 0, 0};
            sys->mount_ids["root:/run/nvidia-persistenced"] = 8;
            sys->tmpfs_mounts.insert(8);
            sys->host_mounts.insert(8);
        }
        return sys;
    };
    exec::Target fresh = target();
    fresh.fresh_tmpfs = {"/run"};

    auto ok = world({"the runtime's tmpfs", true, true, false, false});
    EXPECT_NO_THROW(execute(plan, fresh, *ok));
    ASSERT_TRUE(ok->mounted.count("root:/run/nvidia-persistenced/socket"));
    EXPECT_EQ(ok->mounted.at("root:/run/nvidia-persistenced/socket").source,
              "tree:/host/run/nvidia-persistenced/socket");
    // The runtime's namespace's mountinfo: opened on the host side, read
    // once, after the mount at /run was looked at.
    EXPECT_LT(index_of(ok->calls, "open_mountinfo"),
              index_of(ok->calls, "enter_mount_ns ns:container"));
    EXPECT_LT(index_of(ok->calls, "open_dir_in_root /run"),
              index_of(ok->calls, "mountinfo_shows mountinfo 0:7"));
    EXPECT_EQ(ok->mountinfo_reads, 0u);
    // Fresh tmpfs the plan puts nothing in (the /dev every spec has is the
    // runtime's anyway): the host's mounts are not read at all.
    exec::Target elsewhere = target();
    elsewhere.fresh_tmpfs = {"/dev", "/dev/shm", "/tmp"};
    auto quiet = world({"no fresh tmpfs taken", true, true, false, false});
    quiet->mount_ids.erase("root:/run");
    EXPECT_NO_THROW(execute(plan, elsewhere, *quiet));
    for (const auto& call : quiet->calls) EXPECT_FALSE(starts(call, "open_mountinfo")) << call;

    for (const Case& c : {Case{"not in the spec's fresh tmpfs", false, true, false, false},
                          Case{"no tmpfs there", true, false, false, false},
                          Case{"a host tmpfs there", true, true, true, false},
                          Case{"a host tmpfs below it", true, true, false, true}}) {
        SCOPED_TRACE(c.what);
        auto sys = world(c);
        const auto before = sys->root;
        try {
            execute(plan, c.given ? fresh : target(), *sys);
            ADD_FAILURE() << "not refused";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("/run/nvidia-persistenced"));
            EXPECT_THAT(e.what(), HasSubstr("another mount"));
        }
        EXPECT_EQ(sys->root, before);
        EXPECT_TRUE(sys->mounted.empty());
    }
}

// A shared mount (rootfsPropagation "rshared", a shared /dev) would carry
// what gpubind mounts to its peers, the host's mount table among them:
// refused before anything is made there, whichever mount it is.
// Asked of statmount where the kernel has it, of mountinfo where not.
TEST(Execute, TargetsOnASharedMountAreRefused) {
    const decide::Plan plan = sample_plan();
    for (bool statmount : {false, true})
        for (std::uint64_t shared : {std::uint64_t{1}, std::uint64_t{5}}) {  // the root's, /dev's
            SCOPED_TRACE(std::to_string(shared) + (statmount ? " statmount" : " mountinfo"));
            RecordingSystem sys;
            sys.statmount = statmount;
            setup_world(sys, plan);
            sys.mount_ids["root:/dev"] = 5;
            sys.shared_mounts = {shared};
            const auto before = sys.root;
            try {
                execute(plan, target(), sys);
                ADD_FAILURE() << "not refused";
            } catch (const util::Error& e) {
                EXPECT_THAT(e.what(), HasSubstr("shared mount"));
                EXPECT_THAT(e.what(), HasSubstr(shared == 5 ? "/dev/nvidia" : "/usr/"));
            }
            EXPECT_EQ(sys.root, before);
            EXPECT_TRUE(sys.mounted.empty());
        }
}

// The container's mountinfo is read once per start, however many mounts
// (the root's, the runtime's /dev and /proc) are asked about.
TEST(Execute, MountinfoIsReadOncePerStart) {
    const decide::Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.mount_ids["root:/dev"] = 5;
    sys.mount_ids["root:/proc"] = 6;
    execute(plan, target(), sys);
    EXPECT_EQ(sys.mountinfo_reads, 1u);
    // A kernel with statmount(2) answers for each mount: no mountinfo at all.
    RecordingSystem fast;
    fast.statmount = true;
    setup_world(fast, plan);
    fast.mount_ids["root:/dev"] = 5;
    fast.mount_ids["root:/proc"] = 6;
    execute(plan, target(), fast);
    EXPECT_EQ(fast.mountinfo_reads, 0u);
    EXPECT_FALSE(fast.mounted.empty());
}

TEST(MountIsShared, ReadsTheOptionalFieldsOfItsOwnLine) {
    const std::string mountinfo =
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "23 22 0:22 / /dev rw,nosuid master:2 - tmpfs tmpfs rw\n"
        "24 22 0:23 / /data rw shared:7 master:3 - ext4 /dev/vdb rw\n"
        "25 22 0:24 /x /shared:9 rw - tmpfs shared:9 rw\n";
    EXPECT_TRUE(os::mount_is_shared(mountinfo, 22));
    EXPECT_FALSE(os::mount_is_shared(mountinfo, 23));  // a slave only
    EXPECT_TRUE(os::mount_is_shared(mountinfo, 24));   // shared and a slave
    EXPECT_FALSE(os::mount_is_shared(mountinfo, 25));  // "shared:" only in the path and source
    EXPECT_FALSE(os::mount_is_shared(mountinfo, 2));   // not listed ("22" does not match)
    EXPECT_FALSE(os::mount_is_shared("", 22));
}

// --- plan.files (CUDA compat's loader entry) ---

decide::Plan compat_plan() {
    decide::Plan plan = sample_plan();
    plan.files.push_back({"/etc/ld.so.conf.d/000-cuda-compat.conf", "/usr/local/cuda/compat\n",
                          "CUDA forward compatibility"});
    plan.library_dirs.insert(plan.library_dirs.begin(), "/usr/local/cuda/compat");
    return plan;
}

TEST(Execute, PlannedFileIsWrittenInsideTheRootBeforeTheCacheRefresh) {
    const decide::Plan plan = compat_plan();
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
    EXPECT_LT(write, index_of(c,
                              "run exe:/sbin/ldconfig -r /rootfs -X -C /dev/ld.so.cache "
                              "/usr/local/cuda/compat /usr/lib/x86_64-linux-gnu"));
    EXPECT_EQ(sys.contents[file], "/usr/local/cuda/compat\n");
    EXPECT_EQ(sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"].type, Type::Regular);
}

TEST(Execute, FailureAfterThePlannedFileRemovesItAndItsNewDirectories) {
    const decide::Plan plan = compat_plan();
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
        EXPECT_THROW(execute(plan, target(), sys), util::Error);
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
    const decide::Plan plan = compat_plan();
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
        if (earlier == Type::Symlink)
            sys.links["/etc/ld.so.conf.d/000-cuda-compat.conf"] = "/etc/passwd";
        execute(plan, target(), sys);
        EXPECT_EQ(sys.contents["root:/etc/ld.so.conf.d/000-cuda-compat.conf"],
                  "/usr/local/cuda/compat\n");
        EXPECT_EQ(sys.root["/etc/ld.so.conf.d/000-cuda-compat.conf"].type, Type::Regular);
        for (const auto& line : sys.calls)
            EXPECT_NE(line, "read_regular_at root:/etc/passwd") << line;
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
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EEXIST);
            EXPECT_THAT(e.what(), HasSubstr("/etc/ld.so.conf.d/000-cuda-compat.conf"));
            EXPECT_THAT(e.what(), HasSubstr(std::string(to_string(odd))));
        }
        for (const auto& line : sys.calls)
            EXPECT_FALSE(starts(line, "write_file_at root:")) << line;
        EXPECT_EQ(sys.root, root_before);
    }

    decide::Plan relative = compat_plan();
    relative.files[0].path = "etc/x.conf";
    RecordingSystem sys;
    setup_world(sys, relative);
    EXPECT_THROW(execute(relative, target(), sys), util::Error);
    for (const auto& line : sys.calls) EXPECT_FALSE(starts(line, "write_file_at root:")) << line;
}

// In place (gpubind-nvc without --pid, as enroot's and Apptainer's hooks run
// it): the pid shares this process's mount namespace, which is not pid 1's.
// Everything is done here; no namespace is entered or left.
TEST(Execute, InPlaceActsInThisNamespaceWithoutEnteringOne) {
    decide::Plan plan = sample_plan();
    RecordingSystem sys;
    setup_world(sys, plan);
    sys.shares_namespace = true;
    exec::Target t = target();
    t.in_place = true;
    execute(plan, t, sys);
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
        EXPECT_FALSE(starts(line, "set_fs_ids")) << line;  // created as this process
    }
    EXPECT_LT(index_of(sys.calls, "open_mount_ns 1"), index_of(sys.calls, "open_root /rootfs"));
    for (const auto& m : plan.mounts)
        EXPECT_NE(std::count(sys.calls.begin(), sys.calls.end(),
                             "attach tree:" + m.source + " -> root:" + m.target),
                  0)
            << m.target;
}

TEST(Execute, InPlaceIsRefusedInTheHostsNamespaceOrAnothers) {
    decide::Plan plan = sample_plan();
    auto refused = [&](RecordingSystem& sys, const std::string& why) {
        setup_world(sys, plan);
        exec::Target t = target();
        t.in_place = true;
        try {
            execute(plan, t, sys);
            ADD_FAILURE() << "accepted; wanted: " << why;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EPERM) << e.what();
            EXPECT_THAT(e.what(), HasSubstr(why));
        }
        for (const auto& line : sys.calls) {
            EXPECT_FALSE(starts(line, "attach")) << line;
            EXPECT_FALSE(starts(line, "make_")) << line;
            EXPECT_FALSE(starts(line, "open_root")) << line;
        }
    };
    RecordingSystem host;
    host.shares_namespace = true;
    host.host_namespace = true;
    refused(host, "this process is in the host's mount namespace (pid 1's)");
    RecordingSystem elsewhere;  // the pid is in another mount namespace
    refused(elsewhere, "is in another mount namespace than this process");

    // In a user namespace of its own (enroot's), the host's namespace is out
    // of reach: pid 1 is not asked.
    RecordingSystem userns;
    setup_world(userns, plan);
    userns.shares_namespace = true;
    userns.host_namespace = true;  // would refuse, were pid 1 compared
    userns.uid_map = "         0       4343          1\n";
    exec::Target t = target();
    t.in_place = true;
    execute(plan, t, userns);
    EXPECT_EQ(std::count(userns.calls.begin(), userns.calls.end(), "open_process 1"), 0);
}

// Issue 44 F2: from the initial user namespace, in place is refused when
// pid 1's mount namespace cannot be compared (hidden by an LSM, an empty
// /proc mounted over it, pid 1 not there): what cannot be told apart from the
// host's namespace is taken for it. The host's namespace itself is not
// modelled here (host_namespace stays false): only the failed look refuses.
TEST(Execute, InPlaceIsRefusedWhenPidOnesNamespaceCannotBeCompared) {
    decide::Plan plan = sample_plan();
    for (const char* failing : {"open_process 1", "open_mount_ns 1"})
        for (const int err : {EACCES, EPERM, ENOENT, ESRCH}) {
            SCOPED_TRACE(std::string(failing) + ": " + std::strerror(err));
            RecordingSystem sys;
            setup_world(sys, plan);
            sys.shares_namespace = true;
            sys.fail_if = [failing](std::size_t, const std::string& line) {
                return line == failing;
            };
            sys.fail_errno = err;
            exec::Target t = target();
            t.in_place = true;
            try {
                execute(plan, t, sys);
                ADD_FAILURE() << "acted in place without comparing with pid 1's namespace";
            } catch (const util::Error& e) {
                EXPECT_EQ(e.code().value(), EPERM) << e.what();
                EXPECT_THAT(e.what(), HasSubstr("pid 1's mount namespace cannot be compared"));
                EXPECT_THAT(e.what(), HasSubstr("refusing to act in place"));
                EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
            }
            for (const auto& line : sys.calls) {
                EXPECT_FALSE(starts(line, "attach")) << line;
                EXPECT_FALSE(starts(line, "make_")) << line;
                EXPECT_FALSE(starts(line, "open_root")) << line;
            }
        }
}

}  // namespace
}  // namespace gpubind
