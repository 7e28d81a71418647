// gpubind-device-plugin under load (issue 47): the program on a simulated
// 8-GPU NVSwitch node (hgx8), registered with a stand-in kubelet, answers
// Allocate from 8 clients at once (each its own connection to its unix
// socket) while its resident memory is read from /proc/<pid>/status, then
// GetPreferredAllocation from one client, timed round trip. Prints the
// figures and a verdict; exits 1 when an answer failed, the memory grew by
// more than --rss-limit-kib over the calls (or over as many again), or the p99 of the preferred
// allocation is 1 ms or more. Run as root (the simulated node's mknod):
//   bench_device_plugin [--calls 10000] [--clients 8] [--preferred 5000]
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "deviceplugin.grpc.pb.h"
#include "gpubind/config/config.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/plugin/plugin.hpp"
#include "gpubind/sim/sim.hpp"
#include "stand_in_kubelet.hpp"
#include "temp_dir.hpp"

namespace {

namespace api = ::v1beta1;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM"); -1 when absent.
long status_kib(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(field + ":", 0) == 0)
            return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
    return -1;
}

// A connection of its own (no subchannel shared with the other clients).
std::unique_ptr<api::DevicePlugin::Stub> connect(const std::string& socket) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    return api::DevicePlugin::NewStub(
        grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args));
}

// `calls` Allocate calls of 2 distinct devices of `ids`, split over
// `clients` threads; returns the failed ones.
long allocate_from(const std::string& socket, const std::vector<std::string>& ids, int clients,
                   long calls) {
    std::atomic<long> failed = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < clients; ++t)
        threads.emplace_back([&, t] {
            auto stub = connect(socket);
            std::mt19937 rng(static_cast<unsigned>(t) + 1);
            std::uniform_int_distribution<std::size_t> pick(0, ids.size() - 1);
            for (long i = t; i < calls; i += clients) {
                const std::size_t a = pick(rng);
                std::size_t b = pick(rng);
                if (b == a) b = (a + 1) % ids.size();
                api::AllocateRequest req;
                auto* c = req.add_container_requests();
                c->add_devices_ids(ids[a]);
                c->add_devices_ids(ids[b]);
                api::AllocateResponse resp;
                grpc::ClientContext ctx;
                ctx.set_deadline(std::chrono::system_clock::now() + 10s);
                const auto st = stub->Allocate(&ctx, req, &resp);
                if (!st.ok() || resp.container_responses_size() != 1 ||
                    resp.container_responses(0).cdi_devices_size() != 2)
                    ++failed;
            }
        });
    for (auto& t : threads) t.join();
    return failed;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

int run(long calls, int clients, long preferred, long rss_limit_kib) {
    gpubind::test::TempDir node("gpubind-bench-dp-node");
    gpubind::test::TempDir plugin_dir("gpubind-bench-dp");
    gpubind::sim::Spec spec;
    spec.topology = "hgx8";
    spec.gpus = 8;
    const auto manifest = gpubind::sim::simulate(node.path(), spec);
    const auto config = node / "config.toml";
    std::ofstream(config) << fmt::format(
        "[node]\ndriver-root = \"{0}\"\ndev-root = \"{0}\"\nproc-root = \"{0}/proc\"\n"
        "sys-root = \"{0}/sys\"\nstate-dir = \"{0}/run-gpubind\"\n[log]\nlevel = \"warn\"\n"
        "[device-plugin]\nplugin-dir = \"{1}\"\n",
        node.path().string(), plugin_dir.path().string());
    gpubind::test::StandInKubelet kubelet(plugin_dir.path());
    gpubind::test::PluginProcess plugin(GPUBIND_DEVICE_PLUGIN_PATH, config, node / "plugin.log");
    const auto reg = kubelet.wait(20s);
    if (!reg) {
        std::fprintf(stderr, "bench_device_plugin: no registration: %s\n", plugin.output().c_str());
        return 1;
    }
    const std::string socket = (plugin_dir.path() / reg->endpoint()).string();
    std::vector<std::string> ids;
    for (const auto& g : manifest.gpus) ids.push_back(g.uuid);

    utsname u{};
    ::uname(&u);
    std::printf("gpubind-device-plugin, simulated hgx8 node (8 GPUs), %ld CPUs, %s %s\n",
                ::sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release);
    std::string load;
    std::getline(std::ifstream("/proc/loadavg"), load);
    std::printf("load average then: %s\n", load.c_str());
    const long rss_start = status_kib(plugin.pid(), "VmRSS");
    // Warm-up: every client's connection made, gRPC's and malloc's pools filled.
    long failed = allocate_from(socket, ids, clients, calls / 10);
    const long rss_before = status_kib(plugin.pid(), "VmRSS");
    const auto t0 = Clock::now();
    failed += allocate_from(socket, ids, clients, calls);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const long rss_after = status_kib(plugin.pid(), "VmRSS");
    // As many again: memory that grows with the calls shows twice.
    failed += allocate_from(socket, ids, clients, calls);
    const long rss_again = status_kib(plugin.pid(), "VmRSS");
    std::printf("Allocate: %ld calls from %d clients in %.2f s (%.0f calls/s), %ld failed in all\n",
                calls, clients, secs, static_cast<double>(calls) / secs, failed);
    std::printf(
        "daemon VmRSS: %ld KiB at registration, %ld KiB before, %ld KiB after "
        "(%+ld KiB), %ld KiB after %ld more (%+ld KiB); VmHWM %ld KiB\n",
        rss_start, rss_before, rss_after, rss_after - rss_before, rss_again, calls,
        rss_again - rss_after, status_kib(plugin.pid(), "VmHWM"));

    // GetPreferredAllocation: all 8 available in a shuffled order, sizes 1 to 8.
    auto stub = connect(socket);
    std::mt19937 rng(7);
    std::vector<double> us;
    long preferred_failed = 0;
    for (long i = 0; i < preferred; ++i) {
        std::shuffle(ids.begin(), ids.end(), rng);
        api::PreferredAllocationRequest req;
        auto* c = req.add_container_requests();
        for (const auto& id : ids) c->add_available_deviceids(id);
        const int size = static_cast<int>(i % 8) + 1;
        c->set_allocation_size(size);
        api::PreferredAllocationResponse resp;
        grpc::ClientContext ctx;
        const auto s0 = Clock::now();
        const auto st = stub->GetPreferredAllocation(&ctx, req, &resp);
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s0).count());
        if (!st.ok() || resp.container_responses(0).deviceids_size() != size) ++preferred_failed;
    }
    const double median = percentile(us, 0.5), p99 = percentile(us, 0.99);
    std::printf(
        "GetPreferredAllocation (round trip, sizes 1-8 of 8): %ld calls, median %.0f us, "
        "p90 %.0f us, p99 %.0f us, max %.0f us, %ld failed\n",
        preferred, median, percentile(us, 0.9), p99, percentile(us, 1.0), preferred_failed);

    // The decision alone, in this process: plugin::preferred_allocation on the node.
    gpubind::config::Config cfg = gpubind::config::default_config();
    cfg.roots = {node.path(), node.path(), node.path() / "proc", node.path() / "sys"};
    cfg.state_dir = node.path() / "run-gpubind";
    const gpubind::node::Node n = gpubind::node::discover(cfg);
    const auto devices =
        gpubind::plugin::resources(n, gpubind::config::DevicePluginConfig{})[0].devices;
    std::vector<double> pure;
    for (long i = 0; i < preferred; ++i) {
        std::shuffle(ids.begin(), ids.end(), rng);
        const auto s0 = Clock::now();
        const auto got =
            gpubind::plugin::preferred_allocation(n, devices, ids, {}, static_cast<int>(i % 8) + 1);
        pure.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s0).count());
        if (got.size() != static_cast<std::size_t>(i % 8) + 1) ++preferred_failed;
    }
    std::printf("preferred_allocation alone (in process): median %.1f us, p99 %.1f us\n",
                percentile(pure, 0.5), percentile(pure, 0.99));

    const int status = plugin.stop();
    const bool flat =
        rss_after - rss_before <= rss_limit_kib && rss_again - rss_after <= rss_limit_kib;
    std::printf("verdict: memory %s (limit %+ld KiB), preferred p99 %s 1 ms, exit status %d\n",
                flat ? "flat" : "GREW", rss_limit_kib, p99 < 1000 ? "under" : "NOT under", status);
    return failed == 0 && preferred_failed == 0 && flat && p99 < 1000 && status == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    long calls = 10000, preferred = 5000, rss_limit_kib = 1024;
    int clients = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string opt = argv[i];
        const long v = std::strtol(argv[i + 1], nullptr, 10);
        if (opt == "--calls")
            calls = v;
        else if (opt == "--clients")
            clients = static_cast<int>(v);
        else if (opt == "--preferred")
            preferred = v;
        else if (opt == "--rss-limit-kib")
            rss_limit_kib = v;
        else {
            std::fprintf(stderr, "bench_device_plugin: unknown option %s\n", opt.c_str());
            return 2;
        }
    }
    if (calls < clients || clients < 1 || preferred < 1) {
        std::fprintf(stderr,
                     "bench_device_plugin: --calls must be at least --clients (1 or more)\n");
        return 2;
    }
    try {
        return run(calls, clients, preferred, rss_limit_kib);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_device_plugin: %s\n", e.what());
        return 1;
    }
}
