// gpubind-nvc configure with each of its system calls failed once (issue 49):
// nvc::run through a FailingSystem (tests/support/failing_system.hpp) over
// the real one, on a real rootfs of a throwaway container
// (tests/support/fake_container.hpp) on a simulated node, every way its
// callers run it: with --pid as root (NVIDIA's legacy hook), in place as root
// (no --pid: the parent's mount namespace), and in a user namespace whose root
// is a user without privileges (enroot's and Apptainer's hooks), in place and
// with --pid (a rootless runtime's hook). For k = 1, 2, ... until a run
// completes without the fault: after the fault either the result is whole (as
// a run without it) or nothing is left: the rootfs tree (names, types, modes,
// owners, link targets, bytes), the mounts of the container's namespace and of
// the host's, the container's device cgroup; and the error is one line naming
// the step and the call. Needs root (label root).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "failing_system.hpp"
#include "fake_container.hpp"
#include "files.hpp"
#include "gpubind/nvc/nvc.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "sim_node.hpp"
#include "tree_state.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr unsigned kUser = 4343;  // the unprivileged user of enroot's and Apptainer's callers

enum class Way { PidRoot, InPlaceRoot, PidUserNs, InPlaceUserNs };

std::string way_name(Way w) {
    switch (w) {
        case Way::PidRoot:
            return "PidRoot";
        case Way::InPlaceRoot:
            return "InPlaceRoot";
        case Way::PidUserNs:
            return "PidUserNs";
        case Way::InPlaceUserNs:
            return "InPlaceUserNs";
    }
    return "?";
}
bool user_ns(Way w) {
    return w == Way::PidUserNs || w == Way::InPlaceUserNs;
}

// A cgroup v1 devices cgroup of its own for the container, its rules as the
// kernel lists them ("" where the host has no v1 devices controller).
class DeviceCgroup {
  public:
    DeviceCgroup() {
        if (!fs::is_directory("/sys/fs/cgroup/devices")) return;
        dir_ = "/sys/fs/cgroup/devices/gpubind-nvc-walk-" + std::to_string(::getpid());
        fs::create_directory(dir_);
        put("devices.deny", "a");
        put("devices.allow", "c 1:3 rwm");
    }
    ~DeviceCgroup() {
        if (!dir_.empty()) ::rmdir(dir_.c_str());
    }
    DeviceCgroup(const DeviceCgroup&) = delete;
    DeviceCgroup& operator=(const DeviceCgroup&) = delete;
    void add(pid_t pid) {
        if (!dir_.empty()) put("cgroup.procs", std::to_string(pid));
    }
    std::string list() const { return dir_.empty() ? "" : test::slurp(dir_ / "devices.list"); }

  private:
    void put(const char* name, const std::string& text) {
        const int fd = ::open((dir_ / name).c_str(), O_WRONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0) << dir_ / name;
        EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()))
            << dir_ / name << ": " << std::strerror(errno);
        ::close(fd);
    }
    fs::path dir_;
};

using Outcome = test::FaultOutcome;

using WalkBase = test::SimNodeTestWithParam<Way>;

class NvcWalk : public WalkBase {
  protected:
    NvcWalk() : WalkBase("gpubind-nvc-walk") { node_options().gpus(2); }

    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
        WalkBase::SetUp();
        // The user reaches the node's files and the rootfs through it.
        fs::permissions(dir(), fs::perms(0755));
        fs::permissions(root(), fs::perms(0755));
        rootfs_ = dir() / "rootfs";
        host_mountinfo_ = util::read_file("/proc/self/mountinfo", 16u << 20);
        host_ns_ = fs::read_symlink("/proc/self/ns/mnt");
        cwd_ = fs::current_path();
    }

    // A fresh rootfs: /dev, /etc with ld.so.conf, the library directory; the
    // user's in a user namespace, as an unprivileged tool unpacks it.
    void make_rootfs() {
        fs::remove_all(rootfs_);
        for (const char* d : {"dev", "proc", "etc", "usr/lib/x86_64-linux-gnu", "usr/bin"})
            fs::create_directories(rootfs_ / d);
        test::write(rootfs_ / "etc/ld.so.conf", "");
        if (!user_ns(GetParam())) return;
        for (const auto& e : fs::recursive_directory_iterator(rootfs_))
            ASSERT_EQ(::lchown(e.path().c_str(), kUser, kUser), 0) << e.path();
        ASSERT_EQ(::chown(rootfs_.c_str(), kUser, kUser), 0);
    }

    // nvc configure as its caller runs it, the k-th call failing with `err`
    // (k = 0: none); in this process (root with --pid) or a child.
    Outcome configure(test::FakeContainer& c, std::size_t k, int err) {
        switch (GetParam()) {
            case Way::PidRoot:
                return Outcome::from(attempt(c.pid(), k, err));
            case Way::PidUserNs: {
                const pid_t pid = c.pid();
                return Outcome::from(test::run_in_child([&] {
                    if (!test::become_user(kUser)) return std::string("<cannot become the user>");
                    return attempt(pid, k, err);
                }));
            }
            case Way::InPlaceRoot:
            case Way::InPlaceUserNs:
                return Outcome::from(c.run_inside());
        }
        return {};
    }

    std::string attempt(std::optional<pid_t> pid, std::size_t k, int err) {
        nvc::Args args;
        args.program = "nvidia-container-cli";
        args.command = nvc::Command::Configure;
        args.global.root = root().string();  // not this host's node: nothing stored
        args.configure.select.devices = "0";
        args.configure.capabilities = {"compute", "utility"};
        args.configure.no_cgroups = user_ns(GetParam());
        args.configure.pid = pid;
        args.configure.rootfs = rootfs_.string();
        os::LinuxSystem real;
        test::FailingSystem sys(real);
        sys.fail_at(k, err);
        Outcome o;
        try {
            nvc::run(args, config(), &sys);
        } catch (const std::system_error& e) {
            o.error = e.what();
            o.code = e.code().value();
        } catch (const std::exception& e) {
            o.error = e.what();
        }
        o.fired = sys.fired();
        o.failed_call = sys.failed_call();
        return o.text();
    }

    std::unique_ptr<test::FakeContainer> container(DeviceCgroup& cgroup, std::size_t k, int err) {
        auto c = std::make_unique<test::FakeContainer>(
            user_ns(GetParam()) ? kUser : 0,
            [this, k, err] { return attempt(std::nullopt, k, err); },
            // As root in place gpubind compares the namespace with pid 1's
            // (issue 44): an init of its own, as Apptainer's callers run it.
            GetParam() == Way::InPlaceRoot);
        cgroup.add(c->pid());
        return c;
    }

    // The rootfs after a run without a fault (and that it configured the container).
    std::map<std::string, std::string> whole() {
        make_rootfs();
        DeviceCgroup cgroup;
        auto c = container(cgroup, 0, 0);
        const std::string rules = cgroup.list();
        const Outcome o = configure(*c, 0, 0);
        EXPECT_EQ(o.error, "") << "the run without a fault failed";
        EXPECT_THAT(c->mountinfo(), HasSubstr(" " + (rootfs_ / "dev/nvidia0").string() + " "));
        if (!user_ns(GetParam()) && !rules.empty()) {
            EXPECT_NE(cgroup.list(), rules) << "no device allowed";
        }
        seen_ = test::state(c->view(rootfs_));
        return test::state(rootfs_);
    }

    // Walks k = 1, 2, ... (the errno changing with k); the number of calls a
    // complete run makes.
    std::size_t walk(const std::map<std::string, std::string>& result) {
        static constexpr int kErrnos[] = {EIO, ENOSPC, EPERM, EMFILE, EINTR};
        for (std::size_t k = 1;; ++k) {
            const int err = kErrnos[k % std::size(kErrnos)];
            SCOPED_TRACE("fault " + std::string(strerrorname_np(err)) + " in call " +
                         std::to_string(k));
            make_rootfs();
            const auto before = test::state(rootfs_);
            DeviceCgroup cgroup;
            auto c = container(cgroup, k, err);
            const std::string mounts_before = c->mountinfo(), rules_before = cgroup.list();
            const Outcome o = configure(*c, k, err);
            expect_host_unchanged();
            if (!o.fired) {
                EXPECT_EQ(o.error, "") << "no fault injected, yet it failed";
                const auto now = test::state(rootfs_);
                EXPECT_TRUE(now == result) << "not as without the fault:\n"
                                           << test::diff(result, now);
                return k - 1;
            }
            SCOPED_TRACE("the failing call: " + o.failed_call);
            const auto now = test::state(rootfs_);
            if (o.error.empty()) {
                // Carried on past the fault (a step retried, or done another
                // way: the proc view over its parent where the directory
                // cannot be made): the container sees what it sees without it.
                // The view's parent is then the tmpfs's root (0555, not the
                // 0755 directory made): that mode alone may differ.
                auto seen = test::state(c->view(rootfs_)), whole_seen = seen_;
                seen.erase("proc/driver");
                whole_seen.erase("proc/driver");
                EXPECT_TRUE(seen == whole_seen) << "not as without the fault:\n"
                                                << test::diff(whole_seen, seen);
                continue;
            }
            EXPECT_THAT(o.error, Not(HasSubstr("\n")));
            // The step first, then the call (in place as root, pid 1's
            // namespace hidden (EPERM) is a refusal naming the call within).
            EXPECT_THAT(o.error, HasSubstr(o.failed_call + " (fault injected"));
            EXPECT_FALSE(o.error.starts_with(o.failed_call)) << "no step named";
            EXPECT_EQ(o.code, err) << o.error;
            EXPECT_THAT(o.error, HasSubstr(std::strerror(err)));
            EXPECT_TRUE(now == before) << o.error << "\nleft behind:\n" << test::diff(before, now);
            EXPECT_EQ(test::diff_lines(mounts_before, c->mountinfo()), "") << o.error;
            EXPECT_EQ(cgroup.list(), rules_before) << o.error;
            if (::testing::Test::HasFailure()) {
                ADD_FAILURE() << "stopped at the first faulty step: " << o.error;
                return k;
            }
            if (err == EIO) errors_.push_back(o.error);
        }
    }

    // Nothing of the host changed; back in our namespace and directory.
    void expect_host_unchanged() {
        EXPECT_EQ(
            test::diff_lines(host_mountinfo_, util::read_file("/proc/self/mountinfo", 16u << 20)),
            "")
            << "the host's mounts changed";
        EXPECT_EQ(fs::read_symlink("/proc/self/ns/mnt"), host_ns_);
        EXPECT_EQ(fs::current_path(), cwd_);
    }

    fs::path rootfs_;
    std::string host_mountinfo_;
    fs::path host_ns_, cwd_;
    std::vector<std::string> errors_;
    std::map<std::string, std::string> seen_;  // the rootfs as the container sees it, whole
};

TEST_P(NvcWalk, EachCallFailedOnceLeavesTheContainerWholeOrAsItWas) {
    const auto result = whole();
    if (::testing::Test::HasFailure()) return;
    const std::size_t calls = walk(result);
    EXPECT_GT(calls, 10u) << "the walk tried too few calls";
    for (const auto& e : errors_) std::printf("  %s\n", e.c_str());
}

INSTANTIATE_TEST_SUITE_P(Way, NvcWalk,
                         ::testing::Values(Way::PidRoot, Way::InPlaceRoot, Way::PidUserNs,
                                           Way::InPlaceUserNs),
                         [](const auto& param_info) { return way_name(param_info.param); });

}  // namespace
}  // namespace gpubind
