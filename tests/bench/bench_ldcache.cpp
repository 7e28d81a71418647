// How long reading the host's ld.so.cache takes: from the file, and from memory.
#include <cstdlib>
#include <string>

#include <benchmark/benchmark.h>

#include "gpubind/file.hpp"
#include "gpubind/ldcache.hpp"

namespace {

using namespace gpubind;

// The cache to read: $GPUBIND_BENCH_LDCACHE, default the host's.
const char* cache_path() {
    const char* p = std::getenv("GPUBIND_BENCH_LDCACHE");
    return p && *p ? p : "/etc/ld.so.cache";
}

void BM_LoadAndParse(benchmark::State& state) {
    std::size_t entries = 0, bytes = read_file(cache_path(), ldcache::kMaxCacheSize).size();
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
    const std::string bytes = read_file(cache_path(), ldcache::kMaxCacheSize);
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

}  // namespace

BENCHMARK_MAIN();
