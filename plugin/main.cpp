// gpubind-device-plugin: offers the node's GPUs to the kubelet (device plugin
// API v1beta1) until SIGTERM or SIGINT, then removes its socket and exits 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "gpubind/config/device_plugin.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/plugin/server.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/log_sink.hpp"

int main(int argc, char** argv) {
    using namespace gpubind;
    auto log = spdlog::stderr_logger_mt("gpubind-device-plugin");
    log->set_pattern("gpubind-device-plugin: %l: %v");
    log->set_level(spdlog::level::info);
    util::set_logger(log);

    CLI::App app{"gpubind-device-plugin: the node's GPUs for the kubelet", "gpubind-device-plugin"};
    app.set_version_flag("--version", std::string(GPUBIND_VERSION));
    std::string config_path, plugin_dir;
    app.add_option("--config", config_path,
                   "config file (default: $GPUBIND_CONFIG, "
                   "/etc/gpubind/config.toml)");
    app.add_option("--plugin-dir", plugin_dir,
                   "the kubelet's device plugin directory (default: [device-plugin] plugin-dir)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? util::kExitOk : util::kExitUsage;
    }

    // SIGTERM and SIGINT are taken by a thread of their own (sigwait), so they
    // are blocked in every thread gRPC starts.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    try {
        config::ConfigWithPlugin c = [&] {
            try {
                return config::load_effective_config_with_plugin(config_path);
            } catch (const util::Error& e) {
                std::fprintf(stderr, "gpubind-device-plugin: %s\n", e.what());
                std::exit(util::kExitUsage);  // a bad config is the command's fault: exit 2
            }
        }();
        if (!plugin_dir.empty()) c.plugin.plugin_dir = plugin_dir;
        log->set_level(spdlog::level::from_str(c.config.log.level));
        node::LoadOptions load;
        load.need_nvml = true;  // NVLink for the preferred allocation
        node::Node node = node::load_node(c.config, load).node;
        const config::Config config = c.config;
        plugin::Server server(c.config, c.plugin, std::move(node),
                              [config, load]() -> std::optional<node::Node> {
                                  return node::load_node(config, load).node;
                              });
        std::thread waiter([&] {
            int sig = 0;
            sigwait(&stop_signals, &sig);
            util::logger().info("device plugin: signal {}, stopping", sig);
            server.stop();
        });
        waiter.detach();
        server.run();
        return util::kExitOk;
    } catch (const std::system_error& e) {
        std::fprintf(stderr, "gpubind-device-plugin: %s\n", e.what());
        return util::exit_code_for(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind-device-plugin: %s\n", e.what());
        return util::kExitFailure;
    }
}
