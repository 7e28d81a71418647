// A directory's entries read with getdents64 straight into a buffer: no
// directory stream (three syscalls more per directory and a heap buffer), no
// string made for a name the caller does not keep.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <string_view>

namespace gpubind::util::detail {

// Calls f(name, const dirent64&) for each entry of the open directory `fd`
// (not "." and ".."), in the kernel's order, until f returns false. False
// when reading fails (errno says why).
template <typename F>
bool for_each_entry(int fd, F&& f) {
    alignas(dirent64) char buf[16384];
    for (;;) {
        const ssize_t n = ::getdents64(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        if (n == 0) return true;
        for (std::size_t at = 0; at < static_cast<std::size_t>(n);) {
            const auto* e = reinterpret_cast<const dirent64*>(buf + at);
            at += e->d_reclen;
            const std::string_view name = e->d_name;
            if (name == "." || name == "..") continue;
            if (!f(name, *e)) return true;
        }
    }
}

}  // namespace gpubind::util::detail
