#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "errors.hpp"
#include "files.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/version.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

TEST(Error, MessageNamesOperationPathAndErrno) {
    util::Error e(ENOENT, "open", "/etc/nothing");
    EXPECT_STREQ(e.what(), "open /etc/nothing: No such file or directory");
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_EQ(e.op(), "open");
    EXPECT_EQ(e.path(), "/etc/nothing");
    EXPECT_EQ(util::exit_code_for(e), util::kExitFailure);
}

TEST(Error, InvalidInputCarriesDetailAndMapsToInvalidExit) {
    try {
        util::throw_invalid("parse ld.so.cache", "/x", "truncated header");
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_STREQ(e.what(), "parse ld.so.cache /x: truncated header");
        EXPECT_EQ(util::exit_code_for(e), util::kExitInvalid);
    }
}

// --- poll_until: the one wait with a deadline (stdin, the NVML child, the sandbox) ---

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Pipe {
    util::Fd read, write;
    Pipe() {
        int fds[2];
        EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
        read = util::Fd(fds[0]);
        write = util::Fd(fds[1]);
    }
};

TEST(PollUntil, ReadyDescriptorReturnsAtOnceWithItsEvents) {
    Pipe p;
    ASSERT_EQ(::write(p.write.get(), "x", 1), 1);
    pollfd fds[2] = {{p.write.get(), 0, 0}, {p.read.get(), POLLIN, 0}};
    const auto start = Clock::now();
    EXPECT_TRUE(util::poll_until(fds, Clock::now() + milliseconds(5000), "pipe"));
    EXPECT_LT(Clock::now() - start, milliseconds(1000));
    EXPECT_EQ(fds[0].revents, 0);
    EXPECT_NE(fds[1].revents & POLLIN, 0);
}

TEST(PollUntil, NothingReadyWaitsForTheDeadlineThenSaysSo) {
    Pipe p;
    pollfd fd{p.read.get(), POLLIN, 0};
    const auto start = Clock::now();
    EXPECT_FALSE(util::poll_until({&fd, 1}, start + milliseconds(60), "pipe"));
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, milliseconds(59));
    EXPECT_LT(waited, milliseconds(2000));
}

TEST(PollUntil, APassedDeadlineIsNotReadyEvenWhenDataIsThere) {
    Pipe p;
    ASSERT_EQ(::write(p.write.get(), "x", 1), 1);
    pollfd fd{p.read.get(), POLLIN, 0};
    EXPECT_FALSE(util::poll_until({&fd, 1}, Clock::now() - milliseconds(1), "pipe"));
}

TEST(PollUntil, ClosedWriterIsReady) {
    Pipe p;
    p.write.reset();
    pollfd fd{p.read.get(), POLLIN, 0};
    EXPECT_TRUE(util::poll_until({&fd, 1}, Clock::now() + milliseconds(5000), "pipe"));
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
    EXPECT_NO_THROW(ready = util::poll_until({&fd, 1}, start + milliseconds(100), "pipe"));
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
        util::poll_until(many, Clock::now() + milliseconds(1000), "the child");
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_EQ(e.op(), "poll");
        EXPECT_EQ(e.path(), "the child");
        EXPECT_EQ(e.kind(), util::ErrorKind::System);
    }
}

// The exit code follows the kind the thrower gave, never errno.
TEST(Error, KindNotErrnoDecidesTheExitCode) {
    const util::Error kernel_einval(EINVAL, "mount", "/x");
    EXPECT_EQ(kernel_einval.kind(), util::ErrorKind::System);
    EXPECT_EQ(util::exit_code_for(kernel_einval), util::kExitFailure);
    EXPECT_EQ(util::exit_code_for(util::Error(EFBIG, "write", "/x")), util::kExitFailure);
    EXPECT_EQ(util::exit_code_for(util::Error(ECANCELED, "wait", "/x")), util::kExitFailure);
    EXPECT_EQ(util::exit_code_for(
                  util::Error(util::ErrorKind::Invalid, EFBIG, "read", "/x", "too large")),
              util::kExitInvalid);
    try {
        util::throw_refused("check requirement", "NVIDIA_REQUIRE_CUDA", "cuda>=99 is not met");
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
        EXPECT_EQ(e.code().value(), ECANCELED);
        EXPECT_STREQ(e.what(), "check requirement NVIDIA_REQUIRE_CUDA: cuda>=99 is not met");
        EXPECT_EQ(util::exit_code_for(e), util::kExitRefused);
    }
    EXPECT_EQ(util::exit_code_for(std::runtime_error("other")), util::kExitFailure);
}

TEST(Fd, ClosesOnDestructionAndMoves) {
    int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(raw, 0);
    {
        util::Fd a(raw);
        util::Fd b(std::move(a));
        EXPECT_FALSE(a);
        EXPECT_EQ(b.get(), raw);
    }
    EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
}

TEST(File, ReadFileRespectsSizeCapAndRefusesNonRegular) {
    test::TempDir dir;
    std::ofstream(dir / "f") << "hello";
    EXPECT_EQ(util::read_file(dir / "f", 5), "hello");
    EXPECT_THROW(util::read_file(dir / "f", 4), util::Error);
    EXPECT_THROW(util::read_file(dir.path(), 100), util::Error);
    ::mkfifo((dir / "fifo").c_str(), 0600);
    EXPECT_THROW(util::read_file(dir / "fifo", 100), util::Error);  // O_NONBLOCK: never hangs
}

// A file of many reads' worth, whole; at exactly the cap, whole; one byte
// over, refused (read in a buffer of the size fstat gives, one byte more).
TEST(File, ReadFileReadsLargeFilesWholeUpToTheCap) {
    test::TempDir dir;
    std::string big;
    for (int i = 0; big.size() < 100000; ++i) big += std::to_string(i) + ",";
    std::ofstream(dir / "big") << big;
    EXPECT_EQ(util::read_file(dir / "big", big.size()), big);
    EXPECT_EQ(util::read_file(dir / "big", 1u << 20), big);
    try {
        util::read_file(dir / "big", big.size() - 1);
        ADD_FAILURE() << "read past the cap";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EFBIG);
    }
    std::ofstream(dir / "empty").flush();
    EXPECT_EQ(util::read_file(dir / "empty", 10), "");
}

// A stream (a pipe: no size to go by) read whole through the buffer's
// growth, refused one byte over the cap; a short answer is kept at its own
// size, not in the page-sized buffer it was read into.
TEST(File, ReadStreamGrowsToTheWholeAndKeepsAShortAnswerSmall) {
    auto through_pipe = [](const std::string& text, std::size_t cap) {
        int fds[2];
        EXPECT_EQ(::pipe(fds), 0);
        util::Fd r(fds[0]), w(fds[1]);
        // A pipe holds 64 KiB: all of it written, then read to its end.
        EXPECT_EQ(::write(w.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
        w.reset();
        return util::read_bounded(r.get(), cap, "pipe");
    };
    std::string big;
    for (int i = 0; big.size() < 50000; ++i) big += std::to_string(i) + ",";
    const util::BoundedRead whole = through_pipe(big, big.size());
    EXPECT_EQ(whole.end, util::ReadEnd::Eof);
    EXPECT_EQ(whole.data, big);
    EXPECT_EQ(through_pipe(big, big.size() - 1).end, util::ReadEnd::TooLarge);

    const util::BoundedRead small = through_pipe("NVRM version: 550.54.15\n", 1u << 16);
    EXPECT_EQ(small.data, "NVRM version: 550.54.15\n");
    EXPECT_LT(small.data.capacity(), 1024u);
}

TEST(File, WriteFileAtomicReplacesContent) {
    test::TempDir dir;
    util::write_file_atomic(dir / "a", "one");
    util::write_file_atomic(dir / "a", "two");
    EXPECT_EQ(util::read_file(dir / "a", 10), "two");
}

// The names in a directory, sorted.
std::vector<std::string> names_in(const std::filesystem::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// Issue 21 (6): the new file was <path>.tmp-<pid>, opened without O_EXCL: a
// hard link planted at that name had its target rewritten (a victim file
// got the CDI spec), a FIFO there blocked the writer forever. The names are
// random now, so (issue 49) files are planted at the exact names the writer
// will try (the seam's): a hard link to a victim, a link to it, a dangling
// link to a name it would create, a FIFO. It goes on to the next name, none
// written through or waited on; with every name taken it fails, the path as
// it was. The mode is exact past the umask; a link at the path is replaced,
// its target untouched.
TEST(File, WriteFileAtomicNeverWritesThroughAPlantedName) {
    namespace fs = std::filesystem;
    test::TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    const fs::path target = dir / "spec.json";
    const fs::path victim = dir / "victim";
    std::ofstream(victim) << "the victim's";
    auto planted = [](int i) { return ".spec.json.planted" + std::to_string(i); };
    int tries = 0;
    auto in_turn = [&](const std::string& name) {
        EXPECT_EQ(name, "spec.json");
        return planted(tries++);
    };
    ASSERT_EQ(::link(victim.c_str(), (dir / planted(0)).c_str()), 0);
    fs::create_symlink(victim, dir / planted(1));
    fs::create_symlink(dir / "made-through", dir / planted(2));
    ASSERT_EQ(::mkfifo((dir / planted(3)).c_str(), 0600), 0);
    const auto before = test::tree(dir.path());
    // A child writes: a FIFO opened for writing would block it.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int rc = 0;
        try {
            util::write_file_atomic(target, "the spec", {}, in_turn);
            if (tries != 5) rc = 4;  // four names taken, the fifth free
        } catch (...) {
            rc = 3;
        }
        ::_exit(rc);
    }
    int status = -1;
    for (int i = 0; i < 100 && ::waitpid(child, &status, WNOHANG) == 0; ++i) ::usleep(50000);
    if (::waitpid(child, &status, WNOHANG) == 0) {
        ::kill(child, SIGKILL);
        ::waitpid(child, &status, 0);
        ADD_FAILURE() << "the writer blocked on a FIFO at its temporary name";
    } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    EXPECT_EQ(util::read_file(victim, 100), "the victim's");
    EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "made-through")));
    EXPECT_EQ(util::read_file(target, 100), "the spec");
    auto after = test::tree(dir.path());
    after.erase("spec.json");
    EXPECT_EQ(after, before);  // every planted name as it was, no temporary file left

    // Every name it tries taken (the hard link's): nine tries, then an error
    // naming the last; the path as it was.
    tries = 0;
    const util::Error e = test::error_of([&] {
        util::write_file_atomic(target, "the spec again", {}, [&](const std::string&) {
            ++tries;
            return planted(0);
        });
    });
    EXPECT_EQ(e.code().value(), EEXIST);
    EXPECT_THAT(e.what(), ::testing::HasSubstr((dir / planted(0)).string()));
    EXPECT_EQ(tries, 9);
    EXPECT_EQ(util::read_file(victim, 100), "the victim's");
    EXPECT_EQ(util::read_file(target, 100), "the spec");

    // The mode asked for, whatever the umask.
    const mode_t old = ::umask(077);
    util::write_file_atomic(dir / "moded", "x", {.mode = 0644});
    ::umask(old);
    struct stat st {};
    ASSERT_EQ(::lstat((dir / "moded").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);

    // A link at the path is replaced by the file; what it named is untouched.
    fs::create_symlink(victim, dir / "linked");
    util::write_file_atomic(dir / "linked", "new");
    ASSERT_EQ(::lstat((dir / "linked").c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(util::read_file(victim, 100), "the victim's");
}

// The directory written into must be root's (or this user's) and writable by
// no one else; a file that must not replace one fails where one is; no
// temporary file is left by a failure.
TEST(File, WriteFileAtomicChecksTheDirectoryAndCanRefuseToReplace) {
    namespace fs = std::filesystem;
    test::TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    struct Case {
        const char* name;
        mode_t mode;
        uid_t owner;
        const char* why;
    };
    for (const Case& c : {Case{"others may write", 0777, 0, "writable by others"},
                          Case{"sticky, as tmp is", 01777, 0, "writable by others"},
                          Case{"group may write", 0775, 0, "writable by others"},
                          Case{"another user's", 0755, 65534, "owned by another user"}}) {
        SCOPED_TRACE(c.name);
        const fs::path sub = dir / c.name;
        fs::create_directory(sub);
        ASSERT_EQ(::chmod(sub.c_str(), c.mode), 0);
        if (c.owner != 0) {
            if (::geteuid() != 0) continue;  // only root can give it away
            ASSERT_EQ(::chown(sub.c_str(), c.owner, c.owner), 0);
        }
        try {
            util::write_file_atomic(sub / "f", "x");
            ADD_FAILURE() << "written";
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EACCES);
            EXPECT_THAT(e.what(), ::testing::HasSubstr((sub / "f").string()));
            EXPECT_THAT(e.what(), ::testing::HasSubstr(c.why));
        }
        EXPECT_TRUE(names_in(sub).empty());
        // A file a user names (gpubind cdi generate -o) may go there.
        util::write_file_atomic(sub / "f", "x", {.check_dir = false});
        EXPECT_EQ(util::read_file(sub / "f", 10), "x");
    }
    std::ofstream(dir / "kept") << "first";
    try {
        util::write_file_atomic(dir / "kept", "second", {.replace = false});
        ADD_FAILURE() << "replaced";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EEXIST);
    }
    EXPECT_EQ(util::read_file(dir / "kept", 10), "first");
    util::write_file_atomic(dir / "fresh", "made", {.replace = false});
    EXPECT_EQ(util::read_file(dir / "fresh", 10), "made");
    std::vector<std::string> want = {"another user's",   "fresh",
                                     "group may write",  "kept",
                                     "others may write", "sticky, as tmp is"};
    EXPECT_EQ(names_in(dir.path()), want);
}

TEST(Strings, SplitTrimParse) {
    auto parts = util::split("a,,b", ',');
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[1], "");
    EXPECT_EQ(util::trim("  x \n"), "x");
    EXPECT_EQ(util::parse_unsigned("42"), 42u);
    EXPECT_FALSE(util::parse_unsigned("4x"));
    EXPECT_FALSE(util::parse_unsigned("-1"));
    EXPECT_FALSE(util::parse_unsigned("99999999999999999999999"));
}

TEST(Strings, PathHelpersAgreeWithStdFilesystemOnThePlansPaths) {
    // The node's and the plan's paths are plain strings; their helpers must
    // say what std::filesystem::path says of them.
    for (const char* p : {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/dev/nvidia0", "/etc",
                          "/proc/driver/nvidia", "libcuda.so.1", "/", "/a/b/"}) {
        const std::filesystem::path fp(p);
        EXPECT_EQ(util::base_name(p), fp.filename().string()) << p;
        EXPECT_EQ(util::dir_name(p), fp.parent_path().string()) << p;
    }
    EXPECT_EQ(util::join_path("/usr/lib", "libcuda.so"), "/usr/lib/libcuda.so");
    EXPECT_EQ(util::join_path("/", "etc"), "/etc");
    EXPECT_EQ(util::join_path("/usr/lib/", "/x"), "/usr/lib/x");
    EXPECT_EQ(util::join_path("/usr/lib", "a/b"),
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
        ASSERT_EQ(util::normal_path(p), expected) << "'" << p << "'";
    }
    EXPECT_EQ(util::normal_path("/usr//lib/./x86_64-linux-gnu/../lib64/"), "/usr/lib/lib64");
    EXPECT_EQ(util::normal_path("/../dev"), "/dev");
}

// A lazy logger is made by the first message at its level, once; what
// comes below that level makes nothing and goes nowhere.
TEST(Log, LazyLoggerMadeByTheFirstMessageAtItsLevel) {
    auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_st>(16);
    ring->set_pattern("%l %v");
    int made = 0;
    util::set_lazy_logger(spdlog::level::warn, [&] {
        ++made;
        auto log = std::make_shared<spdlog::logger>("lazy", ring);
        log->set_level(spdlog::level::warn);
        return log;
    });
    util::logger().debug("not {}", "made");
    util::logger().info("not made");
    EXPECT_FALSE(util::logger().should_log(util::LogLevel::Info));
    EXPECT_TRUE(util::logger().should_log(util::LogLevel::Warn));
    EXPECT_EQ(made, 0);
    util::logger().warn("made by {}", "this");
    util::logger().error("then written");
    util::logger().info("still not");
    EXPECT_EQ(made, 1);
    EXPECT_EQ(ring->last_formatted(),
              (std::vector<std::string>{"warning made by this\n", "error then written\n"}));
    util::set_logger(std::make_shared<spdlog::logger>("test"));
}

// How many of this process's descriptors are open on `path`.
int descriptors_on(const std::filesystem::path& path) {
    int n = 0;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        if (std::filesystem::read_symlink(fd.path(), ec) == path) ++n;
    }
    return n;
}

// gpubind-runtime drops its logger before it executes the real runtime:
// a logger already made is closed by set_lazy_logger, not at its next
// message, so that no log file is inherited.
TEST(Log, SettingALazyLoggerClosesTheLoggerMadeBefore) {
    test::TempDir dir;
    const auto file = dir.path() / "made.log";
    util::set_lazy_logger(spdlog::level::info, [&] {
        return std::make_shared<spdlog::logger>(
            "made", std::make_shared<spdlog::sinks::basic_file_sink_st>(file.string()));
    });
    EXPECT_EQ(descriptors_on(file), 0);  // nothing written yet: no file opened
    util::logger().info("opens the file");
    EXPECT_EQ(descriptors_on(file), 1);
    util::set_lazy_logger(spdlog::level::err,
                          [] { return std::make_shared<spdlog::logger>("next"); });
    EXPECT_EQ(descriptors_on(file), 0);
    EXPECT_FALSE(util::logger().should_log(util::LogLevel::Warn));
    util::set_logger(std::make_shared<spdlog::logger>("test"));
}

// ---- compare_versions: the one rule --------------------------------------------------------

// The sign of compare_versions, both ways round: the rule is antisymmetric.
int order(std::string_view a, std::string_view b) {
    const int ab = util::compare_versions(a, b), ba = util::compare_versions(b, a);
    EXPECT_EQ((ab > 0) - (ab < 0), -((ba > 0) - (ba < 0))) << a << " vs " << b;
    return (ab > 0) - (ab < 0);
}

TEST(CompareVersions, ComponentsCompareAsNumbersNotAsText) {
    EXPECT_EQ(order("10", "9"), 1);
    EXPECT_EQ(order("550.100.1", "550.54.15"), 1);
    EXPECT_EQ(order("12.10", "12.9"), 1);
    EXPECT_EQ(order("1.2.3", "1.2.4"), -1);
    EXPECT_EQ(order("560", "550.999.999"), 1);
    EXPECT_EQ(order("550.54.15", "550.54.15"), 0);
    // Leading zeros do not count; numbers are not limited to a machine word.
    EXPECT_EQ(order("535.104.05", "535.104.5"), 0);
    EXPECT_EQ(order("535.104.05", "535.104.4"), 1);
    EXPECT_EQ(order("99999999999999999999999.1", "99999999999999999999998.9"), 1);
    EXPECT_EQ(order("00000000000000000000001", "1"), 0);
}

TEST(CompareVersions, AMissingComponentIsZero) {
    EXPECT_EQ(order("12", "12.0"), 0);
    EXPECT_EQ(order("12", "12.0.0"), 0);
    EXPECT_EQ(order("550.54", "550.54.1"), -1);
    EXPECT_EQ(order("12.", "12"), 0);
    EXPECT_EQ(order("", "0"), 0);
    EXPECT_EQ(order("", "0.0.1"), -1);
}

TEST(CompareVersions, ALeadingVIsIgnored) {
    EXPECT_EQ(order("v1.0.0", "1.0.0"), 0);
    EXPECT_EQ(order("v0.6.0", "0.5.0"), 1);
    EXPECT_EQ(order("v10", "v9"), 1);
    EXPECT_EQ(order("v1.1", "1.1.0"), 0);
}

TEST(CompareVersions, ASuffixComesBeforeItsReleaseAndSuffixesCompareAsText) {
    // The release decides when it differs, whatever the suffixes.
    EXPECT_EQ(order("1.0.1-rc1", "1.0.0"), 1);
    EXPECT_EQ(order("1.0.0-rc9", "1.0.1-alpha"), -1);
    // Of equal releases, no suffix is newer: a pre-release comes before its release.
    EXPECT_EQ(order("1.0.0-rc1", "1.0.0"), -1);
    EXPECT_EQ(order("2.0beta", "2.0"), -1);
    EXPECT_EQ(order("v1.0.0-rc1", "1.0"), -1);
    // Two suffixes compare byte by byte.
    EXPECT_EQ(order("1.0.0-alpha", "1.0.0-beta"), -1);
    EXPECT_EQ(order("1.0.0-rc10", "1.0.0-rc9"), -1);
    EXPECT_EQ(order("1.0.0-rc1", "1.0-rc1"), 0);
}

}  // namespace
}  // namespace gpubind
