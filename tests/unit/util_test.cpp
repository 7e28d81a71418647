#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "gpubind/error.hpp"
#include "gpubind/fd.hpp"
#include "gpubind/file.hpp"
#include "gpubind/strings.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

TEST(Error, MessageNamesOperationPathAndErrno) {
    Error e(ENOENT, "open", "/etc/nothing");
    EXPECT_STREQ(e.what(), "open /etc/nothing: No such file or directory");
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_EQ(e.op(), "open");
    EXPECT_EQ(e.path(), "/etc/nothing");
    EXPECT_EQ(exit_code_for(e), kExitFailure);
}

TEST(Error, InvalidInputCarriesDetailAndMapsToInvalidExit) {
    try {
        throw_invalid("parse ld.so.cache", "/x", "truncated header");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "parse ld.so.cache /x: truncated header");
        EXPECT_EQ(exit_code_for(e), kExitInvalid);
    }
}

// --- poll_until: the one wait with a deadline (stdin, the NVML child, the sandbox) ---

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Pipe {
    Fd read, write;
    Pipe() {
        int fds[2];
        EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
        read = Fd(fds[0]);
        write = Fd(fds[1]);
    }
};

TEST(PollUntil, ReadyDescriptorReturnsAtOnceWithItsEvents) {
    Pipe p;
    ASSERT_EQ(::write(p.write.get(), "x", 1), 1);
    pollfd fds[2] = {{p.write.get(), 0, 0}, {p.read.get(), POLLIN, 0}};
    const auto start = Clock::now();
    EXPECT_TRUE(poll_until(fds, Clock::now() + milliseconds(5000), "pipe"));
    EXPECT_LT(Clock::now() - start, milliseconds(1000));
    EXPECT_EQ(fds[0].revents, 0);
    EXPECT_NE(fds[1].revents & POLLIN, 0);
}

TEST(PollUntil, NothingReadyWaitsForTheDeadlineThenSaysSo) {
    Pipe p;
    pollfd fd{p.read.get(), POLLIN, 0};
    const auto start = Clock::now();
    EXPECT_FALSE(poll_until({&fd, 1}, start + milliseconds(60), "pipe"));
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, milliseconds(59));
    EXPECT_LT(waited, milliseconds(2000));
}

TEST(PollUntil, APassedDeadlineIsNotReadyEvenWhenDataIsThere) {
    Pipe p;
    ASSERT_EQ(::write(p.write.get(), "x", 1), 1);
    pollfd fd{p.read.get(), POLLIN, 0};
    EXPECT_FALSE(poll_until({&fd, 1}, Clock::now() - milliseconds(1), "pipe"));
}

TEST(PollUntil, ClosedWriterIsReady) {
    Pipe p;
    p.write.reset();
    pollfd fd{p.read.get(), POLLIN, 0};
    EXPECT_TRUE(poll_until({&fd, 1}, Clock::now() + milliseconds(5000), "pipe"));
    EXPECT_NE(fd.revents & POLLHUP, 0);
}

extern "C" void count_alarm(int) {}

// A signal interrupts poll (EINTR): the wait goes on with what is left, neither
// an error nor a timeout before the deadline.
TEST(PollUntil, InterruptedBySignalsKeepsWaitingUntilTheDeadline) {
    struct sigaction sa {};
    sa.sa_handler = count_alarm;  // no SA_RESTART: poll returns EINTR
    struct sigaction old {};
    ASSERT_EQ(::sigaction(SIGALRM, &sa, &old), 0);
    itimerval every{{0, 10000}, {0, 10000}};  // every 10 ms
    ASSERT_EQ(::setitimer(ITIMER_REAL, &every, nullptr), 0);
    Pipe p;
    pollfd fd{p.read.get(), POLLIN, 0};
    const auto start = Clock::now();
    bool ready = true;
    EXPECT_NO_THROW(ready = poll_until({&fd, 1}, start + milliseconds(100), "pipe"));
    const auto waited = Clock::now() - start;
    itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
    ::sigaction(SIGALRM, &old, nullptr);
    EXPECT_FALSE(ready);
    EXPECT_GE(waited, milliseconds(99));
}

TEST(PollUntil, APollFailureIsAnErrorNamingWhat) {
    // More descriptors than RLIMIT_NOFILE allows: poll fails with EINVAL.
    std::vector<pollfd> many(1u << 21, pollfd{-1, POLLIN, 0});
    try {
        poll_until(many, Clock::now() + milliseconds(1000), "the child");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_EQ(e.op(), "poll");
        EXPECT_EQ(e.path(), "the child");
        EXPECT_EQ(e.kind(), ErrorKind::System);
    }
}

// The exit code follows the kind the thrower gave, never errno.
TEST(Error, KindNotErrnoDecidesTheExitCode) {
    const Error kernel_einval(EINVAL, "mount", "/x");
    EXPECT_EQ(kernel_einval.kind(), ErrorKind::System);
    EXPECT_EQ(exit_code_for(kernel_einval), kExitFailure);
    EXPECT_EQ(exit_code_for(Error(EFBIG, "write", "/x")), kExitFailure);
    EXPECT_EQ(exit_code_for(Error(ECANCELED, "wait", "/x")), kExitFailure);
    EXPECT_EQ(exit_code_for(Error(ErrorKind::Invalid, EFBIG, "read", "/x", "too large")),
              kExitInvalid);
    try {
        throw_refused("check requirement", "NVIDIA_REQUIRE_CUDA", "cuda>=99 is not met");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Refused);
        EXPECT_EQ(e.code().value(), ECANCELED);
        EXPECT_STREQ(e.what(), "check requirement NVIDIA_REQUIRE_CUDA: cuda>=99 is not met");
        EXPECT_EQ(exit_code_for(e), kExitRefused);
    }
    EXPECT_EQ(exit_code_for(std::runtime_error("other")), kExitFailure);
}

TEST(Fd, ClosesOnDestructionAndMoves) {
    int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(raw, 0);
    {
        Fd a(raw);
        Fd b(std::move(a));
        EXPECT_FALSE(a);
        EXPECT_EQ(b.get(), raw);
    }
    EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
}

TEST(File, ReadFileRespectsSizeCapAndRefusesNonRegular) {
    test::TempDir dir;
    std::ofstream(dir / "f") << "hello";
    EXPECT_EQ(read_file(dir / "f", 5), "hello");
    EXPECT_THROW(read_file(dir / "f", 4), Error);
    EXPECT_THROW(read_file(dir.path(), 100), Error);
    ::mkfifo((dir / "fifo").c_str(), 0600);
    EXPECT_THROW(read_file(dir / "fifo", 100), Error);  // O_NONBLOCK: never hangs
}

TEST(File, WriteFileAtomicReplacesContent) {
    test::TempDir dir;
    write_file_atomic(dir / "a", "one");
    write_file_atomic(dir / "a", "two");
    EXPECT_EQ(read_file(dir / "a", 10), "two");
}

TEST(Strings, SplitTrimParse) {
    auto parts = split("a,,b", ',');
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[1], "");
    EXPECT_EQ(trim("  x \n"), "x");
    EXPECT_EQ(parse_unsigned("42"), 42u);
    EXPECT_FALSE(parse_unsigned("4x"));
    EXPECT_FALSE(parse_unsigned("-1"));
    EXPECT_FALSE(parse_unsigned("99999999999999999999999"));
}

TEST(Strings, PathHelpersAgreeWithStdFilesystemOnThePlansPaths) {
    // The node's and the plan's paths are plain strings; their helpers must
    // say what std::filesystem::path says of them.
    for (const char* p : {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/dev/nvidia0", "/etc",
                          "/proc/driver/nvidia", "libcuda.so.1", "/", "/a/b/"}) {
        const std::filesystem::path fp(p);
        EXPECT_EQ(base_name(p), fp.filename().string()) << p;
        EXPECT_EQ(dir_name(p), fp.parent_path().string()) << p;
    }
    EXPECT_EQ(join_path("/usr/lib", "libcuda.so"), "/usr/lib/libcuda.so");
    EXPECT_EQ(join_path("/", "etc"), "/etc");
    EXPECT_EQ(join_path("/usr/lib/", "/x"), "/usr/lib/x");
    EXPECT_EQ(join_path("/usr/lib", "a/b"),
              (std::filesystem::path("/usr/lib") / "a/b").string());
}

TEST(Strings, NormalPathIsLexicallyNormalWithoutATrailingSlash) {
    // Every path of up to five parts drawn from these, absolute and
    // relative: the same as std::filesystem says, a trailing '/' dropped.
    const std::vector<std::string> parts = {"a", "bc", ".", "..", "", "..."};
    std::vector<std::string> paths = {"", "/", "//", "///a//b///"};
    std::vector<std::string> level = {""};
    for (int n = 0; n < 5; ++n) {
        std::vector<std::string> next;
        for (const auto& p : level)
            for (const auto& part : parts) next.push_back(p.empty() ? part : p + "/" + part);
        for (const auto& p : next) {
            paths.push_back(p);
            paths.push_back("/" + p);
        }
        level = std::move(next);
    }
    ASSERT_GT(paths.size(), 18000u);
    for (const auto& p : paths) {
        std::string expected = std::filesystem::path(p).lexically_normal().string();
        while (expected.size() > 1 && expected.back() == '/') expected.pop_back();
        ASSERT_EQ(normal_path(p), expected) << "'" << p << "'";
    }
    EXPECT_EQ(normal_path("/usr//lib/./x86_64-linux-gnu/../lib64/"), "/usr/lib/lib64");
    EXPECT_EQ(normal_path("/../dev"), "/dev");
}

}  // namespace
}  // namespace gpubind
