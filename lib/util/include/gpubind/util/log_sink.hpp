// For executables only: where the library's log goes. This header brings in
// spdlog; library code includes gpubind/log.hpp alone.
#pragma once

#include <functional>
#include <memory>

#include <spdlog/logger.h>

namespace gpubind::util {

// The spdlog logger behind gpubind::logger(): a logger with no sinks until
// set_logger() installs one. Executables add sinks and set levels on it.
spdlog::logger& spdlog_logger();
void set_logger(std::shared_ptr<spdlog::logger> logger);
// A logger made by `make` when the library first writes at `level` or above
// (or spdlog_logger() is asked for): a run that logs nothing opens no log
// file and builds no sink. Until then, only `level` decides what is written.
// A logger made or set before is dropped at once (its files closed).
void set_lazy_logger(spdlog::level::level_enum level,
                     std::function<std::shared_ptr<spdlog::logger>()> make);

}  // namespace gpubind::util
