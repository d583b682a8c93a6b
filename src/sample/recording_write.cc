#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>

#include "base/json_writer.h"
#include "base/units.h"
#include "sample/recording.h"

namespace stallscope::sample {
namespace {

const char* MigName(gpu::MigMode m) {
  switch (m) {
    case gpu::MigMode::kEnabled:
      return "enabled";
    case gpu::MigMode::kDisabled:
      return "disabled";
    case gpu::MigMode::kUnsupported:
      return "unsupported";
  }
  return "unsupported";
}

std::optional<double> Mib(const std::optional<uint64_t>& bytes) {
  if (!bytes) return std::nullopt;
  return static_cast<double>(*bytes) / kMiB;
}

std::optional<double> Watts(const std::optional<uint32_t>& mw) {
  if (!mw) return std::nullopt;
  return *mw / 1000.0;
}

/// FormatIsoUtc ("2023-11-14T22:13:20.123Z") into `buf` without allocating: it runs per sample.
/// int64 ns since the epoch span the years 1677..2262, so the year always has four digits.
std::string_view IsoUtc(int64_t wall_ns, std::array<char, 32>& buf) {
  using std::chrono::days;
  int64_t secs = wall_ns / 1'000'000'000;
  int64_t ms = (wall_ns % 1'000'000'000) / 1'000'000;
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  const days day = std::chrono::floor<days>(std::chrono::seconds(secs));
  const std::chrono::year_month_day ymd{std::chrono::sys_days(day)};
  const int year = static_cast<int>(ymd.year());
  const int64_t in_day = secs - std::chrono::seconds(day).count();
  char* p = buf.data();
  auto put = [&p](int64_t v, int digits) {
    for (int i = digits - 1; i >= 0; --i, v /= 10) p[i] = static_cast<char>('0' + v % 10);
    p += digits;
  };
  put(year, 4);
  *p++ = '-';
  put(static_cast<unsigned>(ymd.month()), 2);
  *p++ = '-';
  put(static_cast<unsigned>(ymd.day()), 2);
  *p++ = 'T';
  put(in_day / 3600, 2);
  *p++ = ':';
  put(in_day / 60 % 60, 2);
  *p++ = ':';
  put(in_day % 60, 2);
  *p++ = '.';
  put(ms, 3);
  *p++ = 'Z';
  return std::string_view(buf.data(), static_cast<size_t>(p - buf.data()));
}

/// The names of gpu::ClockEventReasonNames(mask) as a JSON array, without building the vector.
void WriteClockEventReasons(JsonWriter& w, uint64_t mask) {
  w.BeginArray();
  uint64_t known = 0;
  for (const gpu::ClockEventReasonInfo& reason : gpu::kClockEventReasons) {
    known |= reason.bit;
    if ((mask & reason.bit) != 0) w.String(reason.name);
  }
  // Bits newer drivers add, as ClockEventReasonNames writes them: fmt's "{:#x}".
  if (const uint64_t unknown = mask & ~known; unknown != 0) {
    std::array<char, 20> hex{'0', 'x'};
    auto [end, ec] = std::to_chars(hex.data() + 2, hex.data() + hex.size(), unknown, 16);
    w.String(std::string_view(hex.data(), static_cast<size_t>(end - hex.data())));
  }
  w.EndArray();
}

void WriteGpuStatic(JsonWriter& w, const gpu::GpuStatic& g) {
  w.BeginObject()
      .Field("gpu_index", g.index)
      .Field("gpu_name", g.name)
      .Field("uuid", g.uuid)
      .Field("pci_bus_id", g.pci_bus_id)
      .Field("memory_total_bytes", g.mem_total_bytes)
      .Field("power_limit_mw", g.power_limit_mw)
      .Field("sm_clock_max_mhz", g.sm_clock_max_mhz)
      .Field("mem_clock_max_mhz", g.mem_clock_max_mhz)
      .Field("pcie_gen_max", g.pcie_gen_max)
      .Field("pcie_width_max", g.pcie_width_max)
      .Field("persistence_mode", g.persistence_mode)
      .Field("mig_mode", MigName(g.mig_mode))
      .FieldBool("gpm", g.gpm)
      .Field("gpm_note", g.gpm_note)
      .EndObject();
}

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

/// Which fields come at which period, and what each tier cost per GPU when probed.
void WritePollPlan(JsonWriter& w, const gpu::PollPlan& plan) {
  w.BeginObject().Field("interval_s", Seconds(plan.tick_ns), 3);
  w.Key("tiers").BeginArray();
  for (size_t i = 0; i < gpu::kPollTierCount; ++i) {
    const auto tier = static_cast<gpu::PollTier>(i);
    w.BeginObject()
        .Field("tier", gpu::PollTierName(tier))
        .Field("period_s", Seconds(plan.period_ns[i]), 3)
        .Field("cost_us_per_gpu", plan.cost_us[i], 1)
        .Field("fields", gpu::PollTierFields(tier))
        .EndObject();
  }
  w.EndArray();
  w.Field("pcie_throughput_s",
          plan.pcie_ns > 0 ? std::optional<double>(Seconds(plan.pcie_ns)) : std::nullopt, 3);
  w.EndObject();
}

/// GPM metrics: written only on the samples where a GPM window closed.
void WriteGpm(JsonWriter& w, const gpu::GpmMetrics& m) {
  w.Key("gpm")
      .BeginObject()
      .Field("window_s", Seconds(m.window_ns), 3)
      .Field("graphics_active_pct", m.graphics_active_pct, 1)
      .Field("sm_active_pct", m.sm_active_pct, 1)
      .Field("sm_occupancy_pct", m.sm_occupancy_pct, 1)
      .Field("tensor_active_pct", m.tensor_active_pct, 1)
      .Field("tensor_hmma_pct", m.tensor_hmma_pct, 1)
      .Field("dram_active_pct", m.dram_active_pct, 1)
      .Field("fp64_active_pct", m.fp64_active_pct, 1)
      .Field("fp32_active_pct", m.fp32_active_pct, 1)
      .Field("fp16_active_pct", m.fp16_active_pct, 1)
      .Field("pcie_tx_mibps", m.pcie_tx_mibps, 1)
      .Field("pcie_rx_mibps", m.pcie_rx_mibps, 1)
      .Field("nvlink_tx_mibps", m.nvlink_tx_mibps, 1)
      .Field("nvlink_rx_mibps", m.nvlink_rx_mibps, 1)
      .EndObject();
}

void WriteGpuSample(JsonWriter& w, const gpu::GpuStatic* info, size_t index,
                    const gpu::GpuSample& g) {
  w.BeginObject()
      .Field("gpu_index", index)
      .Field("gpu_name", info ? std::string_view(info->name) : std::string_view());
  w.FieldBool("lost", g.lost);
  // Seed 002 keys, in the seed's units: % , MiB ("MB" in the seed), W, °C.
  w.Field("utilization", g.util_gpu_pct)
      .Field("memory_used", Mib(g.mem_used_bytes), 1)
      .Field("memory_total", Mib(g.mem_total_bytes), 1)
      .Field("power", Watts(g.power_mw), 3)
      .Field("temperature", g.temperature_c);
  // Exact values, units in the key names.
  w.Field("utilization_memory_pct", g.util_mem_pct)
      .Field("memory_used_bytes", g.mem_used_bytes)
      .Field("memory_total_bytes", g.mem_total_bytes)
      .Field("power_mw", g.power_mw)
      .Field("power_limit_mw", g.power_limit_mw)
      .Field("energy_mj", g.energy_mj)
      .Field("sm_clock_mhz", g.sm_clock_mhz)
      .Field("mem_clock_mhz", g.mem_clock_mhz)
      .Field("clock_event_mask", g.clock_event_reasons);
  w.Key("clock_event_reasons");
  if (g.clock_event_reasons) {
    WriteClockEventReasons(w, *g.clock_event_reasons);
  } else {
    w.Null();
  }
  w.Field("pcie_tx_kbps", g.pcie_tx_kbps)
      .Field("pcie_rx_kbps", g.pcie_rx_kbps)
      .Field("pcie_gen", g.pcie_gen)
      .Field("pcie_width", g.pcie_width)
      .Field("ecc_volatile_corrected", g.ecc_volatile_corrected)
      .Field("ecc_volatile_uncorrected", g.ecc_volatile_uncorrected);
  w.Key("util_samples").BeginArray();
  for (size_t k = 0; k < g.util_sample_count; ++k) {
    w.BeginArray().Int(g.util_samples[k].ts_us).Int(g.util_samples[k].util_pct).EndArray();
  }
  w.EndArray();
  w.Key("processes").BeginArray();
  for (const auto& p : g.processes) {
    w.BeginObject()
        .Field("pid", p.pid)
        .Field("type", p.graphics ? "graphics" : "compute")
        .Field("memory_used_bytes", p.mem_used_bytes)
        .Field("sm_util_pct", p.sm_util_pct)
        .Field("mem_util_pct", p.mem_util_pct)
        .EndObject();
  }
  w.EndArray();
  if (g.gpm) WriteGpm(w, *g.gpm);
  w.EndObject();
}

void WriteAggregate(JsonWriter& w, const AggregateStats& a) {
  w.BeginObject()
      .Field("total_memory_used", a.total_memory_used_mib, 1)
      .Field("total_memory_total", a.total_memory_total_mib, 1)
      .Field("total_memory_percent", a.total_memory_percent, 1)
      .Field("average_utilization", a.average_utilization_pct, 1)
      .Field("total_power", a.total_power_w, 3)
      .Field("max_temperature", a.max_temperature_c)
      .Field("gpu_count", a.gpu_count)
      .EndObject();
}

/// The keys of one pressure resource: constants, so a sample builds no key strings.
struct PressureKeys {
  std::string_view some_avg10, full_avg10, some_stall_us;
};
constexpr PressureKeys kPsiCpu{"psi_cpu_some_avg10", "psi_cpu_full_avg10", "psi_cpu_some_stall_us"};
constexpr PressureKeys kPsiIo{"psi_io_some_avg10", "psi_io_full_avg10", "psi_io_some_stall_us"};
constexpr PressureKeys kPsiMemory{"psi_memory_some_avg10", "psi_memory_full_avg10",
                                  "psi_memory_some_stall_us"};

void WritePressure(JsonWriter& w, const PressureKeys& keys,
                   const std::optional<host::Pressure>& p) {
  w.Field(keys.some_avg10, p ? std::optional<double>(p->some_avg10_pct) : std::nullopt, 2);
  w.Field(keys.full_avg10, p ? p->full_avg10_pct : std::nullopt, 2);
  w.Field(keys.some_stall_us, p ? std::optional<uint64_t>(p->some_stall_us_delta) : std::nullopt);
}

template <typename Member>
void WritePerCpu(JsonWriter& w, std::string_view key, const std::vector<host::CpuShares>& cpus,
                 Member member) {
  w.Key(key).BeginArray();
  for (const auto& c : cpus) w.Double(c.*member, 1);
  w.EndArray();
}

void WriteHost(JsonWriter& w, const host::HostSample& h) {
  auto share = [&](double host::CpuShares::*m) -> std::optional<double> {
    if (!h.cpu) return std::nullopt;
    return (*h.cpu).*m;
  };
  w.BeginObject()
      .Field("cpu_count", h.cpu_count)
      .Field("cpu_busy_pct", share(&host::CpuShares::busy_pct), 1)
      .Field("cpu_user_pct", share(&host::CpuShares::user_pct), 1)
      .Field("cpu_system_pct", share(&host::CpuShares::system_pct), 1)
      .Field("cpu_iowait_pct", share(&host::CpuShares::iowait_pct), 1)
      .Field("cpu_steal_pct", share(&host::CpuShares::steal_pct), 1);
  w.Key("per_cpu").BeginObject();
  WritePerCpu(w, "busy_pct", h.per_cpu, &host::CpuShares::busy_pct);
  WritePerCpu(w, "user_pct", h.per_cpu, &host::CpuShares::user_pct);
  WritePerCpu(w, "system_pct", h.per_cpu, &host::CpuShares::system_pct);
  WritePerCpu(w, "iowait_pct", h.per_cpu, &host::CpuShares::iowait_pct);
  WritePerCpu(w, "steal_pct", h.per_cpu, &host::CpuShares::steal_pct);
  w.EndObject();
  w.Field("mem_total_bytes", h.mem_total_bytes)
      .Field("mem_available_bytes", h.mem_available_bytes)
      .Field("mem_used_bytes", h.mem_used_bytes)
      .Field("load1", h.load1, 2)
      .Field("load5", h.load5, 2)
      .Field("load15", h.load15, 2)
      .Field("procs_running", h.procs_running);
  WritePressure(w, kPsiCpu, h.psi_cpu);
  WritePressure(w, kPsiIo, h.psi_io);
  WritePressure(w, kPsiMemory, h.psi_memory);
  w.Field("disk_read_bps", h.disk_read_bps)
      .Field("disk_write_bps", h.disk_write_bps)
      .Field("cgroup_cpu_quota_cpus", h.cgroup_cpu_quota_cpus, 2)
      .Field("cgroup_nr_throttled", h.cgroup_nr_throttled_delta)
      .Field("cgroup_throttled_us", h.cgroup_throttled_us_delta)
      .Field("cgroup_mem_limit_bytes", h.cgroup_mem_limit_bytes)
      .Field("shm_total_bytes", h.shm_total_bytes)
      .Field("shm_used_bytes", h.shm_used_bytes)
      .EndObject();
}

void WriteProcess(JsonWriter& w, const host::ProcessSample& p) {
  w.BeginObject()
      .Field("pid", p.pid)
      .Field("ppid", p.ppid)
      .Field("comm", p.comm)
      .Field("cmdline", p.cmdline)
      .Field("state", std::string_view(&p.state, 1))
      .Field("cpu_pct", p.cpu_pct, 1)
      .Field("rss_bytes", p.rss_bytes)
      .Field("threads", p.threads)
      .Field("threads_running", p.threads_running)
      .Field("threads_blocked", p.threads_blocked)
      .Field("read_bytes", p.read_bytes)
      .Field("write_bytes", p.write_bytes)
      .Field("voluntary_ctxt_switches", p.voluntary_ctxt_switches)
      .Field("nonvoluntary_ctxt_switches", p.nonvoluntary_ctxt_switches)
      .EndObject();
}

}  // namespace

void AppendHeaderJson(const RecordingHeader& h, std::string& out) {
  JsonWriter w(out);
  w.BeginObject()
      .Field("type", "header")
      .Field("schema_version", h.schema_version)
      .Field("tool", h.tool_version)
      .Field("hostname", h.hostname)
      .Field("cpu_count", h.cpu_count)
      .Field("interval_ns", h.interval_ns)
      .Field("start_time", FormatIsoUtc(h.start_wall_ns))
      .Field("start_wall_ns", h.start_wall_ns)
      .Field("start_mono_ns", h.start_mono_ns)
      .Field("gpu_backend", h.gpu_backend)
      .Field("gpu_note", h.gpu_note)
      .Field("driver_version", h.driver_version);
  w.FieldArray("command", h.command);
  w.Field("root_pid", h.root_pid);
  w.Key("gpus").BeginArray();
  for (const auto& g : h.gpus) WriteGpuStatic(w, g);
  w.EndArray();
  w.Key("gpu_polling");
  WritePollPlan(w, h.poll);
  w.Key("host_polling")
      .BeginObject()
      .Field("slow_s", Seconds(h.host_slow_ns), 3)
      .Field("fields",
             "mem_*,load*,procs_running,psi_*,disk_*_bps,cgroup_*,shm_* (the rest every sample)")
      .EndObject();
  w.EndObject();
}

namespace {

// Seed 002's timestamp: Python's naive datetime.isoformat() with microseconds, here in UTC.
void AppendSeedTimestamp(int64_t wall_ns, std::string& out) {
  // Floored, so that a time before 1970 keeps 0-999999 microseconds (as Python's does).
  int64_t whole = wall_ns / 1'000'000'000, ns = wall_ns % 1'000'000'000;
  if (ns < 0) ns += 1'000'000'000, --whole;
  const std::time_t secs = static_cast<std::time_t>(whole);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];  // room for any int fields: no truncation for g++'s -Wformat-truncation to see
  const auto micros = static_cast<long>(ns / 1000);
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ld", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
  out += buf;
}

std::optional<int64_t> MiB(const std::optional<uint64_t>& bytes) {
  if (!bytes) return std::nullopt;
  return static_cast<int64_t>(static_cast<double>(*bytes) / kMiB + 0.5);
}

// One GPU's seed keys (the legacy object's, or one multi_gpu_data entry).
void WriteSeedGpu(JsonWriter& w, const gpu::GpuStatic& g, const gpu::GpuSample& s, bool temp) {
  w.Field("gpu_index", g.index)
      .Field("gpu_name", g.name)
      .Field("utilization", s.util_gpu_pct)
      .Field("memory_used", MiB(s.mem_used_bytes))
      .Field("memory_total", MiB(s.mem_total_bytes ? s.mem_total_bytes : g.mem_total_bytes))
      .Field("power", s.power_mw ? std::optional<double>(*s.power_mw / 1000.0) : std::nullopt, 1);
  if (temp) w.Field("temperature", s.temperature_c);
}

}  // namespace

void AppendSeedObject(const RecordingHeader& header, const Sample& s, std::string& out) {
  JsonWriter w(out);
  w.BeginObject().Key("timestamp");
  std::string ts;
  AppendSeedTimestamp(s.wall_ns, ts);
  w.String(ts);
  const size_t n = std::min(header.gpus.size(), s.gpus.size());
  if (header.gpus.size() == 1 && n == 1) {
    WriteSeedGpu(w, header.gpus[0], s.gpus[0], false);
    w.EndObject();
    return;
  }
  w.Key("multi_gpu_data").BeginArray();
  for (size_t i = 0; i < n; ++i) {
    if (s.gpus[i].lost) continue;  // the seed's monitor lists the GPUs that answered
    w.BeginObject();
    WriteSeedGpu(w, header.gpus[i], s.gpus[i], true);
    w.EndObject();
  }
  w.EndArray().Key("aggregate_stats");
  WriteAggregate(w, Aggregate(s.gpus));
  w.EndObject();
}

void AppendSampleJson(const RecordingHeader& header, const Sample& s, std::string& out) {
  JsonWriter w(out);
  std::array<char, 32> iso;
  w.BeginObject()
      .Field("type", "sample")
      .Field("timestamp", IsoUtc(s.wall_ns, iso))
      .Field("ts_ns", s.mono_ns)
      .Field("wall_ns", s.wall_ns);
  w.Key("multi_gpu_data").BeginArray();
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    WriteGpuSample(w, i < header.gpus.size() ? &header.gpus[i] : nullptr, i, s.gpus[i]);
  }
  w.EndArray();
  w.Key("aggregate_stats");
  WriteAggregate(w, Aggregate(s.gpus));
  w.Key("host");
  WriteHost(w, s.host);
  w.Key("processes");
  if (s.has_processes) {
    w.BeginArray();
    for (const auto& p : s.processes) WriteProcess(w, p);
    w.EndArray();
  } else {
    w.Null();
  }
  w.EndObject();
}

Result<RecordingWriter> RecordingWriter::Open(const std::string& path,
                                              const RecordingHeader& header,
                                              RecordingFormat format) {
  int fd = 1;
  bool owns = false;
  if (path != "-") {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return MakeError(ErrorCode::kIo, "{}: cannot create recording: {}", path,
                       std::strerror(errno));
    }
    owns = true;
  }
  RecordingWriter writer(fd, owns, path, header, format);
  if (format == RecordingFormat::kSeed) return writer;  // seed files have no header line
  if (format == RecordingFormat::kJsonl) {
    AppendHeaderJson(header, writer.line_);
  } else {
    AppendCsvHeader(header, writer.line_);
  }
  TRY_STATUS(writer.WriteLine());
  return writer;
}

RecordingWriter::RecordingWriter(int fd, bool owns_fd, std::string path, RecordingHeader header,
                                 RecordingFormat format)
    : fd_(fd),
      owns_fd_(owns_fd),
      path_(std::move(path)),
      header_(std::move(header)),
      format_(format) {
  line_.reserve(64 * 1024);
}

RecordingWriter::RecordingWriter(RecordingWriter&& other) noexcept
    : fd_(other.fd_),
      owns_fd_(other.owns_fd_),
      path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      format_(other.format_),
      line_(std::move(other.line_)),
      samples_(other.samples_) {
  other.fd_ = -1;
  other.owns_fd_ = false;
}

RecordingWriter::~RecordingWriter() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

Status RecordingWriter::WriteLine() {
  line_.push_back('\n');
  size_t done = 0;
  while (done < line_.size()) {
    ssize_t n = ::write(fd_, line_.data() + done, line_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      line_.clear();
      return MakeError(ErrorCode::kIo, "{}: write failed: {}", path_, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  line_.clear();
  return OkStatus();
}

Status RecordingWriter::Append(const Sample& sample) {
  if (format_ == RecordingFormat::kJsonl) {
    AppendSampleJson(header_, sample, line_);
  } else if (format_ == RecordingFormat::kSeed) {
    AppendSeedObject(header_, sample, line_);
  } else {
    AppendCsvRow(header_, sample, line_);
  }
  Status written = WriteLine();
  if (written.ok()) ++samples_;  // the trailer's "samples" counts the lines in the file
  return written;
}

Status RecordingWriter::AppendEvent(std::string_view kind, int64_t mono_ns,
                                    std::string_view detail) {
  if (format_ != RecordingFormat::kJsonl) return OkStatus();
  JsonWriter w(line_);
  w.BeginObject()
      .Field("type", "event")
      .Field("kind", kind)
      .Field("ts_ns", mono_ns)
      .Field("detail", detail)
      .EndObject();
  return WriteLine();
}

Status RecordingWriter::Finish(int64_t end_mono_ns, std::optional<int> exit_code) {
  if (format_ != RecordingFormat::kJsonl) return OkStatus();
  JsonWriter w(line_);
  w.BeginObject()
      .Field("type", "end")
      .Field("ts_ns", end_mono_ns)
      .Field("samples", samples_)
      .Field("exit_code", exit_code)
      .EndObject();
  return WriteLine();
}

}  // namespace stallscope::sample
