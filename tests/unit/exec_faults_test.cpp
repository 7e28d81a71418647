// Every system call of a start that writes the loader cache, failed once
// (issue 49): execute() with the real System (LinuxSystem) wrapped in a
// FailingSystem whose k-th call fails with EIO, ENOSPC, EPERM, EMFILE or
// EINTR, on a real temporary rootfs in a throwaway container (needs root),
// each kind of target exec's callers make: a container of the host's user
// namespace; one with a user namespace of its own, its root an unprivileged
// host user (what gpubind creates owned by that user); a rootless caller
// (that user, Target::join_user_ns, as a rootless runtime's hook); and in
// place (Target::in_place, in the container's namespaces as enroot's hook
// calls gpubind-nvc, or as root beside an init as Apptainer's does).
// For k = 1, 2, ... until a run completes without the fault: after each
// fault either the result is whole (as a run without it) or the rootfs is as
// it was (names, types, modes, owners, link targets, bytes), the container's
// mounts and the host's too, and the error is one line naming the step
// (the mount, "loader cache", "enter the container's mount namespace", ...)
// and the call that failed.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "command.hpp"
#include "failing_system.hpp"
#include "fake_container.hpp"
#include "files.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "temp_dir.hpp"
#include "tree_state.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr unsigned kLibFlags = util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev;
constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu";
constexpr const char* kSoname = "libgpubindfault.so.1";
constexpr const char* kOwn = "libimageown.so.3";

using test::diff;
using test::state;

enum class Image { NoCache, OwnCache };

// Who acts on which container (exec::Target).
enum class Kind {
    Plain,        // root, a container in the host's user namespace
    UserNs,       // root, a container whose user namespace's root is kUser
    Rootless,     // kUser, joining that container's user namespace
    InPlace,      // that container's root, in its namespaces
    InPlaceRoot,  // root in place, in a Plain container beside an init of its own
};
constexpr unsigned kUser = 4343;

class ExecFaults : public ::testing::TestWithParam<std::tuple<config::LdcacheMethod, Kind>> {
  protected:
    static Kind kind() { return std::get<1>(GetParam()); }

    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
        fs::permissions(dir_.path(), fs::perms(0755));  // the user reaches the host's files
        host_ = dir_ / "host";
        rootfs_ = dir_ / "rootfs";
        fs::create_directories(host_ / "lib");
        test::write(host_ / "lib" / kSoname,
                    sim::elf::make_shared_object(sim::elf::Machine::X86_64, kSoname));
        plan_.mounts.push_back({host_ / "lib" / kSoname, fs::path(kLibDir) / kSoname, false,
                                kLibFlags, "compute library"});
        plan_.library_dirs = {kLibDir};
        plan_.refresh_ldcache = true;
        plan_.ldcache_libraries = {
            {kSoname, std::string(kLibDir) + "/" + kSoname, ldcache::Arch::X86_64}};
        host_mountinfo_ = util::read_file("/proc/self/mountinfo", 16u << 20);
        host_ns_ = fs::read_symlink("/proc/self/ns/mnt");
        cwd_ = fs::current_path();
    }

    // A fresh rootfs: /dev, /etc with ld.so.conf; with its own cache
    // (ldconfig's, of a library of its own, mode 0640, owned by 12:34 in a
    // container of the host's user namespace) and a leftover ld.so.cache~ of
    // an ldconfig that died. In a user namespace the user's, as unpacked.
    void make_rootfs(Image image) {
        fs::remove_all(rootfs_);
        for (const char* d : {"dev", "etc", "usr/lib"}) fs::create_directories(rootfs_ / d);
        test::write(rootfs_ / "etc/ld.so.conf", "");
        if (image == Image::OwnCache) {
            fs::create_directories(rootfs_ / "opt/own");
            test::write(rootfs_ / "opt/own" / kOwn,
                        sim::elf::make_shared_object(sim::elf::Machine::X86_64, kOwn));
            test::write(rootfs_ / "etc/ld.so.conf", "/opt/own\n");
            test::run("/sbin/ldconfig -X -r " + rootfs_.string());
            ASSERT_TRUE(fs::exists(rootfs_ / "etc/ld.so.cache"));
            test::write(rootfs_ / "etc/ld.so.cache~", "half a cache");
        }
        const bool host_ids = kind() == Kind::Plain || kind() == Kind::InPlaceRoot;
        const unsigned owner = host_ids ? 0 : kUser;
        for (const auto& e : fs::recursive_directory_iterator(rootfs_))
            ASSERT_EQ(::lchown(e.path().c_str(), owner, owner), 0) << e.path();
        ASSERT_EQ(::chown(rootfs_.c_str(), owner, owner), 0);
        if (image == Image::NoCache) return;
        const fs::path cache = rootfs_ / "etc/ld.so.cache";
        if (host_ids) {
            ASSERT_EQ(::chown(cache.c_str(), 12, 34), 0);
        }
        ASSERT_EQ(::chmod(cache.c_str(), 0640), 0);
    }

    // A container of the kind: in a user namespace of its own but for Plain
    // and InPlaceRoot; the latter beside an init of its own (pid 1's mount
    // namespace readable and another, or root in place is refused).
    std::unique_ptr<test::FakeContainer> container(std::size_t k, int err) {
        const bool own_ns = kind() != Kind::Plain && kind() != Kind::InPlaceRoot;
        return std::make_unique<test::FakeContainer>(
            own_ns ? kUser : 0, [this, k, err] { return attempt(::getppid(), k, err); },
            kind() == Kind::InPlaceRoot);
    }

    // execute() with the k-th call failing with `err` (0: none), where the
    // kind's caller runs it: here, as the user in a child, or in the container.
    test::FaultOutcome run(test::FakeContainer& c, std::size_t k, int err) {
        const pid_t pid = c.pid();
        switch (kind()) {
            case Kind::Plain:
            case Kind::UserNs:
                return test::FaultOutcome::from(attempt(pid, k, err));
            case Kind::Rootless:
                return test::FaultOutcome::from(test::run_in_child([&] {
                    if (!test::become_user(kUser)) return std::string("<cannot become the user>");
                    return attempt(pid, k, err);
                }));
            case Kind::InPlace:
            case Kind::InPlaceRoot:
                return test::FaultOutcome::from(c.run_inside());
        }
        return {};
    }

    std::string attempt(pid_t pid, std::size_t k, int err) {
        os::LinuxSystem real;
        test::FailingSystem sys(real);
        sys.fail_at(k, err);
        test::FaultOutcome o;
        try {
            exec::execute(plan_, target_for(pid), sys);
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

    exec::Target target_for(pid_t pid) const {
        exec::Target t;
        t.pid = pid;
        t.rootfs = rootfs_;
        t.cgroups = false;
        t.ldcache = std::get<0>(GetParam());
        t.join_user_ns = kind() == Kind::Rootless;
        t.in_place = kind() == Kind::InPlace || kind() == Kind::InPlaceRoot;
        return t;
    }

    // Walks k = 1, 2, ... with `err` over a start on a fresh rootfs of `image`;
    // `whole` is the rootfs after a run without a fault. Returns the number
    // of calls a complete run makes.
    std::size_t walk(Image image, int err, const std::map<std::string, std::string>& whole) {
        for (std::size_t k = 1;; ++k) {
            SCOPED_TRACE("fault " + std::string(strerrorname_np(err)) + " in call " +
                         std::to_string(k));
            make_rootfs(image);
            const auto before = state(rootfs_);
            auto c = container(k, err);
            const std::string mounts_before = c->mountinfo();
            const test::FaultOutcome o = run(*c, k, err);
            const std::string& error = o.error;
            expect_host_unchanged();
            if (!o.fired) {
                EXPECT_EQ(error, "") << "no fault injected, yet it failed";
                const auto now = state(rootfs_);
                EXPECT_TRUE(now == whole) << "not as without the fault:\n" << diff(whole, now);
                return k - 1;
            }
            SCOPED_TRACE("the failing call: " + o.failed_call);
            if (error.empty()) {
                // Carried on past the fault: then as a run without it.
                const auto now = state(rootfs_);
                EXPECT_TRUE(now == whole) << "not as without the fault:\n" << diff(whole, now);
                continue;
            }
            EXPECT_THAT(error, Not(HasSubstr("\n")));
            // The step first ("mount ...: ", "loader cache: ", "enter the
            // container's mount namespace: "), then the call (root in place
            // with pid 1's namespace hidden, EPERM: a refusal naming it
            // within); the fault's errno.
            EXPECT_THAT(error, HasSubstr(o.failed_call + " (fault injected"));
            EXPECT_FALSE(error.starts_with(o.failed_call)) << "no step named: " << error;
            EXPECT_EQ(o.code, err) << error;
            EXPECT_THAT(error, HasSubstr(std::strerror(err)));
            const auto now = state(rootfs_);
            EXPECT_TRUE(now == before) << error << "\nleft behind:\n" << diff(before, now);
            EXPECT_EQ(test::diff_lines(mounts_before, c->mountinfo()), "") << error;
            if (::testing::Test::HasFailure()) {
                ADD_FAILURE() << "stopped at the first faulty step: " << error;
                return k;
            }
            if (err == EIO) errors_.push_back(error);
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

    // The rootfs after a run without a fault.
    std::map<std::string, std::string> whole(Image image) {
        make_rootfs(image);
        auto c = container(0, 0);
        const test::FaultOutcome o = run(*c, 0, 0);
        EXPECT_EQ(o.error, "") << "the run without a fault failed";
        return state(rootfs_);
    }

    test::TempDir dir_{"gpubind-faults"};
    fs::path host_, rootfs_;
    decide::Plan plan_;
    std::string host_mountinfo_;
    fs::path host_ns_, cwd_;
    std::vector<std::string> errors_;
};

TEST_P(ExecFaults, EachCallFailedOnceLeavesTheRootfsWholeOrAsItWas) {
    for (const Image image : {Image::NoCache, Image::OwnCache}) {
        SCOPED_TRACE(image == Image::NoCache ? "an image without a cache" : "its own cache");
        const auto result = whole(image);
        if (::testing::Test::HasFailure()) return;
        // The whole result: the library listed in the container's cache.
        ASSERT_TRUE(result.count("etc/ld.so.cache"));
        const std::string listing =
            test::run("/sbin/ldconfig -p -C " + (rootfs_ / "etc/ld.so.cache").string()).text;
        EXPECT_THAT(listing, HasSubstr(std::string(kSoname) + " (libc6,x86-64) => " + kLibDir));
        for (const int err : {EIO, ENOSPC, EPERM, EMFILE, EINTR}) {
            const std::size_t calls = walk(image, err, result);
            if (::testing::Test::HasFailure()) return;
            EXPECT_GT(calls, 10u) << "the walk tried too few calls";
        }
    }
    for (const auto& e : errors_) std::printf("  %s\n", e.c_str());
}

std::string param_name(
    const ::testing::TestParamInfo<std::tuple<config::LdcacheMethod, Kind>>& info) {
    static const char* const kKinds[] = {"", "UserNs", "Rootless", "InPlace", "InPlaceRoot"};
    return std::string(std::get<0>(info.param) == config::LdcacheMethod::Gpubind ? "Gpubind"
                                                                                 : "Ldconfig") +
           kKinds[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(Method, ExecFaults,
                         ::testing::Combine(::testing::Values(config::LdcacheMethod::Gpubind,
                                                              config::LdcacheMethod::Ldconfig),
                                            ::testing::Values(Kind::Plain, Kind::UserNs,
                                                              Kind::Rootless, Kind::InPlace,
                                                              Kind::InPlaceRoot)),
                         param_name);

}  // namespace
}  // namespace gpubind
