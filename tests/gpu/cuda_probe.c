/* A container's-eye check of a real GPU: loads the driver's libcuda.so.1 the
 * way a CUDA program does (through the loader cache), makes a context on each
 * device, runs a kernel JIT-compiled from PTX (so the PTX compiler library
 * must be there too) and checks what it wrote. Prints one line per device and
 * exits non-zero at the first failure, naming the call.
 *
 * `cuda-probe alloc BYTES` instead makes a context on device 0, allocates
 * BYTES with cuMemAlloc_v2 and prints "alloc BYTES result=<CUresult>" (2:
 * out of memory), exiting 0 whatever the result: a GPU share's check.
 *
 * Built with no CUDA headers: the few entry points are declared here from the
 * driver API's documented signatures. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;

static const char kPtx[] =
    ".version 7.8\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry triple(.param .u64 out)\n"
    "{\n"
    "  .reg .b32 %r<3>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r1, %tid.x;\n"
    "  mul.wide.u32 %rd3, %r1, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  mul.lo.u32 %r2, %r1, 3;\n"
    "  st.global.u32 [%rd4], %r2;\n"
    "  ret;\n"
    "}\n";

static void* lib;

static void* sym(const char* name) {
    void* f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "cuda-probe: libcuda.so.1 has no %s\n", name);
        exit(2);
    }
    return f;
}

#define CALL(name, sig, ...)                                                        \
    do {                                                                            \
        CUresult r_ = ((CUresult(*) sig)sym(#name))(__VA_ARGS__);                   \
        if (r_ != 0) {                                                              \
            fprintf(stderr, "cuda-probe: %s failed with CUresult %d\n", #name, r_); \
            exit(3);                                                                \
        }                                                                           \
    } while (0)

/* "alloc <bytes> result=<CUresult>": one allocation on device 0. */
static int probe_alloc(const char* text) {
    char* end = NULL;
    const unsigned long long bytes = strtoull(text, &end, 10);
    if (!*text || *end) {
        fprintf(stderr, "cuda-probe: alloc takes a number of bytes, not %s\n", text);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr buf = 0;
    CALL(cuInit, (unsigned), 0);
    CALL(cuDeviceGet, (CUdevice*, int), &dev, 0);
    CALL(cuCtxCreate_v2, (CUcontext*, unsigned, CUdevice), &ctx, 0, dev);
    const CUresult r = ((CUresult(*)(CUdeviceptr*, size_t))sym("cuMemAlloc_v2"))(&buf, bytes);
    printf("alloc %llu result=%d\n", bytes, r);
    /* The process ends here: what it holds goes with it. */
    (void)buf;
    (void)ctx;
    return 0;
}

int main(int argc, char** argv) {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "cuda-probe: %s\n", dlerror());
        return 1;
    }
    if (argc == 3 && !strcmp(argv[1], "alloc")) return probe_alloc(argv[2]);
    int version = 0, count = 0;
    CALL(cuInit, (unsigned), 0);
    CALL(cuDriverGetVersion, (int*), &version);
    CALL(cuDeviceGetCount, (int*), &count);
    printf("cuda-probe: driver API %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10,
           count);
    if (count == 0) return 4;
    for (int i = 0; i < count; ++i) {
        CUdevice dev;
        char name[128] = {0};
        unsigned char uuid[16];
        CUcontext ctx;
        CUmodule mod;
        CUfunction fn;
        CUdeviceptr buf;
        enum { N = 256 };
        unsigned host[N];
        CALL(cuDeviceGet, (CUdevice*, int), &dev, i);
        CALL(cuDeviceGetName, (char*, int, CUdevice), name, (int)sizeof name - 1, dev);
        CALL(cuDeviceGetUuid_v2, (unsigned char*, CUdevice), uuid, dev);
        CALL(cuCtxCreate_v2, (CUcontext*, unsigned, CUdevice), &ctx, 0, dev);
        CALL(cuModuleLoadData, (CUmodule*, const void*), &mod, kPtx);
        CALL(cuModuleGetFunction, (CUfunction*, CUmodule, const char*), &fn, mod, "triple");
        CALL(cuMemAlloc_v2, (CUdeviceptr*, size_t), &buf, sizeof host);
        void* params[] = {&buf};
        CALL(cuLaunchKernel,
             (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
              void*, void**, void**),
             fn, 1, 1, 1, N, 1, 1, 0, NULL, params, NULL);
        CALL(cuCtxSynchronize, (void));
        CALL(cuMemcpyDtoH_v2, (void*, CUdeviceptr, size_t), host, buf, sizeof host);
        for (unsigned k = 0; k < N; ++k) {
            if (host[k] != 3 * k) {
                fprintf(stderr, "cuda-probe: device %d: the kernel wrote %u at %u\n", i, host[k],
                        k);
                return 5;
            }
        }
        CALL(cuMemFree_v2, (CUdeviceptr), buf);
        CALL(cuCtxDestroy_v2, (CUcontext), ctx);
        printf("cuda-probe: device %d: %s GPU-", i, name);
        for (int k = 0; k < 16; ++k)
            printf("%02x%s", uuid[k], k == 3 || k == 5 || k == 7 || k == 9 ? "-" : "");
        printf(": a PTX kernel ran and wrote what it should\n");
    }
    return 0;
}
