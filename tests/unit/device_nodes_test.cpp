// gpubind setup --device-nodes (issue 25): on a simulated node whose nodes
// were deleted, the driver's nodes come back with the numbers the simulator
// gave them (its manifest; nvidia-uvm's major is a dynamic one it chose), as
// root with exactly the mode asked; a node with other numbers is left and
// counted unless --force; anything that is not a character device is always
// left; nothing is written in a dry run or under a directory others can write.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "built.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/sim/sim.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpubind;
using namespace gpubind::setup;
using gpubind::test::TempDir;
using testing::HasSubstr;

class DeviceNodes : public test::SimNodeTest {
  protected:
    DeviceNodes() : test::SimNodeTest("gpubind-device-nodes") {
        node_options().gpus(2).mig({{0, 1, 0}}).imex_channels(2);
    }

    fs::path host(const std::string& path) const { return root() / path.substr(1); }
    fs::path proc() const { return root() / "proc"; }
    static bool imex(const sim::ManifestNode& n) {
        return n.path.starts_with("/dev/nvidia-caps-imex-channels/");
    }
    // The manifest's node at `path`; fails the test when there is none.
    const sim::ManifestNode& node(const std::string& path) const {
        for (const auto& n : manifest().nodes)
            if (n.path == path) return n;
        ADD_FAILURE() << "no node " << path;
        static const sim::ManifestNode none;
        return none;
    }
    void remove_all_nodes() const {
        for (const auto& n : manifest().nodes)
            if (!imex(n)) fs::remove(host(n.path));
    }
    // "" when the node at `path` is the manifest's, root-owned, with `mode`.
    std::string is_drivers(const sim::ManifestNode& n, mode_t mode = 0666) const {
        struct stat st {};
        if (::lstat(host(n.path).c_str(), &st) != 0) return n.path + ": missing";
        if (!S_ISCHR(st.st_mode)) return n.path + ": not a character device";
        if (::major(st.st_rdev) != n.major || ::minor(st.st_rdev) != n.minor)
            return n.path + ": other numbers";
        if ((st.st_mode & 07777) != mode || st.st_uid != 0 || st.st_gid != 0)
            return n.path + ": other mode or owner";
        return {};
    }
    DeviceNodeReport make(NodeSet which, bool force = false, bool dry_run = false,
                          mode_t mode = 0666) const {
        DeviceNodeOptions o;
        o.which = which;
        o.force = force;
        o.dry_run = dry_run;
        o.mode = mode;
        o.simulated_proc = true;
        return make_device_nodes(root(), proc(), o);
    }
    static std::size_t lines_starting(const DeviceNodeReport& r, const std::string& prefix) {
        std::size_t n = 0;
        for (const auto& line : r.lines) n += line.starts_with(prefix) ? 1 : 0;
        return n;
    }
};

TEST_F(DeviceNodes, EveryDeletedNodeComesBackWithTheDriversNumbers) {
    remove_all_nodes();
    const mode_t old_umask = ::umask(022);
    const auto report = make(NodeSet::All);
    ::umask(old_umask);
    std::size_t made = 0;
    for (const auto& n : manifest().nodes) {
        if (imex(n)) continue;  // channels are made on request, not from procfs
        EXPECT_EQ(is_drivers(n), "") << testing::PrintToString(report.lines);
        ++made;
    }
    EXPECT_EQ(lines_starting(report, "created "), made);
    EXPECT_EQ(report.left, 0u);
    // nvidia-uvm's major is the dynamic one of proc/devices, not a constant.
    EXPECT_THAT(testing::PrintToString(report.lines),
                HasSubstr("created " + host("/dev/nvidia-uvm").string() + " c " +
                          std::to_string(node("/dev/nvidia-uvm").major) + ":0"));
    // Again: nothing to do.
    const auto again = make(NodeSet::All);
    EXPECT_EQ(lines_starting(again, "unchanged "), made);
    EXPECT_EQ(lines_starting(again, "created "), 0u);
}

// A GPU the driver excludes, and one whose Device Minor is not a GPU's,
// get no node, each with a note saying why.
TEST_F(DeviceNodes, ExcludedGpusAndBadMinorsGetNoNode) {
    remove_all_nodes();
    const auto info = [&](unsigned i) {
        return proc() / "driver/nvidia/gpus" / manifest().gpus[i].pci_bus_id / "information";
    };
    const auto edit = [&](unsigned i, const std::string& from, const std::string& to) {
        std::ifstream in(info(i));
        std::string text{std::istreambuf_iterator<char>(in), {}};
        ASSERT_NE(text.find(from), std::string::npos) << text;
        text.replace(text.find(from), from.size(), to);
        fs::permissions(info(i), fs::perms(0644));
        std::ofstream(info(i)) << text;
    };
    edit(0, "GPU Excluded:\t No", "GPU Excluded:\t Yes");
    edit(1, "Device Minor: \t " + std::to_string(manifest().gpus[1].minor), "Device Minor: \t 254");
    const auto report = make(NodeSet::Gpus);
    const std::string lines = testing::PrintToString(report.lines);
    EXPECT_THAT(lines,
                HasSubstr("GPU " + manifest().gpus[0].pci_bus_id + " is excluded by the driver"));
    EXPECT_THAT(lines, HasSubstr(info(1).string() + ": no usable \\\"Device Minor\\\""));
    for (const auto& gpu : manifest().gpus)
        EXPECT_FALSE(
            fs::exists(fs::symlink_status(host("/dev/nvidia" + std::to_string(gpu.minor)))));
    EXPECT_EQ(is_drivers(node("/dev/nvidiactl")), "");
}

// IMEX channels are made when asked, on the major the driver registered.
TEST_F(DeviceNodes, AskedImexChannelsAreMadeOnTheirMajor) {
    std::vector<const sim::ManifestNode*> channels;
    for (const auto& n : manifest().nodes)
        if (imex(n)) channels.push_back(&n), fs::remove(host(n.path));
    ASSERT_EQ(channels.size(), 2u);
    fs::remove(host("/dev/nvidia-caps-imex-channels"));
    DeviceNodeOptions o;
    o.which = NodeSet::Control;
    o.imex_channels = {1};
    o.simulated_proc = true;
    auto report = make_device_nodes(root(), proc(), o);
    EXPECT_EQ(is_drivers(*channels[1]), "") << testing::PrintToString(report.lines);
    EXPECT_FALSE(fs::exists(fs::symlink_status(host(channels[0]->path))));
    EXPECT_EQ(fs::status(host("/dev/nvidia-caps-imex-channels")).permissions(), fs::perms(0755));
    // The CLI, the same.
    const auto cli =
        test::run(std::string(GPUBIND_CLI_PATH) + " setup --device-nodes --control " +
                  "--imex-channel 0 --simulated-proc --root " + root().string() + " 2>&1");
    EXPECT_EQ(cli.status, 0) << cli.text;
    EXPECT_EQ(is_drivers(*channels[0]), "") << cli.text;
    // Beyond the driver's channels, refused with nothing made.
    o.imex_channels = {kMaxImexChannel};
    EXPECT_THROW(make_device_nodes(root(), proc(), o), util::Error);
    // A driver without IMEX: none, and a note says why.
    sim::Spec plain;
    plain.gpus = 1;
    TempDir other;
    sim::simulate(other.path(), plain);
    o.imex_channels = {0};
    report = make_device_nodes(other.path(), other.path() / "proc", o);
    EXPECT_THAT(testing::PrintToString(report.lines), HasSubstr("no nvidia-caps-imex-channels"));
    EXPECT_FALSE(fs::exists(other.path() / "dev/nvidia-caps-imex-channels"));
}

TEST_F(DeviceNodes, TheDefaultSetIsTheGpusAndControlNodesAndControlIsControlOnly) {
    remove_all_nodes();
    make(NodeSet::Control);
    EXPECT_EQ(is_drivers(node("/dev/nvidiactl")), "");
    EXPECT_EQ(is_drivers(node("/dev/nvidia-uvm-tools")), "");
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidia0"))));
    make(NodeSet::Gpus);
    EXPECT_EQ(is_drivers(node("/dev/nvidia0")), "");
    EXPECT_EQ(is_drivers(node("/dev/nvidia1")), "");
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidia-modeset"))));
    for (const auto& mig : manifest().migs)
        EXPECT_FALSE(fs::exists(fs::symlink_status(
            host("/dev/nvidia-caps/nvidia-cap" + std::to_string(mig.ci_cap_minor)))));
}

TEST_F(DeviceNodes, TheModeAskedIsTheModeMadeWhateverTheUmask) {
    remove_all_nodes();
    const mode_t old_umask = ::umask(077);
    make(NodeSet::Gpus, false, false, 0660);
    EXPECT_EQ(::umask(old_umask), mode_t{077}) << "the caller's umask is given back";
    EXPECT_EQ(is_drivers(node("/dev/nvidia0"), 0660), "");
    EXPECT_THROW(make(NodeSet::Gpus, false, false, 04666), util::Error);
}

TEST_F(DeviceNodes, ANodeWithOtherNumbersIsLeftUnlessForced) {
    const auto& gpu1 = node("/dev/nvidia1");
    fs::remove(host(gpu1.path));
    ASSERT_EQ(::mknod(host(gpu1.path).c_str(), S_IFCHR | 0666, ::makedev(8, 1)), 0);
    const auto left = make(NodeSet::Gpus);
    EXPECT_EQ(left.left, 1u);
    EXPECT_THAT(testing::PrintToString(left.lines),
                HasSubstr("left " + host(gpu1.path).string() +
                          ": character device 8:1, the driver's is c 195:1"));
    EXPECT_THAT(testing::PrintToString(left.lines), HasSubstr("--force replaces it"));
    EXPECT_EQ(is_drivers(gpu1), gpu1.path + ": other numbers");

    // A temporary a run that died left behind does not stand in the way.
    std::ofstream(host(gpu1.path + ".gpubind-new")) << "left by a crash";
    const auto forced = make(NodeSet::Gpus, true);
    EXPECT_EQ(forced.left, 0u);
    EXPECT_EQ(is_drivers(gpu1), "");
    EXPECT_THAT(testing::PrintToString(forced.lines),
                HasSubstr("replaced " + host(gpu1.path).string() + " c 195:1"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(host(gpu1.path + ".gpubind-new"))));
}

TEST_F(DeviceNodes, WhatIsNotADeviceIsNeverReplaced) {
    const auto& ctl = node("/dev/nvidiactl");
    fs::remove(host(ctl.path));
    fs::create_symlink("/dev/null", host(ctl.path));
    const auto& gpu0 = node("/dev/nvidia0");
    fs::remove(host(gpu0.path));
    std::ofstream(host(gpu0.path)) << "a file";
    const auto r = make(NodeSet::Gpus, true);
    EXPECT_EQ(r.left, 2u);
    EXPECT_THAT(testing::PrintToString(r.lines),
                HasSubstr("left " + host(ctl.path).string() + ": a symbolic link"));
    EXPECT_THAT(testing::PrintToString(r.lines),
                HasSubstr("left " + host(gpu0.path).string() + ": a regular file"));
    EXPECT_TRUE(fs::is_symlink(host(ctl.path)));
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(host(gpu0.path))));
}

TEST_F(DeviceNodes, ADryRunWritesNothing) {
    remove_all_nodes();
    fs::remove_all(host("/dev/nvidia-caps"));
    const auto r = make(NodeSet::All, false, true);
    EXPECT_GT(lines_starting(r, "would be created "), 4u);
    for (const auto& n : manifest().nodes)
        if (!imex(n)) {
            EXPECT_FALSE(fs::exists(fs::symlink_status(host(n.path)))) << n.path;
        }
    EXPECT_FALSE(fs::exists(host("/dev/nvidia-caps")));
}

TEST_F(DeviceNodes, AWritableOrLinkedDirectoryIsRefusedWithNothingMade) {
    remove_all_nodes();
    fs::permissions(host("/dev"), fs::perms(0777));
    const util::Error e = test::error_of([&] { make(NodeSet::Gpus); });
    EXPECT_EQ(e.code().value(), EPERM);
    EXPECT_THAT(e.what(), HasSubstr(host("/dev").string()));
    EXPECT_THAT(e.what(), HasSubstr("writable by nobody else"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidiactl"))));
    fs::permissions(host("/dev"), fs::perms(0755));

    // nvidia-caps/ a link to elsewhere: not followed.
    TempDir elsewhere{"gpubind-device-nodes-elsewhere"};
    fs::remove_all(host("/dev/nvidia-caps"));
    fs::create_directory_symlink(elsewhere.path(), host("/dev/nvidia-caps"));
    EXPECT_THROW(make(NodeSet::All), util::Error);
    EXPECT_TRUE(fs::is_empty(elsewhere.path()));
}

TEST_F(DeviceNodes, WithoutUvmLoadedItsNodesAreLeftOutWithANote) {
    const fs::path devices = proc() / "devices";
    std::ifstream in(devices);
    std::string text, line;
    while (std::getline(in, line))
        if (line.find("nvidia-uvm") == std::string::npos) text += line + "\n";
    in.close();
    std::ofstream(devices, std::ios::trunc) << text;
    remove_all_nodes();
    const auto r = make(NodeSet::Gpus);
    EXPECT_THAT(testing::PrintToString(r.lines),
                HasSubstr("note: nvidia-uvm is not loaded (no major in " + devices.string()));
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidia-uvm"))));
    EXPECT_EQ(is_drivers(node("/dev/nvidia0")), "");
}

TEST_F(DeviceNodes, WithoutTheDriverNothingIsMade) {
    remove_all_nodes();
    fs::remove(proc() / "driver/nvidia/version");
    EXPECT_THROW(make(NodeSet::Gpus), util::Error);
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidiactl"))));
}

TEST_F(DeviceNodes, TheCliExitsFiveWhenANodeIsLeft) {
    const std::string cli = GPUBIND_CLI_PATH;
    const std::string root = this->root().string();
    remove_all_nodes();
    auto r = test::run(cli + " setup --device-nodes --simulated-proc --root " + root + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_THAT(r.text, HasSubstr("created " + host("/dev/nvidia0").string()));
    fs::remove(host("/dev/nvidia0"));
    ASSERT_EQ(::mknod(host("/dev/nvidia0").c_str(), S_IFCHR | 0666, ::makedev(8, 0)), 0);
    r = test::run(cli + " setup --device-nodes --simulated-proc --root " + root + " 2>&1");
    EXPECT_EQ(r.status, 5) << r.text;
    EXPECT_THAT(r.text, HasSubstr("gpubind setup: 1 device nodes are not the driver's and were "
                                  "left"));
    r = test::run(cli + " setup --device-nodes --mode 999 --simulated-proc --root " + root +
                  " 2>&1");
    EXPECT_EQ(r.status, 2) << r.text;
    EXPECT_THAT(r.text, HasSubstr("'999' is not an octal mode"));
}

// Issue 44, F6: the majors come from a real procfs only; a simulated
// node's proc (a plain file system) is read only when --simulated-proc says
// so, and refused in one line with nothing made otherwise.
TEST_F(DeviceNodes, AProcThatIsNotProcfsIsReadOnlyWhenSaidToBeSimulated) {
    remove_all_nodes();
    const std::string cli =
        std::string(GPUBIND_CLI_PATH) + " setup --device-nodes --root " + root().string();
    auto r = test::run(cli + " 2>&1");
    EXPECT_EQ(r.status, 4) << r.text;
    EXPECT_THAT(r.text, HasSubstr((proc() / "devices").string() + ": is not on procfs"));
    EXPECT_THAT(r.text, HasSubstr("--simulated-proc"));
    EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), 1) << r.text;
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidiactl"))));
    r = test::run(cli + " --simulated-proc 2>&1");
    EXPECT_EQ(r.status, 0) << r.text;
    EXPECT_EQ(is_drivers(node("/dev/nvidiactl")), "");
    // This machine's /proc is procfs: it gets as far as the driver's files.
    DeviceNodeOptions o;
    o.dry_run = true;
    const util::Error e = test::error_of([&] { make_device_nodes(root(), "/proc", o); });
    EXPECT_THAT(e.what(), HasSubstr("/proc/driver/nvidia/version"));
}

// Issue 44, F6: a node is never made on a major that another driver holds
// in /proc/devices, nor on a fixed major of the kernel's (1 is mem's:
// nvidia-uvm-tools as c 1:1 would be /dev/mem, mode 0666).
TEST_F(DeviceNodes, AMajorThatIsNotTheDriversIsRefusedWithNothingMade) {
    const fs::path devices = proc() / "devices";
    const std::string uvm_line = fmt::format("{:3} nvidia-uvm\n", node("/dev/nvidia-uvm").major);
    std::stringstream was;
    was << std::ifstream(devices).rdbuf();
    ASSERT_NE(was.str().find(uvm_line), std::string::npos) << was.str();
    const struct {
        std::string from, to, why;
    } cases[] = {
        {uvm_line, "  1 nvidia-uvm\n", "major 1 is mem's in " + devices.string()},
        {"  1 mem\n", "", "major 1 is a fixed major of the kernel's (mem)"},
    };
    std::string text = was.str();
    remove_all_nodes();
    for (const auto& c : cases) {
        SCOPED_TRACE(c.to);
        ASSERT_NE(text.find(c.from), std::string::npos) << text;
        text.replace(text.find(c.from), c.from.size(), c.to);
        std::ofstream(devices, std::ios::trunc) << text;
        const util::Error e = test::error_of([&] { make(NodeSet::Control); });
        EXPECT_EQ(e.kind(), util::ErrorKind::Refused);
        EXPECT_THAT(e.what(), HasSubstr(host("/dev/nvidia-uvm").string() + ": " + c.why));
        EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidia-uvm-tools"))));
        EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidiactl"))));
    }
}

// --load-modules runs the given modprobe for each module, in a clean
// environment, before it reads the driver's procfs; a module that does not
// load stops it with nothing made.
TEST_F(DeviceNodes, LoadModulesRunsModprobeFirstAndStopsWhenItFails) {
    const std::string cli = GPUBIND_CLI_PATH;
    const std::string root = this->root().string();
    TempDir bin{"gpubind-device-nodes-bin"};
    const fs::path calls = bin.path() / "calls";
    const fs::path modprobe = bin.path() / "modprobe";
    std::ofstream(modprobe) << "#!/bin/sh\necho \"$1 $(env | grep -c SECRET)\" >> "
                            << calls.string()
                            << "\n[ \"$1\" != nvidia-uvm ] || exit ${FAIL_UVM:-0}\n";
    fs::permissions(modprobe, fs::perms(0755));
    remove_all_nodes();

    auto r = test::run("SECRET=1 " + cli + " setup --device-nodes --load-modules --modprobe " +
                       modprobe.string() + " --simulated-proc --root " + root + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.text;
    std::ifstream in(calls);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), "nvidia 0\nnvidia-uvm 0\n");
    EXPECT_EQ(is_drivers(node("/dev/nvidia0")), "");

    remove_all_nodes();
    std::ofstream(modprobe, std::ios::trunc) << "#!/bin/sh\n[ \"$1\" != nvidia-uvm ] || exit 3\n";
    r = test::run(cli + " setup --device-nodes --load-modules --modprobe " + modprobe.string() +
                  " --simulated-proc --root " + root + " 2>&1");
    EXPECT_EQ(r.status, 1) << r.text;
    EXPECT_THAT(r.text, HasSubstr("load module nvidia-uvm"));
    EXPECT_THAT(r.text, HasSubstr(modprobe.string() + " exited with 3"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(host("/dev/nvidia0"))));
}

}  // namespace
