// A throwaway "container" for tests of execute() with the real System (they
// need root): a child process in a private mount namespace of its own,
// alive until the object goes. What it sees is read through
// /proc/<pid>/root and /proc/<pid>/mountinfo.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::test {

// A child in a private mount namespace, alive until the object goes.
class FakeContainer {
  public:
    FakeContainer() {
        int ready[2], hold[2];
        if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0)
            throw util::Error(errno, "pipe");
        pid_ = ::fork();
        if (pid_ < 0) throw util::Error(errno, "fork");
        if (pid_ == 0) {
            ::close(ready[0]);
            ::close(hold[1]);
            char ok = 'y';
            if (::unshare(CLONE_NEWNS) != 0 ||
                ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
                ok = 'n';
            if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
            char c;
            for (;;) {
                ssize_t r = ::read(hold[0], &c, 1);
                if (r < 0 && errno == EINTR) continue;
                break;
            }
            ::_exit(0);
        }
        ::close(ready[1]);
        ::close(hold[0]);
        hold_ = hold[1];
        char ok = 0;
        ssize_t r = ::read(ready[0], &ok, 1);
        ::close(ready[0]);
        if (r != 1 || ok != 'y') throw util::Error(EPERM, "unshare", "fake container");
    }
    ~FakeContainer() {
        ::close(hold_);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    FakeContainer(const FakeContainer&) = delete;
    FakeContainer& operator=(const FakeContainer&) = delete;

    pid_t pid() const { return pid_; }
    // A host path as the container's mount namespace sees it.
    std::filesystem::path view(const std::filesystem::path& p) const {
        return std::filesystem::path("/proc/" + std::to_string(pid_) + "/root") / p.relative_path();
    }
    std::string mountinfo() const {
        return util::read_file("/proc/" + std::to_string(pid_) + "/mountinfo", 16u << 20);
    }

  private:
    pid_t pid_ = -1;
    int hold_ = -1;
};

}  // namespace gpubind::test
