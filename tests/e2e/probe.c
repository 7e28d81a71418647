/* probe: runs inside a test container and prints what it sees, one fact a line.
 *
 *   probe cuda              dlopen("libcuda.so.1"): cuInit, version, device count
 *   probe alloc BYTES       cuMemAlloc_v2 of BYTES on device 0: "alloc BYTES result=<CUresult>"
 *   probe nvml              dlopen("libnvidia-ml.so.1"): nvmlInit_v2, device count
 *   probe open PATH...      open(O_RDWR) of each: "PATH ok" or "PATH <ERRNO NAME>"
 *   probe stat PATH...      "PATH c MAJOR:MINOR", "PATH f", "PATH d", "PATH l" or "PATH ENOENT"
 *   probe env NAME...       "NAME=VALUE" or "NAME unset"
 *   probe loaded SONAME...  "SONAME => PATH": the file the kernel mapped for it
 *                           (from /proc/self/maps), or "SONAME dlopen-failed ..."
 *
 * Libraries are loaded by soname, so the container's loader cache decides. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int load(const char* soname, void** lib) {
    *lib = dlopen(soname, RTLD_NOW);
    if (!*lib) {
        printf("%s dlopen-failed %s\n", soname, dlerror());
        return 1;
    }
    return 0;
}

/* The path of the mapping holding the loaded object's dynamic section. */
static void probe_loaded(const char* soname) {
    void* lib;
    struct link_map* map = NULL;
    if (load(soname, &lib)) return;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &map) != 0 || !map) {
        printf("%s dlinfo-failed\n", soname);
        return;
    }
    unsigned long want = (unsigned long)map->l_ld;
    FILE* maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char* path = strchr(line, '/');
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && want >= lo && want < hi && path) {
            path[strcspn(path, "\n")] = 0;
            printf("%s => %s\n", soname, path);
            fclose(maps);
            return;
        }
    }
    if (maps) fclose(maps);
    printf("%s not-mapped\n", soname);
}

static int probe_cuda(void) {
    void* lib;
    if (load("libcuda.so.1", &lib)) return 1;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*version)(int*) = (int (*)(int*))dlsym(lib, "cuDriverGetVersion");
    int (*count)(int*) = (int (*)(int*))dlsym(lib, "cuDeviceGetCount");
    if (!init || !version || !count) {
        printf("libcuda.so.1 missing-symbols\n");
        return 1;
    }
    int v = 0, n = 0;
    int rc_init = init(0), rc_version = version(&v), rc_count = count(&n);
    printf("cuda init=%d version=%d(%d) count=%d(%d)\n", rc_init, v, rc_version, n, rc_count);
    return 0;
}

/* "alloc <bytes> result=<CUresult>": cuMemAlloc_v2 of `bytes` on device 0. */
static int probe_alloc(const char* bytes_text) {
    void* lib;
    if (load("libcuda.so.1", &lib)) return 1;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*get)(int*, int) = (int (*)(int*, int))dlsym(lib, "cuDeviceGet");
    int (*ctx)(void**, unsigned, int) =
        (int (*)(void**, unsigned, int))dlsym(lib, "cuCtxCreate_v2");
    int (*alloc)(unsigned long long*, size_t) =
        (int (*)(unsigned long long*, size_t))dlsym(lib, "cuMemAlloc_v2");
    if (!init || !get || !ctx || !alloc) {
        printf("libcuda.so.1 missing-symbols\n");
        return 1;
    }
    unsigned long long bytes = strtoull(bytes_text, NULL, 10), ptr = 0;
    int dev = 0, rc = init(0);
    void* context = NULL;
    if (rc == 0) rc = get(&dev, 0);
    if (rc == 0) rc = ctx(&context, 0, dev);
    if (rc == 0) rc = alloc(&ptr, (size_t)bytes);
    printf("alloc %llu result=%d\n", bytes, rc);
    return 0;
}

static int probe_nvml(void) {
    void* lib;
    if (load("libnvidia-ml.so.1", &lib)) return 1;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*count)(unsigned*) = (int (*)(unsigned*))dlsym(lib, "nvmlDeviceGetCount_v2");
    if (!init || !count) {
        printf("libnvidia-ml.so.1 missing-symbols\n");
        return 1;
    }
    unsigned n = 0;
    int rc_init = init(), rc_count = count(&n);
    printf("nvml init=%d count=%u(%d)\n", rc_init, n, rc_count);
    return 0;
}

static void probe_open(const char* path) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
        printf("%s ok\n", path);
        close(fd);
    } else {
        printf("%s %s\n", path, strerrorname_np(errno));
    }
}

static void probe_stat(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        printf("%s %s\n", path, strerrorname_np(errno));
    } else if (S_ISCHR(st.st_mode)) {
        printf("%s c %u:%u\n", path, major(st.st_rdev), minor(st.st_rdev));
    } else {
        printf("%s %s\n", path,
               S_ISREG(st.st_mode)   ? "f"
               : S_ISDIR(st.st_mode) ? "d"
               : S_ISLNK(st.st_mode) ? "l"
                                     : "other");
    }
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: probe cuda|nvml|open|stat|env ...\n");
        return 2;
    }
    const char* cmd = argv[1];
    if (!strcmp(cmd, "cuda")) return probe_cuda();
    if (!strcmp(cmd, "alloc") && argc == 3) return probe_alloc(argv[2]);
    if (!strcmp(cmd, "nvml")) return probe_nvml();
    for (int i = 2; i < argc; ++i) {
        if (!strcmp(cmd, "open"))
            probe_open(argv[i]);
        else if (!strcmp(cmd, "stat"))
            probe_stat(argv[i]);
        else if (!strcmp(cmd, "loaded"))
            probe_loaded(argv[i]);
        else if (!strcmp(cmd, "env")) {
            const char* v = getenv(argv[i]);
            if (v)
                printf("%s=%s\n", argv[i], v);
            else
                printf("%s unset\n", argv[i]);
        } else {
            fprintf(stderr, "probe: unknown command %s\n", cmd);
            return 2;
        }
    }
    return 0;
}
