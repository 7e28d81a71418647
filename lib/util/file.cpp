#include "gpubind/util/file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "gpubind/util/error.hpp"
#include "gpubind/util/id_map.hpp"

namespace gpubind::util {

Fd open_or_throw(const std::filesystem::path& path, int flags, unsigned mode) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd < 0) throw_errno("open", path.string());
    return Fd(fd);
}

Fd openat_or_throw(int dirfd, const char* rel, int flags, const std::string& what, unsigned mode) {
    int fd = ::openat(dirfd, rel, flags | O_CLOEXEC, mode);
    if (fd < 0) throw_errno("open", what);
    return Fd(fd);
}

namespace {

// The first buffer where no size is known (a stream, a procfs file): a page.
// What is read so is mostly a few hundred bytes, and every byte of the buffer
// is written (zeroed) before the first read.
constexpr std::size_t kFirstRead = 4096;

// read_bounded(), reading straight into the result: its buffer starts at
// `first` bytes (a file's size, one byte more, reads it in one) and grows
// twofold, never past one byte more than `max_size`.
BoundedRead read_into(int fd, std::size_t max_size, const std::string& what,
                      std::optional<std::chrono::steady_clock::time_point> deadline,
                      std::size_t first) {
    BoundedRead out;
    std::string& data = out.data;
    const std::size_t most = max_size == SIZE_MAX ? max_size : max_size + 1;
    data.resize(std::max<std::size_t>(1, std::min(first, most)));
    std::size_t got = 0;
    for (;;) {
        if (got == data.size()) data.resize(std::min(most, 2 * got));
        if (deadline) {
            pollfd p{fd, POLLIN, 0};
            if (!poll_until({&p, 1}, *deadline, what)) {
                out.end = ReadEnd::Deadline;
                break;
            }
        }
        const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
        if (n < 0) {
            // EAGAIN waits in poll: only with a deadline (no busy loop without one).
            if (errno == EINTR || (errno == EAGAIN && deadline)) continue;
            throw_errno("read", what);
        }
        if (n == 0) break;
        if (got + static_cast<std::size_t>(n) > max_size) {
            out.end = ReadEnd::TooLarge;  // what came before this read is kept
            break;
        }
        got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    // A buffer much larger than what it holds (a procfs file of a few
    // hundred bytes in the first 4 KiB): the result kept at its size, and
    // the buffer's memory is the next read's.
    if (data.capacity() > 2 * got + 64) data.shrink_to_fit();
    return out;
}

Error too_large(std::size_t max_size, const std::string& what) {
    return Error(ErrorKind::Invalid, EFBIG, "read", what,
                 "larger than the limit of " + std::to_string(max_size) + " bytes");
}

}  // namespace

BoundedRead read_bounded(int fd, std::size_t max_size, const std::string& what,
                         std::optional<std::chrono::steady_clock::time_point> deadline) {
    return read_into(fd, max_size, what, deadline, kFirstRead);
}

std::string read_stream(int fd, std::size_t max_size, const std::string& what) {
    BoundedRead read = read_bounded(fd, max_size, what);
    if (read.end == ReadEnd::TooLarge) throw too_large(max_size, what);
    return std::move(read.data);
}

std::string read_fd(int fd, std::size_t max_size, const std::string& what) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("stat", what);
    if (!S_ISREG(st.st_mode)) throw_invalid("read", what, "not a regular file");
    return read_sized(fd, static_cast<std::size_t>(st.st_size), max_size, what);
}

std::string read_sized(int fd, std::size_t size, std::size_t max_size, const std::string& what) {
    if (size > max_size) throw too_large(max_size, what);
    // A buffer of the size fstat gave and one byte more: the usual file takes
    // one read and the one that sees EOF. procfs files say 0 and are read on.
    BoundedRead read =
        read_into(fd, max_size, what, std::nullopt, size == 0 ? kFirstRead : size + 1);
    if (read.end == ReadEnd::TooLarge) throw too_large(max_size, what);
    return std::move(read.data);
}

std::string read_file(const std::filesystem::path& path, std::size_t max_size) {
    Fd fd = open_or_throw(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    return read_fd(fd.get(), max_size, path.string());
}

namespace {

// How the host's root shows here: the uid it is mapped to (nullopt: 0, or
// unknown), or, where it is not mapped, the overflow uid every unmapped
// owner shows as.
struct RootShown {
    std::optional<unsigned> mapped_to;
    std::optional<unsigned> overflow;
};

RootShown host_root_shown() {
    Fd map(::open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC));
    if (!map) return {};
    const BoundedRead read = read_bounded(map.get(), 64 * 1024, "/proc/self/uid_map");
    for (const IdRange& r : id_ranges(read.data, "/proc/self/uid_map"))
        if (r.outside == 0 && r.count > 0)
            return {r.inside == 0 ? std::nullopt : std::optional<unsigned>(r.inside), {}};
    Fd overflow(::open("/proc/sys/kernel/overflowuid", O_RDONLY | O_CLOEXEC));
    if (!overflow) return {};
    const BoundedRead text = read_bounded(overflow.get(), 64, "overflowuid");
    unsigned long uid = 0;
    if (std::sscanf(text.data.c_str(), "%lu", &uid) != 1) return {};
    return {{}, static_cast<unsigned>(uid)};
}

}  // namespace

HostOwner host_owner(unsigned uid) {
    if (uid == 0) return HostOwner::Root;
    static const RootShown shown = host_root_shown();
    if (shown.mapped_to && *shown.mapped_to == uid) return HostOwner::Root;
    if (shown.overflow && *shown.overflow == uid) return HostOwner::Unknown;
    return HostOwner::Other;
}

bool host_root_owns(unsigned uid) {
    return host_owner(uid) == HostOwner::Root;
}

std::string untrusted_dir(int dirfd, bool own_ok) {
    struct stat st {};
    if (::fstat(dirfd, &st) != 0) return "cannot be checked";
    if (!S_ISDIR(st.st_mode)) return "is not a directory";
    if (!host_root_owns(st.st_uid) && !(own_ok && st.st_uid == ::geteuid()))
        return host_owner(st.st_uid) == HostOwner::Unknown
                   ? "is owned by a user this user namespace does not map (root cannot be told "
                     "from another user here)"
               : own_ok ? "is owned by another user"
                        : "is not owned by root";
    if (st.st_mode & (S_IWGRP | S_IWOTH)) return "is writable by others than its owner";
    return {};
}

void make_directories(const std::filesystem::path& dir) {
    std::filesystem::path at;
    for (const auto& part : dir) {
        at /= part;
        if (::mkdir(at.c_str(), 0755) == 0) {
            if (::chmod(at.c_str(), 0755) != 0) throw_errno("chmod", at.string());
        } else if (errno != EEXIST) {
            throw_errno("create directory", at.string());
        }
    }
}

std::string temporary_name(const std::string& name) {
    std::uint64_t r = 0;
    if (::getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
        throw_errno("getrandom", name);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out = "." + name + ".";
    for (int i = 0; i < 16; ++i) out += kHex[(r >> (4 * i)) & 0xf];
    return out;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view data,
                       const WriteOptions& options) {
    write_file_atomic(path, data, options, temporary_name);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view data,
                       const WriteOptions& options,
                       const std::function<std::string(const std::string&)>& temporary) {
    const std::string name = path.filename().string();
    if (name.empty() || name == "." || name == "..")
        throw_invalid("write", path.string(), "not a file name");
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    Fd dirfd = open_or_throw(dir, O_RDONLY | O_DIRECTORY);
    if (options.check_dir)
        if (std::string bad = untrusted_dir(dirfd.get(), true); !bad.empty())
            throw Error(ErrorKind::Refused, EACCES, "write", path.string(),
                        "its directory " + bad + "; refusing to write there");
    std::string tmp;
    Fd fd;
    for (int attempt = 0; !fd; ++attempt) {
        tmp = temporary(name);
        fd = Fd(::openat(dirfd.get(), tmp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd && (errno != EEXIST || attempt == 8)) throw_errno("create", (dir / tmp).string());
    }
    auto fail = [&](const char* op, const std::string& what) {
        const int err = errno;
        ::unlinkat(dirfd.get(), tmp.c_str(), 0);
        throw Error(err, op, what);
    };
    const std::string what = (dir / tmp).string();
    if (::fchmod(fd.get(), options.mode) != 0) fail("chmod", what);
    for (std::size_t done = 0; done < data.size();) {
        const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write", what);
        done += static_cast<std::size_t>(n);
    }
    if (options.durable && ::fsync(fd.get()) != 0) fail("fsync", what);
    if (options.replace) {
        if (::renameat(dirfd.get(), tmp.c_str(), dirfd.get(), name.c_str()) != 0)
            fail("rename", path.string());
        return;
    }
    // Fails where the name is taken, whatever is there. One call, so that
    // nothing is left of the temporary once the file is in place; a link and
    // an unlink where the file system has no RENAME_NOREPLACE.
    if (::renameat2(dirfd.get(), tmp.c_str(), dirfd.get(), name.c_str(), RENAME_NOREPLACE) == 0)
        return;
    if (errno != EINVAL) fail("create", path.string());
    if (::linkat(dirfd.get(), tmp.c_str(), dirfd.get(), name.c_str(), 0) != 0)
        fail("create", path.string());
    ::unlinkat(dirfd.get(), tmp.c_str(), 0);
}

}  // namespace gpubind::util
