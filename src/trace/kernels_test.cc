#include "trace/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trace/cross_rank.h"
#include "trace/perfetto_export.h"
#include "trace/timeline.h"
#include "trace/trace_reader.h"

namespace stallscope::trace {
namespace {

struct Ev {
  EventKind kind;
  std::string name;
  int64_t ts_ns;
  int64_t dur_ns;
  int32_t pid = 0;
  int64_t tid = 0;
  int64_t correlation = -1;
  uint64_t bytes = 0;
  uint8_t flags = kFlagNone;
};

void Add(RankTrace& t, const Ev& ev) {
  Event e;
  e.kind = ev.kind;
  e.name_id = t.names.Intern(ev.name);
  e.ts_ns = ev.ts_ns;
  e.dur_ns = ev.dur_ns;
  e.pid = ev.pid;
  e.tid = ev.tid;
  e.correlation = ev.correlation;
  e.bytes = ev.bytes;
  e.flags = ev.flags;
  t.events.push_back(e);
}

constexpr auto kK = EventKind::kKernel;
constexpr auto kRt = EventKind::kRuntime;
constexpr auto kOp = EventKind::kCpuOp;
constexpr auto kAnn = EventKind::kUserAnnotation;

// ---------------------------------------------------------------- names

TEST(ShortKernelName, Table) {
  struct Case {
    std::string in;
    size_t max_len;
    std::string want;
  } cases[] = {
      {"void foo(int)", 60, "foo(int)"},
      {"f<int>(x)", 60, "f<int>(x)"},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
       "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
       "at::detail::Array<char*, 1>)",
       60, "at::native::vectorized_elementwise_kernel<...>(...)"},
      {"kernel<a, b<c>, d>(int)", 18, "kernel<...>(int)"},
      {"abcdefghij", 8, "abcde..."},
      {"a_very_long_operator<", 10, "a_very_..."},
      {"abcdef", 1, "..."},
      {"", 10, ""},
  };
  for (const Case& c : cases) EXPECT_EQ(ShortKernelName(c.in, c.max_len), c.want) << c.in;
}

TEST(ParseMemcpyName, Table) {
  using D = MemcpyDirection;
  using H = HostMemory;
  struct Case {
    std::string name;
    D dir;
    H host;
  } cases[] = {
      {"Memcpy HtoD (Pageable -> Device)", D::kHtoD, H::kPageable},
      {"Memcpy DtoH (Device -> Pinned)", D::kDtoH, H::kPinned},
      {"Memcpy HtoD (Pinned -> Device)", D::kHtoD, H::kPinned},
      {"Memcpy DtoD (Device -> Device)", D::kDtoD, H::kNone},
      {"Memcpy PtoP (Device -> Device)", D::kPtoP, H::kNone},
      {"Memcpy HtoH (Pageable -> Pinned)", D::kHtoH, H::kPageable},
      {"Memcpy DtoH (Device -> Managed)", D::kDtoH, H::kManaged},
      {"Memcpy HtoD", D::kHtoD, H::kUnknown},
      {"Memcpy XtoY (Foo -> Bar)", D::kOther, H::kUnknown},
      {"Memset (Device)", D::kOther, H::kUnknown},
      {"", D::kOther, H::kUnknown},
  };
  for (const Case& c : cases) {
    MemcpyKind k = ParseMemcpyName(c.name);
    EXPECT_EQ(k.direction, c.dir) << c.name;
    EXPECT_EQ(k.host_memory, c.host) << c.name;
  }
}

TEST(NormalizeCollective, Table) {
  std::pair<std::string, std::string> cases[] = {
      {"allreduce", "all_reduce"},
      {"nccl:all_reduce", "all_reduce"},
      {"c10d::allreduce_", "all_reduce"},
      {"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"},
      {"nccl:_all_gather_base", "all_gather"},
      {"_allgather_base", "all_gather"},
      {"c10d::_reduce_scatter_base_", "reduce_scatter"},
      {"nccl:_reduce_scatter_base", "reduce_scatter"},
      {"nccl:all_to_all", "all_to_all"},
      {"c10d::alltoall_base_", "all_to_all"},
      {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send_recv"},
      {"nccl:send", "send_recv"},
      {"nccl:recv", "send_recv"},
      {"nccl:broadcast", "broadcast"},
      {"ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
       "broadcast"},
      {"c10d::barrier", "barrier"},
      {"nccl:reduce", "reduce"},
      {"c10d::gather_", "gather"},
      {"c10d::scatter_", "scatter"},
      {"record_param_comms", "other"},
      {"ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)", "other"},
      {"", "other"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(NormalizeCollective(in), want) << in;
}

TEST(KernelNames, CommAndTensorCore) {
  EXPECT_TRUE(IsCommKernelName("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"));
  EXPECT_TRUE(IsCommKernelName("void ncclDevKernel_Generic(ncclDevComm*)"));
  EXPECT_TRUE(IsCommKernelName("ncclAllReduceRingLLKernel_sum_f32"));
  EXPECT_FALSE(IsCommKernelName("volta_sgemm_128x64_nn"));
  EXPECT_FALSE(IsCommKernelName(""));

  EXPECT_TRUE(IsTensorCoreKernelName("volta_h884gemm_64x64_ldg8_nn"));
  EXPECT_TRUE(IsTensorCoreKernelName("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn"));
  EXPECT_TRUE(IsTensorCoreKernelName("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"));
  EXPECT_TRUE(IsTensorCoreKernelName("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64"));
  EXPECT_TRUE(IsTensorCoreKernelName("sm90_gemm_wgmma_tma_warpspecialized"));
  EXPECT_FALSE(IsTensorCoreKernelName("volta_sgemm_128x64_nn"));
  EXPECT_FALSE(IsTensorCoreKernelName("void at::native::elementwise_kernel<128, 2>"));
  EXPECT_FALSE(IsTensorCoreKernelName("VOLTA_H884GEMM"));  // case-sensitive, as TensorBoard
}

// ---------------------------------------------------------------- AnalyzeKernels

RankTrace ComputeTrace() {
  RankTrace t;
  Add(t, {kK, "gemm_h884", 1000, 400, 0, 7, 1});
  Add(t, {kK, "gemm_h884", 2000, 200, 0, 7, 2});
  Add(t, {kK, "void relu<float>(float*)", 1200, 600, 0, 8, 3, 0, kFlagCudaGraph});
  Add(t, {EventKind::kMemcpy, "Memcpy HtoD (Pageable -> Device)", 3000, 100, 0, 7, 4, 1000});
  Add(t, {EventKind::kMemcpy, "Memcpy HtoD (Pageable -> Device)", 3200, 300, 0, 7, 5, 2000});
  Add(t, {EventKind::kMemcpy, "Memcpy DtoH (Device -> Pinned)", 3600, 50, 0, 7, 6, 500});
  Add(t, {EventKind::kMemset, "Memset (Device)", 3700, 10, 0, 7, 7, 64});
  Add(t, {kRt, "cudaGraphLaunch", 900, 50, 100, 1});
  Add(t, {kRt, "cudaLaunchKernel", 950, 10, 100, 1, 1});
  Add(t, {EventKind::kCudaSync, "Stream Sync", 4000, 1000, 0, 7});
  return t;
}

TEST(AnalyzeKernels, TopKernelsMemcpyMemsetGraphs) {
  KernelReport r = AnalyzeKernels(ComputeTrace());
  // Busy: [1000,1800] ∪ [2000,2200] ∪ memcpys 100+300+50 ∪ memset 10; cuda_sync excluded.
  EXPECT_EQ(r.gpu_busy_ns, 800 + 200 + 100 + 300 + 50 + 10);
  EXPECT_EQ(r.kernel_count, 3);
  EXPECT_EQ(r.kernel_time_ns, 1200);
  EXPECT_EQ(r.tensor_core_time_ns, 600);
  ASSERT_TRUE(r.tensor_core_share.has_value());
  EXPECT_DOUBLE_EQ(*r.tensor_core_share, 0.5);

  ASSERT_EQ(r.kernels.size(), 2u);
  const KernelStats& gemm = r.kernels[0];  // ties on total (600) break by name
  EXPECT_EQ(gemm.name, "gemm_h884");
  EXPECT_EQ(gemm.count, 2);
  EXPECT_EQ(gemm.total_ns, 600);
  EXPECT_EQ(gemm.max_ns, 400);
  EXPECT_DOUBLE_EQ(gemm.mean_ns, 300.0);
  EXPECT_DOUBLE_EQ(gemm.busy_share, 600.0 / 1460.0);
  EXPECT_TRUE(gemm.tensor_core);
  EXPECT_FALSE(gemm.communication);
  EXPECT_EQ(r.kernels[1].name, "void relu<float>(float*)");
  EXPECT_FALSE(r.kernels[1].tensor_core);

  ASSERT_EQ(r.memcpy.size(), 2u);
  EXPECT_EQ(r.memcpy[0].kind.direction, MemcpyDirection::kHtoD);
  EXPECT_EQ(r.memcpy[0].kind.host_memory, HostMemory::kPageable);
  EXPECT_EQ(r.memcpy[0].count, 2);
  EXPECT_EQ(r.memcpy[0].bytes, 3000u);
  EXPECT_EQ(r.memcpy[0].time_ns, 400);
  EXPECT_DOUBLE_EQ(r.memcpy[0].effective_gbps.value(), 7.5);
  EXPECT_EQ(r.memcpy[1].kind.direction, MemcpyDirection::kDtoH);
  EXPECT_EQ(r.memcpy[1].kind.host_memory, HostMemory::kPinned);
  EXPECT_DOUBLE_EQ(r.memcpy[1].effective_gbps.value(), 10.0);

  EXPECT_EQ(r.memset.count, 1);
  EXPECT_EQ(r.memset.bytes, 64u);
  EXPECT_EQ(r.memset.time_ns, 10);
  EXPECT_EQ(r.cuda_graph_launches, 1);
  EXPECT_EQ(r.cuda_graph_kernels, 1);
  EXPECT_TRUE(r.collectives.empty());
}

TEST(AnalyzeKernels, TensorCoreShareUnknownWithoutKernelNames) {
  RankTrace none;
  Add(none, {EventKind::kMemcpy, "Memcpy DtoD (Device -> Device)", 0, 10, 0, 7, -1, 100});
  EXPECT_FALSE(AnalyzeKernels(none).tensor_core_share.has_value());
  RankTrace unnamed;
  Add(unnamed, {kK, "", 0, 10, 0, 7});
  EXPECT_FALSE(AnalyzeKernels(unnamed).tensor_core_share.has_value());
  RankTrace plain;
  Add(plain, {kK, "volta_sgemm_128x64_nn", 0, 10, 0, 7});
  EXPECT_EQ(AnalyzeKernels(plain).tensor_core_share, 0.0);
}

TEST(AnalyzeKernels, NegativeDurationsCountAsZero) {
  RankTrace t;
  Add(t, {kK, "k", 100, -5, 0, 7});
  Add(t, {kK, "k", 200, 10, 0, 7});
  KernelReport r = AnalyzeKernels(t);
  EXPECT_EQ(r.kernel_time_ns, 10);
  EXPECT_EQ(r.gpu_busy_ns, 10);
  EXPECT_EQ(r.kernels[0].count, 2);
}

RankTrace CommTrace() {
  RankTrace t;
  // Thread 1: c10d::allreduce_ ⊃ record_param_comms ⊃ nccl:all_reduce ⊃ launch (one call).
  Add(t, {kOp, "c10d::allreduce_", 100, 100, 100, 1});
  Add(t, {kOp, "record_param_comms", 110, 80, 100, 1});
  Add(t, {kAnn, "nccl:all_reduce", 120, 50, 100, 1});
  Add(t, {kRt, "cudaLaunchKernel", 130, 5, 100, 1, 10});
  // record_param_comms names nothing; the nested nccl:all_to_all does.
  Add(t, {kOp, "record_param_comms", 300, 100, 100, 1});
  Add(t, {kAnn, "nccl:all_to_all", 310, 80, 100, 1});
  Add(t, {kRt, "cudaLaunchKernel", 320, 5, 100, 1, 11});
  // Thread 2: a separate call.
  Add(t, {kAnn, "nccl:all_to_all", 300, 50, 100, 2});
  Add(t, {kRt, "cudaLaunchKernel", 310, 5, 100, 2, 12});
  Add(t, {kK, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 200, 1000, 0, 20, 10});
  Add(t, {kK, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 1300, 500, 0, 20, 11});
  Add(t, {kK, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 1900, 300, 0, 20, 12});
  Add(t, {kK, "ncclDevKernel_SendRecv(ncclDevComm*)", 2300, 100, 0, 20, 99});
  CollectiveInfo info;
  info.correlation = 10;
  info.collective = "allreduce";
  info.in_msg_nelems = 1000;
  info.out_msg_nelems = 1000;
  info.dtype = "Float";
  t.collectives.push_back(info);
  return t;
}

TEST(AnalyzeKernels, CollectivesByName) {
  KernelReport r = AnalyzeKernels(CommTrace());
  ASSERT_EQ(r.collectives.size(), 3u);
  const CollectiveStats& ar = r.collectives[0];
  EXPECT_EQ(ar.collective, "all_reduce");
  EXPECT_EQ(ar.kernel_count, 1);
  EXPECT_EQ(ar.kernel_time_ns, 1000);
  EXPECT_EQ(ar.kernel_max_ns, 1000);
  EXPECT_EQ(ar.cpu_calls, 1);
  EXPECT_EQ(ar.cpu_time_ns, 100);
  EXPECT_EQ(ar.in_nelems, 1000);
  EXPECT_EQ(ar.out_nelems, 1000);
  EXPECT_EQ(ar.in_bytes, 4000u);
  const CollectiveStats& a2a = r.collectives[1];  // SendRecv kernels launched by all_to_all
  EXPECT_EQ(a2a.collective, "all_to_all");
  EXPECT_EQ(a2a.kernel_count, 2);
  EXPECT_EQ(a2a.kernel_time_ns, 800);
  EXPECT_EQ(a2a.kernel_max_ns, 500);
  EXPECT_EQ(a2a.cpu_calls, 2);
  EXPECT_EQ(a2a.cpu_time_ns, 150);
  EXPECT_FALSE(a2a.in_nelems.has_value());
  EXPECT_FALSE(a2a.in_bytes.has_value());
  const CollectiveStats& sr = r.collectives[2];  // no launch in the trace: from the name
  EXPECT_EQ(sr.collective, "send_recv");
  EXPECT_EQ(sr.kernel_count, 1);
  EXPECT_EQ(sr.kernel_time_ns, 100);
  EXPECT_EQ(sr.cpu_calls, 0);
  EXPECT_TRUE(std::all_of(r.kernels.begin(), r.kernels.end(),
                          [](const KernelStats& k) { return k.communication; }));
}

TEST(ListCollectiveKernels, LabelledInBeginOrder) {
  RankTrace t = CommTrace();
  std::reverse(t.events.begin(), t.events.end());  // any input order
  auto ks = ListCollectiveKernels(t);
  ASSERT_EQ(ks.size(), 4u);
  EXPECT_EQ(ks[0].collective, "all_reduce");
  EXPECT_EQ(ks[0].begin_ns, 200);
  EXPECT_EQ(ks[0].end_ns, 1200);
  EXPECT_EQ(ks[0].stream, 20);
  EXPECT_EQ(ks[1].collective, "all_to_all");
  EXPECT_EQ(ks[2].collective, "all_to_all");
  EXPECT_EQ(ks[3].collective, "send_recv");
}

// ---------------------------------------------------------------- cross-rank

CrossRankInput RankInput(int32_t rank, std::vector<std::pair<int64_t, int64_t>> steps,
                         std::vector<std::pair<std::string_view, int64_t>> collectives) {
  CrossRankInput in;
  in.rank = rank;
  int64_t n = 1;
  for (auto [b, e] : steps) in.steps.push_back(Step{n++, b, e, 0, 0});
  for (auto [name, begin] : collectives) {
    in.collectives.push_back(CollectiveKernel{name, begin, begin + 10, 0});
  }
  return in;
}

std::vector<CrossRankInput> ThreeRanks() {
  return {
      RankInput(0, {{1000, 2000}, {2000, 3100}},
                {{"all_reduce", 1100}, {"all_gather", 1500}, {"all_reduce", 2100}}),
      RankInput(1, {{5000, 6200}, {6200, 7150}},
                {{"all_reduce", 5150}, {"all_gather", 5400}, {"all_reduce", 6050}}),
      RankInput(
          2, {{0, 1000}, {1000, 2000}, {2000, 2500}},
          {{"all_reduce", 120}, {"all_gather", 450}, {"all_reduce", 1300}, {"all_reduce", 1800}}),
  };
}

TEST(AnalyzeCrossRank, StepSpreadAndStraggler) {
  auto ranks = ThreeRanks();
  auto r = AnalyzeCrossRank(ranks);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->steps.size(), 2u);  // step 3 only on rank 2
  const StepSpread& s1 = r->steps[0];
  EXPECT_EQ(s1.step, 1);
  EXPECT_EQ(s1.ranks, 3);
  EXPECT_EQ(s1.min_ns, 1000);
  EXPECT_EQ(s1.max_ns, 1200);
  EXPECT_DOUBLE_EQ(s1.median_ns, 1000.0);
  EXPECT_DOUBLE_EQ(s1.spread, 0.2);
  EXPECT_NEAR(s1.cv_pct, 8.8388, 1e-3);  // std 94.28 / mean 1066.67
  EXPECT_EQ(s1.slowest_rank, 1);
  const StepSpread& s2 = r->steps[1];
  EXPECT_EQ(s2.min_ns, 950);
  EXPECT_EQ(s2.max_ns, 1100);
  EXPECT_DOUBLE_EQ(s2.spread, 0.15);
  EXPECT_NEAR(s2.cv_pct, 6.1339, 1e-3);  // std 62.36 / mean 1016.67
  EXPECT_EQ(s2.slowest_rank, 0);

  ASSERT_EQ(r->ranks.size(), 3u);
  EXPECT_EQ(r->ranks[0].times_slowest, 1);
  EXPECT_EQ(r->ranks[1].times_slowest, 1);
  EXPECT_EQ(r->ranks[2].times_slowest, 0);
  EXPECT_DOUBLE_EQ(r->ranks[0].straggler_score, 0.05);   // (0 + 0.1) / 2
  EXPECT_DOUBLE_EQ(r->ranks[1].straggler_score, 0.075);  // (0.2 − 0.05) / 2
  EXPECT_DOUBLE_EQ(r->ranks[2].straggler_score, 0.0);
  EXPECT_EQ(r->ranks[2].steps, 2);
  EXPECT_EQ(r->slowest_rank, 1);
}

TEST(AnalyzeCrossRank, LateArrivalAlignedOnFirstCommonStep) {
  auto ranks = ThreeRanks();
  auto r = AnalyzeCrossRank(ranks);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->aligned_on_step, 1);
  // Aligned arrivals: all_reduce#0 100/150/120, all_reduce#1 1100/1050/1300, all_gather
  // 500/400/450.
  EXPECT_EQ(r->collectives_matched, 3);
  EXPECT_EQ(r->collectives_unmatched, 1);  // rank 2's third all_reduce
  const RankSkew& r0 = r->ranks[0];
  const RankSkew& r1 = r->ranks[1];
  const RankSkew& r2 = r->ranks[2];
  EXPECT_EQ(r0.collectives, 3);
  EXPECT_EQ(r0.times_last, 1);
  EXPECT_EQ(r0.held_up_ns, 50);  // all_gather: 500 − 450
  EXPECT_EQ(r1.times_last, 1);
  EXPECT_EQ(r1.held_up_ns, 30);  // all_reduce#0: 150 − 120
  EXPECT_EQ(r2.times_last, 1);
  EXPECT_EQ(r2.held_up_ns, 200);                // all_reduce#1: 1300 − 1100
  EXPECT_DOUBLE_EQ(r0.mean_lateness_ns, 50.0);  // {0, 50, 100}
  EXPECT_DOUBLE_EQ(r0.p95_lateness_ns, 95.0);
  EXPECT_NEAR(r1.mean_lateness_ns, 50.0 / 3, 1e-9);  // {50, 0, 0}
  EXPECT_DOUBLE_EQ(r1.p95_lateness_ns, 45.0);
  EXPECT_NEAR(r2.mean_lateness_ns, 320.0 / 3, 1e-9);  // {20, 250, 50}
  EXPECT_DOUBLE_EQ(r2.p95_lateness_ns, 230.0);
  EXPECT_EQ(r->latest_rank, 2);  // tie on times_last, most held up
}

TEST(AnalyzeCrossRank, OneRankOrNothingShared) {
  auto ranks = ThreeRanks();
  EXPECT_FALSE(AnalyzeCrossRank(std::span(ranks).first(1)).has_value());
  EXPECT_FALSE(AnalyzeCrossRank({}).has_value());
  std::vector<CrossRankInput> apart = {RankInput(0, {{0, 10}}, {}), RankInput(1, {}, {})};
  auto r = AnalyzeCrossRank(apart);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_FALSE(r->slowest_rank.has_value());
  EXPECT_FALSE(r->latest_rank.has_value());
  EXPECT_FALSE(r->aligned_on_step.has_value());
}

// ---------------------------------------------------------------- Perfetto export

TEST(LaneAssigner, NestedStaysPartialOverlapMoves) {
  struct In {
    int64_t b, e;
    uint32_t lane;
  } cases[] = {
      {0, 100, 0},    //
      {10, 20, 0},    // nested in [0,100]
      {15, 30, 1},    // overlaps [10,20] without nesting
      {20, 25, 0},    // [10,20] closed at 20: nests in [0,100]
      {50, 150, 1},   // overlaps [0,100]; lane 1's [15,30] closed
      {200, 200, 0},  // zero length
      {200, 210, 0},  // starts where the zero-length one ends
      {200, 210, 0},  // identical interval nests
  };
  LaneAssigner a;
  for (const In& c : cases) EXPECT_EQ(a.Add(c.b, c.e), c.lane) << c.b << "," << c.e;
  EXPECT_EQ(a.lanes(), 2u);
}

TEST(AppendMicros, ExactFromNs) {
  std::pair<int64_t, std::string> cases[] = {
      {0, "0.000"},
      {1, "0.001"},
      {1500, "1.500"},
      {1234567, "1234.567"},
      {-1500, "-1.500"},
      {-1, "-0.001"},
      {1682725898240951123, "1682725898240951.123"},
  };
  for (const auto& [ns, want] : cases) {
    std::string out;
    AppendMicros(out, ns);
    EXPECT_EQ(out, want);
  }
}

constexpr int64_t kBase = 1682725898240951000;  // absolute Kineto-like times, in ns

std::vector<RankTrace> ExportRanks() {
  std::vector<RankTrace> ranks(2);
  RankTrace& a = ranks[0];
  a.rank = 0;
  a.process_names[100] = "python";
  a.thread_names[1] = "MainThread";
  Add(a, {kOp, "aten::mm", kBase + 0, 500, 100, 1});
  Add(a, {kRt, "cudaLaunchKernel", kBase + 100, 50, 100, 1, 7});
  Add(a, {kRt, "cudaLaunchKernel", kBase + 200, 50, 100, 1, 8});
  // Partially overlapping kernels on stream 7 (bad data or a sync row): need a second lane.
  Add(a, {kK, "k1", kBase + 1000, 400, 0, 7, 7});
  Add(a, {kK, "k2", kBase + 1200, 600, 0, 7, 8});
  Add(a, {kK, "k3", kBase + 1900, 100, 0, 7});
  RankTrace& b = ranks[1];
  b.rank = 1;
  Add(b, {kRt, "cudaLaunchKernel", kBase + 50, 20, 200, 5, 7});  // same correlation as rank 0
  Add(b, {kK, "weird \"name\"\n\\", kBase + 400, 100, 1, 9, 7});
  return ranks;
}

nlohmann::json ExportAndParse(const std::vector<RankTrace>& ranks, PerfettoExportStats& stats) {
  std::string path = testing::TempDir() + "/kernels_test_perfetto.json";
  auto result = WritePerfettoJsonFile(ranks, path);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
  if (result.ok()) stats = *result;
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

int64_t Ns(const nlohmann::json& micros) { return std::llround(micros.get<double>() * 1000.0); }

using Tracks = std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>>;
using ThreadNames = std::map<std::pair<int64_t, int64_t>, std::string>;

// Asserts that on every (pid, tid) the X slices are disjoint or nested and that every track and
// process is named; returns the number of slices checked.
int64_t CheckNesting(Tracks& slices, const std::map<int64_t, std::string>& process_names,
                     const ThreadNames& thread_names) {
  int64_t total = 0;
  for (auto& [track, list] : slices) {
    EXPECT_TRUE(process_names.count(track.first)) << track.first;
    EXPECT_TRUE(thread_names.count(track)) << track.first << "/" << track.second;
    std::sort(list.begin(), list.end(), [](auto x, auto y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    std::vector<int64_t> open;  // ends of enclosing slices
    for (auto [ts, dur] : list) {
      while (!open.empty() && open.back() <= ts) open.pop_back();
      EXPECT_TRUE(open.empty() || ts + dur <= open.back())
          << "overlap without nesting at " << ts << " on " << track.first << "/" << track.second;
      open.push_back(ts + dur);
      ++total;
    }
  }
  return total;
}

TEST(PerfettoExport, TracksNestAndAreNamed) {
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse(ExportRanks(), stats);
  EXPECT_EQ(stats.slices, 8);
  EXPECT_EQ(stats.flows, 3);
  EXPECT_EQ(stats.extra_lanes, 1);
  EXPECT_EQ(stats.tracks, 5);  // rank 0: host thread, stream 7 ×2; rank 1: host, stream 9
  EXPECT_EQ(stats.origin_ns, kBase);
  EXPECT_EQ(doc["otherData"]["origin_ns"], kBase);

  std::map<int64_t, std::string> process_names;
  ThreadNames thread_names;
  Tracks slices;
  std::map<int64_t, int> flow_phases;
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (ph == "M" && e["name"] == "process_name") process_names[key.first] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (ph == "X") {
      slices[key].emplace_back(Ns(e["ts"]), Ns(e["dur"]));
      names.insert(e["name"].get<std::string>());
    }
    if (ph == "s") flow_phases[e["id"].get<int64_t>()] += 1;
    if (ph == "f") {
      flow_phases[e["id"].get<int64_t>()] += 10;
      EXPECT_EQ(e["bp"], "e");
    }
  }
  std::set<std::string> pnames, tnames;
  for (const auto& [pid, n] : process_names) pnames.insert(n);
  for (const auto& [k, n] : thread_names) tnames.insert(n);
  EXPECT_EQ(pnames, (std::set<std::string>{"rank 0 host python (pid 100)", "rank 0 GPU 0",
                                           "rank 1 host (pid 200)", "rank 1 GPU 1"}));
  EXPECT_EQ(tnames,
            (std::set<std::string>{"rank 0 MainThread (tid 1)", "rank 0 stream 7",
                                   "rank 0 stream 7 (2)", "rank 1 thread 5", "rank 1 stream 9"}));
  EXPECT_TRUE(names.count("weird \"name\"\n\\"));
  for (const auto& [id, phases] : flow_phases) EXPECT_EQ(phases, 11) << "flow " << id;
  EXPECT_EQ(flow_phases.size(), 3u);

  EXPECT_EQ(CheckNesting(slices, process_names, thread_names), 8);
  // Exact ns after rebasing: k2 starts 1200 ns after the origin.
  const auto& stream7_lane2 = std::find_if(thread_names.begin(), thread_names.end(), [](auto& kv) {
                                return kv.second == "rank 0 stream 7 (2)";
                              })->first;
  ASSERT_EQ(slices[stream7_lane2].size(), 1u);
  EXPECT_EQ(slices[stream7_lane2][0], std::make_pair(int64_t{1200}, int64_t{600}));
}

TEST(PerfettoExport, FarApartRanksRebasedAlone) {
  std::vector<RankTrace> ranks(4);
  ranks[0].rank = 0;
  Add(ranks[0], {kK, "a", kBase + 7, 10, 0, 7});
  ranks[1].rank = 1;  // no events: must not pull the origin to 0
  ranks[2].rank = 2;
  constexpr int64_t kMonthNs = int64_t{30} * 24 * 3600 * 1'000'000'000;
  Add(ranks[2], {kK, "b", kBase + kMonthNs + 3, 10, 0, 7});
  ranks[3].rank = 3;  // same job as rank 2: shares its origin
  Add(ranks[3], {kK, "c", kBase + kMonthNs + 1003, 10, 0, 7});
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse(ranks, stats);
  EXPECT_EQ(stats.origin_ns, kBase + 7);
  EXPECT_EQ(stats.ranks_rebased_alone, 2);
  std::map<std::string, std::string> ts_by_name;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") ts_by_name[e["name"]] = e["ts"].dump();
  }
  EXPECT_EQ(ts_by_name["a"], "0.0");
  EXPECT_EQ(ts_by_name["b"], "0.0");
  EXPECT_EQ(ts_by_name["c"], "1.0");
  ASSERT_EQ(doc["otherData"]["ranks"].size(), 4u);
  EXPECT_EQ(doc["otherData"]["ranks"][2]["origin_ns"], kBase + kMonthNs + 3);
}

TEST(PerfettoExport, EmptyInputIsValidJson) {
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse({}, stats);
  EXPECT_TRUE(doc["traceEvents"].empty());
  EXPECT_EQ(stats.slices, 0);
}

TEST(PerfettoExport, UnwritablePathFailsNamingIt) {
  std::vector<RankTrace> none;
  auto r = WritePerfettoJsonFile(none, "/nonexistent-dir/x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent-dir/x.json"), std::string::npos);
}

// ---------------------------------------------------------------- fixture through the reader

TEST(KernelsFixture, CommTraceThroughReader) {
  auto trace = ReadTrace(STALLSCOPE_SOURCE_DIR "/tests/data/traces/kernels_comm.json");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  EXPECT_EQ(trace->rank, 1);
  Timeline tl = PrepareTimeline(*trace, AnalysisOptions{});
  ASSERT_EQ(tl.steps.size(), 1u);
  KernelReport r = AnalyzeKernels(*trace);
  EXPECT_EQ(r.kernel_count, 3);
  EXPECT_EQ(r.kernel_time_ns, 5000);
  EXPECT_EQ(r.gpu_busy_ns, 5300);  // [1000.2 µs, 1005.5 µs] without a gap
  EXPECT_EQ(r.tensor_core_time_ns, 3000);
  EXPECT_EQ(r.tensor_core_share, 0.6);
  EXPECT_EQ(r.cuda_graph_launches, 1);
  EXPECT_EQ(r.cuda_graph_kernels, 2);  // both kernels of correlation 20
  ASSERT_EQ(r.memcpy.size(), 1u);
  EXPECT_EQ(r.memcpy[0].kind.host_memory, HostMemory::kPageable);
  EXPECT_EQ(r.memcpy[0].bytes, 2000u);
  EXPECT_EQ(r.memcpy[0].effective_gbps, 5.0);
  ASSERT_EQ(r.collectives.size(), 1u);
  const CollectiveStats& c = r.collectives[0];
  EXPECT_EQ(c.collective, "all_reduce");
  EXPECT_EQ(c.kernel_count, 1);
  EXPECT_EQ(c.kernel_time_ns, 1000);
  EXPECT_EQ(c.cpu_calls, 1);
  EXPECT_EQ(c.cpu_time_ns, 100);
  EXPECT_EQ(c.in_nelems, 1000);
  EXPECT_EQ(c.in_bytes, 4000u);
  auto ks = ListCollectiveKernels(*trace);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].begin_ns, 1000200);
  EXPECT_EQ(ks[0].end_ns, 1001200);
  EXPECT_EQ(ks[0].stream, 20);
}

// ---------------------------------------------------------------- real traces (skipped if absent)

// /work/shared/traces/hta (SOURCE.md): env STALLSCOPE_SHARED_DIR, else next to the checkout.
std::optional<std::string> HtaDir() {
  const char* env = std::getenv("STALLSCOPE_SHARED_DIR");
  std::string shared = env != nullptr && *env != '\0' ? env : STALLSCOPE_SOURCE_DIR "/../shared";
  std::string dir = shared + "/traces/hta";
  if (!std::filesystem::exists(dir + "/trace_diff/control/control.json.gz")) return std::nullopt;
  return dir;
}

void PrintReport(const KernelReport& r) {
  std::printf("kernels %lld, kernel time %lld ns, busy %lld ns, tensor-core share %s\n",
              static_cast<long long>(r.kernel_count), static_cast<long long>(r.kernel_time_ns),
              static_cast<long long>(r.gpu_busy_ns),
              r.tensor_core_share ? std::to_string(*r.tensor_core_share).c_str() : "unknown");
  for (size_t i = 0; i < std::min<size_t>(r.kernels.size(), 5); ++i) {
    const KernelStats& k = r.kernels[i];
    std::printf("  %-60s n=%lld total=%lld ns share=%.3f tc=%d\n", ShortKernelName(k.name).c_str(),
                static_cast<long long>(k.count), static_cast<long long>(k.total_ns), k.busy_share,
                k.tensor_core ? 1 : 0);
  }
  for (const MemcpyStats& m : r.memcpy) {
    std::printf("  memcpy %s %s n=%lld bytes=%llu time=%lld ns %.3f GB/s\n",
                std::string(MemcpyDirectionName(m.kind.direction)).c_str(),
                std::string(HostMemoryName(m.kind.host_memory)).c_str(),
                static_cast<long long>(m.count), static_cast<unsigned long long>(m.bytes),
                static_cast<long long>(m.time_ns), m.effective_gbps.value_or(0));
  }
  std::printf("  memset n=%lld bytes=%llu time=%lld ns\n", static_cast<long long>(r.memset.count),
              static_cast<unsigned long long>(r.memset.bytes),
              static_cast<long long>(r.memset.time_ns));
  for (const CollectiveStats& c : r.collectives) {
    std::printf("  collective %s kernels=%lld gpu=%lld ns cpu_calls=%lld in_bytes=%s\n",
                std::string(c.collective).c_str(), static_cast<long long>(c.kernel_count),
                static_cast<long long>(c.kernel_time_ns), static_cast<long long>(c.cpu_calls),
                c.in_bytes ? std::to_string(*c.in_bytes).c_str() : "-");
  }
}

TEST(HtaTraces, ControlKernelsMemcpyCollectives) {
  auto dir = HtaDir();
  if (!dir) GTEST_SKIP() << "shared/traces/hta not present";
  auto trace = ReadTrace(*dir + "/trace_diff/control/control.json.gz");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  (void)PrepareTimeline(*trace, AnalysisOptions{});
  KernelReport r = AnalyzeKernels(*trace);
  PrintReport(r);
  // Expected values computed independently from the JSON with Python (sums of dur/bytes by cat
  // and name; union of kernel/memcpy/memset intervals); all events lie inside steps 1009–1014.
  EXPECT_EQ(r.kernel_count, 8568);
  EXPECT_EQ(r.kernel_time_ns, 446813000);
  EXPECT_EQ(r.gpu_busy_ns, 388587000);
  ASSERT_TRUE(r.tensor_core_share.has_value());  // cutlass_80_tensorop_s1688gemm_* kernels
  EXPECT_NEAR(*r.tensor_core_share, 66811.0 / 446813.0, 1e-12);
  ASSERT_FALSE(r.kernels.empty());
  EXPECT_EQ(r.kernels[0].name, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)");
  EXPECT_EQ(r.kernels[0].count, 42);
  EXPECT_EQ(r.kernels[0].total_ns, 130655000);
  ASSERT_EQ(r.memcpy.size(), 3u);
  EXPECT_EQ(r.memcpy[0].kind.direction, MemcpyDirection::kHtoD);
  EXPECT_EQ(r.memcpy[0].kind.host_memory, HostMemory::kPinned);
  EXPECT_EQ(r.memcpy[0].count, 150);
  EXPECT_EQ(r.memcpy[0].bytes, 423923260u);
  EXPECT_EQ(r.memcpy[0].time_ns, 50656000);
  EXPECT_EQ(r.memcpy[1].kind.host_memory, HostMemory::kPageable);  // DtoH
  EXPECT_EQ(r.memcpy[1].count, 60);
  EXPECT_EQ(r.memcpy[1].bytes, 100896u);
  EXPECT_EQ(r.memcpy[2].kind.direction, MemcpyDirection::kDtoD);
  EXPECT_EQ(r.memcpy[2].bytes, 1821299360u);
  EXPECT_EQ(r.memset.count, 654);
  EXPECT_EQ(r.memset.bytes, 76353248u);
  EXPECT_EQ(r.memset.time_ns, 1256000);
  // SendRecv kernels are launched inside nccl:all_to_all: labelled all_to_all, not send_recv.
  ASSERT_GE(r.collectives.size(), 2u);
  EXPECT_EQ(r.collectives[0].collective, "all_to_all");
  EXPECT_EQ(r.collectives[0].kernel_count, 42);
  EXPECT_EQ(r.collectives[1].collective, "all_reduce");
  EXPECT_EQ(r.collectives[1].kernel_count, 18);
  EXPECT_EQ(r.collectives[1].cpu_calls, 18);
}

TEST(HtaTraces, TraceFilterCrossRankAndExport) {
  auto dir = HtaDir();
  if (!dir) GTEST_SKIP() << "shared/traces/hta not present";
  std::vector<RankTrace> traces;
  std::vector<CrossRankInput> inputs;
  for (const char* f : {"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}) {
    auto trace = ReadTrace(*dir + "/trace_filter/" + f);
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    Timeline tl = PrepareTimeline(*trace, AnalysisOptions{});
    inputs.push_back(MakeCrossRankInput(*trace, tl, AnalyzeKernels(*trace)));
    traces.push_back(std::move(*trace));
  }
  auto r = AnalyzeCrossRank(inputs);
  ASSERT_TRUE(r.has_value());
  for (const RankSkew& k : r->ranks) {
    std::printf(
        "rank %d score %.4f collectives %lld last %lld held %lld ns lateness mean %.0f "
        "p95 %.0f ns\n",
        k.rank, k.straggler_score, static_cast<long long>(k.collectives),
        static_cast<long long>(k.times_last), static_cast<long long>(k.held_up_ns),
        k.mean_lateness_ns, k.p95_lateness_ns);
  }
  // ProfilerStep#551: 607312 vs 607904 µs; #552: 622928 vs 630639 µs (from the JSON).
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].min_ns, 607312000);
  EXPECT_EQ(r->steps[0].max_ns, 607904000);
  EXPECT_EQ(r->steps[1].min_ns, 622928000);
  EXPECT_EQ(r->steps[1].max_ns, 630639000);
  EXPECT_EQ(r->steps[0].slowest_rank, 1);
  EXPECT_EQ(r->steps[1].slowest_rank, 1);
  EXPECT_EQ(r->slowest_rank, 1);
  EXPECT_EQ(r->aligned_on_step, 551);
  EXPECT_EQ(r->collectives_matched, 10);  // 10 ncclKernel_SendRecv kept per rank by sampling

  std::string path = testing::TempDir() + "/kernels_test_trace_filter.json";
  auto stats = WritePerfettoJsonFile(traces, path);
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int64_t, std::string> process_names;
  ThreadNames thread_names;
  Tracks slices;
  for (const auto& e : doc["traceEvents"]) {
    auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[key.first] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (e["ph"] == "X") slices[key].emplace_back(Ns(e["ts"]), Ns(e["dur"]));
  }
  int64_t events = 0;
  for (const RankTrace& t : traces) events += static_cast<int64_t>(t.events.size());
  EXPECT_EQ(CheckNesting(slices, process_names, thread_names), events);
  EXPECT_EQ(stats->slices, events);
  std::printf("perfetto: %lld slices, %lld flows, %lld tracks (%lld extra lanes)\n",
              static_cast<long long>(stats->slices), static_cast<long long>(stats->flows),
              static_cast<long long>(stats->tracks), static_cast<long long>(stats->extra_lanes));
}

}  // namespace
}  // namespace stallscope::trace
