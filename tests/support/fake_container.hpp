// A throwaway "container" for tests of execute() with the real System (they
// need root): a child process in a private mount namespace of its own,
// alive until the object goes. What it sees is read through
// /proc/<pid>/root and /proc/<pid>/mountinfo.
//
// With `root_as` (a host uid, also the gid) the child is first that user,
// then makes a user namespace whose root it is (as enroot and Apptainer do
// without privileges) and the mount namespace in it. run_inside() runs a
// function in a child of the container's process, in its namespaces, as a
// hook run by the container's tools runs (its parent: the container's pid).
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::test {

// Writes all of `text` to `fd`, length first; false if it could not.
inline bool send_text(int fd, const std::string& text) {
    const std::uint32_t n = static_cast<std::uint32_t>(text.size());
    return ::write(fd, &n, sizeof n) == static_cast<ssize_t>(sizeof n) &&
           (n == 0 || ::write(fd, text.data(), n) == static_cast<ssize_t>(n));
}
// Reads what send_text wrote; "<no answer>" if nothing came.
inline std::string receive_text(int fd) {
    std::uint32_t n = 0;
    if (::read(fd, &n, sizeof n) != static_cast<ssize_t>(sizeof n)) return "<no answer>";
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
        const ssize_t r = ::read(fd, out.data() + got, n - got);
        if (r <= 0) return "<no answer>";
        got += static_cast<std::size_t>(r);
    }
    return out;
}

// Becomes host user `id` (uid and gid), keeping the process readable by
// others of that user (a setns into its namespaces needs it); false if not.
inline bool become_user(unsigned id) {
    return ::setgroups(0, nullptr) == 0 && ::setresgid(id, id, id) == 0 &&
           ::setresuid(id, id, id) == 0 && ::prctl(PR_SET_DUMPABLE, 1) == 0;
}

// Runs `fn` in a child process; what it returns.
inline std::string run_in_child(const std::function<std::string()>& fn) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw util::Error(errno, "pipe");
    const pid_t pid = ::fork();
    if (pid < 0) throw util::Error(errno, "fork");
    if (pid == 0) {
        ::close(out[0]);
        std::string text;
        try {
            text = fn();
        } catch (const std::exception& e) {
            text = std::string("<child threw> ") + e.what();
        }
        ::_exit(send_text(out[1], text) ? 0 : 1);
    }
    ::close(out[1]);
    std::string text = receive_text(out[0]);
    ::close(out[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return text;
}

// A child in a private mount namespace, alive until the object goes.
class FakeContainer {
  public:
    // root_as: 0, none; else the host uid (and gid) its user namespace's root
    // is. beside_an_init: in a pid namespace of its own whose init (pid 1
    // there, with a fresh /proc) is in another mount namespace, as
    // `unshare --pid --fork --mount-proc` leaves a tool's hook (root in place
    // is refused unless pid 1's mount namespace is readable and not its own).
    explicit FakeContainer(unsigned root_as = 0, std::function<std::string()> inside = {},
                           bool beside_an_init = false) {
        int ready[2], hold[2], result[2];
        if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0 ||
            ::pipe2(result, O_CLOEXEC) != 0)
            throw util::Error(errno, "pipe");
        pid_ = ::fork();
        if (pid_ < 0) throw util::Error(errno, "fork");
        if (pid_ == 0) {
            ::close(ready[0]);
            ::close(hold[1]);
            ::close(result[0]);
            if (!beside_an_init) serve(ready[1], hold[0], result[1], root_as, inside);
            if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0 ||
                ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
                refuse(ready[1]);
            const pid_t init = ::fork();
            if (init == 0) {  // pid 1, its /proc the new namespace's
                if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
                    0)
                    refuse(ready[1]);
                const pid_t container = ::fork();
                if (container == 0)  // its own mount namespace, made by serve()
                    serve(ready[1], hold[0], result[1], root_as, inside);
                ::waitpid(container, nullptr, 0);
                ::_exit(0);
            }
            ::waitpid(init, nullptr, 0);
            ::_exit(0);
        }
        ::close(ready[1]);
        ::close(hold[0]);
        ::close(result[1]);
        hold_ = hold[1];
        result_ = result[0];
        char ok = 0;
        ssize_t r = ::read(ready[0], &ok, 1);
        ::close(ready[0]);
        if (r != 1 || ok != 'y') throw util::Error(EPERM, "unshare", "fake container");
        container_ = pid_;
        if (beside_an_init) container_ = only_child(only_child(pid_));
    }
    ~FakeContainer() {
        ::close(hold_);
        ::close(result_);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    FakeContainer(const FakeContainer&) = delete;
    FakeContainer& operator=(const FakeContainer&) = delete;

    // The container's process (as this process's pid namespace numbers it).
    pid_t pid() const { return container_; }
    // A host path as the container's mount namespace sees it.
    std::filesystem::path view(const std::filesystem::path& p) const {
        return std::filesystem::path("/proc/" + std::to_string(container_) + "/root") /
               p.relative_path();
    }
    std::string mountinfo() const {
        return util::read_file("/proc/" + std::to_string(container_) + "/mountinfo", 16u << 20);
    }
    // The function given, run in a child of the container's process; its answer.
    std::string run_inside() {
        const char c = 'r';
        if (::write(hold_, &c, 1) != 1) throw util::Error(errno, "write", "fake container");
        return receive_text(result_);
    }

  private:
    // The child's side: its namespaces entered, "y" (or "n") on `ready`,
    // then run_inside()'s requests on `hold` until it closes.
    [[noreturn]] static void serve(int ready, int hold, int result, unsigned root_as,
                                   const std::function<std::string()>& inside) {
        char ok = enter(root_as) ? 'y' : 'n';
        if (::write(ready, &ok, 1) != 1) ::_exit(1);
        char c;
        for (;;) {
            ssize_t r = ::read(hold, &c, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r == 1 && c == 'r') {  // run_inside()
                const std::string text = run_in_child(inside);
                if (!send_text(result, text)) ::_exit(1);
                continue;
            }
            break;
        }
        ::_exit(0);
    }
    [[noreturn]] static void refuse(int ready) {
        const char no = 'n';
        if (::write(ready, &no, 1) != 1) ::_exit(1);
        ::_exit(1);
    }
    // The one child of `pid` (/proc/PID/task/PID/children).
    static pid_t only_child(pid_t pid) {
        const std::string p = std::to_string(pid);
        const std::string text = util::read_file("/proc/" + p + "/task/" + p + "/children", 4096);
        const pid_t child = static_cast<pid_t>(std::atoi(text.c_str()));
        if (child <= 0) throw util::Error(ESRCH, "find the child of", "pid " + p);
        return child;
    }
    static bool write_proc(const char* name, const std::string& text) {
        const int fd = ::open((std::string("/proc/self/") + name).c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) return false;
        const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::close(fd);
        return ok;
    }
    static bool enter(unsigned root_as) {
        if (root_as == 0)
            return ::unshare(CLONE_NEWNS) == 0 &&
                   ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
        const std::string map = "0 " + std::to_string(root_as) + " 1\n";
        return become_user(root_as) && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 &&
               write_proc("setgroups", "deny") && write_proc("uid_map", map) &&
               write_proc("gid_map", map) && ::prctl(PR_SET_DUMPABLE, 1) == 0 &&
               ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    }

    pid_t pid_ = -1, container_ = -1;
    int hold_ = -1, result_ = -1;
};

}  // namespace gpubind::test
