/* Stands in for ldconfig in the hostile suite: run by gpubind's sandbox, it
 * tries to write a host-wide sysctl through whatever /proc it can see, and
 * says what happened. Static: it runs inside any root. Exits 1 either way
 * (the hook then fails, which is not what the test judges). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SYSCTL "/proc/sys/kernel/printk_ratelimit_burst"
#define VALUE "4242\n"

int main(void) {
    int fd = open(SYSCTL, O_WRONLY);
    if (fd < 0) {
        printf("cannot open " SYSCTL ": %s\n", strerror(errno));
        return 1;
    }
    if (write(fd, VALUE, sizeof VALUE - 1) < 0) {
        printf("cannot write " SYSCTL ": %s\n", strerror(errno));
        return 1;
    }
    printf("wrote " SYSCTL "\n");
    return 1;
}
