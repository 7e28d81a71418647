// End to end on cgroup v2: gpubind-hook registered in config.json, the real
// runc in unified mode (a private mount namespace with cgroup2 on
// /sys/fs/cgroup), a simulated node. Device access is the eBPF program on the
// container's cgroup: the hook swaps runc's for one that also allows the
// planned nodes. Inside, the planned nodes open with ENXIO (no driver behind
// them) and the node's other NVIDIA nodes are refused with EPERM; without the
// hook the same checks fail; after `runc delete` nothing of ours is left.
// Expectations come from the simulated node's manifest.
#include <linux/bpf.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

long bpf(int cmd, union bpf_attr& attr) {
    return ::syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

// The name of a loaded program, "" when it is gone.
std::string program_name(std::uint32_t id) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.prog_id = id;
    const int fd = static_cast<int>(bpf(BPF_PROG_GET_FD_BY_ID, attr));
    if (fd < 0) return "";
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof info);
    std::memset(&attr, 0, sizeof attr);
    attr.info.bpf_fd = static_cast<std::uint32_t>(fd);
    attr.info.info_len = sizeof info;
    attr.info.info = reinterpret_cast<std::uintptr_t>(&info);
    const long r = bpf(BPF_OBJ_GET_INFO_BY_FD, attr);
    ::close(fd);
    return r == 0 ? std::string(info.name) : std::string();
}

// Every program loaded on the machine named `name` (what `bpftool prog` lists).
std::vector<std::uint32_t> loaded_programs_named(const std::string& name) {
    std::vector<std::uint32_t> out;
    std::uint32_t id = 0;
    for (;;) {
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.start_id = id;
        if (bpf(BPF_PROG_GET_NEXT_ID, attr) != 0) break;
        id = attr.next_id;
        if (program_name(id) == name) out.push_back(id);
    }
    return out;
}

// The names of the device programs attached to a cgroup directory.
std::vector<std::string> attached_names(const fs::path& dir) {
    os::LinuxSystem sys;
    util::Fd fd = sys.open_cgroup_dir(dir);
    std::vector<std::string> out;
    for (auto id : sys.query_device_programs(fd.get()).ids) out.push_back(program_name(id));
    return out;
}

class Cgroup2E2e : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 4;
        node_ = std::make_unique<SimNode>(spec);
    }
    static void TearDownTestSuite() { node_.reset(); }

    static const sim::Manifest& m() { return node_->manifest(); }

    std::string id() {
        return "gpubind-cg2-" + std::to_string(::getpid()) + "-" + std::to_string(count_++);
    }

    // A sleeping container asking for GPUs 0 and 2, every NVIDIA node of the
    // node bound at /hostdev/<name> so that it can try the ones it was not given.
    Bundle bundle(bool with_hook) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)));
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        for (const auto& n : m().nodes)
            b.bind(node_->root() / n.path.substr(1),
                   "/hostdev/" + fs::path(n.path).filename().string());
        b.env("NVIDIA_VISIBLE_DEVICES=0,2").command("exec /bin/busybox sleep 600");
        b.write_spec();
        return b;
    }

    // What `probe open` must print for the node's nodes given GPUs 0 and 2
    // (utility, compute): theirs, nvidiactl and the uvm nodes open; the other
    // GPUs and nvidia-modeset are refused. Plus /dev/null, which runc allows.
    static std::pair<std::vector<std::string>, std::string> open_check() {
        std::vector<std::string> args = {"probe", "open"};
        std::string want;
        auto add = [&](const std::string& path, const std::string& result) {
            args.push_back(path);
            want += path + " " + result + "\n";
        };
        std::set<std::string> given = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                       "/dev/nvidia-uvm-tools"};
        std::set<std::string> refused = {"/dev/nvidia-modeset"};
        for (const auto& g : m().gpus)
            (g.index == 0 || g.index == 2 ? given : refused)
                .insert("/dev/nvidia" + std::to_string(g.minor));
        for (const auto& n : m().nodes) {
            const std::string name = fs::path(n.path).filename().string();
            if (given.count(n.path)) {
                add("/hostdev/" + name, "ENXIO");
                add(n.path, "ENXIO");  // the injected node
            } else if (refused.count(n.path)) {
                add("/hostdev/" + name, "EPERM");
            }
        }
        add("/dev/null", "ok");
        return {args, want};
    }

    // Waits (the kernel frees a removed cgroup's programs asynchronously) until
    // no program of ours is loaded; what is left otherwise.
    static std::vector<std::uint32_t> ours_left() {
        std::vector<std::uint32_t> left;
        for (int i = 0; i < 100; ++i) {
            left = loaded_programs_named(os::bpf::kProgramName);
            if (left.empty()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return left;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-cg2"};
    int count_ = 0;
};

TEST_F(Cgroup2E2e, HookGrantsThePlannedNodesByExtendingRuncsProgram) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    ASSERT_EQ(loaded_programs_named(os::bpf::kProgramName), std::vector<std::uint32_t>{})
        << "a program of ours is loaded before the test";
    Bundle b = bundle(/*with_hook=*/true);
    const std::string cid = id();
    fs::path cgroup_dir = fs::path("/sys/fs/cgroup") / cid;
    {
        Detached c(b, cid);
        ASSERT_TRUE(c.created()) << c.error() << read_text(node_->log());
        // runc put it in a cgroup v2 cgroup of its own, nowhere in a v1 devices cgroup.
        const std::string cg = c.proc_cgroup();
        EXPECT_THAT(cg, HasSubstr("0::/" + cid + "\n"));
        EXPECT_THAT(cg, HasSubstr(":devices:/\n"));
        ASSERT_TRUE(fs::is_directory(cgroup_dir));
        // One device program on it, ours in place of runc's.
        EXPECT_EQ(attached_names(cgroup_dir), std::vector<std::string>{os::bpf::kProgramName});

        auto [args, want] = open_check();
        auto r = c.exec(args);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, want);
        c.remove();
    }
    // Nothing of ours is left: the cgroup is gone, and with it our program.
    EXPECT_FALSE(fs::exists(cgroup_dir));
    EXPECT_EQ(ours_left(), std::vector<std::uint32_t>{});
}

// Where the config's bpf-dir is on a bpffs, the device program made for the
// first container is kept and the next container of the same kind gets that
// very program (the same id: not loaded again); both work. It outlives the
// containers until its bpffs goes.
TEST_F(Cgroup2E2e, TheDeviceProgramMadeOnceIsKeptForTheNextContainers) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    const fs::path bpffs = node_->bpf_dir().parent_path();
    fs::create_directories(bpffs);
    ASSERT_EQ(::mount("bpf", bpffs.c_str(), "bpf", 0, "mode=0700"), 0) << std::strerror(errno);
    ASSERT_EQ(loaded_programs_named(os::bpf::kProgramName), std::vector<std::uint32_t>{})
        << "a program of ours is loaded before the test";
    os::LinuxSystem sys;
    std::vector<std::uint32_t> attached;
    {
        Bundle a = bundle(/*with_hook=*/true), b = bundle(/*with_hook=*/true);
        const std::string id_a = id(), id_b = id();
        Detached first(a, id_a);
        ASSERT_TRUE(first.created()) << first.error() << read_text(node_->log());
        Detached second(b, id_b);
        ASSERT_TRUE(second.created()) << second.error() << read_text(node_->log());
        for (const std::string& cid : {id_a, id_b}) {
            util::Fd cg = sys.open_cgroup_dir(fs::path("/sys/fs/cgroup") / cid);
            const auto ids = sys.query_device_programs(cg.get()).ids;
            ASSERT_EQ(ids.size(), 1u);
            attached.push_back(ids[0]);
        }
        EXPECT_EQ(attached[0], attached[1]) << "the second container's program was loaded anew";
        EXPECT_EQ(program_name(attached[0]), os::bpf::kProgramName);
        std::vector<std::string> kept;
        for (const auto& e : fs::directory_iterator(node_->bpf_dir()))
            kept.push_back(e.path().filename().string());
        ASSERT_EQ(kept.size(), 1u);
        EXPECT_THAT(kept[0], ::testing::StartsWith("dev-"));
        EXPECT_EQ((fs::status(node_->bpf_dir()).permissions() & fs::perms::all),
                  fs::perms::owner_all);
        auto [args, want] = open_check();
        for (Detached* c : {&first, &second}) {
            auto r = c->exec(args);
            EXPECT_EQ(r.exit_code, 0) << r.err;
            EXPECT_EQ(r.out, want);
        }
        EXPECT_THAT(read_text(node_->log()), HasSubstr("device program kept as"));
        first.remove();
        second.remove();
    }
    // Kept: loaded still, attached nowhere; gone with its bpffs.
    EXPECT_EQ(loaded_programs_named(os::bpf::kProgramName),
              std::vector<std::uint32_t>{attached[0]});
    ASSERT_EQ(::umount2(bpffs.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    EXPECT_EQ(ours_left(), std::vector<std::uint32_t>{});
}

TEST_F(Cgroup2E2e, ChecksFailWithoutTheHook) {
    PrivateCgroup2 v2;
    ASSERT_EQ(v2.error(), "");
    Bundle b = bundle(/*with_hook=*/false);
    const std::string cid = id();
    Detached c(b, cid);
    ASSERT_TRUE(c.created()) << c.error();
    // runc's own program, not ours.
    auto names = attached_names(fs::path("/sys/fs/cgroup") / cid);
    EXPECT_EQ(names.size(), 1u);
    EXPECT_EQ(std::count(names.begin(), names.end(), os::bpf::kProgramName), 0);

    auto [args, want] = open_check();
    auto r = c.exec(args);
    EXPECT_NE(r.out, want);
    // Specifically: the GPUs it asked for are refused.
    for (const auto& g : m().gpus) {
        if (g.index == 0 || g.index == 2) {
            EXPECT_THAT(r.out, HasSubstr("/hostdev/nvidia" + std::to_string(g.minor) + " EPERM\n"));
        }
    }
    EXPECT_THAT(r.out, HasSubstr("/dev/null ok\n"));
}

}  // namespace
}  // namespace gpubind::test
