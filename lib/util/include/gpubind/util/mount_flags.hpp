// Mount flags a plan asks for and the system layer applies (a subset of
// MOUNT_ATTR_*, named here so the plan stays independent of kernel headers).
#pragma once

namespace gpubind::util {

enum MountFlag : unsigned {
    kMountReadOnly = 1u << 0,
    kMountNoSuid = 1u << 1,
    kMountNoDev = 1u << 2,
    kMountNoExec = 1u << 3,
};

}  // namespace gpubind::util
