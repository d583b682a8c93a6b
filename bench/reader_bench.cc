// Throughput of the trace reader (ReadTrace: streaming simdjson, threaded inflate) on one file:
// $STALLSCOPE_READER_BENCH, else the shared HTA control trace (tests/support/hta_traces.h),
// else a repository fixture. Counters: uncompressed JSON bytes/s, events, peak RSS.
//   build/bench/reader_bench                                   # every chunk size, both inflates
//   STALLSCOPE_READER_BENCH=/tmp/t8/rank-0.json build/bench/reader_bench
// Arguments: chunk size in KiB (0: the reader's default), threaded inflate (1) or not (0).
// BM_ScanEvents: the traceEvents scanner alone (json_scan.h) over the same file's JSON in memory,
// with the baseline (SSE2) and the AVX2 block classifier (the AVX2 run is skipped without AVX2).

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "trace/byte_source.h"
#include "trace/json_scan.h"
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

void BM_ScanEvents(benchmark::State& state) {
  const auto kernel = static_cast<ScanKernel>(state.range(0));
  if (ResolveScanKernel(kernel) != kernel) {
    state.SkipWithError("this CPU has no AVX2");
    return;
  }
  const std::string path = BenchTrace();
  Result<std::unique_ptr<ByteSource>> src = OpenByteSource(path);
  if (!src.ok()) {
    state.SkipWithError(src.error().message.c_str());
    return;
  }
  std::string json;
  std::vector<char> block(size_t{1} << 20);
  while (true) {
    Result<size_t> n = (*src)->Read(block.data(), block.size());
    if (!n.ok() || *n == 0) break;
    json.append(block.data(), *n);
  }
  json.append(64, ' ');  // the scanner's padding after the data
  const uint64_t len = json.size() - 64;
  std::vector<ElementSpan> spans;
  spans.reserve(1 << 20);
  for (auto _ : state) {
    JsonScanner scanner({"deviceProperties", "distributedInfo", "baseTimeNanoseconds"}, kernel);
    spans.clear();
    scanner.Scan(json.data(), len, true, &spans);
    benchmark::DoNotOptimize(spans.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(len * state.iterations()));
  state.counters["elements"] = static_cast<double>(spans.size());
}
BENCHMARK(BM_ScanEvents)
    ->Arg(static_cast<int>(ScanKernel::kBaseline))
    ->Arg(static_cast<int>(ScanKernel::kAvx2))
    ->ArgName("kernel")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace stallscope::trace

BENCHMARK_MAIN();
