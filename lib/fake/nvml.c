/* The fake libnvidia-ml.so.1 of a simulated node: the NVML calls gpubind and
 * the fake nvidia-smi make, answered from the node's procfs and device nodes
 * (fake_scan.h) and the facts shared with the simulator (fake_node.h). */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_limits.h"
#include "fake_scan.h"
#include "nvml_abi.h"

#define NVML_API __attribute__((visibility("default")))

struct nvmlDevice_st {
    int is_mig;
    unsigned index; /* into node.gpus or node.migs */
};

static struct fake_node g_node;
static unsigned g_init_count;
static struct nvmlDevice_st g_gpu_handles[FAKE_MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[FAKE_MAX_MIGS];

/* For tests of a slow driver: when the node's root has a file
 * gpubind-fake-nvml/inits, each first initialisation appends a line to it,
 * then sleeps as many milliseconds as gpubind-fake-nvml/delay-ms says (as a driver
 * without the persistence daemon takes seconds to initialise). */
static void slow_start(const char* root) {
    char path[4096 + 64], text[32];
    int fd;
    ssize_t n;
    long ms;
    struct timespec ts;
    if (root[0] == '\0' || strlen(root) >= 4096) return;
    snprintf(path, sizeof path, "%s/gpubind-fake-nvml/inits", root);
    fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    n = write(fd, "init\n", 5);
    (void)n;
    close(fd);
    snprintf(path, sizeof path, "%s/gpubind-fake-nvml/delay-ms", root);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return;
    text[n] = '\0';
    ms = strtol(text, NULL, 10);
    if (ms <= 0 || ms > 600000) return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static nvmlReturn_t start(void) {
    unsigned i;
    if (g_init_count > 0) {
        ++g_init_count;
        return NVML_SUCCESS;
    }
    fake_node_root(&g_init_count, g_node.root, sizeof g_node.root);
    slow_start(g_node.root);
    switch (fake_node_scan(&g_node)) {
        case FAKE_SCAN_OK:
            break;
        case FAKE_SCAN_NO_PERMISSION:
            return NVML_ERROR_NO_PERMISSION;
        default:
            return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    for (i = 0; i < g_node.gpu_count; ++i) {
        g_gpu_handles[i].is_mig = 0;
        g_gpu_handles[i].index = i;
    }
    for (i = 0; i < g_node.mig_count; ++i) {
        g_mig_handles[i].is_mig = 1;
        g_mig_handles[i].index = i;
    }
    g_init_count = 1;
    return NVML_SUCCESS;
}

/* The GPU record a handle stands for (a MIG handle's parent), NULL if the
 * handle is not one of ours. */
static const struct fake_gpu* gpu_of(nvmlDevice_t device) {
    uintptr_t p = (uintptr_t)device;
    uintptr_t g0 = (uintptr_t)&g_gpu_handles[0], g1 = (uintptr_t)&g_gpu_handles[g_node.gpu_count];
    uintptr_t m0 = (uintptr_t)&g_mig_handles[0], m1 = (uintptr_t)&g_mig_handles[g_node.mig_count];
    if (g_init_count == 0 || device == NULL) return NULL;
    if (p >= g0 && p < g1 && (p - g0) % sizeof(struct nvmlDevice_st) == 0)
        return &g_node.gpus[device->index];
    if (p >= m0 && p < m1 && (p - m0) % sizeof(struct nvmlDevice_st) == 0)
        return &g_node.gpus[g_node.migs[device->index].gpu];
    return NULL;
}

static const struct fake_mig* mig_of(nvmlDevice_t device) {
    if (gpu_of(device) == NULL || !device->is_mig) return NULL;
    return &g_node.migs[device->index];
}

static nvmlReturn_t copy_out(const char* value, char* out, unsigned length) {
    size_t n = strlen(value);
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, n + 1);
    return NVML_SUCCESS;
}

#define CHECK_INIT()                                            \
    do {                                                        \
        if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED; \
    } while (0)

NVML_API nvmlReturn_t nvmlInit_v2(void) {
    return start();
}
NVML_API nvmlReturn_t nvmlInit(void) {
    return start();
}
NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return start();
}

NVML_API nvmlReturn_t nvmlShutdown(void) {
    CHECK_INIT();
    --g_init_count;
    return NVML_SUCCESS;
}

NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
        case NVML_SUCCESS:
            return "Success";
        case NVML_ERROR_UNINITIALIZED:
            return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT:
            return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED:
            return "Not Supported";
        case NVML_ERROR_NO_PERMISSION:
            return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED:
            return "Already Initialized";
        case NVML_ERROR_NOT_FOUND:
            return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE:
            return "Insufficient Size";
        case NVML_ERROR_DRIVER_NOT_LOADED:
            return "Driver Not Loaded";
        case NVML_ERROR_LIBRARY_NOT_FOUND:
            return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND:
            return "Function Not Found";
        case NVML_ERROR_GPU_IS_LOST:
            return "GPU is lost";
        case NVML_ERROR_OPERATING_SYSTEM:
            return "Operating System Error";
        case NVML_ERROR_MEMORY:
            return "Insufficient Memory";
        default:
            return "Unknown Error";
    }
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
    CHECK_INIT();
    return copy_out(g_node.driver_version, version, length);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
    char text[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 16];
    int cuda;
    CHECK_INIT();
    cuda = fake_cuda_version(fake_driver_major(g_node.driver_version));
    snprintf(text, sizeof text, "%d.%s", cuda / 1000, g_node.driver_version);
    return copy_out(text, version, length);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
    if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    CHECK_INIT();
    *version = fake_cuda_version(fake_driver_major(g_node.driver_version));
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    CHECK_INIT();
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_node.gpu_count;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
    return nvmlDeviceGetCount_v2(count);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    CHECK_INIT();
    if (device == NULL || index >= g_node.gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
    unsigned domain = 0, bus, dev, function = 0;
    int used = 0;
    unsigned i;
    CHECK_INIT();
    if (bus_id == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    /* "domain:bus:device.function", the domain and the function optional */
    if (sscanf(bus_id, "%x:%x:%x.%x%n", &domain, &bus, &dev, &function, &used) != 4 ||
        bus_id[used] != '\0') {
        domain = 0;
        function = 0;
        used = 0;
        if (sscanf(bus_id, "%x:%x.%x%n", &bus, &dev, &function, &used) != 3 || bus_id[used] != '\0')
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (i = 0; i < g_node.gpu_count; ++i) {
        const struct fake_gpu* g = &g_node.gpus[i];
        if (g->domain == domain && g->bus == bus && g->device == dev && g->function == function) {
            *device = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
    unsigned i;
    CHECK_INIT();
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < g_node.gpu_count; ++i)
        if (strcasecmp(g_node.gpus[i].uuid, uuid) == 0) {
            *device = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
    for (i = 0; i < g_node.mig_count; ++i)
        if (strcasecmp(g_node.migs[i].uuid, uuid) == 0) {
            *device = &g_mig_handles[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    gpu = gpu_of(device);
    if (gpu == NULL || index == NULL || device->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_out(device->is_mig ? mig_of(device)->uuid : gpu->uuid, uuid, length);
}

/* A MIG device's name is its parent's followed by " MIG <profile>". */
NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    const struct fake_gpu* gpu;
    char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 64], profile[32];
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->is_mig) return copy_out(gpu->model, name, length);
    fake_mig_profile(gpu->model, profile, sizeof profile);
    snprintf(text, sizeof text, "%s MIG %s", gpu->model, profile);
    return copy_out(text, name, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || type == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *type = (nvmlBrandType_t)fake_model_lookup(gpu->model).brand;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                         int* minor) {
    const struct fake_gpu* gpu;
    struct fake_model_facts facts;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    facts = fake_model_lookup(gpu->model);
    *major = facts.cc_major;
    *minor = facts.cc_minor;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *minor = gpu->minor;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu->domain;
    pci->bus = gpu->bus;
    pci->device = gpu->device;
    pci->pciDeviceId = (fake_model_lookup(gpu->model).device_id << 16) | 0x10deu;
    pci->pciSubSystemId = 0x16a110deu;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", gpu->domain & 0xffffu,
             gpu->bus, gpu->device, gpu->function);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", gpu->domain, gpu->bus, gpu->device,
             gpu->function);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                           unsigned int* pending) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || current == NULL || pending == NULL || device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = gpu->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* Like an H100's: seven slots when MIG is on (more if more devices exist). */
NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || count == NULL || device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = !gpu->mig_enabled ? 0 : gpu->mig_count > 7 ? gpu->mig_count : 7;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                          nvmlDevice_t* mig) {
    const struct fake_gpu* gpu;
    unsigned max = 0;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || mig == NULL || device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDeviceGetMaxMigDeviceCount(device, &max);
    if (index >= max) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= gpu->mig_count) return NVML_ERROR_NOT_FOUND;
    *mig = &g_mig_handles[gpu->mig_first + index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig) {
    CHECK_INIT();
    if (gpu_of(device) == NULL || is_mig == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = device->is_mig ? 1u : 0u;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
    const struct fake_mig* mig;
    CHECK_INIT();
    if (gpu_of(device) == NULL || id == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if ((mig = mig_of(device)) == NULL) return NVML_ERROR_NOT_SUPPORTED;
    *id = mig->gi;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
    const struct fake_mig* mig;
    CHECK_INIT();
    if (gpu_of(device) == NULL || id == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if ((mig = mig_of(device)) == NULL) return NVML_ERROR_NOT_SUPPORTED;
    *id = mig->ci;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                                   nvmlDevice_t* device) {
    const struct fake_mig* mig;
    CHECK_INIT();
    if ((mig = mig_of(mig_device)) == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[mig->gpu];
    return NVML_SUCCESS;
}

/* ---- NVLink ---------------------------------------------------------------
 * The simulated node's NVLinks come from <root>/gpubind-fake-nvml/nvlink
 * (lib/sim writes it for `simulate --topology`), one fact a line:
 *   link <bus id> <link> <remote type> <remote bus id>   an active link
 *   p2p <bus id> <bus id>                  NVLink P2P is OK between the two
 *   fabric <bus id> <cluster uuid, 32 hex digits> <clique id>
 *   unsupported        the NVLink, P2P and fabric calls answer "function not
 *                      found", as a driver without them would be unusable for
 *                      them
 * Without the file no GPU has NVLink (link state "not supported"). */

struct fake_link {
    int active;
    unsigned type;
    char remote[32];
};
struct fake_fabric {
    int joined;
    unsigned char uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned clique;
};

static int g_nvlink_read;
static int g_nvlink_unsupported;
static int g_nvlink_any;
static struct fake_link g_links[FAKE_MAX_GPUS][NVML_NVLINK_MAX_LINKS];
static struct fake_fabric g_fabric[FAKE_MAX_GPUS];
static unsigned char g_p2p[FAKE_MAX_GPUS][FAKE_MAX_GPUS];

static int gpu_by_bus(const char* bus_id) {
    unsigned i;
    for (i = 0; i < g_node.gpu_count; ++i)
        if (strcasecmp(g_node.gpus[i].bus_id, bus_id) == 0) return (int)i;
    return -1;
}

static void nvlink_line(char* line) {
    char a[32], b[40];
    unsigned link, type, clique, i;
    int ga, gb;
    if (strcmp(line, "unsupported") == 0) {
        g_nvlink_unsupported = 1;
    } else if (sscanf(line, "link %31s %u %u %31s", a, &link, &type, b) == 4) {
        if ((ga = gpu_by_bus(a)) < 0 || link >= NVML_NVLINK_MAX_LINKS) return;
        g_links[ga][link].active = 1;
        g_links[ga][link].type = type;
        snprintf(g_links[ga][link].remote, sizeof g_links[ga][link].remote, "%.31s", b);
        g_nvlink_any = 1;
    } else if (sscanf(line, "p2p %31s %31s", a, b) == 2) {
        if ((ga = gpu_by_bus(a)) < 0 || (gb = gpu_by_bus(b)) < 0) return;
        g_p2p[ga][gb] = g_p2p[gb][ga] = 1;
    } else if (sscanf(line, "fabric %31s %39s %u", a, b, &clique) == 3 && strlen(b) == 32) {
        if ((ga = gpu_by_bus(a)) < 0) return;
        for (i = 0; i < NVML_GPU_FABRIC_UUID_LEN; ++i) {
            unsigned byte;
            if (sscanf(b + 2 * i, "%2x", &byte) != 1) return;
            g_fabric[ga].uuid[i] = (unsigned char)byte;
        }
        g_fabric[ga].joined = 1;
        g_fabric[ga].clique = clique;
    }
}

static void read_nvlink(void) {
    static char text[1 << 18];
    char path[4096 + 64];
    char* line;
    char* save = NULL;
    int fd;
    size_t used = 0;
    if (g_nvlink_read) return;
    g_nvlink_read = 1;
    if (strlen(g_node.root) >= 4096) return;
    snprintf(path, sizeof path, "%s/gpubind-fake-nvml/nvlink", g_node.root);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    for (;;) {
        ssize_t n = read(fd, text + used, sizeof text - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
    }
    close(fd);
    text[used] = '\0';
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        nvlink_line(line);
}

/* The GPU a handle stands for, for the NVLink calls: -1 if none (a MIG
 * handle has no links of its own). */
static int nvlink_gpu(nvmlDevice_t device) {
    if (gpu_of(device) == NULL || device->is_mig) return -1;
    read_nvlink();
    return (int)device->index;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                               nvmlEnableState_t* is_active) {
    int g;
    CHECK_INIT();
    if ((g = nvlink_gpu(device)) < 0 || is_active == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_nvlink_unsupported) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!g_nvlink_any) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    *is_active = g_links[g][link].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* The link's remote end, for an active link. */
static nvmlReturn_t active_link(nvmlDevice_t device, unsigned link, const struct fake_link** out) {
    int g;
    CHECK_INIT();
    if ((g = nvlink_gpu(device)) < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_nvlink_unsupported) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!g_nvlink_any) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS || !g_links[g][link].active)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = &g_links[g][link];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t* pci) {
    const struct fake_link* l = NULL;
    unsigned domain, bus, dev, function;
    nvmlReturn_t r = active_link(device, link, &l);
    if (r != NVML_SUCCESS) return r;
    if (pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(l->remote, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4)
        return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xffffu, bus,
             dev, function);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus, dev, function);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          nvmlIntNvLinkDeviceType_t* type) {
    const struct fake_link* l = NULL;
    nvmlReturn_t r = active_link(device, link, &l);
    if (r != NVML_SUCCESS) return r;
    if (type == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *type = (nvmlIntNvLinkDeviceType_t)l->type;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b,
                                             nvmlGpuP2PCapsIndex_t index,
                                             nvmlGpuP2PStatus_t* status) {
    int ga, gb;
    CHECK_INIT();
    if ((ga = nvlink_gpu(a)) < 0 || (gb = nvlink_gpu(b)) < 0 || status == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_nvlink_unsupported) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (index != NVML_P2P_CAPS_INDEX_NVLINK) return NVML_ERROR_NOT_SUPPORTED;
    *status = ga != gb && g_p2p[ga][gb] ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t* info) {
    int g;
    CHECK_INIT();
    if ((g = nvlink_gpu(device)) < 0 || info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_nvlink_unsupported) return NVML_ERROR_FUNCTION_NOT_FOUND;
    memset(info, 0, sizeof *info);
    info->status = NVML_SUCCESS;
    if (!g_fabric[g].joined) {
        info->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
        return NVML_SUCCESS;
    }
    memcpy(info->clusterUuid, g_fabric[g].uuid, sizeof info->clusterUuid);
    info->cliqueId = g_fabric[g].clique;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}

/* Memory: the model's "<N>GB" (fake_node.h) in GiB for a GPU, the profile's
 * slice for a MIG device; nothing is in use. */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    const struct fake_gpu* gpu;
    unsigned gb;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    gb = device->is_mig ? fake_mig_memory_gb(gpu->model) : fake_model_memory_gb(gpu->model);
    memory->total = (unsigned long long)gb << 30;
    memory->free = memory->total;
    memory->used = 0;
    return NVML_SUCCESS;
}

/* The per-cgroup memory limit (fake_limits.h): offered where the node was
 * made with it, never for a MIG device (as the real one). */
static nvmlReturn_t limits_target(nvmlDevice_t device, const char* name_space,
                                  const struct fake_gpu** gpu) {
    CHECK_INIT();
    if ((*gpu = gpu_of(device)) == NULL || name_space == NULL || name_space[0] != '/')
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!fake_limits_offered(g_node.root) || device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                   nvmlSetMemoryLimits_v1_t* limits) {
    const struct fake_gpu* gpu;
    nvmlReturn_t r = limits_target(device, limits ? limits->nameSpace : NULL, &gpu);
    if (r != NVML_SUCCESS) return r;
    if (limits->softLimit > limits->hardLimit) return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_limits_set(g_node.root, gpu->minor, limits->nameSpace, limits->softLimit,
                        limits->hardLimit) != 0)
        return NVML_ERROR_OPERATING_SYSTEM;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                   nvmlGetMemoryLimits_v1_t* limits) {
    const struct fake_gpu* gpu;
    nvmlReturn_t r = limits_target(device, limits ? limits->nameSpace : NULL, &gpu);
    if (r != NVML_SUCCESS) return r;
    if (fake_limits_get(g_node.root, gpu->minor, limits->nameSpace, &limits->softLimit,
                        &limits->hardLimit) != 0)
        return NVML_ERROR_OPERATING_SYSTEM;
    /* A driver whose limits differ from what was asked (tests of the read-back). */
    if (fake_limits_skewed(g_node.root) && limits->hardLimit != FAKE_NO_LIMIT)
        limits->hardLimit /= 2;
    limits->currentUsed = 0;
    return NVML_SUCCESS;
}

/* Compute modes, kept in <root>/gpubind-fake-nvml/compute-mode as lines
 * "<minor> <mode>" (a GPU without a line: NVML_COMPUTEMODE_DEFAULT, 0); only
 * root may set one, as with the real driver. */
static int compute_mode_path(char* out, size_t size) {
    return snprintf(out, size, "%s/gpubind-fake-nvml/compute-mode", g_node.root) >= (int)size ? -1
                                                                                              : 0;
}

static unsigned compute_mode_of(unsigned minor) {
    char path[4200];
    unsigned m, mode, found = 0;
    FILE* in;
    if (compute_mode_path(path, sizeof path) != 0 || (in = fopen(path, "r")) == NULL) return 0;
    while (fscanf(in, "%u %u", &m, &mode) == 2)
        if (m == minor) found = mode;
    fclose(in);
    return found;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned* mode) {
    const struct fake_gpu* gpu;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || mode == NULL || device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = compute_mode_of(gpu->minor);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, unsigned mode) {
    const struct fake_gpu* gpu;
    char path[4200];
    FILE* out;
    CHECK_INIT();
    if ((gpu = gpu_of(device)) == NULL || device->is_mig || mode > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
    /* Appended: the last line of a GPU is its mode (its directory made the
     * first time: a node simulated without the memory limit has none). */
    if (compute_mode_path(path, sizeof path) != 0) return NVML_ERROR_OPERATING_SYSTEM;
    *strrchr(path, '/') = '\0';
    (void)mkdir(path, 0755);
    path[strlen(path)] = '/';
    if ((out = fopen(path, "a")) == NULL) return NVML_ERROR_OPERATING_SYSTEM;
    fprintf(out, "%u %u\n", gpu->minor, mode);
    return fclose(out) == 0 ? NVML_SUCCESS : NVML_ERROR_OPERATING_SYSTEM;
}

/* Events. A test injects them by appending lines "<GPU index> <Xid>" or
 * "<GPU index> <Xid> <GPU instance> <compute instance>" to
 * <root>/gpubind-fake-nvml/xid (the GPU's NVML index, as the manifest's
 * gpus[].index); each becomes an nvmlEventTypeXidCriticalError event, with
 * the Xid as its data and the MIG instance ids (0xFFFFFFFF, as the driver
 * says of an error it cannot attribute to one, when the line names none),
 * for every event set that registered that GPU for Xid events and was
 * created before the line was written. A GPU's handle (not a
 * MIG device's) supports Xid and ECC events; only Xid events are ever sent. */
#define FAKE_SUPPORTED_EVENTS                                         \
    (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | \
     nvmlEventTypeDoubleBitEccError)

struct nvmlEventSet_st {
    unsigned long long registered[FAKE_MAX_GPUS]; /* event types, by GPU index */
    long long offset;                             /* bytes of the xid file already read */
};

static int open_xid_file(void) {
    char path[PATH_MAX + 64];
    if (strlen(g_node.root) >= PATH_MAX) return -1;
    snprintf(path, sizeof path, "%s/gpubind-fake-nvml/xid", g_node.root);
    return open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                       unsigned long long* types) {
    CHECK_INIT();
    if (gpu_of(device) == NULL || types == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *types = FAKE_SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
    struct stat st;
    int fd;
    CHECK_INIT();
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    if (*set == NULL) return NVML_ERROR_MEMORY;
    /* Events written before the set was made are not its events. */
    if ((fd = open_xid_file()) >= 0) {
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) (*set)->offset = st.st_size;
        close(fd);
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                               nvmlEventSet_t set) {
    CHECK_INIT();
    if (gpu_of(device) == NULL || set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig || (types & ~FAKE_SUPPORTED_EVENTS) != 0) return NVML_ERROR_NOT_SUPPORTED;
    set->registered[device->index] |= types;
    return NVML_SUCCESS;
}

/* The next event of `set` in the xid file, if one is there now: 1 and
 * `data` filled, else 0. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t* data) {
    char text[4096];
    int fd = open_xid_file();
    struct stat st;
    if (fd < 0) return 0;
    for (;;) {
        ssize_t n;
        char *line, *end;
        unsigned gpu, xid, gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) break;
        n = pread(fd, text, sizeof text - 1, set->offset);
        if (n <= 0) break;
        text[n] = '\0';
        if ((end = strchr(text, '\n')) == NULL) break; /* a line still being written */
        *end = '\0';
        line = text;
        set->offset += end - text + 1;
        {
            const int fields = sscanf(line, "%u %u %u %u", &gpu, &xid, &gi, &ci);
            if ((fields != 2 && fields != 4) || gpu >= g_node.gpu_count) continue;
            if (fields == 2) gi = ci = 0xFFFFFFFFu;
        }
        if ((set->registered[gpu] & nvmlEventTypeXidCriticalError) == 0) continue;
        data->device = &g_gpu_handles[gpu];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = xid;
        data->gpuInstanceId = gi;
        data->computeInstanceId = ci;
        close(fd);
        return 1;
    }
    close(fd);
    return 0;
}

static nvmlReturn_t wait_event(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms,
                               int v2) {
    nvmlEventData_t event;
    unsigned waited = 0;
    CHECK_INIT();
    if (set == NULL || data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (;;) {
        if (next_event(set, &event)) {
            data->device = event.device;
            data->eventType = event.eventType;
            data->eventData = event.eventData;
            if (v2) {
                data->gpuInstanceId = event.gpuInstanceId;
                data->computeInstanceId = event.computeInstanceId;
            }
            return NVML_SUCCESS;
        }
        if (waited >= timeout_ms) return NVML_ERROR_TIMEOUT;
        {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        waited += 10;
    }
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                          unsigned int timeoutms) {
    return wait_event(set, data, timeoutms, 1);
}
NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data,
                                       unsigned int timeoutms) {
    return wait_event(set, data, timeoutms, 0);
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    CHECK_INIT();
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}
