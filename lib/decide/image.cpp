// The image's library layout, read from its rootfs by descriptor through the
// system layer: every lookup resolves inside the root, so an image's symlinks
// never lead out.
#include "gpubind/decide/image.hpp"

#include <algorithm>
#include <cerrno>
#include <string_view>

#include <fmt/format.h>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/version.hpp"

namespace gpubind::decide {

namespace {

using util::platform::kMultiarchLib32Dir;
using util::platform::kMultiarchLibDir;

using Type = os::FileInfo::Type;

// A directory of the image, resolved inside the root; empty when it is
// missing or a component is not a directory.
util::Fd open_dir(os::SystemFiles& sys, int root_fd, const std::filesystem::path& path) {
    try {
        return sys.open_dir_in_root(root_fd, path);
    } catch (const util::Error& e) {
        if (e.code().value() == ENOTDIR) return util::Fd();
        throw;
    }
}

// Whether a failure to read a part of the image is the image's own shape
// (missing, not a directory, a link loop, unreadable to a rootless caller,
// a name too long, a socket or device where a file belongs, a file that is
// not regular or too large): that part counts as absent. Any other (EIO,
// EMFILE, ENOMEM, ...) is this host's trouble, not an answer about the
// image: it fails the decision rather than make one without that part.
bool image_shaped(const util::Error& e) {
    if (e.kind() == util::ErrorKind::Invalid) return true;  // read_fd: not regular, too large
    switch (e.code().value()) {
        case ENOENT:
        case ENOTDIR:
        case ELOOP:
        case EACCES:
        case ENAMETOOLONG:
        case EXDEV:
        case ENXIO:
        case ENODEV:
        case EISDIR:
            return true;
        default:
            return false;
    }
}

constexpr std::string_view kCompatPrefix = "libcuda.so.";
constexpr std::size_t kMaxCompatEntries = 4096;  // read no further in an image's directory

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
// (CUDA images make it a symlink), "compat" a directory (not followed: a
// symlink or a file there: none), listed by descriptor, its entries typed
// without following them (SystemFiles::stat_at), never opened. One of more than
// kMaxCompatEntries entries is an Error.
void cuda_compat(os::SystemFiles& sys, int root_fd, Image& image) {
    const std::string compat = kCudaCompatDir;
    util::Fd cuda;
    try {
        cuda = sys.open_dir_in_root(root_fd, "/usr/local/cuda");
    } catch (const util::Error& e) {
        if (!image_shaped(e)) throw;
        util::logger().debug("image: no CUDA compat libraries: {}", e.what());
        return;
    }
    if (!cuda) return;
    util::Fd dir;
    os::DirNames listed;
    try {
        const os::FileInfo info = sys.stat_at(cuda.get(), "compat");
        if (info.type == Type::Missing) return;
        if (info.type != Type::Directory) {
            util::logger().debug("image: {} is {}, not a directory: no CUDA compat libraries",
                                 compat, to_string(info.type));
            return;
        }
        dir = sys.open_at(cuda.get(), "compat");
        listed = sys.list_dir(dir.get(), kMaxCompatEntries, [](std::string_view name) {
            return name.starts_with(kCompatPrefix) || soname_like(name);
        });
    } catch (const util::Error& e) {
        if (!image_shaped(e)) throw;
        util::logger().debug("image: {} not read ({}): no CUDA compat libraries", compat, e.what());
        return;
    }
    // What a part of it would give depends on the order the directory is
    // read in: none of it, and the container is refused.
    if (listed.more)
        throw util::Error(util::ErrorKind::Invalid, E2BIG, "list directory", compat,
                          fmt::format("has more than {} entries; refusing", kMaxCompatEntries));
    std::string best;
    for (const std::string& name : listed.names) {
        const bool soname = soname_like(name);
        std::string_view version;
        if (std::string_view(name).starts_with(kCompatPrefix)) {
            version = std::string_view(name).substr(kCompatPrefix.size());
            if (!is_version(version)) version = {};
        }
        if (version.empty() && !soname) continue;
        Type type = Type::Missing;
        try {
            type = sys.stat_at(dir.get(), name).type;
        } catch (const util::Error& e) {
            if (!image_shaped(e)) throw;
            util::logger().debug("image: {}/{}: {}; ignored", compat, name, e.what());
            continue;
        }
        if (type != Type::Regular && type != Type::Symlink) {
            util::logger().debug("image: {}/{} is neither a file nor a symlink; ignored", compat,
                                 name);
            continue;
        }
        if (!version.empty() && (best.empty() || util::compare_versions(version, best) > 0))
            best = version;
        if (soname) image.cuda_compat_sonames.push_back(name);
    }
    image.cuda_compat_version = best;
    std::sort(image.cuda_compat_sonames.begin(), image.cuda_compat_sonames.end());
}

// Whether the image's /etc/ld.so.conf names anything (a line other than
// blanks and comments); one that cannot be read as a regular file counts as
// none (nothing of it is ever handed to ldconfig by this answer).
bool names_directories(os::SystemFiles& sys, int etc_fd) {
    constexpr std::size_t kMaxConf = 1 << 20;
    std::string text;
    try {
        text = sys.read_regular_at(etc_fd, "ld.so.conf", kMaxConf).data;
    } catch (const util::Error& e) {
        if (!image_shaped(e)) throw;
        if (e.code().value() != ENOENT)
            util::logger().debug("image: /etc/ld.so.conf not read: {}", e.what());
        return false;
    }
    for (std::string_view line : util::split(text, '\n')) {
        line = line.substr(0, line.find('#'));
        if (line.find_first_not_of(" \t\r\f\v") != std::string_view::npos) return true;
    }
    return false;
}

}  // namespace

bool is_version(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    for (auto part : util::split(s, '.'))
        if (part.empty() || part.size() > 9 ||
            part.find_first_not_of("0123456789") != std::string_view::npos)
            return false;
    return true;
}

Image inspect_image(os::SystemFiles& sys, int root_fd) {
    Image image;  // lib64 layout unless the image is Debian-like
    // Links are followed inside the root: an image may link these anywhere in itself.
    auto exists = [&](const char* path) {
        return sys.stat_in_root(root_fd, path).type != Type::Missing;
    };
    if (exists("/etc/debian_version") || open_dir(sys, root_fd, util::platform::kMultiarchLibDir)) {
        image.lib_dir = util::platform::kMultiarchLibDir;
        image.lib32_dir = util::platform::kMultiarchLib32Dir;
    }
    cuda_compat(sys, root_fd, image);
    image.has_ldcache = exists("/etc/ld.so.cache");
    if (!image.has_ldcache) {
        const util::Fd etc = open_dir(sys, root_fd, "/etc");
        image.ld_so_conf = etc && names_directories(sys, etc.get());
    }
    return image;
}

Image inspect_image(os::SystemFiles& sys, const std::filesystem::path& rootfs) {
    const util::Fd root = sys.open_root(rootfs);
    return inspect_image(sys, root.get());
}

Image inspect_image(const std::filesystem::path& rootfs) {
    os::LinuxSystem sys;
    return inspect_image(sys, rootfs);
}

}  // namespace gpubind::decide
