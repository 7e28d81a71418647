// The DevicePlugin service, registration and the health loop: see
// plugin/server.hpp.
#include "gpubind/plugin/server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "deviceplugin.grpc.pb.h"
#include "gpubind/plugin/plugin.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::plugin {

namespace {

namespace api = ::v1beta1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A file's identity (0, 0 when absent).
struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    bool operator==(const Identity&) const = default;
};
Identity identity(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return {};
    return {st.st_dev, st.st_ino};
}

// A gRPC status for a failure of the decisions: one line, what and why.
grpc::Status status_of(const std::exception& e) {
    if (const auto* err = dynamic_cast<const Error*>(&e)) {
        if (err->kind() == ErrorKind::Invalid)
            return {grpc::StatusCode::INVALID_ARGUMENT, err->what()};
        if (err->kind() == ErrorKind::Refused)
            return {grpc::StatusCode::FAILED_PRECONDITION, err->what()};
    }
    return {grpc::StatusCode::INTERNAL, e.what()};
}

template <typename F>
grpc::Status answer(const char* what, F&& body) {
    try {
        body();
        return grpc::Status::OK;
    } catch (const std::exception& e) {
        logger().warn("{}: {}", what, e.what());
        return status_of(e);
    }
}

std::vector<std::string> strings(const google::protobuf::RepeatedPtrField<std::string>& list) {
    return {list.begin(), list.end()};
}

}  // namespace

struct Server::State final : api::DevicePlugin::Service {
    Config config;
    DevicePluginConfig settings;
    std::function<std::optional<Node>()> refresh;

    std::mutex mu;  // guards what follows
    std::condition_variable changed;
    Node node;
    std::vector<Device> devices;
    std::uint64_t generation = 0;  // bumped when the list changes
    bool stopping = false;

    std::string socket_path() const {
        return (settings.plugin_dir / settings.socket_name).string();
    }
    std::string kubelet_path() const { return (settings.plugin_dir / kKubeletSocket).string(); }

    api::ListAndWatchResponse list_locked() const {
        api::ListAndWatchResponse r;
        for (const Device& d : devices) {
            auto* out = r.add_devices();
            out->set_id(d.id);
            out->set_health(d.healthy ? kHealthy : kUnhealthy);
            if (d.numa_node >= 0) out->mutable_topology()->add_nodes()->set_id(d.numa_node);
        }
        return r;
    }

    grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                        api::DevicePluginOptions* out) override {
        out->set_pre_start_required(false);
        out->set_get_preferred_allocation_available(true);
        return grpc::Status::OK;
    }

    grpc::Status ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                              grpc::ServerWriter<api::ListAndWatchResponse>* writer) override {
        std::unique_lock lock(mu);
        std::optional<std::uint64_t> sent;
        while (!stopping && !context->IsCancelled()) {
            if (sent != generation) {
                sent = generation;
                const auto response = list_locked();
                lock.unlock();
                if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet went
                lock.lock();
                continue;
            }
            changed.wait_for(lock, milliseconds(200));
        }
        return grpc::Status::OK;
    }

    grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                        const api::PreferredAllocationRequest* request,
                                        api::PreferredAllocationResponse* out) override {
        return answer("GetPreferredAllocation", [&] {
            std::lock_guard lock(mu);
            for (const auto& c : request->container_requests()) {
                const auto chosen =
                    preferred_allocation(node, devices, strings(c.available_deviceids()),
                                         strings(c.must_include_deviceids()), c.allocation_size());
                auto* r = out->add_container_responses();
                for (const auto& id : chosen) r->add_deviceids(id);
            }
        });
    }

    grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                          api::AllocateResponse* out) override {
        return answer("Allocate", [&] {
            std::lock_guard lock(mu);
            if (request->container_requests().empty())
                throw_invalid("allocate devices", "", "no container requests");
            for (const auto& c : request->container_requests()) {
                const Allocation a = allocate(config, settings, devices, strings(c.devices_ids()));
                auto* r = out->add_container_responses();
                for (const auto& [k, v] : a.envs) (*r->mutable_envs())[k] = v;
                for (const auto& [k, v] : a.annotations) (*r->mutable_annotations())[k] = v;
                for (const auto& m : a.mounts) {
                    auto* mount = r->add_mounts();
                    mount->set_container_path(m.container_path);
                    mount->set_host_path(m.host_path);
                    mount->set_read_only(m.read_only);
                }
                for (const auto& name : a.cdi_devices) r->add_cdi_devices()->set_name(name);
            }
        });
    }

    grpc::Status PreStartContainer(grpc::ServerContext*, const api::PreStartContainerRequest*,
                                   api::PreStartContainerResponse*) override {
        return grpc::Status::OK;
    }

    // Health, and the node as its description has it now; wakes the streams
    // when the list changed.
    void check() {
        std::optional<Node> fresh;
        if (refresh) {
            try {
                fresh = refresh();
            } catch (const std::exception& e) {
                logger().debug("device plugin: the node cannot be read now: {}", e.what());
            }
        }
        std::lock_guard lock(mu);
        bool list_changed = false;
        if (fresh) {
            try {
                auto list = device_list(*fresh, settings);
                auto key = [](const std::vector<Device>& ds) {
                    std::vector<std::pair<std::string, int>> k;
                    for (const auto& d : ds) k.emplace_back(d.id, d.numa_node);
                    return k;
                };
                if (key(list) != key(devices)) {
                    logger().info("device plugin: the node's GPUs changed ({} devices now)",
                                  list.size());
                    devices = std::move(list);
                    list_changed = true;
                }
                node = std::move(*fresh);
            } catch (const std::exception& e) {
                logger().warn("device plugin: keeping the device list: {}", e.what());
            }
        }
        const std::vector<Device> before = devices;
        if (update_health(devices, node) || list_changed) {
            for (std::size_t i = 0; i < devices.size(); ++i) {
                const bool was = i < before.size() ? before[i].healthy : true;
                if (was && !devices[i].healthy)
                    logger().warn("device plugin: {} is unhealthy: {}", devices[i].id,
                                  devices[i].why);
                else if (!was && devices[i].healthy)
                    logger().info("device plugin: {} is healthy again", devices[i].id);
            }
            ++generation;
            changed.notify_all();
        }
    }
};

Server::Server(Config config, DevicePluginConfig settings, Node node,
               std::function<std::optional<Node>()> refresh)
    : state_(std::make_unique<State>()) {
    state_->config = std::move(config);
    state_->settings = std::move(settings);
    state_->refresh = std::move(refresh);
    state_->devices = device_list(node, state_->settings);
    state_->node = std::move(node);
    update_health(state_->devices, state_->node);
}

Server::~Server() = default;

void Server::stop() {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    state_->changed.notify_all();
}

namespace {

// Removes a stale socket of ours (never anything but a socket).
void remove_socket(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
}

}  // namespace

void Server::run() {
    State& s = *state_;
    const std::string own = s.socket_path();
    const std::string kubelet = s.kubelet_path();
    const auto interval = milliseconds(s.settings.health_interval_ms);

    std::unique_ptr<grpc::Server> server;
    Identity served{};
    auto start = [&] {
        remove_socket(own);
        grpc::ServerBuilder builder;
        builder.AddListeningPort("unix:" + own, grpc::InsecureServerCredentials());
        builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
        builder.RegisterService(&s);
        server = builder.BuildAndStart();
        if (!server) throw Error(EADDRNOTAVAIL, "serve device plugin", own, "cannot listen there");
        served = identity(own);
        logger().info("device plugin: serving {} on {}", s.settings.resource_name, own);
    };
    auto halt = [&] {
        if (!server) return;
        server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
        server->Wait();
        server.reset();
    };

    start();
    bool registered = false;
    Identity kubelet_seen{};
    std::string last_failure;
    milliseconds backoff(100);
    auto next_try = Clock::now();
    auto next_check = Clock::now() + interval;
    std::unique_lock lock(s.mu);
    while (!s.stopping) {
        lock.unlock();
        const auto now = Clock::now();
        // The kubelet restarted: ours was removed (serve again, even before
        // registering), or its socket is new.
        if (identity(own) != served) {
            logger().info(
                "device plugin: {} was removed (the kubelet restarted); serving "
                "and registering again",
                own);
            halt();
            start();
            if (registered) {
                registered = false;
                backoff = milliseconds(100);
                next_try = now;
            }
        } else if (registered && identity(kubelet) != kubelet_seen) {
            logger().info("device plugin: {} is new (the kubelet restarted); registering again",
                          kubelet);
            registered = false;
            backoff = milliseconds(100);
            next_try = now;
        }
        if (!registered && now >= next_try) {
            std::string failure;
            const Identity k = identity(kubelet);
            if (k == Identity{}) {
                failure = fmt::format("the kubelet is not there yet ({} is missing)", kubelet);
            } else {
                auto channel =
                    grpc::CreateChannel("unix:" + kubelet, grpc::InsecureChannelCredentials());
                auto stub = api::Registration::NewStub(channel);
                api::RegisterRequest request;
                request.set_version(kApiVersion);
                request.set_endpoint(s.settings.socket_name);
                request.set_resource_name(s.settings.resource_name);
                request.mutable_options()->set_get_preferred_allocation_available(true);
                grpc::ClientContext context;
                context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
                api::Empty reply;
                const grpc::Status st = stub->Register(&context, request, &reply);
                if (st.ok()) {
                    registered = true;
                    kubelet_seen = k;
                    last_failure.clear();
                    logger().info("device plugin: registered {} with {}", s.settings.resource_name,
                                  kubelet);
                } else {
                    failure = fmt::format("the kubelet refused the registration at {}: {}", kubelet,
                                          st.error_message());
                }
            }
            if (!registered) {
                if (failure != last_failure) logger().warn("device plugin: {}; retrying", failure);
                last_failure = failure;
                next_try = Clock::now() + backoff;
                backoff = std::min(backoff * 2, milliseconds(10000));
            }
        }
        if (Clock::now() >= next_check) {
            s.check();
            next_check = Clock::now() + interval;
        }
        lock.lock();
        if (s.stopping) break;
        auto wake = std::min(next_check, registered ? Clock::now() + milliseconds(100) : next_try);
        wake = std::min(wake, Clock::now() + milliseconds(100));
        s.changed.wait_until(lock, wake);
    }
    lock.unlock();
    halt();
    remove_socket(own);
    logger().info("device plugin: stopped; {} removed", own);
}

}  // namespace gpubind::plugin
