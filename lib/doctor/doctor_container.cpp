// `gpubind doctor --pid/--bundle`: what a container asked for, what it
// should have got (the plan) and what it has now: its device nodes, its
// mounts and whether its device cgroup (v1 rules, v2 programs) still allows
// the GPUs it was given.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/doctor/doctor.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/os/cgroup.hpp"
#include "gpubind/os/safe_path.hpp"
#include "gpubind/start/start.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::doctor {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxProc = 4u << 20;

// The bundle of the runc-style container whose init is `pid`: the state
// roots' <id>/state.json ("init_process_pid", "config.labels": "bundle=...").
std::string find_bundle(pid_t pid, const std::vector<fs::path>& roots) {
    for (const auto& root : roots) {
        for (const auto& id : node::detail::list_dir(root)) {
            const fs::path state = root / id / "state.json";
            if (!stat_path(state).exists()) continue;
            try {
                auto j =
                    nlohmann::json::parse(util::read_file(state, decide::oci::kMaxStateSize * 16));
                if (j.value("init_process_pid", 0) != pid) continue;
                for (const auto& label : j.at("config").value("labels", nlohmann::json::array()))
                    if (label.is_string() && label.get<std::string>().rfind("bundle=", 0) == 0)
                        return label.get<std::string>().substr(7);
            } catch (const std::exception&) {
            }
        }
    }
    return {};
}

std::vector<fs::path> default_state_roots() {
    std::vector<fs::path> roots = {"/run/runc"};
    for (const char* parent : {"/run/containerd/runc", "/run/docker/runtime-runc"})
        for (const auto& ns : node::detail::list_dir(parent))
            roots.push_back(fs::path(parent) / ns);
    return roots;
}

// Mount points of a /proc/<pid>/mountinfo (field 5, octal escapes undone).
std::set<std::string> mount_points(std::string_view mountinfo) {
    std::set<std::string> out;
    for (auto line : util::split(mountinfo, '\n')) {
        auto f = util::split(line, ' ');
        if (f.size() < 5) continue;
        std::string p;
        const std::string_view s = f[4];
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\\' && i + 3 < s.size()) {
                p += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 3)), nullptr, 8));
                i += 3;
            } else {
                p += s[i];
            }
        }
        out.insert(p);
    }
    return out;
}

// The file at `path` inside the container's root, not following a final link.
FileFact stat_in_root(int root_fd, const fs::path& path) {
    util::Fd dir = os::try_open_in_root(root_fd, path.parent_path(), O_PATH | O_DIRECTORY);
    if (!dir) return {};
    struct stat st {};
    if (::fstatat(dir.get(), path.filename().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
    FileFact f;
    f.mode = st.st_mode & 07777;
    if (S_ISCHR(st.st_mode)) {
        f.type = FileFact::Type::CharDevice;
        f.major = ::major(st.st_rdev);
        f.minor = ::minor(st.st_rdev);
    } else if (S_ISREG(st.st_mode)) {
        f.type = FileFact::Type::Regular;
    } else if (S_ISDIR(st.st_mode)) {
        f.type = FileFact::Type::Directory;
    } else if (S_ISLNK(st.st_mode)) {
        f.type = FileFact::Type::Symlink;
    } else {
        f.type = FileFact::Type::Other;
    }
    return f;
}

// v2: whether every device program on `dir` and its ancestors (up to the
// cgroup2 mount's top) allows read and write of each device.
void judge_programs(ContainerFacts& c, const fs::path& dir) {
    os::LinuxSystem sys;
    std::vector<std::pair<std::string, std::vector<os::bpf::Insn>>> programs;
    for (fs::path d = dir; stat_path(d / "cgroup.controllers").exists(); d = d.parent_path()) {
        util::Fd fd = sys.open_cgroup_dir(d);
        for (auto id : sys.query_device_programs(fd.get()).ids) {
            util::Fd prog = sys.open_program(id);
            programs.emplace_back(fmt::format("program {} on {}", id, d.string()),
                                  sys.program_instructions(prog.get()));
            c.cgroup_evidence.push_back(programs.back().first);
        }
        if (d == d.parent_path()) break;
    }
    if (programs.empty()) c.cgroup_evidence.push_back("no device program: every device is allowed");
    for (auto& dev : c.devices) {
        dev.allowed = true;
        for (const auto& [what, insns] : programs) {
            const os::bpf::DeviceRequest req{
                os::bpf::kDevChar, os::bpf::kAccRead | os::bpf::kAccWrite, dev.major, dev.minor};
            if (os::bpf::run_device_program(insns, req) == 0) {
                dev.allowed = false;
                c.cgroup_evidence.push_back(
                    fmt::format("{} denies {} ({}:{})", what, dev.path, dev.major, dev.minor));
            }
        }
    }
}

Check container_check(std::string name) {
    Check k;
    k.group = "container";
    k.name = std::move(name);
    return k;
}

// Whether the container was found and planned: a problem that ends the
// checks when it was not.
Check check_request(const ContainerFacts& c) {
    Check req = container_check("container-request");
    req.evidence.push_back("bundle: " + (c.bundle.empty() ? std::string("?") : c.bundle));
    if (c.pid > 0) req.evidence.push_back("pid: " + std::to_string(c.pid));
    if (!c.find_error.empty() && c.request.empty()) {
        req.verdict = Verdict::Problem;
        req.summary = "the container cannot be found";
        req.evidence.push_back(c.find_error);
        req.fix = "give its bundle with --bundle DIR (and its init process with --pid PID)";
        return req;
    }
    if (!c.plan_error.empty()) {
        req.verdict = Verdict::Problem;
        req.summary = "gpubind refuses or cannot plan this container";
        req.evidence.push_back(c.plan_error);
        req.fix =
            "correct what it names (the request, the node or the config); `gpubind plan "
            "--bundle " +
            c.bundle + "` shows the decision";
        return req;
    }
    req.summary = c.request;
    return req;
}

// Whether its planned device nodes are there, each a character device of
// the planned numbers.
Check check_devices(const ContainerFacts& c) {
    Check devs = container_check("container-devices");
    std::size_t bad_nodes = 0;
    for (const auto& d : c.devices) {
        if (!d.now) continue;
        if (d.now->type == FileFact::Type::CharDevice && d.now->major == d.major &&
            d.now->minor == d.minor)
            continue;
        ++bad_nodes;
        devs.evidence.push_back(
            fmt::format("{}: {}, planned {}:{}", d.path, describe(*d.now), d.major, d.minor));
    }
    if (bad_nodes) {
        devs.verdict = Verdict::Problem;
        devs.summary = fmt::format("{} of its {} device nodes are missing or wrong", bad_nodes,
                                   c.devices.size());
        devs.fix =
            "restart the container (its devices are made at each start); if they are "
            "still missing, read gpubind-hook's log";
    } else {
        devs.summary = fmt::format("all {} planned device nodes are there", c.devices.size());
    }
    return devs;
}

// Whether its planned driver mounts are mount points.
Check check_mounts(const ContainerFacts& c) {
    Check mounts = container_check("container-mounts");
    std::size_t missing = 0;
    for (const auto& m : c.mounts)
        if (!m.present) {
            ++missing;
            mounts.evidence.push_back(m.target + " is not a mount point (" + m.why + ")");
        }
    if (missing) {
        mounts.verdict = Verdict::Problem;
        mounts.summary =
            fmt::format("{} of its {} driver mounts are missing", missing, c.mounts.size());
        mounts.fix = "restart the container; if they are still missing, read gpubind-hook's log";
    } else {
        mounts.summary = fmt::format("all {} driver mounts are there", c.mounts.size());
    }
    return mounts;
}

// Whether its device cgroup still allows its devices; `nodes_there`: whether
// its device nodes are (access lost with the nodes there is what a daemon
// reload does).
Check check_cgroup(const ContainerFacts& c, bool nodes_there) {
    Check cg = container_check("device-cgroup");
    cg.evidence.push_back("cgroup " + (c.cgroup_kind.empty() ? std::string("?") : c.cgroup_kind) +
                          ": " + (c.cgroup_dir.empty() ? std::string("?") : c.cgroup_dir));
    for (const auto& e : c.cgroup_evidence) cg.evidence.push_back(e);
    if (!c.cgroup_error.empty()) {
        cg.verdict = Verdict::Warning;
        cg.summary = "its device cgroup could not be read";
        cg.evidence.push_back(c.cgroup_error);
        cg.fix = "run doctor as root on the host (the kernel shows device programs only to root)";
        return cg;
    }
    std::vector<std::string> denied;
    for (const auto& d : c.devices)
        if (d.allowed == false) denied.push_back(d.path);
    if (denied.empty()) {
        cg.summary = fmt::format("allows all {} of its devices", c.devices.size());
        return cg;
    }
    cg.verdict = Verdict::Problem;
    cg.summary = fmt::format(
        "device access lost: its device cgroup no longer allows {} ({}){}", fmt::join(denied, ", "),
        c.cgroup_kind == "v1" ? "the rules were denied" : "the runtime's own program is back",
        nodes_there ? ", while the nodes are still there: what `systemctl daemon-reload` does to "
                      "a container given GPUs by the bare hook (NVML: \"Unknown Error\")"
                    : "");
    cg.fix =
        "restart the container to get them back; to keep them across reloads, start GPU "
        "containers through gpubind-runtime (`gpubind setup --engine docker|containerd|crio`) "
        "or CDI, and run `gpubind setup --dev-char-links`";
    return cg;
}

}  // namespace

ContainerFacts gather_container(const ContainerOptions& options, const config::Config& config) {
    ContainerFacts c;
    c.pid = options.pid;
    c.bundle = options.bundle.string();
    if (c.bundle.empty()) {
        c.bundle = find_bundle(
            options.pid, options.state_roots.empty() ? default_state_roots() : options.state_roots);
        if (c.bundle.empty()) {
            c.find_error = fmt::format(
                "no runtime state names process {} (looked in runc's state directories)",
                options.pid);
            return c;
        }
    }
    try {
        const decide::oci::Spec spec = decide::oci::load_spec(c.bundle);
        const decide::Decision d = start::decide(spec, config, false);  // doctor only reads
        c.request = d.reason;
        c.gpu = d.gpu_container();
        for (const auto& dev : d.plan.devices)
            c.devices.push_back({dev.node.path, dev.why, dev.node.major, dev.node.minor,
                                 std::nullopt, std::nullopt});
        for (const auto& m : d.plan.mounts) c.mounts.push_back({m.target, m.why, false});
    } catch (const util::Error& e) {
        c.plan_error = e.what();
        return c;
    }
    if (c.pid <= 0 || !c.gpu) return c;
    const std::string proc = "/proc/" + std::to_string(c.pid);
    try {
        util::Fd root(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!root) util::throw_errno("open", proc + "/root");
        for (auto& dev : c.devices) dev.now = stat_in_root(root.get(), dev.path);
        const auto points = mount_points(util::read_file(proc + "/mountinfo", kMaxProc));
        for (auto& m : c.mounts) m.present = points.count(m.target) > 0;
    } catch (const util::Error& e) {
        c.find_error = e.what();
        return c;
    }
    try {
        const auto cg = os::cgroup::locate(util::read_file(proc + "/cgroup", kMaxProc),
                                           util::read_file("/proc/self/mountinfo", kMaxProc), proc);
        c.cgroup_dir = cg.dir.string();
        if (cg.kind == os::cgroup::DeviceCgroup::Kind::V1) {
            c.cgroup_kind = "v1";
            const std::string list = util::read_file(cg.dir / "devices.list", kMaxProc);
            for (auto& dev : c.devices) {
                dev.allowed = os::cgroup::allows(list, dev.major, dev.minor);
                if (!*dev.allowed)
                    c.cgroup_evidence.push_back(fmt::format("{}/devices.list lacks c {}:{} rw ({})",
                                                            c.cgroup_dir, dev.major, dev.minor,
                                                            dev.path));
            }
        } else {
            c.cgroup_kind = "v2";
            judge_programs(c, cg.dir);
        }
    } catch (const util::Error& e) {
        c.cgroup_error = e.what();
    }
    return c;
}

std::vector<Check> check_container(const ContainerFacts& c) {
    std::vector<Check> out;
    out.push_back(check_request(c));
    if (out.back().verdict == Verdict::Problem || !c.gpu) return out;

    Check plan = container_check("container-plan");
    plan.summary =
        fmt::format("{} devices and {} mounts planned", c.devices.size(), c.mounts.size());
    for (const auto& d : c.devices)
        plan.evidence.push_back(fmt::format("{} {}:{} ({})", d.path, d.major, d.minor, d.why));
    out.push_back(std::move(plan));
    if (c.pid <= 0 || !c.find_error.empty()) {
        Check now = container_check("container-process");
        now.verdict = Verdict::Warning;
        now.summary = "no running process looked at: only the plan is shown";
        if (!c.find_error.empty()) now.evidence.push_back(c.find_error);
        now.fix = "give the container's init process with --pid PID";
        out.push_back(std::move(now));
        return out;
    }

    out.push_back(check_devices(c));
    const bool nodes_there = out.back().verdict != Verdict::Problem;
    out.push_back(check_mounts(c));
    out.push_back(check_cgroup(c, nodes_there));
    return out;
}

}  // namespace gpubind::doctor
