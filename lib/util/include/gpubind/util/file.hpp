// Bounded, descriptor-based file reading.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gpubind/util/fd.hpp"

namespace gpubind::util {

// open(2) that throws Error("open", path) on failure. O_CLOEXEC is always added.
Fd open_or_throw(const std::filesystem::path& path, int flags, unsigned mode = 0);
// openat(2) likewise; `what` names the file in the error.
Fd openat_or_throw(int dirfd, const char* rel, int flags, const std::string& what,
                   unsigned mode = 0);

// Reads a whole regular file of at most `max_size` bytes. A larger file, or one
// that is not regular, is an Error naming the path.
std::string read_file(const std::filesystem::path& path, std::size_t max_size);
// Reads from an open descriptor (regular file checked with fstat), `what` names it.
std::string read_fd(int fd, std::size_t max_size, const std::string& what);
// read_fd() of a regular file the caller has checked with its own fstat,
// which gave `size`: read into a buffer of that size, no fstat again.
std::string read_sized(int fd, std::size_t size, std::size_t max_size, const std::string& what);
// Reads a stream (pipe, stdin) until EOF, failing once more than max_size arrives.
std::string read_stream(int fd, std::size_t max_size, const std::string& what);

// The one bounded read every other read is made of: `fd` read until end of
// file, more than `max_size` bytes (data then holds what came before the
// read that overflowed), or, where one is given, the deadline (waited for
// with poll_until). EINTR is retried, and EAGAIN where a deadline lets poll
// wait for more; a failing read or poll is an Error naming `what`.
enum class ReadEnd { Eof, TooLarge, Deadline };
struct BoundedRead {
    std::string data;
    ReadEnd end = ReadEnd::Eof;
};
BoundedRead read_bounded(int fd, std::size_t max_size, const std::string& what,
                         std::optional<std::chrono::steady_clock::time_point> deadline = {});

// Who owns a file of `uid`, as far as this process can tell. In a user
// namespace that does not map the host's root (enroot's, a rootless
// engine's), root's files and every other unmapped user's show alike, as the
// overflow uid: such an owner is Unknown, never taken for root's (issue 44,
// F1: another user's directory passed for root's). Read once
// (/proc/self/uid_map, /proc/sys/kernel/overflowuid) and only for a uid
// other than 0. Relative to the parent user namespace: a nested one's
// mapping of the host's root is not followed.
enum class HostOwner {
    Root,     // uid 0, or the uid the host's root is mapped to here
    Unknown,  // the overflow uid where the host's root is not mapped
    Other,    // any other user
};
HostOwner host_owner(unsigned uid);

// host_owner(uid) == HostOwner::Root: what trusts a file as root's.
bool host_root_owns(unsigned uid);

// A name for a file about to be created exclusively beside `name` that no
// other process can have guessed: ".<name>.<16 random hex digits>".
std::string temporary_name(const std::string& name);

// Why the directory open at `dirfd` may not hold files gpubind trusts or
// writes as root ("" when it may): not a directory, owned by another user
// than root (host_root_owns, so not an Unknown owner; or, when `own_ok`, this
// process's), writable by group or others.
std::string untrusted_dir(int dirfd, bool own_ok = false);

struct WriteOptions {
    unsigned mode = 0644;   // the new file's, exactly (set on its descriptor, past the umask)
    bool durable = true;    // fsync before the rename (false: a file read at once and
                            // useless after a crash)
    bool check_dir = true;  // the directory must pass untrusted_dir(own_ok): where
                            // others may write, a name could be swapped under root
    bool replace = true;    // false: an existing file at `path` is an Error (EEXIST)
};

// Makes `dir` and every missing directory above it, each 0755 whatever the
// umask (write_file_atomic refuses a directory group or others may write).
void make_directories(const std::filesystem::path& dir);

// Writes `data` to `path` atomically: a new file in the same directory under
// a random name created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW: never a link,
// a FIFO or another's file planted at the name), its mode set, written, then
// renamed over `path` (which replaces a link at `path`, never writes through
// it). A failure leaves `path` as it was and removes the new file.
void write_file_atomic(const std::filesystem::path& path, std::string_view data,
                       const WriteOptions& options = {});
// The same with each temporary name that it tries (at most 9, the next after
// EEXIST) drawn from `temporary` (given the file's name) instead of
// temporary_name(): the seam that lets a test plant files at those names.
void write_file_atomic(const std::filesystem::path& path, std::string_view data,
                       const WriteOptions& options,
                       const std::function<std::string(const std::string&)>& temporary);

}  // namespace gpubind::util
