/* How the fake driver (libnvidia-ml, libcuda) sees the node it runs on,
 * by the rules the real driver follows:
 *
 *  - The node's root is where the library itself was loaded from: the part of
 *    its path before the last "/usr/lib" (or, failing that, "/lib") directory,
 *    so "/" inside a container and DIR for a simulated node at DIR; for a
 *    driver in a prefix under /usr/local (DIR/usr/local/nvidia/lib64), the
 *    part before that "/usr/local".
 *  - The driver is loaded when <root>/proc/driver/nvidia/version is readable
 *    and <root>/dev/nvidiactl can be opened.
 *  - A GPU is visible when its <root>/proc/driver/nvidia/gpus/<bus id> entry
 *    is there and its <root>/dev/nvidia<minor> can be opened. A device node
 *    "can be opened" when open() succeeds or fails with ENXIO (allowed, but no
 *    driver behind the major on this kernel); EPERM (refused by the device
 *    cgroup), EACCES or ENOENT hide it.
 *  - A MIG device is visible when its parent GPU is, its GPU instance and
 *    compute instance access files are present under
 *    <root>/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access,
 *    and the /dev/nvidia-caps/nvidia-cap<minor> nodes those files name can be
 *    opened. A GPU whose capabilities/gpu<minor>/mig directory exists has MIG
 *    mode enabled.
 *
 * GPUs are ordered by PCI bus id (as NVML enumerates them), MIG devices by
 * GPU instance then compute instance id. */
#ifndef GPUBIND_FAKE_SCAN_H
#define GPUBIND_FAKE_SCAN_H

#include <limits.h>

#include "fake_node.h"

#define FAKE_MAX_GPUS 256u
#define FAKE_MAX_MIGS (FAKE_MIG_MAX_GPU_MINORS * FAKE_MIG_MAX_GI * FAKE_MIG_MAX_CI)

struct fake_gpu {
    unsigned minor;
    unsigned domain, bus, device, function;
    char bus_id[32]; /* as in procfs: "0000:1b:00.0" */
    char model[96];
    char uuid[FAKE_UUID_SIZE];
    int mig_enabled;
    unsigned mig_first; /* its MIG devices: migs[mig_first .. mig_first + mig_count) */
    unsigned mig_count;
};

struct fake_mig {
    unsigned gpu; /* index of the parent in gpus[] */
    unsigned gi, ci;
    char uuid[FAKE_UUID_SIZE];
};

struct fake_node {
    char root[PATH_MAX]; /* "" for "/" */
    char driver_version[80];
    unsigned gpu_count;
    struct fake_gpu gpus[FAKE_MAX_GPUS];
    unsigned mig_count;
    struct fake_mig migs[FAKE_MAX_MIGS];
};

enum fake_scan_result {
    FAKE_SCAN_OK = 0,
    FAKE_SCAN_NO_DRIVER,     /* no version file, or no /dev/nvidiactl */
    FAKE_SCAN_NO_PERMISSION, /* /dev/nvidiactl refused (EPERM, EACCES) */
};

/* The root of the node the object holding `symbol` was loaded from. */
void fake_node_root(const void* symbol, char* out, unsigned long size)
    __attribute__((visibility("hidden")));

/* Fills `node` (root already set) from the node. */
enum fake_scan_result fake_node_scan(struct fake_node* node) __attribute__((visibility("hidden")));

#endif
