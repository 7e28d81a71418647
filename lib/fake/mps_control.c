/* The fake nvidia-cuda-mps-control of a simulated node. As a daemon (-d in
 * the background, -f in the foreground) it listens on the unix socket
 * `control` in CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), writes
 * nvidia-cuda-mps-control.pid there and, with CUDA_MPS_LOG_DIRECTORY, logs
 * each command to control.log. Without either flag it is the client: each
 * line of its standard input is one command sent to the running daemon, the
 * answer printed. The commands: set_/get_default_device_pinned_mem_limit,
 * set_/get_default_active_thread_percentage, get_server_list, quit. Any uid
 * may connect (the socket is 0777), as with a multi-user server; the fake
 * CUDA asks it for a device's ceiling (fake_mps.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake_mps.h"

#define MAX_DEVICES 64

static unsigned long long g_limit[MAX_DEVICES]; /* bytes; 0: none set */
static unsigned g_percent = 100;
static volatile sig_atomic_t g_stop;
static char g_socket[sizeof(((struct sockaddr_un*)0)->sun_path)];
static char g_pidfile[4096];

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static int socket_path(struct sockaddr_un* addr) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    return snprintf(addr->sun_path, sizeof addr->sun_path, "%s/%s", fake_mps_pipe_dir(),
                    FAKE_MPS_SOCKET) >= (int)sizeof addr->sun_path
               ? -1
               : 0;
}

static void log_line(const char* what) {
    const char* dir = getenv("CUDA_MPS_LOG_DIRECTORY");
    char path[4096];
    FILE* f;
    if (dir == NULL || dir[0] == '\0') return;
    snprintf(path, sizeof path, "%s/control.log", dir);
    f = fopen(path, "a");
    if (f == NULL) return;
    fprintf(f, "[%lld] %s\n", (long long)time(NULL), what);
    fclose(f);
}

static void size_text(unsigned long long bytes, char* out, size_t size) {
    if (bytes % (1ULL << 30) == 0)
        snprintf(out, size, "%lluG", bytes >> 30);
    else
        snprintf(out, size, "%lluM", bytes >> 20);
}

/* One command; its answer in `out`. Returns 1 for quit. */
static int answer(char* line, char* out, size_t size) {
    char* words[4] = {0};
    int n = 0;
    char* save = NULL;
    for (char* w = strtok_r(line, " \t\r\n", &save); w != NULL && n < 4;
         w = strtok_r(NULL, " \t\r\n", &save))
        words[n++] = w;
    out[0] = '\0';
    if (n == 0) return 0;
    if (strcmp(words[0], "quit") == 0) return 1;
    if (strcmp(words[0], "get_server_list") == 0) return 0; /* no server runs in the fake */
    if (strcmp(words[0], "get_default_active_thread_percentage") == 0 && n == 1) {
        snprintf(out, size, "%u.0\n", g_percent);
        return 0;
    }
    if (strcmp(words[0], "set_default_active_thread_percentage") == 0 && n == 2) {
        const int p = atoi(words[1]);
        if (p < 1 || p > 100)
            snprintf(out, size, "Invalid percentage\n");
        else
            g_percent = (unsigned)p;
        return 0;
    }
    if ((strcmp(words[0], "get_default_device_pinned_mem_limit") == 0 && n == 2) ||
        (strcmp(words[0], "set_default_device_pinned_mem_limit") == 0 && n == 3)) {
        const int dev = atoi(words[1]);
        if (dev < 0 || dev >= MAX_DEVICES || words[1][strspn(words[1], "0123456789")] != '\0') {
            snprintf(out, size, "Invalid device\n");
        } else if (n == 2) {
            if (g_limit[dev] == 0)
                snprintf(out, size, "none\n");
            else {
                size_text(g_limit[dev], out, size - 1);
                strcat(out, "\n");
            }
        } else {
            const char* end = NULL;
            const unsigned long long bytes = fake_mps_size(words[2], &end);
            if (bytes == 0 || *end != '\0')
                snprintf(out, size, "Invalid limit\n");
            else
                g_limit[dev] = bytes;
        }
        return 0;
    }
    snprintf(out, size, "Unknown command\n");
    return 0;
}

static void cleanup(void) {
    unlink(g_socket);
    unlink(g_pidfile);
}

static int serve(int background) {
    struct sockaddr_un addr;
    struct sigaction sa;
    struct stat st;
    FILE* pid;
    int fd;
    if (socket_path(&addr) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: pipe directory path too long\n");
        return 1;
    }
    if (lstat(addr.sun_path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(addr.sun_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(fd, 16) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", addr.sun_path, strerror(errno));
        return 1;
    }
    chmod(addr.sun_path, 0777);
    snprintf(g_socket, sizeof g_socket, "%s", addr.sun_path);
    snprintf(g_pidfile, sizeof g_pidfile, "%s/nvidia-cuda-mps-control.pid", fake_mps_pipe_dir());
    if (background) {
        /* The parent writes the child's pid before it returns: whoever
         * started the daemon finds the file once -d is done. */
        const pid_t child = fork();
        if (child < 0) return 1;
        if (child > 0) {
            pid = fopen(g_pidfile, "w");
            if (pid != NULL) {
                fprintf(pid, "%d\n", (int)child);
                fclose(pid);
            }
            _exit(0);
        }
        setsid();
        {
            const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (null >= 0) {
                dup2(null, 0);
                dup2(null, 1);
                dup2(null, 2);
                close(null);
            }
        }
    } else {
        pid = fopen(g_pidfile, "w");
        if (pid != NULL) {
            fprintf(pid, "%d\n", (int)getpid());
            fclose(pid);
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    log_line("control daemon started");
    while (!g_stop) {
        char line[512], out[256];
        ssize_t got;
        int quit;
        const int client = accept(fd, NULL, NULL);
        if (client < 0) continue; /* EINTR on a signal: the loop checks */
        got = read(client, line, sizeof line - 1);
        if (got <= 0) {
            close(client);
            continue;
        }
        line[got] = '\0';
        log_line(line);
        quit = answer(line, out, sizeof out);
        if (out[0] != '\0' && write(client, out, strlen(out)) < 0) {
            /* the client went: nothing to tell it */
        }
        close(client);
        if (quit) break;
    }
    log_line("control daemon exiting");
    cleanup();
    return 0;
}

static int send_commands(void) {
    char line[512];
    struct sockaddr_un addr;
    if (socket_path(&addr) != 0) return 1;
    while (fgets(line, sizeof line, stdin) != NULL) {
        char reply[512];
        ssize_t got;
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr*)&addr, sizeof addr) != 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        if (write(fd, line, strlen(line)) < 0) {
            close(fd);
            return 1;
        }
        while ((got = read(fd, reply, sizeof reply)) > 0) fwrite(reply, 1, (size_t)got, stdout);
        close(fd);
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "-d") == 0) return serve(1);
    if (argc > 1 && strcmp(argv[1], "-f") == 0) return serve(0);
    return send_commands();
}
