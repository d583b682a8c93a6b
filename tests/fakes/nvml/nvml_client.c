/* A third-party NVML client, written the way an outside user of the public nvml.h would: it does
 * not include any stallscope header, declares only what it calls (nvml.h, CUDA 12.x; NVML API
 * reference), and links against libnvidia-ml.so.1 directly. Built against the fake, it checks that
 * the fake is a drop-in libnvidia-ml for ordinary C programs. */
#include <stdio.h>

typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);

static int Fail(const char* what, nvmlReturn_t rc) {
  printf("nvml_client: FAIL %s: %s\n", what, nvmlErrorString(rc));
  return 1;
}

int main(void) {
  nvmlReturn_t rc = nvmlInit_v2();
  if (rc != NVML_SUCCESS) return Fail("nvmlInit_v2", rc);
  unsigned int count = 0;
  rc = nvmlDeviceGetCount_v2(&count);
  if (rc != NVML_SUCCESS) return Fail("nvmlDeviceGetCount_v2", rc);
  printf("gpus=%u\n", count);
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device;
    char name[96];
    nvmlMemory_t memory;
    nvmlUtilization_t util;
    if ((rc = nvmlDeviceGetHandleByIndex_v2(i, &device)) != NVML_SUCCESS) return Fail("handle", rc);
    if ((rc = nvmlDeviceGetName(device, name, sizeof name)) != NVML_SUCCESS)
      return Fail("name", rc);
    if ((rc = nvmlDeviceGetMemoryInfo(device, &memory)) != NVML_SUCCESS) return Fail("memory", rc);
    if ((rc = nvmlDeviceGetUtilizationRates(device, &util)) != NVML_SUCCESS)
      return Fail("util", rc);
    printf("gpu%u name=\"%s\" mem_total_mib=%llu mem_used_mib=%llu util_gpu=%u util_mem=%u\n", i,
           name, memory.total >> 20, memory.used >> 20, util.gpu, util.memory);
  }
  if ((rc = nvmlShutdown()) != NVML_SUCCESS) return Fail("nvmlShutdown", rc);
  printf("nvml_client: OK\n");
  return 0;
}
