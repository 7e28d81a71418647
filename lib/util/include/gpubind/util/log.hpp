// The library logs through this one accessor; only executables configure where
// it goes (gpubind/log_sink.hpp, which alone brings in spdlog).
//
//   logger().debug("mount {} -> {}", source, target);
//
// The message is formatted only when its level is enabled.
#pragma once

#include <string_view>
#include <utility>

#include <fmt/core.h>

namespace gpubind::util {

enum class LogLevel { Trace, Debug, Info, Warn, Error, Off };

namespace log_detail {
bool enabled(LogLevel level) noexcept;
void write(LogLevel level, std::string_view message);
}  // namespace log_detail

class Logger {
  public:
    template <typename... Args>
    void trace(fmt::format_string<Args...> f, Args&&... args) const {
        emit(LogLevel::Trace, f, std::forward<Args>(args)...);
    }
    template <typename... Args>
    void debug(fmt::format_string<Args...> f, Args&&... args) const {
        emit(LogLevel::Debug, f, std::forward<Args>(args)...);
    }
    template <typename... Args>
    void info(fmt::format_string<Args...> f, Args&&... args) const {
        emit(LogLevel::Info, f, std::forward<Args>(args)...);
    }
    template <typename... Args>
    void warn(fmt::format_string<Args...> f, Args&&... args) const {
        emit(LogLevel::Warn, f, std::forward<Args>(args)...);
    }
    template <typename... Args>
    void error(fmt::format_string<Args...> f, Args&&... args) const {
        emit(LogLevel::Error, f, std::forward<Args>(args)...);
    }
    bool should_log(LogLevel level) const noexcept { return log_detail::enabled(level); }

  private:
    template <typename... Args>
    static void emit(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
        if (log_detail::enabled(level))
            log_detail::write(level, fmt::format(f, std::forward<Args>(args)...));
    }
};

// The logger the library writes to. Until an executable installs a sink, it
// writes nowhere (library code never prints on its own).
inline Logger logger() noexcept {
    return {};
}

}  // namespace gpubind::util
