// Where a start's time goes, for the debug log (tests/gpu/check.sh and
// scripts/bench_start.py read it).
#pragma once

#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

namespace gpubind::util {

// Microseconds from `from` to `to`.
long long micros(std::chrono::steady_clock::time_point from,
                 std::chrono::steady_clock::time_point to);

// Named steps, timed only where the log takes debug messages: otherwise no
// clock is read and nothing is kept. The first mark starts the count; each
// later one ends the step it names.
class Timing {
  public:
    Timing();
    void mark(const char* step);
    // One debug line: `subject` (a container's id, or nothing), `label`, then
    // "<step> <µs> us" for each step, by ", ". Nothing is built when untimed.
    void log(std::string_view subject, std::string_view label) const;

  private:
    using Clock = std::chrono::steady_clock;
    const bool timed_;
    std::vector<std::pair<const char*, Clock::time_point>> marks_;
};

}  // namespace gpubind::util
