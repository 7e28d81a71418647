// Root: cgroup v2 device access on the real kernel. A cgroup under the host's
// cgroup2 mount, a runtime-like device program attached to it (deny all but
// /dev/null), a child moved into it; execute() (LinuxSystem) grants a node,
// seen from a private mount namespace where cgroup2 is on /sys/fs/cgroup (as
// runc in unified mode sees it). What the child can open is the kernel's
// verdict: ENXIO for a granted 195:N (no driver behind major 195 here), EPERM
// for one that is not. Everything made here is removed at the end.
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_program.hpp"
#include "files.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The first cgroup2 mount point in this process's mountinfo (mount root "/").
fs::path cgroup2_mount() {
    std::istringstream in(read_text("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::vector<std::string> w;
        for (std::string x; f >> x;) w.push_back(x);
        for (std::size_t i = 0; i + 1 < w.size(); ++i)
            if (w[i] == "-" && w[i + 1] == "cgroup2" && w[3] == "/") return w[4];
    }
    return {};
}

// A child in its own mount namespace that opens paths on request and answers
// with the errno (0: opened).
class Child {
  public:
    Child() {
        int to[2], from[2];
        if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return;
        pid_ = ::fork();
        if (pid_ == 0) {
            ::close(to[1]);
            ::close(from[0]);
            int ok = ::unshare(CLONE_NEWNS) == 0 &&
                     ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
            if (::write(from[1], &ok, sizeof ok) != sizeof ok) ::_exit(1);
            char path[4096];
            for (;;) {
                ssize_t n = ::read(to[0], path, sizeof path - 1);
                if (n <= 0) ::_exit(0);
                path[n] = '\0';
                int fd = ::open(path, O_RDWR | O_CLOEXEC);
                int err = fd >= 0 ? 0 : errno;
                if (fd >= 0) ::close(fd);
                if (::write(from[1], &err, sizeof err) != sizeof err) ::_exit(1);
            }
        }
        ::close(to[0]);
        ::close(from[1]);
        to_ = to[1];
        from_ = from[0];
        int ok = 0;
        ready_ = pid_ > 0 && ::read(from_, &ok, sizeof ok) == sizeof ok && ok;
    }
    ~Child() {
        ::close(to_);
        ::close(from_);
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    bool ready() const { return ready_; }
    pid_t pid() const { return pid_; }
    // The errno of open(path, O_RDWR) in the child; 0 when it opened.
    int open(const std::string& path) {
        if (::write(to_, path.data(), path.size()) != static_cast<ssize_t>(path.size())) return -1;
        int err = -1;
        if (::read(from_, &err, sizeof err) != sizeof err) return -1;
        return err;
    }

  private:
    pid_t pid_ = -1;
    int to_ = -1, from_ = -1;
    bool ready_ = false;
};

// This process in a private mount namespace with cgroup2 on /sys/fs/cgroup,
// back in its own when it goes.
class PrivateCgroup2View {
  public:
    PrivateCgroup2View()
        : own_ns_(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)),
          cwd_(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) {
        if (::unshare(CLONE_NEWNS) != 0) {
            error_ = std::string("unshare: ") + std::strerror(errno);
            return;
        }
        entered_ = true;
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, nullptr) != 0)
            error_ = std::string("mount cgroup2: ") + std::strerror(errno);
    }
    ~PrivateCgroup2View() {
        if (entered_ && (::setns(own_ns_, CLONE_NEWNS) != 0 || ::fchdir(cwd_) != 0)) std::abort();
        ::close(own_ns_);
        ::close(cwd_);
    }
    PrivateCgroup2View(const PrivateCgroup2View&) = delete;
    PrivateCgroup2View& operator=(const PrivateCgroup2View&) = delete;
    const std::string& error() const { return error_; }

  private:
    int own_ns_, cwd_;
    bool entered_ = false;
    std::string error_;
};

// Runs `body` in a forked child where bpf(2) fails with EPERM (a seccomp
// filter, as a sandbox that refuses BPF has), returning what it returned.
std::string without_bpf(const std::function<std::string()>& body) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
    pid_t pid = ::fork();
    if (pid == 0) {
        ::close(p[0]);
        struct sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_bpf, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
        std::string out;
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            out = "seccomp failed";
        else
            try {
                out = body();
            } catch (const std::exception& e) {
                out = std::string("unexpected: ") + e.what();
            }
        if (::write(p[1], out.data(), out.size()) < 0) ::_exit(1);
        ::_exit(0);
    }
    ::close(p[1]);
    const std::string out = test::drain(p[0]);
    ::close(p[0]);
    ::waitpid(pid, nullptr, 0);
    return out;
}

class Cgroup2Test : public ::testing::Test {
  protected:
    void SetUp() override {
        mount_ = cgroup2_mount();
        ASSERT_FALSE(mount_.empty()) << "no cgroup2 mount in /proc/self/mountinfo";
        name_ = "gpubind-test-" + std::to_string(::getpid());
        dir_ = mount_ / name_;
        ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_ << ": " << std::strerror(errno);
        for (auto [name, minor] : {std::pair{"granted", kGranted}, std::pair{"other", kOther}})
            ASSERT_EQ(::mknod((nodes_ / name).c_str(), S_IFCHR | 0666, ::makedev(195, minor)), 0)
                << std::strerror(errno);
        ASSERT_EQ(::mkdir((nodes_ / "rootfs").c_str(), 0755), 0);
    }
    void TearDown() override {
        child_.reset();  // the cgroup must be empty to go
        for (int i = 0; i < 100 && ::rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_FALSE(fs::exists(dir_)) << dir_ << " left behind";
    }

    // Attaches the runtime-like program (BPF_F_ALLOW_MULTI, as runc does) and
    // returns its id.
    std::uint32_t attach_runtime_program() {
        os::LinuxSystem sys;
        runtime_prog_ = sys.load_device_program(
            test::runtime_like_program({{os::bpf::kDevChar, 1, 3, 7, true}}), "runtime_like");
        cgroup_fd_ = sys.open_cgroup_dir(dir_);
        union bpf_attr attr;
        std::memset(&attr, 0, sizeof attr);
        attr.target_fd = static_cast<std::uint32_t>(cgroup_fd_.get());
        attr.attach_bpf_fd = static_cast<std::uint32_t>(runtime_prog_.get());
        attr.attach_type = BPF_CGROUP_DEVICE;
        attr.attach_flags = BPF_F_ALLOW_MULTI;
        EXPECT_EQ(::syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof attr), 0)
            << std::strerror(errno);
        auto attached = sys.query_device_programs(cgroup_fd_.get());
        EXPECT_EQ(attached.ids.size(), 1u);
        return attached.ids.empty() ? 0 : attached.ids[0];
    }
    std::vector<std::uint32_t> attached() {
        os::LinuxSystem sys;
        return sys.query_device_programs(cgroup_fd_.get()).ids;
    }
    void start_child() {
        child_ = std::make_unique<Child>();
        ASSERT_TRUE(child_->ready());
        std::ofstream(dir_ / "cgroup.procs") << child_->pid();
        ASSERT_THAT(read_text("/proc/" + std::to_string(child_->pid()) + "/cgroup"),
                    HasSubstr("0::/" + name_ + "\n"));
    }
    decide::Plan grant_plan() const {
        decide::Plan plan;
        plan.devices.push_back({{"/dev/nvidia0", nodes_ / "granted", 195, kGranted, 0666},
                                "GPU 0",
                                /*bind=*/false});
        return plan;
    }
    exec::Target target() const {
        exec::Target t;
        t.pid = child_->pid();
        t.rootfs = nodes_ / "rootfs";
        return t;
    }

    static constexpr unsigned kGranted = 200, kOther = 201;
    test::TempDir tmp_{"gpubind-cg2"};
    fs::path nodes_ = tmp_.path();
    fs::path mount_, dir_;
    std::string name_;
    util::Fd runtime_prog_, cgroup_fd_;
    std::unique_ptr<Child> child_;
};

TEST_F(Cgroup2Test, GrantReplacesTheRuntimesProgramWithOneThatKeepsItsRules) {
    const std::uint32_t runtime_id = attach_runtime_program();
    ASSERT_NE(runtime_id, 0u);
    start_child();
    const std::string granted = (nodes_ / "granted").string(), other = (nodes_ / "other").string();
    // The runtime's program alone: only /dev/null.
    EXPECT_EQ(child_->open(granted), EPERM);
    EXPECT_EQ(child_->open(other), EPERM);
    EXPECT_EQ(child_->open("/dev/null"), 0);
    EXPECT_EQ(child_->open("/dev/zero"), EPERM);

    {
        PrivateCgroup2View v2;
        ASSERT_EQ(v2.error(), "");
        execute(grant_plan(), target());
    }
    EXPECT_EQ(child_->open(granted), ENXIO);  // allowed; no driver behind it
    EXPECT_EQ(child_->open(other), EPERM);
    EXPECT_EQ(child_->open("/dev/null"), 0);
    EXPECT_EQ(child_->open("/dev/zero"), EPERM);
    // One program, not the runtime's: ours, named so.
    auto ids = attached();
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_NE(ids[0], runtime_id);
    os::LinuxSystem sys;
    util::Fd ours = sys.open_program(ids[0]);
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof info);
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.info.bpf_fd = static_cast<std::uint32_t>(ours.get());
    attr.info.info_len = sizeof info;
    attr.info.info = reinterpret_cast<std::uintptr_t>(&info);
    ASSERT_EQ(::syscall(SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr, sizeof attr), 0);
    EXPECT_STREQ(info.name, os::bpf::kProgramName);
    EXPECT_EQ(info.type, BPF_PROG_TYPE_CGROUP_DEVICE);
}

TEST_F(Cgroup2Test, AFailureAfterTheSwapPutsTheRuntimesProgramBack) {
    const std::uint32_t runtime_id = attach_runtime_program();
    start_child();
    decide::Plan plan = grant_plan();
    plan.refresh_ldcache = true;  // ldconfig fails in an empty root: after the swap
    exec::Target t = target();
    t.ldcache = config::LdcacheMethod::Ldconfig;
    t.ldconfig = "/bin/false";
    {
        PrivateCgroup2View v2;
        ASSERT_EQ(v2.error(), "");
        try {
            execute(plan, t);
            ADD_FAILURE() << "ldconfig in an empty root succeeded";
        } catch (const util::Error& e) {
            EXPECT_THAT(e.what(), HasSubstr("ldconfig"));  // the step after the swap
        }
    }
    EXPECT_EQ(attached(), std::vector<std::uint32_t>{runtime_id});
    EXPECT_EQ(child_->open((nodes_ / "granted").string()), EPERM);
    EXPECT_EQ(child_->open("/dev/null"), 0);
}

TEST_F(Cgroup2Test, NoProgramAttachedLeavesTheCgroupAlone) {
    os::LinuxSystem sys;
    cgroup_fd_ = sys.open_cgroup_dir(dir_);
    start_child();
    {
        PrivateCgroup2View v2;
        ASSERT_EQ(v2.error(), "");
        execute(grant_plan(), target());
    }
    EXPECT_TRUE(attached().empty());
    EXPECT_EQ(child_->open((nodes_ / "granted").string()), ENXIO);
}

TEST_F(Cgroup2Test, BpfRefusedFailsNamingTheCgroupOrIsSkippedWhenTheConfigSaysSo) {
    const std::uint32_t runtime_id = attach_runtime_program();
    start_child();
    const decide::Plan plan = grant_plan();
    exec::Target t = target();
    const std::string failed = without_bpf([&] {
        PrivateCgroup2View v2;
        if (!v2.error().empty()) return v2.error();
        try {
            execute(plan, t);
            return std::string("no error");
        } catch (const util::Error& e) {
            return std::string(e.what()) + " [errno " + std::to_string(e.code().value()) + "]";
        }
    });
    EXPECT_THAT(failed, HasSubstr("set device cgroup /sys/fs/cgroup/" + name_ + ": "));
    EXPECT_THAT(failed, HasSubstr("Operation not permitted"));
    EXPECT_THAT(failed, HasSubstr("[errno " + std::to_string(EPERM) + "]"));
    EXPECT_EQ(failed.find('\n'), std::string::npos) << failed;
    EXPECT_EQ(attached(), std::vector<std::uint32_t>{runtime_id});

    t.on_refused = config::OnRefused::Warn;
    const std::string warned = without_bpf([&] {
        PrivateCgroup2View v2;
        if (!v2.error().empty()) return v2.error();
        execute(plan, t);
        return std::string("started");
    });
    EXPECT_EQ(warned, "started");
    // Without the rule: the runtime's program is still the one, the node refused.
    EXPECT_EQ(attached(), std::vector<std::uint32_t>{runtime_id});
    EXPECT_EQ(child_->open((nodes_ / "granted").string()), EPERM);
}

// The directory device programs are kept in, on a bpffs of the test's own:
// made 0700 where missing; refused, and said to be someone else's (`taken`:
// the hook then warns), where the name holds a link or another user's
// directory; refused quietly off bpffs.
TEST(ProgramDir, OnlyRootsOwnDirectoryOnBpffsIsUsed) {
    test::TempDir tmp;
    const fs::path bpffs = tmp / "bpffs";
    fs::create_directories(bpffs);
    ASSERT_EQ(::mount("bpf", bpffs.c_str(), "bpf", 0, "mode=0700"), 0) << std::strerror(errno);
    os::LinuxSystem sys;
    std::string why;
    bool taken = true;

    util::Fd made = sys.open_program_dir(bpffs / "gpubind", why, taken);
    EXPECT_TRUE(made) << why;
    EXPECT_FALSE(taken);
    struct stat st {};
    ASSERT_EQ(::lstat((bpffs / "gpubind").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u);

    fs::create_directory_symlink(bpffs / "gpubind", bpffs / "linked");
    EXPECT_FALSE(sys.open_program_dir(bpffs / "linked", why, taken));
    EXPECT_TRUE(taken);
    EXPECT_EQ(why, (bpffs / "linked").string() + ": a symbolic link, not a directory");

    fs::create_directory(bpffs / "theirs");
    ASSERT_EQ(::chown((bpffs / "theirs").c_str(), 1000, 1000), 0) << std::strerror(errno);
    EXPECT_FALSE(sys.open_program_dir(bpffs / "theirs", why, taken));
    EXPECT_TRUE(taken);
    EXPECT_THAT(why, ::testing::HasSubstr("owned by uid 1000"));

    EXPECT_FALSE(sys.open_program_dir(tmp / "elsewhere", why, taken));
    EXPECT_FALSE(taken);
    EXPECT_EQ(why, tmp.path().string() + ": not a bpffs");
    EXPECT_FALSE(fs::exists(tmp / "elsewhere"));

    made = util::Fd();
    EXPECT_EQ(::umount2(bpffs.c_str(), MNT_DETACH), 0) << std::strerror(errno);
}

}  // namespace
}  // namespace gpubind
