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
