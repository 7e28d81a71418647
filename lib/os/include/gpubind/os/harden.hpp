// What a root process started by a container runtime does before it trusts
// anything: an environment of its own and a deadline for the whole run.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace gpubind::os::harden {

// Values kept by clear_environment longer than this are dropped too.
inline constexpr std::size_t kMaxKeptValue = 4096;

// Empties this process's environment (LD_PRELOAD, LD_LIBRARY_PATH, PATH, ...
// all go), then puts back the variables named in `keep` that were set, with
// values of at most kMaxKeptValue bytes. Call first thing in main, before any
// other thread or getenv.
void clear_environment(std::initializer_list<std::string_view> keep);

// A hook's first step: clear_environment({keep}), returning whether the
// environment held anything but `keep` (runc runs hooks registered without
// "env" with the container's own environment: the hook refuses such stages).
bool clear_environment_but(std::string_view keep);

// A CLOCK_MONOTONIC budget for a whole run, checked between steps (a step is
// never cut off half-done: a mount without its rollback would be worse than
// a late answer) and bounding the blocking calls that take a timeout.
class Deadline {
  public:
    explicit Deadline(std::chrono::milliseconds budget);
    // What is left, at least 0.
    std::chrono::milliseconds left() const;
    // Throws Error(ETIMEDOUT) naming `next` (the step about to start) when
    // the budget is spent.
    void check(const std::string& next) const;
    std::chrono::milliseconds budget() const { return budget_; }
    std::chrono::steady_clock::time_point end() const { return end_; }

  private:
    std::chrono::milliseconds budget_;
    std::chrono::steady_clock::time_point end_;
};

// read_stream with a deadline: reads `fd` (a pipe: the runtime's state on
// stdin) to EOF, at most `max_size` bytes, waiting with poll; an Error
// (ETIMEDOUT) when the deadline passes first, (EFBIG) past the cap.
std::string read_stream(int fd, std::size_t max_size, const std::string& what,
                        const Deadline& deadline);

}  // namespace gpubind::os::harden
