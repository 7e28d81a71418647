#include "gpubind/start/shim.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/cdi/apply.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "gpubind/util/timing.hpp"

namespace gpubind::start {

namespace {

namespace fs = std::filesystem;

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

}  // namespace

Invocation parse_invocation(int argc, const char* const* argv) {
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

    Invocation args;
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
            util::throw_invalid(
                "parse " + args.command + " arguments", std::string(argv[i]),
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

void edit_bundle(const fs::path& bundle, const std::string& id, const config::Config& config,
                 const fs::path& hook_path, os::System* sys) {
    util::Timing timing;
    timing.mark("");
    decide::oci::Spec spec = decide::oci::load_spec(bundle);
    timing.mark("spec read");
    if (cdi::marked(*spec.doc)) {
        util::logger().debug("{}: already edited by gpubind-runtime", id);
        return;
    }
    bool changed = false;
    std::optional<node::NodeKnowledge> known;
    const auto& annotations = spec.doc->value("annotations", nlohmann::json::object());
    if (!annotations.is_object() || !annotations.contains(cdi::kAppliedAnnotation)) {
        const cdi::Requests requests = cdi::read_requests(spec, config);
        if (!requests.devices.empty()) {
            // The node known first: after a driver upgrade or a MIG change
            // know_node rewrites the node's own specs, which would name what
            // is gone.
            try {
                node::LoadOptions load;  // MIG devices are named by UUIDs only NVML knows
                for (const auto& name : requests.devices)
                    load.need_nvml |= name.find("=MIG-") != std::string::npos;
                known = know_node(config, load);
            } catch (const std::exception& e) {
                util::logger().warn("the node not known before its CDI specs are applied: {}",
                                    e.what());
            }
            spec = decide::oci::parse_spec_document(
                cdi::apply(nlohmann::json(*spec.doc), requests.devices,
                           cdi::load_specs(config.cdi.spec_dirs)),
                bundle);
            changed = true;
            util::logger().info("{}: {}: {} CDI devices applied", id, requests.source,
                                requests.devices.size());
        }
    }
    Start start{.config = config, .sys = sys, .rootfs = spec.rootfs, .known = std::move(known)};
    const decide::Decision decision =
        run(start, decide::read_request(spec, config.policy, config.families), Act::Decide);
    timing.mark("decision");
    std::optional<nlohmann::json> edited;
    if (decision.gpu_container()) {
        cdi::FinishHook hook;
        hook.path = hook_path;
        if (::access(hook.path.c_str(), X_OK) != 0)
            util::throw_errno("find hook", hook.path.string());
        hook.env.push_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        if (!config.source.empty())
            hook.env.push_back(std::string(config::kConfigEnv) + "=" +
                               fs::absolute(config.source).string());
        // A share's limit, set by the finish hook, is cleared at poststop.
        hook.poststop = decision.request.share.asked();
        edited = cdi::edit_spec(nlohmann::json(*spec.doc), spec, decision.plan, hook);
        changed = true;
        util::logger().info("{}: {}: {} devices in the spec, {} mounts for the finish hook", id,
                            decision.reason, decision.plan.devices.size(),
                            decision.plan.mounts.size());
    } else {
        util::logger().debug("{}: {}: nothing to do", id, decision.reason);
    }
    if (!changed) return;
    const fs::path file = bundle / "config.json";
    // The file's mode kept, read from what is there: never through a link.
    struct stat st {};
    if (::fstatat(AT_FDCWD, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        util::throw_errno("stat", file.string());
    if (!S_ISREG(st.st_mode))
        throw util::Error(util::ErrorKind::Invalid, EINVAL, "edit spec", file.string(),
                          "is not a regular file; refusing to replace it");
    const auto mode = static_cast<unsigned>(st.st_mode & 07777);
    // As big as the hook will read it (CDI edits add to it).
    const std::string text = (edited ? *edited : *spec.doc).dump();
    timing.mark("edit and serialization");
    if (text.size() > decide::oci::kMaxSpecSize)
        throw util::Error(util::ErrorKind::Invalid, EFBIG, "edit spec", file.string(),
                          fmt::format("{} bytes once edited, larger than the limit of {} bytes",
                                      text.size(), decide::oci::kMaxSpecSize));
    // Read by the runtime at once, useless after a crash: no fsync. The mode
    // is set on the new file's descriptor, past the umask.
    util::write_file_atomic(file, text, {.mode = mode, .durable = false});
    timing.mark("written");
    timing.log(id, ": timing: ");
}

// The real runtime: the first of config.runtimes that is an executable file
// and not gpubind-runtime itself; names are searched in PATH.
fs::path find_runtime(const config::Config& config) {
    struct stat self {};
    if (::stat("/proc/self/exe", &self) != 0) util::throw_errno("stat", "/proc/self/exe");
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
        for (auto dir : util::split(search, ':')) {
            if (dir.empty()) continue;
            fs::path p = fs::path(dir) / name;
            if (usable(p)) return p;
        }
    }
    std::string names;
    for (const auto& name : config.runtimes) names += (names.empty() ? "" : ", ") + name;
    throw util::Error(
        ENOENT, "find runtime", names,
        "none is an executable other than gpubind-runtime (config key runtime.runtimes)");
}

fs::path prepare(const Invocation& args, const config::Config& config, const fs::path& hook) {
    if (args.command == "create" || args.command == "run")
        edit_bundle(args.bundle, args.id, config, hook);
    return find_runtime(config);
}

}  // namespace gpubind::start
