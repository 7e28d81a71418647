// The image's library layout, read from its rootfs by descriptor: every
// lookup resolves inside the root, so an image's symlinks never lead out.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <system_error>

#include "gpubind/error.hpp"
#include "gpubind/file.hpp"
#include "gpubind/log.hpp"
#include "gpubind/request.hpp"
#include "gpubind/safe_path.hpp"
#include "gpubind/strings.hpp"

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

constexpr std::string_view kCompatPrefix = "libcuda.so.";
constexpr std::size_t kMaxCompatEntries = 4096;  // an image's directory, read in full otherwise

// Whether `name` looks like a soname ldconfig enters: lib<x>.so.<number>.
bool soname_like(std::string_view name) {
    const std::size_t so = name.rfind(".so.");
    if (!name.starts_with("lib") || so == std::string_view::npos || so <= 3) return false;
    const std::string_view number = name.substr(so + 4);
    return !number.empty() && number.size() <= 9 &&
           number.find_first_not_of("0123456789") == std::string_view::npos;
}

// The image's /usr/local/cuda/compat: the highest libcuda.so.<version> in it
// and the entries named like sonames. /usr/local/cuda resolved inside the root
// (CUDA images make it a symlink), "compat" opened O_NOFOLLOW|O_DIRECTORY (a
// symlink or a file there: none), its entries typed with
// fstatat(AT_SYMLINK_NOFOLLOW), never opened.
void cuda_compat(int root_fd, Image& image) {
    const std::string compat = kCudaCompatDir;
    Fd cuda;
    try {
        cuda = try_open_in_root(root_fd, "/usr/local/cuda", O_PATH | O_DIRECTORY);
    } catch (const Error& e) {
        logger().debug("image: no CUDA compat libraries: {}", e.what());
        return;
    }
    if (!cuda) return;
    int dir_fd = ::openat(cuda.get(), "compat", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir_fd < 0) {
        const int err = errno;
        if (err != ENOENT)
            logger().debug("image: {} is not a directory one can list without following a link "
                           "({}): no CUDA compat libraries",
                           compat, std::generic_category().message(err));
        return;
    }
    DIR* dir = ::fdopendir(dir_fd);
    if (!dir) {
        ::close(dir_fd);
        return;
    }
    std::string best;
    std::size_t seen = 0;
    while (const dirent* e = ::readdir(dir)) {
        if (++seen > kMaxCompatEntries) {
            logger().debug("image: {} has more than {} entries; read no further", compat,
                           kMaxCompatEntries);
            break;
        }
        std::string_view name = e->d_name;
        const bool soname = soname_like(name);
        std::string_view version;
        if (name.starts_with(kCompatPrefix)) {
            version = name.substr(kCompatPrefix.size());
            if (!is_version(version)) version = {};
        }
        if (version.empty() && !soname) continue;
        struct stat st {};
        if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
            logger().debug("image: {}/{} is neither a file nor a symlink; ignored", compat, name);
            continue;
        }
        if (!version.empty() && (best.empty() || compare_versions(version, best) > 0))
            best = version;
        if (soname) image.cuda_compat_sonames.emplace_back(name);
    }
    ::closedir(dir);
    image.cuda_compat_version = best;
    std::sort(image.cuda_compat_sonames.begin(), image.cuda_compat_sonames.end());
}

// Whether the image's /etc/ld.so.conf names anything (a line other than
// blanks and comments); one that cannot be read as a regular file counts as
// none (nothing of it is ever handed to ldconfig by this answer).
bool names_directories(int root_fd) {
    constexpr std::size_t kMaxConf = 1 << 20;
    std::string text;
    try {
        text = read_file_in_root(root_fd, "/etc/ld.so.conf", kMaxConf);
    } catch (const Error& e) {
        if (e.code().value() != ENOENT)
            logger().debug("image: /etc/ld.so.conf not read: {}", e.what());
        return false;
    }
    for (std::string_view line : split(text, '\n')) {
        line = line.substr(0, line.find('#'));
        if (line.find_first_not_of(" \t\r\f\v") != std::string_view::npos) return true;
    }
    return false;
}

}  // namespace

bool is_version(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    for (auto part : split(s, '.'))
        if (part.empty() || part.size() > 9 ||
            part.find_first_not_of("0123456789") != std::string_view::npos)
            return false;
    return true;
}

int compare_versions(std::string_view a, std::string_view b) {
    auto pa = split(a, '.'), pb = split(b, '.');
    for (std::size_t i = 0; i < pa.size() || i < pb.size(); ++i) {
        unsigned long x = i < pa.size() ? parse_unsigned(pa[i]).value_or(0) : 0;
        unsigned long y = i < pb.size() ? parse_unsigned(pb[i]).value_or(0) : 0;
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

Image inspect_image(const std::filesystem::path& rootfs) {
    Fd root = open_or_throw(rootfs, O_PATH | O_DIRECTORY);
    Image image;  // lib64 layout unless the image is Debian-like
    if (exists_in_root(root.get(), "/etc/debian_version", false) ||
        exists_in_root(root.get(), kMultiarchLib, true)) {
        image.lib_dir = kMultiarchLib;
        image.lib32_dir = kMultiarchLib32;
    }
    cuda_compat(root.get(), image);
    image.has_ldcache = exists_in_root(root.get(), "/etc/ld.so.cache", false);
    image.ld_so_conf = !image.has_ldcache && names_directories(root.get());
    return image;
}

}  // namespace gpubind
