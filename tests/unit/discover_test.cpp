// gpubind info and list, run as users run them, on simulated nodes of several
// shapes. The truth is each node's own manifest, never gpubind's output.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <set>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/sim/sim.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Output {
    int code;
    std::string out;
};

Output cli(const std::string& args) {
    const char* exe = std::getenv("GPUBIND_CLI");
    std::string cmd = std::string(exe ? exe : GPUBIND_CLI_PATH) + " " + args + " 2>&1";
    auto o = test::run(cmd);
    return {o.status, std::move(o.text)};
}

json cli_json(const std::string& args) {
    auto o = cli(args);
    EXPECT_EQ(o.code, 0) << o.out;
    return json::parse(o.out);
}

using Item = std::tuple<std::string, std::string, bool>;  // name, host path, compat32

class Shape : public test::SimNodeTestWithParam<sim::Spec> {
  protected:
    Shape() : test::SimNodeTestWithParam<sim::Spec>("gpubind-shape") {
        node_options().spec(GetParam());
    }

    std::string root_arg() const { return "--root " + root().string(); }
    std::string host(const std::string& p) const {
        return (root() / fs::path(p).relative_path()).string();
    }

    // The manifest's files of `kind` brought by any of `caps`.
    std::set<Item> expected(const std::string& kind, const std::set<std::string>& caps,
                            bool compat32) const {
        std::set<Item> out;
        for (const auto& f : manifest().files)
            if (f.kind == kind && caps.count(f.capability) && (compat32 || !f.compat32))
                out.emplace(kind == "ipc" ? f.path : f.name,
                            host(kind == "library" ? f.real_path : f.path), f.compat32);
        return out;
    }
    static std::set<Item> listed(const json& list, const std::string& key, bool by_path) {
        std::set<Item> out;
        for (const auto& e : list[key])
            out.emplace(
                by_path ? e["path"].get<std::string>().substr(0) : e["name"].get<std::string>(),
                e[key == "libraries" ? "real_path" : "path"].get<std::string>(),
                e.value("compat32", false));
        return out;
    }
    std::set<Item> listed_ipcs(const json& list) const {
        std::set<Item> out;
        for (const auto& e : list["ipcs"])
            out.emplace(e["name"].get<std::string>(), e["path"].get<std::string>(), false);
        return out;
    }
};

const std::set<std::string> kAll = {"utility", "compute", "video", "graphics", "display", "ngx"};

TEST_P(Shape, InfoShowsTheNodesGpus) {
    json info = cli_json("info --json " + root_arg());
    EXPECT_EQ(info["schema"], "gpubind.info/v1");
    EXPECT_EQ(info["driver_version"], manifest().spec.driver_version);
    EXPECT_EQ(info["cuda_version"], manifest().cuda_version);
    ASSERT_EQ(info["gpus"].size(), manifest().gpus.size());
    for (const auto& g : manifest().gpus) {
        const auto& j = info["gpus"][g.index];
        EXPECT_EQ(j["minor"], g.minor);
        EXPECT_EQ(j["uuid"], g.uuid);
        EXPECT_EQ(j["pci_bus_id"], g.pci_bus_id);
        EXPECT_EQ(j["model"], g.model);
        EXPECT_EQ(j["brand"], g.brand);
        EXPECT_EQ(j["compute_capability"], g.compute_capability);
        EXPECT_EQ(j["device"]["host_path"], host("/dev/nvidia" + std::to_string(g.minor)));
        // The memory NVML reports: the model's "<N>GB" in GiB, else 80 (lib/fake/fake_node.h).
        std::smatch gb;
        const std::uint64_t gib = std::regex_search(g.model, gb, std::regex("\\b([0-9]+)GB\\b"))
                                      ? std::stoull(gb[1])
                                      : 80;
        EXPECT_EQ(j["memory"], gib << 30) << g.model;
    }
    // The driver's per-cgroup memory limit where the fake NVML offers it.
    if (manifest().spec.memory_limits) {
        EXPECT_EQ(info["shares"]["enforced_by"], "the driver's per-cgroup memory limit");
        EXPECT_EQ(info["shares"]["why"], "");
    } else {
        EXPECT_EQ(info["shares"]["enforced_by"], nullptr);
        EXPECT_THAT(info["shares"]["why"].get<std::string>(),
                    ::testing::HasSubstr("the driver offers no per-cgroup memory limit"));
    }
    std::set<std::tuple<unsigned, unsigned, unsigned, std::string>> want, got;
    for (const auto& m : manifest().migs) want.emplace(m.gpu, m.gi, m.ci, m.uuid);
    for (const auto& g : info["gpus"])
        for (const auto& m : g["mig"])
            got.emplace(g["index"], m["gpu_instance"], m["compute_instance"], m["uuid"]);
    EXPECT_EQ(got, want);
    // IMEX channels: the manifest's channel nodes, with their numbers.
    std::set<std::tuple<unsigned, std::string, unsigned, unsigned>> want_imex, got_imex;
    for (const auto& n : manifest().nodes)
        if (n.path.rfind("/dev/nvidia-caps-imex-channels/", 0) == 0)
            want_imex.emplace(n.minor, host(n.path), n.major, n.minor);
    for (const auto& c : info["imex_channels"])
        got_imex.emplace(c["channel"], c["host_path"], c["major"], c["minor"]);
    EXPECT_EQ(got_imex, want_imex);
    EXPECT_EQ(want_imex.size(), manifest().spec.imex_channels);
    auto text = cli("info " + root_arg());
    EXPECT_EQ(text.code, 0) << text.out;
    if (manifest().spec.imex_channels > 0) {
        EXPECT_THAT(text.out,
                    ::testing::HasSubstr("IMEX channels:    0-" +
                                         std::to_string(manifest().spec.imex_channels - 1) + "\n"));
    } else {
        EXPECT_THAT(text.out, ::testing::Not(::testing::HasSubstr("IMEX")));
    }
}

TEST_P(Shape, ListsExactlyWhatTheNodeHolds) {
    json all = cli_json("list --json --compat32 " + root_arg());
    EXPECT_EQ(all["schema"], "gpubind.list/v1");
    EXPECT_EQ(listed(all, "libraries", false), expected("library", kAll, true));
    EXPECT_EQ(listed(all, "binaries", false), expected("binary", kAll, false));
    EXPECT_EQ(listed(all, "firmware", true).size(), expected("firmware", kAll, false).size());
    std::set<std::string> ipc_paths, want_ipcs;
    for (const auto& e : all["ipcs"]) ipc_paths.insert(e["path"].get<std::string>());
    // The node's IPCs the default catalog lists (the MPS directory only when
    // a config lists it: it is mounted read-write).
    std::set<std::string> configured;
    for (const auto& e : config::default_config().catalog.ipcs) configured.insert(e.name);
    EXPECT_FALSE(configured.count("/tmp/nvidia-mps"));
    for (const auto& f : manifest().files)
        if (f.kind == "ipc" && configured.count(f.path)) want_ipcs.insert(host(f.path));
    EXPECT_EQ(ipc_paths, want_ipcs);
    std::set<std::string> fw_paths, want_fw;
    for (const auto& e : all["firmware"]) fw_paths.insert(e["path"].get<std::string>());
    for (const auto& f : manifest().files)
        if (f.kind == "firmware") want_fw.insert(host(f.path));
    EXPECT_EQ(fw_paths, want_fw);

    // Devices: the control nodes and every GPU, with the node's numbers.
    std::set<std::tuple<std::string, unsigned, unsigned>> want_dev, got_dev;
    for (const auto& n : manifest().nodes)
        if (n.path.rfind("/dev/nvidia-caps/", 0) != 0)
            want_dev.emplace(host(n.path), n.major, n.minor);
    for (const auto& d : all["devices"]) got_dev.emplace(d["host_path"], d["major"], d["minor"]);
    EXPECT_EQ(got_dev, want_dev);
}

TEST_P(Shape, SelectionFlagsNarrowTheList) {
    json compute = cli_json("list --json -l -c compute " + root_arg());
    EXPECT_EQ(listed(compute, "libraries", false), expected("library", {"compute"}, false));
    EXPECT_TRUE(compute["devices"].empty());
    EXPECT_TRUE(compute["binaries"].empty());
    json no32 = cli_json("list --json -l " + root_arg());
    EXPECT_EQ(listed(no32, "libraries", false), expected("library", kAll, false));

    // Text output: one host path a line, libraries as their versioned files.
    auto text = cli("list -l -c utility " + root_arg());
    ASSERT_EQ(text.code, 0);
    for (const auto& f : manifest().files) {
        if (f.kind == "library" && f.capability == "utility" && !f.compat32) {
            EXPECT_THAT(text.out, ::testing::HasSubstr(host(f.real_path) + "\n"));
        }
    }

    // One GPU by UUID: the control nodes and that GPU only.
    const auto& last = manifest().gpus.back();
    json one = cli_json("list --json -d " + last.uuid + " " + root_arg());
    std::set<std::string> gpu_nodes;
    for (const auto& d : one["devices"])
        if (std::string(d["path"]).find_first_of("0123456789") != std::string::npos &&
            d["major"] == 195 && d["minor"] < 254)
            gpu_nodes.insert(d["path"].get<std::string>());
    EXPECT_EQ(gpu_nodes, std::set<std::string>{"/dev/nvidia" + std::to_string(last.minor)});
}

TEST_P(Shape, MigDevicesBringTheirCapabilityNodes) {
    for (const auto& m : manifest().migs) {
        unsigned index = 0;  // position among the parent's MIG devices, by (gi, ci)
        for (const auto& o : manifest().migs)
            if (o.gpu == m.gpu && std::tie(o.gi, o.ci) < std::tie(m.gi, m.ci)) ++index;
        for (const std::string& id :
             {std::to_string(m.gpu) + ":" + std::to_string(index), m.uuid}) {
            json l = cli_json("list --json -d " + id + " " + root_arg());
            std::set<unsigned> caps;
            for (const auto& d : l["devices"])
                if (std::string(d["path"]).rfind("/dev/nvidia-caps/", 0) == 0)
                    caps.insert(d["minor"].get<unsigned>());
            EXPECT_EQ(caps, (std::set<unsigned>{m.gi_cap_minor, m.ci_cap_minor})) << id;
        }
    }
}

sim::Spec spec(unsigned gpus, bool compat32, bool graphics, bool ipcs_firmware,
               std::vector<sim::MigSpec> mig = {}, std::string version = "550.54.15",
               unsigned imex_channels = 0, std::string prefix = {}) {
    sim::Spec s;
    s.prefix = std::move(prefix);
    s.imex_channels = imex_channels;
    s.gpus = gpus;
    s.compat32 = compat32;
    s.graphics = graphics;
    s.ipcs = s.firmware = ipcs_firmware;
    s.mig = std::move(mig);
    s.driver_version = std::move(version);
    return s;
}

INSTANTIATE_TEST_SUITE_P(
    Nodes, Shape,
    ::testing::Values(spec(1, true, true, true), spec(8, true, true, true),
                      spec(8, false, false, false, {}, "535.183.01"),
                      spec(2, true, true, true, {{0, 1, 0}, {0, 2, 0}, {1, 3, 1}}),
                      spec(4, false, true, false, {{3, 7, 0}}, "580.65.06"),
                      spec(2, false, false, true, {{1, 2, 0}}, "570.86.15", 4),
                      // A GPU sandbox's layout: the driver in its own prefix and
                      // shell wrappers in /usr/bin; the programs are the prefix's.
                      spec(2, true, true, true, {}, "580.159.04", 0, "usr/local/nvidia"),
                      // A driver offering the per-cgroup GPU memory limit.
                      [] {
                          sim::Spec s = spec(2, true, true, true);
                          s.memory_limits = true;
                          return s;
                      }()));

// A wrapper script with no driver program behind it is not given (a
// container would get a script naming a path it lacks), and the node says so.
TEST(Discover, AWrapperScriptIsNotADriverProgram) {
    test::TempDir dir("gpubind-wrapper");
    sim::Spec s;
    s.gpus = 1;
    s.prefix = "usr/local/nvidia";
    sim::simulate(dir.path(), s);
    fs::remove(dir.path() / "usr/local/nvidia/bin/nvidia-smi");
    const std::string root = "--root " + dir.path().string();
    const json list = cli_json("list --json -b " + root);
    std::set<std::string> names;
    for (const auto& b : list["binaries"]) names.insert(b["name"].get<std::string>());
    EXPECT_FALSE(names.count("nvidia-smi")) << list.dump();
    EXPECT_TRUE(names.count("nvidia-debugdump")) << list.dump();
    const json info = cli_json("info --json " + root);
    EXPECT_THAT(info["warnings"].dump(),
                ::testing::HasSubstr((dir.path() / "usr/bin/nvidia-smi").string() +
                                     " is not an ELF program"));
}

// Issue 28: an ELF file at a driver program's name that no one may execute
// is not a program to give (fails with the executable-bit check skipped);
// made executable again, it is given.
TEST(Discover, ANonExecutableElfIsNotADriverProgram) {
    test::TempDir dir("gpubind-noexec");
    sim::Spec s;
    s.gpus = 1;
    sim::simulate(dir.path(), s);
    const fs::path smi = dir.path() / "usr/bin/nvidia-smi";
    ASSERT_TRUE(fs::is_regular_file(smi));
    const std::string root = "--root " + dir.path().string();
    auto listed = [&] {
        const json list = cli_json("list --json -b " + root);
        std::set<std::string> names;
        for (const auto& b : list["binaries"]) names.insert(b["name"].get<std::string>());
        return names;
    };
    fs::permissions(smi, fs::perms(0644));
    EXPECT_FALSE(listed().count("nvidia-smi"));
    EXPECT_TRUE(listed().count("nvidia-debugdump"));
    fs::permissions(smi, fs::perms(0755));
    EXPECT_TRUE(listed().count("nvidia-smi"));
}

// IMEX channels: listed with the devices, narrowed by --imex-channels; an
// odd node is left out with a warning; an unknown channel is an error naming it.
TEST(Discover, ImexChannels) {
    test::TempDir dir("gpubind-imex");
    sim::Spec s;
    s.gpus = 1;
    s.imex_channels = 3;
    const sim::Manifest m = sim::simulate(dir.path(), s);
    const std::string root = "--root " + dir.path().string();
    unsigned major = 0;
    for (const auto& n : m.nodes)
        if (n.path == "/dev/nvidia-caps-imex-channels/channel0") major = n.major;
    ASSERT_NE(major, 0u);
    auto channels_listed = [&](const std::string& args) {
        std::set<std::pair<std::string, unsigned>> out;
        const json list = cli_json("list --json " + args + " " + root);
        for (const auto& d : list["devices"])
            if (d.contains("imex_channel")) {
                EXPECT_EQ(d["major"], major);
                EXPECT_EQ(d["minor"], d["imex_channel"]);
                out.emplace(d["path"], d["imex_channel"]);
            }
        return out;
    };
    const std::string ch = "/dev/nvidia-caps-imex-channels/channel";
    EXPECT_EQ(channels_listed(""), (std::set<std::pair<std::string, unsigned>>{
                                       {ch + "0", 0}, {ch + "1", 1}, {ch + "2", 2}}));
    EXPECT_EQ(channels_listed("--imex-channels 2,0"),
              (std::set<std::pair<std::string, unsigned>>{{ch + "0", 0}, {ch + "2", 2}}));
    EXPECT_TRUE(channels_listed("--imex-channels none").empty());
    auto text = cli("list --imex-channels 1 " + root);
    EXPECT_EQ(text.code, 0) << text.out;
    EXPECT_THAT(text.out, ::testing::HasSubstr(
                              (dir / "dev/nvidia-caps-imex-channels/channel1").string() + "\n"));
    EXPECT_THAT(text.out, ::testing::Not(::testing::HasSubstr("channel0")));

    auto missing = cli("list --imex-channels 7 " + root);
    EXPECT_EQ(missing.code, 3) << missing.out;
    EXPECT_EQ(missing.out,
              "gpubind: select IMEX channel 7: no /dev/nvidia-caps-imex-channels/channel7 "
              "on this node (it has channel 0, 1, 2)\n");
    EXPECT_EQ(cli("list --imex-channels x " + root).code, 3);

    // A node with the wrong minor, and a stray entry: left out, the rest stays.
    const fs::path bad = dir / "dev/nvidia-caps-imex-channels/channel1";
    fs::remove(bad);
    ASSERT_EQ(::mknod(bad.c_str(), S_IFCHR | 0666, makedev(major, 5)), 0);
    std::ofstream(dir / "dev/nvidia-caps-imex-channels/README") << "not a channel\n";
    EXPECT_EQ(channels_listed(""),
              (std::set<std::pair<std::string, unsigned>>{{ch + "0", 0}, {ch + "2", 2}}));
    json info = cli_json("info --json " + root);
    std::string warnings = info["warnings"].dump();
    EXPECT_THAT(warnings, ::testing::HasSubstr(bad.string()));
    EXPECT_THAT(warnings, ::testing::HasSubstr("README"));
    EXPECT_EQ(cli("list --imex-channels 1 " + root).code, 3);

    // Without the driver's major in proc/devices there is no channel at all.
    std::string devices;
    {
        std::ifstream in(dir / "proc/devices");
        std::string line;
        while (std::getline(in, line))
            if (line.find("nvidia-caps-imex-channels") == std::string::npos) devices += line + "\n";
    }
    std::ofstream(dir / "proc/devices", std::ios::trunc) << devices;
    EXPECT_TRUE(channels_listed("").empty());
}

TEST(Discover, MissingOptionalFilesAreLeftOutAndCorruptionIsAnError) {
    test::TempDir dir("gpubind-broken");
    sim::simulate(dir.path(), sim::Spec{});
    const std::string root = "--root " + dir.path().string();
    fs::remove(dir / "dev/nvidia-modeset");
    fs::remove(dir / "run/nvidia-persistenced/socket");
    auto o = cli("list " + root);
    ASSERT_EQ(o.code, 0) << o.out;
    EXPECT_THAT(o.out, ::testing::Not(::testing::HasSubstr("nvidia-modeset")));
    EXPECT_THAT(o.out, ::testing::Not(::testing::HasSubstr("persistenced/socket")));

    // A GPU whose node is missing is an error naming it.
    fs::remove(dir / "dev/nvidia3");
    o = cli("list " + root);
    EXPECT_EQ(o.code, 1);
    EXPECT_EQ(o.out, "gpubind: stat device node " + (dir / "dev/nvidia3").string() +
                         ": No such file or directory\n");

    // A device node with the wrong numbers is refused.
    ASSERT_EQ(::mknod((dir / "dev/nvidia3").c_str(), S_IFCHR | 0666, makedev(195, 9)), 0);
    o = cli("list " + root);
    EXPECT_EQ(o.code, 3);
    EXPECT_THAT(o.out, ::testing::HasSubstr("is 195:9, expected 195:3"));

    // A truncated cache: exit 3, one line naming the file.
    fs::remove(dir / "dev/nvidia3");
    ASSERT_EQ(::mknod((dir / "dev/nvidia3").c_str(), S_IFCHR | 0666, makedev(195, 3)), 0);
    fs::resize_file(dir / "etc/ld.so.cache", 100);
    o = cli("list " + root);
    EXPECT_EQ(o.code, 3);
    EXPECT_THAT(o.out, ::testing::StartsWith("gpubind: parse ld.so.cache " +
                                             (dir / "etc/ld.so.cache").string() + ": "));
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1);
}

}  // namespace
}  // namespace gpubind
