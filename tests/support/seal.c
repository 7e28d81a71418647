/* gpubind_seal PROGRAM [ARG...]: runs a test where it cannot write the host.
 *
 * Every test executable runs through it (tests/CMakeLists.txt sets it as the
 * targets' CROSSCOMPILING_EMULATOR, which CTest puts before each test and each
 * test listing). Run as root, it gives the test a private mount namespace in
 * which every mount of the host is read-only, then gives back what a test may
 * write:
 *   - fresh tmpfs at /tmp, /var/tmp and /run: the tests' own directories
 *     (TMPDIR is set to /tmp), with the entry holding the build tree, the
 *     sources, the program and the working directory carried over read-only
 *     where they are below one of them (a checkout in /tmp),
 *     runc's state, the CDI spec directory /var/run/cdi; gone when the test
 *     ends, never seen by the host or by another test;
 *   - the kernel's interfaces the runtimes under test write: /proc, the
 *     cgroup file systems, bpffs, /dev/pts, /dev/shm and /dev/mqueue. Device
 *     nodes stay usable (a read-only mount does not stop writes to /dev/null);
 *     new nodes in /dev cannot be made.
 * What in /proc changes the whole machine stays read-only: /proc/sys (every
 * sysctl), /proc/sysrq-trigger, /proc/irq, /proc/bus (PCI config space) and
 * /proc/fs, each bound over itself read-only. A runtime that mounts a new
 * /proc from a user namespace (rootless runc, runc with id mappings) needs a
 * proc mount in its mount namespace that nothing covers (the kernel's
 * mount_too_revealing()): a second, fresh proc is mounted at /proc/sys/kernel
 * before the read-only /proc/sys goes over it, so that no path reaches it.
 * The machine's block devices (its disks, zram, device-mapper) are bound
 * over themselves nodev: opening one fails (EACCES). Loop devices are left
 * as they are: the hostile suite attaches its own over its own files
 * (losetup picks any free one, the kernel makes new nodes as it needs).
 * A test whose code under test would write outside its own directories then
 * fails (EROFS, EACCES) instead of changing the machine: /etc, /usr, /dev and
 * / are read-only to it. Mounts it makes stay in its namespace and go with it.
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
#include <ftw.h>
#include <linux/major.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
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

/* The name of the entry of DIR that holds PATH ("x" for "/tmp/x/build" in
 * "/tmp"), in OUT; 0 when PATH is not below DIR. */
static int entry_below(const char* dir, const char* path, char* out, size_t size) {
    const size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0 || path[n] != '/' || path[n + 1] == '\0') return 0;
    const char* name = path + n + 1;
    const size_t len = strcspn(name, "/");
    if (len >= size) return 0;
    memcpy(out, name, len);
    out[len] = '\0';
    return 1;
}

/* A fresh tmpfs at PATH. What the test needs of the old one (its build tree,
 * its sources, its working directory: a checkout under /tmp) is carried into
 * it, read-only as the rest of the host: the entries of PATH holding KEEP. */
static void fresh_tmpfs(const char* path, const char* mode, const char* const* keep, size_t nkeep) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return; /* /var/run: a link to /run */
    const int old = (int)syscall(SYS_open_tree, AT_FDCWD, path,
                                 OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (old < 0) die("cannot keep the mounts of", path);
    char data[32];
    snprintf(data, sizeof data, "mode=%s", mode);
    /* Not nodev: the simulated nodes in the tests' directories are real nodes. */
    if (mount("tmpfs", path, "tmpfs", MS_NOSUID, data) != 0) die("cannot mount a tmpfs at", path);
    for (size_t i = 0; i < nkeep; ++i) {
        char name[256], at[4096];
        if (keep[i] == NULL || !entry_below(path, keep[i], name, sizeof name)) continue;
        if (snprintf(at, sizeof at, "%s/%s", path, name) >= (int)sizeof at) continue;
        if (fstatat(old, name, &st, AT_SYMLINK_NOFOLLOW) != 0) die("cannot keep", at);
        int made = S_ISDIR(st.st_mode) ? mkdir(at, 0755) : mknod(at, S_IFREG | 0644, 0);
        if (made != 0 && errno == EEXIST) continue; /* kept already */
        if (made != 0) die("cannot make", at);
        const int tree = (int)syscall(SYS_open_tree, old, name,
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
        if (tree < 0 ||
            syscall(SYS_move_mount, tree, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) != 0)
            die("cannot keep", at);
        close(tree);
    }
    close(old);
}

/* PATH bound over itself with ATTR (read-only, nodev), what is mounted below
 * it included; 0 when PATH does not exist. */
static int cover(const char* path, unsigned long long attr) {
    const int tree =
        (int)syscall(SYS_open_tree, AT_FDCWD, path,
                     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
    if (tree < 0 && errno == ENOENT) return 0;
    if (tree < 0) die("cannot bind", path);
    struct mount_attr set = {.attr_set = attr};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &set, sizeof set) != 0)
        die("cannot make read-only", path);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        die("cannot bind over", path);
    close(tree);
    return 1;
}

/* /proc's files that change the machine, read-only (see above). */
static void seal_proc(void) {
    static const char* const machine_wide[] = {"/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
                                               "/proc/fs"};
    const int sys = (int)syscall(SYS_open_tree, AT_FDCWD, "/proc/sys",
                                 OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (sys < 0) die("cannot bind", "/proc/sys");
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, sys, "", AT_EMPTY_PATH | AT_RECURSIVE, &ro, sizeof ro) != 0)
        die("cannot make read-only", "/proc/sys");
    /* The uncovered proc, beneath the read-only /proc/sys: as permissive as
     * the machine's /proc (no flags), so that it allows any new proc mount. */
    if (mount("proc", "/proc/sys/kernel", "proc", 0, NULL) != 0)
        die("cannot mount a proc at", "/proc/sys/kernel");
    if (syscall(SYS_move_mount, sys, "", AT_FDCWD, "/proc/sys", MOVE_MOUNT_F_EMPTY_PATH) != 0)
        die("cannot bind over", "/proc/sys");
    close(sys);
    for (size_t i = 0; i < sizeof machine_wide / sizeof *machine_wide; ++i)
        cover(machine_wide[i], MOUNT_ATTR_RDONLY);
}

/* Every block device node in /dev but the loop devices, nodev (see above). */
static int seal_block_device(const char* path, const struct stat* st, int type, struct FTW* at) {
    (void)at;
    if (type == FTW_F && S_ISBLK(st->st_mode) && major(st->st_rdev) != LOOP_MAJOR)
        cover(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV);
    return 0;
}

static void seal(const char* program) {
    static const char* const writable[] = {"/proc",    "/sys/fs/cgroup", "/sys/fs/bpf",
                                           "/dev/pts", "/dev/shm",       "/dev/mqueue"};
    char program_path[4096], cwd[4096];
    const char* const keep[] = {realpath(program, program_path), getcwd(cwd, sizeof cwd),
                                GPUBIND_SEAL_SOURCE_DIR, GPUBIND_SEAL_BINARY_DIR};
    const size_t nkeep = sizeof keep / sizeof *keep;
    if (unshare(CLONE_NEWNS) != 0) die("cannot make a mount namespace for", "the test");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("cannot make private", "/");
    if (set_attr("/", MOUNT_ATTR_RDONLY, 0) != 0) die("cannot make read-only", "/");
    for (size_t i = 0; i < sizeof writable / sizeof *writable; ++i)
        if (is_mount_point(writable[i]) && set_attr(writable[i], 0, MOUNT_ATTR_RDONLY) != 0)
            die("cannot make writable", writable[i]);
    if (is_mount_point("/proc")) seal_proc();
    /* Not into /dev/pts, /dev/shm, /dev/mqueue: other mounts. */
    if (nftw("/dev", seal_block_device, 16, FTW_PHYS | FTW_MOUNT) != 0) die("cannot walk", "/dev");
    fresh_tmpfs("/tmp", "1777", keep, nkeep);
    fresh_tmpfs("/var/tmp", "1777", keep, nkeep);
    fresh_tmpfs("/run", "0755", keep, nkeep);
    if (setenv("TMPDIR", "/tmp", 1) != 0) die("cannot set", "TMPDIR");
    if (keep[1] != NULL && chdir(keep[1]) != 0) die("cannot return to", keep[1]);
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpubind_seal PROGRAM [ARG...]\n");
        return kSealFailed;
    }
    const char* off = getenv("GPUBIND_SEAL");
    if (geteuid() == 0 && !(off != NULL && strcmp(off, "off") == 0)) seal(argv[1]);
    execv(argv[1], argv + 1);
    die("cannot run", argv[1]);
}
