#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <optional>

#include <simdjson.h>

#include "sample/line_reader.h"
#include "sample/recording.h"
#include "sample/seed_monitor.h"

namespace stallscope::sample {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

template <typename T>
std::optional<T> Num(object o, std::string_view key) {
  element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    double d = 0;
    if (e.get_double().get(d) != simdjson::SUCCESS) return std::nullopt;
    return static_cast<T>(d);
  } else if constexpr (std::is_signed_v<T>) {
    int64_t i = 0;
    if (e.get_int64().get(i) != simdjson::SUCCESS) return std::nullopt;
    return static_cast<T>(i);
  } else {
    uint64_t u = 0;
    if (e.get_uint64().get(u) != simdjson::SUCCESS) return std::nullopt;
    return static_cast<T>(u);
  }
}

std::string Str(object o, std::string_view key) {
  std::string_view s;
  if (o.at_key(key).get_string().get(s) != simdjson::SUCCESS) return {};
  return std::string(s);
}

std::optional<bool> Bool(object o, std::string_view key) {
  bool b = false;
  if (o.at_key(key).get_bool().get(b) != simdjson::SUCCESS) return std::nullopt;
  return b;
}

gpu::MigMode ParseMig(std::string_view s) {
  if (s == "enabled") return gpu::MigMode::kEnabled;
  if (s == "disabled") return gpu::MigMode::kDisabled;
  return gpu::MigMode::kUnsupported;
}

int64_t SecondsToNs(std::optional<double> s) {
  return s && *s >= 0 && *s < 1e9 ? static_cast<int64_t>(std::llround(*s * 1e9)) : 0;
}

void ParsePollPlan(object o, RecordingHeader& h) {
  gpu::PollPlan& plan = h.poll;
  plan.tick_ns = SecondsToNs(Num<double>(o, "interval_s"));
  plan.pcie_ns = SecondsToNs(Num<double>(o, "pcie_throughput_s"));
  plan.gpus = h.gpus.size();
  simdjson::dom::array tiers;
  if (o["tiers"].get_array().get(tiers) != simdjson::SUCCESS) return;
  for (element e : tiers) {
    object t;
    if (e.get_object().get(t) != simdjson::SUCCESS) continue;
    const std::string name = Str(t, "tier");
    for (size_t i = 0; i < gpu::kPollTierCount; ++i) {
      if (gpu::PollTierName(static_cast<gpu::PollTier>(i)) != name) continue;
      plan.period_ns[i] = SecondsToNs(Num<double>(t, "period_s"));
      plan.cost_us[i] = Num<double>(t, "cost_us_per_gpu");
    }
  }
}

void ParseGpm(object o, gpu::GpuSample& s) {
  gpu::GpmMetrics& m = s.gpm.emplace();
  m.window_ns = SecondsToNs(Num<double>(o, "window_s"));
  m.graphics_active_pct = Num<double>(o, "graphics_active_pct");
  m.sm_active_pct = Num<double>(o, "sm_active_pct");
  m.sm_occupancy_pct = Num<double>(o, "sm_occupancy_pct");
  m.tensor_active_pct = Num<double>(o, "tensor_active_pct");
  m.tensor_hmma_pct = Num<double>(o, "tensor_hmma_pct");
  m.dram_active_pct = Num<double>(o, "dram_active_pct");
  m.fp64_active_pct = Num<double>(o, "fp64_active_pct");
  m.fp32_active_pct = Num<double>(o, "fp32_active_pct");
  m.fp16_active_pct = Num<double>(o, "fp16_active_pct");
  m.pcie_tx_mibps = Num<double>(o, "pcie_tx_mibps");
  m.pcie_rx_mibps = Num<double>(o, "pcie_rx_mibps");
  m.nvlink_tx_mibps = Num<double>(o, "nvlink_tx_mibps");
  m.nvlink_rx_mibps = Num<double>(o, "nvlink_rx_mibps");
}

void ParseHeader(object o, RecordingHeader& h) {
  h.schema_version = Num<int>(o, "schema_version").value_or(0);
  h.tool_version = Str(o, "tool");
  h.hostname = Str(o, "hostname");
  h.cpu_count = Num<uint32_t>(o, "cpu_count").value_or(0);
  h.interval_ns = Num<int64_t>(o, "interval_ns").value_or(0);
  h.start_wall_ns = Num<int64_t>(o, "start_wall_ns").value_or(0);
  h.start_mono_ns = Num<int64_t>(o, "start_mono_ns").value_or(0);
  h.gpu_backend = Str(o, "gpu_backend");
  h.gpu_note = Str(o, "gpu_note");
  h.driver_version = Str(o, "driver_version");
  h.root_pid = Num<int32_t>(o, "root_pid");
  simdjson::dom::array arr;
  if (o["command"].get_array().get(arr) == simdjson::SUCCESS) {
    for (element e : arr) {
      std::string_view s;
      if (e.get_string().get(s) == simdjson::SUCCESS) h.command.emplace_back(s);
    }
  }
  if (o["gpus"].get_array().get(arr) == simdjson::SUCCESS) {
    for (element e : arr) {
      object g;
      if (e.get_object().get(g) != simdjson::SUCCESS) continue;
      gpu::GpuStatic s;
      s.index = Num<uint32_t>(g, "gpu_index").value_or(static_cast<uint32_t>(h.gpus.size()));
      s.name = Str(g, "gpu_name");
      s.uuid = Str(g, "uuid");
      s.pci_bus_id = Str(g, "pci_bus_id");
      s.mem_total_bytes = Num<uint64_t>(g, "memory_total_bytes");
      s.power_limit_mw = Num<uint32_t>(g, "power_limit_mw");
      s.sm_clock_max_mhz = Num<uint32_t>(g, "sm_clock_max_mhz");
      s.mem_clock_max_mhz = Num<uint32_t>(g, "mem_clock_max_mhz");
      s.pcie_gen_max = Num<uint32_t>(g, "pcie_gen_max");
      s.pcie_width_max = Num<uint32_t>(g, "pcie_width_max");
      s.persistence_mode = Bool(g, "persistence_mode");
      s.mig_mode = ParseMig(Str(g, "mig_mode"));
      s.gpm = Bool(g, "gpm").value_or(false);
      s.gpm_note = Str(g, "gpm_note");
      h.gpus.push_back(std::move(s));
    }
  }
  object poll;
  if (o["gpu_polling"].get_object().get(poll) == simdjson::SUCCESS) ParsePollPlan(poll, h);
  object host_poll;
  if (o["host_polling"].get_object().get(host_poll) == simdjson::SUCCESS) {
    h.host_slow_ns = SecondsToNs(Num<double>(host_poll, "slow_s"));
  }
}

void ParseGpu(object g, gpu::GpuSample& s) {
  s.lost = Bool(g, "lost").value_or(false);
  s.util_gpu_pct = Num<uint32_t>(g, "utilization");
  s.util_mem_pct = Num<uint32_t>(g, "utilization_memory_pct");
  s.mem_used_bytes = Num<uint64_t>(g, "memory_used_bytes");
  s.mem_total_bytes = Num<uint64_t>(g, "memory_total_bytes");
  s.power_mw = Num<uint32_t>(g, "power_mw");
  s.power_limit_mw = Num<uint32_t>(g, "power_limit_mw");
  s.energy_mj = Num<uint64_t>(g, "energy_mj");
  s.temperature_c = Num<uint32_t>(g, "temperature");
  s.sm_clock_mhz = Num<uint32_t>(g, "sm_clock_mhz");
  s.mem_clock_mhz = Num<uint32_t>(g, "mem_clock_mhz");
  s.clock_event_reasons = Num<uint64_t>(g, "clock_event_mask");
  s.pcie_tx_kbps = Num<uint32_t>(g, "pcie_tx_kbps");
  s.pcie_rx_kbps = Num<uint32_t>(g, "pcie_rx_kbps");
  s.pcie_gen = Num<uint32_t>(g, "pcie_gen");
  s.pcie_width = Num<uint32_t>(g, "pcie_width");
  s.ecc_volatile_corrected = Num<uint64_t>(g, "ecc_volatile_corrected");
  s.ecc_volatile_uncorrected = Num<uint64_t>(g, "ecc_volatile_uncorrected");
  simdjson::dom::array arr;
  if (g["util_samples"].get_array().get(arr) == simdjson::SUCCESS) {
    for (element e : arr) {
      simdjson::dom::array pair;
      if (e.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2) continue;
      if (s.util_sample_count >= gpu::kMaxUtilSamples) break;
      int64_t ts = 0;
      uint64_t pct = 0;
      if (pair.at(0).get_int64().get(ts) || pair.at(1).get_uint64().get(pct)) continue;
      s.util_samples[s.util_sample_count++] = {ts, static_cast<uint32_t>(pct)};
    }
  }
  if (g["processes"].get_array().get(arr) == simdjson::SUCCESS) {
    for (element e : arr) {
      object p;
      if (e.get_object().get(p) != simdjson::SUCCESS) continue;
      gpu::GpuProcess gp;
      gp.pid = Num<uint32_t>(p, "pid").value_or(0);
      gp.graphics = Str(p, "type") == "graphics";
      gp.mem_used_bytes = Num<uint64_t>(p, "memory_used_bytes");
      gp.sm_util_pct = Num<uint32_t>(p, "sm_util_pct");
      gp.mem_util_pct = Num<uint32_t>(p, "mem_util_pct");
      s.processes.push_back(gp);
    }
  }
  object gpm;
  if (g["gpm"].get_object().get(gpm) == simdjson::SUCCESS) ParseGpm(gpm, s);
}

std::optional<host::Pressure> ParsePressure(object h, const std::string& prefix) {
  auto some = Num<double>(h, prefix + "_some_avg10");
  if (!some) return std::nullopt;
  host::Pressure p;
  p.some_avg10_pct = *some;
  p.full_avg10_pct = Num<double>(h, prefix + "_full_avg10");
  p.some_stall_us_delta = Num<uint64_t>(h, prefix + "_some_stall_us").value_or(0);
  return p;
}

void ParseHost(object h, host::HostSample& s) {
  s.cpu_count = Num<uint32_t>(h, "cpu_count").value_or(0);
  if (auto busy = Num<double>(h, "cpu_busy_pct")) {
    host::CpuShares c;
    c.busy_pct = *busy;
    c.user_pct = Num<double>(h, "cpu_user_pct").value_or(0);
    c.system_pct = Num<double>(h, "cpu_system_pct").value_or(0);
    c.iowait_pct = Num<double>(h, "cpu_iowait_pct").value_or(0);
    c.steal_pct = Num<double>(h, "cpu_steal_pct").value_or(0);
    s.cpu = c;
  }
  object per;
  if (h["per_cpu"].get_object().get(per) == simdjson::SUCCESS) {
    const std::pair<const char*, double host::CpuShares::*> cols[] = {
        {"busy_pct", &host::CpuShares::busy_pct},
        {"user_pct", &host::CpuShares::user_pct},
        {"system_pct", &host::CpuShares::system_pct},
        {"iowait_pct", &host::CpuShares::iowait_pct},
        {"steal_pct", &host::CpuShares::steal_pct}};
    for (const auto& [key, member] : cols) {
      simdjson::dom::array arr;
      if (per[key].get_array().get(arr) != simdjson::SUCCESS) continue;
      size_t i = 0;
      for (element e : arr) {
        double d = 0;
        if (e.get_double().get(d) != simdjson::SUCCESS) continue;
        if (s.per_cpu.size() <= i) s.per_cpu.resize(i + 1);
        s.per_cpu[i++].*member = d;
      }
    }
  }
  s.mem_total_bytes = Num<uint64_t>(h, "mem_total_bytes");
  s.mem_available_bytes = Num<uint64_t>(h, "mem_available_bytes");
  s.mem_used_bytes = Num<uint64_t>(h, "mem_used_bytes");
  s.load1 = Num<double>(h, "load1");
  s.load5 = Num<double>(h, "load5");
  s.load15 = Num<double>(h, "load15");
  s.procs_running = Num<uint32_t>(h, "procs_running");
  s.psi_cpu = ParsePressure(h, "psi_cpu");
  s.psi_io = ParsePressure(h, "psi_io");
  s.psi_memory = ParsePressure(h, "psi_memory");
  s.disk_read_bps = Num<uint64_t>(h, "disk_read_bps");
  s.disk_write_bps = Num<uint64_t>(h, "disk_write_bps");
  s.cgroup_cpu_quota_cpus = Num<double>(h, "cgroup_cpu_quota_cpus");
  s.cgroup_nr_throttled_delta = Num<uint64_t>(h, "cgroup_nr_throttled");
  s.cgroup_throttled_us_delta = Num<uint64_t>(h, "cgroup_throttled_us");
  s.cgroup_mem_limit_bytes = Num<uint64_t>(h, "cgroup_mem_limit_bytes");
  s.shm_total_bytes = Num<uint64_t>(h, "shm_total_bytes");
  s.shm_used_bytes = Num<uint64_t>(h, "shm_used_bytes");
}

void ParseProcess(object p, host::ProcessSample& s) {
  s.pid = Num<int32_t>(p, "pid").value_or(0);
  s.ppid = Num<int32_t>(p, "ppid").value_or(0);
  s.comm = Str(p, "comm");
  s.cmdline = Str(p, "cmdline");
  std::string state = Str(p, "state");
  s.state = state.empty() ? '?' : state[0];
  s.cpu_pct = Num<double>(p, "cpu_pct");
  s.rss_bytes = Num<uint64_t>(p, "rss_bytes").value_or(0);
  s.threads = Num<uint32_t>(p, "threads").value_or(0);
  s.threads_running = Num<uint32_t>(p, "threads_running").value_or(0);
  s.threads_blocked = Num<uint32_t>(p, "threads_blocked").value_or(0);
  s.read_bytes = Num<uint64_t>(p, "read_bytes");
  s.write_bytes = Num<uint64_t>(p, "write_bytes");
  s.voluntary_ctxt_switches = Num<uint64_t>(p, "voluntary_ctxt_switches");
  s.nonvoluntary_ctxt_switches = Num<uint64_t>(p, "nonvoluntary_ctxt_switches");
}

bool ParseSample(object o, Sample& s) {
  auto mono = Num<int64_t>(o, "ts_ns");
  if (!mono) return false;
  s.mono_ns = *mono;
  s.wall_ns = Num<int64_t>(o, "wall_ns").value_or(0);
  simdjson::dom::array arr;
  if (o["multi_gpu_data"].get_array().get(arr) == simdjson::SUCCESS) {
    for (element e : arr) {
      object g;
      if (e.get_object().get(g) != simdjson::SUCCESS) return false;
      ParseGpu(g, s.gpus.emplace_back());
    }
  }
  object h;
  if (o["host"].get_object().get(h) == simdjson::SUCCESS) ParseHost(h, s.host);
  if (o["processes"].get_array().get(arr) == simdjson::SUCCESS) {
    s.has_processes = true;
    for (element e : arr) {
      object p;
      if (e.get_object().get(p) != simdjson::SUCCESS) continue;
      ParseProcess(p, s.processes.emplace_back());
    }
  }
  return true;
}

/// The error for a file whose first line is not a JSON object: a CSV recording (record --csv),
/// which summary does not read, or not a recording at all.
Error NotJsonLines(const std::string& path, std::string_view line, int64_t line_no) {
  if (line.rfind("timestamp,ts_ns,", 0) == 0) {
    return Error{ErrorCode::kUnsupported,
                 fmt::format("{}: a CSV recording (record --csv), for spreadsheets; summary reads "
                             "the JSON Lines form: record without --csv",
                             path)};
  }
  return Error{ErrorCode::kParse,
               fmt::format("{}: not a stallscope recording (line {} is not JSON)", path, line_no)};
}

/// Clears `s` for the next line, keeping container capacity: parsing a line does not free and
/// reallocate what the previous one used.
void ResetSample(Sample& s) {
  s.mono_ns = 0;
  s.wall_ns = 0;
  s.gpus.clear();
  std::vector<host::CpuShares> per_cpu = std::move(s.host.per_cpu);
  per_cpu.clear();
  s.host = host::HostSample{};
  s.host.per_cpu = std::move(per_cpu);
  s.has_processes = false;
  s.processes.clear();
}

/// The per-line state machine of StreamRecording: header first, then samples, events, trailer.
class LineHandler {
 public:
  LineHandler(const std::string& path, RecordingConsumer& consumer, size_t max_line_bytes)
      : path_(path), consumer_(consumer), max_line_bytes_(max_line_bytes) {}

  /// Handles one line; an error ends the read (no header, a CSV file, not a recording).
  [[nodiscard]] Status Handle(const Line& line) {
    if (line.overlong) {
      if (!have_header_) {
        return MakeError(ErrorCode::kParse,
                         "{}: not a stallscope recording (line {} is longer than {} bytes)", path_,
                         line.number, max_line_bytes_);
      }
      ++tail_.malformed_lines;
      ++tail_.overlong_lines;
      return OkStatus();
    }
    if (line.text.empty()) return OkStatus();
    const bool last_and_torn = !line.complete;  // EOF before a newline: the writer was killed
    object o;
    // The reader leaves kPadding readable bytes after each line, so simdjson need not copy it.
    if (parser_.parse(line.text.data(), line.text.size(), false).get_object().get(o) !=
        simdjson::SUCCESS) {
      if (!have_header_ && !last_and_torn) return NotJsonLines(path_, line.text, line.number);
      if (last_and_torn) {
        tail_.truncated_last_line = true;
        tail_.warnings.push_back(
            fmt::format("{}: line {} is incomplete (recording cut short); "
                        "kept the {} lines before it",
                        path_, line.number, line.number - 1));
      } else {
        ++tail_.malformed_lines;
      }
      return OkStatus();
    }
    std::string_view type;
    if (o["type"].get_string().get(type) != simdjson::SUCCESS) type = have_header_ ? "sample" : "";
    if (seed_) return HandleSeed(o);
    if (!have_header_) {
      if (type != "header") {
        if ((seed_ = SeedFormOf(o))) return HandleSeed(o);
        return MakeError(ErrorCode::kParse,
                         "{}: not a stallscope recording (line 1 is not a header line)", path_);
      }
      ParseHeader(o, header_);
      have_header_ = true;
      consumer_.OnHeader(header_);
      return OkStatus();
    }
    if (type == "sample") {
      ResetSample(sample_);
      if (ParseSample(o, sample_)) {
        ++tail_.samples;
        consumer_.OnSample(sample_);
      } else {
        ++tail_.malformed_lines;
      }
    } else if (type == "event") {
      consumer_.OnEvent(line.text);
    } else if (type == "end") {
      tail_.finished = true;
      tail_.exit_code = Num<int>(o, "exit_code");
    } else {
      ++tail_.malformed_lines;
    }
    return OkStatus();
  }

  /// One of seed 002's monitor objects (the file's first object decided the form): the first
  /// gives the header; every one is a sample. Objects of the other form are malformed lines.
  [[nodiscard]] Status HandleSeed(const object& o) {
    if (!have_header_) {
      header_ = SeedHeader(o, *seed_);
      have_header_ = true;
      consumer_.OnHeader(header_);
      tail_.warnings.push_back(fmt::format(
          "{}: read as {} ({}); it has GPU metrics only (no host, processes or phases)", path_,
          SeedFormName(*seed_), array_ ? "a JSON array" : "one object per line"));
    }
    ResetSample(sample_);
    if (SeedFormOf(o) == seed_ && SeedSample(o, *seed_, header_, sample_)) {
      ++tail_.samples;
      consumer_.OnSample(sample_);
    } else {
      ++tail_.malformed_lines;
    }
    return OkStatus();
  }

  /// A file that is one JSON array: only seed 002's monitor objects are read from one. An array
  /// cut off (a monitor killed mid-write) gives the objects it holds, with a warning.
  [[nodiscard]] Status HandleArray(const std::string& text) {
    array_ = true;
    simdjson::dom::array items;
    if (parser_.parse(text).get_array().get(items) != simdjson::SUCCESS)
      return HandleCutArray(text);
    for (element item : items) TRY_STATUS(HandleArrayItem(item));
    return OkStatus();
  }

  [[nodiscard]] Status HandleArrayItem(element item) {
    object o;
    if (item.get_object().get(o) != simdjson::SUCCESS) {
      ++tail_.malformed_lines;
      return OkStatus();
    }
    if (!seed_ && !(seed_ = SeedFormOf(o))) {
      return MakeError(ErrorCode::kParse,
                       "{}: not a stallscope recording (a JSON array, but its first object is "
                       "not one of seed 002's GPU monitor objects)",
                       path_);
    }
    return HandleSeed(o);
  }

  /// An array that is not valid JSON: its top-level objects one by one, up to where it breaks.
  [[nodiscard]] Status HandleCutArray(const std::string& text) {
    size_t i = text.find('[') + 1;
    size_t objects = 0;
    int depth = 0;
    bool in_string = false;
    size_t start = 0;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        if (depth++ == 0) start = i;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;  // the array's own end: not cut off after all, broken inside
        if (--depth > 0) continue;
        element item;
        if (parser_.parse(text.data() + start, i + 1 - start).get(item) != simdjson::SUCCESS) break;
        TRY_STATUS(HandleArrayItem(item));
        ++objects;
      }
    }
    if (objects == 0) {
      return MakeError(ErrorCode::kParse, "{}: not a stallscope recording (invalid JSON array)",
                       path_);
    }
    tail_.warnings.push_back(fmt::format(
        "{}: the JSON array breaks off after {} complete object(s) (cut off mid-write?); read "
        "what it holds",
        path_, objects));
    return OkStatus();
  }

  /// The tail after the last line, or the "no header" error.
  [[nodiscard]] Result<RecordingTail> Finish() && {
    if (!have_header_) {
      return MakeError(ErrorCode::kParse, "{}: empty or has no header line", path_);
    }
    if (header_.schema_version > kRecordingSchemaVersion) {
      tail_.warnings.push_back(
          fmt::format("{}: schema version {} is newer than this stallscope ({})", path_,
                      header_.schema_version, kRecordingSchemaVersion));
    }
    if (tail_.malformed_lines > 0) {
      std::string why = tail_.overlong_lines == 0
                            ? std::string()
                            : fmt::format(", {} of them longer than the {}-byte line limit",
                                          tail_.overlong_lines, max_line_bytes_);
      tail_.warnings.push_back(
          fmt::format("{}: skipped {} malformed line(s){}", path_, tail_.malformed_lines, why));
    }
    return std::move(tail_);
  }

 private:
  const std::string& path_;
  RecordingConsumer& consumer_;
  simdjson::dom::parser parser_;
  RecordingHeader header_;
  Sample sample_;  ///< reused line after line
  RecordingTail tail_;
  bool have_header_ = false;
  std::optional<SeedForm> seed_;  ///< set: the file is seed 002 monitor objects
  bool array_ = false;            ///< ... in one JSON array
  size_t max_line_bytes_;
};

/// The whole file when it is a regular file whose first non-blank byte is '[' (a JSON array:
/// seed 002's monitor can write one), else nullopt. Pipes are never peeked at.
Result<std::optional<std::string>> ReadIfJsonArray(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<std::string>();  // LineReader names the error
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  if (!in || c != '[') return std::optional<std::string>();
  constexpr off_t kMaxArrayBytes = off_t{1} << 30;
  if (st.st_size > kMaxArrayBytes) {
    return MakeError(ErrorCode::kParse, "{}: a JSON array of {} bytes is over the {} byte limit",
                     path, st.st_size, kMaxArrayBytes);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return std::optional<std::string>(std::move(text));
}

/// Keeps everything: ReadRecording's consumer.
class CollectAll final : public RecordingConsumer {
 public:
  explicit CollectAll(Recording& rec) : rec_(rec) {}
  void OnHeader(const RecordingHeader& header) override { rec_.header = header; }
  void OnSample(const Sample& sample) override { rec_.samples.push_back(sample); }
  void OnEvent(std::string_view line) override { rec_.events.emplace_back(line); }

 private:
  Recording& rec_;
};

}  // namespace

Result<RecordingTail> StreamRecording(const std::string& path, RecordingConsumer& consumer,
                                      size_t max_line_bytes) {
  LineHandler handler(path, consumer, max_line_bytes);
  TRY(std::optional<std::string> whole, ReadIfJsonArray(path));
  if (whole) {
    TRY_STATUS(handler.HandleArray(*whole));
    return std::move(handler).Finish();
  }
  LineReaderOptions options;
  options.max_line_bytes = max_line_bytes;
  options.padding = simdjson::SIMDJSON_PADDING;
  TRY(LineReader reader, LineReader::Open(path, options));
  for (;;) {
    TRY(std::optional<Line> line, reader.Next());
    if (!line) break;
    TRY_STATUS(handler.Handle(*line));
  }
  return std::move(handler).Finish();
}

Result<Recording> ReadRecording(const std::string& path) {
  Recording rec;
  CollectAll collect(rec);
  TRY(RecordingTail tail, StreamRecording(path, collect));
  rec.finished = tail.finished;
  rec.exit_code = tail.exit_code;
  rec.malformed_lines = tail.malformed_lines;
  rec.truncated_last_line = tail.truncated_last_line;
  rec.warnings = std::move(tail.warnings);
  return rec;
}

}  // namespace stallscope::sample
