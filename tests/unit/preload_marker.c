/* A shared object that, once loaded into a process (LD_PRELOAD), creates the
 * file GPUBIND_TEST_MARKER names: the hardened-hook test's proof of loading. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void gpubind_test_mark(void) {
    const char* path = getenv("GPUBIND_TEST_MARKER");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}
