// gpubind_soak_kubelet DIR PLUGIN CONFIG LOG: scripts/soak's stand-in kubelet
// (issue 49). Serves the kubelet's Registration on DIR/kubelet.sock, runs
// gpubind-device-plugin (PLUGIN --config CONFIG, its output in LOG) for the
// soak's duration, and answers one line a command on stdin as a kubelet asks:
//   allocate N  ListAndWatch's first list (every device healthy), the
//               preferred N of them, then Allocate of those; prints
//               "ok VAR=VALUE ..." (the answer's variables) or "error WHAT"
//   (EOF)       SIGTERM to the plugin; prints "exit STATUS"
// After the registration it prints "ready PID" (the plugin's process). One
// line out each; the soak reads the plugin's memory and descriptors itself.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "stand_in_kubelet.hpp"

namespace {

namespace api = ::v1beta1;
using namespace std::chrono_literals;

std::string allocate(api::DevicePlugin::Stub& stub, int n) {
    std::vector<std::string> ids;
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        auto reader = stub.ListAndWatch(&ctx, api::Empty{});
        api::ListAndWatchResponse list;
        if (!reader->Read(&list)) return "error no device list";
        for (const auto& d : list.devices()) {
            if (d.health() != "Healthy") return "error device " + d.id() + " " + d.health();
            ids.push_back(d.id());
        }
        ctx.TryCancel();
        reader->Finish();
    }
    if (static_cast<int>(ids.size()) < n)
        return "error " + std::to_string(ids.size()) + " devices listed, " + std::to_string(n) +
               " asked";
    api::PreferredAllocationRequest preq;
    auto* c = preq.add_container_requests();
    for (const auto& id : ids) c->add_available_deviceids(id);
    c->set_allocation_size(n);
    api::PreferredAllocationResponse presp;
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        const auto st = stub.GetPreferredAllocation(&ctx, preq, &presp);
        if (!st.ok() || presp.container_responses_size() != 1)
            return "error GetPreferredAllocation: " + st.error_message();
    }
    api::AllocateRequest areq;
    auto* a = areq.add_container_requests();
    for (const auto& id : presp.container_responses(0).deviceids()) a->add_devices_ids(id);
    if (a->devices_ids_size() != n)
        return "error the preferred allocation is not of " + std::to_string(n);
    api::AllocateResponse aresp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    const auto st = stub.Allocate(&ctx, areq, &aresp);
    if (!st.ok() || aresp.container_responses_size() != 1)
        return "error Allocate: " + st.error_message();
    std::string out = "ok";
    for (const auto& [k, v] : aresp.container_responses(0).envs()) out += " " + k + "=" + v;
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::cerr << "usage: gpubind_soak_kubelet DIR PLUGIN CONFIG LOG\n";
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    gpubind::test::StandInKubelet kubelet(dir);
    gpubind::test::PluginProcess plugin(argv[2], argv[3], argv[4]);
    const auto r = kubelet.wait(20s);
    if (!r) {
        std::cout << "error no registration: " << plugin.output() << std::endl;
        return 1;
    }
    auto stub = api::DevicePlugin::NewStub(grpc::CreateChannel(
        "unix:" + (dir / r->endpoint()).string(), grpc::InsecureChannelCredentials()));
    std::cout << "ready " << plugin.pid() << std::endl;
    for (std::string line; std::getline(std::cin, line);) {
        if (line.rfind("allocate ", 0) == 0)
            std::cout << allocate(*stub, std::stoi(line.substr(9))) << std::endl;
        else
            std::cout << "error unknown command: " << line << std::endl;
    }
    std::cout << "exit " << plugin.stop() << std::endl;
    return 0;
}
