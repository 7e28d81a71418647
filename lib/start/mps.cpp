// `gpubind mps`: see start/mps.hpp.
#include "gpubind/start/mps.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "gpubind/decide/mps.hpp"
#include "gpubind/decide/share.hpp"
#include "gpubind/node/memory_limits.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::start {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kStartTimeout{10}, kQuitTimeout{10}, kMaxBackoff{30};
constexpr std::chrono::milliseconds kComputeModeTimeout{10000};

// Opens (making it 0755 where missing) each directory of `path`, never
// following a link; each must be a directory, and the last `owned` root's.
// The last is set to 0755.
util::Fd own_dir(const std::string& path, std::size_t owned) {
    util::Fd dir(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) util::throw_errno("open", "/");
    std::vector<std::string> names;
    for (auto p : util::split(path, '/'))
        if (!p.empty() && p != ".") names.emplace_back(p);
    std::string at;
    for (std::size_t i = 0; i < names.size(); ++i) {
        at += "/" + names[i];
        if (names[i] == "..") util::throw_invalid("make MPS directory", at, "a path with \"..\"");
        if (::mkdirat(dir.get(), names[i].c_str(), 0755) != 0 && errno != EEXIST)
            util::throw_errno("make directory", at);
        util::Fd next(
            ::openat(dir.get(), names[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next)
            throw util::Error(errno, "open", at,
                              errno == ELOOP || errno == ENOTDIR
                                  ? "not a directory (a link is never followed)"
                                  : "");
        struct stat st {};
        if (::fstat(next.get(), &st) != 0) util::throw_errno("stat", at);
        if (i + owned >= names.size()) {
            if (st.st_uid != 0) util::throw_refused("make MPS directory", at, "not root's");
            if ((st.st_mode & 07777) != 0755 && ::fchmod(next.get(), 0755) != 0)
                util::throw_errno("chmod", at);
        }
        dir = std::move(next);
    }
    return dir;
}

// Sends one command to the daemon listening at `socket`; its answer.
std::string send_command(const std::string& socket, const std::string& command) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket.size() >= sizeof addr.sun_path)
        util::throw_invalid("connect", socket, "too long for a socket's path");
    std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
    util::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        util::throw_errno("connect", socket);
    const std::string line = command + "\n";
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        util::throw_errno("write", socket);
    ::shutdown(fd.get(), SHUT_WR);
    std::string reply;
    char buf[512];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) util::throw_errno("read", socket);
        reply.append(buf, static_cast<std::size_t>(n));
        if (reply.size() > 4096) break;
    }
    return std::string(util::trim(reply));
}

struct Daemon {
    std::string uuid, dir;
    MpsCeilings ceilings;
    pid_t pid = 0;
    unsigned failures = 0;
    Clock::time_point start_at{};
    std::string socket() const { return dir + "/pipe/control"; }
    std::string limits() const { return dir + "/" + decide::kMpsLimitsFile; }
};

// The daemon's child: its own mount namespace, shm/ at /dev/shm, our environment.
[[noreturn]] void exec_daemon(const Daemon& d, const std::string& control) {
    const std::string shm = d.dir + "/shm";
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(shm.c_str(), "/dev/shm", nullptr, MS_BIND, nullptr) != 0) {
        std::fprintf(stderr, "gpubind mps: %s: %s\n", shm.c_str(), std::strerror(errno));
        ::_exit(126);
    }
    std::vector<std::string> env = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CUDA_MPS_PIPE_DIRECTORY=" + d.dir + "/pipe", "CUDA_MPS_LOG_DIRECTORY=" + d.dir + "/log",
        "CUDA_VISIBLE_DEVICES=" + d.uuid};
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string name = "nvidia-cuda-mps-control", flag = "-f";
    char* argv[] = {name.data(), flag.data(), nullptr};
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(control.c_str(), argv, envp.data());
    std::fprintf(stderr, "gpubind mps: %s: %s\n", control.c_str(), std::strerror(errno));
    ::_exit(127);
}

// Starts `d`'s daemon, waits for its socket, sets its ceilings and writes
// them to `limits`. A daemon that does not come up is killed: it is tried
// again after the backoff.
void start_daemon(Daemon& d, const std::string& control) {
    ::unlink(d.limits().c_str());
    own_dir(d.dir + "/pipe", 1);
    own_dir(d.dir + "/log", 1);
    own_dir(d.dir + "/shm", 1);
    struct stat st {};
    if (::lstat(d.socket().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(d.socket().c_str());
    const pid_t pid = ::fork();
    if (pid < 0) util::throw_errno("fork", control);
    if (pid == 0) exec_daemon(d, control);
    d.pid = pid;
    const auto deadline = Clock::now() + kStartTimeout;
    while (::lstat(d.socket().c_str(), &st) != 0) {
        if (Clock::now() > deadline)
            throw util::Error(ETIMEDOUT, "start MPS daemon", d.socket(), "no socket came up");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::vector<std::string> commands;
    if (d.ceilings.memory)
        commands.push_back(
            fmt::format("set_default_device_pinned_mem_limit 0 {}M", d.ceilings.memory >> 20));
    commands.push_back(fmt::format("set_default_active_thread_percentage {}", d.ceilings.compute));
    for (const auto& c : commands) {
        const std::string reply = send_command(d.socket(), c);
        if (!reply.empty() && reply.find_first_not_of("0123456789.") != std::string::npos)
            throw util::Error(EIO, "start MPS daemon", d.socket(),
                              fmt::format("`{}` answered: {}", c, reply));
    }
    util::write_file_atomic(
        d.limits(), fmt::format("memory {}\ncompute {}\n", d.ceilings.memory, d.ceilings.compute),
        {.mode = 0644, .durable = false});
    util::logger().info("MPS control daemon for {} runs (pid {}; ceilings {}, {}%)", d.uuid, d.pid,
                        d.ceilings.memory ? decide::size_text(d.ceilings.memory) : "the whole GPU",
                        d.ceilings.compute);
}

void schedule_restart(Daemon& d, const std::string& why) {
    ::unlink(d.limits().c_str());
    d.pid = 0;
    const auto backoff = std::min<std::chrono::seconds>(
        kMaxBackoff, std::chrono::seconds(1u << std::min(d.failures, 5u)));
    ++d.failures;
    d.start_at = Clock::now() + backoff;
    util::logger().warn("MPS control daemon for {}: {}; starting it again in {} s", d.uuid, why,
                        backoff.count());
}

std::string status_text(int status) {
    return WIFEXITED(status) ? fmt::format("exited with {}", WEXITSTATUS(status))
                             : fmt::format("killed by signal {}", WTERMSIG(status));
}

}  // namespace

MpsCeilings mps_ceilings(const config::MpsConfig& mps, const node::Gpu& gpu, unsigned replicas) {
    MpsCeilings c;
    replicas = std::max(replicas, 1u);
    if (mps.memory == "replicas") {
        if (!gpu.memory)
            util::throw_invalid(
                "load config", "mps.memory",
                fmt::format("\"replicas\", but {}'s memory is not known", node::gpu_name(gpu)));
        c.memory = gpu.memory / replicas / (1u << 20) * (1u << 20);
    } else if (!mps.memory.empty()) {
        const decide::ShareRequest share = [&] {
            decide::oci::Spec spec;
            spec.env = {"GPUBIND_GPU_MEMORY=" + mps.memory};
            try {
                return decide::read_share(spec, "mps.memory");
            } catch (const util::Error& e) {
                util::throw_invalid(
                    "load config", "mps.memory",
                    fmt::format("\"{}\" is not a size (\"10G\", \"2048M\")", mps.memory));
            }
        }();
        c.memory = share.memory;
        if (gpu.memory && c.memory > gpu.memory) c.memory = gpu.memory;
    }
    if (mps.compute == "replicas")
        c.compute = std::max(100u / replicas, 1u);
    else if (const auto n = util::parse_unsigned(mps.compute); n && *n >= 1 && *n <= 100)
        c.compute = static_cast<unsigned>(*n);
    else
        util::throw_invalid(
            "load config", "mps.compute",
            fmt::format("\"{}\" is not a percent (1 to 100) or \"replicas\"", mps.compute));
    return c;
}

int run_mps(const config::Config& config, const node::Node& node,
            const std::vector<std::string>& gpus, unsigned replicas) {
    const auto control = std::find_if(node.files.begin(), node.files.end(), [](const auto& f) {
        return f.kind == node::FileKind::Binary && f.name == "nvidia-cuda-mps-control";
    });
    if (control == node.files.end())
        util::throw_refused("run MPS", "nvidia-cuda-mps-control",
                            "the driver has no MPS control daemon");
    std::vector<Daemon> daemons;
    std::vector<unsigned> minors;  // their GPUs'
    for (const node::Gpu& gpu : node.gpus) {
        if (!gpus.empty() && std::find(gpus.begin(), gpus.end(), gpu.uuid) == gpus.end() &&
            std::find(gpus.begin(), gpus.end(), std::to_string(gpu.index)) == gpus.end())
            continue;
        if (gpu.uuid.empty())
            util::throw_refused("run MPS", node::gpu_name(gpu), "no UUID (NVML did not answer)");
        daemons.push_back({gpu.uuid, (config.mps.root / gpu.uuid).string(),
                           mps_ceilings(config.mps, gpu, replicas)});
        minors.push_back(gpu.minor);
    }
    if (daemons.empty()) util::throw_invalid("run MPS", "--gpu", "names no GPU of this node");
    own_dir(config.mps.root.string(), 1);
    // Exclusive-process: on each GPU only its MPS server runs, every CUDA
    // process through it; read back, and the default again when we stop.
    for (const auto& [minor, mode] : node::set_compute_mode(
             node, minors, node::kComputeModeExclusiveProcess, kComputeModeTimeout))
        if (mode != node::kComputeModeExclusiveProcess)
            util::throw_refused(
                "run MPS", fmt::format("GPU minor {}", minor),
                fmt::format("NVML reads compute mode {} back, not exclusive-process "
                            "({})",
                            mode, node::kComputeModeExclusiveProcess));
    util::logger().info("compute mode exclusive-process on {} GPUs", minors.size());

    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&mask, s);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    util::Fd signals(::signalfd(-1, &mask, SFD_CLOEXEC));
    if (!signals) util::throw_errno("signalfd");

    for (bool stop = false; !stop;) {
        for (auto& d : daemons) {
            if (d.pid || Clock::now() < d.start_at) continue;
            try {
                start_daemon(d, control->host_path);
            } catch (const util::Error& e) {
                if (d.pid > 0) {
                    ::kill(d.pid, SIGKILL);
                    ::waitpid(d.pid, nullptr, 0);
                }
                schedule_restart(d, std::string("not started: ") + e.what());
            }
        }
        pollfd p{signals.get(), POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) continue;
        signalfd_siginfo info{};
        if (::read(signals.get(), &info, sizeof info) != sizeof info) continue;
        if (info.ssi_signo != SIGCHLD) {
            stop = true;
            break;
        }
        int status = 0;
        for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;)
            for (auto& d : daemons)
                if (d.pid == pid) schedule_restart(d, status_text(status));
    }

    // Stopping: `quit` to each, then wait; one that stays is killed.
    for (auto& d : daemons) {
        if (!d.pid) continue;
        try {
            send_command(d.socket(), "quit");
        } catch (const util::Error& e) {
            ::kill(d.pid, SIGTERM);
        }
    }
    const auto deadline = Clock::now() + kQuitTimeout;
    for (auto& d : daemons) {
        if (!d.pid) continue;
        int status = 0;
        while (::waitpid(d.pid, &status, WNOHANG) == 0) {
            if (Clock::now() > deadline) {
                util::logger().warn("MPS control daemon for {} did not quit: killed", d.uuid);
                ::kill(d.pid, SIGKILL);
                ::waitpid(d.pid, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ::unlink(d.limits().c_str());
        util::logger().info("MPS control daemon for {} stopped", d.uuid);
    }
    try {
        node::set_compute_mode(node, minors, node::kComputeModeDefault, kComputeModeTimeout);
        util::logger().info("compute mode default again on {} GPUs", minors.size());
    } catch (const util::Error& e) {
        util::logger().warn("compute mode left exclusive-process: {}", e.what());
    }
    return 0;
}

}  // namespace gpubind::start
