#include "trace/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trace/timeline.h"
#include "trace/trace_reader.h"

#include "hta_traces.h"
#include "trace_events.h"

namespace stallscope::trace {
namespace {

using testing::Add;
using testing::Ev;
using testing::kAnn;
using testing::kK;
using testing::kOp;
using testing::kRt;

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

// The HTA reference traces (tests/support/hta_traces.h).
std::optional<std::string> KernelsHtaDir() {
  std::string dir = testing::HtaTracesDir().string();
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
  auto dir = KernelsHtaDir();
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

}  // namespace
}  // namespace stallscope::trace
