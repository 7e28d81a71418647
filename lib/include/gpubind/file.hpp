// Bounded, descriptor-based file reading.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "gpubind/fd.hpp"

namespace gpubind {

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
// Reads a stream (pipe, stdin) until EOF, failing once more than max_size arrives.
std::string read_stream(int fd, std::size_t max_size, const std::string& what);

// Writes `data` to `path` atomically (temporary file in the same directory,
// fsync unless `durable` is false — a file read at once and useless after a
// crash —, rename).
void write_file_atomic(const std::filesystem::path& path, std::string_view data,
                       unsigned mode = 0644, bool durable = true);

}  // namespace gpubind
