// How long reading the host's ld.so.cache takes: from the file, and from
// memory; and how long gpubind's writer takes to make a container's cache of
// it (what replaces a run of ldconfig at each container start).
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/file.hpp"

namespace {

using namespace gpubind;

// The cache to read: $GPUBIND_BENCH_LDCACHE, default the host's.
const char* cache_path() {
    const char* p = std::getenv("GPUBIND_BENCH_LDCACHE");
    return p && *p ? p : "/etc/ld.so.cache";
}

void BM_LoadAndParse(benchmark::State& state) {
    std::size_t entries = 0, bytes = util::read_file(cache_path(), ldcache::kMaxCacheSize).size();
    for (auto _ : state) {
        ldcache::Cache cache = ldcache::load(cache_path());
        entries = cache.entries.size();
        benchmark::DoNotOptimize(cache);
    }
    state.counters["entries"] = static_cast<double>(entries);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_LoadAndParse);

void BM_ParseFromMemory(benchmark::State& state) {
    const std::string bytes = util::read_file(cache_path(), ldcache::kMaxCacheSize);
    std::size_t entries = 0;
    for (auto _ : state) {
        ldcache::Cache cache = ldcache::parse(bytes, cache_path());
        entries = cache.entries.size();
        benchmark::DoNotOptimize(cache);
    }
    state.counters["entries"] = static_cast<double>(entries);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
}
BENCHMARK(BM_ParseFromMemory);

void BM_FormatLikeLdconfig(benchmark::State& state) {
    const ldcache::Cache cache = ldcache::load(cache_path());
    for (auto _ : state)
        benchmark::DoNotOptimize(ldcache::format_like_ldconfig(cache, cache_path()));
}
BENCHMARK(BM_FormatLikeLdconfig);

void BM_LookupEverySoname(benchmark::State& state) {
    const ldcache::Cache cache = ldcache::load(cache_path());
    for (auto _ : state)
        for (const auto& e : cache.entries)
            benchmark::DoNotOptimize(ldcache::lookup(cache, e.soname, ldcache::arch_of(e.flags)));
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * cache.entries.size()));
}
BENCHMARK(BM_LookupEverySoname);

// The hook's work for the cache: the image's cache parsed, the driver's
// libraries (a typical compute,utility set, x86-64 and 32-bit) merged in,
// the new file's bytes made.
void BM_MergeAndSerialize(benchmark::State& state) {
    const std::string bytes = util::read_file(cache_path(), ldcache::kMaxCacheSize);
    const std::vector<std::string> dirs = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"};
    std::vector<ldcache::Library> added;
    for (const char* so : {"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so",
                           "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
                           "libcudadebugger.so.1", "libnvidia-cfg.so.1", "libnvidia-opencl.so.1",
                           "libnvidia-gpucomp.so.550.54.15", "libnvidia-allocator.so.1"})
        added.push_back({so, dirs[0] + "/" + so, ldcache::Arch::X86_64});
    for (const char* so : {"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"})
        added.push_back({so, dirs[1] + "/" + so, ldcache::Arch::I386});
    std::size_t size = 0;
    for (auto _ : state) {
        ldcache::Cache image = ldcache::parse(bytes, cache_path());
        const std::string out = ldcache::serialize(ldcache::merge(std::move(image), added, dirs));
        size = out.size();
        benchmark::DoNotOptimize(out);
    }
    state.counters["bytes_written"] = static_cast<double>(size);
}
BENCHMARK(BM_MergeAndSerialize)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
