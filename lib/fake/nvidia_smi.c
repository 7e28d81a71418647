/* The fake nvidia-smi of a simulated node. It loads libnvidia-ml.so.1 by its
 * soname, so the dynamic loader (LD_LIBRARY_PATH, then the ld.so.cache)
 * decides which NVML it talks to, as the real one does.
 *
 *   nvidia-smi -L     one line per visible GPU, in the real tool's format,
 *                     each followed by its MIG devices
 *   nvidia-smi        a short summary: driver and CUDA versions, the GPUs
 *
 * Exit status: 0, or the NVML error that stopped it (6 "No devices were
 * found", 9 no driver, 12 no NVML library), 2 for a bad command line. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nvml_abi.h"

typedef nvmlReturn_t (*init_fn)(void);
typedef nvmlReturn_t (*shutdown_fn)(void);
typedef const char* (*error_string_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*string_fn)(char*, unsigned int);
typedef nvmlReturn_t (*int_fn)(int*);
typedef nvmlReturn_t (*count_fn)(unsigned int*);
typedef nvmlReturn_t (*handle_by_index_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*device_string_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*device_pci_fn)(nvmlDevice_t, nvmlPciInfo_t*);
typedef nvmlReturn_t (*device_two_uints_fn)(nvmlDevice_t, unsigned int*, unsigned int*);
typedef nvmlReturn_t (*device_uint_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*mig_by_index_fn)(nvmlDevice_t, unsigned int, nvmlDevice_t*);

static struct {
    init_fn init;
    shutdown_fn shutdown;
    error_string_fn error_string;
    string_fn driver_version;
    int_fn cuda_version;
    count_fn count;
    handle_by_index_fn by_index;
    device_string_fn name;
    device_string_fn uuid;
    device_pci_fn pci;
    device_two_uints_fn mig_mode;
    device_uint_fn max_mig;
    mig_by_index_fn mig_by_index;
} nvml;

static void* lookup(void* lib, const char* name, int* missing) {
    void* f = dlsym(lib, name);
    if (f == NULL) {
        fprintf(stderr, "nvidia-smi: %s: %s\n", name, "missing from libnvidia-ml.so.1");
        *missing = 1;
    }
    return f;
}

static int load(void) {
    int missing = 0;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char* why = dlerror();
        printf("nvidia-smi: cannot load libnvidia-ml.so.1: %s\n", why ? why : "unknown error");
        return -1;
    }
    /* dlsym's void* converts to a function pointer (POSIX) */
    nvml.init = (init_fn)lookup(lib, "nvmlInit_v2", &missing);
    nvml.shutdown = (shutdown_fn)lookup(lib, "nvmlShutdown", &missing);
    nvml.error_string = (error_string_fn)lookup(lib, "nvmlErrorString", &missing);
    nvml.driver_version = (string_fn)lookup(lib, "nvmlSystemGetDriverVersion", &missing);
    nvml.cuda_version = (int_fn)lookup(lib, "nvmlSystemGetCudaDriverVersion", &missing);
    nvml.count = (count_fn)lookup(lib, "nvmlDeviceGetCount_v2", &missing);
    nvml.by_index = (handle_by_index_fn)lookup(lib, "nvmlDeviceGetHandleByIndex_v2", &missing);
    nvml.name = (device_string_fn)lookup(lib, "nvmlDeviceGetName", &missing);
    nvml.uuid = (device_string_fn)lookup(lib, "nvmlDeviceGetUUID", &missing);
    nvml.pci = (device_pci_fn)lookup(lib, "nvmlDeviceGetPciInfo_v3", &missing);
    nvml.mig_mode = (device_two_uints_fn)lookup(lib, "nvmlDeviceGetMigMode", &missing);
    nvml.max_mig = (device_uint_fn)lookup(lib, "nvmlDeviceGetMaxMigDeviceCount", &missing);
    nvml.mig_by_index =
        (mig_by_index_fn)lookup(lib, "nvmlDeviceGetMigDeviceHandleByIndex", &missing);
    return missing ? -1 : 0;
}

/* Prints one GPU's MIG devices in -L's format. */
static void list_migs(nvmlDevice_t gpu) {
    unsigned current = 0, pending = 0, max = 0, i;
    if (nvml.mig_mode(gpu, &current, &pending) != NVML_SUCCESS ||
        current != NVML_DEVICE_MIG_ENABLE || nvml.max_mig(gpu, &max) != NVML_SUCCESS)
        return;
    for (i = 0; i < max; ++i) {
        nvmlDevice_t mig;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        const char* profile;
        if (nvml.mig_by_index(gpu, i, &mig) != NVML_SUCCESS) continue;
        if (nvml.name(mig, name, sizeof name) != NVML_SUCCESS ||
            nvml.uuid(mig, uuid, sizeof uuid) != NVML_SUCCESS)
            continue;
        profile = strstr(name, " MIG ");
        profile = profile != NULL ? profile + 5 : name;
        printf("  MIG %-11s Device %2u: (UUID: %s)\n", profile, i, uuid);
    }
}

static int list_gpus(unsigned count) {
    unsigned i;
    for (i = 0; i < count; ++i) {
        nvmlDevice_t gpu;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlReturn_t r = nvml.by_index(i, &gpu);
        if (r == NVML_SUCCESS) r = nvml.name(gpu, name, sizeof name);
        if (r == NVML_SUCCESS) r = nvml.uuid(gpu, uuid, sizeof uuid);
        if (r != NVML_SUCCESS) {
            printf("Unable to query GPU %u: %s\n", i, nvml.error_string(r));
            return (int)r;
        }
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        list_migs(gpu);
    }
    return 0;
}

static int summary(unsigned count) {
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A";
    int cuda = 0;
    unsigned i;
    nvml.driver_version(version, sizeof version);
    nvml.cuda_version(&cuda);
    printf("NVIDIA-SMI %s (gpubind simulated node)  Driver Version: %s  CUDA Version: %d.%d\n",
           version, version, cuda / 1000, (cuda % 1000) / 10);
    printf("GPU  %-36s %-18s %s\n", "Name", "Bus-Id", "MIG M.");
    for (i = 0; i < count; ++i) {
        nvmlDevice_t gpu;
        nvmlPciInfo_t pci;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        unsigned current = 0, pending = 0;
        if (nvml.by_index(i, &gpu) != NVML_SUCCESS ||
            nvml.name(gpu, name, sizeof name) != NVML_SUCCESS ||
            nvml.pci(gpu, &pci) != NVML_SUCCESS)
            continue;
        nvml.mig_mode(gpu, &current, &pending);
        printf("%3u  %-36s %-18s %s\n", i, name, pci.busId,
               current == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled");
    }
    return 0;
}

int main(int argc, char** argv) {
    int list = 0, rc;
    unsigned count = 0;
    nvmlReturn_t r;
    if (argc > 2) {
        fprintf(stderr, "nvidia-smi: too many arguments (this fake knows -L and nothing)\n");
        return 2;
    }
    if (argc == 2) {
        if (strcmp(argv[1], "-L") == 0 || strcmp(argv[1], "--list-gpus") == 0) {
            list = 1;
        } else if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
            printf("usage: nvidia-smi [-L]  (the fake of a gpubind simulated node)\n");
            return 0;
        } else {
            fprintf(stderr, "nvidia-smi: unknown argument %s (this fake knows -L)\n", argv[1]);
            return 2;
        }
    }
    if (load() != 0) return NVML_ERROR_LIBRARY_NOT_FOUND;
    r = nvml.init();
    if (r != NVML_SUCCESS) {
        printf("nvidia-smi: cannot talk to the NVIDIA driver: %s\n", nvml.error_string(r));
        return (int)r;
    }
    r = nvml.count(&count);
    if (r != NVML_SUCCESS || count == 0) {
        printf("No devices were found\n");
        nvml.shutdown();
        return NVML_ERROR_NOT_FOUND;
    }
    rc = list ? list_gpus(count) : summary(count);
    nvml.shutdown();
    return rc;
}
