/* The fake libcuda.so.1 of a simulated node: enough of the CUDA driver API
 * to ask what a program in a container would see (the same visibility rules
 * as the fake NVML, fake_scan.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake_limits.h"
#include "fake_mps.h"
#include "fake_scan.h"

#define CUDA_API __attribute__((visibility("default")))

/* The CUDA driver API's types and result values. */
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef unsigned long long CUdeviceptr;
typedef enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_NOT_PERMITTED = 800,
} CUresult;

static struct fake_node g_node;
static int g_initialized;

CUDA_API CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (g_initialized) return CUDA_SUCCESS;
    fake_node_root(&g_initialized, g_node.root, sizeof g_node.root);
    switch (fake_node_scan(&g_node)) {
        case FAKE_SCAN_OK:
            break;
        case FAKE_SCAN_NO_PERMISSION:
            return CUDA_ERROR_NOT_PERMITTED;
        default:
            return CUDA_ERROR_NO_DEVICE;
    }
    if (g_node.gpu_count == 0) return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

/* Answers before cuInit, as the real one does: the version the driver
 * supports, read from the node (0 when there is no driver). */
CUDA_API CUresult cuDriverGetVersion(int* version) {
    static struct fake_node probe;
    if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (g_initialized) {
        *version = fake_cuda_version(fake_driver_major(g_node.driver_version));
        return CUDA_SUCCESS;
    }
    fake_node_root(&g_initialized, probe.root, sizeof probe.root);
    if (fake_node_scan(&probe) != FAKE_SCAN_OK) {
        *version = 0;
        return CUDA_SUCCESS;
    }
    *version = fake_cuda_version(fake_driver_major(probe.driver_version));
    return CUDA_SUCCESS;
}

CUDA_API CUresult cuDeviceGetCount(int* count) {
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *count = (int)g_node.gpu_count;
    return CUDA_SUCCESS;
}

CUDA_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || (unsigned)ordinal >= g_node.gpu_count) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUDA_API CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
    size_t n;
    if (name == NULL || length <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (device < 0 || (unsigned)device >= g_node.gpu_count) return CUDA_ERROR_INVALID_DEVICE;
    /* like the real one: truncated to fit */
    n = strlen(g_node.gpus[device].model);
    if (n >= (size_t)length) n = (size_t)length - 1;
    memcpy(name, g_node.gpus[device].model, n);
    name[n] = '\0';
    return CUDA_SUCCESS;
}

/* Contexts and memory: a context is its device; an allocation succeeds while
 * this process's allocations on the device stay within the GPU's memory
 * (fake_node.h) and the hard limit the driver holds for the process's cgroup
 * (fake_limits.h) and, under MPS, its daemon's ceiling lowered by the
 * process's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (mps_limit), and fails with
 * CUDA_ERROR_OUT_OF_MEMORY beyond. Nothing is allocated: the pointer is a number. */
struct CUctx_st {
    int device;
};
static struct CUctx_st g_contexts[FAKE_MAX_GPUS];
static CUcontext g_current;
static unsigned long long g_allocated[FAKE_MAX_GPUS];

CUDA_API CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
    (void)flags;
    if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (device < 0 || (unsigned)device >= g_node.gpu_count) return CUDA_ERROR_INVALID_DEVICE;
    g_contexts[device].device = device;
    g_current = *context = &g_contexts[device];
    return CUDA_SUCCESS;
}

/* Under MPS (a `control` socket in the pipe directory): the daemon's pinned
 * memory ceiling for `device`, lowered by this process's
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<dev>=<size>,..." or one size for
 * every device), which can never raise it. FAKE_NO_LIMIT without MPS. */
static unsigned long long mps_limit(int device) {
    struct sockaddr_un addr;
    char ask[96], reply[128];
    unsigned long long limit = FAKE_NO_LIMIT, mine = 0;
    const char* env = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    ssize_t got;
    int fd;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", fake_mps_pipe_dir(),
                 FAKE_MPS_SOCKET) >= (int)sizeof addr.sun_path ||
        access(addr.sun_path, F_OK) != 0)
        return FAKE_NO_LIMIT;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return FAKE_NO_LIMIT;
    snprintf(ask, sizeof ask, "get_default_device_pinned_mem_limit %d\n", device);
    if (connect(fd, (struct sockaddr*)&addr, sizeof addr) == 0 &&
        write(fd, ask, strlen(ask)) == (ssize_t)strlen(ask) &&
        (got = read(fd, reply, sizeof reply - 1)) > 0) {
        reply[got] = '\0';
        if (fake_mps_size(reply, NULL) > 0) limit = fake_mps_size(reply, NULL);
    }
    close(fd);
    while (env != NULL && *env != '\0') {
        const char* eq = strchr(env, '=');
        const char* comma = strchr(env, ',');
        if (eq != NULL && (comma == NULL || eq < comma)) {
            if (atoi(env) == device) mine = fake_mps_size(eq + 1, NULL);
        } else {
            mine = fake_mps_size(env, NULL);
        }
        env = comma != NULL ? comma + 1 : NULL;
    }
    return mine > 0 && mine < limit ? mine : limit;
}

/* What the process may still allocate on `device`. */
static unsigned long long headroom(int device) {
    char cgroup[4200];
    unsigned long long soft = 0, hard = FAKE_NO_LIMIT;
    unsigned long long total = (unsigned long long)fake_model_memory_gb(g_node.gpus[device].model)
                               << 30;
    if (fake_limits_own_cgroup(cgroup, sizeof cgroup) == 0 &&
        fake_limits_get_key(g_node.root, g_node.gpus[device].minor, cgroup, &soft, &hard) == 0 &&
        hard < total)
        total = hard;
    hard = mps_limit(device);
    if (hard < total) total = hard;
    return total > g_allocated[device] ? total - g_allocated[device] : 0;
}

CUDA_API CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
    int device;
    if (pointer == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (g_current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    device = g_current->device;
    if (bytes > headroom(device)) return CUDA_ERROR_OUT_OF_MEMORY;
    *pointer = 0x100000000ULL + g_allocated[device];
    g_allocated[device] += bytes;
    return CUDA_SUCCESS;
}
