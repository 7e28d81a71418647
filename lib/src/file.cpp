#include "gpubind/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "gpubind/error.hpp"

namespace gpubind {

Fd open_or_throw(const std::filesystem::path& path, int flags, unsigned mode) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd < 0) throw_errno("open", path.string());
    return Fd(fd);
}

Fd openat_or_throw(int dirfd, const char* rel, int flags, const std::string& what,
                   unsigned mode) {
    int fd = ::openat(dirfd, rel, flags | O_CLOEXEC, mode);
    if (fd < 0) throw_errno("open", what);
    return Fd(fd);
}

std::string read_stream(int fd, std::size_t max_size, const std::string& what) {
    std::string out;
    char buf[16384];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("read", what);
        }
        if (n == 0) return out;
        if (out.size() + static_cast<std::size_t>(n) > max_size)
            throw Error(ErrorKind::Invalid, EFBIG, "read", what,
                        "larger than the limit of " + std::to_string(max_size) + " bytes");
        out.append(buf, static_cast<std::size_t>(n));
    }
}

std::string read_fd(int fd, std::size_t max_size, const std::string& what) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("stat", what);
    if (!S_ISREG(st.st_mode)) throw_invalid("read", what, "not a regular file");
    if (static_cast<std::size_t>(st.st_size) > max_size)
        throw Error(ErrorKind::Invalid, EFBIG, "read", what,
                    "larger than the limit of " + std::to_string(max_size) + " bytes");
    // procfs files report size 0: read_stream copes with any length up to the cap.
    return read_stream(fd, max_size, what);
}

std::string read_file(const std::filesystem::path& path, std::size_t max_size) {
    Fd fd = open_or_throw(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    return read_fd(fd.get(), max_size, path.string());
}

void write_file_atomic(const std::filesystem::path& path, std::string_view data, unsigned mode) {
    std::filesystem::path tmp = path;
    tmp += ".tmp-" + std::to_string(::getpid());
    {
        Fd fd = open_or_throw(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode);
        std::size_t done = 0;
        while (done < data.size()) {
            ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                int err = errno;
                ::unlink(tmp.c_str());
                throw Error(err, "write", tmp.string());
            }
            done += static_cast<std::size_t>(n);
        }
        if (::fsync(fd.get()) != 0) {
            int err = errno;
            ::unlink(tmp.c_str());
            throw Error(err, "fsync", tmp.string());
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw Error(err, "rename", path.string());
    }
}

}  // namespace gpubind
