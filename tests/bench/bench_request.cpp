// What reading a container's request costs with many device mounts (issue
// 44, F8): each mount is one lookup, so the time grows with the count, not
// its square. Google Benchmark fits the complexity (expect O(N)).
#include <string>

#include <benchmark/benchmark.h>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"

namespace {

using namespace gpubind;

// N /dev/null mounts under /var/run/nvidia-container-devices/rdma/, each of
// N/2 HCAs twice, and one GPU's.
decide::oci::Spec spec_with_mounts(std::size_t n) {
    const std::string dir = "/var/run/nvidia-container-devices/";
    decide::oci::Spec spec;
    spec.bundle = "/bundles/c1";
    spec.mounts.push_back({dir + "0", "/dev/null", "bind", {"bind", "ro"}});
    for (std::size_t i = 0; i < n; ++i)
        spec.mounts.push_back({dir + "rdma/mlx5_" + std::to_string(i % (n / 2)),
                               "/dev/null",
                               "bind",
                               {"bind", "ro"}});
    return spec;
}

void BM_ReadRequestDeviceMounts(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const decide::oci::Spec spec = spec_with_mounts(n);
    config::Config config = config::default_config();
    config.policy.accept_volume_mounts = true;
    for (auto _ : state)
        benchmark::DoNotOptimize(decide::read_request(spec, config.policy, config.families));
    state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_ReadRequestDeviceMounts)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 18)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

// The hook's judgement of which tmpfs mounts are fresh, over N tmpfs mounts.
void BM_FreshTmpfs(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    decide::oci::Spec spec;
    for (std::size_t i = 0; i < n; ++i)
        spec.mounts.push_back({"/t/" + std::to_string(i), "tmpfs", "tmpfs", {"nosuid"}});
    for (auto _ : state) benchmark::DoNotOptimize(spec.fresh_tmpfs());
    state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_FreshTmpfs)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 18)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

}  // namespace

BENCHMARK_MAIN();
