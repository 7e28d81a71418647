// The executables' log formatting: every message is escaped (escape_control)
// before any sink writes it, so that text from an image or a spec (a
// variable's value, a path with a newline) stays one line in every sink:
// stderr, the configured log file, anything added later.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "gpubind/util/strings.hpp"

namespace gpubind {

class EscapingFormatter final : public spdlog::formatter {
  public:
    explicit EscapingFormatter(const std::string& pattern)
        : inner_(std::make_unique<spdlog::pattern_formatter>(pattern)) {}
    explicit EscapingFormatter(std::unique_ptr<spdlog::formatter> inner)
        : inner_(std::move(inner)) {}

    void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
        const std::string escaped =
            util::escape_control(std::string_view(msg.payload.data(), msg.payload.size()));
        spdlog::details::log_msg copy = msg;
        copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
        inner_->format(copy, dest);
    }
    std::unique_ptr<spdlog::formatter> clone() const override {
        return std::make_unique<EscapingFormatter>(inner_->clone());
    }

  private:
    std::unique_ptr<spdlog::formatter> inner_;
};

// A sink's pattern, with its messages escaped. `pattern` is ours; text from
// outside (a container id) goes in through pattern_text().
inline void set_escaped_pattern(spdlog::sinks::sink& sink, const std::string& pattern) {
    sink.set_formatter(std::make_unique<EscapingFormatter>(pattern));
}

// Outside text as a literal part of a pattern: escaped, '%' doubled.
inline std::string pattern_text(std::string_view text) {
    std::string out;
    for (char c : util::escape_control(text)) {
        out += c;
        if (c == '%') out += '%';
    }
    return out;
}

// The logger of gpubind-hook and gpubind-runtime: errors on stderr
// ("<program>: <message>"), then the `extra` sinks, then, where `file` is
// set, everything at `level` in that file with `file_pattern` (a warning on
// stderr when it cannot be opened). Flushed at every message.
inline std::shared_ptr<spdlog::logger> make_start_logger(const std::string& program,
                                                         spdlog::level::level_enum level,
                                                         const std::string& file,
                                                         const std::string& file_pattern,
                                                         std::vector<spdlog::sink_ptr> extra = {}) {
    std::vector<spdlog::sink_ptr> sinks;
    auto err = std::make_shared<spdlog::sinks::stderr_sink_st>();
    err->set_level(spdlog::level::err);
    set_escaped_pattern(*err, program + ": %v");
    sinks.push_back(err);
    sinks.insert(sinks.end(), extra.begin(), extra.end());
    if (!file.empty()) {
        try {
            auto sink = std::make_shared<spdlog::sinks::basic_file_sink_st>(file);
            set_escaped_pattern(*sink, file_pattern);
            sinks.push_back(sink);
        } catch (const spdlog::spdlog_ex& e) {
            std::fprintf(stderr, "%s: warning: log file %s: %s\n", program.c_str(), file.c_str(),
                         e.what());
        }
    }
    auto logger = std::make_shared<spdlog::logger>(program, sinks.begin(), sinks.end());
    logger->set_level(level);
    logger->flush_on(spdlog::level::trace);
    return logger;
}

}  // namespace gpubind
