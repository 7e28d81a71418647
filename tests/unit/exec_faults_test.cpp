// Every system call of a start that writes the loader cache, failed once
// (issue 49): execute() with the real System (LinuxSystem) wrapped in a
// FailingSystem whose k-th call fails with EIO, ENOSPC, EPERM, EMFILE or
// EINTR, on a real temporary rootfs in a throwaway container (needs root).
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
#include <string>
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

class ExecFaults : public ::testing::TestWithParam<config::LdcacheMethod> {
  protected:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
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
    // (ldconfig's, of a library of its own, owned by 12:34, mode 0640) and
    // a leftover ld.so.cache~ of an ldconfig that died.
    void make_rootfs(Image image) {
        fs::remove_all(rootfs_);
        for (const char* d : {"dev", "etc", "usr/lib"}) fs::create_directories(rootfs_ / d);
        test::write(rootfs_ / "etc/ld.so.conf", "");
        if (image == Image::NoCache) return;
        fs::create_directories(rootfs_ / "opt/own");
        test::write(rootfs_ / "opt/own" / kOwn,
                    sim::elf::make_shared_object(sim::elf::Machine::X86_64, kOwn));
        test::write(rootfs_ / "etc/ld.so.conf", "/opt/own\n");
        test::run("/sbin/ldconfig -X -r " + rootfs_.string());
        const fs::path cache = rootfs_ / "etc/ld.so.cache";
        ASSERT_TRUE(fs::exists(cache));
        ASSERT_EQ(::chown(cache.c_str(), 12, 34), 0);
        ASSERT_EQ(::chmod(cache.c_str(), 0640), 0);
        test::write(rootfs_ / "etc/ld.so.cache~", "half a cache");
    }

    exec::Target target_for(const test::FakeContainer& c) const {
        exec::Target t;
        t.pid = c.pid();
        t.rootfs = rootfs_;
        t.cgroups = false;
        t.ldcache = GetParam();
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
            test::FakeContainer c;
            const std::string mounts_before = c.mountinfo();
            os::LinuxSystem real;
            test::FailingSystem sys(real);
            sys.fail_at(k, err);
            std::string error;
            try {
                exec::execute(plan_, target_for(c), sys);
            } catch (const util::Error& e) {
                error = e.what();
            }
            expect_host_unchanged();
            if (!sys.fired()) {
                EXPECT_EQ(error, "") << "no fault injected, yet it failed";
                const auto now = state(rootfs_);
                EXPECT_TRUE(now == whole) << "not as without the fault:\n" << diff(whole, now);
                return k - 1;
            }
            SCOPED_TRACE("the failing call: " + sys.failed_call());
            if (error.empty()) {
                // Carried on past the fault: then as a run without it.
                const auto now = state(rootfs_);
                EXPECT_TRUE(now == whole) << "not as without the fault:\n" << diff(whole, now);
                continue;
            }
            EXPECT_THAT(error, Not(HasSubstr("\n")));
            // The step first ("mount ...: ", "loader cache: ", "enter the
            // container's mount namespace: "), then the call.
            EXPECT_THAT(error, HasSubstr(": " + sys.failed_call() + " (fault injected"));
            EXPECT_THAT(error, HasSubstr(std::strerror(err)));
            const auto now = state(rootfs_);
            EXPECT_TRUE(now == before) << error << "\nleft behind:\n" << diff(before, now);
            EXPECT_EQ(c.mountinfo(), mounts_before) << error;
            if (::testing::Test::HasFailure()) {
                ADD_FAILURE() << "stopped at the first faulty step: " << error;
                return k;
            }
            if (err == EIO) errors_.push_back(error);
        }
    }

    // Nothing of the host changed; back in our namespace and directory.
    void expect_host_unchanged() {
        EXPECT_EQ(util::read_file("/proc/self/mountinfo", 16u << 20), host_mountinfo_);
        EXPECT_EQ(fs::read_symlink("/proc/self/ns/mnt"), host_ns_);
        EXPECT_EQ(fs::current_path(), cwd_);
    }

    // The rootfs after a run without a fault.
    std::map<std::string, std::string> whole(Image image) {
        make_rootfs(image);
        test::FakeContainer c;
        exec::execute(plan_, target_for(c));
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

INSTANTIATE_TEST_SUITE_P(Method, ExecFaults,
                         ::testing::Values(config::LdcacheMethod::Gpubind,
                                           config::LdcacheMethod::Ldconfig),
                         [](const auto& param_info) {
                             return param_info.param == config::LdcacheMethod::Gpubind ? "Gpubind"
                                                                                       : "Ldconfig";
                         });

}  // namespace
}  // namespace gpubind
