// The simulated node, checked against independent truth: stat(2) and the
// node's own /proc/devices for device nodes, the system's ldconfig for the
// cache, the fake driver's own programs for what a process on the node sees,
// and always the node's manifest for what should be there. Needs root (mknod).
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/capability.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "files.hpp"
#include "gpubind/sim/sim.hpp"
#include "gpubind/util/error.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using gpubind::sim::Manifest;
using gpubind::sim::Spec;
using gpubind::test::lines_of;
using gpubind::test::TempDir;
using gpubind::util::Error;

namespace {

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string trim(const std::string& s) {
    auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

struct Ran {
    int status = -1;  // exit status, or -1 when it did not exit normally
    std::string out;  // stdout and stderr together
};

// Runs a program with exactly `env` as its environment.
Ran run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = 0;
    int err = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    Ran r;
    if (err != 0) {
        ::close(fds[0]);
        r.out = std::string("spawn failed: ") + std::strerror(err);
        return r;
    }
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        r.out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// Runs `body` in a forked child and returns what it returned; nothing
// (exceptions included) crosses the fork except that string.
template <typename F>
std::string in_child(F body) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
        ::close(fds[0]);
        std::string result;
        try {
            result = body();
        } catch (const std::exception& e) {
            result = std::string("child threw: ") + e.what();
        } catch (...) {
            result = "child threw";
        }
        for (std::size_t done = 0; done < result.size();) {
            ssize_t n = ::write(fds[1], result.data() + done, result.size() - done);
            if (n <= 0) break;
            done += static_cast<std::size_t>(n);
        }
        ::_exit(0);
    }
    ::close(fds[1]);
    const std::string out = gpubind::test::drain(fds[0]);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return out;
}

Spec small_spec(unsigned gpus) {
    Spec spec;
    spec.gpus = gpus;
    return spec;
}

std::string lib64(const fs::path& dir) {
    return (dir / "usr/lib/x86_64-linux-gnu").string();
}

// The fake nvidia-smi of the node, finding the node's NVML through LD_LIBRARY_PATH.
Ran nvidia_smi(const fs::path& dir, const std::string& arg = "-L") {
    return run({(dir / "usr/bin/nvidia-smi").string(), arg}, {"LD_LIBRARY_PATH=" + lib64(dir)});
}

// What `nvidia-smi -L` must print for these GPUs of the manifest (and their
// MIG devices), numbered in order as the real tool numbers visible GPUs.
std::vector<std::string> expected_gpu_lines(const Manifest& m,
                                            const std::set<unsigned>& hidden = {}) {
    std::vector<std::string> out;
    unsigned n = 0;
    for (const auto& gpu : m.gpus)
        if (!hidden.count(gpu.index))
            out.push_back("GPU " + std::to_string(n++) + ": " + gpu.model + " (UUID: " + gpu.uuid +
                          ")");
    return out;
}

// "Character devices" of a /proc/devices text: name -> major.
std::multimap<std::string, unsigned> char_majors(const std::string& text) {
    std::multimap<std::string, unsigned> out;
    bool chars = false;
    for (const auto& line : lines_of(text)) {
        if (line.empty()) continue;
        if (line.back() == ':') {
            chars = line == "Character devices:";
            continue;
        }
        if (!chars) continue;
        std::istringstream in(line);
        unsigned major = 0;
        std::string name;
        in >> major >> name;
        out.emplace(name, major);
    }
    return out;
}

// "Key: value" fields of a driver procfs file, the value trimmed of blanks.
std::map<std::string, std::string> fields(const std::string& text) {
    std::map<std::string, std::string> out;
    for (const auto& line : lines_of(text)) {
        auto colon = line.find(':');
        if (colon != std::string::npos) out[line.substr(0, colon)] = trim(line.substr(colon + 1));
    }
    return out;
}

}  // namespace

TEST(Sim, DeviceNodesMatchManifestAndProcDevices) {
    TempDir tmp;
    Spec spec = small_spec(4);
    spec.mig = {{1, 3, 0}, {1, 3, 2}};
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);

    auto majors = char_majors(slurp(tmp / "proc/devices"));
    ASSERT_EQ(majors.count("nvidia-frontend"), 1u);
    ASSERT_EQ(majors.count("nvidia-uvm"), 1u);
    ASSERT_EQ(majors.count("nvidia-caps"), 1u);
    EXPECT_EQ(majors.find("nvidia-frontend")->second, 195u);
    unsigned uvm = majors.find("nvidia-uvm")->second, caps = majors.find("nvidia-caps")->second;
    EXPECT_NE(uvm, caps);

    // No driver on this host holds the majors: opening the nodes finds nothing behind them.
    auto host = char_majors(slurp("/proc/devices"));
    for (const auto& [name, major] : host) {
        EXPECT_NE(major, uvm) << "host driver " << name;
        EXPECT_NE(major, caps) << "host driver " << name;
    }

    std::set<std::string> paths;
    for (const auto& n : m.nodes) {
        SCOPED_TRACE(n.path);
        paths.insert(n.path);
        struct stat st {};
        ASSERT_EQ(::lstat((tmp.path().string() + n.path).c_str(), &st), 0) << std::strerror(errno);
        EXPECT_TRUE(S_ISCHR(st.st_mode));
        EXPECT_EQ(major(st.st_rdev), n.major);
        EXPECT_EQ(minor(st.st_rdev), n.minor);
        if (n.path.rfind("/dev/nvidia-uvm", 0) == 0)
            EXPECT_EQ(n.major, uvm);
        else if (n.path.rfind("/dev/nvidia-caps/", 0) == 0)
            EXPECT_EQ(n.major, caps);
        else
            EXPECT_EQ(n.major, 195u);
        int fd = ::open((tmp.path().string() + n.path).c_str(), O_RDONLY | O_CLOEXEC);
        int err = errno;
        if (fd >= 0) ::close(fd);
        EXPECT_EQ(fd, -1);
        EXPECT_EQ(err, ENXIO) << std::strerror(err);
    }
    for (const char* name :
         {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl",
          "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
          "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"})
        EXPECT_TRUE(paths.count(name)) << name;
    for (const auto& mig : m.migs) {
        EXPECT_TRUE(paths.count("/dev/nvidia-caps/nvidia-cap" + std::to_string(mig.gi_cap_minor)));
        EXPECT_TRUE(paths.count("/dev/nvidia-caps/nvidia-cap" + std::to_string(mig.ci_cap_minor)));
    }
    // Nothing but the manifest's nodes under dev/.
    std::size_t on_disk = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp / "dev"))
        if (!e.is_directory()) ++on_disk;
    EXPECT_EQ(on_disk, m.nodes.size());
}

TEST(Sim, ImexChannelsMatchManifestAndProcDevices) {
    TempDir tmp;
    Spec spec = small_spec(2);
    spec.imex_channels = 3;
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    auto majors = char_majors(slurp(tmp / "proc/devices"));
    ASSERT_EQ(majors.count("nvidia-caps-imex-channels"), 1u);
    const unsigned imex = majors.find("nvidia-caps-imex-channels")->second;
    EXPECT_NE(imex, majors.find("nvidia-uvm")->second);
    for (const auto& [name, major] : char_majors(slurp("/proc/devices")))
        EXPECT_NE(major, imex) << "host driver " << name;

    std::set<unsigned> channels;
    for (const auto& n : m.nodes) {
        if (n.path.rfind("/dev/nvidia-caps-imex-channels/", 0) != 0) continue;
        SCOPED_TRACE(n.path);
        EXPECT_EQ(n.path, "/dev/nvidia-caps-imex-channels/channel" + std::to_string(n.minor));
        EXPECT_EQ(n.major, imex);
        channels.insert(n.minor);
        struct stat st {};
        ASSERT_EQ(::lstat((tmp.path().string() + n.path).c_str(), &st), 0) << std::strerror(errno);
        EXPECT_TRUE(S_ISCHR(st.st_mode));
        EXPECT_EQ(major(st.st_rdev), imex);
        EXPECT_EQ(minor(st.st_rdev), n.minor);
        EXPECT_EQ(st.st_mode & 07777, 0666u);
        int fd = ::open((tmp.path().string() + n.path).c_str(), O_RDONLY | O_CLOEXEC);
        int err = errno;
        if (fd >= 0) ::close(fd);
        EXPECT_EQ(fd, -1);
        EXPECT_EQ(err, ENXIO) << std::strerror(err);
    }
    EXPECT_EQ(channels, (std::set<unsigned>{0, 1, 2}));
    std::size_t on_disk = 0;
    for (const auto& e : fs::directory_iterator(tmp / "dev/nvidia-caps-imex-channels")) {
        (void)e;
        ++on_disk;
    }
    EXPECT_EQ(on_disk, 3u);
    EXPECT_EQ(nlohmann::json(m)["spec"]["imex_channels"], 3u);

    // Without channels: no major, no directory.
    TempDir none;
    gpubind::sim::simulate(none.path(), small_spec(1));
    EXPECT_EQ(char_majors(slurp(none / "proc/devices")).count("nvidia-caps-imex-channels"), 0u);
    EXPECT_FALSE(fs::exists(none / "dev/nvidia-caps-imex-channels"));
}

TEST(Sim, InformationFilesParseBackToManifest) {
    TempDir tmp;
    Spec spec = small_spec(10);
    spec.model = "NVIDIA A100-SXM4-40GB";
    spec.driver_version = "535.129.03";
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    ASSERT_EQ(m.gpus.size(), 10u);

    std::string version = slurp(tmp / "proc/driver/nvidia/version");
    EXPECT_EQ(version.rfind("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  ", 0), 0u)
        << version;
    auto params = fields(slurp(tmp / "proc/driver/nvidia/params"));
    EXPECT_EQ(params["ModifyDeviceFiles"], "1");
    EXPECT_EQ(params["DeviceFileMode"], "438");

    std::set<std::string> dirs;
    for (const auto& e : fs::directory_iterator(tmp / "proc/driver/nvidia/gpus"))
        dirs.insert(e.path().filename().string());
    EXPECT_EQ(dirs.size(), m.gpus.size());
    std::string previous;
    std::set<std::string> uuids;
    for (const auto& gpu : m.gpus) {
        SCOPED_TRACE(gpu.pci_bus_id);
        EXPECT_TRUE(dirs.count(gpu.pci_bus_id));
        EXPECT_TRUE(std::regex_match(gpu.pci_bus_id, std::regex("[0-9a-f]{4}:[0-9a-f]{2}:00\\.0")));
        EXPECT_LT(previous, gpu.pci_bus_id);  // bus ids ascend with the index
        previous = gpu.pci_bus_id;
        EXPECT_TRUE(std::regex_match(
            gpu.uuid,
            std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
        EXPECT_TRUE(uuids.insert(gpu.uuid).second);
        std::string text = slurp(tmp / "proc/driver/nvidia/gpus" / gpu.pci_bus_id / "information");
        auto f = fields(text);
        EXPECT_EQ(f["Model"], spec.model);
        EXPECT_EQ(f["GPU UUID"], gpu.uuid);
        EXPECT_EQ(f["Bus Location"], gpu.pci_bus_id);
        EXPECT_EQ(f["Device Minor"], std::to_string(gpu.minor));
        EXPECT_EQ(f["GPU Excluded"], "No");
        EXPECT_EQ(f["Bus Type"], "PCIe");
        // the driver's spacing: "Model: \t\t value"
        EXPECT_EQ(text.rfind("Model: \t\t " + spec.model + "\n", 0), 0u);
    }

    // Same spec, same node: UUIDs are a function of index and driver version.
    TempDir again;
    Manifest m2 = gpubind::sim::simulate(again.path(), spec);
    for (std::size_t i = 0; i < m.gpus.size(); ++i) EXPECT_EQ(m.gpus[i].uuid, m2.gpus[i].uuid);
    spec.driver_version = "550.54.15";
    TempDir other;
    Manifest m3 = gpubind::sim::simulate(other.path(), spec);
    EXPECT_NE(m.gpus[0].uuid, m3.gpus[0].uuid);
}

TEST(Sim, LdconfigListsEveryLibrary) {
    TempDir tmp;
    Manifest m = gpubind::sim::simulate(tmp.path(), small_spec(2));
    Ran r = run({"/sbin/ldconfig", "-p", "-C", (tmp / "etc/ld.so.cache").string()});
    ASSERT_EQ(r.status, 0) << r.out;

    // "\tname (flags) => path"
    std::regex entry("\\t(\\S+) \\(([^)]*)\\) => (\\S+)");
    std::set<std::tuple<std::string, std::string, std::string>> cache;
    for (const auto& line : lines_of(r.out)) {
        std::smatch match;
        if (std::regex_match(line, match, entry)) cache.insert({match[1], match[2], match[3]});
    }
    std::size_t libraries = 0, compat = 0;
    std::set<std::string> known_paths;
    for (const auto& f : m.files) {
        if (f.kind != "library") continue;
        SCOPED_TRACE(f.path);
        ++libraries;
        compat += f.compat32;
        std::string flags = f.compat32 ? "libc6" : "libc6,x86-64";
        EXPECT_TRUE(cache.count({f.name, flags, f.path}));
        EXPECT_EQ(fs::path(f.path).filename().string(), f.name);
        // the soname link ends at the versioned file
        EXPECT_EQ(fs::canonical(tmp.path().string() + f.path),
                  fs::canonical(tmp.path().string() + f.real_path));
        EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(tmp.path().string() + f.real_path)));
        known_paths.insert(f.path);
        known_paths.insert(f.path.substr(0, f.path.find(".so") + 3));  // its development link
    }
    EXPECT_GE(libraries, 20u);
    EXPECT_GE(compat, 5u);
    // Nothing in the cache that the manifest does not account for.
    for (const auto& [name, flags, path] : cache) EXPECT_TRUE(known_paths.count(path)) << path;

    // The two real fakes are what the cache points at, the rest ELF stubs.
    for (const auto& f : m.files) {
        if (f.kind == "library" && (f.name == "libcuda.so.1" || f.name == "libnvidia-ml.so.1") &&
            !f.compat32) {
            EXPECT_GT(fs::file_size(tmp.path().string() + f.real_path), 4096u) << f.name;
        }
    }
}

TEST(Sim, ComputeOnlyNodeWithoutExtras) {
    TempDir tmp;
    Spec spec = small_spec(1);
    spec.graphics = false;
    spec.compat32 = false;
    spec.ipcs = false;
    spec.firmware = false;
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    for (const auto& f : m.files) {
        SCOPED_TRACE(f.path);
        EXPECT_TRUE(f.kind == "library" || f.kind == "binary");
        EXPECT_TRUE(f.capability == "utility" || f.capability == "compute");
        EXPECT_FALSE(f.compat32);
    }
    EXPECT_FALSE(fs::exists(tmp / "run"));
    EXPECT_FALSE(fs::exists(tmp / "lib/firmware"));
    EXPECT_FALSE(fs::exists(tmp / "usr/lib/i386-linux-gnu"));
    Ran r = run({"/sbin/ldconfig", "-p", "-C", (tmp / "etc/ld.so.cache").string()});
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out.find("(libc6)"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("GLX"), std::string::npos) << r.out;
}

TEST(Sim, IpcsAndFirmwareAreWhereTheManifestSays) {
    TempDir tmp;
    Manifest m = gpubind::sim::simulate(tmp.path(), small_spec(1));
    std::size_t sockets = 0, dirs = 0, firmware = 0, binaries = 0;
    for (const auto& f : m.files) {
        SCOPED_TRACE(f.path);
        struct stat st {};
        if (f.kind == "library") continue;
        ASSERT_EQ(::lstat((tmp.path().string() + f.path).c_str(), &st), 0);
        if (f.kind == "ipc") {
            sockets += S_ISSOCK(st.st_mode);
            dirs += S_ISDIR(st.st_mode);
        } else if (f.kind == "firmware") {
            firmware += S_ISREG(st.st_mode);
            EXPECT_NE(f.path.find("/lib/firmware/nvidia/" + m.spec.driver_version + "/"),
                      std::string::npos);
        } else if (f.kind == "binary") {
            binaries += S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
        }
    }
    EXPECT_EQ(sockets, 2u);
    EXPECT_EQ(dirs, 1u);
    EXPECT_EQ(firmware, 2u);
    EXPECT_EQ(binaries, 3u);  // no MPS programs without spec.mps
    EXPECT_FALSE(fs::exists(tmp / "usr/bin/nvidia-cuda-mps-control"));
    // The stand-in utilities run and say who they are.
    Ran r = run({(tmp / "usr/bin/nvidia-debugdump").string()});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out.rfind("nvidia-debugdump", 0), 0u) << r.out;
}

// `gpubind simulate --mps`: nvidia-cuda-mps-control is a daemon on a socket
// in CUDA_MPS_PIPE_DIRECTORY that answers the commands gpubind sends it.
TEST(Sim, TheFakeMpsControlDaemonAnswersItsCommands) {
    TempDir tmp;
    Spec spec = small_spec(1);
    spec.mps = true;
    gpubind::sim::simulate(tmp.path(), spec);
    const std::string control = (tmp / "usr/bin/nvidia-cuda-mps-control").string();
    const std::string pipe = (tmp / "pipe").string();
    fs::create_directories(pipe);
    const std::vector<std::string> env = {"CUDA_MPS_PIPE_DIRECTORY=" + pipe};
    auto send = [&](const std::string& commands) {
        return run({"/bin/sh", "-c", "printf '" + commands + "' | " + control}, env);
    };
    Ran none = send("get_server_list\\n");
    EXPECT_NE(none.status, 0);
    EXPECT_THAT(none.out, ::testing::HasSubstr("Cannot find MPS control daemon process"));
    ASSERT_EQ(run({control, "-d"}, env).status, 0);
    EXPECT_TRUE(fs::exists(pipe + "/nvidia-cuda-mps-control.pid"));
    struct stat st {};
    ASSERT_EQ(::lstat((pipe + "/control").c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0777u);  // any uid's client connects
    Ran r = send(
        "get_default_device_pinned_mem_limit 0\\nset_default_device_pinned_mem_limit 0 "
        "10G\\nget_default_device_pinned_mem_limit 0\\nset_default_active_thread_percentage "
        "25\\nget_default_active_thread_percentage\\nfrobnicate\\n");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "none\n10G\n25.0\nUnknown command\n");
    EXPECT_EQ(send("quit\\n").status, 0);
    for (int i = 0; i < 100 && fs::exists(pipe + "/control"); ++i) ::usleep(10000);
    EXPECT_FALSE(fs::exists(pipe + "/control"));
    EXPECT_FALSE(fs::exists(pipe + "/nvidia-cuda-mps-control.pid"));
}

TEST(Sim, NvidiaSmiListsTheManifestGpus) {
    TempDir tmp;
    Manifest m = gpubind::sim::simulate(tmp.path(), small_spec(3));
    Ran r = nvidia_smi(tmp.path());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(lines_of(r.out), expected_gpu_lines(m));

    Ran summary = nvidia_smi(tmp.path(), "-q");
    EXPECT_EQ(summary.status, 2);  // the fake knows -L only, and says so
    summary =
        run({(tmp / "usr/bin/nvidia-smi").string()}, {"LD_LIBRARY_PATH=" + lib64(tmp.path())});
    ASSERT_EQ(summary.status, 0) << summary.out;
    EXPECT_NE(summary.out.find("Driver Version: " + m.spec.driver_version), std::string::npos);
    EXPECT_NE(summary.out.find("CUDA Version: " + m.cuda_version), std::string::npos);

    // Without the node's NVML on the loader's path it cannot start.
    Ran lost = run({(tmp / "usr/bin/nvidia-smi").string(), "-L"});
    EXPECT_NE(lost.status, 0);
}

TEST(Sim, HiddenProcEntryOrNodeHidesTheGpu) {
    TempDir tmp;
    Manifest m = gpubind::sim::simulate(tmp.path(), small_spec(4));
    fs::path gpus = tmp / "proc/driver/nvidia/gpus";
    fs::rename(gpus / m.gpus[1].pci_bus_id, tmp / "hidden-proc-entry");
    Ran r = nvidia_smi(tmp.path());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(lines_of(r.out), expected_gpu_lines(m, {1}));

    fs::rename(tmp / "dev/nvidia3", tmp / "hidden-node");
    r = nvidia_smi(tmp.path());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(lines_of(r.out), expected_gpu_lines(m, {1, 3}));

    fs::rename(gpus / m.gpus[0].pci_bus_id, tmp / "hidden-0");
    fs::rename(gpus / m.gpus[2].pci_bus_id, tmp / "hidden-2");
    r = nvidia_smi(tmp.path());
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(r.out, "No devices were found\n");

    fs::rename(tmp / "dev/nvidiactl", tmp / "hidden-ctl");
    r = nvidia_smi(tmp.path());
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("Driver Not Loaded"), std::string::npos) << r.out;
}

TEST(Sim, MigDevicesAppearInNvidiaSmi) {
    TempDir tmp;
    Spec spec = small_spec(2);
    spec.mig = {{1, 5, 0}, {1, 2, 1}, {1, 2, 0}};
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    ASSERT_EQ(m.migs.size(), 3u);

    Ran r = nvidia_smi(tmp.path());
    ASSERT_EQ(r.status, 0) << r.out;
    auto lines = lines_of(r.out);
    auto gpu_lines = expected_gpu_lines(m);
    ASSERT_EQ(lines.size(), 5u) << r.out;
    EXPECT_EQ(lines[0], gpu_lines[0]);
    EXPECT_EQ(lines[1], gpu_lines[1]);
    std::regex mig_line("  MIG (\\S+) +Device +(\\d+): \\(UUID: (MIG-[0-9a-f-]{36})\\)");
    std::vector<std::string> listed;
    for (std::size_t i = 2; i < lines.size(); ++i) {
        std::smatch match;
        ASSERT_TRUE(std::regex_match(lines[i], match, mig_line)) << lines[i];
        EXPECT_EQ(match[1], "1g.10gb");
        EXPECT_EQ(match[2], std::to_string(i - 2));
        listed.push_back(match[3]);
    }
    std::vector<std::string> manifest_uuids;
    for (const auto& mig : m.migs) {
        EXPECT_EQ(mig.gpu, 1u);
        manifest_uuids.push_back(mig.uuid);
    }
    EXPECT_EQ(listed, manifest_uuids);

    // The driver's capability files name the manifest's minors.
    std::map<std::string, unsigned> minors;
    for (const auto& line : lines_of(slurp(tmp / "proc/driver/nvidia-caps/mig-minors"))) {
        std::istringstream in(line);
        std::string name;
        unsigned minor = 0;
        in >> name >> minor;
        minors[name] = minor;
    }
    EXPECT_EQ(minors["config"], 1u);
    EXPECT_EQ(minors["monitor"], 2u);
    // The driver's table: minors in sequence from 3 over GPUs 0-31, their GPU
    // instances 0-14, each instance's access followed by its compute instances 0-7.
    {
        unsigned next = 3;
        std::size_t checked = 0;
        for (unsigned g = 0; g < 32; ++g)
            for (unsigned gi = 0; gi < 15; ++gi) {
                std::string base = "gpu" + std::to_string(g) + "/gi" + std::to_string(gi);
                checked += minors.count(base + "/access") && minors[base + "/access"] == next++;
                for (unsigned ci = 0; ci < 8; ++ci) {
                    std::string name = base + "/ci" + std::to_string(ci) + "/access";
                    checked += minors.count(name) && minors[name] == next++;
                }
            }
        EXPECT_EQ(checked, 32u * 15u * 9u);
        EXPECT_EQ(minors.size(), checked + 2);
    }
    fs::path caps = tmp / "proc/driver/nvidia/capabilities";
    for (const auto& mig : m.migs) {
        unsigned gpu_minor = m.gpus.at(mig.gpu).minor;
        std::string gi = "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(mig.gi);
        std::string ci = gi + "/ci" + std::to_string(mig.ci);
        EXPECT_EQ(minors[gi + "/access"], mig.gi_cap_minor);
        EXPECT_EQ(minors[ci + "/access"], mig.ci_cap_minor);
        auto gi_file = fields(slurp(caps / ("gpu" + std::to_string(gpu_minor)) / "mig" /
                                    ("gi" + std::to_string(mig.gi)) / "access"));
        EXPECT_EQ(gi_file["DeviceFileMinor"], std::to_string(mig.gi_cap_minor));
        EXPECT_EQ(gi_file["DeviceFileModify"], "1");
        auto ci_file = fields(slurp(caps / ("gpu" + std::to_string(gpu_minor)) / "mig" /
                                    ("gi" + std::to_string(mig.gi)) /
                                    ("ci" + std::to_string(mig.ci)) / "access"));
        EXPECT_EQ(ci_file["DeviceFileMinor"], std::to_string(mig.ci_cap_minor));
    }
    auto config = fields(slurp(caps / "mig/config"));
    EXPECT_EQ(config["DeviceFileMinor"], "1");
    EXPECT_EQ(config["DeviceFileMode"], std::to_string(0400));

    // A MIG device whose capability node is gone is not usable, hence not listed.
    fs::rename(tmp.path().string() + "/dev/nvidia-caps/nvidia-cap" +
                   std::to_string(m.migs[2].ci_cap_minor),
               tmp / "hidden-cap");
    r = nvidia_smi(tmp.path());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out.find(m.migs[2].uuid), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(m.migs[0].uuid), std::string::npos) << r.out;
}

TEST(Sim, FakeNvmlAndCudaAnswerFromTheNode) {
    TempDir tmp;
    Spec spec = small_spec(3);
    spec.model = "NVIDIA L4";
    spec.driver_version = "570.86.15";
    spec.mig = {{2, 1, 0}};
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    EXPECT_EQ(m.cuda_version, "12.8");
    EXPECT_EQ(m.gpus[0].compute_capability, "8.9");

    std::string report = in_child([&]() -> std::string {
        std::string path = lib64(tmp.path()) + "/libnvidia-ml.so.1";
        void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib) return std::string("dlopen: ") + ::dlerror();
        using Dev = void*;
        auto sym = [&](const char* name) { return ::dlsym(lib, name); };
        auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
        auto count = reinterpret_cast<int (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
        auto by_index =
            reinterpret_cast<int (*)(unsigned, Dev*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
        auto uuid = reinterpret_cast<int (*)(Dev, char*, unsigned)>(sym("nvmlDeviceGetUUID"));
        auto get_minor = reinterpret_cast<int (*)(Dev, unsigned*)>(sym("nvmlDeviceGetMinorNumber"));
        struct Pci {
            char legacy[16];
            unsigned domain, bus, device, device_id, subsystem_id;
            char bus_id[32];
        };
        auto pci = reinterpret_cast<int (*)(Dev, Pci*)>(sym("nvmlDeviceGetPciInfo_v3"));
        auto by_bus =
            reinterpret_cast<int (*)(const char*, Dev*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
        auto by_uuid =
            reinterpret_cast<int (*)(const char*, Dev*)>(sym("nvmlDeviceGetHandleByUUID"));
        auto cuda = reinterpret_cast<int (*)(int*)>(sym("nvmlSystemGetCudaDriverVersion_v2"));
        auto driver = reinterpret_cast<int (*)(char*, unsigned)>(sym("nvmlSystemGetDriverVersion"));
        auto cc =
            reinterpret_cast<int (*)(Dev, int*, int*)>(sym("nvmlDeviceGetCudaComputeCapability"));
        auto mig_by_index = reinterpret_cast<int (*)(Dev, unsigned, Dev*)>(
            sym("nvmlDeviceGetMigDeviceHandleByIndex"));
        auto gi_id = reinterpret_cast<int (*)(Dev, unsigned*)>(sym("nvmlDeviceGetGpuInstanceId"));
        auto parent = reinterpret_cast<int (*)(Dev, Dev*)>(
            sym("nvmlDeviceGetDeviceHandleFromMigDeviceHandle"));
        if (!init || !count || !by_index || !uuid || !get_minor || !pci || !by_bus || !by_uuid ||
            !cuda || !driver || !cc || !mig_by_index || !gi_id || !parent)
            return "missing symbol";
        std::ostringstream out;
        if (int rc = init(); rc != 0) return "init " + std::to_string(rc);
        char text[96];
        int version = 0;
        driver(text, sizeof text);
        cuda(&version);
        out << "driver " << text << " cuda " << version << "\n";
        unsigned n = 0;
        count(&n);
        for (unsigned i = 0; i < n; ++i) {
            Dev d = nullptr, again = nullptr, same = nullptr;
            Pci p{};
            unsigned mn = 0;
            int major = 0, minor_cc = 0;
            by_index(i, &d);
            uuid(d, text, sizeof text);
            get_minor(d, &mn);
            pci(d, &p);
            cc(d, &major, &minor_cc);
            by_bus(p.bus_id, &again);
            by_uuid(text, &same);
            out << "gpu " << text << " " << mn << " " << p.bus_id << " " << major << "." << minor_cc
                << " " << (again == d) << (same == d) << "\n";
            Dev mig = nullptr, back = nullptr;
            if (mig_by_index(d, 0, &mig) == 0) {
                unsigned gi = 0;
                gi_id(mig, &gi);
                uuid(mig, text, sizeof text);
                parent(mig, &back);
                out << "mig " << text << " " << gi << " " << (back == d) << "\n";
            }
        }
        void* cudalib =
            ::dlopen((lib64(tmp.path()) + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!cudalib) return std::string("dlopen: ") + ::dlerror();
        auto cu_init = reinterpret_cast<int (*)(unsigned)>(::dlsym(cudalib, "cuInit"));
        auto cu_count = reinterpret_cast<int (*)(int*)>(::dlsym(cudalib, "cuDeviceGetCount"));
        auto cu_version = reinterpret_cast<int (*)(int*)>(::dlsym(cudalib, "cuDriverGetVersion"));
        int cu_n = -1, cu_v = -1;
        int rc = cu_init(0);
        cu_count(&cu_n);
        cu_version(&cu_v);
        out << "cuda " << rc << " " << cu_n << " " << cu_v << "\n";
        return out.str();
    });

    std::ostringstream want;
    want << "driver 570.86.15 cuda 12080\n";
    for (const auto& g : m.gpus) {
        // NVML's bus id: 8-digit domain, upper-case hex
        std::string bus = g.pci_bus_id;
        for (auto& c : bus) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        want << "gpu " << g.uuid << " " << g.minor << " 0000" << bus << " " << g.compute_capability
             << " 11\n";
        for (const auto& mig : m.migs)
            if (mig.gpu == g.index) want << "mig " << mig.uuid << " " << mig.gi << " 1\n";
    }
    want << "cuda 0 3 12080\n";
    EXPECT_EQ(report, want.str());
}

TEST(Sim, RefusesANonEmptyForeignDirectory) {
    TempDir tmp;
    { std::ofstream(tmp / "precious") << "keep me\n"; }
    try {
        gpubind::sim::simulate(tmp.path(), small_spec(1));
        FAIL() << "wrote into a foreign directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.code().value(), ENOTEMPTY);
        EXPECT_NE(std::string(e.what()).find("not a simulated node"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(slurp(tmp / "precious"), "keep me\n");
    EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
}

TEST(Sim, ReplacesAPreviousSimulatedNode) {
    TempDir tmp;
    fs::path dir = tmp / "node";  // missing: created
    gpubind::sim::simulate(dir, small_spec(3));
    ASSERT_TRUE(fs::exists(dir / "dev/nvidia2"));
    Manifest m = gpubind::sim::simulate(dir, small_spec(1));
    EXPECT_EQ(m.gpus.size(), 1u);
    EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "dev/nvidia2")));
    auto j = nlohmann::json::parse(slurp(dir / gpubind::sim::kManifestName));
    EXPECT_EQ(j, nlohmann::json(m));
    EXPECT_EQ(j["gpus"].size(), 1u);
}

TEST(Sim, RejectsABadSpec) {
    TempDir tmp;
    auto bad = [&](Spec spec, const std::string& says) {
        try {
            gpubind::sim::simulate(tmp.path(), spec);
            ADD_FAILURE() << "accepted a spec that " << says;
        } catch (const Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
            if (says.rfind("hcas", 0) == 0 || says.rfind("nvmes", 0) == 0) {  // one line
                EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
            }
        }
    };
    Spec s = small_spec(0);
    bad(s, "gpus must be 1 to 64");
    s = small_spec(65);
    bad(s, "gpus must be 1 to 64");
    s = small_spec(1);
    s.driver_version = "550.54.15; rm";
    bad(s, "driver version");
    s = small_spec(1);
    s.mig = {{1, 0, 0}};
    bad(s, "GPU 1 does not exist");
    s.mig = {{0, 15, 0}};
    bad(s, "GPU instance must be 0 to 14");
    s.mig = {{0, 1, 0}, {0, 1, 0}};
    bad(s, "listed twice");
    s.mig = {};
    s.model = "two\nlines";
    bad(s, "model");
    s = small_spec(1);
    s.imex_channels = gpubind::sim::kMaxImexChannels + 1;
    bad(s, "imex channels must be 0 to 2048");
    s = small_spec(1);
    s.hcas = 17;
    bad(s, "hcas must be 0 to 16, not 17");
    s = small_spec(1);
    s.nvmes = 9;
    bad(s, "nvmes must be 0 to 8, not 9");
    EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(Sim, WithoutCapMknodItSaysItNeedsRoot) {
    TempDir tmp;
    std::string report = in_child([&]() -> std::string {
        cap_t caps = ::cap_get_proc();
        cap_value_t mknod_cap = CAP_MKNOD;
        if (!caps || ::cap_set_flag(caps, CAP_EFFECTIVE, 1, &mknod_cap, CAP_CLEAR) != 0 ||
            ::cap_set_proc(caps) != 0)
            return "cannot drop CAP_MKNOD";
        ::cap_free(caps);
        try {
            gpubind::sim::simulate(tmp.path(), small_spec(2));
            return "no error";
        } catch (const Error& e) {
            return std::to_string(e.code().value()) + " " + e.what();
        }
    });
    EXPECT_EQ(report, std::to_string(EPERM) + " simulate " + (tmp / "dev/nvidia0").string() +
                          ": making device nodes needs root (CAP_MKNOD)");
    // and it left nothing behind
    EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(Sim, CommandLine) {
    const char* cli = std::getenv("GPUBIND_CLI");
    ASSERT_NE(cli, nullptr) << "GPUBIND_CLI names the gpubind executable";
    TempDir tmp;
    fs::path dir = tmp / "node";
    Ran r = run({cli,
                 "simulate",
                 dir.string(),
                 "--gpus",
                 "2",
                 "--driver-version",
                 "560.35.03",
                 "--model",
                 "NVIDIA H200",
                 "--mig",
                 "1:1:0",
                 "--no-compat32",
                 "--imex-channels",
                 "2",
                 "--hcas",
                 "2",
                 "--nvmes",
                 "1",
                 "--nvswitch",
                 "--gds",
                 "--gdrcopy",
                 "--drm",
                 "--json"});
    ASSERT_EQ(r.status, 0) << r.out;
    auto printed = nlohmann::json::parse(r.out);
    auto written = nlohmann::json::parse(slurp(dir / gpubind::sim::kManifestName));
    EXPECT_EQ(printed, written);
    EXPECT_EQ(written["gpus"].size(), 2u);
    EXPECT_EQ(written["migs"].size(), 1u);
    EXPECT_EQ(written["spec"]["model"], "NVIDIA H200");
    EXPECT_EQ(written["spec"]["compat32"], false);
    EXPECT_TRUE(fs::exists(dir / "dev/nvidia1"));
    EXPECT_EQ(written["spec"]["imex_channels"], 2u);
    EXPECT_TRUE(fs::exists(dir / "dev/nvidia-caps-imex-channels/channel1"));
    EXPECT_FALSE(fs::exists(dir / "dev/nvidia-caps-imex-channels/channel2"));
    EXPECT_EQ(written["spec"]["hcas"], 2u);
    EXPECT_EQ(written["spec"]["nvmes"], 1u);
    for (const char* key : {"nvswitch", "gds", "gdrcopy", "drm"})
        EXPECT_EQ(written["spec"][key], true) << key;
    EXPECT_EQ(written["hcas"].size(), 2u);
    EXPECT_EQ(written["nvmes"].size(), 1u);
    EXPECT_EQ(written["sys_root"], (dir / "sys").string());
    EXPECT_EQ(written["cufile"], "/etc/cufile.json");
    for (const char* node : {"dev/infiniband/uverbs1", "dev/infiniband/rdma_cm", "dev/gdrdrv",
                             "dev/nvidia-fs15", "dev/nvidia-nvswitch3", "dev/dri/renderD129",
                             "sys/class/infiniband/mlx5_1", "sys/class/nvme/nvme0"})
        EXPECT_TRUE(fs::exists(dir / node)) << node;

    // The summary names the roots, sys included.
    Ran summary = run({cli, "simulate", dir.string(), "--gpus", "1", "--hcas", "1"});
    ASSERT_EQ(summary.status, 0) << summary.out;
    EXPECT_NE(summary.out.find("sys " + (dir / "sys").string()), std::string::npos) << summary.out;
    EXPECT_NE(summary.out.find("HCA mlx5_0"), std::string::npos) << summary.out;

    for (std::vector<std::string> args : {std::vector<std::string>{"--gpus", "2", "--mig", "2:0:0"},
                                          {"--mig", "0:x:0"},
                                          {"--gpus", "65"},
                                          {"--driver-version", "abc"},
                                          {"--imex-channels", "2049"},
                                          {"--imex-channels", "-1"},
                                          {"--hcas", "17"},
                                          {"--hcas", "-1"},
                                          {"--nvmes", "9"}}) {
        std::vector<std::string> argv = {cli, "simulate", (tmp / "other").string()};
        argv.insert(argv.end(), args.begin(), args.end());
        Ran bad = run(argv);
        EXPECT_EQ(bad.status, 2) << args.back() << ": " << bad.out;
        if (args.front() == "--hcas" || args.front() == "--nvmes") {
            // one line saying what is wrong (CLI11 may add its "Run with --help" hint)
            auto lines = lines_of(bad.out);
            ASSERT_FALSE(lines.empty());
            EXPECT_NE(lines[0].find(args.front()), std::string::npos) << bad.out;
            EXPECT_LE(lines.size(), 2u) << bad.out;
        }
    }
    EXPECT_FALSE(fs::exists(tmp / "other"));
}

// ---------------------------------------------------------------------------
// The sysfs tree and the device families' nodes

namespace {

// "%3i %s" lines of a /proc/misc text: name -> minor.
std::map<std::string, unsigned> misc_minors(const std::string& text) {
    std::map<std::string, unsigned> out;
    for (const auto& line : lines_of(text)) {
        std::istringstream in(line);
        unsigned minor = 0;
        std::string name;
        if (in >> minor >> name) out[name] = minor;
    }
    return out;
}

std::string first_line(const fs::path& path) {
    std::string text = slurp(path);
    return text.substr(0, text.find('\n'));
}

struct Placed {
    std::string name;  // "GPU 0", "mlx5_1"
    std::string bus_id;
    int numa_node = -1;
    std::string cpulist;
    std::vector<std::string> bridges;
    std::string switch_port;
};

std::vector<Placed> placed_devices(const Manifest& m) {
    std::vector<Placed> out;
    for (const auto& g : m.gpus)
        out.push_back({"GPU " + std::to_string(g.index), g.pci_bus_id, g.numa_node, g.cpulist,
                       g.bridges, g.switch_port});
    for (const auto& h : m.hcas)
        out.push_back({h.name, h.pci_bus_id, h.numa_node, h.cpulist, h.bridges, h.switch_port});
    for (const auto& n : m.nvmes)
        out.push_back({n.name, n.pci_bus_id, n.numa_node, n.cpulist, n.bridges, n.switch_port});
    return out;
}

unsigned hex(const std::string& s) {
    return static_cast<unsigned>(std::stoul(s, nullptr, 16));
}

// What a reader of the node's sysfs sees of every device the manifest places,
// against the manifest and the layout rules (sim.hpp); "" when all holds.
std::string check_pci_tree(const fs::path& dir, const Manifest& m) {
    std::ostringstream bad;
    const fs::path sys = fs::canonical(dir / "sys");
    const std::regex bus_id_re("([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\\.([0-7])");
    std::set<std::string> endpoints;
    // per domain: bus -> what uses it ("endpoint <id>" or "switch <upstream>")
    std::map<std::string, std::map<unsigned, std::string>> buses;
    auto use_bus = [&](const std::string& id, const std::string& user) {
        std::smatch match;
        if (!std::regex_match(id, match, bus_id_re)) {
            bad << id << " is not a bus id\n";
            return;
        }
        auto [it, fresh] = buses[match[1]].emplace(hex(match[2]), user);
        if (!fresh && it->second != user)
            bad << "bus " << match[1] << ":" << match[2] << " used by " << it->second << " and "
                << user << "\n";
    };
    for (const auto& d : placed_devices(m)) {
        const std::string domain = d.bus_id.substr(0, 4);
        if (!endpoints.insert(d.bus_id).second) bad << d.name << ": bus id taken twice\n";
        use_bus(d.bus_id, "endpoint " + d.bus_id);
        if (d.bridges.size() != 3) {
            bad << d.name << ": " << d.bridges.size() << " bridges\n";
            continue;
        }
        if (d.switch_port != d.bridges[1]) bad << d.name << ": switch is not bridges[1]\n";
        for (std::size_t i = 0; i < 3; ++i) {
            use_bus(d.bridges[i], "switch " + d.switch_port);
            if (d.bridges[i].substr(0, 4) != domain)
                bad << d.name << ": bridge in another domain\n";
        }
        // bus/pci/devices/<id>: a relative link to
        // sys/devices/pci<domain>:<root bus>/<root port>/<upstream>/<downstream>/<id>
        fs::path link = dir / "sys/bus/pci/devices" / d.bus_id;
        std::error_code ec;
        fs::path target = fs::read_symlink(link, ec);
        if (ec || target.is_absolute()) {
            bad << d.name << ": " << link << " is not a relative link\n";
            continue;
        }
        fs::path real = fs::canonical(link, ec);
        fs::path want = sys / "devices" / ("pci" + domain + ":" + d.bridges[0].substr(5, 2));
        for (const auto& b : d.bridges) want /= b;
        want /= d.bus_id;
        if (ec || real != want) bad << d.name << ": " << real << " is not " << want << "\n";
        if (d.bridges[0].substr(8) != "01.0")
            bad << d.name << ": root port " << d.bridges[0] << "\n";
        // the bridges' own entries
        fs::path at = want.parent_path();
        for (int i = 2; i >= 0; --i, at = at.parent_path()) {
            fs::path bridge_link = dir / "sys/bus/pci/devices" / d.bridges[i];
            if (fs::canonical(bridge_link, ec) != at || ec)
                bad << d.name << ": " << bridge_link << " does not lead to " << at << "\n";
            if (slurp(at / "class") != "0x060400\n") bad << at << ": class\n";
            if (slurp(at / "vendor") != "0x8086\n") bad << at << ": vendor\n";
            if (slurp(at / "numa_node") != std::to_string(d.numa_node) + "\n")
                bad << at << ": numa_node\n";
        }
        if (slurp(want / "numa_node") != std::to_string(d.numa_node) + "\n")
            bad << d.name << ": numa_node file says " << slurp(want / "numa_node");
        if (slurp(want / "local_cpulist") != d.cpulist + "\n")
            bad << d.name << ": local_cpulist " << slurp(want / "local_cpulist");
        if (d.numa_node != 0 && d.numa_node != 1) {
            bad << d.name << ": NUMA node " << d.numa_node << "\n";
            continue;
        }
        std::string node_cpus = slurp(dir / "sys/devices/system/node" /
                                      ("node" + std::to_string(d.numa_node)) / "cpulist");
        if (node_cpus != d.cpulist + "\n" || d.cpulist.empty())
            bad << d.name << ": cpulist " << d.cpulist << ", its node's " << node_cpus;
        std::string want_class = d.name.rfind("GPU", 0) == 0    ? "0x030200\n"
                                 : d.name.rfind("mlx5", 0) == 0 ? "0x020700\n"
                                                                : "0x010802\n";
        std::string want_vendor = d.name.rfind("GPU", 0) == 0    ? "0x10de\n"
                                  : d.name.rfind("mlx5", 0) == 0 ? "0x15b3\n"
                                                                 : "0x144d\n";
        if (slurp(want / "class") != want_class) bad << d.name << ": class\n";
        if (slurp(want / "vendor") != want_vendor) bad << d.name << ": vendor\n";
    }
    // Downstream ports: one an endpoint.
    std::map<std::string, int> downstream;
    for (const auto& d : placed_devices(m))
        if (d.bridges.size() == 3 && ++downstream[d.bridges[2]] > 1)
            bad << d.bridges[2] << " has two endpoints\n";
    // The NUMA rule: a switch sits on one node; the two switches of a domain on two.
    std::map<std::string, std::set<int>> numa_of_switch;
    for (const auto& d : placed_devices(m)) numa_of_switch[d.switch_port].insert(d.numa_node);
    for (const auto& [sw, nodes] : numa_of_switch)
        if (nodes.size() != 1) bad << "switch " << sw << " on " << nodes.size() << " nodes\n";
    // The split: per domain, the first half (rounded up) of the GPUs under a
    // switch on node 0, the rest under one on node 1; HCAs and NVMe likewise
    // in domain 0, with the GPUs of their node.
    auto check_split = [&](const std::vector<const Placed*>& list, const std::string& what) {
        std::size_t half = (list.size() + 1) / 2;
        for (std::size_t i = 0; i < list.size(); ++i)
            if (list[i]->numa_node != (i < half ? 0 : 1))
                bad << what << ": " << list[i]->name << " on node " << list[i]->numa_node << "\n";
    };
    auto all = placed_devices(m);
    std::map<std::string, std::vector<const Placed*>> gpus_by_domain;
    std::map<std::pair<std::string, int>, std::string> switch_of;  // (domain, node) -> switch
    std::vector<const Placed*> hcas, nvmes;
    for (const auto& d : all) {
        if (d.name.rfind("GPU", 0) == 0)
            gpus_by_domain[d.bus_id.substr(0, 4)].push_back(&d);
        else if (d.name.rfind("mlx5", 0) == 0)
            hcas.push_back(&d);
        else
            nvmes.push_back(&d);
        if (d.name.rfind("GPU", 0) != 0 && d.bus_id.substr(0, 4) != "0000")
            bad << d.name << " not in domain 0000\n";
        auto [it, fresh] =
            switch_of.emplace(std::pair{d.bus_id.substr(0, 4), d.numa_node}, d.switch_port);
        if (!fresh && it->second != d.switch_port)
            bad << d.name << ": not under its node's switch " << it->second << "\n";
    }
    for (const auto& [domain, list] : gpus_by_domain) check_split(list, "GPUs of " + domain);
    check_split(hcas, "HCAs");
    check_split(nvmes, "NVMe");
    // Every GPU of the manifest, and nothing else, is a 3D controller in sysfs.
    std::set<std::string> controllers;
    for (const auto& e : fs::directory_iterator(dir / "sys/bus/pci/devices"))
        if (slurp(e.path() / "class") == "0x030200\n")
            controllers.insert(e.path().filename().string());
    std::set<std::string> gpus;
    for (const auto& g : m.gpus) gpus.insert(g.pci_bus_id);
    if (controllers != gpus) bad << "sysfs has " << controllers.size() << " GPUs\n";
    return bad.str();
}

}  // namespace

TEST(Sim, FamiliesAndSysfsMatchManifest) {
    TempDir tmp;
    Spec spec = small_spec(8);
    spec.hcas = 4;
    spec.nvmes = 2;
    spec.nvswitch = spec.gds = spec.gdrcopy = spec.drm = true;
    Manifest m = gpubind::sim::simulate(tmp.path(), spec);
    ASSERT_EQ(m.hcas.size(), 4u);
    ASSERT_EQ(m.nvmes.size(), 2u);
    EXPECT_EQ(m.sys_root, (tmp / "sys").string());
    EXPECT_EQ(nlohmann::json::parse(slurp(tmp / gpubind::sim::kManifestName)), nlohmann::json(m));

    // proc/devices names each major, sorted by major as the kernel prints them.
    const std::string devices = slurp(tmp / "proc/devices");
    auto majors = char_majors(devices);
    for (const char* name : {"drm", "infiniband_verbs", "infiniband_mad", "misc", "gdrdrv",
                             "nvidia-fs", "nvidia-nvswitch"})
        ASSERT_EQ(majors.count(name), 1u) << name << " in\n" << devices;
    EXPECT_EQ(majors.find("drm")->second, 226u);
    EXPECT_EQ(majors.find("infiniband_verbs")->second, 231u);
    EXPECT_EQ(majors.find("infiniband_mad")->second, 231u);
    EXPECT_EQ(majors.find("misc")->second, 10u);
    const unsigned gdr = majors.find("gdrdrv")->second, nvfs = majors.find("nvidia-fs")->second,
                   nvsw = majors.find("nvidia-nvswitch")->second;
    std::set<unsigned> dynamic = {gdr, nvfs, nvsw, majors.find("nvidia-uvm")->second};
    EXPECT_EQ(dynamic.size(), 4u);
    for (const auto& [name, major] : char_majors(slurp("/proc/devices")))
        EXPECT_FALSE(dynamic.count(major)) << "host driver " << name << " holds " << major;
    {
        unsigned previous = 0;
        for (const auto& line : lines_of(devices)) {
            if (line.empty()) continue;
            if (line == "Block devices:") break;
            if (line.back() == ':') continue;
            unsigned major = static_cast<unsigned>(std::stoul(line));
            EXPECT_LE(previous, major) << line;
            previous = major;
        }
    }
    // proc/misc names rdma_cm's minor, which this host's does not list.
    auto misc = misc_minors(slurp(tmp / "proc/misc"));
    ASSERT_EQ(misc.count("rdma_cm"), 1u);
    const unsigned rdma_cm = misc["rdma_cm"];
    EXPECT_GE(rdma_cm, 1u);
    EXPECT_LE(rdma_cm, 255u);
    for (const auto& [name, minor] : misc_minors(slurp("/proc/misc")))
        EXPECT_NE(minor, rdma_cm) << "host misc device " << name;
    for (const auto& [name, minor] : misc) {
        if (name != "rdma_cm") {
            EXPECT_NE(minor, rdma_cm) << name;
        }
    }

    // Every family node, by the rules, and nothing else.
    struct Want {
        std::string family, device;
        unsigned major, minor;
        mode_t mode;
    };
    std::map<std::string, Want> want;
    for (unsigned n = 0; n < 4; ++n) {
        std::string hca = "mlx5_" + std::to_string(n), num = std::to_string(n);
        want["/dev/infiniband/uverbs" + num] = {"rdma", hca, 231, 192 + n, 0666};
        want["/dev/infiniband/umad" + num] = {"rdma", hca, 231, n, 0600};
        want["/dev/infiniband/issm" + num] = {"rdma", hca, 231, 64 + n, 0600};
    }
    want["/dev/infiniband/rdma_cm"] = {"rdma", "", 10, rdma_cm, 0666};
    want["/dev/gdrdrv"] = {"gdrcopy", "gdrdrv", gdr, 0, 0666};
    for (unsigned n = 0; n < 16; ++n)
        want["/dev/nvidia-fs" + std::to_string(n)] = {"gds", "nvidia-fs" + std::to_string(n), nvfs,
                                                      n, 0666};
    want["/dev/nvidia-nvswitchctl"] = {"nvswitch", "", nvsw, 255, 0666};
    for (unsigned n = 0; n < 4; ++n)
        want["/dev/nvidia-nvswitch" + std::to_string(n)] = {
            "nvswitch", "nvidia-nvswitch" + std::to_string(n), nvsw, n, 0666};
    for (unsigned i = 0; i < 8; ++i) {
        std::string card = "card" + std::to_string(i);
        want["/dev/dri/" + card] = {"drm", card, 226, i, 0660};
        want["/dev/dri/renderD" + std::to_string(128 + i)] = {"drm", card, 226, 128 + i, 0666};
    }
    std::set<std::string> listed;
    for (const auto& n : m.family_nodes) {
        SCOPED_TRACE(n.path);
        listed.insert(n.path);
        ASSERT_TRUE(want.count(n.path));
        const Want& w = want[n.path];
        EXPECT_EQ(n.family, w.family);
        EXPECT_EQ(n.device, w.device);
        EXPECT_EQ(n.major, w.major);
        EXPECT_EQ(n.minor, w.minor);
        EXPECT_EQ(n.mode, w.mode);
        struct stat st {};
        ASSERT_EQ(::lstat((tmp.path().string() + n.path).c_str(), &st), 0) << std::strerror(errno);
        EXPECT_TRUE(S_ISCHR(st.st_mode));
        EXPECT_EQ(major(st.st_rdev), w.major);
        EXPECT_EQ(minor(st.st_rdev), w.minor);
        EXPECT_EQ(st.st_mode & 07777, w.mode);
    }
    EXPECT_EQ(listed.size(), want.size());
    EXPECT_EQ(listed.size(), m.family_nodes.size());
    for (const auto& n : m.nodes) EXPECT_FALSE(want.count(n.path)) << n.path;
    for (const auto& h : m.hcas) {
        unsigned n = static_cast<unsigned>(std::stoul(h.name.substr(5)));
        EXPECT_EQ(h.uverbs.path, "/dev/infiniband/uverbs" + std::to_string(n));
        EXPECT_EQ(h.uverbs.minor, 192 + n);
        EXPECT_EQ(h.umad.path, "/dev/infiniband/umad" + std::to_string(n));
        EXPECT_EQ(h.issm.path, "/dev/infiniband/issm" + std::to_string(n));
        EXPECT_EQ(h.issm.minor, 64 + n);
    }

    // The by-path links, and nothing under dev/ that the manifest does not list.
    std::set<std::string> links;
    for (const auto& gpu : m.gpus) {
        std::string by_path = "/dev/dri/by-path/pci-" + gpu.pci_bus_id;
        std::string card = "card" + std::to_string(gpu.index);
        std::string render = "renderD" + std::to_string(128 + gpu.index);
        EXPECT_EQ(fs::read_symlink(tmp.path().string() + by_path + "-card"), "../" + card);
        EXPECT_EQ(fs::read_symlink(tmp.path().string() + by_path + "-render"), "../" + render);
        EXPECT_EQ(fs::canonical(tmp.path().string() + by_path + "-render"),
                  fs::canonical(tmp / "dev/dri" / render));
        links.insert(by_path + "-card");
        links.insert(by_path + "-render");
    }
    std::set<std::string> manifest_links;
    for (const auto& l : m.links) {
        manifest_links.insert(l.path);
        EXPECT_EQ(fs::read_symlink(tmp.path().string() + l.path), l.target);
    }
    EXPECT_EQ(manifest_links, links);
    std::size_t on_disk = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp / "dev"))
        if (!e.is_directory()) ++on_disk;  // nodes, and links to nodes
    EXPECT_EQ(on_disk, m.nodes.size() + m.family_nodes.size() + m.links.size());

    // gds' cufile.json: a JSON object.
    EXPECT_EQ(m.cufile, "/etc/cufile.json");
    EXPECT_TRUE(nlohmann::json::parse(slurp(tmp.path().string() + m.cufile)).is_object());

    // The PCI tree: GPUs 0-3, mlx5_0, mlx5_1 and nvme0 under switch 0 on NUMA
    // node 0, the others under switch 1 on node 1.
    EXPECT_EQ(check_pci_tree(tmp.path(), m), "");
    const std::string sw0 = m.gpus[0].switch_port, sw1 = m.gpus[4].switch_port;
    EXPECT_NE(sw0, sw1);
    for (unsigned i = 0; i < 8; ++i) {
        EXPECT_EQ(m.gpus[i].switch_port, i < 4 ? sw0 : sw1) << i;
        EXPECT_EQ(first_line(tmp / "sys/bus/pci/devices" / m.gpus[i].pci_bus_id / "numa_node"),
                  i < 4 ? "0" : "1");
    }
    EXPECT_EQ(m.hcas[0].switch_port, sw0);
    EXPECT_EQ(m.hcas[1].switch_port, sw0);
    EXPECT_EQ(m.hcas[2].switch_port, sw1);
    EXPECT_EQ(m.hcas[3].switch_port, sw1);
    EXPECT_EQ(m.nvmes[0].switch_port, sw0);
    EXPECT_EQ(m.nvmes[1].switch_port, sw1);
    EXPECT_EQ(slurp(tmp / "sys/devices/system/node/node0/cpulist"), "0-15\n");
    EXPECT_EQ(slurp(tmp / "sys/devices/system/node/node1/cpulist"), "16-31\n");

    // The HCAs' class devices.
    for (std::size_t n = 0; n < m.hcas.size(); ++n) {
        const auto& h = m.hcas[n];
        SCOPED_TRACE(h.name);
        const std::string num = std::to_string(n);
        fs::path pci = fs::canonical(tmp / "sys/bus/pci/devices" / h.pci_bus_id);
        fs::path ib = tmp / "sys/class/infiniband" / h.name;
        EXPECT_TRUE(fs::read_symlink(ib).is_relative());
        EXPECT_EQ(fs::canonical(ib), pci / "infiniband" / h.name);
        EXPECT_EQ(fs::read_symlink(ib / "device"), "../../../" + h.pci_bus_id);
        EXPECT_EQ(fs::canonical(ib / "device"), pci);
        EXPECT_EQ(slurp(ib / "node_type"), "1: CA\n");
        fs::path verbs = tmp / "sys/class/infiniband_verbs" / ("uverbs" + num);
        EXPECT_EQ(fs::canonical(verbs), pci / "infiniband_verbs" / ("uverbs" + num));
        EXPECT_EQ(slurp(verbs / "ibdev"), h.name + "\n");
        EXPECT_EQ(slurp(verbs / "dev"), "231:" + std::to_string(192 + n) + "\n");
        EXPECT_EQ(fs::canonical(verbs / "device"), pci);
        for (auto [name, minor] : {std::pair{"umad" + num, n}, std::pair{"issm" + num, 64 + n}}) {
            fs::path mad = tmp / "sys/class/infiniband_mad" / name;
            EXPECT_EQ(fs::canonical(mad), pci / "infiniband_mad" / name);
            EXPECT_EQ(slurp(mad / "ibdev"), h.name + "\n");
            EXPECT_EQ(slurp(mad / "port"), "1\n");
            EXPECT_EQ(slurp(mad / "dev"), "231:" + std::to_string(minor) + "\n");
            EXPECT_EQ(fs::canonical(mad / "device"), pci);
        }
    }
    for (const auto& n : m.nvmes) {
        fs::path nvme = tmp / "sys/class/nvme" / n.name;
        EXPECT_EQ(fs::canonical(nvme / "device"),
                  fs::canonical(tmp / "sys/bus/pci/devices" / n.pci_bus_id));
    }
    // The GPUs' DRM class devices.
    for (const auto& gpu : m.gpus) {
        fs::path pci = fs::canonical(tmp / "sys/bus/pci/devices" / gpu.pci_bus_id);
        std::string card = "card" + std::to_string(gpu.index);
        std::string render = "renderD" + std::to_string(128 + gpu.index);
        EXPECT_EQ(slurp(pci / "drm" / card / "dev"), "226:" + std::to_string(gpu.index) + "\n");
        EXPECT_EQ(slurp(pci / "drm" / render / "dev"),
                  "226:" + std::to_string(128 + gpu.index) + "\n");
        EXPECT_EQ(fs::canonical(tmp / "sys/class/drm" / card), pci / "drm" / card);
        EXPECT_EQ(fs::canonical(tmp / "sys/class/drm" / render), pci / "drm" / render);
    }

    // The manifest's JSON names.
    auto j = nlohmann::json(m);
    EXPECT_EQ(j["gpus"][0]["switch"], sw0);
    EXPECT_EQ(j["gpus"][0]["numa_node"], 0);
    EXPECT_EQ(j["gpus"][0]["cpulist"], "0-15");
    EXPECT_EQ(j["gpus"][0]["bridges"].size(), 3u);
    EXPECT_EQ(j["hcas"][0]["uverbs"]["path"], "/dev/infiniband/uverbs0");
    EXPECT_EQ(j["hcas"][2]["switch"], sw1);
    EXPECT_EQ(j["nvmes"][1]["switch"], sw1);
    EXPECT_EQ(j["family_nodes"].size(), m.family_nodes.size());
    EXPECT_EQ(j["links"].size(), 16u);
    EXPECT_EQ(j["cufile"], "/etc/cufile.json");
}

TEST(Sim, PciTreeHoldsForAnyGpuCount) {
    struct Case {
        unsigned gpus, hcas, nvmes;
    };
    for (Case c : {Case{1, 16, 8}, Case{2, 16, 8}, Case{3, 16, 8}, Case{3, 3, 1}, Case{12, 5, 3},
                   Case{64, 16, 8}}) {
        SCOPED_TRACE(std::to_string(c.gpus) + " GPUs, " + std::to_string(c.hcas) + " HCAs, " +
                     std::to_string(c.nvmes) + " NVMe");
        TempDir tmp;
        Spec spec = small_spec(c.gpus);
        spec.hcas = c.hcas;
        spec.nvmes = c.nvmes;
        spec.compat32 = spec.graphics = false;
        Manifest m = gpubind::sim::simulate(tmp.path(), spec);
        EXPECT_EQ(check_pci_tree(tmp.path(), m), "");
        // Domains: one pair of switches each, on nodes 0 and 1.
        std::map<std::string, std::set<std::string>> switches;
        for (const auto& g : m.gpus) switches[g.pci_bus_id.substr(0, 4)].insert(g.switch_port);
        EXPECT_EQ(switches.size(), (c.gpus + 7) / 8);
        for (const auto& [domain, set] : switches)
            EXPECT_EQ(set.size(), c.gpus - 8 * std::stoul(domain, nullptr, 16) == 1 ? 1u : 2u)
                << domain;
        if (c.gpus == 12) {
            EXPECT_EQ(m.gpus[8].pci_bus_id.substr(0, 5), "0001:");
            EXPECT_EQ(fs::canonical(tmp / "sys/bus/pci/devices" / m.gpus[8].pci_bus_id)
                          .parent_path()
                          .parent_path()
                          .parent_path()
                          .parent_path()
                          .filename()
                          .string()
                          .substr(0, 8),
                      "pci0001:");
            EXPECT_EQ(m.gpus[9].switch_port, m.gpus[8].switch_port);
            EXPECT_NE(m.gpus[10].switch_port, m.gpus[8].switch_port);
            EXPECT_EQ(m.gpus[10].numa_node, 1);
        }
        if (c.gpus == 3) {
            EXPECT_EQ(m.gpus[1].switch_port, m.gpus[0].switch_port);
            EXPECT_NE(m.gpus[2].switch_port, m.gpus[0].switch_port);
        }
        if (c.gpus == 1 && !m.hcas.empty()) {
            // switch 1 holds no GPU but the second half of the HCAs
            EXPECT_EQ(m.hcas.front().switch_port, m.gpus[0].switch_port);
            EXPECT_NE(m.hcas.back().switch_port, m.gpus[0].switch_port);
            EXPECT_EQ(m.hcas.back().numa_node, 1);
        }
    }
}

TEST(Sim, WithoutFamilyOptionsNoFamilyNode) {
    TempDir tmp;
    Manifest m = gpubind::sim::simulate(tmp.path(), small_spec(2));
    EXPECT_TRUE(m.family_nodes.empty());
    EXPECT_TRUE(m.links.empty());
    EXPECT_TRUE(m.hcas.empty());
    EXPECT_TRUE(m.nvmes.empty());
    EXPECT_EQ(m.cufile, "");
    for (const char* path : {"dev/infiniband", "dev/dri", "dev/gdrdrv", "dev/nvidia-fs0",
                             "dev/nvidia-nvswitchctl", "dev/nvidia-nvswitch0", "etc/cufile.json",
                             "sys/class/infiniband", "sys/class/drm", "sys/class/nvme"})
        EXPECT_FALSE(fs::exists(fs::symlink_status(tmp / path))) << path;
    auto majors = char_majors(slurp(tmp / "proc/devices"));
    for (const char* name :
         {"drm", "infiniband_verbs", "infiniband_mad", "gdrdrv", "nvidia-fs", "nvidia-nvswitch"})
        EXPECT_EQ(majors.count(name), 0u) << name;
    EXPECT_EQ(misc_minors(slurp(tmp / "proc/misc")).count("rdma_cm"), 0u);
    // Exactly the NVIDIA driver's nodes under dev/.
    std::set<std::string> on_disk, listed;
    for (const auto& e : fs::recursive_directory_iterator(tmp / "dev"))
        if (!e.is_directory()) on_disk.insert("/" + fs::relative(e.path(), tmp.path()).string());
    for (const auto& n : m.nodes) listed.insert(n.path);
    EXPECT_EQ(on_disk, listed);
    EXPECT_EQ(listed, (std::set<std::string>{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl",
                                             "/dev/nvidia-modeset", "/dev/nvidia-uvm",
                                             "/dev/nvidia-uvm-tools"}));
    // The sysfs tree is there all the same.
    EXPECT_EQ(check_pci_tree(tmp.path(), m), "");
    EXPECT_NE(m.gpus[0].switch_port, m.gpus[1].switch_port);
}
