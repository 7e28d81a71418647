/* The simulated driver's per-cgroup GPU memory limits (issue 48), shared by
 * the fake NVML (nvmlDeviceSetMemoryLimits_v1 and nvmlDeviceGetMemoryLimits_v1)
 * and the fake CUDA (cuMemAlloc):
 *
 *  - A node made with `gpubind simulate --memory-limits` has the file
 *    <root>/gpubind-fake-nvml/memory-limits: the driver offers the limit only
 *    there (NVML_ERROR_NOT_SUPPORTED without it).
 *  - It holds one line per limit set: "<GPU minor> <soft> <hard> <cgroup>",
 *    bytes, the cgroup as the kernel names it in /proc/<pid>/cgroup (the
 *    directory NVML was given, less the cgroup2 mount holding it, with that
 *    mount's root: "/sys/fs/cgroup/unified/a/b" is "/a/b" on a hybrid host).
 *    Clearing (soft 0, hard ~0) removes the line.
 *  - A process in a container reads the same file where the test mounts it
 *    (/gpubind-fake-nvml/memory-limits: its root is "/"), as a real driver's
 *    limits are the kernel's, seen from everywhere; its cgroup is the "0::"
 *    line of its /proc/self/cgroup (in a cgroup namespace of its own, "/":
 *    no limit is found for it). */
#ifndef GPUBIND_FAKE_LIMITS_H
#define GPUBIND_FAKE_LIMITS_H

#define FAKE_NO_LIMIT (~0ULL)

/* Whether the node offers the limit (its memory-limits file is there). */
int fake_limits_offered(const char* root) __attribute__((visibility("hidden")));

/* Whether the driver reads back half the hard limit it holds (a test of
 * gpubind's read-back): <root>/gpubind-fake-nvml/memory-limits-skewed exists. */
int fake_limits_skewed(const char* root) __attribute__((visibility("hidden")));

/* Sets (or, soft 0 and hard FAKE_NO_LIMIT, clears) the limit of GPU `minor`
 * for `cgroup_dir`. 0, or -1 when the file cannot be written. */
int fake_limits_set(const char* root, unsigned minor, const char* cgroup_dir,
                    unsigned long long soft, unsigned long long hard)
    __attribute__((visibility("hidden")));

/* The limit of GPU `minor` for `cgroup_dir`: soft 0 and hard FAKE_NO_LIMIT
 * when none is set. 0, or -1 when the node does not offer limits. */
int fake_limits_get(const char* root, unsigned minor, const char* cgroup_dir,
                    unsigned long long* soft, unsigned long long* hard)
    __attribute__((visibility("hidden")));

/* The same for the cgroup the kernel names `key` ("/a/b"). */
int fake_limits_get_key(const char* root, unsigned minor, const char* key, unsigned long long* soft,
                        unsigned long long* hard) __attribute__((visibility("hidden")));

/* This process's cgroup (the "0::" line's path of /proc/self/cgroup) into
 * `out`; 0, or -1 without a cgroup v2 line. */
int fake_limits_own_cgroup(char* out, unsigned long size) __attribute__((visibility("hidden")));

#endif
