/* The fake driver's view of the node: see fake_scan.h for the rules. */
#include "fake_scan.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether `path` ends with a library directory starting at `at`:
 * "<dir>/" "<dir>64/" "<dir>32/" where `dir` has length `n`. */
static int is_lib_dir(const char* at, size_t n) {
    const char* rest = at + n;
    return rest[0] == '/' || ((rest[0] == '6' || rest[0] == '3') &&
                              (rest[1] == '4' || rest[1] == '2') && rest[2] == '/');
}

static const char* last_lib_dir(const char* path, const char* dir) {
    size_t n = strlen(dir);
    const char* found = NULL;
    const char* p = path;
    while ((p = strstr(p, dir)) != NULL) {
        if (is_lib_dir(p, n)) found = p;
        ++p;
    }
    return found;
}

void fake_node_root(const void* symbol, char* out, unsigned long size) {
    Dl_info info;
    char resolved[PATH_MAX];
    const char* path;
    const char* cut;
    size_t len;

    out[0] = '\0';
    if (size == 0) return;
    if (dladdr(symbol, &info) == 0 || info.dli_fname == NULL) return;
    path = info.dli_fname;
    if (path[0] != '/') {
        if (realpath(path, resolved) == NULL) return;
        path = resolved;
    }
    cut = last_lib_dir(path, "/usr/lib");
    if (cut == NULL) {
        /* A driver in a prefix of its own under /usr/local (<root>/usr/local/
         * nvidia/lib64): the root is before that /usr/local. */
        const char* local = NULL;
        const char* p;
        cut = last_lib_dir(path, "/lib");
        for (p = path; cut != NULL && (p = strstr(p, "/usr/local/")) != NULL && p < cut; ++p)
            local = p;
        if (local != NULL) cut = local;
    }
    if (cut == NULL) return;
    len = (size_t)(cut - path);
    if (len >= size) return;
    memcpy(out, path, len);
    out[len] = '\0';
}

/* snprintf into a PATH_MAX buffer; -1 (and an empty string) when it does not fit. */
__attribute__((format(printf, 2, 3))) static int path_of(char* out, const char* fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_MAX) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

/* Reads a small text file whole; -1 when it cannot be read. */
static int read_small(const char* path, char* buf, size_t size) {
    size_t used = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (used + 1 < size) {
        ssize_t n = read(fd, buf + used, size - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0) break;
        used += (size_t)n;
    }
    close(fd);
    buf[used] = '\0';
    return 0;
}

/* 1 when the device node opens or fails with ENXIO, else 0 with errno set. */
static int node_opens(const char* path, int flags) {
    int fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENXIO;
}

/* Copies the value of "Key:<blanks>value" from a procfs text, trimmed. */
static int field(const char* text, const char* key, char* out, size_t size) {
    size_t n = strlen(key);
    const char* line = text;
    while (line != NULL && *line != '\0') {
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            const char* v = line + n + 1;
            const char* end = strchr(v, '\n');
            size_t len;
            if (end == NULL) end = v + strlen(v);
            while (v < end && (*v == ' ' || *v == '\t')) ++v;
            while (end > v && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) --end;
            len = (size_t)(end - v);
            if (len >= size) return -1;
            memcpy(out, v, len);
            out[len] = '\0';
            return 0;
        }
        line = strchr(line, '\n');
        if (line != NULL) ++line;
    }
    return -1;
}

static int parse_uint(const char* s, unsigned* out) {
    char* end;
    unsigned long v;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > 0xffffffffUL) return -1;
    *out = (unsigned)v;
    return 0;
}

/* "dddd:bb:dd.f" (hex), the name of a GPU's procfs directory. */
static int parse_bus_id(const char* s, struct fake_gpu* gpu) {
    unsigned domain, bus, device, function;
    int used = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &used) != 4) return -1;
    if (s[used] != '\0' || bus > 0xff || device > 0x1f || function > 7) return -1;
    gpu->domain = domain;
    gpu->bus = bus;
    gpu->device = device;
    gpu->function = function;
    return 0;
}

static int gpu_before(const struct fake_gpu* a, const struct fake_gpu* b) {
    if (a->domain != b->domain) return a->domain < b->domain;
    if (a->bus != b->bus) return a->bus < b->bus;
    if (a->device != b->device) return a->device < b->device;
    return a->function < b->function;
}

/* The driver version: the first word of the version file's first line
 * that is digits and dots with a dot ("... Kernel Module  550.54.15  ..."). */
static int parse_driver_version(const char* text, char* out, size_t size) {
    const char* p = text;
    const char* eol = strchr(text, '\n');
    if (eol == NULL) eol = text + strlen(text);
    while (p < eol) {
        const char* w;
        size_t len;
        int digits_dots = 1, dots = 0;
        while (p < eol && (*p == ' ' || *p == '\t')) ++p;
        w = p;
        while (p < eol && *p != ' ' && *p != '\t') {
            if (*p == '.')
                ++dots;
            else if (*p < '0' || *p > '9')
                digits_dots = 0;
            ++p;
        }
        len = (size_t)(p - w);
        if (len > 0 && digits_dots && dots > 0 && w[0] != '.' && len < size) {
            memcpy(out, w, len);
            out[len] = '\0';
            return 0;
        }
    }
    return -1;
}

/* The ids of the "<prefix><N>" subdirectories of `dir` below `limit`, sorted. */
static unsigned list_ids(const char* dir, const char* prefix, unsigned limit, unsigned* ids) {
    unsigned count = 0;
    size_t n = strlen(prefix);
    struct dirent* e;
    DIR* d = opendir(dir);
    if (d == NULL) return 0;
    while ((e = readdir(d)) != NULL && count < limit) {
        unsigned id, i;
        if (strncmp(e->d_name, prefix, n) != 0 || parse_uint(e->d_name + n, &id) != 0) continue;
        if (id >= limit) continue;
        /* insertion keeps the list sorted */
        for (i = count; i > 0 && ids[i - 1] > id; --i) ids[i] = ids[i - 1];
        ids[i] = id;
        ++count;
    }
    closedir(d);
    return count;
}

/* Whether a capability access file is present and its device node opens. */
static int cap_usable(const struct fake_node* node, const char* access) {
    char text[256], value[32], dev[PATH_MAX];
    unsigned minor;
    if (read_small(access, text, sizeof text) != 0) return 0;
    if (field(text, "DeviceFileMinor", value, sizeof value) != 0 || parse_uint(value, &minor) != 0)
        return 0;
    path_of(dev, "%s/dev/nvidia-caps/nvidia-cap%u", node->root, minor);
    return node_opens(dev, O_RDONLY);
}

static void scan_mig(struct fake_node* node, unsigned index) {
    struct fake_gpu* gpu = &node->gpus[index];
    char dir[PATH_MAX], path[PATH_MAX];
    unsigned gis[FAKE_MIG_MAX_GI], cis[FAKE_MIG_MAX_CI];
    unsigned ngi, g;
    struct stat st;

    gpu->mig_first = node->mig_count;
    gpu->mig_count = 0;
    path_of(dir, "%s/proc/driver/nvidia/capabilities/gpu%u/mig", node->root, gpu->minor);
    gpu->mig_enabled = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    if (!gpu->mig_enabled) return;
    ngi = list_ids(dir, "gi", FAKE_MIG_MAX_GI, gis);
    for (g = 0; g < ngi; ++g) {
        unsigned nci, c;
        path_of(path, "%s/gi%u/access", dir, gis[g]);
        if (!cap_usable(node, path)) continue;
        path_of(path, "%s/gi%u", dir, gis[g]);
        nci = list_ids(path, "ci", FAKE_MIG_MAX_CI, cis);
        for (c = 0; c < nci && node->mig_count < FAKE_MAX_MIGS; ++c) {
            struct fake_mig* mig;
            path_of(path, "%s/gi%u/ci%u/access", dir, gis[g], cis[c]);
            if (!cap_usable(node, path)) continue;
            mig = &node->migs[node->mig_count++];
            mig->gpu = index;
            mig->gi = gis[g];
            mig->ci = cis[c];
            fake_mig_uuid(gpu->uuid, mig->gi, mig->ci, mig->uuid, sizeof mig->uuid);
            ++gpu->mig_count;
        }
    }
}

/* Reads one GPU's procfs entry; 0 when it is a visible GPU. */
static int scan_gpu(const struct fake_node* node, const char* name, struct fake_gpu* gpu) {
    char path[PATH_MAX], text[4096], value[96];
    memset(gpu, 0, sizeof *gpu);
    if (parse_bus_id(name, gpu) != 0 || strlen(name) >= sizeof gpu->bus_id) return -1;
    strcpy(gpu->bus_id, name);
    path_of(path, "%s/proc/driver/nvidia/gpus/%s/information", node->root, name);
    if (read_small(path, text, sizeof text) != 0) return -1;
    if (field(text, "Model", gpu->model, sizeof gpu->model) != 0) return -1;
    if (field(text, "GPU UUID", gpu->uuid, sizeof gpu->uuid) != 0) return -1;
    if (field(text, "Device Minor", value, sizeof value) != 0 ||
        parse_uint(value, &gpu->minor) != 0)
        return -1;
    if (field(text, "GPU Excluded", value, sizeof value) == 0 && strcmp(value, "Yes") == 0)
        return -1;
    path_of(path, "%s/dev/nvidia%u", node->root, gpu->minor);
    return node_opens(path, O_RDWR) ? 0 : -1;
}

enum fake_scan_result fake_node_scan(struct fake_node* node) {
    char path[PATH_MAX], text[1024];
    struct dirent* e;
    DIR* d;
    unsigned i;

    node->gpu_count = 0;
    node->mig_count = 0;
    path_of(path, "%s/proc/driver/nvidia/version", node->root);
    if (read_small(path, text, sizeof text) != 0 ||
        parse_driver_version(text, node->driver_version, sizeof node->driver_version) != 0)
        return FAKE_SCAN_NO_DRIVER;
    path_of(path, "%s/dev/nvidiactl", node->root);
    if (!node_opens(path, O_RDWR))
        return errno == EPERM || errno == EACCES ? FAKE_SCAN_NO_PERMISSION : FAKE_SCAN_NO_DRIVER;

    path_of(path, "%s/proc/driver/nvidia/gpus", node->root);
    d = opendir(path);
    if (d == NULL) return FAKE_SCAN_OK;
    while ((e = readdir(d)) != NULL && node->gpu_count < FAKE_MAX_GPUS) {
        struct fake_gpu gpu;
        unsigned at;
        if (e->d_name[0] == '.' || scan_gpu(node, e->d_name, &gpu) != 0) continue;
        for (at = node->gpu_count; at > 0 && gpu_before(&gpu, &node->gpus[at - 1]); --at)
            node->gpus[at] = node->gpus[at - 1];
        node->gpus[at] = gpu;
        ++node->gpu_count;
    }
    closedir(d);
    for (i = 0; i < node->gpu_count; ++i) scan_mig(node, i);
    return FAKE_SCAN_OK;
}
