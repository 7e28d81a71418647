// The node description (description.hpp): computed once per driver state,
// never trusted when the driver state changed or the file is not what
// gpubind wrote. Expectations come from the simulated node's manifest.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <chrono>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"
#include "sim_node.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Description : public test::SimNodeTest {
  protected:
    Description() : test::SimNodeTest("gpubind-description") {
        node_options().gpus(2);
        config().state_dir = dir() / "state";
    }

    fs::path file() const { return node::description_path(config()); }

    using test::SimNodeTest::simulate;
    // The node again, with this driver version and these MIG devices.
    void simulate(const std::string& version, std::vector<sim::MigSpec> mig = {}) {
        node_options().driver_version(version).mig(std::move(mig));
        simulate();
    }

    node::NodeKnowledge load(bool need_nvml = false) {
        node::LoadOptions options;
        options.need_nvml = need_nvml;
        options.nvml_timeout = std::chrono::milliseconds(1500);
        return knowledge(options);
    }

    std::string read() const {
        std::ifstream in(file(), std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }
    void write(const fs::path& path, const std::string& text) const {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    }

    // The slow NVML's switches (lib/fake/nvml.c): initialisations are counted.
    void count_nvml(int delay_ms = 0) const {
        fs::create_directories(root() / "gpubind-fake-nvml");
        write(root() / "gpubind-fake-nvml/inits", "");
        if (delay_ms) write(root() / "gpubind-fake-nvml/delay-ms", std::to_string(delay_ms));
    }
    std::size_t nvml_inits() const {
        std::ifstream in(root() / "gpubind-fake-nvml/inits");
        std::size_t n = 0;
        for (std::string line; std::getline(in, line);) ++n;
        return n;
    }

    // Each GPU's UUID as the manifest has it, and as the knowledge does.
    std::vector<std::string> manifest_uuids() const {
        std::vector<std::string> out;
        for (const auto& g : manifest().gpus) out.push_back(g.uuid);
        return out;
    }
    static std::vector<std::string> uuids(const node::NodeKnowledge& k) {
        std::vector<std::string> out;
        for (const auto& g : k.node.gpus) out.push_back(g.uuid);
        return out;
    }
};

TEST_F(Description, ComputedOnceThenRead) {
    auto first = load();
    EXPECT_TRUE(first.recomputed);
    EXPECT_TRUE(first.stored);
    EXPECT_EQ(first.node.driver_version, manifest().spec.driver_version);
    EXPECT_EQ(uuids(first), manifest_uuids());

    auto second = load();
    EXPECT_FALSE(second.recomputed) << second.why;
    EXPECT_EQ(second.node.driver_version, manifest().spec.driver_version);
    EXPECT_EQ(uuids(second), manifest_uuids());
    ASSERT_EQ(second.node.files.size(), first.node.files.size());
    for (std::size_t i = 0; i < first.node.files.size(); ++i) {
        EXPECT_EQ(second.node.files[i].host_path, first.node.files[i].host_path);
        EXPECT_EQ(second.node.files[i].caps, first.node.files[i].caps);
    }
    EXPECT_EQ(second.node.control.size(), first.node.control.size());
    EXPECT_EQ(second.proc.version, first.proc.version);
    EXPECT_EQ(second.proc.information, first.proc.information);
}

TEST_F(Description, TheFileIsRootsAndReadableByAll) {
    load();
    struct stat st {};
    ASSERT_EQ(::lstat(file().c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0644u);
    EXPECT_EQ(st.st_uid, 0u);
    ASSERT_EQ(::lstat(config().state_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0755u);
    // Nothing else left in the directory (no temporary file).
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(config().state_dir)) ++entries;
    EXPECT_EQ(entries, 1u);
}

TEST_F(Description, DriverUpgradeIsSeen) {
    load();
    simulate("560.35.03");
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("driver state changed"));
    EXPECT_EQ(k.node.driver_version, "560.35.03");
    EXPECT_EQ(uuids(k), manifest_uuids());
    for (const auto& f : k.node.files) {
        if (f.kind == node::FileKind::Library) {
            EXPECT_THAT(f.real_path, HasSubstr("560.35.03")) << f.name;
        }
    }
    EXPECT_FALSE(load().recomputed);
}

TEST_F(Description, MigLayoutChangeIsSeen) {
    simulate("550.54.15", {{0, 1, 0}});
    load(true);
    simulate("550.54.15", {{0, 2, 0}, {1, 3, 1}});
    auto k = load(true);
    EXPECT_TRUE(k.recomputed);
    ASSERT_EQ(manifest().migs.size(), 2u);
    for (const auto& m : manifest().migs) {
        const auto& gpu = k.node.gpus.at(m.gpu);
        ASSERT_EQ(gpu.mig.size(), 1u);
        EXPECT_EQ(gpu.mig[0].gi, m.gi);
        EXPECT_EQ(gpu.mig[0].ci, m.ci);
        EXPECT_EQ(gpu.mig[0].uuid, m.uuid);
        EXPECT_EQ(gpu.mig[0].ci_cap.minor, m.ci_cap_minor);
    }
}

// A GPU gone from the driver (unbound, excluded): its gpus/ directory goes,
// and the description is no longer the node's.
TEST_F(Description, AGpuGoneFromTheDriverIsSeen) {
    load();
    ASSERT_EQ(manifest().gpus.size(), 2u);
    const fs::path gone = root() / "proc/driver/nvidia/gpus" / manifest().gpus[1].pci_bus_id;
    ASSERT_TRUE(fs::is_directory(gone));
    fs::remove_all(gone);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("proc"));
    EXPECT_EQ(uuids(k), std::vector<std::string>{manifest().gpus[0].uuid});
    EXPECT_FALSE(load().recomputed);
}

TEST_F(Description, ConfigChangeIsSeen) {
    load();
    config().catalog.libraries.clear();
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("config changed"));
    for (const auto& f : k.node.files) EXPECT_NE(f.kind, node::FileKind::Library) << f.name;
}

// What the node's CDI specs are made of is the config's too: a change of
// [cdi] recomputes the description (and so know_node rewrites the specs);
// the specs' readers' directories do not.
TEST_F(Description, ACdiConfigChangeIsSeen) {
    load();
    config().cdi.caps = config::kCapCompute;
    EXPECT_TRUE(load().recomputed);
    config().cdi.hook = "/opt/gpubind/bin/gpubind-hook";
    EXPECT_TRUE(load().recomputed);
    config().cdi.spec_dirs = {"/etc/cdi"};
    EXPECT_FALSE(load().recomputed);
}

TEST_F(Description, WhatOnlyAnEarlierStateWatchedIsNotKept) {
    // The same state directory for a node at another root (another config):
    // the description recomputed for it watches that node's paths only; the
    // first node's do not pile up in it (each start stats every part).
    const auto first = load();
    auto watches = [](const node::NodeKnowledge& k, const std::string& root) {
        std::size_t n = 0;
        for (const auto& [key, value] : k.fingerprint)
            if (key.find(root) != std::string::npos) ++n;
        return n;
    };
    EXPECT_GT(watches(first, root().string()), 0u);
    test::TempDir other("gpubind-description-other");
    sim::Spec spec;
    spec.gpus = 1;
    sim::simulate(other.path(), spec);
    config().roots = {other.path(), other.path(), other.path() / "proc", other.path() / "sys"};
    const auto second = load();
    EXPECT_TRUE(second.recomputed);
    EXPECT_GT(watches(second, other.path().string()), 0u);
    EXPECT_EQ(watches(second, root().string()), 0u);
    EXPECT_LE(second.fingerprint.size(), first.fingerprint.size());
    EXPECT_FALSE(load().recomputed);
}

// A library's capabilities changed in the catalog: the next load sees it.
TEST_F(Description, ACatalogCapabilityChangeIsSeen) {
    auto before = load();
    ASSERT_FALSE(config().catalog.libraries.empty());
    const config::CatalogEntry& entry = config().catalog.libraries.front();
    const std::string name = entry.name;
    const config::Capabilities caps =
        entry.caps == config::kCapDisplay ? config::kCapVideo : config::kCapDisplay;
    config().catalog.libraries.front().caps = caps;
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("config changed"));
    bool found = false;
    for (const auto& f : k.node.files)
        if (f.kind == node::FileKind::Library && f.name.rfind(name + ".", 0) == 0) {
            EXPECT_EQ(f.caps, caps) << f.name;
            found = true;
        }
    EXPECT_TRUE(found) << name;
}

// The log's settings and where device programs are kept change no fact of
// the node: no rediscovery for them.
TEST_F(Description, ALogSettingChangeIsNotARediscovery) {
    load();
    config().log.level = config().log.level == "debug" ? "info" : "debug";
    config().log.file = (dir() / "gpubind.log").string();
    config().bpf_dir = config().bpf_dir.empty() ? "/sys/fs/bpf/other" : "";
    auto k = load();
    EXPECT_FALSE(k.recomputed) << k.why;
    EXPECT_EQ(uuids(k), manifest_uuids());
}

TEST_F(Description, LdcacheRewriteIsSeen) {
    load();
    const fs::path cache = root() / "etc/ld.so.cache";
    fs::copy_file(cache, root() / "etc/ld.so.cache.new");
    fs::rename(root() / "etc/ld.so.cache.new", cache);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("ldcache"));
}

TEST_F(Description, AnIpcAppearingIsSeen) {
    fs::remove(root() / "run/nvidia-persistenced/socket");
    auto before = load();
    for (const auto& f : before.node.files)
        EXPECT_NE(f.host_path, root() / "run/nvidia-persistenced/socket");
    // The daemon starts after the first container: its socket appears.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = (root() / "run/nvidia-persistenced/socket").string();
    ASSERT_LT(path.size(), sizeof addr.sun_path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("nvidia-persistenced/socket"));
    bool found = false;
    for (const auto& f : k.node.files)
        found |= f.host_path == root() / "run/nvidia-persistenced/socket";
    EXPECT_TRUE(found);
}

// A driver in a prefix of its own: a program installed there beside the
// libraries (not in /usr/bin) is seen by the next start.
TEST_F(Description, AProgramInTheDriversOwnPrefixIsSeen) {
    sim::Spec spec;
    spec.gpus = 1;
    spec.prefix = "usr/local/nvidia";
    node_options().spec(spec);
    simulate();
    const fs::path smi = root() / "usr/local/nvidia/bin/nvidia-smi";
    const fs::path kept = root() / "nvidia-smi.kept";
    fs::rename(smi, kept);
    auto before = load();
    EXPECT_TRUE(before.recomputed);
    for (const auto& f : before.node.files) EXPECT_NE(f.name, "nvidia-smi");
    fs::rename(kept, smi);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("usr/local/nvidia/bin"));
    bool found = false;
    for (const auto& f : k.node.files) found |= f.name == "nvidia-smi" && f.host_path == smi;
    EXPECT_TRUE(found);
}

// A description whose bytes changed: the node as it is, never what the file says.
TEST_F(Description, TamperedIsNotTrusted) {
    load();
    std::string text = read();
    const std::string uuid = manifest().gpus[0].uuid;
    auto at = text.find(uuid);
    ASSERT_NE(at, std::string::npos);
    text[at + uuid.size() - 1] = text[at + uuid.size() - 1] == '0' ? '1' : '0';
    write(file(), text);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("digest"));
    EXPECT_EQ(uuids(k), manifest_uuids());
    EXPECT_FALSE(load().recomputed);  // rewritten
}

TEST_F(Description, TruncatedIsNotTrusted) {
    load();
    const std::string text = read();
    write(file(), text.substr(0, text.size() / 2));
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("truncated"));
    EXPECT_EQ(uuids(k), manifest_uuids());
    write(file(), "");
    EXPECT_TRUE(load().recomputed);
}

// A body changed and resealed with a matching digest: the decoder's own
// checks refuse it (what a bug in a writer, or a crafted file, would be).
TEST_F(Description, CorruptBodyWithAMatchingDigestIsNotTrusted) {
    load();
    const std::size_t head = node::seal_description("").size();
    const std::string body = read().substr(head);
    ASSERT_GT(body.size(), 16u);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"cut short", body.substr(0, body.size() / 2)},
        {"a byte more", body + '\0'},
        // computed_at, then a fingerprint claiming 2^32-1 parts.
        {"a huge count", body.substr(0, 8) + std::string(4, '\xff') + body.substr(12)},
        {"empty", ""},
    };
    for (const auto& [what, changed] : cases) {
        write(file(), node::seal_description(changed));
        auto k = load();
        EXPECT_TRUE(k.recomputed) << what;
        EXPECT_THAT(k.why, HasSubstr("corrupt")) << what;
        EXPECT_EQ(uuids(k), manifest_uuids()) << what;
        EXPECT_FALSE(load().recomputed) << what;  // rewritten
    }
}

// A description another gpubind wrote (the JSON file of schema 1, under this
// name) is recomputed, never misread.
TEST_F(Description, AnotherSchemaIsRecomputed) {
    load();
    write(file(), "{\"digest\":\"0000000000000000\",\"body\":{\"schema\":\"gpubind.node/1\"}}\n");
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("schema"));
    EXPECT_EQ(uuids(k), manifest_uuids());
    EXPECT_FALSE(load().recomputed);
}

TEST_F(Description, SymlinkedIsNotTrustedNorFollowed) {
    load();
    const fs::path elsewhere = dir() / "elsewhere.json";
    fs::copy_file(file(), elsewhere);
    const std::string before = read();
    fs::remove(file());
    fs::create_symlink(elsewhere, file());
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("symbolic link"));
    // The link was replaced, its target left as it was.
    EXPECT_FALSE(fs::is_symlink(fs::symlink_status(file())));
    std::ifstream in(elsewhere, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    EXPECT_EQ(s.str(), before);
}

TEST_F(Description, ForeignOwnedOrWritableIsNotTrusted) {
    load();
    ASSERT_EQ(::chown(file().c_str(), 1000, 1000), 0);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("not owned by root"));
    EXPECT_FALSE(load().recomputed);
    ASSERT_EQ(::chmod(file().c_str(), 0664), 0);
    k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("writable"));
}

TEST_F(Description, NotRegularOrOversizedIsNotTrusted) {
    load();
    fs::remove(file());
    ASSERT_EQ(::mkfifo(file().c_str(), 0644), 0);
    auto k = load();  // never waits on the FIFO
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("not a regular file"));
    EXPECT_FALSE(load().recomputed);  // replaced by a file

    std::string text = read();
    text.insert(text.size() - 2, std::string(node::kMaxDescriptionSize, ' '));
    write(file(), text);
    k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("larger than"));
}

TEST_F(Description, AnUntrustedDirectoryIsNeitherReadNorWritten) {
    fs::create_directories(config().state_dir);
    ASSERT_EQ(::chmod(config().state_dir.c_str(), 0777), 0);
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_FALSE(k.stored);
    EXPECT_FALSE(fs::exists(file()));
    EXPECT_EQ(uuids(k), manifest_uuids());
    // A file put there by someone who may write the directory is not read.
    ASSERT_EQ(::chmod(config().state_dir.c_str(), 0755), 0);
    load();
    ASSERT_EQ(::chmod(config().state_dir.c_str(), 0777), 0);
    k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_THAT(k.why, HasSubstr("writable by others"));
}

// Issue 28: a directory no one else may write but another user owns is as
// untrusted as one anyone may write (its owner can swap the file): neither
// read nor written. Fails with the owner check skipped.
TEST_F(Description, ADirectoryAnotherUserOwnsIsNeitherReadNorWritten) {
    load();  // a good description there
    ASSERT_EQ(::chown(config().state_dir.c_str(), 1000, 1000), 0);
    ASSERT_EQ(::chmod(config().state_dir.c_str(), 0755), 0);
    const std::string before = read();
    auto k = load();
    EXPECT_TRUE(k.recomputed);
    EXPECT_FALSE(k.stored);
    EXPECT_THAT(k.why, HasSubstr("not owned by root"));
    EXPECT_EQ(read(), before) << "written into another user's directory";
    EXPECT_EQ(uuids(k), manifest_uuids());
    ASSERT_EQ(::chown(config().state_dir.c_str(), 0, 0), 0);
    EXPECT_FALSE(load().recomputed);
}

TEST_F(Description, NvmlIsAskedOncePerDriverState) {
    count_nvml();
    auto plain = load(false);
    EXPECT_EQ(plain.nvml.status, node::NvmlStatus::NotAsked);
    EXPECT_EQ(nvml_inits(), 0u);
    auto asked = load(true);
    EXPECT_TRUE(asked.nvml_asked);
    EXPECT_EQ(asked.nvml.status, node::NvmlStatus::Answered);
    EXPECT_EQ(asked.node.cuda_version, manifest().cuda_version);
    EXPECT_EQ(asked.node.gpus[0].brand, manifest().gpus[0].brand);
    EXPECT_EQ(asked.node.gpus[0].compute_capability, manifest().gpus[0].compute_capability);
    for (int i = 0; i < 5; ++i) {
        auto k = load(true);
        EXPECT_FALSE(k.nvml_asked);
        EXPECT_EQ(k.node.cuda_version, manifest().cuda_version);
    }
    EXPECT_EQ(nvml_inits(), 1u);
    // A new driver state asks again, once.
    simulate("560.35.03");
    count_nvml();
    load(true);
    load(true);
    EXPECT_EQ(nvml_inits(), 1u);
}

TEST_F(Description, AHungNvmlCostsOneWaitPerDriverState) {
    count_nvml(60000);
    const auto start = std::chrono::steady_clock::now();
    auto k = load(true);
    EXPECT_EQ(k.nvml.status, node::NvmlStatus::Failed);
    EXPECT_THAT(k.nvml.error, HasSubstr("no answer within 1500 ms"));
    EXPECT_EQ(k.node.cuda_version, "");
    const auto first = std::chrono::steady_clock::now() - start;
    EXPECT_GE(first, std::chrono::milliseconds(1500));
    for (int i = 0; i < 3; ++i) {
        auto again = load(true);
        EXPECT_FALSE(again.nvml_asked);
        EXPECT_EQ(again.nvml.status, node::NvmlStatus::Failed);
    }
    EXPECT_EQ(nvml_inits(), 1u);
    // Asked on purpose (gpubind info --refresh): once more.
    node::LoadOptions refresh;
    refresh.refresh = true;
    refresh.need_nvml = true;
    refresh.nvml_timeout = std::chrono::milliseconds(300);
    auto r = node::load_node(config(), refresh);
    EXPECT_TRUE(r.recomputed);
    EXPECT_TRUE(r.nvml_asked);
    EXPECT_EQ(nvml_inits(), 2u);
}

TEST_F(Description, AReaderThatCannotWriteComputesInMemory) {
    node::LoadOptions options;
    options.write = false;
    auto k = node::load_node(config(), options);
    EXPECT_TRUE(k.recomputed);
    EXPECT_FALSE(k.stored);
    EXPECT_FALSE(fs::exists(file()));
    EXPECT_EQ(uuids(k), manifest_uuids());
}

}  // namespace
}  // namespace gpubind
