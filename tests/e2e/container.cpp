#include "container.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace gpubind::test {

namespace fs = std::filesystem;

namespace {

void copy_into(const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path());
    fs::copy_file(fs::canonical(from), to, fs::copy_options::overwrite_existing);
}

void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

}  // namespace

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

std::map<std::string, std::vector<std::string>> sections(const std::string& out) {
    std::map<std::string, std::vector<std::string>> s;
    std::string current, line;
    std::istringstream in(out);
    while (std::getline(in, line)) {
        if (line.rfind("== ", 0) == 0)
            current = line.substr(3);
        else
            s[current].push_back(line);
    }
    return s;
}

bool contains(const std::vector<std::string>& lines, const std::string& line) {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
}

RunResult run_command(const std::vector<std::string>& argv) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    RunResult result;
    if (rc != 0) {
        ::close(out[0]);
        ::close(err[0]);
        result.err = "spawn " + argv[0] + " failed";
        return result;
    }
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (::poll(fds, 2, 120000) <= 0) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
            char buf[8192];
            ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n <= 0) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            } else {
                (i == 0 ? result.out : result.err).append(buf, static_cast<std::size_t>(n));
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) ::close(f.fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

Bundle::Bundle(fs::path dir, Layout layout) : dir_(std::move(dir)) {
    fs::create_directories(rootfs());
    make_rootfs(layout);
    const nlohmann::json caps = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
    spec_ = {
        {"ociVersion", "1.0.2"},
        {"process",
         {{"terminal", false},
          {"user", {{"uid", 0}, {"gid", 0}}},
          {"args", {"/bin/sh", "-c", "true"}},
          {"env", {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}},
          {"cwd", "/"},
          {"capabilities", {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}},
          {"noNewPrivileges", true}}},
        {"root", {{"path", "rootfs"}, {"readonly", false}}},
        {"hostname", "gpubind-test"},
        {"mounts",
         {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
          {{"destination", "/dev"},
           {"type", "tmpfs"},
           {"source", "tmpfs"},
           {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
          {{"destination", "/dev/pts"},
           {"type", "devpts"},
           {"source", "devpts"},
           {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
          {{"destination", "/dev/shm"},
           {"type", "tmpfs"},
           {"source", "shm"},
           {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
          {{"destination", "/sys"},
           {"type", "sysfs"},
           {"source", "sysfs"},
           {"options", {"nosuid", "noexec", "nodev", "ro"}}}}},
        {"linux",
         {{"resources", {{"devices", {{{"allow", false}, {"access", "rwm"}}}}}},
          {"namespaces",
           {{{"type", "pid"}},
            {{"type", "ipc"}},
            {{"type", "uts"}},
            {{"type", "mount"}},
            {{"type", "network"}}}},
          {"maskedPaths", {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"}},
          {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}}}},
    };
}

void Bundle::make_rootfs(Layout layout) {
    const fs::path root = rootfs();
    copy_into("/bin/busybox", root / "bin/busybox");
    for (const char* tool : {"sh", "ls", "cat", "stat", "grep", "find", "sort", "true", "echo",
                             "readlink", "mkdir", "test", "head", "wc", "sed"})
        fs::create_symlink("busybox", root / "bin" / tool);
    const std::string multiarch = "/lib/x86_64-linux-gnu";
    const fs::path libc_dir = layout == Layout::Multiarch ? fs::path(multiarch) : "/usr/lib64";
    for (const char* lib : {"libc.so.6", "libm.so.6"})
        copy_into(fs::path(multiarch) / lib, root / libc_dir.relative_path() / lib);
    copy_into("/lib64/ld-linux-x86-64.so.2", root / "lib64/ld-linux-x86-64.so.2");
    copy_into(env_or("GPUBIND_PROBE", GPUBIND_PROBE_PATH), root / "usr/bin/probe");
    fs::create_directories(root / "proc");
    fs::create_directories(root / "sys");
    fs::create_directories(root / "dev");
    fs::create_directories(root / "tmp");
    fs::create_directories(root / "usr/bin");
    if (layout == Layout::Multiarch) {
        write(root / "etc/debian_version", "12.0\n");
        fs::create_directories(root / "usr/lib/x86_64-linux-gnu");
        write(root / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
        write(
            root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf",
            "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n");
    } else {
        write(root / "etc/redhat-release", "Simulated Linux release 9\n");
        write(root / "etc/ld.so.conf", "include ld.so.conf.d/*.conf\n");
        fs::create_directories(root / "etc/ld.so.conf.d");
    }
    // The image's own loader cache, as the image's build would have made it.
    auto r = run_command({"ldconfig", "-r", root.string(), libc_dir.string()});
    if (r.exit_code != 0) throw std::runtime_error("ldconfig for the test rootfs: " + r.err);
}

Bundle& Bundle::env(const std::string& key_value) {
    spec_["process"]["env"].push_back(key_value);
    return *this;
}

Bundle& Bundle::volume_device(const std::string& id) {
    spec_["mounts"].push_back({{"destination", "/var/run/nvidia-container-devices/" + id},
                               {"type", "bind"},
                               {"source", "/dev/null"},
                               {"options", {"bind", "ro"}}});
    return *this;
}

Bundle& Bundle::bind(const fs::path& host, const std::string& dest) {
    spec_["mounts"].push_back({{"destination", dest},
                               {"type", "bind"},
                               {"source", host.string()},
                               {"options", {"bind"}}});
    return *this;
}

Bundle& Bundle::privileged(bool on) {
    auto& caps = spec_["process"]["capabilities"];
    for (const char* set : {"bounding", "effective", "permitted"}) {
        auto& list = caps[set];
        list.erase(std::remove(list.begin(), list.end(), "CAP_SYS_ADMIN"), list.end());
        if (on) list.push_back("CAP_SYS_ADMIN");
    }
    return *this;
}

Bundle& Bundle::hook(const fs::path& hook, const fs::path& config, const std::string& stage) {
    spec_["hooks"][stage].push_back({{"path", hook.string()},
                                     {"args", {"gpubind-hook", stage}},
                                     {"env", {"GPUBIND_CONFIG=" + config.string()}}});
    return *this;
}

Bundle& Bundle::no_proc_mount() {
    auto& mounts = spec_["mounts"];
    mounts.erase(
        std::remove_if(mounts.begin(), mounts.end(),
                       [](const nlohmann::json& m) { return m["destination"] == "/proc"; }),
        mounts.end());
    return *this;
}

Bundle& Bundle::command(const std::string& shell_script) {
    spec_["process"]["args"] = {"/bin/sh", "-c", shell_script};
    return *this;
}

void Bundle::write_spec() const {
    std::ofstream(dir_ / "config.json") << spec_.dump(2);
}

Detached::Detached(const Bundle& b, const std::string& id)
    : state_(b.state_root().string()), id_(id) {
    const fs::path log = b.dir() / (id + ".out");
    auto r =
        run_command({"sh", "-c", "exec \"$0\" \"$@\" >" + log.string() + " 2>&1", runtime_binary(),
                     "--root", state_, "create", "--bundle", b.dir().string(), id});
    created_ = r.exit_code == 0;
    std::ifstream in(log, std::ios::binary);
    error_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (created_) {
        r = run_command({runtime_binary(), "--root", state_, "start", id_});
        if (r.exit_code != 0) error_ += r.err;
    }
}

void Detached::remove() {
    run_command({runtime_binary(), "--root", state_, "delete", "--force", id_});
}

RunResult Detached::exec(std::vector<std::string> args) const {
    args.insert(args.begin(), {runtime_binary(), "--root", state_, "exec", id_});
    return run_command(args);
}

int Detached::pid() const {
    auto r = run_command({runtime_binary(), "--root", state_, "state", id_});
    if (r.exit_code != 0) return -1;
    return nlohmann::json::parse(r.out).value("pid", -1);
}

std::string Detached::proc_cgroup() const {
    std::ifstream in("/proc/" + std::to_string(pid()) + "/cgroup", std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string runtime_binary() {
    const std::string name = suite_runtime();
    return env_or(name == "crun" ? "GPUBIND_CRUN" : "GPUBIND_RUNC", suite_runtime());
}

RunResult Bundle::run() {
    return run_with(runtime_binary());
}

RunResult Bundle::run_with(const std::string& runtime) {
    static std::atomic<int> counter{0};
    // crun does not pass its hooks' stderr on (runc puts it in its own error):
    // its annotation sends it to a file, added here to what the run printed.
    const bool crun = std::string(suite_runtime()) == "crun" && runtime == runtime_binary();
    const fs::path hooks_stderr = dir_ / "hooks.stderr";
    if (crun) {
        fs::remove(hooks_stderr);
        spec_["annotations"]["run.oci.hooks.stderr"] = hooks_stderr.string();
    }
    write_spec();
    const std::string id =
        "gpubind-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const std::string state = state_root().string();
    auto result = run_command({runtime, "--root", state, "run", "--bundle", dir_.string(), id});
    run_command({runtime_binary(), "--root", state, "delete", "--force", id});
    if (crun) {
        std::ifstream in(hooks_stderr);
        std::stringstream hooks;
        hooks << in.rdbuf();
        result.err += hooks.str();
    }
    return result;
}

SimNode::SimNode(const sim::Spec& spec, const std::string& prefix)
    : dir_(prefix),
      manifest_(sim::simulate(dir_.path(), spec)),
      config_(dir_.path().parent_path() / (dir_.path().filename().string() + "-config.toml")),
      state_dir_(dir_.path().parent_path() / (dir_.path().filename().string() + "-state")),
      cdi_dir_(dir_.path().parent_path() / (dir_.path().filename().string() + "-cdi")) {
    fs::create_directory(state_dir_);
    fs::permissions(state_dir_, fs::perms(0755));
    // Made now: a container start writes the node's CDI spec there, never
    // into the host's /var/run/cdi, and no tripwire armed later sees it appear.
    fs::create_directories(cdi_dir_);
    write_config();
}

SimNode::~SimNode() {
    std::error_code ec;
    fs::remove(config_, ec);
    fs::remove_all(state_dir_, ec);
    fs::remove_all(cdi_dir_, ec);
}

void SimNode::write_config(const std::string& extra) const {
    const std::string r = root().string();
    std::ofstream(config_) << "[node]\ndriver-root = \"" << r << "\"\ndev-root = \"" << r
                           << "\"\nproc-root = \"" << r << "/proc\"\nsys-root = \"" << r
                           << "/sys\"\nstate-dir = \"" << state_dir_.string() << "\"\nbpf-dir = \""
                           << bpf_dir().string() << "\"\n[log]\nfile = \"" << log().string()
                           << "\"\nlevel = \"debug\"\n"
                           << (extra.find("[cdi]") == std::string::npos
                                   ? "[cdi]\ndir = \"" + cdi_dir_.string() + "\"\n"
                                   : std::string())
                           << extra;
}

std::vector<std::pair<fs::path, std::string>> SimNode::host_gpus() const {
    std::vector<std::pair<fs::path, std::string>> out;
    for (const auto& g : manifest_.gpus) {
        const std::string name = "nvidia" + std::to_string(g.minor);
        out.emplace_back(root() / "dev" / name, "/hostdev/" + name);
    }
    return out;
}

namespace {

std::vector<const sim::ManifestFile*> compute_libraries(const sim::Manifest& m) {
    std::vector<const sim::ManifestFile*> out;
    for (const auto& f : m.files)
        if (f.kind == "library" && !f.compat32 &&
            (f.capability == "utility" || f.capability == "compute"))
            out.push_back(&f);
    return out;
}

unsigned node_major(const sim::Manifest& m, const std::string& path) {
    for (const auto& n : m.nodes)
        if (n.path == path) return n.major;
    return 0;
}

std::string library_file(const GpuChecks& checks, const sim::ManifestFile& f) {
    return checks.lib_dir + "/" + fs::path(f.real_path).filename().string();
}

}  // namespace

std::string gpu_script(const sim::Manifest& m, const GpuChecks& checks) {
    std::string s = "echo '== dev'; probe stat";
    if (checks.all_nodes) {
        for (const auto& n : m.nodes) s += " " + n.path;
    } else {
        for (const auto& g : m.gpus) s += " /dev/nvidia" + std::to_string(g.minor);
        s += " /dev/nvidiactl";
    }
    if (!checks.lib_dir.empty()) {
        s += "; echo '== libs'; probe stat";
        for (const auto* f : compute_libraries(m))
            s += " " + library_file(checks, *f) + " " + checks.lib_dir + "/" + f->name;
        s += "; echo '== mounts'; cat /proc/self/mountinfo";
        s += "; echo '== cuda'; probe cuda; probe nvml";
    } else {
        s += "; echo '== cuda'; probe nvml";
    }
    if (checks.smi) s += "; echo '== smi'; nvidia-smi -L";
    if (checks.cgroup) {
        s += "; echo '== open'; probe open";
        for (const auto& g : m.gpus) s += " /hostdev/nvidia" + std::to_string(g.minor);
    }
    s += "; echo '== proc'; ls /proc/driver/nvidia/gpus";
    return s + "; true";
}

std::map<std::string, std::vector<std::string>> gpu_problems(const sim::Manifest& m,
                                                             const std::string& out,
                                                             const std::vector<unsigned>& selected,
                                                             const GpuChecks& checks) {
    std::map<std::string, std::vector<std::string>> problems;
    auto s = sections(out);
    auto expect = [&](const std::string& check, const std::string& section,
                      const std::string& line) {
        if (!contains(s[section], line))
            problems[check].push_back("missing line in " + section + ": " + line);
    };
    auto given = [&](unsigned index) {
        return std::count(selected.begin(), selected.end(), index) > 0;
    };
    // Device nodes: exactly the selected GPUs and the control nodes, host numbers.
    for (const auto& g : m.gpus) {
        const std::string path = "/dev/nvidia" + std::to_string(g.minor);
        expect("devices", "dev",
               given(g.index) ? path + " c 195:" + std::to_string(g.minor) : path + " ENOENT");
    }
    expect("devices", "dev", "/dev/nvidiactl c 195:255");
    if (checks.all_nodes) {
        expect("devices", "dev",
               "/dev/nvidia-uvm c " + std::to_string(node_major(m, "/dev/nvidia-uvm")) + ":0");
        expect("devices", "dev",
               "/dev/nvidia-uvm-tools c " + std::to_string(node_major(m, "/dev/nvidia-uvm-tools")) +
                   ":1");
    }
    // Libraries of the driver version in the image's library directory, read-only.
    if (!checks.lib_dir.empty()) {
        for (const auto* f : compute_libraries(m)) {
            const std::string file = library_file(checks, *f);
            expect("libraries", "libs", file + " f");
            int mounts = 0;
            bool read_only = false;
            for (const auto& line : s["mounts"])
                if (line.find(" " + file + " ") != std::string::npos) {
                    ++mounts;
                    read_only = read_only || line.find(" ro,") != std::string::npos;
                }
            if (!read_only) problems["libraries"].push_back(file + " is not a read-only mount");
            if (checks.mounted_once && mounts != 1)
                problems["libraries"].push_back(file + " is mounted " + std::to_string(mounts) +
                                                " times");
        }
        // Loaded by soname through the container's loader, and answering.
        const auto dot = m.cuda_version.find('.');
        const int cuda =
            std::stoi(m.cuda_version) * 1000 + std::stoi(m.cuda_version.substr(dot + 1)) * 10;
        expect("loader", "cuda",
               "cuda init=0 version=" + std::to_string(cuda) +
                   "(0) count=" + std::to_string(selected.size()) + "(0)");
    }
    expect("loader", "cuda", "nvml init=0 count=" + std::to_string(selected.size()) + "(0)");
    // nvidia-smi -L lists exactly the selected GPUs, by the manifest's UUIDs.
    if (checks.smi) {
        std::set<std::string> want, got;
        for (unsigned i : selected) want.insert(m.gpus.at(i).uuid);
        for (const auto& line : s["smi"])
            if (auto p = line.find("(UUID: "); p != std::string::npos)
                got.insert(line.substr(p + 7, line.find(')', p) - p - 7));
        if (got != want)
            problems["nvidia-smi"].push_back("nvidia-smi -L shows " + std::to_string(got.size()) +
                                             " GPUs, not exactly the selected ones");
    }
    // The device cgroup: given nodes open (ENXIO: no driver behind them), others refused.
    if (checks.cgroup)
        for (const auto& g : m.gpus)
            expect("cgroup", "open",
                   "/hostdev/nvidia" + std::to_string(g.minor) +
                       (given(g.index) ? " ENXIO" : " EPERM"));
    // /proc/driver/nvidia/gpus: only the selected GPUs.
    std::set<std::string> want_bus, got_bus(s["proc"].begin(), s["proc"].end());
    for (unsigned i : selected) want_bus.insert(m.gpus.at(i).pci_bus_id);
    if (got_bus != want_bus)
        problems["proc"].push_back(
            "/proc/driver/nvidia/gpus does not list exactly the selected GPUs");
    return problems;
}

std::string expect_gpus(const sim::Manifest& m, const std::string& out,
                        const std::vector<unsigned>& selected, const GpuChecks& checks) {
    std::string text;
    for (const auto& [check, list] : gpu_problems(m, out, selected, checks))
        for (const auto& p : list) text += check + ": " + p + "\n";
    return text;
}

std::string snapshot_tree(const fs::path& root) {
    std::ostringstream out;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(root, ec))) return "(missing)\n";
    std::vector<std::string> lines;
    for (auto it = fs::recursive_directory_iterator(
             root, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0) continue;
        std::ostringstream line;
        line << it->path().lexically_relative(root).string() << " mode=" << std::oct << st.st_mode
             << std::dec << " ino=" << st.st_ino
             << " size=" << (S_ISDIR(st.st_mode) ? 0 : st.st_size) << " mtime=" << st.st_mtim.tv_sec
             << "." << st.st_mtim.tv_nsec << " rdev=" << st.st_rdev;
        if (S_ISLNK(st.st_mode)) line << " -> " << fs::read_symlink(it->path(), ec).string();
        lines.push_back(line.str());
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& l : lines) out << l << "\n";
    return out.str();
}

PrivateCgroup2::PrivateCgroup2()
    : own_ns_(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)),
      cwd_(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) {
    if (::unshare(CLONE_NEWNS) != 0) {
        error_ = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
        return;
    }
    entered_ = true;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        error_ = std::string("make / private: ") + std::strerror(errno);
    else if (::mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, nullptr) != 0)
        error_ = std::string("mount cgroup2 on /sys/fs/cgroup: ") + std::strerror(errno);
}

PrivateCgroup2::~PrivateCgroup2() {
    if (entered_ && (::setns(own_ns_, CLONE_NEWNS) != 0 || ::fchdir(cwd_) != 0))
        std::abort();  // the other tests must not run in the private namespace
    ::close(own_ns_);
    ::close(cwd_);
}

std::string host_mounts() {
    std::ifstream in("/proc/self/mountinfo");
    std::string line, out;
    while (std::getline(in, line)) out += line + "\n";
    return out;
}

namespace {

// 64-bit FNV-1a of a regular file's content (a changed byte changes it).
std::string content_hash(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return "unreadable";
    std::uint64_t h = 14695981039346656037ull;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; ++i) {
            h ^= static_cast<unsigned char>(buf[i]);
            h *= 1099511628211ull;
        }
    ::close(fd);
    std::ostringstream out;
    out << std::hex << h;
    return out.str();
}

std::string type_of(mode_t mode) {
    if (S_ISREG(mode)) return "file";
    if (S_ISDIR(mode)) return "dir";
    if (S_ISLNK(mode)) return "symlink";
    if (S_ISFIFO(mode)) return "fifo";
    if (S_ISCHR(mode)) return "char";
    if (S_ISBLK(mode)) return "block";
    if (S_ISSOCK(mode)) return "socket";
    return "other";
}

// One entry: type, inode, mode, mtime, size, hash, link target, device numbers.
std::string describe_entry(const fs::path& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return "missing";
    std::ostringstream line;
    line << type_of(st.st_mode) << " ino=" << st.st_ino << " mode=" << std::oct
         << (st.st_mode & 07777) << std::dec << " mtime=" << st.st_mtim.tv_sec << "."
         << st.st_mtim.tv_nsec;
    if (S_ISREG(st.st_mode)) line << " size=" << st.st_size << " hash=" << content_hash(path);
    if (S_ISLNK(st.st_mode)) {
        std::error_code ec;
        line << " -> " << fs::read_symlink(path, ec).string();
    }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        line << " rdev=" << major(st.st_rdev) << ":" << minor(st.st_rdev);
    return line.str();
}

// mkdtemp's names: a prefix, then '-' or '.', then six letters or digits;
// and the compiler's temporary files ("cc" and six of them, an extension).
bool mkdtemp_shaped(const std::string& name) {
    if (name.size() >= 10 && name.rfind("cc", 0) == 0 && name[8] == '.' &&
        std::all_of(name.begin() + 2, name.begin() + 8,
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }))
        return true;
    if (name.size() < 8) return false;
    const char sep = name[name.size() - 7];
    if (sep != '-' && sep != '.') return false;
    for (std::size_t i = name.size() - 6; i < name.size(); ++i)
        if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
    return true;
}

}  // namespace

Tripwire::Tripwire(fs::path dir) : dir_(std::move(dir)) {
    fs::create_directory(dir_);
    for (const char* sub :
         {"usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/lib/i386-linux-gnu", "usr/lib64",
          "lib64", "dev", "proc/driver/nvidia", "etc/ld.so.conf.d", "lib/firmware/nvidia",
          "run/nvidia-persistenced", "var/run", "tmp", "sbin"}) {
        fs::create_directories(dir_ / sub);
        write(dir_ / sub / "host-data", std::string("host data in ") + sub + "\n");
    }
    write(dir_ / "etc/ld.so.cache", "the host's cache, not to be rewritten\n");
    write(dir_ / "etc/ld.so.conf", "/usr/lib/x86_64-linux-gnu\n");
    fs::create_symlink("host-data", dir_ / "usr/bin/host-link");
    watch_tree(dir_);
    watch_tree("/etc/ld.so.cache");
    for (const char* d :
         {"/", "/tmp", "/dev", "/etc", "/usr/bin", "/usr/lib/x86_64-linux-gnu", "/lib64", "/sbin"})
        watch_new_entries(d);
}

Tripwire& Tripwire::watch_tree(const fs::path& path) {
    trees_.push_back(path);
    return *this;
}

Tripwire& Tripwire::watch_new_entries(const fs::path& dir) {
    entry_dirs_.push_back(dir);
    return *this;
}

Tripwire::Record Tripwire::record() const {
    Record r;
    for (const auto& root : trees_) {
        r.trees[root.string()] = describe_entry(root);
        std::error_code ec;
        if (!fs::is_directory(fs::symlink_status(root, ec))) continue;
        for (auto it = fs::recursive_directory_iterator(root, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
            r.trees[it->path().string()] = describe_entry(it->path());
    }
    for (const auto& dir : entry_dirs_) {
        std::error_code ec;
        for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
             it.increment(ec)) {
            struct stat st {};
            if (::lstat(it->path().c_str(), &st) != 0) continue;
            r.entries[it->path().string()] = type_of(st.st_mode);
        }
    }
    r.mounts = host_mounts();
    return r;
}

void Tripwire::arm() {
    armed_ = record();
}

std::string Tripwire::changes() const {
    const Record now = record();
    std::string out;
    for (const auto& [path, line] : armed_.trees) {
        auto it = now.trees.find(path);
        if (it == now.trees.end())
            out += "removed " + path + " (" + line + ")\n";
        else if (it->second != line)
            out += "changed " + path + ": " + line + " => " + it->second + "\n";
    }
    for (const auto& [path, line] : now.trees)
        if (!armed_.trees.count(path)) out += "new " + path + " (" + line + ")\n";
    for (const auto& [path, type] : now.entries)
        if (!armed_.entries.count(path) && !mkdtemp_shaped(fs::path(path).filename().string()))
            out += "new " + path + " (" + type + ")\n";
    if (now.mounts != armed_.mounts) {
        std::set<std::string> before, after;
        std::istringstream a(armed_.mounts), b(now.mounts);
        for (std::string line; std::getline(a, line);) before.insert(line);
        for (std::string line; std::getline(b, line);) after.insert(line);
        for (const auto& line : after)
            if (!before.count(line)) out += "new mount: " + line + "\n";
        for (const auto& line : before)
            if (!after.count(line)) out += "mount gone: " + line + "\n";
    }
    return out;
}

}  // namespace gpubind::test
