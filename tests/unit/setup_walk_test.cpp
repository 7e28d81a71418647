// Every step of `gpubind setup` fails once (issue 49, item 2): the engines'
// registration (--prefix), the node install into a host root and its
// --remove; and `gpubind cdi refresh` (the node's description and CDI spec). A clean run, traced by
// strace, counts the calls of each system call that opens, reads, writes, makes, renames or
// removes; then for each such call k, one run with that call failing (strace's fault injection:
// EIO, ENOSPC, EPERM and EMFILE in turn). After each: either the run succeeded and the tree is what
// the clean run made (the fault was one it may tolerate), or it failed with exit status non-zero,
// one line on stderr, and the tree as it was before, byte for byte: names, types, modes, bytes,
// link targets. Setup undoes what its run did when a later step fails (lib/setup/journal.hpp);
// before it, a failed rename left the programs, the directories made and half the engine's files
// behind.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "sim_node.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;
using Tree = std::map<std::string, std::string>;

// The calls failed in turn: what changes the host, and what opens and reads
// what setup trusts (the stats that only look are left out: 400 of them).
const char* const kWalked =
    "openat,openat2,read,pread64,write,fsync,fchmod,chmod,mkdir,mkdirat,rename,renameat,"
    "renameat2,unlink,unlinkat,rmdir,linkat,symlinkat,getdents64";

struct Fault {
    const char* name;
    int number;
};
constexpr std::array<Fault, 4> kFaults{
    {{"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EPERM", EPERM}, {"EMFILE", EMFILE}}};

std::string slurp_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The calls of each walked system call a run of `command` makes after the
// loader has mapped the program's libraries (its first set_tid_address: a
// failure before it is the loader's, not gpubind's), as the first and last
// number to fail; the process itself (a child it forks is not failed).
std::map<std::string, std::pair<int, int>> count_calls(const std::string& command,
                                                       const fs::path& trace) {
    const auto out = test::run("strace -qq -o " + trace.string() + " -e trace=set_tid_address," +
                               kWalked + " -- " + command + " >/dev/null 2>&1");
    EXPECT_EQ(out.status, 0) << "the clean run failed: " << command;
    std::map<std::string, std::pair<int, int>> calls;
    std::istringstream lines(slurp_file(trace));
    const std::regex call(R"(^([a-z0-9_]+)\()");
    bool loaded = false;
    for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, call)) continue;
        if (m[1] == "set_tid_address") {
            loaded = true;
            continue;
        }
        auto& [first, last] = calls[m[1]];
        ++last;
        if (!loaded) first = last + 1;
    }
    std::erase_if(calls, [](const auto& c) { return c.second.first > c.second.second; });
    for (auto& [name, range] : calls) range.first = std::max(range.first, 1);
    return calls;
}

class SetupWalk : public test::SimNodeTest {
  protected:
    SetupWalk() : test::SimNodeTest("gpubind-setup-walk") { node_options().gpus(2); }
    void SetUp() override {
        test::SimNodeTest::SetUp();
        fs::create_directories(host() / "etc/containerd");
        test::write(host() / "etc/containerd/config.toml", "version = 2\n", fs::perms(0644));
        fs::create_directories(host() / "var");
        fs::create_directory_symlink("/run", host() / "var/run");
        test::write(dir() / "config.toml", "[cdi]\nkind = \"nvidia.com/gpu\"\n", fs::perms(0644));
        // Small stand-ins for the programs: copied per run, not 60 MiB each.
        fs::create_directories(dir() / "programs");
        for (const char* name : {"gpubind-hook", "gpubind-runtime", "gpubind-nvml"})
            test::write(dir() / "programs" / name, std::string("#!/bin/sh\n# ") + name + "\n",
                        fs::perms(0755));
    }

    fs::path host() const { return root(); }
    std::string install_command(const std::string& more = "") const {
        return std::string(GPUBIND_CLI_PATH) + " setup --host-root " + host().string() +
               " -e containerd --cdi --programs " + (dir() / "programs").string() +
               " --install-config " + (dir() / "config.toml").string() + more;
    }
    std::string register_command(const std::string& more = "") const {
        return std::string(GPUBIND_CLI_PATH) + " setup --prefix " + (dir() / "prefix").string() +
               " -e docker -e containerd -e crio -e podman --cdi" + more;
    }

    // The host (or prefix) put back as `saved` holds it.
    void restore(const fs::path& tree_dir, const fs::path& saved) {
        const auto out = test::run("rm -rf " + tree_dir.string() + " && cp -a " + saved.string() +
                                   " " + tree_dir.string() + " 2>&1");
        ASSERT_EQ(out.status, 0) << out.text;
    }

    // The walk of `command` over `tree_dir`, started each time from what
    // `saved` holds; `whole` is what a clean run makes of it. `cache`: a
    // file the run may write or not (a cache whose write is best effort),
    // left out of the comparisons (a temporary beside it is not).
    void walk(const std::string& command, const fs::path& tree_dir, const fs::path& saved,
              const std::string& cache = "") {
        const auto tree = [&] {
            Tree t = test::tree(tree_dir);
            t.erase(cache);
            return t;
        };
        restore(tree_dir, saved);
        const Tree before = tree();
        const auto calls = count_calls(command, dir() / "trace");
        const Tree whole = tree();
        ASSERT_NE(whole, before) << "the clean run changed nothing: " << command;
        int runs = 0, failed = 0;
        for (const auto& [name, range] : calls)
            for (int k = range.first; k <= range.second; ++k, ++runs) {
                const Fault& f = kFaults[static_cast<std::size_t>(runs) % kFaults.size()];
                SCOPED_TRACE(name + " #" + std::to_string(k) + " failing with " + f.name);
                restore(tree_dir, saved);
                const fs::path err = dir() / "stderr";
                const auto out =
                    test::run("strace -qq -o /dev/null -e trace=" + name + " -e inject=" + name +
                              ":error=" + f.name + ":when=" + std::to_string(k) + " -- " + command +
                              " 2>" + err.string());
                const std::string error = slurp_file(err);
                if (out.status == 0) {
                    EXPECT_EQ(tree(), whole) << "it succeeded, but not whole";
                    continue;
                }
                ++failed;
                // Done, and only the report lost: its printing failed after
                // the last change (the error names standard output).
                const Tree after = tree();
                if (after == whole && error.find("standard output") != std::string::npos) continue;
                EXPECT_EQ(after, before) << "it failed and left this: " << error;
                // One line, gpubind's, naming the call's error.
                EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << error;
                EXPECT_EQ(error.rfind("gpubind: ", 0), 0u) << error;
                EXPECT_NE(error.find(std::strerror(f.number)), std::string::npos) << error;
            }
        // The walk reached the calls that write: some runs failed.
        EXPECT_GT(runs, 5);
        EXPECT_GT(failed, 2) << runs << " runs";
    }
};

TEST_F(SetupWalk, RegisteringWithEveryEngineCompletesOrChangesNothing) {
    fs::create_directories(dir() / "prefix/etc/docker");
    test::write(dir() / "prefix/etc/docker/daemon.json", "{\"log-level\": \"warn\"}\n",
                fs::perms(0644));
    restore(dir() / "prefix-saved", dir() / "prefix");
    walk(register_command(), dir() / "prefix", dir() / "prefix-saved");
}

TEST_F(SetupWalk, AnInstallCompletesOrLeavesTheHostAsItWas) {
    restore(dir() / "host-saved", host());
    walk(install_command(), host(), dir() / "host-saved");
}

TEST_F(SetupWalk, ARemoveCompletesOrLeavesTheInstallAsItWas) {
    const auto installed = test::run(install_command() + " 2>&1");
    ASSERT_EQ(installed.status, 0) << installed.text;
    restore(dir() / "host-saved", host());
    walk(install_command(" --remove"), host(), dir() / "host-saved");
}

// The driver's device nodes made again where they went (the GPUs' and the
// control nodes, majors from the node's /proc/devices).
TEST_F(SetupWalk, MakingTheDeviceNodesCompletesOrChangesNothing) {
    for (const auto& gpu : manifest().gpus)
        fs::remove(host() / "dev" / ("nvidia" + std::to_string(gpu.minor)));
    fs::remove(host() / "dev/nvidiactl");
    fs::remove(host() / "dev/nvidia-uvm");
    restore(dir() / "host-saved", host());
    walk(std::string(GPUBIND_CLI_PATH) + " setup --device-nodes --simulated-proc --root " +
             host().string(),
         host(), dir() / "host-saved");
}

// nvidia-container-cli pointed at gpubind-nvc (the one there kept as a
// backup) together with docker's registration; and both taken out again.
TEST_F(SetupWalk, LinkingNvidiaContainerCliCompletesOrChangesNothing) {
    const fs::path prefix = dir() / "prefix";
    fs::create_directories(prefix / "usr/bin");
    test::write(prefix / "usr/bin/nvidia-container-cli", "#!/bin/sh\n# NVIDIA's\n",
                fs::perms(0755));
    test::write(prefix / "usr/bin/gpubind-nvc", "#!/bin/sh\n# gpubind's\n", fs::perms(0755));
    const std::string cmd = std::string(GPUBIND_CLI_PATH) + " setup --prefix " + prefix.string() +
                            " -e docker --nvidia-container-cli";
    restore(dir() / "prefix-saved", prefix);
    walk(cmd, prefix, dir() / "prefix-saved");
    const auto linked = test::run(cmd + " 2>&1");
    ASSERT_EQ(linked.status, 0) << linked.text;
    restore(dir() / "prefix-saved", prefix);
    walk(cmd + " --remove", prefix, dir() / "prefix-saved");
}

// The boot unit's refresh: the node's description into the state directory,
// its CDI spec into the CDI directory.
TEST_F(SetupWalk, ACdiRefreshCompletesOrChangesNothing) {
    const fs::path out = dir() / "out";
    for (const char* d : {"state", "cdi"}) fs::create_directories(out / d);
    const std::string h = host().string();
    test::write(dir() / "refresh.toml",
                "[node]\ndriver-root = \"" + h + "\"\ndev-root = \"" + h + "\"\nproc-root = \"" +
                    h + "/proc\"\nsys-root = \"" + h + "/sys\"\nstate-dir = \"" +
                    (out / "state").string() + "\"\n[cdi]\ndir = \"" + (out / "cdi").string() +
                    "\"\n",
                fs::perms(0644));
    restore(dir() / "out-saved", out);
    // The node's description is a cache: a refresh that cannot store it goes
    // on without (a warning), and one stored is whole.
    walk(std::string(GPUBIND_CLI_PATH) + " cdi refresh --config " +
             (dir() / "refresh.toml").string(),
         out, dir() / "out-saved", "state/node.desc");
}

}  // namespace
