// A move-only owner of a file descriptor; waiting on descriptors with a deadline.
#pragma once

#include <poll.h>

#include <chrono>
#include <span>
#include <string>
#include <utility>

namespace gpubind::util {

class Fd {
  public:
    Fd() noexcept = default;
    explicit Fd(int fd) noexcept : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    int release() noexcept { return std::exchange(fd_, -1); }
    void reset(int fd = -1) noexcept;

  private:
    int fd_ = -1;
};

// poll(2) on `fds` until one of them is ready or `deadline` passes, EINTR
// retried with the time then left. True: ready (their revents set); false:
// the deadline passed first (also when it had passed already). Any other
// failure of poll is an Error ("poll", `what`).
bool poll_until(std::span<pollfd> fds, std::chrono::steady_clock::time_point deadline,
                const std::string& what);

}  // namespace gpubind::util
