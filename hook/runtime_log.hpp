// gpubind-runtime's logging: errors always to stderr; the engine's --log
// (logrus's JSON or text lines, as runc writes them), info and up; the
// configured file (once the config is read) what its level says. Executables
// only: the library logs through gpubind::logger().
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "log_format.hpp"

namespace gpubind {

// The engine's --log file, in its --log-format: logrus's JSON lines
// ({"level","msg","time"}) or its text lines (time="..." level=... msg="...").
class EngineLogSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    EngineLogSink(const std::string& path, bool json) : json_(json) {
        file_ = std::fopen(path.c_str(), "ae");
        if (!file_) util::throw_errno("open log", path);
    }
    ~EngineLogSink() override {
        if (file_) std::fclose(file_);
    }
    EngineLogSink(const EngineLogSink&) = delete;
    EngineLogSink& operator=(const EngineLogSink&) = delete;

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        const std::string text =
            "gpubind-runtime: " + std::string(msg.payload.data(), msg.payload.size());
        const std::string time = fmt::format(
            "{:%Y-%m-%dT%H:%M:%S}Z", fmt::gmtime(std::chrono::system_clock::to_time_t(msg.time)));
        std::string level(spdlog::level::to_string_view(msg.level).data(),
                          spdlog::level::to_string_view(msg.level).size());
        if (level == "warn") level = "warning";
        if (level == "critical") level = "fatal";
        std::string line =
            json_ ? nlohmann::json{{"level", level}, {"msg", text}, {"time", time}}.dump()
                  : fmt::format("time=\"{}\" level={} msg={}", time, level,
                                nlohmann::json(text).dump());
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), file_);
    }
    void flush_() override { std::fflush(file_); }

  private:
    std::FILE* file_ = nullptr;
    bool json_ = false;
};

// Where the log goes: errors always to stderr; the engine's --log, info and
// up; the configured file (once the config is read) what its level says.
struct RuntimeLog {
    std::string engine_log{};  // --log
    bool json = false;         // --log-format json
    spdlog::level::level_enum level = spdlog::level::info;
    std::string file{};  // [log] file
    std::string id{};    // the container
};

// The logger is made by the first message at its level (log_sink.hpp): a
// create whose config asks for warnings writes none and builds no sink.
inline void set_up_logging(const RuntimeLog& setup) {
    util::set_lazy_logger(setup.level, [setup] {
        std::vector<spdlog::sink_ptr> engine;
        if (!setup.engine_log.empty()) {
            try {
                engine.push_back(std::make_shared<EngineLogSink>(setup.engine_log, setup.json));
                engine.back()->set_level(spdlog::level::info);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "gpubind-runtime: warning: %s\n", e.what());
            }
        }
        return make_start_logger(
            "gpubind-runtime", setup.level, setup.file,
            "%Y-%m-%dT%H:%M:%S.%e %l [" + pattern_text(setup.id) + "] runtime: %v",
            std::move(engine));
    });
}

}  // namespace gpubind
