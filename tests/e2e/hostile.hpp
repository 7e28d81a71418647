// The hostile suites' fixture (hostile_test.cpp, hostile_holes_test.cpp): a
// simulated node, a tripwire on the host, and helpers that plant hostile
// things in an image or run the hook on a hostile state.
#pragma once

#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/strings.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr const char* kMultiarch = "/usr/lib/x86_64-linux-gnu";
// A start must end well before any runtime gives up on it (the hook's own
// budget is 45 s, its ldconfig's 30 s).
constexpr int kStartLimitSeconds = 50;

inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void plant_link(const fs::path& link, const fs::path& target) {
    std::error_code ec;
    fs::remove_all(link, ec);
    fs::create_directories(link.parent_path());
    fs::create_symlink(target, link);
}

inline void plant_fifo(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
    fs::create_directories(p.parent_path());
    if (::mkfifo(p.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + p.string());
}

inline void plant_device(const fs::path& p, unsigned maj, unsigned min) {
    std::error_code ec;
    fs::remove_all(p, ec);
    fs::create_directories(p.parent_path());
    if (::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(maj, min)) != 0)
        throw std::runtime_error("mknod " + p.string());
}

// The hook's message inside runc's error ("... stderr: gpubind-hook: <msg>\n\"").
inline std::string hook_message(const std::string& err) {
    auto at = err.find("gpubind-hook: ");
    if (at == std::string::npos) return {};
    std::string msg = err.substr(at);
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    if (auto end = msg.rfind("\\n\""); end != std::string::npos) msg.resize(end);
    return msg;
}

struct HookRun {
    int exit_code = -1;
    std::string err;
    double seconds = 0;
    bool killed = false;  // still running after the limit
};

// Runs gpubind-hook as a runtime does (env GPUBIND_CONFIG only), the state
// made from the hook's own pid by `input`; stdin closed after it unless
// `close_stdin` is false. Killed after `limit_s`.
HookRun run_hook(const fs::path& config, const std::function<std::string(pid_t)>& input,
                 bool close_stdin = true, int limit_s = 60) {
    int in[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    const std::string hook = env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH);
    const std::string env0 = "GPUBIND_CONFIG=" + config.string();
    char* argv[] = {const_cast<char*>("gpubind-hook"), const_cast<char*>("prestart"), nullptr};
    char* envp[] = {const_cast<char*>(env0.c_str()), nullptr};
    pid_t pid = 0;
    const auto t0 = Clock::now();
    int rc = ::posix_spawn(&pid, hook.c_str(), &actions, nullptr, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(err[1]);
    HookRun result;
    if (rc != 0) {
        ::close(in[1]);
        ::close(err[0]);
        result.err = "spawn failed";
        return result;
    }
    const std::string data = input(pid);
    std::thread writer([fd = in[1], &data, close_stdin] {
        std::size_t done = 0;
        while (done < data.size()) {
            ssize_t n = ::write(fd, data.data() + done, data.size() - done);
            if (n <= 0) break;  // EPIPE: the hook stopped reading
            done += static_cast<std::size_t>(n);
        }
        if (close_stdin) ::close(fd);
    });
    const auto deadline = t0 + std::chrono::seconds(limit_s);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            result.killed = true;
            ::kill(pid, SIGKILL);
            break;
        }
        pollfd p{err[0], POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        char buf[4096];
        ssize_t n = ::read(err[0], buf, sizeof buf);
        if (n <= 0) break;
        result.err.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.seconds = seconds_since(t0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    writer.join();
    if (!close_stdin) ::close(in[1]);
    ::close(err[0]);
    return result;
}

inline std::string state_json(pid_t pid, const fs::path& bundle) {
    return nlohmann::json{{"ociVersion", "1.0.2"},
                          {"id", "gpubind-hostile"},
                          {"status", "creating"},
                          {"pid", pid},
                          {"bundle", bundle.string()}}
        .dump();
}

class HostileTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        ::signal(SIGPIPE, SIG_IGN);  // the hook may stop reading a 100 MB state
        sim::Spec spec;
        spec.gpus = 2;
        spec.graphics = false;
        node_ = std::make_unique<SimNode>(spec, "gpubind-hostile-node");
    }
    static void TearDownTestSuite() { node_.reset(); }

    void SetUp() override { trip_ = std::make_unique<Tripwire>(dir_.path() / "tripwire"); }

    Bundle bundle(Layout layout = Layout::Multiarch, bool with_hook = true) {
        Bundle b(dir_.path() / ("b" + std::to_string(count_++)), layout);
        if (with_hook) b.hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_->config());
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        return b;
    }

    // One real start (`runc run`, or `<runtime> run`: gpubind-runtime in
    // runc's place; killed after `limit_s`), the container deleted after.
    static RunResult start(Bundle& b, int limit_s = kStartLimitSeconds,
                           const std::string& runtime = "") {
        static std::atomic<int> counter{0};
        b.write_spec();
        const std::string runc = env_or("GPUBIND_RUNC", "runc");
        const std::string id =
            "gpubind-hostile-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
        const std::string state = b.state_root().string();
        auto r = run_command({"timeout", "-k", "5", std::to_string(limit_s),
                              runtime.empty() ? runc : runtime, "--root", state, "run", "--bundle",
                              b.dir().string(), id});
        run_command({runc, "--root", state, "delete", "--force", id});
        return r;
    }

    // Arms the tripwire, starts the container (printing "started"), and
    // checks the host and the time taken.
    RunResult run_case(Bundle& b, const std::string& script = "echo started",
                       const std::string& runtime = "") {
        b.command(script);
        trip_->arm();
        const auto t0 = Clock::now();
        auto r = start(b, kStartLimitSeconds, runtime);
        const double took = seconds_since(t0);
        EXPECT_NE(r.exit_code, 124)
            << "the start did not end within " << kStartLimitSeconds << " s";
        EXPECT_LT(took, kStartLimitSeconds);
        EXPECT_EQ(trip_->changes(), "");
        return r;
    }

    // Refused by gpubind: one line naming the offending path and the problem.
    static void expect_refused(const RunResult& r, const std::vector<std::string>& names) {
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.out, Not(HasSubstr("started")));
        const std::string msg = hook_message(r.err);
        ASSERT_FALSE(msg.empty()) << "not refused by gpubind: " << r.err;
        EXPECT_THAT(msg, Not(HasSubstr("\\n"))) << "more than one line: " << msg;
        for (const auto& n : names) EXPECT_THAT(msg, HasSubstr(n)) << msg;
    }
    static void expect_started(const RunResult& r) {
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("started"));
    }
    // Whatever the outcome, it is one of the two good ones.
    static void expect_refused_or_contained(const RunResult& r) {
        if (r.exit_code == 0)
            EXPECT_THAT(r.out, HasSubstr("started"));
        else
            EXPECT_FALSE(hook_message(r.err).empty()) << "not refused by gpubind: " << r.err;
    }

    static const sim::Manifest& m() { return node_->manifest(); }
    static const fs::path& node() { return node_->root(); }
    static std::string lib_file(const std::string& soname) {
        for (const auto& f : m().files)
            if (f.kind == "library" && f.name == soname && !f.compat32)
                return fs::path(f.real_path).filename().string();
        return soname;
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-hostile"};
    std::unique_ptr<Tripwire> trip_;
    int count_ = 0;
};

// A /sbin/ldconfig (and friends) that, if run, writes a marker into the
// rootfs and another on the host.
inline void plant_hostile_ldconfig(const fs::path& rootfs, const fs::path& host_marker) {
    for (const char* p : {"sbin/ldconfig", "sbin/ldconfig.real", "usr/sbin/ldconfig"}) {
        fs::create_directories((rootfs / p).parent_path());
        std::ofstream(rootfs / p) << "#!/bin/sh\necho ran > /ldconfig-ran\necho ran > "
                                  << host_marker.string() << "\nexit 0\n";
        fs::permissions(rootfs / p,
                        fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    }
}

}  // namespace gpubind::test
