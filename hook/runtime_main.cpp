// gpubind-runtime: a drop-in for runc. Every command and flag goes straight
// to the real runtime (execve: same argv, same environment). Only on `create`
// and `run` of a GPU container does it first edit the bundle's config.json
// (runtime::edit_bundle, shim.hpp): the runtime then creates the device nodes
// and grants them in the device cgroup, and gpubind-hook, registered by the
// edit, makes the driver mounts and does the rest. A failure is reported
// (stderr, the configured log, the engine's --log) and nothing is executed,
// so no container is created half-configured.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "gpubind/config/config.hpp"
#include "gpubind/os/prefault.hpp"
#include "gpubind/start/shim.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/timing.hpp"
#include "log_format.hpp"
#include "own_program.hpp"

extern char** environ;

namespace {

using namespace gpubind;
namespace fs = std::filesystem;

// The engine's --log file, in its --log-format: logrus's JSON lines
// ({"level","msg","time"}) or its text lines (time="..." level=... msg="...").
class EngineLogSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    EngineLogSink(const std::string& path, bool json) : json_(json) {
        file_ = std::fopen(path.c_str(), "ae");
        if (!file_) throw_errno("open log", path);
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
struct LogSetup {
    std::string engine_log;  // --log
    bool json = false;       // --log-format json
    spdlog::level::level_enum level = spdlog::level::info;
    std::string file;  // [log] file
    std::string id;    // the container
};

// The logger is made by the first message at its level (log_sink.hpp): a
// create whose config asks for warnings writes none and builds no sink.
void set_up_logging(const LogSetup& setup) {
    set_lazy_logger(setup.level, [setup] {
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

// The real runtime: the first of config.runtimes that is an executable file
// and not gpubind-runtime itself; names are searched in PATH.
fs::path find_runtime(const Config& config) {
    struct stat self {};
    if (::stat("/proc/self/exe", &self) != 0) throw_errno("stat", "/proc/self/exe");
    auto usable = [&](const fs::path& p) {
        struct stat st {};
        return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
               ::access(p.c_str(), X_OK) == 0 &&
               !(st.st_dev == self.st_dev && st.st_ino == self.st_ino);
    };
    const char* env_path = std::getenv("PATH");
    const std::string search = env_path && *env_path
                                   ? env_path
                                   : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (const auto& name : config.runtimes) {
        if (name.find('/') != std::string::npos) {
            if (usable(name)) return name;
            continue;
        }
        for (auto dir : split(search, ':')) {
            if (dir.empty()) continue;
            fs::path p = fs::path(dir) / name;
            if (usable(p)) return p;
        }
    }
    std::string names;
    for (const auto& name : config.runtimes) names += (names.empty() ? "" : ", ") + name;
    throw Error(ENOENT, "find runtime", names,
                "none is an executable other than gpubind-runtime (config key runtime.runtimes)");
}

[[noreturn]] void exec_runtime(const fs::path& runtime, int argc, char** argv) {
    std::vector<char*> real(argv, argv + argc);
    std::string path = runtime.string();
    real[0] = path.data();
    real.push_back(nullptr);
    // The log files are closed (a logger made is dropped): the runtime
    // inherits no descriptor of ours. Should execve fail, stderr says so.
    LogSetup errors;
    errors.level = spdlog::level::err;
    set_up_logging(errors);
    ::execve(path.c_str(), real.data(), environ);
    throw_errno("execute", path);
}

}  // namespace

int main(int argc, char** argv) {
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    try {
        const runtime::Invocation args = runtime::parse_invocation(argc, argv);
        const bool creates = args.command == "create" || args.command == "run";
        // The spec's edit to come: its heap and stack mapped in one call each
        // (os/prefault.hpp; 128 KiB is what an edit for four GPUs touches).
        if (creates) prefault({.heap = 128 * 1024, .stack = 32 * 1024});
        LogSetup log;
        log.engine_log = args.log;
        log.json = args.log_format == "json";
        set_up_logging(log);
        const fs::path own_dir = own_program().parent_path();
        const Config config = load_trusted_config_beside(own_dir);
        log.level = spdlog::level::from_str(config.log.level);
        log.file = config.log.file;
        log.id = args.id;
        set_up_logging(log);
        const auto configured = Clock::now();
        if (creates) runtime::edit_bundle(args.bundle, args.id, config, own_dir / "gpubind-hook");
        const fs::path runtime = find_runtime(config);
        if (creates) {
            const auto found = Clock::now();
            logger().debug("timing: config {} us, bundle and runtime {} us, main to exec {} us",
                           micros(started, configured), micros(configured, found),
                           micros(started, found));
        }
        exec_runtime(runtime, argc, argv);
    } catch (const std::system_error& e) {
        gpubind::logger().error("{}", e.what());
        return gpubind::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-runtime: %s\n", e.what());
        return gpubind::kExitFailure;
    }
}
