#include "export/exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <civetweb.h>

#include "base/units.h"
#include "diagnose/suspicion.h"
#include "export/tcp_relay.h"
#include "gpu/gpu_backend.h"

namespace stallscope::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

/// The families of one scrape, in a fixed order; empty ones are dropped at the end.
class Families {
 public:
  MetricFamily& Get(std::string_view name, std::string_view help, MetricType type) {
    for (auto& f : out_) {
      if (f.name == name) return f;
    }
    out_.push_back(MetricFamily{std::string(name), std::string(help), type, {}});
    return out_.back();
  }
  void Gauge(std::string_view name, std::string_view help, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.gauge.value = value;
    Get(name, help, MetricType::Gauge).metric.push_back(std::move(m));
  }
  void Counter(std::string_view name, std::string_view help, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.counter.value = value;
    Get(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() {
    std::erase_if(out_, [](const MetricFamily& f) { return f.metric.empty(); });
    return std::move(out_);
  }

 private:
  std::vector<MetricFamily> out_;
};

/// dcgm-exporter's labels (gpu, UUID, device, modelName, Hostname; pci_bus_id since 3.x).
Labels GpuLabels(const gpu::GpuStatic& g, const std::string& hostname) {
  return {{"gpu", std::to_string(g.index)},
          {"UUID", g.uuid},
          {"pci_bus_id", g.pci_bus_id},
          {"device", fmt::format("nvidia{}", g.index)},
          {"modelName", g.name},
          {"Hostname", hostname}};
}

/// Labels of our own per-GPU metrics: snake_case (promtool's lint), so not dcgm-exporter's
/// UUID/modelName/Hostname; `gpu` and `device` as dcgm-exporter, to join on.
Labels OwnGpuLabels(const gpu::GpuStatic& g, std::string name, std::string value) {
  return {{"gpu", std::to_string(g.index)},
          {"uuid", g.uuid},
          {"device", fmt::format("nvidia{}", g.index)},
          {std::move(name), std::move(value)}};
}

/// One GPM metric as DCGM's profiling field of the same meaning.
struct GpmField {
  std::string_view name;
  std::string_view help;
  std::optional<double> gpu::GpmMetrics::*member;
  double divisor;  ///< ours (%, MiB/s) to dcgm-exporter's (ratio, bytes/s)
};

// Divided by 100 rather than multiplied by 0.01 (not a double): the ratio is then the double
// nearest pct / 100. 1 / 2^20 is exact.
constexpr double kPctToRatio = 100.0;
constexpr double kMiBToBytes = 1.0 / kMiB;

/// GPM under DCGM's profiling names (DCP fields), so dashboards made for dcgm-exporter read
/// them: dcgm-exporter's etc/dcp-metrics-included.csv has them as gauges, the activities as
/// ratios 0..1 and the link rates in bytes per second. Help texts are dcgm-exporter's, saying
/// where ours come from (NVML GPM, no DCGM daemon).
constexpr GpmField kGpmFields[] = {
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active (NVML GPM).",
     &gpu::GpmMetrics::graphics_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (NVML GPM).",
     &gpu::GpmMetrics::sm_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM (NVML GPM).",
     &gpu::GpmMetrics::sm_occupancy_pct, kPctToRatio},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
     "Ratio of cycles the tensor (HMMA) pipe is active (NVML GPM).",
     &gpu::GpmMetrics::tensor_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_DRAM_ACTIVE",
     "Ratio of cycles the device memory interface is active sending or receiving data (NVML GPM).",
     &gpu::GpmMetrics::dram_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active (NVML GPM).",
     &gpu::GpmMetrics::fp64_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active (NVML GPM).",
     &gpu::GpmMetrics::fp32_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active (NVML GPM).",
     &gpu::GpmMetrics::fp16_active_pct, kPctToRatio},
    {"DCGM_FI_PROF_PCIE_TX_BYTES",
     "The rate of data transmitted over PCIe, in bytes per second (NVML GPM).",
     &gpu::GpmMetrics::pcie_tx_mibps, kMiBToBytes},
    {"DCGM_FI_PROF_PCIE_RX_BYTES",
     "The rate of data received over PCIe, in bytes per second (NVML GPM).",
     &gpu::GpmMetrics::pcie_rx_mibps, kMiBToBytes},
    {"DCGM_FI_PROF_NVLINK_TX_BYTES",
     "The rate of data transmitted over NVLink, in bytes per second (NVML GPM).",
     &gpu::GpmMetrics::nvlink_tx_mibps, kMiBToBytes},
    {"DCGM_FI_PROF_NVLINK_RX_BYTES",
     "The rate of data received over NVLink, in bytes per second (NVML GPM).",
     &gpu::GpmMetrics::nvlink_rx_mibps, kMiBToBytes},
};

/// The GPU's last GPM window (live views carry it between reads: gpu::CarrySlowFields).
void MapGpm(Families& f, const Labels& l, const gpu::GpmMetrics& x) {
  for (const GpmField& field : kGpmFields) {
    if (const std::optional<double>& v = x.*field.member)
      f.Gauge(field.name, field.help, l, *v / field.divisor);
  }
}

/// Names, types and help texts as in dcgm-exporter's etc/default-counters.csv.
void MapGpu(Families& f, const gpu::GpuStatic& st, const gpu::GpuSample& g,
            const std::string& host) {
  if (g.lost) return;
  const Labels l = GpuLabels(st, host);
  if (g.util_gpu_pct)
    f.Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", l, *g.util_gpu_pct);
  if (g.util_mem_pct)
    f.Gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", l, *g.util_mem_pct);
  if (g.mem_used_bytes) {
    f.Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", l,
            static_cast<double>(*g.mem_used_bytes) / kMiB);
    if (g.mem_total_bytes && *g.mem_total_bytes >= *g.mem_used_bytes)
      f.Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", l,
              static_cast<double>(*g.mem_total_bytes - *g.mem_used_bytes) / kMiB);
  }
  if (g.power_mw) f.Gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", l, *g.power_mw / 1e3);
  if (g.power_limit_mw)
    f.Gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", l,
            *g.power_limit_mw / 1e3);
  if (g.energy_mj)
    f.Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "Total energy consumption since boot (in mJ).", l, static_cast<double>(*g.energy_mj));
  if (g.temperature_c)
    f.Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", l, *g.temperature_c);
  if (g.sm_clock_mhz)
    f.Gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", l, *g.sm_clock_mhz);
  if (g.mem_clock_mhz)
    f.Gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", l, *g.mem_clock_mhz);
  if (g.ecc_volatile_corrected)
    f.Counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", l,
              static_cast<double>(*g.ecc_volatile_corrected));
  if (g.ecc_volatile_uncorrected)
    f.Counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", l,
              static_cast<double>(*g.ecc_volatile_uncorrected));
  if (g.clock_event_reasons) {
    f.Gauge("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask).", l,
            static_cast<double>(*g.clock_event_reasons));
    for (const auto& r : gpu::kClockEventReasons) {
      f.Gauge("stallscope_gpu_throttle_reason",
              "1 when the GPU's clocks are held down for this reason (NVML clock event reasons).",
              OwnGpuLabels(st, "reason", std::string(r.name)),
              (*g.clock_event_reasons & r.bit) != 0 ? 1 : 0);
    }
  }
  constexpr std::string_view kPcieHelp = "PCIe throughput (NVML, bytes/s).";
  if (g.pcie_tx_kbps)
    f.Gauge("stallscope_gpu_pcie_bytes_per_second", kPcieHelp, OwnGpuLabels(st, "direction", "tx"),
            *g.pcie_tx_kbps * 1024.0);
  if (g.pcie_rx_kbps)
    f.Gauge("stallscope_gpu_pcie_bytes_per_second", kPcieHelp, OwnGpuLabels(st, "direction", "rx"),
            *g.pcie_rx_kbps * 1024.0);
  if (g.gpm) MapGpm(f, l, *g.gpm);
}

void MapHost(Families& f, const host::HostSample& h) {
  if (h.cpu) {
    f.Gauge("stallscope_host_cpu_busy_ratio",
            "Share of all CPUs' time busy (not idle, not iowait).", {}, h.cpu->busy_pct / 100);
    f.Gauge("stallscope_host_cpu_iowait_ratio", "Share of all CPUs' time in iowait.", {},
            h.cpu->iowait_pct / 100);
  }
  f.Gauge("stallscope_host_cpus", "Online CPUs.", {}, h.cpu_count);
  if (h.mem_available_bytes)
    f.Gauge("stallscope_host_memory_available_bytes", "MemAvailable.", {},
            static_cast<double>(*h.mem_available_bytes));
  const std::pair<const char*, const std::optional<host::Pressure>*> psi[] = {
      {"cpu", &h.psi_cpu}, {"io", &h.psi_io}, {"memory", &h.psi_memory}};
  for (const auto& [resource, p] : psi) {
    if (!*p) continue;
    f.Gauge("stallscope_host_psi_some_avg10_ratio",
            "Pressure stall information: share of time some tasks stalled, 10 s average.",
            {{"resource", resource}}, (*p)->some_avg10_pct / 100);
    if ((*p)->full_avg10_pct)
      f.Gauge("stallscope_host_psi_full_avg10_ratio",
              "Pressure stall information: share of time all tasks stalled, 10 s average.",
              {{"resource", resource}}, *(*p)->full_avg10_pct / 100);
  }
}

/// CPU of the followed tree: the ranks' own processes (those with a phase ring) and the
/// DataLoader workers (every other process of the tree but its root).
void MapProcesses(Families& f, const Snapshot& s) {
  if (!s.have_sample || !s.sample.has_processes) return;
  double worker_cores = 0;
  int workers = 0;
  std::map<int32_t, double> rank_cores;
  for (const auto& p : s.sample.processes) {
    auto ring = std::find_if(s.processes.begin(), s.processes.end(),
                             [&](const analysis::ProcessTotals& t) { return t.pid == p.pid; });
    const double cores = p.cpu_pct.value_or(0) / 100;
    if (ring != s.processes.end()) {
      rank_cores[ring->rank] += cores;
    } else if (!s.header.root_pid || p.pid != *s.header.root_pid) {
      worker_cores += cores;
      ++workers;
    }
  }
  for (const auto& [rank, cores] : rank_cores)
    f.Gauge("stallscope_rank_process_cpu_cores", "CPU of the rank's own process, in cores.",
            {{"rank", std::to_string(rank)}}, cores);
  if (s.processes.empty()) return;  // without rings, workers cannot be told from the job
  f.Gauge("stallscope_dataloader_workers",
          "Processes of the job that are neither its root nor a rank (DataLoader workers).", {},
          workers);
  f.Gauge("stallscope_dataloader_worker_cpu_cores", "CPU of the DataLoader workers, in cores.", {},
          worker_cores);
}

/// Per rank (processes sharing a rank are summed, so label sets stay unique).
void MapJob(Families& f, const std::vector<analysis::ProcessTotals>& procs) {
  std::map<int32_t, analysis::ProcessTotals> by_rank;
  for (const auto& p : procs) {
    auto& r = by_rank[p.rank];
    r.steps += p.steps;
    for (const auto& ph : p.phases) {
      auto it = std::find_if(r.phases.begin(), r.phases.end(),
                             [&](const analysis::LivePhase& x) { return x.name == ph.name; });
      if (it == r.phases.end())
        r.phases.push_back(ph);
      else
        it->total_ns += ph.total_ns;
    }
    auto& h = r.step_durations;
    for (size_t i = 0; i < h.counts.size(); ++i) h.counts[i] += p.step_durations.counts[i];
    h.count += p.step_durations.count;
    h.sum_s += p.step_durations.sum_s;
  }
  for (const auto& [rank, r] : by_rank) {
    const std::string rank_s = std::to_string(rank);
    f.Counter("stallscope_steps_total", "Training steps made.", {{"rank", rank_s}},
              static_cast<double>(r.steps));
    for (const auto& ph : r.phases)
      f.Counter("stallscope_phase_seconds_total", "Time spent in the phase.",
                {{"phase", ph.name}, {"rank", rank_s}}, static_cast<double>(ph.total_ns) / 1e9);
    ClientMetric m;
    m.label = {{"rank", rank_s}};
    uint64_t cumulative = 0;
    for (size_t i = 0; i < analysis::kStepBucketsS.size(); ++i) {
      cumulative += r.step_durations.counts[i];
      m.histogram.bucket.push_back({cumulative, analysis::kStepBucketsS[i]});
    }
    m.histogram.bucket.push_back({r.step_durations.count, std::numeric_limits<double>::infinity()});
    m.histogram.sample_count = r.step_durations.count;
    m.histogram.sample_sum = r.step_durations.sum_s;
    f.Get("stallscope_step_duration_seconds", "Time between consecutive steps.",
          MetricType::Histogram)
        .metric.push_back(std::move(m));
  }
}

void MapWindow(Families& f, const analysis::LiveWindow& w) {
  f.Gauge("stallscope_steps_per_second", "Steps/s of the busiest process, recent window.", {},
          w.steps_per_s);
  f.Gauge("stallscope_data_wait_ratio",
          "Share of the recent window the busiest process waited for data (data_loading).", {},
          w.data_share);
  const auto [cls, cost] = diagnose::VerdictOfSuspicion(w);
  f.Gauge("stallscope_verdict_info",
          "The live verdict on the recent window (always 1; the class is the label).",
          {{"class", std::string(cls)}}, 1);
  f.Gauge("stallscope_verdict_cost_ratio", "Share of step time the live verdict's cause takes.", {},
          cost);
  f.Gauge("stallscope_run_stage_info",
          "Where the busiest process is in its life: start-up, warm-up or steady (always 1; the "
          "stage is the label). The live verdict is none before steady.",
          {{"stage", std::string(analysis::RunStageName(w.stage))}}, 1);
  f.Gauge("stallscope_warmup_steps", "Warm-up steps of the busiest process, as decided so far.", {},
          static_cast<double>(w.warmup_steps));
}

}  // namespace

std::string ListenAddress::ToString() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

bool ListenAddress::IsLoopback() const {
  unsigned char a[16];
  if (inet_pton(AF_INET, host.c_str(), a) == 1) return a[0] == 127;
  if (inet_pton(AF_INET6, host.c_str(), a) != 1) return false;
  static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(a, a + 16, kLoopback) || (std::equal(a, a + 12, kMapped) && a[12] == 127);
}

bool ListenAddress::IsAny() const {
  unsigned char a[16];
  if (inet_pton(AF_INET, host.c_str(), a) == 1)
    return std::all_of(a, a + 4, [](auto b) { return b == 0; });
  return inet_pton(AF_INET6, host.c_str(), a) == 1 &&
         std::all_of(a, a + 16, [](auto b) { return b == 0; });
}

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return MakeError(ErrorCode::kInvalidArgument, "{}: give HOST:PORT, e.g. {}", text,
                     kDefaultListen);
  std::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  unsigned char buf[16];
  const std::string host_s(host);
  const bool v4 = !bracketed && inet_pton(AF_INET, host_s.c_str(), buf) == 1;
  const bool v6 = bracketed && inet_pton(AF_INET6, host_s.c_str(), buf) == 1;
  if (!v4 && !v6)
    return MakeError(ErrorCode::kInvalidArgument,
                     "{}: the host must be a numeric IPv4 address or [IPv6] (e.g. {}, 0.0.0.0)",
                     text, kDefaultListen);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535)
    return MakeError(ErrorCode::kInvalidArgument, "{}: the port must be a number 0..65535", text);
  return ListenAddress{host_s, static_cast<uint16_t>(value)};
}

std::vector<MetricFamily> MapMetrics(const Snapshot& s) {
  Families f;
  if (s.have_sample) {
    for (size_t i = 0; i < s.sample.gpus.size() && i < s.header.gpus.size(); ++i)
      MapGpu(f, s.header.gpus[i], s.sample.gpus[i], s.header.hostname);
    MapHost(f, s.sample.host);
  }
  MapProcesses(f, s);
  MapJob(f, s.processes);
  if (s.window) {
    MapWindow(f, *s.window);
  } else if (!s.processes.empty()) {
    // The job's processes write phases but no step has ended in the window: start-up (its
    // first step) or a pause; no verdict either way.
    f.Gauge("stallscope_run_stage_info",
            "Where the busiest process is in its life: start-up, warm-up or steady (always 1; the "
            "stage is the label). The live verdict is none before steady.",
            {{"stage", std::string(analysis::RunStageName(analysis::RunStage::kStartup))}}, 1);
  }
  return f.Take();
}

/// What a scrape reads: the last published snapshot, copied under a short lock, then mapped.
class Exporter::Collector : public prometheus::Collectable {
 public:
  std::vector<MetricFamily> Collect() const override {
    Snapshot copy;
    {
      std::lock_guard lock(mu_);
      copy = published_;
    }
    return MapMetrics(copy);
  }
  /// Swaps `next` in (the previous snapshot comes back in `next`, to be reused).
  void Swap(Snapshot& next) {
    std::lock_guard lock(mu_);
    std::swap(published_, next);
    ++count_;
  }
  int64_t count() const {
    std::lock_guard lock(mu_);
    return count_;
  }

 private:
  mutable std::mutex mu_;
  Snapshot published_;
  int64_t count_ = 0;
};

namespace {

/// The errno of binding a socket of ours to `address` as civetweb and the relay do
/// (SO_REUSEADDR; IPV6_V6ONLY for IPv6), or 0 when the bind works. The socket is closed.
int BindErrno(const ListenAddress& address) {
  sockaddr_storage storage{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(address.port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, address.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(address.port);
    len = sizeof *v6;
  } else {
    return EINVAL;  // ParseListenAddress takes numeric addresses only
  }
  const int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  int err = 0;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      (storage.ss_family == AF_INET6 &&
       ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0) ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&storage), len) != 0)
    err = errno;
  if (fd >= 0) ::close(fd);
  return err;
}

/// Why civetweb could not listen on `address`: it throws without the errno (CivetServer: "null
/// context when constructing CivetServer. Possible problem binding to port."), so a socket of
/// ours tries the same bind and keeps the errno.
std::string WhyNotListening(const ListenAddress& address, const char* what) {
  if (const int err = BindErrno(address); err != 0) return ListenFailure(err, address.port);
  return fmt::format("the HTTP server did not start ({})", what);  // the bind alone works
}

}  // namespace

std::optional<std::string> ExposureWarning(const ListenAddress& address) {
  if (address.IsLoopback()) return std::nullopt;
  const std::string where =
      address.IsAny()
          ? fmt::format("{} is every network interface of this machine", address.ToString())
          : fmt::format("{} is reachable from the network", address.ToString());
  return fmt::format(
      "warning: {}: anyone who can reach it can read the metrics (host name, GPUs, phase names), "
      "with no authentication; use 127.0.0.1:PORT unless you mean it",
      where);
}

Status CheckListen(const ListenAddress& address) {
  if (const int err = BindErrno(address); err != 0) {
    return MakeError(ErrorCode::kIo, "cannot listen on {}: {}", address.ToString(),
                     ListenFailure(err, address.port));
  }
  return OkStatus();
}

Result<std::unique_ptr<Exporter>> Exporter::Start(const ListenAddress& address,
                                                  SnapshotSource source, int64_t period_ns,
                                                  const ServerLimits& limits) {
  std::unique_ptr<Exporter> e(new Exporter());
  e->source_ = std::move(source);
  e->period_ns_ = period_ns;
  e->collector_ = std::make_shared<Collector>();
  // Issue 27 B13: civetweb built without USE_IPV6 (Debian's 1.15) takes no IPv6 address; the
  // relay listens on it instead, in front of civetweb on loopback (any free port).
  const bool relay =
      address.host.find(':') != std::string::npos && mg_check_feature(MG_FEATURES_IPV6) == 0;
  if (relay) {
    TcpRelay::Limits relay_limits;
    // civetweb queues some connections beyond its threads.
    relay_limits.max_connections = 4 * limits.num_threads;
    relay_limits.idle_timeout_ms = limits.request_timeout_ms;
    TRY(e->relay_, TcpRelay::Listen(address.host, address.port, relay_limits));
  }
  const ListenAddress civet = relay ? ListenAddress{"127.0.0.1", 0} : address;
  // civetweb options (prometheus::Exposer passes them through): bounded threads, request
  // size and time, so a hostile client holds one worker for at most request_timeout_ms.
  std::vector<std::string> options = {
      "listening_ports",    civet.ToString(),
      "num_threads",        std::to_string(limits.num_threads),
      "request_timeout_ms", std::to_string(limits.request_timeout_ms),
      "max_request_size",   std::to_string(limits.max_request_size),
      "enable_keep_alive",  "no"};
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(std::move(options));
  } catch (const std::exception& ex) {
    return MakeError(ErrorCode::kIo, "cannot listen on {}: {}", civet.ToString(),
                     WhyNotListening(civet, ex.what()));
  }
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? civet.port : static_cast<uint16_t>(ports.front());
  if (relay) {
    TRY_STATUS(e->relay_->Start(e->port_));
    e->port_ = e->relay_->port();
  }
  e->Publish();  // the first scrape already has data
  e->exposer_->RegisterCollectable(e->collector_);
  e->publisher_ = std::thread([raw = e.get()] {
    std::unique_lock lock(raw->stop_mu_);
    while (!raw->stop_cv_.wait_for(lock, std::chrono::nanoseconds(raw->period_ns_),
                                   [raw] { return raw->stop_; })) {
      lock.unlock();
      raw->Publish();
      lock.lock();
    }
  });
  return e;
}

Exporter::~Exporter() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
  relay_.reset();    // no more connections to civetweb
  exposer_.reset();  // stops civetweb (joins its workers) before the collector goes
}

void Exporter::Publish() {
  source_(scratch_);
  collector_->Swap(scratch_);
}

int64_t Exporter::published() const { return collector_->count(); }

std::optional<analysis::LiveWindow> WindowTracker::Update(
    int64_t mono_ns, const std::vector<analysis::ProcessTotals>& now) {
  const analysis::ProcessTotals* busiest = nullptr;
  for (const auto& p : now) {
    if (busiest == nullptr || p.steps > busiest->steps) busiest = &p;
  }
  if (busiest == nullptr) return std::nullopt;
  if (!readings_.empty() && readings_.front().totals.pid != busiest->pid) readings_.clear();
  // Keep the newest reading at least span_ns old, and everything younger (bounded: 256).
  while (readings_.size() >= 2 && mono_ns - readings_[1].mono_ns >= span_ns_)
    readings_.erase(readings_.begin());
  if (readings_.size() >= 256) readings_.erase(readings_.begin());
  std::optional<analysis::LiveWindow> out;
  if (!readings_.empty())
    out = analysis::WindowBetween(readings_.front().totals, *busiest,
                                  mono_ns - readings_.front().mono_ns);
  readings_.push_back(Reading{mono_ns, *busiest});
  return out;
}

}  // namespace stallscope::exporter
