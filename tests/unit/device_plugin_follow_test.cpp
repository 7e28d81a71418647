// gpubind-device-plugin follows the node's driver state without a restart
// when a MIG change changes the set of resources it offers (issue 47): the
// mixed strategy's "<domain>/mig-<profile>" resource appears when MIG devices
// are made (served on its own socket and registered with the kubelet), and
// stops being served (its socket removed) when they are gone.
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_plugin_fixture.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/sim/sim.hpp"

namespace gpubind {
namespace {

namespace api = ::v1beta1;
using ::testing::ElementsAre;
using namespace std::chrono_literals;

class DevicePluginFollows : public dp_test::DevicePlugin {
  protected:
    // The node simulated again, with `mig` (the same GPUs and driver).
    void remake(std::vector<sim::MigSpec> mig) {
        sim::Spec spec;
        spec.gpus = 2;
        spec.mig = std::move(mig);
        auto m = sim::simulate(node_dir_.path(), spec);
        std::lock_guard lock(mu_);
        manifest_ = std::move(m);
    }
    // The ids of the list the plugin at `socket` sends first.
    std::vector<std::string> ids_at(const std::string& socket) {
        settings_.socket_name = socket;
        connect();
        Watch w(*stub_);
        std::vector<std::string> out;
        const auto list = w.next();
        if (!list) return {"(no list)"};
        for (const auto& d : list->devices()) out.push_back(d.id());
        return out;
    }
    // Waits until `pred` holds (health checks every 100 ms), at most 10 s.
    template <typename Pred>
    static bool eventually(Pred pred) {
        for (int i = 0; i < 100; ++i) {
            if (pred()) return true;
            std::this_thread::sleep_for(100ms);
        }
        return pred();
    }
    // The plugin follows the node as its description has it now. Its MIG devices' UUIDs (what
    // the description asks NVML for) are the manifest's: the fake NVML, held
    // open by the plugin, shows the MIG devices of when it was first opened.
    void follow() {
        refresh_ = [this]() -> std::optional<node::Node> {
            node::DiscoverOptions o;
            o.nvml = false;
            node::Node n = node::discover(config_, o);
            std::lock_guard lock(mu_);
            for (auto& g : n.gpus)
                for (auto& m : g.mig)
                    for (const auto& mm : manifest_.migs)
                        if (mm.gpu == g.index && mm.gi == m.gi && mm.ci == m.ci) m.uuid = mm.uuid;
            return n;
        };
    }

    std::mutex mu_;  // manifest_, between remake() and the plugin's refresh
};

TEST_F(DevicePluginFollows, MixedServesANewMigResourceAndStopsServingAGoneOne) {
    simulate("", 2);
    settings_.mig_strategy = config::MigStrategy::Mixed;
    settings_.id_strategy = config::IdStrategy::Index;
    follow();
    start();
    const std::string plain = "gpubind.sock", mig = "gpubind-mig-1g.10gb.sock";
    EXPECT_EQ(kubelet_->wait(1)->resource_name(), "nvidia.com/gpu");
    EXPECT_THAT(ids_at(plain), ElementsAre("0", "1"));

    // MIG devices made on GPU 0: a new resource, registered on its own socket.
    remake({{0, 1, 0}, {0, 2, 0}});
    const auto second = kubelet_->wait(2);
    ASSERT_TRUE(second) << "the new resource was not registered";
    // An H100 80GB's smallest MIG profile is 1g.10gb.
    EXPECT_EQ(second->resource_name(), "nvidia.com/mig-1g.10gb");
    EXPECT_EQ(second->endpoint(), mig);
    EXPECT_THAT(ids_at(mig), ElementsAre("0:0", "0:1"));
    EXPECT_THAT(ids_at(plain), ElementsAre("1"));

    // MIG gone again: its resource is no longer served (its socket removed).
    remake({});
    EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(plugin_dir_.path() / mig); }))
        << mig << " is still served";
    EXPECT_TRUE(eventually([&] { return ids_at(plain) == std::vector<std::string>{"0", "1"}; }));

    // And back: served and registered again.
    remake({{1, 1, 0}});
    const auto third = kubelet_->wait(3);
    ASSERT_TRUE(third) << "the resource back was not registered again";
    EXPECT_EQ(third->resource_name(), "nvidia.com/mig-1g.10gb");
    EXPECT_THAT(ids_at(mig), ElementsAre("1:0"));
}

// single: whole GPUs, then every GPU in MIG mode: the same resource lists
// the MIG devices instead, on the open stream.
TEST_F(DevicePluginFollows, SingleListsTheMigDevicesWhenTheNodeTurnsToMig) {
    simulate("", 2);
    settings_.mig_strategy = config::MigStrategy::Single;
    settings_.id_strategy = config::IdStrategy::Index;
    follow();
    start();
    Watch w(*stub_);
    const auto ids = [](const std::optional<api::ListAndWatchResponse>& l) {
        std::vector<std::string> out;
        if (!l) return std::vector<std::string>{"(no list)"};
        for (const auto& d : l->devices()) out.push_back(d.id());
        return out;
    };
    EXPECT_THAT(ids(w.next()), ElementsAre("0", "1"));
    remake({{0, 1, 0}, {1, 1, 0}, {1, 2, 0}});
    EXPECT_THAT(ids(w.next()), ElementsAre("0:0", "1:0", "1:1"));
    EXPECT_EQ(kubelet_->wait(2, 500ms), std::nullopt) << "registered again: the name is the same";
}

}  // namespace
}  // namespace gpubind
