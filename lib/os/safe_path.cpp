#include "gpubind/os/safe_path.hpp"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <string_view>
#include <vector>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::os {

namespace {

// As many symlinks as the kernel follows in one lookup (MAXSYMLINKS).
constexpr int kMaxSymlinks = 40;
// openat2 says EAGAIN when a rename raced with a ".." lookup; it is safe to retry.
constexpr int kMaxRetries = 32;

// Appends the components of `path` to `out` ("a//b/" -> "a", "", "b", "").
// Empty components are kept so that a trailing slash still demands a directory.
void split_components(std::string_view path, std::deque<std::string>& out, bool front) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t slash = path.find('/', start);
        if (slash == std::string_view::npos) slash = path.size();
        parts.emplace_back(path.substr(start, slash - start));
        start = slash + 1;
    }
    if (front)
        out.insert(out.begin(), parts.begin(), parts.end());
    else
        out.insert(out.end(), parts.begin(), parts.end());
}

// Reads the target of the symlink `link_fd` (an O_PATH|O_NOFOLLOW descriptor).
bool read_link(int link_fd, std::string& target) {
    char buf[PATH_MAX];
    ssize_t n = ::readlinkat(link_fd, "", buf, sizeof buf);
    if (n < 0) return false;
    if (static_cast<std::size_t>(n) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return false;
    }
    target.assign(buf, static_cast<std::size_t>(n));
    if (target.empty()) {
        errno = ENOENT;
        return false;
    }
    return true;
}

bool openat2_missing = false;  // set once openat2 said ENOSYS (no threads: plain bool)

int open_in_root_raw(int root_fd, const std::filesystem::path& path, int flags, unsigned mode) {
    const char* rel = path.empty() ? "." : path.c_str();
    if (!openat2_missing) {
        struct open_how how {};
        how.flags = static_cast<std::uint64_t>(static_cast<unsigned>(flags | O_CLOEXEC));
        bool creates = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
        how.mode = creates ? mode : 0;
        how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
        for (int attempt = 0; attempt < kMaxRetries; ++attempt) {
            long fd = ::syscall(SYS_openat2, root_fd, rel, &how, sizeof how);
            if (fd >= 0) return static_cast<int>(fd);
            if (errno == EAGAIN || errno == EINTR) continue;
            if (errno != ENOSYS) return -1;
            openat2_missing = true;
            break;
        }
        if (!openat2_missing) {
            errno = EAGAIN;
            return -1;
        }
    }
    return detail::open_in_root_walk(root_fd, rel, flags, mode);
}

std::string describe(const std::filesystem::path& path) {
    return path.string() + " (in the container root)";
}

}  // namespace

namespace detail {

int open_in_root_walk(int root_fd, const std::filesystem::path& path, int flags, unsigned mode) {
    flags |= O_CLOEXEC;
    std::deque<std::string> todo;
    split_components(path.native(), todo, false);
    std::vector<util::Fd> stack;  // directories below the root, innermost last
    int links = 0;
    auto cur = [&] { return stack.empty() ? root_fd : stack.back().get(); };

    // Replaces the symlink just met by its target's components.
    auto expand = [&](int link_fd) {
        if (++links > kMaxSymlinks) {
            errno = ELOOP;
            return false;
        }
        std::string target;
        if (!read_link(link_fd, target)) return false;
        if (target.front() == '/') stack.clear();
        split_components(target, todo, true);
        return true;
    };

    while (!todo.empty()) {
        std::string comp = std::move(todo.front());
        todo.pop_front();
        if (comp.empty() || comp == ".") continue;
        if (comp == "..") {
            if (!stack.empty()) stack.pop_back();  // never above the root
            continue;
        }
        if (todo.empty()) {
            // The final component, opened with the caller's flags.
            bool exclusive = (flags & O_CREAT) != 0 && (flags & O_EXCL) != 0;
            if (exclusive || (flags & O_NOFOLLOW) != 0)
                return ::openat(cur(), comp.c_str(), flags | O_NOFOLLOW, mode);
            int probe = ::openat(cur(), comp.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (probe < 0) {
                if (errno == ENOENT && (flags & O_CREAT) != 0)
                    return ::openat(cur(), comp.c_str(), flags | O_NOFOLLOW, mode);
                return -1;
            }
            util::Fd link(probe);
            struct stat st {};
            if (::fstat(probe, &st) != 0) return -1;
            if (!S_ISLNK(st.st_mode))
                // Reopened with the caller's flags; a symlink swapped in meanwhile is ELOOP.
                return ::openat(cur(), comp.c_str(), flags | O_NOFOLLOW, mode);
            if (!expand(probe)) return -1;
            continue;
        }
        // An intermediate component (a trailing "/" or "/." makes the last one
        // intermediate too): it must be a directory or a symlink to one.
        int fd = ::openat(cur(), comp.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return -1;
        util::Fd next(fd);
        struct stat st {};
        if (::fstat(fd, &st) != 0) return -1;
        if (S_ISLNK(st.st_mode)) {
            if (!expand(fd)) return -1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        stack.push_back(std::move(next));
    }
    // The path named a directory ("", "/", "a/", "a/.."): open it with the flags.
    return ::openat(cur(), ".", flags & ~(O_CREAT | O_EXCL), mode);
}

}  // namespace detail

util::Fd open_in_root(int root_fd, const std::filesystem::path& path, int flags, unsigned mode) {
    int fd = open_in_root_raw(root_fd, path, flags, mode);
    if (fd < 0) util::throw_errno("open", describe(path));
    return util::Fd(fd);
}

util::Fd try_open_in_root(int root_fd, const std::filesystem::path& path, int flags) {
    int fd = open_in_root_raw(root_fd, path, flags, 0);
    if (fd < 0) {
        if (errno == ENOENT) return util::Fd();
        util::throw_errno("open", describe(path));
    }
    return util::Fd(fd);
}

std::string read_file_in_root(int root_fd, const std::filesystem::path& path,
                              std::size_t max_size) {
    int fd = open_in_root_raw(root_fd, path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY, 0);
    if (fd < 0) {
        int err = errno;
        if (err == ELOOP) {
            // Say plainly when the last component is a symlink we refuse to follow.
            util::Fd link(open_in_root_raw(root_fd, path, O_PATH | O_NOFOLLOW, 0));
            struct stat st {};
            if (link && ::fstat(link.get(), &st) == 0 && S_ISLNK(st.st_mode))
                throw util::Error(ELOOP, "read", describe(path),
                                  "is a symbolic link (not followed)");
        }
        throw util::Error(err, "open", describe(path));
    }
    util::Fd owner(fd);
    return util::read_fd(fd, max_size, describe(path));
}

}  // namespace gpubind::os
