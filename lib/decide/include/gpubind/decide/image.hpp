// The image's library layout: read from a container's rootfs by descriptor,
// through the system layer, before the plan (which it feeds) is made.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/os/system.hpp"
#include "gpubind/util/platform.hpp"

namespace gpubind::decide {

// How the image lays out its libraries, read from the rootfs by descriptor.
// The defaults are the lib64 layout.
struct Image {
    std::string lib_dir = "/usr/lib64";  // or "/usr/lib/<multiarch>" (x86_64- or aarch64-linux-gnu)
    // Or "/usr/lib/i386-linux-gnu"; empty: none (always on arm64).
    std::string lib32_dir = util::platform::kHasCompat32 ? "/usr/lib" : "";
    std::string bin_dir = "/usr/bin";
    // CUDA forward compatibility: the highest version among the image's
    // /usr/local/cuda/compat/libcuda.so.<version> entries (regular files or
    // symlinks, never opened or followed; <version> numbers separated by
    // dots), empty when there is none. A compat directory that is a symlink or
    // not a directory counts as none.
    std::string cuda_compat_version;
    // Its entries named like a soname (lib<name>.so.<number>, regular files or
    // symlinks), sorted: what ldconfig would enter for that directory.
    std::vector<std::string> cuda_compat_sonames;
    // The image's loader setup, for the cache refresh: /etc/ld.so.cache is
    // there (a regular file; not parsed here), /etc/ld.so.conf is a regular
    // file with a line other than blanks and comments.
    bool has_ldcache = false;
    bool ld_so_conf = false;
};
inline constexpr const char* kCudaCompatDir = "/usr/local/cuda/compat";

// Whether `s` is a version: numbers separated by single dots ("550.54.15", "12").
// Such versions compare with util's compare_versions (gpubind/util/version.hpp).
bool is_version(std::string_view s);

// Debian multiarch layout when the image has /etc/debian_version or a
// /usr/lib/<triplet> directory, else lib64; the CUDA compat libraries (the
// directory listed by descriptor, its entries checked with fstatat without
// following them); /etc/ld.so.cache there, /etc/ld.so.conf naming anything
// (read as a regular file, not followed). Every access goes through `sys`
// from `root_fd` (open_root's): the lookups stay inside the rootfs
// (open_dir_in_root, stat_in_root). Throws Error when a lookup fails
// otherwise than by a missing file.
Image inspect_image(os::SystemFiles& sys, int root_fd);
// The same with the rootfs at `rootfs` opened through `sys` (open_root).
Image inspect_image(os::SystemFiles& sys, const std::filesystem::path& rootfs);
// The same through LinuxSystem.
Image inspect_image(const std::filesystem::path& rootfs);

}  // namespace gpubind::decide
