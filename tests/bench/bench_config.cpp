// What a start of gpubind-hook, gpubind-runtime or the CLI pays for its
// config: the built-in defaults, and a small user file read over them.
#include <string_view>

#include <benchmark/benchmark.h>

#include "config_builtin.hpp"
#include "gpubind/config/config.hpp"

namespace {

using namespace gpubind;

// About 200 bytes, the size of a typical /etc/gpubind/config.toml.
constexpr std::string_view kSmallUserConfig = R"(# gpubind on this node
[policy]
accept-envvar-unprivileged = false
supported-capabilities = "utility,compute,video"
cgroups = true

[runtime]
runtimes = ["runc"]

[node]
driver-root = "/run/nvidia/driver"
)";

// What a process pays on its first default_config() (later calls copy it):
// the generated initialisers, no parsing.
void BM_DefaultConfig(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(config::detail::make_builtin_config());
}
BENCHMARK(BM_DefaultConfig);

// A user's file read over the defaults (made once per process, outside the loop).
void BM_ParseSmallUserConfig(benchmark::State& state) {
    for (auto _ : state)
        benchmark::DoNotOptimize(config::parse_config(kSmallUserConfig, "config.toml"));
    state.SetBytesProcessed(
        static_cast<std::int64_t>(state.iterations() * kSmallUserConfig.size()));
}
BENCHMARK(BM_ParseSmallUserConfig);

}  // namespace

BENCHMARK_MAIN();
