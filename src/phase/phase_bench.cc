// Cost of phase records on the writer's hot path (the budget: enter+exit <= 1 us).
// Run: build/src/phase/phase_bench  (writes its rings under TMPDIR, removed at exit)

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "phase/phase_reader.h"
#include "phase/phase_writer.h"

namespace stallscope::phase {
namespace {

/// One temp directory per benchmark run.
class BenchDir {
 public:
  BenchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "phase_bench.XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~BenchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  WriterOptions Options() const {
    WriterOptions options;
    options.phases_dir = path_ + "/phases";
    return options;
  }

 private:
  std::string path_;
};

// One begin + end on one thread: what `with stallscope.phase(...)` costs below Python.
void BM_BeginEnd(benchmark::State& state) {
  BenchDir dir;
  PhaseWriter writer(dir.Options());
  const uint16_t id = writer.NameId("forward");
  if (!writer.Open().ok()) state.SkipWithError("cannot create ring");
  for (auto _ : state) {
    writer.Begin(id);
    writer.End(id);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_BeginEnd);

// The same from 4 threads into one ring: contention on the shared write index. One
// iteration = 4 threads x 100k begin+end pairs; items/s counts records.
void BM_BeginEnd4Threads(benchmark::State& state) {
  constexpr int kThreads = 4;
  constexpr int kPairs = 100'000;
  BenchDir dir;
  PhaseWriter writer(dir.Options());
  const uint16_t id = writer.NameId("forward");
  if (!writer.Open().ok()) state.SkipWithError("cannot create ring");
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kPairs; ++i) {
          writer.Begin(id);
          writer.End(id);
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }
  state.SetItemsProcessed(state.iterations() * kThreads * kPairs * 2);
}
BENCHMARK(BM_BeginEnd4Threads)->UseRealTime()->Unit(benchmark::kMillisecond);

// A writer that is off (no run directory): the disabled path.
void BM_BeginEndDisabled(benchmark::State& state) {
  PhaseWriter writer(WriterOptions{});
  for (auto _ : state) {
    writer.Begin(1);
    writer.End(1);
  }
}
BENCHMARK(BM_BeginEndDisabled);

// Reader side: draining 1 Ki records (the monitor's cost per poll).
void BM_Drain1K(benchmark::State& state) {
  BenchDir dir;
  PhaseWriter writer(dir.Options());
  const uint16_t id = writer.NameId("forward");
  (void)writer.Open();
  Result<PhaseReader> reader = PhaseReader::Open(writer.ring_path());
  if (!reader.ok()) {
    state.SkipWithError("cannot open ring");
    return;
  }
  int64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < 512; ++i) {
      writer.Begin(id);
      writer.End(id);
    }
    state.ResumeTiming();
    reader->Drain([&](const PhaseRecord& r) { sum += r.ts_ns; });
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_Drain1K);

}  // namespace
}  // namespace stallscope::phase

BENCHMARK_MAIN();
