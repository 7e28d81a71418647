// Restarts (issue 9): GPU containers are started, the simulated node is
// changed under them (driver upgrade or downgrade in place, MIG layout), and
// the same containers are started again with the same rootfs, as `docker
// start`, a restart policy or a node reboot do. Images that ship driver files
// of their own start with the host's. Every expectation comes from the
// simulated node's manifest, the container's own loader (the file the kernel
// mapped for a soname) and the system's `ldconfig -p`; the rootfs is read on
// the host without following its links.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "container.hpp"
#include "files.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kMultiarch = "/usr/lib/x86_64-linux-gnu";
constexpr const char* kOld = "550.54.15";
constexpr const char* kNew = "560.35.03";

class RestartTest : public ::testing::Test {
  protected:
    fs::path log_file() const { return node_.log(); }
    const sim::Manifest& m() const { return node_.manifest(); }

    // The node rewritten in place with another driver or MIG layout.
    void simulate(const std::string& version, std::vector<sim::MigSpec> mig = {},
                  unsigned gpus = 2) {
        sim::Spec spec;
        spec.gpus = gpus;
        spec.driver_version = version;
        spec.mig = std::move(mig);
        node_.simulate(spec);
    }

    std::unique_ptr<Bundle> bundle(const std::string& devices = "0",
                                   const std::string& caps = "utility,compute") {
        auto b = std::make_unique<Bundle>(dir_.path() / ("b" + std::to_string(count_++)));
        b->hook(env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH), node_.config());
        b->env("NVIDIA_VISIBLE_DEVICES=" + devices);
        b->env("NVIDIA_DRIVER_CAPABILITIES=" + caps);
        b->command(
            "echo '== loaded'; probe loaded libcuda.so.1 libnvidia-ml.so.1; "
            "echo '== cuda'; probe cuda; probe nvml; echo '== smi'; nvidia-smi; nvidia-smi -L; "
            "echo '== dev'; ls /dev; echo '== caps'; ls /dev/nvidia-caps; "
            "echo '== proc'; ls /proc/driver/nvidia/gpus; true");
        return b;
    }

    // The node's 64-bit library of soname `name`, its file name.
    std::string lib_file(const std::string& soname) const {
        for (const auto& f : m().files)
            if (f.kind == "library" && f.name == soname && !f.compat32)
                return fs::path(f.real_path).filename().string();
        ADD_FAILURE() << "the node has no library " << soname;
        return soname;
    }

    // What a container of the node as it is now must show: libcuda and
    // libnvidia-ml loaded from the node's version, the fake nvidia-smi
    // answering with it. Problems, "" when all is well.
    // `covered`: sonames the image has a file at, which the host's covers.
    std::string check_started(const RunResult& r, const std::set<std::string>& covered = {}) const {
        std::string problems;
        if (r.exit_code != 0) return "exit " + std::to_string(r.exit_code) + ": " + r.err;
        auto s = sections(r.out);
        for (const char* soname : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
            const std::string want = std::string(soname) + " => " + kMultiarch + "/" +
                                     (covered.count(soname) ? soname : lib_file(soname));
            if (!contains(s["loaded"], want)) problems += "not loaded: " + want + "\n";
        }
        std::string smi;
        for (const auto& line : s["smi"]) smi += line + "\n";
        if (smi.find("Driver Version: " + m().spec.driver_version + " ") == std::string::npos)
            problems += "nvidia-smi does not show driver " + m().spec.driver_version + "\n";
        if (s["cuda"].empty() || s["cuda"][0].rfind("cuda init=0 ", 0) != 0)
            problems +=
                "cuda: " + (s["cuda"].empty() ? std::string("no output") : s["cuda"][0]) + "\n";
        return problems.empty() ? "" : problems + r.out;
    }

    // Nothing of driver `old` reachable in the rootfs: no entry named after one
    // of its library files, no link of the library directory leading to one
    // (read with readlink, never followed), and no entry of the rootfs's cache
    // (`ldconfig -p`) whose file is one. The libraries of `gone` (sonames)
    // have no entry at all. Problems, "" when none.
    std::string check_nothing_of(const Bundle& b, const sim::Manifest& old,
                                 const std::set<std::string>& gone = {}) const {
        std::string problems;
        const fs::path dir = b.rootfs() / fs::path(kMultiarch).relative_path();
        std::set<std::string> old_files;
        for (const auto& f : old.files)
            if (f.kind == "library" && !f.compat32)
                old_files.insert(fs::path(f.real_path).filename().string());
        for (const auto& name : old_files) {
            struct stat st {};
            bool current = false;
            for (const auto& f : m().files) current |= fs::path(f.real_path).filename() == name;
            if (!current && ::lstat((dir / name).c_str(), &st) == 0)
                problems += "left: " + name + "\n";
        }
        for (const auto& e : fs::directory_iterator(dir)) {
            const std::string name = e.path().filename().string();
            if (gone.count(name)) problems += "left: " + name + "\n";
            if (!e.is_symlink()) continue;
            const std::string target = fs::read_symlink(e.path()).string();
            if (old_files.count(target) && !fs::exists(fs::symlink_status(dir / target)))
                problems += "dangling link " + name + " -> " + target + "\n";
            if (old.spec.driver_version != m().spec.driver_version &&
                target.find(old.spec.driver_version) != std::string::npos)
                problems += "link to the old driver: " + name + " -> " + target + "\n";
        }
        auto r = run_command({"ldconfig", "-p", "-C", (b.rootfs() / "etc/ld.so.cache").string()});
        if (r.exit_code != 0) return problems + "ldconfig -p: " + r.err;
        std::istringstream in(r.out);
        std::string line;
        while (std::getline(in, line)) {
            const auto arrow = line.find(" => ");
            if (arrow == std::string::npos) continue;
            const std::string soname = line.substr(1, line.find(' ', 1) - 1);
            const fs::path path = line.substr(arrow + 4);
            if (gone.count(soname)) problems += "cached: " + line + "\n";
            if (path.parent_path() != kMultiarch) continue;
            // The cached name, through the rootfs's relative links.
            std::string name = path.filename().string();
            for (int hops = 0; hops < 8; ++hops) {
                const fs::path p = dir / name;
                if (!fs::is_symlink(fs::symlink_status(p))) break;
                const std::string t = fs::read_symlink(p).string();
                if (t.find('/') != std::string::npos) break;
                name = t;
            }
            if (!fs::exists(fs::symlink_status(dir / name)))
                problems += "cached, missing: " + line + "\n";
            if (old_files.count(name) && !gone.count(soname)) {
                bool current = false;
                for (const auto& f : m().files) current |= fs::path(f.real_path).filename() == name;
                if (!current) problems += "cached, old: " + line + " (" + name + ")\n";
            }
        }
        return problems;
    }

    TempDir dir_{"gpubind-e2e-restart"};
    SimNode node_{sim::Spec{}, "gpubind-e2e-restart-node"};
    int count_ = 0;
};

// The driver upgraded (and downgraded) in place: the same containers start
// again with the host's driver, and nothing of the other version is left.
TEST_F(RestartTest, SameContainersStartAfterADriverUpgradeAndADowngrade) {
    simulate(kOld);
    std::vector<std::unique_ptr<Bundle>> bundles;
    bundles.push_back(bundle("0"));
    bundles.push_back(bundle("all", "all"));
    for (auto& b : bundles) {
        auto r = b->run();
        ASSERT_EQ(check_started(r), "");
    }
    for (const char* version : {kNew, kOld}) {
        SCOPED_TRACE(std::string("driver ") + version);
        const sim::Manifest before = m();
        simulate(version);
        for (auto& b : bundles) {
            auto r = b->run();
            EXPECT_EQ(check_started(r), "");
            EXPECT_EQ(check_nothing_of(*b, before), "");
        }
    }
}

// An upgrade, then a restart with fewer GPUs and capabilities: nothing of
// the GPU or the libraries it lost.
TEST_F(RestartTest, FewerGpusAndCapabilitiesKeepNothingOfWhatWasLost) {
    simulate(kOld);
    auto b = bundle("0,1", "utility,compute,video,graphics,display");
    ASSERT_EQ(check_started(b->run()), "");
    const sim::Manifest before = m();
    simulate(kNew);
    for (auto& e : b->spec()["process"]["env"]) {
        if (e.get<std::string>().starts_with("NVIDIA_VISIBLE_DEVICES="))
            e = "NVIDIA_VISIBLE_DEVICES=1";
        if (e.get<std::string>().starts_with("NVIDIA_DRIVER_CAPABILITIES="))
            e = "NVIDIA_DRIVER_CAPABILITIES=utility,compute";
    }
    auto r = b->run();
    ASSERT_EQ(check_started(r), "");
    std::set<std::string> lost;
    for (const auto& f : before.files)
        if (f.kind == "library" && !f.compat32 && f.capability != "utility" &&
            f.capability != "compute")
            lost.insert(f.name);
    ASSERT_FALSE(lost.empty());
    EXPECT_EQ(check_nothing_of(*b, before, lost), "");
    auto s = sections(r.out);
    EXPECT_TRUE(contains(s["dev"], "nvidia" + std::to_string(m().gpus[1].minor))) << r.out;
    EXPECT_FALSE(contains(s["dev"], "nvidia" + std::to_string(m().gpus[0].minor))) << r.out;
    EXPECT_EQ(s["proc"].size(), 1u) << r.out;
}

// The MIG layout changed between starts: the container gets the new MIG
// device's nodes and UUID, nothing of the old one.
TEST_F(RestartTest, MigLayoutChangedBetweenStarts) {
    simulate(kOld, {{0, 1, 0}, {0, 2, 0}});
    auto b = bundle("0:0");
    auto first = b->run();
    ASSERT_EQ(check_started(first), "");
    const sim::Manifest before = m();
    simulate(kNew, {{0, 5, 0}});
    auto r = b->run();
    ASSERT_EQ(check_started(r), "");
    EXPECT_EQ(check_nothing_of(*b, before), "");
    auto s = sections(r.out);
    EXPECT_EQ(s["caps"],
              (std::vector<std::string>{"nvidia-cap" + std::to_string(m().migs[0].gi_cap_minor),
                                        "nvidia-cap" + std::to_string(m().migs[0].ci_cap_minor)}))
        << r.out;
    std::string smi;
    for (const auto& line : s["smi"]) smi += line + "\n";
    EXPECT_THAT(smi, HasSubstr("(UUID: " + m().migs[0].uuid + ")"));
    for (const auto& old : before.migs) EXPECT_THAT(smi, Not(HasSubstr(old.uuid)));
}

// An image shipping driver files of its own: a libcuda.so.1 link to its own
// libcuda.so.470.82.01, a regular libnvidia-ml.so.1 and an nvidia-smi. The
// host's win; the image's files stay as they were in the rootfs.
TEST_F(RestartTest, ImageDriverFilesGiveWayToTheHosts) {
    simulate(kNew);
    auto b = bundle("0");
    const fs::path dir = b->rootfs() / fs::path(kMultiarch).relative_path();
    fs::create_directories(dir);
    std::ofstream(dir / "libcuda.so.470.82.01", std::ios::binary)
        << sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libcuda.so.1");
    fs::create_symlink("libcuda.so.470.82.01", dir / "libcuda.so.1");
    std::ofstream(dir / "libnvidia-ml.so.1", std::ios::binary)
        << sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libnvidia-ml.so.1");
    fs::create_directories(b->rootfs() / "usr/bin");
    std::ofstream(b->rootfs() / "usr/bin/nvidia-smi") << "#!/bin/sh\necho image nvidia-smi\n";
    fs::permissions(b->rootfs() / "usr/bin/nvidia-smi", fs::perms::owner_all);
    const std::string image_ml = slurp(dir / "libnvidia-ml.so.1");

    for (int start = 0; start < 2; ++start) {
        auto r = b->run();
        auto s = sections(r.out);
        // libnvidia-ml.so.1 is the image's name with the host's file mounted
        // over it (the image's stub has no NVML entry points: nvml answers).
        EXPECT_EQ(check_started(r, {"libnvidia-ml.so.1"}), "");
        EXPECT_TRUE(contains(s["cuda"], "nvml init=0 count=1(0)")) << r.out;
        EXPECT_THAT(r.out, Not(HasSubstr("image nvidia-smi")));
        EXPECT_THAT(r.out, HasSubstr("Driver Version: " + m().spec.driver_version + " "));
        EXPECT_EQ(check_nothing_of(*b, m()), "");
    }
    // The image's own files are as they were; its link now the driver's.
    EXPECT_EQ(slurp(dir / "libnvidia-ml.so.1"), image_ml);
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / "libcuda.so.470.82.01")));
    EXPECT_EQ(fs::read_symlink(dir / "libcuda.so.1"), lib_file("libcuda.so.1"));
    EXPECT_THAT(slurp(b->rootfs() / "usr/bin/nvidia-smi"), HasSubstr("image nvidia-smi"));
    const std::string log = slurp(log_file());
    EXPECT_THAT(log, HasSubstr(std::string(kMultiarch) +
                               "/libcuda.so.1: replaced the link to libcuda.so.470.82.01"));
    EXPECT_THAT(log,
                HasSubstr(std::string(kMultiarch) + "/libnvidia-ml.so.1: the image's own file"));
}

// Links aimed outside the rootfs, and a chain of links, at the driver's
// names: replaced without being followed; a directory where a link goes:
// refused with one line naming it. The host's tripwire unchanged throughout.
TEST_F(RestartTest, HostileLinksAreReplacedNeverFollowedADirectoryIsRefused) {
    simulate(kNew);
    Tripwire trip(dir_.path() / "tripwire");
    auto b = bundle("0");
    const fs::path dir = b->rootfs() / fs::path(kMultiarch).relative_path();
    fs::create_directories(dir);
    const fs::path bait = trip.dir() / fs::path(kMultiarch).relative_path();
    fs::create_symlink(bait / "libcuda.so.1", dir / "libcuda.so.1");
    fs::create_symlink("../../../../../../../../" + bait.relative_path().string() + "/libcuda.so",
                       dir / "libcuda.so");
    fs::create_symlink("chain-a", dir / "libnvidia-ml.so.1");
    fs::create_symlink("chain-b", dir / "chain-a");
    fs::create_symlink(bait.string(), dir / "chain-b");
    fs::create_symlink(trip.dir() / "usr/bin/nvidia-smi", b->rootfs() / "usr/bin/nvidia-smi");
    trip.arm();
    auto r = b->run();
    EXPECT_EQ(check_started(r), "");
    EXPECT_EQ(trip.changes(), "");
    EXPECT_EQ(fs::read_symlink(dir / "chain-a"), "chain-b");  // not ours: left alone

    auto refused = bundle("0");
    const fs::path rdir = refused->rootfs() / fs::path(kMultiarch).relative_path();
    fs::create_directories(rdir / "libcuda.so.1");
    trip.arm();
    r = refused->run();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(trip.changes(), "");
    const auto at = r.err.find("gpubind-hook: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    // runc quotes the hook's stderr: its one line ends with an escaped newline.
    std::string msg = r.err.substr(at);
    msg = msg.substr(0, msg.find('\n'));
    ASSERT_TRUE(msg.ends_with("\\n\"")) << msg;
    msg.resize(msg.size() - 3);
    EXPECT_THAT(msg, HasSubstr(std::string(kMultiarch) + "/libcuda.so.1: is a directory"));
    EXPECT_THAT(msg, Not(HasSubstr("\\n"))) << "more than one line";
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(rdir / "libcuda.so.1")));
}

// CUDA forward compatibility decided at one start and not at the next (the
// driver caught up with the image's compat libcuda): the loader entry of the
// earlier decision goes, and the cache no longer puts the compat libcuda first.
TEST_F(RestartTest, CompatEntryFollowsTheDecisionOfEachStart) {
    simulate(kOld);
    auto b = bundle("0");
    const fs::path compat = b->rootfs() / "usr/local/cuda/compat";
    fs::create_directories(compat);
    const std::string between = "555.10.01";  // newer than kOld, older than kNew
    std::ofstream(compat / ("libcuda.so." + between), std::ios::binary)
        << sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libcuda.so.1");
    fs::create_symlink("libcuda.so." + between, compat / "libcuda.so.1");
    const fs::path conf = b->rootfs() / "etc/ld.so.conf.d/000-cuda-compat.conf";
    auto r = b->run();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(sections(r.out)["loaded"],
                         "libcuda.so.1 => /usr/local/cuda/compat/libcuda.so." + between))
        << r.out;
    EXPECT_EQ(slurp(conf), "/usr/local/cuda/compat\n");

    const sim::Manifest before = m();
    simulate(kNew);
    r = b->run();
    EXPECT_EQ(check_started(r), "");
    EXPECT_FALSE(fs::exists(fs::symlink_status(conf)));
    EXPECT_EQ(check_nothing_of(*b, before), "");
    auto cache = run_command({"ldconfig", "-p", "-C", (b->rootfs() / "etc/ld.so.cache").string()});
    EXPECT_THAT(cache.out, Not(HasSubstr("/usr/local/cuda/compat/")));
    // And back: an image whose entry differs from what gpubind writes keeps it.
    std::ofstream(conf) << "/opt/mine\n";
    r = b->run();
    EXPECT_EQ(check_started(r), "");
    EXPECT_EQ(slurp(conf), "/opt/mine\n");
}

// Twenty containers restarted at once after an upgrade all start.
TEST_F(RestartTest, TwentyRestartsInParallelAfterAnUpgrade) {
    constexpr int kContainers = 20;
    simulate(kOld);
    std::vector<std::unique_ptr<Bundle>> bundles;
    for (int i = 0; i < kContainers; ++i) bundles.push_back(bundle(i % 2 ? "0" : "1"));
    auto start_all = [&] {
        std::vector<RunResult> results(kContainers);
        std::vector<std::thread> threads;
        for (int i = 0; i < kContainers; ++i)
            threads.emplace_back([&, i] {
                results[static_cast<std::size_t>(i)] = bundles[static_cast<std::size_t>(i)]->run();
            });
        for (auto& t : threads) t.join();
        return results;
    };
    for (const auto& r : start_all()) ASSERT_EQ(check_started(r), "");
    const sim::Manifest before = m();
    simulate(kNew);
    const auto results = start_all();
    int started = 0;
    for (int i = 0; i < kContainers; ++i) {
        const std::string problems = check_started(results[static_cast<std::size_t>(i)]);
        EXPECT_EQ(problems, "") << "container " << i;
        started += problems.empty();
        EXPECT_EQ(check_nothing_of(*bundles[static_cast<std::size_t>(i)], before), "");
    }
    EXPECT_EQ(started, kContainers);
}

}  // namespace
}  // namespace gpubind::test
