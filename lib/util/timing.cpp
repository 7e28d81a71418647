#include "gpubind/util/timing.hpp"

#include <string>

#include <fmt/format.h>

#include "gpubind/util/log.hpp"

namespace gpubind::util {

long long micros(std::chrono::steady_clock::time_point from,
                 std::chrono::steady_clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
}

Timing::Timing() : timed_(logger().should_log(LogLevel::Debug)) {}

void Timing::mark(const char* step) {
    if (timed_) marks_.emplace_back(step, Clock::now());
}

void Timing::log(std::string_view subject, std::string_view label) const {
    if (!timed_) return;
    std::string text;
    for (std::size_t i = 1; i < marks_.size(); ++i)
        text += fmt::format("{}{} {} us", i > 1 ? ", " : "", marks_[i].first,
                            micros(marks_[i - 1].second, marks_[i].second));
    logger().debug("{}{}{}", subject, label, text);
}

}  // namespace gpubind::util
