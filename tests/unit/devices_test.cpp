#include <cerrno>

#include <gtest/gtest.h>

#include "gpubind/node/devices.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

node::Node make_node() {
    node::Node node;
    const char* buses[] = {"0000:1b:00.0", "0000:3b:00.0", "0000:5e:00.0"};
    for (unsigned i = 0; i < 3; ++i) {
        node::Gpu g;
        g.index = i;
        g.minor = i + 4;
        g.uuid = "GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd";
        g.pci_bus_id = buses[i];
        node.gpus.push_back(g);
    }
    for (unsigned m = 0; m < 2; ++m) {
        node::MigDevice mig;
        mig.gpu_index = 2;
        mig.index = m;
        mig.gi = m + 1;
        mig.uuid = "MIG-1111111" + std::to_string(m) + "-aaaa-bbbb-cccc-dddddddddddd";
        node.gpus[2].mig.push_back(mig);
    }
    return node;
}

std::vector<unsigned> indices(const node::Selection& s) {
    std::vector<unsigned> out;
    for (const auto* g : s.gpus) out.push_back(g->index);
    return out;
}

TEST(DeviceIds, SpecialValues) {
    EXPECT_EQ(node::parse_device_ids("").kind, node::DeviceIdsKind::Void);
    EXPECT_EQ(node::parse_device_ids("  void ").kind, node::DeviceIdsKind::Void);
    EXPECT_EQ(node::parse_device_ids(",,").kind, node::DeviceIdsKind::Void);
    EXPECT_EQ(node::parse_device_ids("none").kind, node::DeviceIdsKind::None);
    EXPECT_EQ(node::parse_device_ids("all").kind, node::DeviceIdsKind::All);
    EXPECT_EQ(node::parse_device_ids("0,all").kind, node::DeviceIdsKind::All);
}

TEST(DeviceIds, ListsAreTrimmedAndDeduplicatedInOrder) {
    auto ids = node::parse_device_ids(" 2, 0 ,2,,GPU-x ");
    EXPECT_EQ(ids.kind, node::DeviceIdsKind::List);
    EXPECT_EQ(ids.ids, (std::vector<std::string>{"2", "0", "GPU-x"}));
}

TEST(SelectDevices, EverySyntaxNamesTheSameGpu) {
    node::Node node = make_node();
    for (const char* id : {"1", "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",
                           "gpu-00000001-AAAA-bbbb-cccc-dddddddddddd", "0000:3b:00.0",
                           "00000000:3B:00.0", "3b:00.0"}) {
        SCOPED_TRACE(id);
        EXPECT_EQ(indices(node::select_devices(node, node::parse_device_ids(id))),
                  std::vector<unsigned>{1});
    }
}

TEST(SelectDevices, ListIsInNodeOrderWithoutDuplicates) {
    node::Node node = make_node();
    auto sel = node::select_devices(node, node::parse_device_ids("2,0,0000:1b:00.0"));
    EXPECT_EQ(indices(sel), (std::vector<unsigned>{0, 2}));
    EXPECT_EQ(indices(node::select_devices(node, node::parse_device_ids("all"))),
              (std::vector<unsigned>{0, 1, 2}));
    EXPECT_TRUE(node::select_devices(node, node::parse_device_ids("none")).empty());
}

TEST(SelectDevices, MigByIndexPairAndUuid) {
    node::Node node = make_node();
    auto sel = node::select_devices(
        node, node::parse_device_ids("2:1,MIG-11111110-aaaa-bbbb-cccc-dddddddddddd"));
    ASSERT_EQ(sel.migs.size(), 2u);
    EXPECT_EQ(sel.migs[0]->index, 0u);
    EXPECT_EQ(sel.migs[1]->index, 1u);
    EXPECT_TRUE(sel.gpus.empty());
}

TEST(SelectDevices, UnknownIdsAreErrorsNamingThem) {
    node::Node node = make_node();
    auto message = [&](const char* ids) -> std::string {
        try {
            node::select_devices(node, node::parse_device_ids(ids));
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
            return e.what();
        }
        return "no error";
    };
    EXPECT_EQ(message("0,7"), "select device 7: no GPU with this index (the node has 3)");
    EXPECT_EQ(message("GPU-deadbeef"), "select device GPU-deadbeef: no GPU with this UUID");
    EXPECT_EQ(message("0:0"), "select device 0:0: GPU 0 has no MIG device 0");
    EXPECT_EQ(message("0000:99:00.0"), "select device 0000:99:00.0: no GPU at this PCI bus id");
    EXPECT_EQ(message("MIG-nope"), "select device MIG-nope: no MIG device with this UUID");
    EXPECT_NE(message("banana").find("select device banana: not a device id"), std::string::npos);
}

TEST(SelectImexChannels, AllNumbersAndMissingOnes) {
    node::Node node = make_node();
    for (unsigned n : {0u, 2u, 5u}) {
        node::DeviceNode c;
        c.path = "/dev/nvidia-caps-imex-channels/channel" + std::to_string(n);
        c.major = 508;
        c.minor = n;
        node.imex_channels.push_back(c);
    }
    auto minors = [&](const std::vector<std::string>& asked) {
        std::vector<unsigned> out;
        for (const auto* c : node::select_imex_channels(node, asked)) out.push_back(c->minor);
        return out;
    };
    EXPECT_EQ(minors({}), std::vector<unsigned>{});
    EXPECT_EQ(minors({"all"}), (std::vector<unsigned>{0, 2, 5}));
    EXPECT_EQ(minors({"5", "0", "5"}), (std::vector<unsigned>{5, 0}));
    try {
        node::select_imex_channels(node, {"0", "3"});
        ADD_FAILURE() << "channel 3 selected";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EINVAL);
        EXPECT_EQ(std::string(e.what()),
                  "select IMEX channel 3: no /dev/nvidia-caps-imex-channels/channel3 on this node "
                  "(it has channel 0, 2, 5)");
    }
    node.imex_channels.clear();
    EXPECT_TRUE(node::select_imex_channels(node, {"all"}).empty());
    EXPECT_THROW(node::select_imex_channels(node, {"0"}), util::Error);
}

}  // namespace
}  // namespace gpubind
