/* gpubind_seal PROGRAM [ARG...]: runs a test where it cannot write the host.
 *
 * Every test executable runs through it (tests/CMakeLists.txt sets it as the
 * targets' CROSSCOMPILING_EMULATOR, which CTest puts before each test and each
 * test listing). Run as root, it gives the test a private mount namespace in
 * which every mount of the host is read-only, then gives back what a test may
 * write:
 *   - fresh tmpfs at /tmp, /var/tmp and /run: the tests' own directories
 *     (TMPDIR is set to /tmp),
 *     runc's state, the CDI spec directory /var/run/cdi; gone when the test
 *     ends, never seen by the host or by another test;
 *   - the kernel's interfaces the runtimes under test write: /proc, the
 *     cgroup file systems, bpffs, /dev/pts, /dev/shm and /dev/mqueue. Device
 *     nodes stay usable (a read-only mount does not stop writes to /dev/null);
 *     new nodes in /dev cannot be made.
 * A test whose code under test would write outside its own directories then
 * fails (EROFS) instead of changing the machine: /etc, /usr, /dev and / are
 * read-only to it. Mounts it makes stay in its namespace and go with it.
 *
 * Not root: the test runs as it is; file permissions already keep an
 * unprivileged test out of the host's files. GPUBIND_SEAL=off runs it as it is
 * too (to look at a failing test's leftovers).
 *
 * A plain C program with no library of the project's, so that what it guards
 * cannot break it. Exit codes: the test's own; 125 when sealing failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { kSealFailed = 125 };

static void die(const char* what, const char* path) {
    fprintf(stderr, "gpubind_seal: %s %s: %s\n", what, path, strerror(errno));
    exit(kSealFailed);
}

static int set_attr(const char* path, unsigned long long set, unsigned long long clear) {
    struct mount_attr attr = {.attr_set = set, .attr_clr = clear};
    return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW,
                        &attr, sizeof attr);
}

/* Whether PATH is the root of a mount (a directory whose parent is on
 * another mount): the writable kernel interfaces below are only given back
 * where the host has them mounted. */
static int is_mount_point(const char* path) {
    struct statx self, parent;
    char up[4096];
    if (snprintf(up, sizeof up, "%s/..", path) >= (int)sizeof up) return 0;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &self) != 0) return 0;
    if (statx(AT_FDCWD, up, 0, STATX_BASIC_STATS, &parent) != 0) return 0;
    if (self.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
        return (self.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
    return self.stx_dev_major != parent.stx_dev_major || self.stx_dev_minor != parent.stx_dev_minor;
}

static void fresh_tmpfs(const char* path, const char* mode) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return; /* /var/run: a link to /run */
    char data[32];
    snprintf(data, sizeof data, "mode=%s", mode);
    /* Not nodev: the simulated nodes in the tests' directories are real nodes. */
    if (mount("tmpfs", path, "tmpfs", MS_NOSUID, data) != 0) die("cannot mount a tmpfs at", path);
}

static void seal(void) {
    static const char* const writable[] = {"/proc",    "/sys/fs/cgroup", "/sys/fs/bpf",
                                           "/dev/pts", "/dev/shm",       "/dev/mqueue"};
    if (unshare(CLONE_NEWNS) != 0) die("cannot make a mount namespace for", "the test");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("cannot make private", "/");
    if (set_attr("/", MOUNT_ATTR_RDONLY, 0) != 0) die("cannot make read-only", "/");
    for (size_t i = 0; i < sizeof writable / sizeof *writable; ++i)
        if (is_mount_point(writable[i]) && set_attr(writable[i], 0, MOUNT_ATTR_RDONLY) != 0)
            die("cannot make writable", writable[i]);
    fresh_tmpfs("/tmp", "1777");
    fresh_tmpfs("/var/tmp", "1777");
    fresh_tmpfs("/run", "0755");
    if (setenv("TMPDIR", "/tmp", 1) != 0) die("cannot set", "TMPDIR");
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpubind_seal PROGRAM [ARG...]\n");
        return kSealFailed;
    }
    const char* off = getenv("GPUBIND_SEAL");
    if (geteuid() == 0 && !(off != NULL && strcmp(off, "off") == 0)) seal();
    execv(argv[1], argv + 1);
    die("cannot run", argv[1]);
}
