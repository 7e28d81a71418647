// gpubind-runtime: a drop-in for runc. Every command and flag goes straight
// to the real runtime (execve: same argv, same environment). Only on `create`
// and `run` of a GPU container does it first edit the bundle's config.json
// (runtime::edit_spec): the runtime then creates the device nodes, grants them
// in the device cgroup and bind-mounts the driver files that a volume of the
// spec covers, and gpubind-hook, registered by the edit, does the rest (the
// other mounts too: it makes one in a sixth of runc's time). CDI devices named in
// the spec (annotations cdi.k8s.io/..., NVIDIA_VISIBLE_DEVICES=vendor/class=name,
// volume mounts) are applied from the node's CDI specs first. A failure is reported
// (stderr, the configured log, the engine's --log) and nothing is executed, so
// no container is created half-configured.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "log_format.hpp"
#include "gpubind/cdi.hpp"
#include "gpubind/config.hpp"
#include "gpubind/error.hpp"
#include "gpubind/file.hpp"
#include "gpubind/inject.hpp"
#include "gpubind/log.hpp"
#include "gpubind/log_sink.hpp"
#include "gpubind/oci.hpp"
#include "gpubind/runtime.hpp"
#include "gpubind/strings.hpp"

extern char** environ;

namespace {

using namespace gpubind;
namespace fs = std::filesystem;

// What gpubind-runtime reads of the command line; everything else is the real
// runtime's business.
struct Args {
    std::string log;                  // --log
    std::string log_format = "text";  // --log-format
    std::string command;              // create, run, state, ... (empty: none)
    fs::path bundle = ".";            // create/run --bundle, -b
    std::string id;                   // create/run: the container id
};

// "--name=value", "-name value", ...: the flag's name, and its value when given with '='.
std::string_view flag_name(std::string_view arg, std::optional<std::string>& inline_value) {
    inline_value.reset();
    while (!arg.empty() && arg.front() == '-') arg.remove_prefix(1);
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
        inline_value = std::string(arg.substr(eq + 1));
        arg = arg.substr(0, eq);
    }
    return arg;
}

bool is_flag(std::string_view arg) {
    return arg.size() > 1 && arg.front() == '-';
}

Args parse_args(int argc, char** argv) {
    // Global flags of runc and crun that take a value.
    static const std::vector<std::string_view> global_values = {
        "log", "log-format", "log-level", "root", "criu", "rootless", "cgroup-manager"};
    // create/run flags that take a value, and those that take none. Any
    // other (crun's --config names another config.json) is refused: the
    // spec edited must be the one the runtime reads.
    static const std::vector<std::string_view> command_values = {"bundle", "b", "console-socket",
                                                                 "pid-file", "preserve-fds"};
    static const std::vector<std::string_view> command_switches = {
        "no-pivot", "no-new-keyring", "detach", "d", "keep", "no-subreaper", "help", "h"};
    auto takes_value = [](const auto& list, std::string_view name) {
        for (auto v : list)
            if (v == name) return true;
        return false;
    };

    Args args;
    int i = 1;
    std::optional<std::string> inline_value;
    for (; i < argc && is_flag(argv[i]); ++i) {
        const std::string_view name = flag_name(argv[i], inline_value);
        if (name.empty()) break;  // "--"
        if (!takes_value(global_values, name)) continue;
        std::string value = inline_value ? *inline_value : (i + 1 < argc ? argv[++i] : "");
        if (name == "log") args.log = value;
        if (name == "log-format") args.log_format = value;
    }
    if (i < argc && !is_flag(argv[i])) args.command = argv[i++];
    if (args.command != "create" && args.command != "run") return args;
    for (; i < argc; ++i) {
        if (!is_flag(argv[i])) {
            if (args.id.empty()) args.id = argv[i];
            continue;
        }
        const std::string_view name = flag_name(argv[i], inline_value);
        if (name.empty()) {  // "--": the id follows
            if (i + 1 < argc && args.id.empty()) args.id = argv[i + 1];
            break;
        }
        if (!takes_value(command_values, name) && !takes_value(command_switches, name))
            throw_invalid("parse " + args.command + " arguments", std::string(argv[i]),
                          "an option gpubind-runtime does not know; refusing (it could not tell "
                          "which config.json the runtime reads)");
        const bool is_bundle = name == "bundle" || name == "b";
        if (inline_value) {
            if (is_bundle) args.bundle = *inline_value;
            continue;
        }
        if (!takes_value(command_values, name) || i + 1 >= argc) continue;
        ++i;
        if (is_bundle) args.bundle = argv[i];
    }
    return args;
}

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

// Errors always reach stderr; the engine's --log gets info and up; the
// configured file what its level says (added once the config is read).
void set_up_logging(const Args& args) {
    std::vector<spdlog::sink_ptr> sinks;
    auto err = std::make_shared<spdlog::sinks::stderr_sink_st>();
    err->set_level(spdlog::level::err);
    set_escaped_pattern(*err, "gpubind-runtime: %v");
    sinks.push_back(err);
    if (!args.log.empty()) {
        try {
            auto engine = std::make_shared<EngineLogSink>(args.log, args.log_format == "json");
            engine->set_level(spdlog::level::info);
            sinks.push_back(engine);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "gpubind-runtime: warning: %s\n", e.what());
        }
    }
    auto logger = std::make_shared<spdlog::logger>("gpubind-runtime", sinks.begin(), sinks.end());
    logger->set_level(spdlog::level::info);
    logger->flush_on(spdlog::level::trace);
    set_logger(std::move(logger));
}

void add_config_log(const Config& config, const std::string& id) {
    spdlog_logger().set_level(spdlog::level::from_str(config.log.level));
    if (config.log.file.empty()) return;
    try {
        auto file = std::make_shared<spdlog::sinks::basic_file_sink_st>(config.log.file);
        set_escaped_pattern(*file, "%Y-%m-%dT%H:%M:%S.%e %l [" + pattern_text(id) + "] runtime: %v");
        spdlog_logger().sinks().push_back(file);
    } catch (const spdlog::spdlog_ex& e) {
        std::fprintf(stderr, "gpubind-runtime: warning: log file %s: %s\n", config.log.file.c_str(),
                     e.what());
    }
}

fs::path self_exe() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error(ec.value(), "read link", "/proc/self/exe");
    return p;
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

// create/run of a GPU container: the spec edited and written back in place.
// CDI devices the container names (annotations, NVIDIA_VISIBLE_DEVICES, volume
// mounts) are applied from the node's CDI specs first, then gpubind's own
// request is read from the result. The document is copied only to be
// changed: a spec without a request is read and left alone.
void edit_bundle(const Args& args, const Config& config) {
    oci::Spec spec = oci::load_spec(args.bundle);
    if (runtime::marked(*spec.doc)) {
        logger().debug("{}: already edited by gpubind-runtime", args.id);
        return;
    }
    bool changed = false;
    std::optional<NodeKnowledge> known;
    const auto& annotations = spec.doc->value("annotations", nlohmann::json::object());
    if (!annotations.is_object() || !annotations.contains(cdi::kAppliedAnnotation)) {
        const cdi::Requests requests = cdi::read_requests(spec, config);
        if (!requests.devices.empty()) {
            // The node known first: after a driver upgrade or a MIG change
            // know_node rewrites the node's own specs, which would name what
            // is gone.
            try {
                LoadOptions load;  // MIG devices are named by UUIDs only NVML knows
                for (const auto& name : requests.devices)
                    load.need_nvml |= name.find("=MIG-") != std::string::npos;
                known = know_node(config, load);
            } catch (const std::exception& e) {
                logger().warn("the node not known before its CDI specs are applied: {}", e.what());
            }
            spec = oci::parse_spec_document(cdi::apply(nlohmann::json(*spec.doc), requests.devices,
                                                       cdi::load_specs(config.cdi.spec_dirs)),
                                            args.bundle);
            changed = true;
            logger().info("{}: {}: {} CDI devices applied", args.id, requests.source,
                          requests.devices.size());
        }
    }
    const Decision decision =
        known ? decide(spec, config, std::move(*known)) : decide(spec, config);
    std::optional<nlohmann::json> edited;
    if (decision.gpu_container()) {
        runtime::FinishHook hook;
        hook.path = self_exe().parent_path() / "gpubind-hook";
        if (::access(hook.path.c_str(), X_OK) != 0) throw_errno("find hook", hook.path.string());
        hook.env.push_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        if (!config.source.empty())
            hook.env.push_back(std::string(kConfigEnv) + "=" + fs::absolute(config.source).string());
        edited = runtime::edit_spec(nlohmann::json(*spec.doc), spec, decision.plan, hook);
        changed = true;
        logger().info("{}: {}: {} devices in the spec, {} mounts for the finish hook", args.id,
                      decision.reason, decision.plan.devices.size(), decision.plan.mounts.size());
    } else {
        logger().debug("{}: {}: nothing to do", args.id, decision.reason);
    }
    if (!changed) return;
    const fs::path file = args.bundle / "config.json";
    // The file's mode kept, read from what is there: never through a link.
    struct stat st {};
    if (::fstatat(AT_FDCWD, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        throw_errno("stat", file.string());
    if (!S_ISREG(st.st_mode))
        throw Error(ErrorKind::Invalid, EINVAL, "edit spec", file.string(),
                    "is not a regular file; refusing to replace it");
    const auto mode = static_cast<unsigned>(st.st_mode & 07777);
    // As big as the hook will read it (CDI edits add to it).
    const std::string text = (edited ? *edited : *spec.doc).dump();
    if (text.size() > oci::kMaxSpecSize)
        throw Error(ErrorKind::Invalid, EFBIG, "edit spec", file.string(),
                    fmt::format("{} bytes once edited, larger than the limit of {} bytes",
                                text.size(), oci::kMaxSpecSize));
    // Read by the runtime at once, useless after a crash: no fsync. The mode
    // is set on the new file's descriptor, past the umask.
    write_file_atomic(file, text, mode, false);
}

[[noreturn]] void exec_runtime(const fs::path& runtime, int argc, char** argv) {
    std::vector<char*> real(argv, argv + argc);
    std::string path = runtime.string();
    real[0] = path.data();
    real.push_back(nullptr);
    // The log files are closed: the runtime inherits no descriptor of ours.
    auto err = std::make_shared<spdlog::sinks::stderr_sink_st>();
    set_escaped_pattern(*err, "gpubind-runtime: %v");
    set_logger(std::make_shared<spdlog::logger>("gpubind-runtime", std::move(err)));
    ::execve(path.c_str(), real.data(), environ);
    throw_errno("execute", path);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Args args = parse_args(argc, argv);
        set_up_logging(args);
        const Config config = load_trusted_config();
        add_config_log(config, args.id);
        if (args.command == "create" || args.command == "run") edit_bundle(args, config);
        exec_runtime(find_runtime(config), argc, argv);
    } catch (const std::system_error& e) {
        gpubind::logger().error("{}", e.what());
        return gpubind::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-runtime: %s\n", e.what());
        return gpubind::kExitFailure;
    }
}
