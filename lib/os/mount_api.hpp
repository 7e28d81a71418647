// The new mount API's constants and struct mount_attr
// (include/uapi/linux/mount.h), for libcs that lack them; internal to the
// library (system_linux.cpp, sandbox.cpp).
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "gpubind/util/fd.hpp"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef FSOPEN_CLOEXEC
#define FSOPEN_CLOEXEC 0x00000001
#endif
#ifndef FSMOUNT_CLOEXEC
#define FSMOUNT_CLOEXEC 0x00000001
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#define MOUNT_ATTR_NOEXEC 0x00000008
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

namespace gpubind::os::mount_api {

// fsconfig commands (enum fsconfig_command).
inline constexpr unsigned kFsconfigSetString = 1;
inline constexpr unsigned kFsconfigCmdCreate = 6;

// struct mount_attr, MOUNT_ATTR_SIZE_VER0.
struct MountAttr {
    std::uint64_t attr_set;
    std::uint64_t attr_clr;
    std::uint64_t propagation;
    std::uint64_t userns_fd;
};

// fsopen("tmpfs"), fsconfig with `options` ("mode", "uid", "size", ...),
// fsmount: a detached tmpfs, nosuid, nodev, noexec. Errors name `what`.
// (sandbox.cpp)
util::Fd make_tmpfs(std::initializer_list<std::pair<const char*, std::string>> options,
                    const std::string& what);

}  // namespace gpubind::os::mount_api
