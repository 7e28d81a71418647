// gpubind-device-plugin's gRPC side: the DevicePlugin service on its own unix
// socket in the kubelet's directory, registration with the kubelet (again
// whenever the kubelet restarts: kubelet.sock recreated, or the plugin's own
// socket removed), and the health loop. The decisions are plugin.hpp's.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "gpubind/config/config.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/node.hpp"

namespace gpubind::plugin {

// Largest request the service reads (a bigger one is refused by gRPC with
// RESOURCE_EXHAUSTED, and the service keeps serving).
inline constexpr int kMaxRequestBytes = 1 << 20;

class Server {
  public:
    // `refresh`, when given, is asked at each health check for the node as
    // its description has it now (nullopt: unchanged or unknown); a node
    // whose devices differ replaces the list.
    Server(config::Config config, config::DevicePluginConfig settings, node::Node node,
           std::function<std::optional<node::Node>()> refresh = {});
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Serves until stop(): listens on <plugin-dir>/<socket>, registers with
    // <plugin-dir>/kubelet.sock (retrying with back-off while it is absent or
    // refuses, each different failure logged once), re-registers after a
    // kubelet restart, checks health every health-interval-ms and sends the
    // new list to every ListAndWatch stream when it changes. Returns with its
    // socket removed. Throws Error when its socket cannot be made.
    void run();
    // Asks run() to return (thread-safe; not async-signal-safe).
    void stop();

  private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace gpubind::plugin
