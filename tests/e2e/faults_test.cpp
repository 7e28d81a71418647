// Faults of the real world (issue 49, item 3), end to end with runc, a
// simulated node and gpubind-hook registered at prestart or reached through
// gpubind-runtime: a rootfs out of space (blocks, inodes), a read-only rootfs,
// a descriptor limit of 64, the driver upgraded between the decision and the
// execution, and the hook killed at each step of a recorded start. After a
// failure: one line from the hook naming what and where, the runtime
// reporting failure, the rootfs as it was (names, types, modes, link targets,
// sizes), no mount left in the mount table, and the same rootfs starting again
// once the fault is gone. Expectations come from the simulated node's
// manifest, the kernel's mount table and strace's record of a start.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "binaries.hpp"
#include "container.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kOld = "550.54.15";
constexpr const char* kNew = "560.35.03";

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The rootfs as a failed start must leave it: each entry's name, type, mode,
// size and link target (times and inode numbers change with any rollback).
std::string tree_shape(const fs::path& root) {
    std::vector<std::string> lines;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const auto st = it->symlink_status(ec);
        std::ostringstream line;
        line << it->path().lexically_relative(root).string()
             << " type=" << static_cast<int>(st.type()) << " mode=" << std::oct
             << static_cast<unsigned>(st.permissions()) << std::dec;
        if (fs::is_regular_file(st)) line << " size=" << fs::file_size(it->path(), ec);
        if (fs::is_symlink(st)) line << " -> " << fs::read_symlink(it->path(), ec).string();
        lines.push_back(line.str());
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

// What the failing hook wrote to its stderr, as runc quotes it in its error
// ("... error running hook #0: ..., stderr: <text>\n"), one entry a line;
// where no hook failed (gpubind-runtime did), the lines of the error.
std::vector<std::string> hook_lines(const std::string& runc_err) {
    const auto at = runc_err.find("stderr: ");
    if (at == std::string::npos) {
        std::vector<std::string> lines;
        std::istringstream in(runc_err);
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) lines.push_back(line);
        return lines;
    }
    std::string text = runc_err.substr(at + 8);
    text = text.substr(0, text.find('\n'));
    if (!text.empty() && text.back() == '"') text.pop_back();
    std::vector<std::string> lines;
    for (std::size_t from = 0; from < text.size();) {
        auto nl = text.find("\\n", from);
        if (nl == std::string::npos) nl = text.size();
        if (nl > from) lines.push_back(text.substr(from, nl - from));
        from = nl + 2;
    }
    return lines;
}

// A tmpfs mounted at `dir` in this (the sealed test's private) namespace.
class Tmpfs {
  public:
    Tmpfs(const fs::path& dir, const std::string& options) : dir_(dir) {
        fs::create_directories(dir);
        if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0)
            error_ = "mount tmpfs on " + dir.string() + ": " + std::strerror(errno);
    }
    ~Tmpfs() {
        if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
    }
    Tmpfs(const Tmpfs&) = delete;
    Tmpfs& operator=(const Tmpfs&) = delete;
    const std::string& error() const { return error_; }
    // Remounted with other options (size, nr_inodes).
    std::string remount(const std::string& options) const {
        if (::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT, options.c_str()) != 0)
            return "remount " + dir_.string() + " " + options + ": " + std::strerror(errno);
        return {};
    }

  private:
    fs::path dir_;
    std::string error_;
};

class FaultsTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        node_ = std::make_unique<SimNode>(spec_of(kOld), "gpubind-e2e-faults-node");
        node_->write_config("[runtime]\nruntimes = [\"" + runtime_binary() + "\"]\n");
        // gpubind-runtime finds its config as engines let it: in its environment.
        ::setenv("GPUBIND_CONFIG", node_->config().c_str(), 1);
    }
    static void TearDownTestSuite() {
        ::unsetenv("GPUBIND_CONFIG");
        node_.reset();
    }
    void SetUp() override {
        if (m().spec.driver_version != kOld) node_->simulate(spec_of(kOld));
    }

    static sim::Spec spec_of(const std::string& version) {
        sim::Spec spec;
        spec.gpus = 2;
        spec.driver_version = version;
        return spec;
    }
    static const sim::Manifest& m() { return node_->manifest(); }

    // A bundle made at `dir` (its rootfs there, or on what is mounted
    // there), given GPU 0 with the utility and compute capabilities and
    // running gpu_script(); gpubind-hook at `hook_stage`, none if empty.
    std::unique_ptr<Bundle> gpu_bundle(const fs::path& dir,
                                       const std::string& hook_stage = "prestart") {
        auto b = std::make_unique<Bundle>(dir);
        // The mount points of the GPUs' binds, made as an image holds them:
        // runc makes none in the rootfs.
        fs::create_directory(b->rootfs() / "hostdev");
        for (const auto& [host, dest] : node_->host_gpus())
            std::ofstream(b->rootfs() / dest.substr(1));
        if (!hook_stage.empty()) b->hook(hook(), node_->config(), hook_stage);
        for (const auto& [host, dest] : node_->host_gpus()) b->bind(host, dest);
        b->env("NVIDIA_VISIBLE_DEVICES=0").env("NVIDIA_DRIVER_CAPABILITIES=utility,compute");
        b->command(gpu_script(m(), kChecks));
        return b;
    }
    // Problems of a run that should have given the container GPU 0, "" when none.
    static std::string started(const RunResult& r, const std::vector<unsigned>& gpus = {0}) {
        if (r.exit_code != 0) return "exit " + std::to_string(r.exit_code) + ": " + r.err;
        return expect_gpus(m(), r.out, gpus, kChecks);
    }
    // Problems of a run that should have failed with one line of the hook
    // holding `reason` and left `tree` (tree_shape) and `mounts` as they
    // were, "" when none.
    static std::string failed_cleanly(const RunResult& r, const std::string& reason,
                                      const Bundle& b, const std::string& tree,
                                      const std::string& mounts) {
        std::string problems;
        if (r.exit_code == 0) return "the start did not fail\n";
        const auto lines = hook_lines(r.err);
        if (lines.size() != 1)
            problems += "not one line from the hook: " + r.err + "\n";
        else if (lines[0].find(reason) == std::string::npos || lines[0].rfind("gpubind-", 0) != 0)
            problems += "the line does not name " + reason + ": " + lines[0] + "\n";
        if (tree_shape(b.rootfs()) != tree) problems += "the rootfs changed\n";
        if (host_mounts() != mounts) problems += "the mount table changed\n";
        return problems;
    }

    static inline const GpuChecks kChecks{.mounted_once = true};
    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-e2e-faults"};
};

// (a) The rootfs on a small tmpfs, its inodes or its blocks used up: the
// start fails with one line naming ENOSPC and the file, nothing is left, and
// the same rootfs starts once the filler is gone.
TEST_F(FaultsTest, AFullRootfsFailsWithOneLineAndStartsOnceSpaceIsFreed) {
    for (const std::string full : {"inodes", "blocks"}) {
        SCOPED_TRACE(full);
        const fs::path dir = dir_ / full;
        Tmpfs tmpfs(dir / "rootfs", "size=24m,mode=755");
        ASSERT_EQ(tmpfs.error(), "");
        auto b = gpu_bundle(dir);
        const fs::path filler = b->rootfs() / "filler";
        fs::create_directory(filler);
        if (full == "inodes") {
            struct statvfs sv {};
            ASSERT_EQ(::statvfs(b->rootfs().c_str(), &sv), 0);
            ASSERT_EQ(tmpfs.remount("nr_inodes=" + std::to_string(sv.f_files - sv.f_ffree + 200)),
                      "");
            for (int i = 0;; ++i) {
                const int fd = ::open((filler / std::to_string(i)).c_str(),
                                      O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0) {
                    ASSERT_EQ(errno, ENOSPC);
                    break;
                }
                ::close(fd);
            }
        } else {
            const int fd = ::open((filler / "0").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            ASSERT_GE(fd, 0);
            const std::string chunk(4096, 'x');
            while (::write(fd, chunk.data(), chunk.size()) > 0) {
            }
            ::close(fd);
        }
        const std::string tree = tree_shape(b->rootfs()), mounts = host_mounts();
        auto r = b->run();
        EXPECT_EQ(failed_cleanly(r, std::strerror(ENOSPC), *b, tree, mounts), "");
        const auto lines = hook_lines(r.err);
        // Where: a path gpubind writes in the rootfs.
        if (!lines.empty()) {
            RecordProperty("hook_" + full, lines[0]);
            EXPECT_TRUE(lines[0].find("/usr/lib/") != std::string::npos ||
                        lines[0].find("ld.so.cache") != std::string::npos ||
                        lines[0].find("/dev/") != std::string::npos)
                << lines[0];
        }
        fs::remove_all(filler);
        EXPECT_EQ(started(b->run()), "");
    }
}

// (b) root.readonly: runc makes the root read-only after the hooks, so the
// container starts with its GPU and a read-only root. A rootfs that is
// itself a read-only mount fails with one line naming EROFS, nothing left,
// and starts once it is writable.
TEST_F(FaultsTest, AReadOnlyRootfsStartsWhenTheRuntimeMakesItSoOrFailsWithOneLine) {
    {
        auto b = gpu_bundle(dir_ / "readonly-spec");
        b->spec()["root"]["readonly"] = true;
        b->command(gpu_script(m(), kChecks) +
                   "; echo '== root'; if echo x 2>/dev/null >/probe-write; then echo writable; "
                   "else echo read-only; fi");
        auto r = b->run();
        EXPECT_EQ(started(r), "");
        EXPECT_TRUE(contains(sections(r.out)["root"], "read-only")) << r.out;
    }
    auto b = gpu_bundle(dir_ / "readonly-mount");
    const std::string rootfs = b->rootfs().string();
    ASSERT_EQ(::mount(rootfs.c_str(), rootfs.c_str(), nullptr, MS_BIND, nullptr), 0);
    ASSERT_EQ(::mount(nullptr, rootfs.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr),
              0);
    const std::string tree = tree_shape(b->rootfs()), mounts = host_mounts();
    auto r = b->run();
    EXPECT_EQ(failed_cleanly(r, std::strerror(EROFS), *b, tree, mounts), "");
    ASSERT_EQ(::umount2(rootfs.c_str(), 0), 0);
    EXPECT_EQ(started(b->run()), "");
}

// (c) The runtime, and so the hook it runs, limited to 64 descriptors (all
// GPUs and every capability: the most files a start holds open): the start
// works or fails with one line naming EMFILE, nothing left; through
// gpubind-runtime too. Without the limit the same rootfs starts.
TEST_F(FaultsTest, SixtyFourDescriptorsStartOrFailWithOneLineNamingEmfile) {
    for (const bool shim : {false, true}) {
        SCOPED_TRACE(shim ? "gpubind-runtime" : "gpubind-hook at prestart");
        const fs::path dir = dir_ / (shim ? "nofile-shim" : "nofile-hook");
        auto b = gpu_bundle(dir, shim ? "" : "prestart");
        b->env("NVIDIA_VISIBLE_DEVICES=all").env("NVIDIA_DRIVER_CAPABILITIES=all");
        const fs::path limited = dir / "limited-runtime";
        std::ofstream(limited) << "#!/bin/sh\nexec prlimit --nofile=64 "
                               << (shim ? runtime() : runtime_binary()) << " \"$@\"\n";
        fs::permissions(limited, fs::perms::owner_all);
        const std::string tree = tree_shape(b->rootfs()), mounts = host_mounts();
        auto r = b->run_with(limited.string());
        if (r.exit_code == 0)
            EXPECT_EQ(started(r, {0, 1}), "");
        else
            EXPECT_EQ(failed_cleanly(r, std::strerror(EMFILE), *b, tree, mounts), "");
        RecordProperty(shim ? "nofile_shim" : "nofile_hook", r.exit_code == 0 ? "started" : r.err);
        EXPECT_EQ(started(shim ? b->run_with(runtime()) : b->run(), {0, 1}), "");
    }
}

// --- the driver upgraded between the decision and the execution ---

// A command printing every version a container sees: the libraries its
// loader maps, nvidia-smi's, the proc view's and the library directory's.
const char* kVersionScript =
    "echo '== loaded'; probe loaded libcuda.so.1 libnvidia-ml.so.1; echo '== smi'; nvidia-smi; "
    "echo '== proc'; cat /proc/driver/nvidia/version; echo '== libs'; "
    "ls /usr/lib/x86_64-linux-gnu; true";

// Problems of a run judged by its driver versions: started with one version
// only (the one it loaded), or failed with one line saying that what it
// mounts was removed meanwhile (not a bare ENOENT), and nothing left.
std::string one_version_or_clean_failure(const RunResult& r, const Bundle& b,
                                         const std::string& tree, const std::string& mounts) {
    if (r.exit_code != 0) {
        std::string problems;
        const auto lines = hook_lines(r.err);
        if (lines.size() != 1)
            problems += "not one line from the hook: " + r.err;
        else if (lines[0].find("removed meanwhile") == std::string::npos)
            problems += "the line does not say the driver's files went: " + lines[0] + "\n";
        if (tree_shape(b.rootfs()) != tree) problems += "the rootfs changed\n";
        if (host_mounts() != mounts) problems += "the mount table changed\n";
        return problems;
    }
    const bool old_seen = r.out.find(kOld) != std::string::npos;
    const bool new_seen = r.out.find(kNew) != std::string::npos;
    if (old_seen == new_seen) return std::string("not one driver version: ") + r.out;
    if (sections(r.out)["loaded"].size() != 2) return "the libraries were not loaded: " + r.out;
    return {};
}

// The hook of a bundle stopped (SIGSTOP, injected by strace) on entering
// `syscall` for the first time: returns its pid once stopped, -1 after 30 s.
pid_t stopped_hook(const std::string& marker) {
    for (int tries = 0; tries < 300; ++tries) {
        for (const auto& e : fs::directory_iterator("/proc")) {
            const std::string name = e.path().filename().string();
            if (name.find_first_not_of("0123456789") != std::string::npos) continue;
            const std::string stat = read_text(e.path() / "stat");
            const auto close = stat.rfind(')');
            if (stat.find("(gpubind-hook)") == std::string::npos || close == std::string::npos)
                continue;
            std::istringstream rest(stat.substr(close + 2));
            char state = 0;
            pid_t ppid = 0;
            rest >> state >> ppid;
            if ((state == 't' || state == 'T') &&
                read_text("/proc/" + std::to_string(ppid) + "/cmdline").find(marker) !=
                    std::string::npos)
                return std::stoi(e.path().filename().string());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
}

// Continues a stopped hook: SIGCONT until it is out of its stop (one sent
// while strace still delivers the SIGSTOP would be undone by it).
void go_on(pid_t pid) {
    const std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
    for (int tries = 0; tries < 600; ++tries) {
        ::kill(pid, SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const std::string stat = read_text(stat_path);
        const auto close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size()) return;  // gone
        const char state = stat[close + 2];
        if (state != 't' && state != 'T') return;
    }
}

// (d) Through gpubind-runtime the shim decides at create and the finish hook
// at createRuntime: a prestart hook upgrading the driver runs between them.
// Through gpubind-hook, the hook is stopped after it opened the driver's
// files (entering the container's mount namespace: setns) and before its
// loader cache goes in place (renameat) while the driver is upgraded. Each
// start gives one version or fails with one line, nothing left; the rootfs
// then starts with the new driver.
TEST_F(FaultsTest, ADriverUpgradedMidStartGivesOneVersionOrFailsCleanly) {
    const std::string strace = run_command({"sh", "-c", "command -v strace"}).out;
    std::vector<std::string> cases = {"shim"};
    if (!strace.empty()) cases.insert(cases.end(), {"setns", "renameat"});
    for (const auto& at : cases) {
        SCOPED_TRACE(at);
        if (m().spec.driver_version != kOld) node_->simulate(spec_of(kOld));
        const fs::path dir = dir_ / ("upgrade-" + at);
        auto b = gpu_bundle(dir, "");
        b->command(kVersionScript);
        const std::string tree = tree_shape(b->rootfs()), mounts = host_mounts();
        RunResult r;
        if (at == "shim") {
            b->spec()["hooks"]["prestart"] = {{{"path", cli()},
                                               {"args",
                                                {"gpubind", "simulate", node_->root().string(),
                                                 "--gpus", "2", "--driver-version", kNew}}}};
            r = b->run_with(runtime());
            node_->simulate(spec_of(kNew));  // the same node: its manifest here
        } else {
            // The node described first, so that the stop is the start's
            // own call and not one of the description's.
            ASSERT_EQ(started(gpu_bundle(dir_ / ("described-" + at))->run()), "");
            const std::string marker = (dir / "strace.out").string();
            b->spec()["hooks"]["prestart"] = {
                {{"path", strace.substr(0, strace.find('\n'))},
                 {"args",
                  {"strace", "-o", marker, "-e", "trace=" + at, "-e",
                   "inject=" + at + ":signal=SIGSTOP:when=1", "--", hook(), "prestart"}},
                 {"env", {"GPUBIND_CONFIG=" + node_->config().string()}}}};
            auto running = std::async(std::launch::async, [&] { return b->run(); });
            const pid_t pid = stopped_hook(marker);
            EXPECT_GT(pid, 0) << "the hook never stopped at " << at;
            node_->simulate(spec_of(kNew));
            if (pid > 0) go_on(pid);
            r = running.get();
        }
        RecordProperty("upgrade_" + at, r.exit_code == 0 ? "started" : r.err);
        EXPECT_EQ(one_version_or_clean_failure(r, *b, tree, mounts), "");
        // Started again, plainly: the new driver only.
        b->spec()["hooks"] = nlohmann::json::object();
        b->hook(hook(), node_->config());
        r = b->run();
        EXPECT_EQ(one_version_or_clean_failure(r, *b, tree, mounts), "");
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_THAT(r.out, HasSubstr("libcuda.so.1 => /usr/lib/x86_64-linux-gnu/libcuda.so." +
                                     std::string(kNew)));
    }
}

// --- the hook killed at each step ---

// A moment of a start where the hook is killed: the `nth` call (from 1) of
// `syscall`, as strace counts them in the hook's process.
struct KillPoint {
    std::string syscall;
    int nth = 0;
    std::string line;  // the recorded call
};

// The kill points of a recorded start (strace -o, the hook's process alone):
// for each kind of call that changes something (opening the driver's files,
// entering the container, creating a name, mounting, a device rule, the proc
// view, the loader cache) its first and last call, and the middle one of the
// mounts. The log's own writes are no step.
std::vector<KillPoint> kill_points(const std::string& trace, const std::string& log) {
    static const std::set<std::string> kChanging = {
        "open_tree", "setns",     "mount_setattr", "move_mount", "fsopen",    "fsmount",
        "mkdirat",   "symlinkat", "unlinkat",      "renameat",   "renameat2", "fchmod",
        "fchown",    "fchownat",  "mknodat",       "linkat",     "umount2",   "mount"};
    std::map<std::string, int> count;
    std::map<std::string, std::vector<KillPoint>> by_kind;
    std::vector<std::string> kinds;  // in the order first seen
    std::string log_fd;
    std::istringstream in(trace);
    std::string line;
    while (std::getline(in, line)) {
        const auto paren = line.find('(');
        if (paren == std::string::npos || line.rfind("+++", 0) == 0 || line.rfind("---", 0) == 0)
            continue;
        const std::string name = line.substr(0, paren);
        const int nth = ++count[name];
        std::string kind;
        if (kChanging.count(name)) {
            kind = name;
        } else if ((name == "openat" || name == "openat2") &&
                   line.find("O_CREAT") != std::string::npos) {
            if (line.find(log) != std::string::npos) {
                log_fd = line.substr(line.rfind("= ") + 2);
                continue;
            }
            kind = "create";
        } else if (name == "write" && line.rfind("write(" + log_fd + ",", 0) != 0) {
            kind = "write";
        } else {
            continue;
        }
        if (!by_kind.count(kind)) kinds.push_back(kind);
        by_kind[kind].push_back({name, nth, line.substr(0, 160)});
    }
    std::vector<KillPoint> points;
    for (const auto& kind : kinds) {
        const auto& calls = by_kind[kind];
        points.push_back(calls.front());
        if (kind == "move_mount" && calls.size() > 2) points.push_back(calls[calls.size() / 2]);
        if (calls.size() > 1) points.push_back(calls.back());
    }
    return points;
}

// (e) The hook SIGKILLed (strace's injection) on entering each step of a
// start recorded on a fresh rootfs, each time on a fresh copy of it: runc
// reports the kill, the mount table is as before, and the same rootfs then
// starts with its GPU, each library mounted once. Without strace: killed at
// evenly spaced moments of a successful start's hook (its timing line).
TEST_F(FaultsTest, TheHookKilledAtEachStepLeavesARootfsThatStartsAgain) {
    std::string strace = run_command({"sh", "-c", "command -v strace"}).out;
    strace = strace.substr(0, strace.find('\n'));
    auto plain = [&](Bundle& b) {
        b.spec()["hooks"] = nlohmann::json::object();
        b.hook(hook(), node_->config());
    };
    int kills = 0;
    auto killed_then_started = [&](Bundle& b, const nlohmann::json& killer, bool must_be_killed) {
        b.spec()["hooks"]["prestart"] = nlohmann::json::array({killer});
        const std::string mounts = host_mounts();
        auto r = b.run();
        kills += r.err.find("signal: killed") != std::string::npos ||
                 r.err.find("exit status 137") != std::string::npos;
        if (must_be_killed) {
            EXPECT_NE(r.exit_code, 0);
            EXPECT_THAT(r.err, HasSubstr("signal: killed"));
        }
        EXPECT_EQ(host_mounts(), mounts);
        plain(b);
        EXPECT_EQ(started(b.run()), "");
        EXPECT_EQ(host_mounts(), mounts);
    };
    const nlohmann::json env = {"GPUBIND_CONFIG=" + node_->config().string()};
    int n = 0;
    if (!strace.empty()) {
        // A start first, so that the recorded one finds the node described
        // as every later start does.
        ASSERT_EQ(started(gpu_bundle(dir_ / "first")->run()), "");
        auto b = gpu_bundle(dir_ / "recorded", "");
        const fs::path trace = dir_ / "recorded.trace";
        b->spec()["hooks"]["prestart"] = {
            {{"path", strace},
             {"args", {"strace", "-o", trace.string(), "--", hook(), "prestart"}},
             {"env", env}}};
        ASSERT_EQ(started(b->run()), "");
        const auto points = kill_points(read_text(trace), node_->log().string());
        ASSERT_GE(points.size(), 8u) << read_text(trace);
        for (const auto& p : points) {
            SCOPED_TRACE("killed at " + p.syscall + " #" + std::to_string(p.nth) + ": " + p.line);
            auto k = gpu_bundle(dir_ / ("killed-" + std::to_string(n++)), "");
            killed_then_started(
                *k,
                {{"path", strace},
                 {"args",
                  {"strace", "-o", "/dev/null", "-e", "trace=" + p.syscall, "-e",
                   "inject=" + p.syscall + ":signal=SIGKILL:when=" + std::to_string(p.nth), "--",
                   hook(), "prestart"}},
                 {"env", env}},
                true);
        }
        return;
    }
    // The hook's own duration: its debug timing line (config, state and
    // spec; decision; execution) of a successful start.
    ASSERT_EQ(started(gpu_bundle(dir_ / "timed")->run()), "");
    std::smatch timing;
    const std::string log = read_text(node_->log());
    std::string last;
    const std::regex timing_line(
        "timing: config, state and spec ([0-9]+) us, decision ([0-9]+) us, execution ([0-9]+) us");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), timing_line);
         it != std::sregex_iterator(); ++it)
        last = it->str();
    ASSERT_TRUE(std::regex_search(last, timing, timing_line)) << log;
    const double seconds =
        (std::stod(timing[1]) + std::stod(timing[2]) + std::stod(timing[3])) / 1e6;
    constexpr int kMoments = 8;
    const fs::path script = dir_ / "killer";
    std::ofstream(script) << "#!/bin/sh\nexec 3<&0\n\"$1\" prestart <&3 &\nsleep \"$2\"\n"
                             "kill -9 $! 2>/dev/null\nwait $!\n";
    fs::permissions(script, fs::perms::owner_all);
    for (int i = 1; i <= kMoments; ++i) {
        const std::string delay = std::to_string(seconds * i / (kMoments + 1));
        SCOPED_TRACE("killed after " + delay + " s");
        auto k = gpu_bundle(dir_ / ("killed-" + std::to_string(n++)), "");
        killed_then_started(
            *k, {{"path", script.string()}, {"args", {"killer", hook(), delay}}, {"env", env}},
            false);
    }
    RecordProperty("kills", kills);
    EXPECT_GT(kills, 0) << "no moment killed the hook";
}

}  // namespace
}  // namespace gpubind::test
