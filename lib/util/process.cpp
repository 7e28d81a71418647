#include "gpubind/util/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "gpubind/util/error.hpp"

namespace gpubind::util {

ReportingChild fork_reporting(const std::function<int(int report_fd)>& body,
                              const std::string& what) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe", what);
    Fd read_end(fds[0]), write_end(fds[1]);
    const pid_t pid = ::fork();
    if (pid < 0) throw_errno("fork", what);
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        read_end.reset();
        int status = 127;
        try {
            status = body(write_end.get());
        } catch (...) {
        }
        ::_exit(status);
    }
    return {pid, std::move(read_end)};
}

int reap(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

void kill_and_reap(pid_t pid) {
    ::kill(pid, SIGKILL);
    reap(pid);
}

}  // namespace gpubind::util
