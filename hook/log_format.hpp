// The executables' log formatting: every message is escaped (escape_control)
// before any sink writes it, so that text from an image or a spec (a
// variable's value, a path with a newline) stays one line in every sink:
// stderr, the configured log file, anything added later.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/sink.h>
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
            escape_control(std::string_view(msg.payload.data(), msg.payload.size()));
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
    for (char c : escape_control(text)) {
        out += c;
        if (c == '%') out += '%';
    }
    return out;
}

}  // namespace gpubind
