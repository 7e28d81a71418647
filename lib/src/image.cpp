// The image's library layout, read from its rootfs by descriptor: every
// lookup resolves inside the root, so an image's symlinks never lead out.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "gpubind/error.hpp"
#include "gpubind/file.hpp"
#include "gpubind/request.hpp"
#include "gpubind/safe_path.hpp"

namespace gpubind {

namespace {

#if defined(__aarch64__)
constexpr const char* kMultiarchLib = "/usr/lib/aarch64-linux-gnu";
constexpr const char* kMultiarchLib32 = "";  // no 32-bit driver libraries on arm64
#else
constexpr const char* kMultiarchLib = "/usr/lib/x86_64-linux-gnu";
constexpr const char* kMultiarchLib32 = "/usr/lib/i386-linux-gnu";
#endif

// Whether `path` exists in the image (a directory when `directory`). A path
// whose parent is not a directory does not exist either.
bool exists_in_root(int root_fd, const char* path, bool directory) {
    Fd fd;
    try {
        fd = try_open_in_root(root_fd, path, O_PATH);
    } catch (const Error& e) {
        if (e.code().value() == ENOTDIR) return false;
        throw;
    }
    if (!fd) return false;
    if (!directory) return true;
    struct stat st {};
    return ::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

Image inspect_image(const std::filesystem::path& rootfs) {
    Fd root = open_or_throw(rootfs, O_PATH | O_DIRECTORY);
    Image image;  // lib64 layout unless the image is Debian-like
    if (exists_in_root(root.get(), "/etc/debian_version", false) ||
        exists_in_root(root.get(), kMultiarchLib, true)) {
        image.lib_dir = kMultiarchLib;
        image.lib32_dir = kMultiarchLib32;
    }
    return image;
}

}  // namespace gpubind
