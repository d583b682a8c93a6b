/* The NVML floor under `record` (issue 28): what a minimal GPU poller pays for the same library.
 * Every INTERVAL_MS, COUNT times, it polls for each GPU the six fields of
 *   nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu,
 *              clocks_event_reasons.active -lms INTERVAL_MS
 * (nvmlDeviceGetUtilizationRates, GetMemoryInfo, GetPowerUsage, GetClockInfo(SM),
 * GetTemperature(GPU), GetCurrentClocksEventReasons) and makes one write to /dev/null (a line per
 * GPU, as nvidia-smi prints). bench/overhead.sh runs it beside `record` with the same library,
 * scenario and cost table ($STALLSCOPE_FAKE_NVML_COST). Declares by hand the little of nvml.h it
 * needs (CUDA 12.x; no NVIDIA header), as a third-party client would.
 *   nvml_floor LIB INTERVAL_MS COUNT    prints "<µs of CPU per iteration>" (nvmlInit excluded) */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

enum { kMaxGpus = 64, kClockSm = 1, kTemperatureGpu = 0 };

typedef struct {
  nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*events)(nvmlDevice_t, unsigned long long*);
} Calls;

static double CpuUs(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* dlsym into a function pointer without a cast between object and function pointers (C11). */
static int Load(void* lib, const char* name, void* fn_ptr) {
  void* sym = dlsym(lib, name);
  if (sym == NULL) fprintf(stderr, "nvml_floor: the library has no %s\n", name);
  *(void**)fn_ptr = sym;
  return sym != NULL;
}

/* One nvidia-smi line for every GPU; the values that failed are printed as N/A, as it does. */
static int PollLine(const Calls* c, nvmlDevice_t* gpus, unsigned int n, char* line, size_t size) {
  int len = 0;
  for (unsigned int i = 0; i < n && (size_t)len < size; ++i) {
    nvmlUtilization_t u = {0, 0};
    nvmlMemory_t m = {0, 0, 0};
    unsigned int mw = 0, mhz = 0, temp = 0;
    unsigned long long reasons = 0;
    const int ok_u = c->util(gpus[i], &u) == 0, ok_m = c->memory(gpus[i], &m) == 0;
    const int ok_p = c->power(gpus[i], &mw) == 0, ok_c = c->clock(gpus[i], kClockSm, &mhz) == 0;
    const int ok_t = c->temperature(gpus[i], kTemperatureGpu, &temp) == 0;
    const int ok_e = c->events(gpus[i], &reasons) == 0;
    len +=
        snprintf(line + len, size - (size_t)len, "%d %%, %llu MiB, %.2f W, %u MHz, %u, 0x%llx%s\n",
                 ok_u ? (int)u.gpu : -1, ok_m ? m.used >> 20 : 0ULL, ok_p ? mw / 1000.0 : 0.0,
                 ok_c ? mhz : 0U, ok_t ? temp : 0U, ok_e ? reasons : 0ULL,
                 ok_u && ok_m && ok_p && ok_c && ok_t && ok_e ? "" : " (N/A)");
  }
  return (size_t)len < size ? len : (int)size - 1; /* snprintf counts what did not fit */
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: nvml_floor LIB INTERVAL_MS COUNT\n");
    return 2;
  }
  const char* path = argv[1][0] != '\0' ? argv[1] : "libnvidia-ml.so.1";
  const long interval_ms = atol(argv[2]), count = atol(argv[3]);
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "nvml_floor: %s\n", dlerror());
    return 1;
  }
  nvmlReturn_t (*init)(void), (*get_count)(unsigned int*), (*shutdown)(void);
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*);
  Calls c;
  if (!Load(lib, "nvmlInit_v2", &init) || !Load(lib, "nvmlShutdown", &shutdown) ||
      !Load(lib, "nvmlDeviceGetCount_v2", &get_count) ||
      !Load(lib, "nvmlDeviceGetHandleByIndex_v2", &handle) ||
      !Load(lib, "nvmlDeviceGetUtilizationRates", &c.util) ||
      !Load(lib, "nvmlDeviceGetMemoryInfo", &c.memory) ||
      !Load(lib, "nvmlDeviceGetPowerUsage", &c.power) ||
      !Load(lib, "nvmlDeviceGetClockInfo", &c.clock) ||
      !Load(lib, "nvmlDeviceGetTemperature", &c.temperature) ||
      !Load(lib, "nvmlDeviceGetCurrentClocksEventReasons", &c.events)) {
    return 1;
  }
  unsigned int n = 0;
  if (init() != 0 || get_count(&n) != 0) {
    fprintf(stderr, "nvml_floor: nvmlInit_v2 or nvmlDeviceGetCount_v2 failed\n");
    return 1;
  }
  if (n > kMaxGpus) n = kMaxGpus;
  nvmlDevice_t gpus[kMaxGpus];
  for (unsigned int i = 0; i < n; ++i) {
    if (handle(i, &gpus[i]) != 0) return 1;
  }
  const int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
  static char line[kMaxGpus * 128];
  const double cpu0 = CpuUs(); /* after nvmlInit: a poller pays that once */
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long k = 0; k < count; ++k) {
    next.tv_nsec += interval_ms * 1000000L;
    while (next.tv_nsec >= 1000000000L) next.tv_nsec -= 1000000000L, ++next.tv_sec;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    const int len = PollLine(&c, gpus, n, line, sizeof line);
    if (write(out, line, (size_t)len) < 0) return 1;
  }
  const double us = CpuUs() - cpu0;
  shutdown();
  printf("%.1f\n", count > 0 ? us / (double)count : 0.0);
  return 0;
}
