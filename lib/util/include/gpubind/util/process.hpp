// Child processes that report through a pipe, and their end: shared by the
// NVML query, gpubind doctor's checks and the ldconfig sandbox (which makes
// its child with clone into new namespaces, and ends it here too). Their
// reports are read with read_bounded (file.hpp).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "gpubind/util/fd.hpp"

namespace gpubind::util {

struct ReportingChild {
    pid_t pid = -1;
    Fd report;  // the read end of the pipe the child writes
};

// Forks a child that dies with this thread (PR_SET_PDEATHSIG) and runs
// `body` with the write end of a pipe, then _exits with what it returns (127
// if it throws: no exception leaves the child). Only async-signal-safe work
// belongs in `body` where other threads may run. `what` names the child in
// an error.
ReportingChild fork_reporting(const std::function<int(int report_fd)>& body,
                              const std::string& what);
// waitpid with EINTR retried: the child's status.
int reap(pid_t pid);
// SIGKILL, then reap: a child that outlived its use.
void kill_and_reap(pid_t pid);

}  // namespace gpubind::util
