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
#include "nvml_events.hpp"

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
    if (const auto* err = dynamic_cast<const util::Error*>(&e)) {
        if (err->kind() == util::ErrorKind::Invalid)
            return {grpc::StatusCode::INVALID_ARGUMENT, err->what()};
        if (err->kind() == util::ErrorKind::Refused)
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
        util::logger().warn("{}: {}", what, e.what());
        return status_of(e);
    }
}

std::vector<std::string> strings(const google::protobuf::RepeatedPtrField<std::string>& list) {
    return {list.begin(), list.end()};
}

}  // namespace

namespace {

// Whether `profiles` names every MIG device of `node` that has a UUID.
bool names_every_mig(const node::Node& node, const MigProfiles& profiles) {
    for (const node::Gpu& gpu : node.gpus)
        for (const node::MigDevice& m : gpu.mig)
            if (!m.uuid.empty() && !profiles.count(m.uuid)) return false;
    return true;
}

}  // namespace

// What every resource's service shares: the node, the resources' device
// lists, the Xid marks.
struct Shared {
    config::Config config;
    config::DevicePluginConfig settings;
    std::function<std::optional<node::Node>()> refresh;
    std::string nvml_library;  // the node's libnvidia-ml.so.1, "" if none

    std::mutex nvml_mu;  // guards nvml
    std::unique_ptr<Nvml> nvml;

    std::mutex mu;  // guards what follows
    std::condition_variable changed;
    node::Node node;
    MigProfiles profiles;
    // Every resource served since start, in that order (an Endpoint's index
    // stays valid); one the node no longer has is in `gone`, with no devices.
    std::vector<Resource> resources;
    std::set<std::string> gone;
    XidMarks xids;
    std::set<std::string> noted;   // Allocate's notes logged (each once)
    std::uint64_t generation = 0;  // bumped when a list changes
    bool stopping = false;

    // Health of every device; returns whether any changed (the caller bumps
    // the generation and logs).
    bool update_locked(const std::vector<Resource>& before) {
        bool any = false;
        for (Resource& r : resources) any = update_health(r.devices, node, xids) || any;
        for (std::size_t k = 0; k < resources.size() && k < before.size(); ++k) {
            const auto& now = resources[k].devices;
            const auto& was = before[k].devices;
            for (std::size_t i = 0; i < now.size(); ++i) {
                // A GPU's shares are healthy as it is: said once, by its first.
                if (now[i].part > 0) continue;
                const std::string name = now[i].part == 0
                                             ? fmt::format("{} (every share of it)", now[i].gpu_id)
                                             : now[i].id;
                const bool had = i < was.size() && was[i].id == now[i].id ? was[i].healthy : true;
                if (had && !now[i].healthy)
                    util::logger().warn("device plugin: {} is unhealthy: {}", name, now[i].why);
                else if (!had && now[i].healthy)
                    util::logger().info("device plugin: {} is healthy again", name);
            }
        }
        return any;
    }

    // Health, and the node as its description has it now; wakes the streams
    // when a list changed.
    void check() {
        std::optional<node::Node> fresh;
        if (refresh) {
            try {
                fresh = refresh();
            } catch (const std::exception& e) {
                util::logger().debug("device plugin: the node cannot be read now: {}", e.what());
            }
        }
        MigProfiles fresh_profiles;
        bool have_profiles = false;
        if (fresh && settings.mig_strategy != config::MigStrategy::None) {
            std::lock_guard nl(nvml_mu);
            try {
                if (nvml) fresh_profiles = nvml->mig_profiles();
                // A MIG device NVML did not name (MIG devices made since it was
                // opened): NVML opened anew, which sees them (and registers
                // the Xid events of the new devices).
                if (!nvml_library.empty() && !names_every_mig(*fresh, fresh_profiles)) {
                    nvml.reset();
                    nvml = std::make_unique<Nvml>(nvml_library);
                    fresh_profiles = nvml->mig_profiles();
                }
                have_profiles = static_cast<bool>(nvml);
            } catch (const std::exception& e) {
                nvml.reset();
                util::logger().debug("device plugin: the MIG profiles are unknown: {}", e.what());
            }
        }
        std::lock_guard lock(mu);
        bool list_changed = false;
        if (fresh) {
            try {
                auto list =
                    plugin::resources(*fresh, settings, have_profiles ? fresh_profiles : profiles);
                if (!same_lists(list)) {
                    adopt(std::move(list));
                    list_changed = true;
                }
                node = std::move(*fresh);
                if (have_profiles) profiles = std::move(fresh_profiles);
            } catch (const std::exception& e) {
                util::logger().warn("device plugin: keeping the device list: {}", e.what());
            }
        }
        const std::vector<Resource> before = resources;
        const bool recovered = clear_recovered_xids(xids, node);
        if (update_locked(before) || list_changed || recovered) {
            ++generation;
            changed.notify_all();
        }
    }

    static std::vector<std::pair<std::string, int>> key(const std::vector<Device>& ds) {
        std::vector<std::pair<std::string, int>> k;
        for (const auto& d : ds) k.emplace_back(d.id, d.numa_node);
        return k;
    }
    bool same_lists(const std::vector<Resource>& list) const {
        for (const Resource& r : resources) {
            auto it = std::find_if(list.begin(), list.end(),
                                   [&](const Resource& n) { return n.name == r.name; });
            if ((it == list.end()) != (gone.count(r.name) != 0)) return false;
            if (key(it == list.end() ? std::vector<Device>{} : it->devices) != key(r.devices))
                return false;
        }
        return std::all_of(list.begin(), list.end(), [&](const Resource& n) {
            return std::any_of(resources.begin(), resources.end(),
                               [&](const Resource& r) { return r.name == n.name; });
        });
    }
    // Takes the new lists: a resource no longer there is gone (no devices;
    // run() stops serving it), one there again is served again, and a new
    // one is added (run() serves and registers it).
    void adopt(std::vector<Resource> list) {
        for (Resource& r : resources) {
            auto it = std::find_if(list.begin(), list.end(),
                                   [&](const Resource& n) { return n.name == r.name; });
            if (it == list.end() && gone.insert(r.name).second)
                util::logger().info("device plugin: the node no longer has {}; not serving it",
                                    r.name);
            if (it != list.end() && gone.erase(r.name))
                util::logger().info("device plugin: the node has {} again; serving it", r.name);
            std::vector<Device> now =
                it == list.end() ? std::vector<Device>{} : std::move(it->devices);
            if (key(now) != key(r.devices))
                util::logger().info("device plugin: {}'s devices changed ({} now)", r.name,
                                    now.size());
            r.devices = std::move(now);
        }
        for (Resource& n : list)
            if (!n.name.empty() &&
                std::none_of(resources.begin(), resources.end(),
                             [&](const Resource& r) { return r.name == n.name; })) {
                util::logger().info("device plugin: the node has a new resource {}; serving it",
                                    n.name);
                resources.push_back(std::move(n));
            }
    }

    // The Xid events, in a thread of their own until stopping: each critical
    // one not ignored marks its GPU; NVML failing is logged once and NVML
    // loaded again after a while.
    void watch_xids() {
        if (nvml_library.empty()) {
            util::logger().warn("device plugin: no libnvidia-ml.so.1 on the node: no Xid events");
            return;
        }
        std::string last_failure;
        auto next_open = Clock::now();
        for (;;) {
            {
                std::unique_lock lock(mu);
                if (stopping) return;
            }
            std::optional<XidEvent> event;
            std::string failure;
            {
                std::lock_guard nl(nvml_mu);
                try {
                    if (!nvml && Clock::now() >= next_open)
                        nvml = std::make_unique<Nvml>(nvml_library);
                    if (nvml) event = nvml->wait_xid(milliseconds(100));
                } catch (const std::exception& e) {
                    failure = e.what();
                    nvml.reset();
                    next_open = Clock::now() + std::chrono::seconds(5);
                }
            }
            if (!failure.empty() && failure != last_failure)
                util::logger().warn("device plugin: no Xid events now: {}", failure);
            if (!failure.empty()) last_failure = failure;
            if (!event) {
                std::unique_lock lock(mu);
                if (!nvml) changed.wait_for(lock, milliseconds(100));
                continue;
            }
            last_failure.clear();
            std::lock_guard lock(mu);
            if (!record_xid(xids, node, event->minor, event->xid, settings, event->instance)) {
                util::logger().info("device plugin: Xid {} on the GPU of minor {} is ignored",
                                    event->xid, event->minor);
                continue;
            }
            const std::vector<Resource> before = resources;
            if (update_locked(before)) {
                ++generation;
                changed.notify_all();
            }
        }
    }
};

// One resource's DevicePlugin service, its socket and its registration.
struct Endpoint final : api::DevicePlugin::Service {
    Shared& s;
    std::size_t index;  // into s.resources
    std::unique_ptr<grpc::Server> server;
    Identity served{};
    bool registered = false;
    Identity kubelet_seen{};
    std::string last_failure;
    milliseconds backoff{100};
    Clock::time_point next_try = Clock::now();

    Endpoint(Shared& shared, std::size_t i) : s(shared), index(i) {}

    const Resource& res() const { return s.resources[index]; }
    std::string socket_path() const { return (s.settings.plugin_dir / res().socket).string(); }

    api::ListAndWatchResponse list_locked() const {
        api::ListAndWatchResponse r;
        for (const Device& d : res().devices) {
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
        std::unique_lock lock(s.mu);
        std::optional<std::uint64_t> sent;
        while (!s.stopping && !context->IsCancelled()) {
            if (sent != s.generation) {
                sent = s.generation;
                const auto response = list_locked();
                lock.unlock();
                if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet went
                lock.lock();
                continue;
            }
            s.changed.wait_for(lock, milliseconds(200));
        }
        return grpc::Status::OK;
    }

    grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                        const api::PreferredAllocationRequest* request,
                                        api::PreferredAllocationResponse* out) override {
        return answer("GetPreferredAllocation", [&] {
            std::lock_guard lock(s.mu);
            for (const auto& c : request->container_requests()) {
                const auto chosen =
                    preferred_allocation(s.node, res().devices, strings(c.available_deviceids()),
                                         strings(c.must_include_deviceids()), c.allocation_size());
                auto* r = out->add_container_responses();
                for (const auto& id : chosen) r->add_deviceids(id);
            }
        });
    }

    grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                          api::AllocateResponse* out) override {
        return answer("Allocate", [&] {
            std::lock_guard lock(s.mu);
            if (request->container_requests().empty())
                util::throw_invalid("allocate devices", "", "no container requests");
            config::DevicePluginConfig settings = s.settings;
            settings.resource_name = res().name;
            for (const auto& c : request->container_requests()) {
                const Allocation a =
                    allocate(s.config, settings, s.node, res().devices, strings(c.devices_ids()));
                for (const auto& note : a.notes)
                    if (s.noted.insert(note).second) util::logger().info("device plugin: {}", note);
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
};

struct Server::State {
    Shared shared;
    std::vector<std::unique_ptr<Endpoint>> endpoints;
};

Server::Server(config::Config config, config::DevicePluginConfig settings, node::Node node,
               std::function<std::optional<node::Node>()> refresh)
    : state_(std::make_unique<State>()) {
    Shared& s = state_->shared;
    s.config = std::move(config);
    s.settings = std::move(settings);
    s.refresh = std::move(refresh);
    for (const node::DriverFile& f : node.files)
        if (f.kind == node::FileKind::Library && !f.compat32 && f.name == "libnvidia-ml.so.1")
            s.nvml_library = f.host_path;
    const bool any_mig = std::any_of(node.gpus.begin(), node.gpus.end(),
                                     [](const node::Gpu& g) { return !g.mig.empty(); });
    if (s.settings.mig_strategy != config::MigStrategy::None && any_mig &&
        !s.nvml_library.empty()) {
        try {
            s.nvml = std::make_unique<Nvml>(s.nvml_library);
            s.profiles = s.nvml->mig_profiles();
        } catch (const std::exception& e) {
            util::logger().warn("device plugin: the MIG profiles are unknown: {}", e.what());
        }
    }
    s.resources = plugin::resources(node, s.settings, s.profiles);
    s.node = std::move(node);
    for (Resource& r : s.resources) update_health(r.devices, s.node, s.xids);
    for (std::size_t i = 0; i < s.resources.size(); ++i)
        state_->endpoints.push_back(std::make_unique<Endpoint>(s, i));
}

Server::~Server() = default;

void Server::stop() {
    std::lock_guard lock(state_->shared.mu);
    state_->shared.stopping = true;
    state_->shared.changed.notify_all();
}

namespace {

// Removes a stale socket of ours (never anything but a socket).
void remove_socket(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
}

void start(Endpoint& e) {
    const std::string own = e.socket_path();
    remove_socket(own);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + own, grpc::InsecureServerCredentials());
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    builder.RegisterService(&e);
    e.server = builder.BuildAndStart();
    if (!e.server)
        throw util::Error(EADDRNOTAVAIL, "serve device plugin", own, "cannot listen there");
    e.served = identity(own);
    util::logger().info("device plugin: serving {} on {}", e.res().name, own);
}

void halt(Endpoint& e) {
    if (!e.server) return;
    e.server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
    e.server->Wait();
    e.server.reset();
}

// One registration attempt with the kubelet at `kubelet`.
void try_register(Endpoint& e, const std::string& kubelet) {
    std::string failure;
    const Identity k = identity(kubelet);
    if (k == Identity{}) {
        failure = fmt::format("the kubelet is not there yet ({} is missing)", kubelet);
    } else {
        auto channel = grpc::CreateChannel("unix:" + kubelet, grpc::InsecureChannelCredentials());
        auto stub = api::Registration::NewStub(channel);
        api::RegisterRequest request;
        request.set_version(kApiVersion);
        request.set_endpoint(e.res().socket);
        request.set_resource_name(e.res().name);
        request.mutable_options()->set_get_preferred_allocation_available(true);
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        api::Empty reply;
        const grpc::Status st = stub->Register(&context, request, &reply);
        if (st.ok()) {
            e.registered = true;
            e.kubelet_seen = k;
            e.last_failure.clear();
            util::logger().info("device plugin: registered {} with {}", e.res().name, kubelet);
            return;
        }
        failure = fmt::format("the kubelet refused the registration of {} at {}: {}", e.res().name,
                              kubelet, st.error_message());
    }
    if (failure != e.last_failure) util::logger().warn("device plugin: {}; retrying", failure);
    e.last_failure = failure;
    e.next_try = Clock::now() + e.backoff;
    e.backoff = std::min(e.backoff * 2, milliseconds(10000));
}

// Serves the resources the node has now: an Endpoint for each new one
// (served, then registered by run()), none for those gone (its socket
// removed: the kubelet stops offering it), served again when back.
void follow_resources(Shared& s, std::vector<std::unique_ptr<Endpoint>>& endpoints) {
    std::vector<std::pair<Endpoint*, bool>> todo;  // endpoint, whether to serve it
    {
        std::lock_guard lock(s.mu);
        while (endpoints.size() < s.resources.size())
            endpoints.push_back(std::make_unique<Endpoint>(s, endpoints.size()));
        for (auto& e : endpoints) {
            const bool serve = s.gone.count(e->res().name) == 0;
            if (serve != static_cast<bool>(e->server)) todo.emplace_back(e.get(), serve);
        }
    }
    for (auto [e, serve] : todo) {  // without the lock: halt() waits for the streams
        if (serve) {
            start(*e);
            e->registered = false;
            e->backoff = milliseconds(100);
            e->next_try = Clock::now();
        } else {
            halt(*e);
            remove_socket(e->socket_path());
            util::logger().info("device plugin: {} removed", e->socket_path());
        }
    }
}

}  // namespace

void Server::run() {
    Shared& s = state_->shared;
    const std::string kubelet = (s.settings.plugin_dir / kKubeletSocket).string();
    const auto interval = milliseconds(s.settings.health_interval_ms);

    for (auto& e : state_->endpoints) start(*e);
    std::thread xids([&s] { s.watch_xids(); });
    // The Xid thread ends with run(), however run() ends.
    struct Join {
        Server& server;
        std::thread& thread;
        ~Join() {
            server.stop();
            thread.join();
        }
    } join{*this, xids};
    auto next_check = Clock::now() + interval;
    std::unique_lock lock(s.mu);
    while (!s.stopping) {
        lock.unlock();
        auto wake = std::min(next_check, Clock::now() + milliseconds(100));
        for (auto& ep : state_->endpoints) {
            Endpoint& e = *ep;
            if (!e.server) continue;  // a resource the node no longer has
            const auto now = Clock::now();
            // The kubelet restarted: ours was removed (serve again, even
            // before registering), or its socket is new.
            if (identity(e.socket_path()) != e.served) {
                util::logger().info(
                    "device plugin: {} was removed (the kubelet restarted); serving "
                    "and registering again",
                    e.socket_path());
                halt(e);
                start(e);
                if (e.registered) {
                    e.registered = false;
                    e.backoff = milliseconds(100);
                    e.next_try = now;
                }
            } else if (e.registered && identity(kubelet) != e.kubelet_seen) {
                util::logger().info(
                    "device plugin: {} is new (the kubelet restarted); registering {} "
                    "again",
                    kubelet, e.res().name);
                e.registered = false;
                e.backoff = milliseconds(100);
                e.next_try = now;
            }
            if (!e.registered && now >= e.next_try) try_register(e, kubelet);
            if (!e.registered) wake = std::min(wake, e.next_try);
        }
        if (Clock::now() >= next_check) {
            s.check();
            follow_resources(s, state_->endpoints);
            next_check = Clock::now() + interval;
        }
        lock.lock();
        if (s.stopping) break;
        s.changed.wait_until(lock, std::min(wake, next_check));
    }
    lock.unlock();
    for (auto& e : state_->endpoints) {
        if (!e->server) continue;
        halt(*e);
        remove_socket(e->socket_path());
        util::logger().info("device plugin: stopped; {} removed", e->socket_path());
    }
}

}  // namespace gpubind::plugin
