// nvidia-container-cli's command line, parsed with getopt_long as its argp
// parses it: global options up to the command, then the command's own.
#include <getopt.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include "gpubind/nvc/nvc.hpp"
#include "gpubind/util/platform.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::nvc {

namespace {

// Long-only options' keys, past every short option's character.
enum Key : int {
    kNoCreateImex = 0x100,
    kUsage,
    kCsv,
    kCompat32,
    kMigConfig,
    kMigMonitor,
    kImexChannel,
    kNoPersistenced,
    kNoFabricmanager,
    kNoGspFirmware,
    kNoCgroups,
    kNoDevbind,
    kNoCntlibs,
    kCudaCompatMode,
    kHelp,
};

constexpr option kGlobalOptions[] = {
    {"debug", required_argument, nullptr, 'd'},
    {"load-kmods", no_argument, nullptr, 'k'},
    {"no-pivot", no_argument, nullptr, 'n'},
    {"user", optional_argument, nullptr, 'u'},
    {"root", required_argument, nullptr, 'r'},
    {"ldcache", required_argument, nullptr, 'l'},
    {"no-create-imex-channels", no_argument, nullptr, kNoCreateImex},
    {"version", no_argument, nullptr, 'V'},
    {"help", no_argument, nullptr, kHelp},
    {"usage", no_argument, nullptr, kUsage},
    {nullptr, 0, nullptr, 0},
};

constexpr option kInfoOptions[] = {
    {"csv", no_argument, nullptr, kCsv},
    {"help", no_argument, nullptr, kHelp},
    {"usage", no_argument, nullptr, kUsage},
    {nullptr, 0, nullptr, 0},
};

// The selection options `list` and `configure` share.
#define GPUBIND_NVC_SELECTION_OPTIONS                                                           \
    {"device", required_argument, nullptr, 'd'}, {"compat32", no_argument, nullptr, kCompat32}, \
        {"mig-config", required_argument, nullptr, kMigConfig},                                 \
        {"mig-monitor", required_argument, nullptr, kMigMonitor},                               \
        {"imex-channel", required_argument, nullptr, kImexChannel},                             \
        {"no-persistenced", no_argument, nullptr, kNoPersistenced},                             \
        {"no-fabricmanager", no_argument, nullptr, kNoFabricmanager},                           \
        {"no-gsp-firmware", no_argument, nullptr, kNoGspFirmware},                              \
        {"help", no_argument, nullptr, kHelp}, {                                                \
        "usage", no_argument, nullptr, kUsage                                                   \
    }

constexpr option kListOptions[] = {
    GPUBIND_NVC_SELECTION_OPTIONS,
    {"libraries", no_argument, nullptr, 'l'},
    {"binaries", no_argument, nullptr, 'b'},
    {"ipcs", no_argument, nullptr, 'i'},
    {"firmwares", no_argument, nullptr, 'f'},
    {nullptr, 0, nullptr, 0},
};

constexpr option kConfigureOptions[] = {
    GPUBIND_NVC_SELECTION_OPTIONS,
    {"pid", required_argument, nullptr, 'p'},
    {"require", required_argument, nullptr, 'r'},
    {"ldconfig", required_argument, nullptr, 'l'},
    {"compute", no_argument, nullptr, 'c'},
    {"utility", no_argument, nullptr, 'u'},
    {"video", no_argument, nullptr, 'v'},
    {"graphics", no_argument, nullptr, 'g'},
    {"display", no_argument, nullptr, 'D'},
    {"ngx", no_argument, nullptr, 'n'},
    {"no-cgroups", no_argument, nullptr, kNoCgroups},
    {"no-devbind", no_argument, nullptr, kNoDevbind},
    {"no-cntlibs", no_argument, nullptr, kNoCntlibs},
    {"cuda-compat-mode", required_argument, nullptr, kCudaCompatMode},
    {nullptr, 0, nullptr, 0},
};

#undef GPUBIND_NVC_SELECTION_OPTIONS

// configure's capability flags, by their short option.
constexpr std::pair<int, const char*> kCapabilityFlags[] = {{'c', "compute"}, {'u', "utility"},
                                                            {'v', "video"},   {'g', "graphics"},
                                                            {'D', "display"}, {'n', "ngx"}};

// One pass of getopt_long over `words` (words[0] stands for the program),
// each option found going to `on`. `shorts` starting with "+" stops at the
// first word that is not an option (the global pass: the command); without
// it options and other words mix, as the commands' argp parsers allow.
// Returns the words that are not options, or nullopt after setting
// args.usage_error.
template <typename On>
std::optional<std::vector<std::string>> scan(Args& args, std::vector<std::string> words,
                                             const char* shorts, const option* longs,
                                             const std::string& who, On on) {
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    const int count = static_cast<int>(words.size());
    optind = 0;  // a full reset: glibc rereads the "+" and ":" flags
    opterr = 0;
    for (;;) {
        const int c = ::getopt_long(count, argv.data(), shorts, longs, nullptr);
        if (c == -1) break;
        const std::string word = optind > 0 && optind <= count ? argv[optind - 1] : "";
        if (c == '?' && optopt == '?') {
            on(kHelp, nullptr);
            continue;
        }
        if (c == '?') {
            args.usage_error = optopt
                                   ? who + "invalid option -- '" + static_cast<char>(optopt) + "'"
                                   : who + "unrecognized option '" + word + "'";
            return std::nullopt;
        }
        if (c == ':') {
            args.usage_error = who + "option '" + word + "' requires a value";
            return std::nullopt;
        }
        if (!on(c, optarg)) return std::nullopt;
    }
    return std::vector<std::string>(argv.begin() + optind, argv.begin() + count);
}

void add_list(std::string& to, const char* value) {
    if (!to.empty()) to += ',';
    to += value;
}

// A selection option's effect; false when `c` is not one.
bool select_option(Selection& s, int c, const char* value) {
    switch (c) {
        case 'd':
            add_list(s.devices, value);
            return true;
        case kCompat32:
            s.compat32 = true;  // ignored where there are none: parse()
            return true;
        case kMigConfig:
            add_list(s.mig_config, value);
            return true;
        case kMigMonitor:
            add_list(s.mig_monitor, value);
            return true;
        case kImexChannel:
            add_list(s.imex_channels, value);
            return true;
        case kNoPersistenced:
            s.no_persistenced = true;
            return true;
        case kNoFabricmanager:
            s.no_fabricmanager = true;
            return true;
        case kNoGspFirmware:
            s.no_gsp_firmware = true;
            return true;
        default:
            return false;
    }
}

std::optional<pid_t> parse_pid(const char* value) {
    if (!value || !*value) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long pid = std::strtol(value, &end, 10);
    if (errno || *end || pid <= 0 || pid > 0x3fffffff || value[0] == '+' || value[0] == ' ')
        return std::nullopt;
    return static_cast<pid_t>(pid);
}

}  // namespace

Args parse(int argc, char* const* argv) {
    Args args;
    args.program =
        argc > 0 && argv[0] ? std::string(util::base_name(argv[0])) : "nvidia-container-cli";
    if (args.program.empty()) args.program = "nvidia-container-cli";
    Global& g = args.global;
    bool help = false;
    std::vector<std::string> all;
    for (int i = 0; i < argc; ++i) all.emplace_back(argv[i] ? argv[i] : "");
    if (all.empty()) all.emplace_back(args.program);
    const auto command_words =
        scan(args, all, "+:d:knu::r:l:V", kGlobalOptions, "", [&](int c, const char* value) {
            switch (c) {
                case 'd':
                    g.debug = value;
                    break;
                case 'k':
                    g.ignored.push_back("--load-kmods");
                    break;
                case 'n':
                    g.ignored.push_back("--no-pivot");
                    break;
                case 'u':
                    g.user = true;
                    if (value) g.ignored.push_back(std::string("--user=") + value);
                    break;
                case 'r':
                    g.root = value;
                    break;
                case 'l':
                    g.ldcache = value;
                    break;
                case kNoCreateImex:
                    g.ignored.push_back("--no-create-imex-channels");
                    break;
                case 'V':
                    args.command = Command::Version;
                    break;
                default:  // --help, --usage, -?
                    help = true;
            }
            return true;
        });
    if (!command_words) return args;
    if (help) {
        args.command = Command::Help;
        return args;
    }
    if (args.command == Command::Version) return args;
    if (command_words->empty()) {
        args.usage_error = "a command is needed: info, list or configure";
        return args;
    }
    const std::vector<std::string>& words = *command_words;  // the command's, its name first
    const std::string name = words[0];
    const std::string who = name + ": ";
    std::optional<std::vector<std::string>> rest;
    if (name == "info") {
        args.command = Command::Info;
        rest = scan(args, words, ":", kInfoOptions, who, [&](int c, const char*) {
            if (c == kCsv) args.csv = true;
            if (c == kHelp || c == kUsage) help = true;
            return true;
        });
    } else if (name == "list") {
        args.command = Command::List;
        ListArgs& l = args.list;
        bool only_imex = false;
        rest = scan(args, words, ":d:lbif", kListOptions, who, [&](int c, const char* value) {
            only_imex = c == kImexChannel;
            if (select_option(l.select, c, value)) return true;
            switch (c) {
                case 'l':
                    l.libraries = true;
                    break;
                case 'b':
                    l.binaries = true;
                    break;
                case 'i':
                    l.ipcs = true;
                    break;
                case 'f':
                    l.firmwares = true;
                    break;
                default:
                    help = true;
            }
            return true;
        });
        // As nvidia-container-cli decides it: no option at all, or a single
        // word that set IMEX channels, lists everything.
        l.everything = words.size() == 1 || (words.size() == 2 && only_imex);
    } else if (name == "configure") {
        args.command = Command::Configure;
        ConfigureArgs& c = args.configure;
        rest = scan(args, words, ":d:p:r:l:cuvgDn", kConfigureOptions, who,
                    [&](int key, const char* value) {
                        if (select_option(c.select, key, value)) return true;
                        for (const auto& [flag, capability] : kCapabilityFlags)
                            if (key == flag) {
                                c.capabilities.emplace_back(capability);
                                return true;
                            }
                        switch (key) {
                            case 'p':
                                c.pid = parse_pid(value);
                                if (!c.pid) {
                                    args.usage_error = who + "invalid pid '" + value + "'";
                                    return false;
                                }
                                break;
                            case 'r':
                                if (c.requires_.size() == kMaxRequires) {
                                    args.usage_error = who + "too many --require (at most " +
                                                       std::to_string(kMaxRequires) + ")";
                                    return false;
                                }
                                c.requires_.emplace_back(value);
                                break;
                            case 'l':
                                c.ldconfig = value;
                                break;
                            case kNoCgroups:
                                c.no_cgroups = true;
                                break;
                            case kNoDevbind:
                                c.no_devbind = true;
                                break;
                            case kNoCntlibs:
                                c.no_cntlibs = true;
                                break;
                            case kCudaCompatMode: {
                                const std::string_view mode = value;
                                if (mode != "mount" && mode != "ldconfig" && mode != "disabled") {
                                    args.usage_error = who + "invalid --cuda-compat-mode '" +
                                                       std::string(mode) +
                                                       "' (mount, ldconfig or disabled)";
                                    return false;
                                }
                                c.cuda_compat_mode = mode;
                                break;
                            }
                            default:
                                help = true;
                        }
                        return true;
                    });
        if (rest && !help) {
            if (rest->empty())
                args.usage_error = who + "the container's root filesystem (ROOTFS) is missing";
            else if (rest->size() > 1)
                args.usage_error = who + "one ROOTFS only; '" + (*rest)[1] + "' is extra";
            else
                c.rootfs = rest->front();
        }
    } else {
        args.usage_error = "unknown command '" + std::string(name) + "' (info, list, configure)";
        return args;
    }
    if (!rest || !args.usage_error.empty()) return args;
    if (help) {
        args.help_for = args.command;
        args.command = Command::Help;
        return args;
    }
    if (args.command != Command::Configure && !rest->empty())
        args.usage_error = who + "unexpected argument '" + rest->front() + "'";
    // enroot asks for --compat32 with every capability ("all"), on arm64 too,
    // where libnvidia-container finds no 32-bit library and goes on.
    Selection& chosen = args.command == Command::List ? args.list.select : args.configure.select;
    if (chosen.compat32 && !util::platform::kHasCompat32) {
        chosen.compat32 = false;
        args.global.ignored.push_back("--compat32 (an " + std::string(util::platform::kMachine) +
                                      " node has no 32-bit driver libraries)");
    }
    return args;
}

}  // namespace gpubind::nvc
