/* The simulated driver's per-cgroup GPU memory limits: see fake_limits.h. */
#include "fake_limits.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIMITS_FILE "/gpubind-fake-nvml/memory-limits"
#define MAX_LINE 4400
#define MAX_FILE (256 * 1024)

static int limits_path(const char* root, char* out, size_t size) {
    return snprintf(out, size, "%s" LIMITS_FILE, root) >= (int)size ? -1 : 0;
}

int fake_limits_offered(const char* root) {
    char path[4200];
    return limits_path(root, path, sizeof path) == 0 && access(path, F_OK) == 0;
}

int fake_limits_skewed(const char* root) {
    char path[4200];
    return snprintf(path, sizeof path, "%s" LIMITS_FILE "-skewed", root) < (int)sizeof path &&
           access(path, F_OK) == 0;
}

/* The whole file (NUL-terminated, malloc'd), NULL if absent or too large. */
static char* read_all(const char* path) {
    char* text = malloc(MAX_FILE + 1);
    size_t used = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || text == NULL) {
        if (fd >= 0) close(fd);
        free(text);
        return NULL;
    }
    while (used < MAX_FILE && (n = read(fd, text + used, MAX_FILE - used)) > 0) used += (size_t)n;
    close(fd);
    text[used] = '\0';
    return text;
}

/* Parses "<minor> <soft> <hard> <dir>"; 0 when it is one. */
static int parse_line(const char* line, unsigned* minor, unsigned long long* soft,
                      unsigned long long* hard, char* dir, size_t dir_size) {
    int at = 0;
    if (sscanf(line, "%u %llu %llu %n", minor, soft, hard, &at) != 3 || at == 0) return -1;
    snprintf(dir, dir_size, "%s", line + at);
    dir[strcspn(dir, "\n")] = '\0';
    return 0;
}

/* The cgroup `dir` names, as the kernel names it in /proc/<pid>/cgroup: the
 * path below the cgroup2 mount (of this process's /proc/self/mountinfo) that
 * holds it, with that mount's root before it; `dir` itself where no cgroup2
 * mount holds it (the driver's key for a cgroup: its identity, not a path). */
static void cgroup_key(const char* dir, char* out, size_t size) {
    char* text = read_all("/proc/self/mountinfo");
    char *line, *save = NULL;
    size_t best = 0;
    snprintf(out, size, "%s", dir);
    if (text == NULL) return;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char root[4096], point[4096];
        const char* dash = strstr(line, " - cgroup2 ");
        size_t n;
        if (dash == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2) continue;
        n = strlen(point);
        if (strcmp(point, "/") == 0) n = 0;
        if (strncmp(dir, point, n) != 0 || (dir[n] != '/' && dir[n] != '\0') || n < best) continue;
        best = n;
        if (strcmp(root, "/") == 0)
            snprintf(out, size, "%s", dir[n] ? dir + n : "/");
        else
            snprintf(out, size, "%s%s", root, dir + n);
    }
    free(text);
}

int fake_limits_get(const char* root, unsigned minor, const char* cgroup_dir,
                    unsigned long long* soft, unsigned long long* hard) {
    char key[MAX_LINE];
    cgroup_key(cgroup_dir, key, sizeof key);
    return fake_limits_get_key(root, minor, key, soft, hard);
}

int fake_limits_get_key(const char* root, unsigned minor, const char* key, unsigned long long* soft,
                        unsigned long long* hard) {
    char path[4200], dir[MAX_LINE];
    char *text, *line, *save = NULL;
    unsigned m;
    unsigned long long s, h;
    if (limits_path(root, path, sizeof path) != 0 || (text = read_all(path)) == NULL) return -1;
    *soft = 0;
    *hard = FAKE_NO_LIMIT;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        if (parse_line(line, &m, &s, &h, dir, sizeof dir) == 0 && m == minor &&
            strcmp(dir, key) == 0) {
            *soft = s;
            *hard = h;
        }
    free(text);
    return 0;
}

int fake_limits_set(const char* root, unsigned minor, const char* cgroup_dir,
                    unsigned long long soft, unsigned long long hard) {
    char path[4200], tmp[4300], dir[MAX_LINE], key[MAX_LINE];
    char *text, *line, *save = NULL;
    unsigned m;
    unsigned long long s, h;
    FILE* out;
    int ok;
    cgroup_key(cgroup_dir, key, sizeof key);
    if (limits_path(root, path, sizeof path) != 0 || (text = read_all(path)) == NULL) return -1;
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    out = fopen(tmp, "wx");
    if (out == NULL) {
        free(text);
        return -1;
    }
    /* Every other line kept, this GPU's and cgroup's replaced. */
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        if (parse_line(line, &m, &s, &h, dir, sizeof dir) == 0 &&
            !(m == minor && strcmp(dir, key) == 0))
            fprintf(out, "%s\n", line);
    if (!(soft == 0 && hard == FAKE_NO_LIMIT))
        fprintf(out, "%u %llu %llu %s\n", minor, soft, hard, key);
    free(text);
    ok = fclose(out) == 0 && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    return ok ? 0 : -1;
}

int fake_limits_own_cgroup(char* out, unsigned long size) {
    char* text = read_all("/proc/self/cgroup");
    char *line, *save = NULL;
    int found = -1;
    if (text == NULL) return -1;
    for (line = strtok_r(text, "\n", &save); line != NULL && found != 0;
         line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, "0::", 3) == 0)
            found = snprintf(out, size, "%s", line + 3) < (int)size ? 0 : -1;
    free(text);
    return found;
}
