// Device access: the container's device cgroup located and parsed, v1 rules,
// v2 device programs extended and swapped, against RecordingSystem.
#include "device_access.hpp"

#include <spdlog/sinks/ringbuffer_sink.h>

#include "exec_world.hpp"
#include "gpubind/os/cgroup.hpp"
#include "gpubind/util/log_sink.hpp"

namespace gpubind {
namespace {

using namespace exec_test;

// --- cgroup parsing ---

TEST(Cgroup, DevicesDirFromProcCgroupAndMountinfo) {
    const std::string mountinfo =
        "25 1 0:23 / / rw,relatime - overlay overlay rw\n"
        "36 31 0:33 / /sys/fs/cgroup/devices rw,nosuid shared:9 - cgroup cgroup rw,devices\n"
        "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    const std::string proc = "9:name=systemd:/\n5:devices:/docker/abc\n0::/\n";
    EXPECT_EQ(os::cgroup::devices_dir(proc, mountinfo, "pid 7"),
              "/sys/fs/cgroup/devices/docker/abc");

    // A combined hierarchy, a mount point with an escaped space, a non-root mount root.
    const std::string odd =
        "40 31 0:40 /kubepods /my\\040cgroups/dev rw - cgroup cgroup rw,cpu,devices\n";
    EXPECT_EQ(os::cgroup::devices_dir("3:cpu,devices:/kubepods/pod1/c2\n", odd, "pid 7"),
              "/my cgroups/dev/pod1/c2");
    // The mount root does not hold the cgroup.
    EXPECT_THROW(os::cgroup::devices_dir("3:cpu,devices:/system/c2\n", odd, "pid 7"), util::Error);
    // Root cgroup.
    EXPECT_EQ(os::cgroup::devices_dir("5:devices:/\n", mountinfo, "pid 7"),
              "/sys/fs/cgroup/devices");

    try {
        os::cgroup::devices_dir("0::/system.slice/docker-abc.scope\n", mountinfo, "pid 7");
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_STREQ(e.what(),
                     "set device cgroup pid 7: the process has no cgroup v1 devices controller");
    }
    EXPECT_THROW(os::cgroup::devices_dir("5:devices:/a/../../etc\n", mountinfo, "pid 7"),
                 util::Error);
    EXPECT_THROW(os::cgroup::devices_dir("garbage\n", mountinfo, "pid 7"), util::Error);
    EXPECT_THROW(os::cgroup::devices_dir("5:devices:/x\n", "", "pid 7"), util::Error);
}

TEST(Cgroup, AllowsReadsTheKernelsList) {
    EXPECT_TRUE(os::cgroup::allows("a *:* rwm\n", 195, 0));
    EXPECT_TRUE(os::cgroup::allows("c 1:3 rwm\nc 195:* rwm\n", 195, 7));
    EXPECT_TRUE(os::cgroup::allows("c 195:0 rw\n", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("c 195:0 r\n", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("b 195:0 rwm\n", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("c 195:1 rwm\n", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("c *:0 m\n", 195, 0));
    EXPECT_TRUE(os::cgroup::allows("c *:0 rw\n", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("", 195, 0));
    EXPECT_FALSE(os::cgroup::allows("c 195:x rw\nc 195 rw\n", 195, 0));
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
    return {{os::bpf::kDevChar, 1, 3, 7, true},
            {os::bpf::kDevChar, 195, 254, 7, false},
            {os::bpf::kDevChar, 136, std::nullopt, 7, true}};
}

void setup_v2(RecordingSystem& sys, std::vector<std::uint32_t> ids = {7}) {
    sys.proc_cgroup = "5:devices:/\n0::/ctr\n";
    sys.mountinfo = kPrivateV2Mountinfo;
    for (auto id : ids) sys.programs[id] = test::runtime_like_program(runtime_rules());
    sys.device_programs = {os::kBpfAllowMulti, ids};
}

// The sample world, the container's cgroup v2 with the runtime's program 7.
RecordingSystem v2_world(const decide::Plan& plan) {
    RecordingSystem sys;
    setup_world(sys, plan);
    setup_v2(sys);
    return sys;
}

// Our rules (the sample plan's two nodes) in front of the runtime's, nothing else.
void expect_extended(const std::vector<os::bpf::Insn>& prog) {
    const auto original = test::runtime_like_program(runtime_rules());
    for (unsigned minor : {0u, 1u, 3u, 254u, 255u})
        for (unsigned access = 1; access <= 7; ++access)
            for (unsigned major : {1u, 136u, 195u}) {
                SCOPED_TRACE(std::to_string(major) + ":" + std::to_string(minor) + " access " +
                             std::to_string(access));
                test::DeviceRequest req{os::bpf::kDevChar, access, major, minor};
                const bool ours = major == 195 && (minor == 0 || minor == 255) &&
                                  (access & os::bpf::kAccMknod) == 0;
                EXPECT_EQ(test::run_device_program(prog, req),
                          ours ? 1u : test::run_device_program(original, req));
            }
}

TEST(ExecuteV2, RuntimesProgramIsExtendedOnTheHostSideAndSwappedInTheCgroupStep) {
    decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
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
    const std::size_t swap =
        index_of(c, "replace_device_program " + kV2Label + " prog:1000 for prog:7");
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
    decide::Plan plan = sample_plan();
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
    RecordingSystem raced = v2_world(plan);
    raced.device_programs.attach_flags = 0;
    raced.fail_if = [&raced](std::size_t, const std::string& line) {
        if (starts(line, "load_device_program")) raced.device_programs.ids = {77};
        return false;
    };
    try {
        execute(plan, target(), raced);
        ADD_FAILURE() << "not refused";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EAGAIN);
        EXPECT_THAT(e.what(), HasSubstr("changed while gpubind extended it"));
    }
    EXPECT_EQ(raced.device_programs.ids, std::vector<std::uint32_t>{77});
    for (const auto& line : raced.calls)
        EXPECT_FALSE(starts(line, "replace_device_program")) << line;
}

TEST(ExecuteV2, NoProgramAttachedMeansNothingToDo) {
    decide::Plan plan = sample_plan();
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
    const decide::Plan plan = sample_plan();
    RecordingSystem ok = v2_world(plan);
    execute(plan, target(), ok);
    const std::size_t n = ok.calls.size();
    const std::size_t swap =
        index_of(ok.calls, "replace_device_program " + kV2Label + " prog:1000 for prog:7");
    for (std::size_t k = 0; k < n; ++k) {
        SCOPED_TRACE("failing call " + std::to_string(k) + ": " + ok.calls[k]);
        RecordingSystem sys = v2_world(plan);
        const auto root_before = sys.root;
        sys.fail_at(k);
        EXPECT_THROW(execute(plan, target(), sys), util::Error);
        EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{7});
        const bool restored = std::find(sys.calls.begin(), sys.calls.end(),
                                        "replace_device_program " + kV2Label +
                                            " prog:7 for prog:1000") != sys.calls.end();
        EXPECT_EQ(restored, k > swap) << "swapped back exactly when it had been swapped";
        EXPECT_EQ(sys.root, root_before);
        EXPECT_TRUE(sys.mounted.empty());
        EXPECT_FALSE(sys.in_container);
    }
}

// --- device programs kept for reuse ([node] bpf-dir) ---

const std::string kBpfDir = "/sys/fs/bpf/gpubind";

exec::Target keeping_target() {
    exec::Target t = target();
    t.bpf_dir = kBpfDir;
    return t;
}

std::size_t count_starting(const std::vector<std::string>& calls, const std::string& prefix) {
    return static_cast<std::size_t>(std::count_if(
        calls.begin(), calls.end(), [&](const std::string& l) { return starts(l, prefix); }));
}

// The next container of the same kind: the runtime attached its program
// (the same instructions, another id) to a cgroup of the container's own.
void next_container(RecordingSystem& sys, std::uint32_t runtime_id) {
    sys.programs[runtime_id] = test::runtime_like_program(runtime_rules());
    sys.device_programs = {os::kBpfAllowMulti, {runtime_id}};
    sys.calls.clear();
}

TEST(ExecuteV2, AProgramKeptByAnEarlierStartIsAttachedInsteadOfLoadingItAgain) {
    const decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
    execute(plan, keeping_target(), sys);
    // The first start loads it and keeps it, under a name of its instructions.
    EXPECT_EQ(count_starting(sys.calls, "load_device_program"), 1u);
    ASSERT_EQ(sys.kept_programs.size(), 1u);
    const auto [path, kept_id] = *sys.kept_programs.begin();
    EXPECT_TRUE(starts(path, kBpfDir + "/dev-")) << path;
    EXPECT_EQ(kept_id, 1000u);
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});

    // The next containers: no load; the kept program takes the runtime's place.
    for (std::uint32_t runtime_id : {8u, 9u}) {
        SCOPED_TRACE(runtime_id);
        RecordingSystem next = sys;
        next_container(next, runtime_id);
        const std::size_t known = next.programs.size();
        execute(plan, keeping_target(), next);
        EXPECT_EQ(count_starting(next.calls, "load_device_program"), 0u);
        EXPECT_EQ(count_starting(next.calls, "keep_program"), 0u);
        EXPECT_NE(std::find(next.calls.begin(), next.calls.end(),
                            "replace_device_program " + kV2Label +
                                " prog:1000 for prog:" + std::to_string(runtime_id)),
                  next.calls.end());
        EXPECT_EQ(next.device_programs.ids, std::vector<std::uint32_t>{1000});
        EXPECT_EQ(next.programs.size(), known);
        expect_extended(next.programs[1000]);
        // Checked before use: its instructions read on the host side.
        EXPECT_LT(index_of(next.calls, "program_instructions prog:1000"),
                  index_of(next.calls, "enter_mount_ns ns:container"));
    }

    // Another runtime program (other rules): another program, kept beside.
    RecordingSystem other = sys;
    next_container(other, 8);
    other.programs[8] = test::runtime_like_program({{os::bpf::kDevChar, 1, 3, 7, true}});
    execute(plan, keeping_target(), other);
    EXPECT_EQ(count_starting(other.calls, "load_device_program"), 1u);
    EXPECT_EQ(other.kept_programs.size(), 2u);
    EXPECT_EQ(other.device_programs.ids, std::vector<std::uint32_t>{1001});
}

TEST(ExecuteV2, AKeptProgramIsUsedOnlyWhenItRunsExactlyWhatWouldBeLoaded) {
    const decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
    execute(plan, keeping_target(), sys);
    ASSERT_EQ(sys.kept_programs.size(), 1u);
    const std::string path = sys.kept_programs.begin()->first;
    // What is kept under that name runs something else (one instruction
    // changed, say a digest collision): loaded anew, and kept in its place.
    next_container(sys, 8);
    sys.programs[1000].back() = os::bpf::Insn::make(0xb7, 0, 0, 0, 1);  // r0 = 1 at the end
    execute(plan, keeping_target(), sys);
    EXPECT_EQ(count_starting(sys.calls, "load_device_program"), 1u);
    EXPECT_NE(std::find(sys.calls.begin(), sys.calls.end(), "remove " + path), sys.calls.end());
    EXPECT_EQ(sys.kept_programs.at(path), 1001u);
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1001});
    expect_extended(sys.programs[1001]);
}

TEST(ExecuteV2, WithoutAUsableProgramDirectoryEachStartLoadsItsOwn) {
    const decide::Plan plan = sample_plan();
    for (int err : {ENOTSUP, EACCES, ENOENT}) {  // not bpffs, not root's alone, no parent
        SCOPED_TRACE(std::strerror(err));
        RecordingSystem sys = v2_world(plan);
        sys.program_dir_errno = err;
        execute(plan, keeping_target(), sys);
        next_container(sys, 8);
        execute(plan, keeping_target(), sys);
        EXPECT_EQ(count_starting(sys.calls, "load_device_program"), 1u);
        EXPECT_TRUE(sys.kept_programs.empty());
        EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1001});
        expect_extended(sys.programs[1001]);
    }
    // bpf-dir = "": not even looked for.
    RecordingSystem sys = v2_world(plan);
    execute(plan, target(), sys);
    EXPECT_EQ(count_starting(sys.calls, "open_program_dir"), 0u);
    EXPECT_TRUE(sys.kept_programs.empty());
}

// Issue 21: on a bpffs mounted without mode= any user can make the kept
// programs' directory first; it is refused (the reuse lost) and that is a
// warning in the log, where the usual reasons (no bpffs) are debug lines.
TEST(ExecuteV2, AProgramDirectoryAnotherUserMadeIsAWarning) {
    const decide::Plan plan = sample_plan();
    auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_st>(128);
    ring->set_pattern("%l %v");
    auto log = std::make_shared<spdlog::logger>("test", ring);
    log->set_level(spdlog::level::trace);
    util::set_logger(log);
    struct Quiet {  // the tests after this one log nowhere, as before
        ~Quiet() { util::set_logger(std::make_shared<spdlog::logger>("test")); }
    } quiet;
    auto warnings = [&] {
        std::vector<std::string> out;
        for (const auto& line : ring->last_formatted())
            if (line.starts_with("warning ") && line.find("not kept") != std::string::npos)
                out.push_back(line);
        return out;
    };
    RecordingSystem sys = v2_world(plan);
    sys.program_dir_taken = true;
    execute(plan, keeping_target(), sys);
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});
    EXPECT_TRUE(sys.kept_programs.empty());
    const auto said = warnings();
    ASSERT_EQ(said.size(), 1u) << ::testing::PrintToString(ring->last_formatted());
    EXPECT_THAT(said[0], HasSubstr("must be root's"));

    RecordingSystem plain = v2_world(plan);
    plain.program_dir_errno = ENOTSUP;
    const std::size_t before = ring->last_formatted().size();
    execute(plan, keeping_target(), plain);
    EXPECT_EQ(warnings().size(), 1u) << "a node without bpffs warned";
    EXPECT_GT(ring->last_formatted().size(), before);
}

// Keeping is an optimisation: whichever of its steps fails, the container
// gets its devices, and a program is kept only when all of them worked.
TEST(ExecuteV2, AFailingKeepStepCostsOnlyTheReuse) {
    const decide::Plan plan = sample_plan();
    for (const char* step :
         {"open_program_dir", "open_kept_program", "program_instructions prog:1000",
          "list_dir progdir:", "keep_program"}) {
        SCOPED_TRACE(step);
        RecordingSystem sys = v2_world(plan);
        sys.fail_if = [&](std::size_t, const std::string& l) { return starts(l, step); };
        execute(plan, keeping_target(), sys);
        EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});
        expect_extended(sys.programs[1000]);
        EXPECT_TRUE(sys.kept_programs.empty());
    }
    // The kept program cannot be read at the next start: loaded anew.
    RecordingSystem sys = v2_world(plan);
    execute(plan, keeping_target(), sys);
    next_container(sys, 8);
    sys.fail_if = [](std::size_t, const std::string& l) {
        return l == "program_instructions prog:1000";
    };
    execute(plan, keeping_target(), sys);
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1001});
    expect_extended(sys.programs[1001]);
}

TEST(ExecuteV2, AProgramTheKernelRewroteIsNotKept) {
    const decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
    // The kernel shows other instructions than it was given (it rewrote some).
    sys.fail_if = [&sys](std::size_t, const std::string& l) {
        if (l == "program_instructions prog:1000")
            sys.programs[1000].push_back(os::bpf::Insn::make(0x95, 0, 0, 0, 0));
        return false;
    };
    execute(plan, keeping_target(), sys);
    EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});
    EXPECT_EQ(count_starting(sys.calls, "keep_program"), 0u);
    EXPECT_TRUE(sys.kept_programs.empty());
}

TEST(ExecuteV2, KeptProgramsAreBounded) {
    const decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
    sys.programs[1] = test::runtime_like_program(runtime_rules());
    for (int i = 0; i < 256; ++i)  // as many as are kept: every one goes for the new
        sys.kept_programs[kBpfDir + "/dev-old" + std::to_string(i)] = 1;
    sys.kept_programs[kBpfDir + "/not-ours"] = 1;
    execute(plan, keeping_target(), sys);
    ASSERT_EQ(sys.kept_programs.size(), 2u);
    EXPECT_TRUE(sys.kept_programs.count(kBpfDir + "/not-ours"));
    EXPECT_EQ(count_starting(sys.calls, "remove " + kBpfDir + "/dev-old"), 256u);
    // Under the bound, nothing goes.
    sys.kept_programs.erase(kBpfDir + "/not-ours");
    next_container(sys, 8);
    sys.programs[8] = test::runtime_like_program({{os::bpf::kDevChar, 1, 3, 7, true}});
    execute(plan, keeping_target(), sys);
    EXPECT_EQ(sys.kept_programs.size(), 2u);
    EXPECT_EQ(count_starting(sys.calls, "remove " + kBpfDir), 0u);
}

// DeviceAccess alone: each step it takes is reported with what undoes it;
// running those undos in reverse leaves the cgroup as it was.
TEST(DeviceAccess, ReportsEachStepWithItsUndo) {
    const decide::Plan plan = sample_plan();
    for (const bool v2 : {false, true}) {
        SCOPED_TRACE(v2 ? "v2" : "v1");
        RecordingSystem sys;
        setup_world(sys, plan);
        if (v2) setup_v2(sys);
        const std::vector<std::uint32_t> programs = sys.device_programs.ids;
        exec::DeviceAccess access(sys, plan.devices, config::OnRefused::Fail);
        const util::Fd pidfd = sys.open_process(fake_pid());
        access.prepare(pidfd.get(), fake_pid(), "pid");
        std::vector<std::pair<std::string, std::function<void()>>> steps;
        access.allow([&](const std::string& what, std::function<void()> undo) {
            steps.emplace_back(what, std::move(undo));
        });
        if (v2) {
            ASSERT_EQ(steps.size(), 1u);
            EXPECT_EQ(steps[0].first, kV2Dir);
            EXPECT_NE(sys.device_programs.ids, programs);
        } else {
            ASSERT_EQ(steps.size(), 2u);  // nvidiactl's and nvidia0's rules
            for (const auto& step : steps) EXPECT_EQ(step.first, kDeny.substr(7));
            EXPECT_EQ(sys.allowed.size(), 2u);
        }
        for (auto it = steps.rbegin(); it != steps.rend(); ++it) it->second();
        EXPECT_TRUE(sys.allowed.empty());
        EXPECT_EQ(sys.device_programs.ids, programs);
    }
}

TEST(ExecuteV2, KernelRefusalFailsWithOneLineOrIsSkippedWithAWarning) {
    const decide::Plan plan = sample_plan();
    for (const char* step :
         {"open_cgroup_dir", "query_device_programs", "open_program", "program_instructions",
          "load_device_program", "replace_device_program"}) {
        SCOPED_TRACE(step);
        for (int err : {EPERM, EACCES}) {
            RecordingSystem sys = v2_world(plan);
            sys.fail_errno = err;
            sys.fail_if = [&](std::size_t, const std::string& l) { return starts(l, step); };
            try {
                execute(plan, target(), sys);
                ADD_FAILURE() << "refusal ignored";
            } catch (const util::Error& e) {
                EXPECT_EQ(e.code().value(), err);
                EXPECT_THAT(e.what(), HasSubstr(kV2Dir));
                EXPECT_THAT(e.what(), HasSubstr(std::strerror(err)));
                EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
            }
            EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{7});
            EXPECT_TRUE(sys.mounted.empty());

            RecordingSystem warned = v2_world(plan);
            warned.fail_errno = err;
            warned.fail_if = sys.fail_if;
            exec::Target t = target();
            t.on_refused = config::OnRefused::Warn;
            execute(plan, t, warned);
            EXPECT_EQ(warned.device_programs.ids, std::vector<std::uint32_t>{7});
            EXPECT_TRUE(warned.mounted.count("root:/dev/nvidia0"));
            EXPECT_TRUE(warned.mounted.count("root:/proc/driver/nvidia"));
        }
    }
    // Not a refusal: an error whatever the policy.
    RecordingSystem sys = v2_world(plan);
    sys.fail_if = [](std::size_t, const std::string& l) {
        return starts(l, "load_device_program");
    };
    exec::Target t = target();
    t.on_refused = config::OnRefused::Warn;
    EXPECT_THROW(execute(plan, t, sys), util::Error);
}

TEST(ExecuteV2, ProgramsThatCannotBeReloadedAreAClearError) {
    decide::Plan plan = sample_plan();
    RecordingSystem sys = v2_world(plan);
    sys.programs[7].insert(sys.programs[7].begin(),
                           os::bpf::Insn::make(0x85, 0, 0, 0, 14));  // call
    try {
        execute(plan, target(), sys);
        FAIL() << "accepted";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ENOTSUP);
        EXPECT_THAT(e.what(), HasSubstr("program 7 on " + kV2Dir));
    }
    for (const auto& line : sys.calls) {
        EXPECT_FALSE(starts(line, "enter_mount_ns")) << line;
        EXPECT_FALSE(starts(line, "load_device_program")) << line;
    }
}

// The usual cgroup mounts (statmount) decide where they hold the container's
// cgroup: the host's mountinfo is not read. Where the container's v1 devices
// hierarchy is not among them, or the kernel cannot say, mountinfo decides.
TEST(Execute, UsualCgroupMountsSpareTheMountinfo) {
    const decide::Plan plan = sample_plan();
    auto mountinfo_reads = [](const RecordingSystem& sys) {
        return std::count(sys.calls.begin(), sys.calls.end(),
                          "read_host_file /proc/self/mountinfo");
    };
    {  // v1 at the usual place: its rules, no mountinfo.
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.usual_cgroup_mounts = sys.mountinfo;  // the same v1 devices line
        sys.mountinfo = "garbage";
        execute(plan, target(), sys);
        EXPECT_EQ(mountinfo_reads(sys), 0);
        EXPECT_FALSE(sys.allowed.empty());
    }
    {  // A pure v2 host: the program is extended, no mountinfo.
        RecordingSystem sys = v2_world(plan);
        sys.proc_cgroup = "0::/ctr\n";
        sys.usual_cgroup_mounts = "90 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        sys.mountinfo = "garbage";
        execute(plan, target(), sys);
        EXPECT_EQ(mountinfo_reads(sys), 0);
        EXPECT_EQ(sys.device_programs.ids, std::vector<std::uint32_t>{1000});
    }
    {  // A v1 devices hierarchy elsewhere: only mountinfo knows it (v1, not v2).
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.usual_cgroup_mounts = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        sys.mountinfo = "36 31 0:33 / /cg/devices rw - cgroup cgroup rw,devices\n";
        execute(plan, target(), sys);
        EXPECT_EQ(mountinfo_reads(sys), 1);
        EXPECT_FALSE(sys.allowed.empty());
        EXPECT_THAT(sys.calls, Contains(HasSubstr("/cg/devices/ctr/devices.allow")));
    }
}

TEST(Execute, CgroupV1RefusalWarnsWhenAskedTo) {
    decide::Plan plan = sample_plan();
    for (const std::string& step : {std::string("open_cgroup_file"), "write_rule " + kAllow}) {
        SCOPED_TRACE(step);
        RecordingSystem sys;
        setup_world(sys, plan);
        sys.fail_errno = EROFS;
        sys.fail_if = [&](std::size_t, const std::string& l) { return starts(l, step); };
        try {
            execute(plan, target(), sys);
            ADD_FAILURE() << "refusal ignored";
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EROFS);
            EXPECT_THAT(e.what(), HasSubstr("/sys/fs/cgroup/devices/ctr"));
        }
        RecordingSystem warned;
        setup_world(warned, plan);
        warned.fail_errno = EROFS;
        warned.fail_if = sys.fail_if;
        exec::Target t = target();
        t.on_refused = config::OnRefused::Warn;
        execute(plan, t, warned);
        EXPECT_TRUE(warned.allowed.empty());
        EXPECT_TRUE(warned.mounted.count("root:/dev/nvidia0"));
    }
}

TEST(Cgroup, LocateV1HybridPrivateV2AndPureV2) {
    // This host (hybrid): the v1 devices controller decides.
    EXPECT_EQ(
        os::cgroup::locate("5:devices:/docker/abc\n0::/docker/abc\n", kHybridMountinfo, "pid 7"),
        (os::cgroup::DeviceCgroup{os::cgroup::DeviceCgroup::Kind::V1,
                                  "/sys/fs/cgroup/devices/docker/abc"}));
    // cgroup2 mounted over /sys/fs/cgroup: the v1 mount is still listed but hidden.
    EXPECT_EQ(os::cgroup::locate("5:devices:/\n0::/ctr\n", kPrivateV2Mountinfo, "pid 7"),
              (os::cgroup::DeviceCgroup{os::cgroup::DeviceCgroup::Kind::V2, "/sys/fs/cgroup/ctr"}));
    EXPECT_THROW(os::cgroup::devices_dir("5:devices:/\n", kPrivateV2Mountinfo, "pid 7"),
                 util::Error);
    // A pure v2 host.
    const std::string pure =
        "22 1 8:1 / / rw - ext4 /dev/root rw\n"
        "23 22 0:21 / /sys rw - sysfs sysfs rw\n"
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n";
    EXPECT_EQ(os::cgroup::locate("0::/system.slice/docker-abc.scope\n", pure, "pid 7"),
              (os::cgroup::DeviceCgroup{os::cgroup::DeviceCgroup::Kind::V2,
                                        "/sys/fs/cgroup/system.slice/docker-abc.scope"}));
    EXPECT_EQ(os::cgroup::locate("0::/\n", pure, "pid 7").dir, "/sys/fs/cgroup");
    // cgroup2 somewhere odd, its root a sub-cgroup, an escaped space.
    const std::string odd = pure + "50 22 0:26 /kubepods /run/my\\040cg rw - cgroup2 none rw\n";
    // Both hold it: the deepest root wins.
    EXPECT_EQ(os::cgroup::unified_dir("0::/kubepods/pod1/c2\n", odd, "pid 7"),
              "/run/my cg/pod1/c2");
    EXPECT_EQ(os::cgroup::unified_dir("0::/system/c2\n", odd, "pid 7"), "/sys/fs/cgroup/system/c2");
    const std::string only_odd =
        "22 1 8:1 / / rw - ext4 /dev/root rw\n"
        "50 22 0:26 /kubepods /run/my\\040cg rw - cgroup2 none rw\n";
    EXPECT_EQ(os::cgroup::unified_dir("0::/kubepods/pod1/c2\n", only_odd, "pid 7"),
              "/run/my cg/pod1/c2");
    try {
        os::cgroup::unified_dir("0::/system/c2\n", only_odd, "pid 7");
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_STREQ(e.what(),
                     "set device cgroup pid 7: no cgroup2 hierarchy holding /system/c2 is mounted");
    }
}

TEST(Cgroup, LocateRefusesMissingAndOddEntriesClearly) {
    auto error_of = [](const std::string& proc, const std::string& mountinfo) {
        try {
            os::cgroup::locate(proc, mountinfo, "pid 7");
            return std::string("no error");
        } catch (const util::Error& e) {
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

}  // namespace
}  // namespace gpubind
