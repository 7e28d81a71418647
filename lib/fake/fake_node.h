/* Facts shared by the simulator (lib/src/sim.cpp) and the fake driver it
 * carries (the C sources in lib/fake): whatever procfs does not say but NVML
 * and CUDA report, computed the same way on both sides so that a simulated
 * node's manifest and what its fake driver reports agree.
 *
 * Plain C99 that also compiles as C++ under gpubind's warnings: static inline
 * functions, no allocation, every output bounded by the caller's buffer. */
#ifndef GPUBIND_FAKE_NODE_H
#define GPUBIND_FAKE_NODE_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
#define FAKE_CAST(type, value) static_cast<type>(value)
#else
#define FAKE_CAST(type, value) ((type)(value))
#endif

/* MIG limits of the driver's capability table (nvidia-caps): GPU instance ids
 * 0..14 and compute instance ids 0..7 on each of GPU minors 0..31. */
#define FAKE_MIG_MAX_GPU_MINORS 32u
#define FAKE_MIG_MAX_GI 15u
#define FAKE_MIG_MAX_CI 8u

/* Buffer for "GPU-"/"MIG-" followed by 36 characters and the NUL. */
#define FAKE_UUID_SIZE 41

/* FNV-1a over a string, then a 64-bit finaliser (splitmix64) to spread it. */
static inline uint64_t fake_hash64(const char* s, uint64_t seed) {
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ seed;
    for (; *s != '\0'; ++s) {
        h ^= FAKE_CAST(uint64_t, FAKE_CAST(unsigned char, *s));
        h *= UINT64_C(0x100000001b3);
    }
    h ^= h >> 30;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 27;
    h *= UINT64_C(0x94d049bb133111eb);
    h ^= h >> 31;
    return h;
}

/* "<prefix>xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from 128 bits. */
static inline void fake_format_uuid(char* out, size_t size, const char* prefix, uint64_t hi,
                                    uint64_t lo) {
    snprintf(out, size, "%s%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
             prefix, hi >> 32, (hi >> 16) & UINT64_C(0xffff), hi & UINT64_C(0xffff), lo >> 48,
             lo & UINT64_C(0xffffffffffff));
}

/* A GPU's UUID on a simulated node: a function of its index and the driver
 * version only, so the same spec always gives the same node. */
static inline void fake_gpu_uuid(unsigned index, const char* driver_version, char* out,
                                 size_t size) {
    char key[128];
    snprintf(key, sizeof key, "gpubind-sim-gpu:%u:%s", index, driver_version);
    fake_format_uuid(out, size, "GPU-", fake_hash64(key, 1), fake_hash64(key, 2));
}

/* A MIG device's UUID from its parent GPU's UUID and its GPU and compute
 * instance ids, shaped like the driver's (a name-based, version 5 UUID). */
static inline void fake_mig_uuid(const char* parent_uuid, unsigned gi, unsigned ci, char* out,
                                 size_t size) {
    char key[160];
    uint64_t hi;
    uint64_t lo;
    snprintf(key, sizeof key, "gpubind-sim-mig:%s:%u:%u", parent_uuid, gi, ci);
    hi = (fake_hash64(key, 3) & ~UINT64_C(0xf000)) | UINT64_C(0x5000);
    lo = (fake_hash64(key, 4) & ~(UINT64_C(3) << 62)) | (UINT64_C(2) << 62);
    fake_format_uuid(out, size, "MIG-", hi, lo);
}

/* The leading number of a driver version ("550.54.15" -> 550), 0 if none. */
static inline unsigned fake_driver_major(const char* version) {
    unsigned major = 0;
    for (; *version >= '0' && *version <= '9'; ++version) {
        major = major * 10u + FAKE_CAST(unsigned, *version - '0');
        if (major > 100000u) return 0;
    }
    return major;
}

/* The CUDA driver API version a driver branch ships, as NVML and
 * cuDriverGetVersion report it (1000 * major + 10 * minor: 12.4 -> 12040).
 * A branch between two listed ones reports the lower's; one older than the
 * oldest listed reports the oldest's. */
static inline int fake_cuda_version(unsigned driver_major) {
    static const struct {
        unsigned driver;
        int cuda;
    } table[] = {
        {470, 11040}, {510, 11060}, {515, 11070}, {520, 11080}, {525, 12000},
        {530, 12010}, {535, 12020}, {545, 12030}, {550, 12040}, {555, 12050},
        {560, 12060}, {565, 12070}, {570, 12080}, {575, 12090}, {580, 13000},
    };
    int cuda = table[0].cuda;
    size_t i;
    for (i = 0; i < sizeof table / sizeof table[0]; ++i)
        if (table[i].driver <= driver_major) cuda = table[i].cuda;
    return cuda;
}

/* What NVML reports about a GPU model that procfs does not say. */
struct fake_model_facts {
    int cc_major; /* CUDA compute capability */
    int cc_minor;
    int brand;          /* an nvmlBrandType_t value */
    unsigned device_id; /* PCI device id */
};

static inline int fake_is_alnum(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Whether `token` appears in `s` as a whole word (not inside a longer run
 * of letters and digits: "L4" is not in "NVIDIA L40S"). */
static inline int fake_has_token(const char* s, const char* token) {
    size_t n = strlen(token);
    const char* p = s;
    while ((p = strstr(p, token)) != NULL) {
        int starts = p == s || !fake_is_alnum(p[-1]);
        int ends = !fake_is_alnum(p[n]);
        if (starts && ends) return 1;
        ++p;
    }
    return 0;
}

/* Facts by the model name's product token; an unknown model is reported as
 * compute capability 8.0, brand NVIDIA, device id 0x20b2. */
static inline struct fake_model_facts fake_model_lookup(const char* model) {
    static const struct {
        const char* token;
        struct fake_model_facts facts;
    } table[] = {
        {"GB200", {10, 0, 14, 0x2941}}, {"B200", {10, 0, 14, 0x2901}},
        {"B100", {10, 0, 14, 0x2901}},  {"GH200", {9, 0, 14, 0x2342}},
        {"H200", {9, 0, 14, 0x2335}},   {"H100", {9, 0, 14, 0x2330}},
        {"H800", {9, 0, 14, 0x2324}},   {"A100", {8, 0, 14, 0x20b2}},
        {"A800", {8, 0, 14, 0x20f5}},   {"A30", {8, 0, 14, 0x20b7}},
        {"A40", {8, 6, 14, 0x2235}},    {"A16", {8, 6, 14, 0x25b6}},
        {"A10", {8, 6, 14, 0x2236}},    {"A2", {8, 6, 14, 0x25b6}},
        {"L40S", {8, 9, 14, 0x26b9}},   {"L40", {8, 9, 14, 0x26b5}},
        {"L4", {8, 9, 14, 0x27b8}},     {"T4", {7, 5, 14, 0x1eb8}},
        {"V100", {7, 0, 2, 0x1db1}},    {"P100", {6, 0, 2, 0x15f8}},
    };
    struct fake_model_facts unknown = {8, 0, 14, 0x20b2};
    size_t i;
    for (i = 0; i < sizeof table / sizeof table[0]; ++i)
        if (fake_has_token(model, table[i].token)) return table[i].facts;
    return unknown;
}

/* A brand's name as NVIDIA_REQUIRE_BRAND spells it. */
static inline const char* fake_brand_name(int brand) {
    switch (brand) {
        case 1:
            return "quadro";
        case 2:
            return "tesla";
        case 3:
            return "nvs";
        case 4:
            return "grid";
        case 5:
            return "geforce";
        case 6:
            return "titan";
        case 14:
            return "nvidia";
        default:
            return "unknown";
    }
}

/* A simulated GPU's memory in GB: the "<N>GB" of its model name, 80 when
 * absent (nvmlDeviceGetMemoryInfo's total, in GiB). */
static inline unsigned fake_model_memory_gb(const char* model) {
    const char* p;
    for (p = model; *p != '\0'; ++p) {
        unsigned n = 0;
        const char* q = p;
        if (*p < '0' || *p > '9' || (p != model && fake_is_alnum(p[-1]))) continue;
        while (*q >= '0' && *q <= '9' && n < 100000u) n = n * 10u + FAKE_CAST(unsigned, *q++ - '0');
        if (q[0] == 'G' && q[1] == 'B' && !fake_is_alnum(q[2]) && n > 0) return n;
    }
    return 80;
}

/* The MIG profile every simulated MIG device has: the smallest slice, a
 * seventh of the GPU, with an eighth of its memory (fake_model_memory_gb), as
 * the driver names it: "1g.10gb" for an 80GB GPU. */
static inline unsigned fake_mig_memory_gb(const char* model) {
    return (fake_model_memory_gb(model) + 4u) / 8u;
}
static inline void fake_mig_profile(const char* model, char* out, size_t size) {
    snprintf(out, size, "1g.%ugb", fake_mig_memory_gb(model));
}

#endif
