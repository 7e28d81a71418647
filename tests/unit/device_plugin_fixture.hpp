// The device plugin's unit tests' stand-in kubelet (a Registration server
// recording every request) and their fixture: a simulated node, the plugin's
// Server on it, a DevicePlugin client over real unix sockets in temp dirs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "deviceplugin.grpc.pb.h"
#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/plugin/server.hpp"
#include "gpubind/sim/sim.hpp"
#include "temp_dir.hpp"

namespace gpubind::dp_test {

namespace api = ::v1beta1;
using namespace std::chrono_literals;

// The kubelet's Registration service, recording every request.
class Kubelet final : public api::Registration::Service {
  public:
    explicit Kubelet(const std::filesystem::path& dir, int refuse_first = 0)
        : refuse_(refuse_first) {
        grpc::ServerBuilder b;
        b.AddListeningPort("unix:" + (dir / "kubelet.sock").string(),
                           grpc::InsecureServerCredentials());
        b.RegisterService(this);
        server_ = b.BuildAndStart();
    }
    ~Kubelet() override { stop(); }
    void stop() {
        if (server_) server_->Shutdown(std::chrono::system_clock::now() + 200ms);
        server_.reset();
    }
    grpc::Status Register(grpc::ServerContext*, const api::RegisterRequest* r,
                          api::Empty*) override {
        std::lock_guard lock(mu_);
        ++attempts_;
        if (refuse_ > 0) {
            --refuse_;
            return {grpc::StatusCode::INVALID_ARGUMENT, "resource already registered"};
        }
        requests_.push_back(*r);
        cv_.notify_all();
        return grpc::Status::OK;
    }
    // Waits for the n-th accepted registration.
    std::optional<api::RegisterRequest> wait(std::size_t n, std::chrono::milliseconds limit = 10s) {
        std::unique_lock lock(mu_);
        if (!cv_.wait_for(lock, limit, [&] { return requests_.size() >= n; })) return {};
        return requests_[n - 1];
    }
    int attempts() {
        std::lock_guard lock(mu_);
        return attempts_;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<api::RegisterRequest> requests_;
    int refuse_ = 0;
    int attempts_ = 0;
    std::unique_ptr<grpc::Server> server_;
};

class DevicePlugin : public ::testing::Test {
  protected:
    void simulate(const std::string& topology = "hgx8", unsigned gpus = 0,
                  std::vector<sim::MigSpec> mig = {}, unsigned hcas = 0) {
        sim::Spec spec;
        spec.topology = topology;
        if (sim::topology_gpus(topology) != 0) spec.gpus = sim::topology_gpus(topology);
        if (topology == "pcie-pairs") spec.gpus = 8;
        if (gpus != 0) spec.gpus = gpus;
        spec.mig = std::move(mig);
        spec.hcas = hcas;
        manifest_ = sim::simulate(node_dir_.path(), spec);
        config_ = config::default_config();
        const auto d = node_dir_.path();
        config_.roots = {d, d, d / "proc", d / "sys"};
        config_.state_dir = d / "run-gpubind";
        settings_.plugin_dir = plugin_dir_.path();
        settings_.health_interval_ms = 100;
    }
    void start(bool with_kubelet = true) {
        if (with_kubelet) kubelet_ = std::make_unique<Kubelet>(plugin_dir_.path());
        server_ =
            std::make_unique<plugin::Server>(config_, settings_, node::discover(config_), refresh_);
        thread_ = std::thread([this] {
            try {
                server_->run();
            } catch (const std::exception& e) {
                ADD_FAILURE() << e.what();
            }
        });
        if (with_kubelet) {
            ASSERT_TRUE(kubelet_->wait(1));
        }
        connect();
    }
    void connect() {
        channel_ =
            grpc::CreateChannel("unix:" + socket().string(), grpc::InsecureChannelCredentials());
        stub_ = api::DevicePlugin::NewStub(channel_);
    }
    void TearDown() override {
        if (server_) server_->stop();
        if (thread_.joinable()) thread_.join();
        kubelet_.reset();
    }
    std::filesystem::path socket() const { return plugin_dir_.path() / settings_.socket_name; }

    // The first list, then each list sent after it.
    class Watch {
      public:
        explicit Watch(api::DevicePlugin::Stub& stub) {
            // A list that never comes fails the test instead of hanging it.
            context_.set_deadline(std::chrono::system_clock::now() + 10s);
            reader_ = stub.ListAndWatch(&context_, api::Empty{});
        }
        ~Watch() { context_.TryCancel(); }
        std::optional<api::ListAndWatchResponse> next() {
            api::ListAndWatchResponse r;
            if (!reader_->Read(&r)) return {};
            return r;
        }

      private:
        grpc::ClientContext context_;
        std::unique_ptr<grpc::ClientReader<api::ListAndWatchResponse>> reader_;
    };

    grpc::Status allocate(const std::vector<std::vector<std::string>>& containers,
                          api::AllocateResponse& out) {
        api::AllocateRequest r;
        for (const auto& ids : containers) {
            auto* c = r.add_container_requests();
            for (const auto& id : ids) c->add_devices_ids(id);
        }
        grpc::ClientContext ctx;
        return stub_->Allocate(&ctx, r, &out);
    }

    std::string id_of(unsigned index) const {
        return settings_.id_strategy == config::IdStrategy::Uuid ? manifest_.gpus[index].uuid
                                                                 : std::to_string(index);
    }

    // How the server reads the node again at each health check (none: never).
    std::function<std::optional<node::Node>()> refresh_;
    test::TempDir node_dir_{"gpubind-dp-node"};
    test::TempDir plugin_dir_{"gpubind-dp"};
    sim::Manifest manifest_;
    config::Config config_;
    config::DevicePluginConfig settings_;
    std::unique_ptr<Kubelet> kubelet_;
    std::unique_ptr<plugin::Server> server_;
    std::thread thread_;
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<api::DevicePlugin::Stub> stub_;
};

}  // namespace gpubind::dp_test
