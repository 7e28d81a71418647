#include "gpubind/util/log.hpp"

#include <utility>

#include "gpubind/util/log_sink.hpp"

namespace gpubind::util {

namespace {

// A logger made on first use (set_lazy_logger): its level, and how to make it.
struct Lazy {
    spdlog::level::level_enum level = spdlog::level::off;
    std::function<std::shared_ptr<spdlog::logger>()> make;
};

Lazy& lazy() {
    static Lazy pending;
    return pending;
}

// The logger made or installed, empty until then.
std::shared_ptr<spdlog::logger>& made() {
    static std::shared_ptr<spdlog::logger> logger;
    return logger;
}

// The logger, made now if it is pending (or a logger with no sinks when none
// was ever set).
std::shared_ptr<spdlog::logger>& slot() {
    auto& logger = made();
    if (auto make = std::exchange(lazy().make, nullptr)) logger = make();
    if (!logger) logger = std::make_shared<spdlog::logger>("gpubind");
    return logger;
}

spdlog::level::level_enum to_spdlog(LogLevel level) noexcept {
    switch (level) {
        case LogLevel::Trace:
            return spdlog::level::trace;
        case LogLevel::Debug:
            return spdlog::level::debug;
        case LogLevel::Info:
            return spdlog::level::info;
        case LogLevel::Warn:
            return spdlog::level::warn;
        case LogLevel::Error:
            return spdlog::level::err;
        case LogLevel::Off:
            break;
    }
    return spdlog::level::off;
}

}  // namespace

namespace log_detail {

bool enabled(LogLevel level) noexcept {
    if (lazy().make) return to_spdlog(level) >= lazy().level && level != LogLevel::Off;
    return slot()->should_log(to_spdlog(level));
}

void write(LogLevel level, std::string_view message) {
    slot()->log(to_spdlog(level), message);
}

}  // namespace log_detail

spdlog::logger& spdlog_logger() {
    return *slot();
}

void set_logger(std::shared_ptr<spdlog::logger> logger) {
    if (!logger) return;
    lazy().make = nullptr;
    made() = std::move(logger);
}

void set_lazy_logger(spdlog::level::level_enum level,
                     std::function<std::shared_ptr<spdlog::logger>()> make) {
    made().reset();  // its sinks closed now, not at the next message
    lazy() = {level, std::move(make)};
}

}  // namespace gpubind::util
