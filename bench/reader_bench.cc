// Throughput of the trace reader (ReadTrace: streaming simdjson, threaded inflate) on one file:
// $STALLSCOPE_READER_BENCH, else the shared HTA control trace (tests/support/hta_traces.h),
// else a repository fixture. Counters: uncompressed JSON bytes/s, events, peak RSS.
//   build/bench/reader_bench                                   # every chunk size, both inflates
//   STALLSCOPE_READER_BENCH=/tmp/t8/rank-0.json build/bench/reader_bench
// Arguments: chunk size in KiB (0: the reader's default), threaded inflate (1) or not (0).

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <benchmark/benchmark.h>

#include "trace/trace_reader.h"

#include "hta_traces.h"

namespace stallscope::trace {
namespace {

std::string BenchTrace() {
  if (const char* path = std::getenv("STALLSCOPE_READER_BENCH"); path != nullptr && *path != 0) {
    return path;
  }
  std::filesystem::path hta = testing::HtaTracesDir() / "trace_diff/control/control.json.gz";
  if (std::filesystem::exists(hta)) return hta.string();
  return STALLSCOPE_SOURCE_DIR "/tests/data/traces/steps_torch113_cpu.json";
}

void BM_ReadTrace(benchmark::State& state) {
  const std::string path = BenchTrace();
  ReadOptions options;
  if (state.range(0) > 0) options.chunk_bytes = static_cast<size_t>(state.range(0)) << 10;
  options.threaded_inflate = state.range(1) != 0;
  uint64_t bytes = 0;
  uint64_t events = 0;
  for (auto _ : state) {
    Result<RankTrace> r = ReadTrace(path, options);
    if (!r.ok()) {
      state.SkipWithError(r.error().message.c_str());
      return;
    }
    bytes += r->stats.bytes;
    events = r->stats.events_total;
    benchmark::DoNotOptimize(r->events.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetLabel(path);
  state.counters["events"] = static_cast<double>(events);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["maxrss_mb"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
}
BENCHMARK(BM_ReadTrace)
    ->ArgsProduct({{0, 64, 1024}, {1, 0}})
    ->ArgNames({"chunk_kib", "threaded"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace stallscope::trace

BENCHMARK_MAIN();
