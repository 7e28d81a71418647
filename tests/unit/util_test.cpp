#include <fcntl.h>
#include <unistd.h>

#include <fstream>

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

}  // namespace
}  // namespace gpubind
