/* What each NVML call a GPU sampler makes costs on this driver (issue 28's table, re-measured by
 * the GPU check, tools/gpu_check.py; shipped in the bundle as bin/stallscope-nvml-cost).
 *
 *   nvml_cost [--calls N] [--lib PATH]
 *
 * On GPU 0 it times N calls (default 200) of each entry point and prints one JSON line per call:
 *   {"call":"GetUtilizationRates","calls":200,"wall_us":19.6,"cpu_us":19.6,"rc":0}
 * wall_us and cpu_us are means per call: CLOCK_MONOTONIC, and CLOCK_PROCESS_CPUTIME_ID (the whole
 * process, so any thread the driver starts is counted too); rc is the last call's nvmlReturn_t
 * (GetProcessUtilization answers 6, NOT_FOUND, when no process ran since lastSeen). The first
 * line is nvmlInit_v2 (once) with "lib", "gpus", "gpu" and "driver". A call the library lacks
 * has calls 0, nulls and "note". GetPcieThroughput takes at most 20 calls: it measures over
 * 20 ms. GPM (Hopper and later, when nvmlGpmQueryDeviceSupport says so): nvmlGpmSampleGet, and
 * nvmlGpmMetricsGet of the 13 metrics `record` asks for (src/gpu/nvml_gpm.cc) between two samples
 * 100 ms apart, its first call (costlier: 6-9.5 ms on an H100) on a line of its own.
 *
 * The library: --lib, else $STALLSCOPE_NVML_LIB (as stallscope), else libnvidia-ml.so.1. It
 * works against our fake (tests/fakes/nvml; STALLSCOPE_FAKE_NVML_COST=h100 charges the H100's
 * table, so the output approximates it). Declares by hand the little of nvml.h it needs (CUDA
 * 12.x layouts, as src/gpu/nvml_abi.h; no NVIDIA header). Plain C11 and -ldl: the bundle's glibc
 * floor.
 *
 * Exit status: 0 measured; 2 bad arguments; 3 no NVML or no GPU (the library does not load,
 * nvmlInit_v2 fails, or no GPU 0). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned long long timeStamp;
  unsigned long long value; /* nvmlValue_t: a union of 8 bytes */
} nvmlSample_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* _v2 and _v3 */
typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
  struct nvmlGpmSample_st* handle;
} nvmlGpmSample_t;
typedef struct {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char *shortName, *longName, *unit;
  } metricInfo;
} nvmlGpmMetric_t;
enum { kGpmMetricsCapacity = 210 }; /* nvml.h's NVML_GPM_METRIC_MAX grew 98 -> 210: the larger */
typedef struct {
  unsigned int version, numMetrics;
  nvmlGpmSample_t sample1, sample2;
  nvmlGpmMetric_t metrics[kGpmMetricsCapacity];
} nvmlGpmMetricsGet_t;
typedef struct {
  unsigned int version, isSupportedDevice;
} nvmlGpmSupport_t;

enum {
  kDefaultCalls = 200,
  kPcieMaxCalls = 20, /* NVML: "measured over a 20 ms interval" */
  kGpuUtilizationSamples = 1,
  kTemperatureGpu = 0,
  kClockSm = 1,
  kClockMem = 2,
  kEccCorrected = 0,
  kEccVolatile = 0,
  kPcieTx = 0,
  kGpmVersion = 1,
  kBufferEntries = 128,
};
/* The metrics `record` asks for (src/gpu/nvml_abi.h, nvmlGpmMetricId_t). */
static const unsigned int kGpmMetricIds[] = {1, 2, 3, 5, 7, 10, 11, 12, 13, 20, 21, 60, 61};
enum { kGpmMetrics = sizeof kGpmMetricIds / sizeof kGpmMetricIds[0] };

/* What one timed call needs: the GPU, the symbol, and buffers of the right types. */
typedef struct {
  nvmlDevice_t gpu;
  void* sym;
  unsigned int u1, u2;
  unsigned long long ull;
  nvmlUtilization_t util;
  nvmlMemory_t mem;
  nvmlSample_t samples[kBufferEntries];
  nvmlProcessInfo_t procs[kBufferEntries];
  nvmlProcessUtilizationSample_t proc_util[kBufferEntries];
  nvmlGpmSample_t gpm1, gpm2;
  nvmlGpmMetricsGet_t gpm_request;
} Ctx;

typedef nvmlReturn_t (*CallFn)(Ctx*);

/* A symbol into a function pointer without a cast between object and function pointers (C11);
 * AS is the pointer, to call it. */
#define SET(fn, sym) (*(void**)&(fn) = (sym))
#define AS(fn, sym) (SET(fn, sym), (fn))

static nvmlReturn_t Utilization(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, nvmlUtilization_t*);
  return AS(fn, c->sym)(c->gpu, &c->util);
}
static nvmlReturn_t Memory(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, nvmlMemory_t*);
  return AS(fn, c->sym)(c->gpu, &c->mem);
}
static nvmlReturn_t UnsignedOut(Ctx* c) { /* power, power limit, PCIe link generation/width */
  nvmlReturn_t (*fn)(nvmlDevice_t, unsigned int*);
  return AS(fn, c->sym)(c->gpu, &c->u1);
}
static nvmlReturn_t UllOut(Ctx* c) { /* energy, clock-event reasons */
  nvmlReturn_t (*fn)(nvmlDevice_t, unsigned long long*);
  return AS(fn, c->sym)(c->gpu, &c->ull);
}
static nvmlReturn_t Temperature(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned int*);
  return AS(fn, c->sym)(c->gpu, kTemperatureGpu, &c->u1);
}
static nvmlReturn_t ClockSm(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned int*);
  return AS(fn, c->sym)(c->gpu, kClockSm, &c->u1);
}
static nvmlReturn_t ClockMem(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned int*);
  return AS(fn, c->sym)(c->gpu, kClockMem, &c->u1);
}
static nvmlReturn_t Processes(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
  c->u1 = kBufferEntries;
  return AS(fn, c->sym)(c->gpu, &c->u1, c->procs);
}
static nvmlReturn_t UtilSamples(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned long long, int*, unsigned int*, nvmlSample_t*);
  int type = 0;
  c->u1 = kBufferEntries;
  return AS(fn, c->sym)(c->gpu, kGpuUtilizationSamples, 0ULL, &type, &c->u1, c->samples);
}
static nvmlReturn_t ProcessUtilization(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                     unsigned long long);
  c->u1 = kBufferEntries;
  return AS(fn, c->sym)(c->gpu, c->proc_util, &c->u1, 0ULL);
}
static nvmlReturn_t EccErrors(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, int, unsigned long long*);
  return AS(fn, c->sym)(c->gpu, kEccCorrected, kEccVolatile, &c->ull);
}
static nvmlReturn_t MigMode(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, unsigned int*, unsigned int*);
  return AS(fn, c->sym)(c->gpu, &c->u1, &c->u2);
}
static nvmlReturn_t PcieTx(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned int*);
  return AS(fn, c->sym)(c->gpu, kPcieTx, &c->u1);
}
static nvmlReturn_t GpmSampleGet(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlDevice_t, nvmlGpmSample_t);
  return AS(fn, c->sym)(c->gpu, c->gpm1);
}
static nvmlReturn_t GpmMetricsGet(Ctx* c) {
  nvmlReturn_t (*fn)(nvmlGpmMetricsGet_t*);
  nvmlGpmMetricsGet_t* r = &c->gpm_request;
  r->version = kGpmVersion;
  r->numMetrics = kGpmMetrics;
  r->sample1 = c->gpm1;
  r->sample2 = c->gpm2;
  for (unsigned int k = 0; k < kGpmMetrics; ++k) {
    memset(&r->metrics[k], 0, sizeof r->metrics[k]);
    r->metrics[k].metricId = kGpmMetricIds[k];
  }
  return AS(fn, c->sym)(r);
}

/* One row of the table: its name in the output, the symbols to try (newest first), how to call
 * it, and at most how many times. */
typedef struct {
  const char* call;
  const char* symbols[2];
  CallFn fn;
  int max_calls; /* 0: no limit */
} Entry;

static const Entry kEntries[] = {
    {"GetUtilizationRates", {"nvmlDeviceGetUtilizationRates", NULL}, Utilization, 0},
    {"GetMemoryInfo", {"nvmlDeviceGetMemoryInfo", NULL}, Memory, 0},
    {"GetPowerUsage", {"nvmlDeviceGetPowerUsage", NULL}, UnsignedOut, 0},
    {"GetEnforcedPowerLimit", {"nvmlDeviceGetEnforcedPowerLimit", NULL}, UnsignedOut, 0},
    {"GetTemperature", {"nvmlDeviceGetTemperature", NULL}, Temperature, 0},
    {"GetClockInfo(SM)", {"nvmlDeviceGetClockInfo", NULL}, ClockSm, 0},
    {"GetClockInfo(MEM)", {"nvmlDeviceGetClockInfo", NULL}, ClockMem, 0},
    {"GetCurrentClocksEventReasons",
     {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
     UllOut,
     0},
    {"GetComputeRunningProcesses_v3",
     {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"},
     Processes,
     0},
    {"GetGraphicsRunningProcesses_v3",
     {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2"},
     Processes,
     0},
    {"GetTotalEnergyConsumption", {"nvmlDeviceGetTotalEnergyConsumption", NULL}, UllOut, 0},
    {"GetSamples(GPU_UTILIZATION, lastSeen 0)", {"nvmlDeviceGetSamples", NULL}, UtilSamples, 0},
    {"GetProcessUtilization(lastSeen 0)",
     {"nvmlDeviceGetProcessUtilization", NULL},
     ProcessUtilization,
     0},
    {"GetCurrPcieLinkGeneration", {"nvmlDeviceGetCurrPcieLinkGeneration", NULL}, UnsignedOut, 0},
    {"GetCurrPcieLinkWidth", {"nvmlDeviceGetCurrPcieLinkWidth", NULL}, UnsignedOut, 0},
    {"GetTotalEccErrors(CORRECTED, VOLATILE)", {"nvmlDeviceGetTotalEccErrors", NULL}, EccErrors, 0},
    {"GetMigMode", {"nvmlDeviceGetMigMode", NULL}, MigMode, 0},
    {"GetPcieThroughput(TX)", {"nvmlDeviceGetPcieThroughput", NULL}, PcieTx, kPcieMaxCalls},
};

static double NowUs(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* The NVML strings we print (device name, driver version) as a JSON string's inside. */
static void PrintJsonString(const char* s) {
  putchar('"');
  for (; *s != '\0'; ++s) {
    const unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      printf("\\%c", ch);
    } else if (ch < 0x20) {
      printf("\\u%04x", ch);
    } else {
      putchar(ch);
    }
  }
  putchar('"');
}

static void PrintMissing(const char* call) {
  printf(
      "{\"call\":\"%s\",\"calls\":0,\"wall_us\":null,\"cpu_us\":null,\"rc\":null,"
      "\"note\":\"not in this library\"}\n",
      call);
}

/* Times `calls` calls of fn and prints its line. */
static void Time(const char* call, CallFn fn, Ctx* c, int calls) {
  nvmlReturn_t rc = 0;
  const double w0 = NowUs(CLOCK_MONOTONIC), c0 = NowUs(CLOCK_PROCESS_CPUTIME_ID);
  for (int i = 0; i < calls; ++i) rc = fn(c);
  const double wall = (NowUs(CLOCK_MONOTONIC) - w0) / calls;
  const double cpu = (NowUs(CLOCK_PROCESS_CPUTIME_ID) - c0) / calls;
  printf("{\"call\":\"%s\",\"calls\":%d,\"wall_us\":%.1f,\"cpu_us\":%.1f,\"rc\":%d}\n", call, calls,
         wall, cpu, rc);
}

static void* Find(void* lib, const char* const symbols[2]) {
  for (int i = 0; i < 2 && symbols[i] != NULL; ++i) {
    void* sym = dlsym(lib, symbols[i]);
    if (sym != NULL) return sym;
  }
  return NULL;
}

/* GPM's three calls when the GPU has GPM; a line saying why not otherwise. */
static void TimeGpm(void* lib, Ctx* c, int calls) {
  nvmlReturn_t (*query)(nvmlDevice_t, nvmlGpmSupport_t*);
  nvmlReturn_t (*alloc)(nvmlGpmSample_t*);
  nvmlReturn_t (*release)(nvmlGpmSample_t);
  void* get = dlsym(lib, "nvmlGpmSampleGet");
  void* metrics = dlsym(lib, "nvmlGpmMetricsGet");
  void* query_sym = dlsym(lib, "nvmlGpmQueryDeviceSupport");
  void* alloc_sym = dlsym(lib, "nvmlGpmSampleAlloc");
  void* free_sym = dlsym(lib, "nvmlGpmSampleFree");
  if (query_sym == NULL || alloc_sym == NULL || free_sym == NULL || get == NULL ||
      metrics == NULL) {
    PrintMissing("GpmQueryDeviceSupport");
    return;
  }
  SET(query, query_sym);
  SET(alloc, alloc_sym);
  SET(release, free_sym);
  nvmlGpmSupport_t support = {kGpmVersion, 0};
  const double w0 = NowUs(CLOCK_MONOTONIC), c0 = NowUs(CLOCK_PROCESS_CPUTIME_ID);
  const nvmlReturn_t rc = query(c->gpu, &support);
  printf(
      "{\"call\":\"GpmQueryDeviceSupport\",\"calls\":1,\"wall_us\":%.1f,\"cpu_us\":%.1f,"
      "\"rc\":%d,\"supported\":%s}\n",
      NowUs(CLOCK_MONOTONIC) - w0, NowUs(CLOCK_PROCESS_CPUTIME_ID) - c0, rc,
      rc == 0 && support.isSupportedDevice ? "true" : "false");
  if (rc != 0 || !support.isSupportedDevice) return;
  c->gpm1.handle = c->gpm2.handle = NULL;
  if (alloc(&c->gpm1) != 0 || alloc(&c->gpm2) != 0) {
    printf(
        "{\"call\":\"GpmSampleAlloc\",\"calls\":1,\"wall_us\":null,\"cpu_us\":null,"
        "\"rc\":1,\"note\":\"nvmlGpmSampleAlloc failed\"}\n");
  } else {
    c->sym = get;
    Time("GpmSampleGet", GpmSampleGet, c, calls);
    /* The last one is the window's start; its end 100 ms later. */
    const struct timespec pause = {0, 100000000L};
    nanosleep(&pause, NULL);
    nvmlReturn_t (*get_fn)(nvmlDevice_t, nvmlGpmSample_t);
    AS(get_fn, get)(c->gpu, c->gpm2);
    c->sym = metrics;
    char name[64];
    snprintf(name, sizeof name, "GpmMetricsGet(%d metrics, first)", kGpmMetrics);
    Time(name, GpmMetricsGet, c, 1);
    snprintf(name, sizeof name, "GpmMetricsGet(%d metrics)", kGpmMetrics);
    Time(name, GpmMetricsGet, c, calls);
  }
  if (c->gpm1.handle != NULL) release(c->gpm1);
  if (c->gpm2.handle != NULL) release(c->gpm2);
}

static int Usage(const char* why) {
  fprintf(stderr, "nvml_cost: %s\nusage: nvml_cost [--calls N] [--lib PATH]\n", why);
  return 2;
}

int main(int argc, char** argv) {
  int calls = kDefaultCalls;
  const char* path = getenv("STALLSCOPE_NVML_LIB");
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: nvml_cost [--calls N] [--lib PATH]\n");
      return 0;
    } else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      char* end = NULL;
      const long n = strtol(argv[++i], &end, 10);
      if (*end != '\0' || n < 1 || n > 1000000) return Usage("--calls: a number 1-1000000");
      calls = (int)n;
    } else if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc) {
      path = argv[++i];
    } else {
      return Usage("unknown argument");
    }
  }
  if (path == NULL || path[0] == '\0') path = "libnvidia-ml.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "nvml_cost: no NVML: %s\n", dlerror());
    return 3;
  }
  nvmlReturn_t (*init)(void), (*shutdown)(void), (*count)(unsigned int*);
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*), (*name)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*driver)(char*, unsigned int);
  void* init_sym = dlsym(lib, "nvmlInit_v2");
  void* count_sym = dlsym(lib, "nvmlDeviceGetCount_v2");
  void* handle_sym = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  void* shutdown_sym = dlsym(lib, "nvmlShutdown");
  if (init_sym == NULL || count_sym == NULL || handle_sym == NULL || shutdown_sym == NULL) {
    fprintf(stderr, "nvml_cost: %s lacks nvmlInit_v2, nvmlShutdown or the _v2 device calls\n",
            path);
    return 3;
  }
  SET(init, init_sym);
  SET(count, count_sym);
  SET(handle, handle_sym);
  SET(shutdown, shutdown_sym);
  void* name_sym = dlsym(lib, "nvmlDeviceGetName");
  void* driver_sym = dlsym(lib, "nvmlSystemGetDriverVersion");

  Ctx* c = calloc(1, sizeof(Ctx)); /* ~18 KiB of buffers */
  if (c == NULL) return 1;
  const double w0 = NowUs(CLOCK_MONOTONIC), c0 = NowUs(CLOCK_PROCESS_CPUTIME_ID);
  const nvmlReturn_t rc = init();
  const double init_wall = NowUs(CLOCK_MONOTONIC) - w0;
  const double init_cpu = NowUs(CLOCK_PROCESS_CPUTIME_ID) - c0;
  unsigned int gpus = 0;
  char gpu_name[96] = "", version[96] = "";
  const int ok = rc == 0 && count(&gpus) == 0 && gpus > 0 && handle(0, &c->gpu) == 0;
  if (ok && name_sym != NULL) AS(name, name_sym)(c->gpu, gpu_name, (unsigned int)sizeof gpu_name);
  if (ok && driver_sym != NULL) AS(driver, driver_sym)(version, (unsigned int)sizeof version);
  printf(
      "{\"call\":\"nvmlInit_v2\",\"calls\":1,\"wall_us\":%.1f,\"cpu_us\":%.1f,\"rc\":%d,"
      "\"lib\":",
      init_wall, init_cpu, rc);
  PrintJsonString(path);
  printf(",\"gpus\":%u,\"gpu\":", gpus);
  PrintJsonString(gpu_name);
  printf(",\"driver\":");
  PrintJsonString(version);
  printf("}\n");
  if (!ok) {
    fprintf(stderr, "nvml_cost: %s\n", rc != 0 ? "nvmlInit_v2 failed" : "no GPU 0");
    if (rc == 0) shutdown();
    free(c);
    return 3;
  }

  for (size_t i = 0; i < sizeof kEntries / sizeof kEntries[0]; ++i) {
    const Entry* e = &kEntries[i];
    c->sym = Find(lib, e->symbols);
    if (c->sym == NULL) {
      PrintMissing(e->call);
      continue;
    }
    const int n = e->max_calls > 0 && calls > e->max_calls ? e->max_calls : calls;
    Time(e->call, e->fn, c, n);
  }
  TimeGpm(lib, c, calls);
  fflush(stdout);
  shutdown();
  free(c);
  return 0;
}
