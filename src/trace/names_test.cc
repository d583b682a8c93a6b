#include "trace/names.h"

#include <string_view>

#include <gtest/gtest.h>

namespace stallscope::trace {
namespace {

struct CallCase {
  std::string_view name;
  RuntimeCallKind kind;
};

// Every kind, the runtime and the driver API and HIP alike, with the names real traces carry.
TEST(RuntimeCallKindOf, ClassifiesCallsByWhatTheyDo) {
  const CallCase cases[] = {
      {"cudaLaunchKernel", RuntimeCallKind::kLaunch},
      {"cudaLaunchKernelExC", RuntimeCallKind::kLaunch},
      {"cuLaunchKernel", RuntimeCallKind::kLaunch},
      {"cuLaunchKernelEx", RuntimeCallKind::kLaunch},
      {"cudaLaunchCooperativeKernel", RuntimeCallKind::kLaunch},
      {"cudaGraphLaunch", RuntimeCallKind::kLaunch},
      {"cuGraphLaunch", RuntimeCallKind::kLaunch},
      {"hipExtLaunchKernel", RuntimeCallKind::kLaunch},
      {"cudaMemcpyAsync", RuntimeCallKind::kLaunch},
      {"cuMemcpyHtoDAsync_v2", RuntimeCallKind::kLaunch},
      {"cudaMemsetAsync", RuntimeCallKind::kLaunch},
      {"cudaDeviceSynchronize", RuntimeCallKind::kSync},
      {"cudaStreamSynchronize", RuntimeCallKind::kSync},
      {"cudaEventSynchronize", RuntimeCallKind::kSync},
      {"cuCtxSynchronize", RuntimeCallKind::kSync},
      {"cudaMemcpy", RuntimeCallKind::kSync},
      {"cuMemcpyDtoH_v2", RuntimeCallKind::kSync},
      {"cudaMalloc", RuntimeCallKind::kMemory},
      {"cudaFree", RuntimeCallKind::kMemory},
      {"cudaMallocAsync", RuntimeCallKind::kMemory},
      {"cudaFreeAsync", RuntimeCallKind::kMemory},
      {"cudaHostAlloc", RuntimeCallKind::kMemory},
      {"cudaMallocHost", RuntimeCallKind::kMemory},
      {"cudaFreeHost", RuntimeCallKind::kMemory},
      {"cudaHostRegister", RuntimeCallKind::kMemory},
      {"cuMemAlloc_v2", RuntimeCallKind::kMemory},
      {"cuMemFree_v2", RuntimeCallKind::kMemory},
      {"cuMemCreate", RuntimeCallKind::kMemory},
      {"cuMemMap", RuntimeCallKind::kMemory},
      {"cuMemAddressReserve", RuntimeCallKind::kMemory},
      {"cudaMemGetInfo", RuntimeCallKind::kMemory},
      {"hipMalloc", RuntimeCallKind::kMemory},
      {"cudaDeviceGetStreamPriorityRange", RuntimeCallKind::kSetup},
      {"cudaGetDeviceProperties_v2", RuntimeCallKind::kSetup},
      {"cudaDeviceGetAttribute", RuntimeCallKind::kSetup},
      {"cudaSetDevice", RuntimeCallKind::kSetup},
      {"cudaGetDeviceCount", RuntimeCallKind::kSetup},
      {"cuInit", RuntimeCallKind::kSetup},
      {"cuDevicePrimaryCtxRetain", RuntimeCallKind::kSetup},
      {"cuCtxGetCurrent", RuntimeCallKind::kSetup},
      {"cudaStreamCreateWithPriority", RuntimeCallKind::kSetup},
      {"cudaEventCreateWithFlags", RuntimeCallKind::kSetup},
      {"cuModuleLoadData", RuntimeCallKind::kSetup},
      {"cuModuleGetFunction", RuntimeCallKind::kSetup},
      {"cuLibraryLoadData", RuntimeCallKind::kSetup},
      {"cudaFuncGetAttributes", RuntimeCallKind::kSetup},
      {"cudaStreamBeginCapture", RuntimeCallKind::kSetup},
      {"cudaGraphInstantiateWithFlags", RuntimeCallKind::kSetup},
      {"cuGetProcAddress_v2", RuntimeCallKind::kSetup},
      {"cudaEventRecord", RuntimeCallKind::kOther},
      {"cudaStreamWaitEvent", RuntimeCallKind::kOther},
      {"cudaGetDevice", RuntimeCallKind::kOther},
      {"cudaStreamIsCapturing", RuntimeCallKind::kOther},
      {"cudaEventQuery", RuntimeCallKind::kOther},
      {"cudaPeekAtLastError", RuntimeCallKind::kOther},
      {"cudaGetLastError", RuntimeCallKind::kOther},
      {"aten::add", RuntimeCallKind::kOther},
      {"", RuntimeCallKind::kOther},
  };
  for (const CallCase& c : cases) {
    EXPECT_EQ(RuntimeCallKindName(RuntimeCallKindOf(c.name)), RuntimeCallKindName(c.kind))
        << c.name;
  }
}

TEST(RuntimeCallKindOf, ClassifyRuntimeCallsIsPerNameId) {
  StringTable names;
  uint32_t malloc_id = names.Intern("cudaMalloc");
  uint32_t launch_id = names.Intern("cudaLaunchKernel");
  std::vector<uint8_t> kinds = ClassifyRuntimeCalls(names);
  ASSERT_EQ(kinds.size(), names.size());
  EXPECT_EQ(kinds[malloc_id], static_cast<uint8_t>(RuntimeCallKind::kMemory));
  EXPECT_EQ(kinds[launch_id], static_cast<uint8_t>(RuntimeCallKind::kLaunch));
  EXPECT_EQ(kinds[0], static_cast<uint8_t>(RuntimeCallKind::kOther));
}

TEST(NameTraitsOf, SyncCallsAndStreamWaits) {
  EXPECT_TRUE(NameTraitsOf("cudaStreamSynchronize") & kTraitSyncCall);
  EXPECT_TRUE(NameTraitsOf("cudaMemcpy") & kTraitSyncCall);
  EXPECT_FALSE(NameTraitsOf("cudaMemcpyAsync") & kTraitSyncCall);
  EXPECT_TRUE(NameTraitsOf("cudaStreamWaitEvent") & kTraitStreamWait);
  EXPECT_TRUE(NameTraitsOf("aten::item") & kTraitSyncOp);
  EXPECT_TRUE(IsCommKernelName("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  EXPECT_TRUE(IsGraphLaunchName("cudaGraphLaunch"));
}

}  // namespace
}  // namespace stallscope::trace
