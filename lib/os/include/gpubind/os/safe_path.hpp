// Paths inside a container rootfs are hostile: every lookup below resolves
// each component inside the root (openat2 RESOLVE_IN_ROOT, or an
// O_PATH|O_NOFOLLOW walk where openat2 is missing), so no symlink or ".."
// the image planted can lead outside it.
#pragma once

#include <filesystem>
#include <string>

#include "gpubind/util/fd.hpp"

namespace gpubind::os {

// Opens `path` (absolute paths are taken relative to the root) inside the
// root. `flags` are open(2) flags; O_CLOEXEC is added. Symlinks, including
// absolute ones, resolve as if the root were "/", ".." stops at the root and
// magic links (/proc/<pid>/fd/...) are refused. O_NOFOLLOW applies to the
// last component as with open(2). Throws Error naming the path on failure.
util::Fd open_in_root(int root_fd, const std::filesystem::path& path, int flags, unsigned mode = 0);
// Like open_in_root but returns an empty Fd when the path does not exist.
util::Fd try_open_in_root(int root_fd, const std::filesystem::path& path, int flags);
// Reads a regular file of the image: O_NONBLOCK|O_NOFOLLOW (a symlink as the
// last component is refused, not followed), type checked with fstat (a FIFO
// or device is an Error, never read), size capped.
std::string read_file_in_root(int root_fd, const std::filesystem::path& path, std::size_t max_size);

namespace detail {

// The resolution open_in_root falls back to where openat2(2) is missing
// (ENOSYS): a walk one component at a time with O_PATH|O_NOFOLLOW, a symlink's
// target re-resolved inside the root, ".." clamped at the root, at most 40
// symlinks (ELOOP). Exposed so the tests can run it on kernels with openat2.
// Returns -1 with errno set on failure, like open(2).
int open_in_root_walk(int root_fd, const std::filesystem::path& path, int flags, unsigned mode);

}  // namespace detail

}  // namespace gpubind::os
