#include "gpubind/log.hpp"

#include <utility>

namespace gpubind {

namespace {

std::shared_ptr<spdlog::logger>& slot() {
    static std::shared_ptr<spdlog::logger> logger = std::make_shared<spdlog::logger>("gpubind");
    return logger;
}

}  // namespace

spdlog::logger& logger() { return *slot(); }

void set_logger(std::shared_ptr<spdlog::logger> logger) {
    if (logger) slot() = std::move(logger);
}

}  // namespace gpubind
