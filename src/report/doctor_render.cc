#include "report/doctor_render.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/units.h"
#include "doctor/code_check.h"
#include "doctor/env_checks.h"
#include "doctor/gpu_checks.h"
#include "doctor/host_checks.h"

namespace stallscope::report {
namespace {

using doctor::Check;
using doctor::CheckStatus;

/// Checks with the same id, status, detail and fix, merged: the GPUs they are about.
struct Row {
  const Check* check;
  std::vector<uint32_t> gpus;
};

std::vector<Row> MergeRows(const std::vector<Check>& checks) {
  std::vector<Row> rows;
  for (size_t i = 0; i < checks.size();) {
    size_t end = i;
    while (end < checks.size() && checks[end].id == checks[i].id) ++end;
    std::vector<Row> group;
    for (size_t k = i; k < end; ++k) {
      const Check& c = checks[k];
      auto same = std::find_if(group.begin(), group.end(), [&](const Row& r) {
        return r.check->status == c.status && r.check->detail == c.detail && r.check->fix == c.fix;
      });
      if (same == group.end() || !c.gpu) {
        group.push_back({&c, {}});
        same = group.end() - 1;
      }
      if (c.gpu) same->gpus.push_back(*c.gpu);
    }
    // The worst first within a check; otherwise in GPU order.
    std::stable_sort(group.begin(), group.end(),
                     [](const Row& a, const Row& b) { return a.check->status > b.check->status; });
    rows.insert(rows.end(), group.begin(), group.end());
    i = end;
  }
  return rows;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

std::string Verdict(const doctor::CheckCounts& n) {
  const std::string counts = fmt::format("({} OK, {} SKIP)", n.ok, n.skip);
  if (n.fail > 0) {
    return fmt::format("{} FAIL, {} WARN: fix the FAIL items before a long run {}", n.fail, n.warn,
                       counts);
  }
  if (n.warn > 0) {
    return fmt::format("ready, with {} WARN: each costs speed or risks the run {}", n.warn, counts);
  }
  return fmt::format("ready: nothing found that slows training {}", counts);
}

std::string Next(const doctor::CheckCounts& n) {
  if (n.fail > 0) {
    return "Next: fix the FAIL items (each has its fix), then run `stallscope doctor` again; it "
           "exits with 1 until none is left.";
  }
  if (n.warn > 0) {
    return "Next: fix the WARN items that apply to this job, then run it under "
           "`stallscope run -- <command>` to see where its steps go.";
  }
  return "Next: run the job under `stallscope run -- <command>` to see where its steps go.";
}

void WriteGpuJson(JsonWriter& w, const doctor::GpuFact& g) {
  const gpu::GpuStatic& s = g.info;
  const gpu::GpuHealth& h = g.health;
  w.BeginObject().Field("index", s.index).Field("name", s.name).Field("uuid", s.uuid);
  w.Field("pci_bus_id", s.pci_bus_id).Field("numa_node", g.numa_node);
  w.Field("persistence_mode", s.persistence_mode);
  w.Field("mig", s.mig_mode == gpu::MigMode::kEnabled    ? "enabled"
                 : s.mig_mode == gpu::MigMode::kDisabled ? "disabled"
                                                         : "unsupported");
  w.Key("pcie").BeginObject().Field("gen", g.now.pcie_gen).Field("width", g.now.pcie_width);
  w.Field("gen_max", s.pcie_gen_max).Field("width_max", s.pcie_width_max);
  w.Field("gen_gpu_max", h.pcie_gen_gpu_max).EndObject();
  w.Field("power_limit_mw", s.power_limit_mw)
      .Field("power_limit_default_mw", h.power_limit_default_mw);
  w.Field("utilization_pct", g.now.util_gpu_pct).Field("memory_used_bytes", g.now.mem_used_bytes);
  w.Field("memory_total_bytes", s.mem_total_bytes).Field("temperature_c", g.now.temperature_c);
  w.Field("sm_clock_mhz", g.now.sm_clock_mhz).Field("sm_clock_max_mhz", s.sm_clock_max_mhz);
  w.Key("clock_event_reasons");
  if (g.now.clock_event_reasons) {
    w.BeginArray();
    for (const std::string& r : gpu::ClockEventReasonNames(*g.now.clock_event_reasons)) w.String(r);
    w.EndArray();
  } else {
    w.Null();
  }
  w.Key("ecc").BeginObject().Field("volatile_corrected", g.now.ecc_volatile_corrected);
  w.Field("volatile_uncorrected", g.now.ecc_volatile_uncorrected);
  w.Field("aggregate_corrected", h.ecc_aggregate_corrected);
  w.Field("aggregate_uncorrected", h.ecc_aggregate_uncorrected).EndObject();
  w.Key("retired_pages").BeginObject().Field("single_bit", h.retired_pages_sbe);
  w.Field("double_bit", h.retired_pages_dbe).Field("pending", h.retired_pages_pending).EndObject();
  w.Key("remapped_rows").BeginObject().Field("correctable", h.remapped_rows_correctable);
  w.Field("uncorrectable", h.remapped_rows_uncorrectable).Field("pending", h.remap_pending);
  w.Field("failed", h.remap_failed).EndObject();
  w.Key("processes").BeginArray();
  for (const gpu::GpuProcess& p : g.now.processes) {
    w.BeginObject().Field("pid", p.pid).Field("memory_used_bytes", p.mem_used_bytes).EndObject();
  }
  w.EndArray().Field("lost", g.now.lost).EndObject();
}

void WriteSpace(JsonWriter& w, std::string_view key, const doctor::SpaceFacts& s) {
  w.Key(key).BeginObject().Field("path", s.path);
  w.Key("error");
  s.error.empty() ? w.Null() : w.String(s.error);
  w.Field("fs_type", s.fs_type).Field("total_bytes", s.total_bytes);
  w.Field("free_bytes", s.free_bytes).Field("inodes_free", s.inodes_free).EndObject();
}

void WriteHostJson(JsonWriter& w, const doctor::HostFacts& h) {
  w.Key("host").BeginObject().Field("online_cpus", h.online_cpus);
  w.FieldArray("allowed_cpus", h.allowed_cpus).Field("usable_cpus", doctor::UsableCpus(h));
  w.Field("cgroup_quota_cpus", h.cgroup_quota_cpus, 2);
  w.Field("cgroup_memory_limit_bytes", h.cgroup_mem_limit_bytes);
  w.Field("memory_total_bytes", h.mem_total_bytes);
  w.Field("memory_available_bytes", h.mem_available_bytes);
  w.Key("numa_nodes").BeginArray();
  for (const doctor::NumaNode& n : h.numa_nodes) {
    w.BeginObject().Field("id", n.id).FieldArray("cpus", n.cpus).EndObject();
  }
  w.EndArray();
  if (h.shm) {
    WriteSpace(w, "shm", *h.shm);
  } else {
    w.Key("shm").Null();
  }
  w.Field("nofile_soft", h.nofile_soft).Field("nofile_hard", h.nofile_hard);
  WriteSpace(w, "checkpoint", h.checkpoint);
  w.EndObject();
}

void WriteDoctorPythonJson(JsonWriter& w, const doctor::PythonFacts& p) {
  w.Key("python").BeginObject().Field("interpreter", p.interpreter).Field("ran", p.ran);
  w.Key("error");
  p.error.empty() ? w.Null() : w.String(p.error);
  w.Field("version", p.version).Field("implementation", p.implementation);
  w.Field("executable", p.executable).Field("venv", p.venv);
  w.Field("torch", p.torch_version);
  w.Key("torch_error");
  p.torch_error.empty() ? w.Null() : w.String(p.torch_error);
  w.Field("torch_cuda", p.torch_cuda).Field("torch_hip", p.torch_hip);
  w.Field("cuda_available", p.cuda_available).Field("device_count", p.device_count);
  w.Field("cudnn", p.cudnn_version).Field("torch_threads", p.torch_threads);
  w.FieldArray("warnings", p.warnings).EndObject();
}

void WriteDataJson(JsonWriter& w, const std::optional<doctor::DataFacts>& data) {
  w.Key("data");
  if (!data) {
    w.Null();
    return;
  }
  const doctor::DataFacts& d = *data;
  auto per_s = [](double n, double s) {
    return s > 0 ? std::optional<double>(n / s) : std::nullopt;
  };
  w.BeginObject().Field("path", d.path).Key("error");
  d.error.empty() ? w.Null() : w.String(d.error);
  w.Field("fs_type", d.fs_type).Field("network_fs", d.network_fs).Field("files", d.files);
  w.Field("scan_truncated", d.scan_truncated).Field("total_bytes", d.total_bytes);
  w.Field("direct_io", d.direct_io).Key("io_note");
  d.io_note.empty() ? w.Null() : w.String(d.io_note);
  w.Field("threads", d.threads).Field("read_seconds", d.read_seconds, 3);
  w.Field("files_read", d.files_read).Field("bytes_read", d.bytes_read);
  w.Field("mb_per_s", per_s(static_cast<double>(d.bytes_read) / 1e6, d.read_seconds), 1);
  w.Field("files_per_s", per_s(static_cast<double>(d.files_read), d.read_seconds), 1);
  w.Field("random_seconds", d.random_seconds, 3).Field("random_reads", d.random_reads);
  w.Field("iops", per_s(static_cast<double>(d.random_reads), d.random_seconds), 1);
  w.Field("latency_p50_us", d.random_latency_p50_us, 1);
  w.Field("latency_p99_us", d.random_latency_p99_us, 1).Field("read_errors", d.read_errors);
  w.EndObject();
}

std::string_view DriverStateName(doctor::DriverState s) {
  switch (s) {
    case doctor::DriverState::kOk:
      return "ok";
    case doctor::DriverState::kNoDriver:
      return "no_driver";
    case doctor::DriverState::kLibraryMissing:
      return "library_missing";
    case doctor::DriverState::kInitFailed:
      return "init_failed";
  }
  return "?";
}

void WriteFactsJson(JsonWriter& w, const doctor::Facts& f) {
  w.Key("facts").BeginObject();
  w.Key("driver").BeginObject().Field("state", DriverStateName(f.gpu.driver)).Key("error");
  f.gpu.nvml_error.empty() ? w.Null() : w.String(f.gpu.nvml_error);
  w.Key("version");
  f.gpu.driver_version.empty() ? w.Null() : w.String(f.gpu.driver_version);
  w.Key("cuda_version");
  if (f.gpu.cuda_driver_version) {
    const int32_t v = *f.gpu.cuda_driver_version;
    w.String(fmt::format("{}.{}", v / 1000, (v % 1000) / 10));
  } else {
    w.Null();
  }
  w.Key("kernel_module");
  f.gpu.kernel_module_version.empty() ? w.Null() : w.String(f.gpu.kernel_module_version);
  w.Field("nvidia_pci_gpus", f.gpu.nvidia_pci_gpus).EndObject();
  w.Key("gpus").BeginArray();
  for (const doctor::GpuFact& g : f.gpu.gpus) WriteGpuJson(w, g);
  w.EndArray();
  WriteHostJson(w, f.host);
  WriteDoctorPythonJson(w, f.python);
  WriteDataJson(w, f.data);
  w.Field("workers", f.workers);
  // Only what doctor judges: the rest of the environment may hold secrets.
  std::set<std::string_view> keys = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS",
                                     "NCCL_DEBUG_SUBSYS"};
  for (std::string_view v : doctor::JudgedVariables()) keys.insert(v);
  w.Key("env").BeginObject();
  for (std::string_view k : keys) {
    const auto it = f.env.find(std::string(k));
    if (it != f.env.end()) w.Field(k, it->second);
  }
  w.EndObject().EndObject();
}

std::string Location(std::string_view file, int64_t line) {
  return line > 0 ? fmt::format("{}:{}", file, line) : std::string(file);
}

std::string Plural(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

std::string RenderDoctorText(const doctor::Report& r) {
  const doctor::CheckCounts n = doctor::CountChecks(r.checks);
  std::string out = fmt::format("stallscope doctor  {}  {}\n", EscapeControl(r.hostname),
                                FormatIsoUtc(r.wall_ns));
  out += fmt::format("VERDICT  {}\n\n", Verdict(n));
  const std::vector<Row> rows = MergeRows(r.checks);
  size_t width = 5;
  // Measured escaped: the column is as wide as what the terminal shows.
  for (const Row& row : rows) width = std::max(width, EscapeControl(row.check->title).size());
  out += fmt::format("{:<6}  {:<{}}  {}\n", "STATUS", "CHECK", width, "DETAIL");
  for (const Row& row : rows) {
    const Check& c = *row.check;
    const std::string gpus =
        row.gpus.empty() ? "" : fmt::format("GPU {}: ", doctor::FormatIdList(row.gpus));
    out += fmt::format("{:<6}  {:<{}}  {}{}\n", Upper(doctor::StatusName(c.status)),
                       EscapeControl(c.title), width, gpus, EscapeControl(c.detail));
    if (!c.fix.empty() && c.status >= CheckStatus::kWarn) {
      out += fmt::format("{:<6}  {:<{}}  fix: {}\n", "", "", width, EscapeControl(c.fix));
    }
  }
  out += "\n" + Next(n) + "\n";
  return out;
}

std::string RenderDoctorJson(const doctor::Report& r) {
  std::string out;
  JsonWriter w(out);
  const doctor::CheckCounts n = doctor::CountChecks(r.checks);
  w.BeginObject().Field("schema_version", 1).Field("tool", "stallscope doctor");
  w.Field("version", r.tool_version)
      .Field("host", r.hostname)
      .Field("time", FormatIsoUtc(r.wall_ns));
  w.Key("summary").BeginObject().Field("ok", n.ok).Field("warn", n.warn).Field("fail", n.fail);
  w.Field("skip", n.skip).Field("exit_code", doctor::ExitCode(r.checks)).EndObject();
  w.Key("checks").BeginArray();
  for (const Check& c : r.checks) {
    w.BeginObject().Field("id", c.id).Field("title", c.title).Field("gpu", c.gpu);
    w.Field("status", doctor::StatusName(c.status)).Field("detail", c.detail).Key("fix");
    c.fix.empty() ? w.Null() : w.String(c.fix);
    w.EndObject();
  }
  w.EndArray();
  WriteFactsJson(w, r.facts);
  w.EndObject();
  out += '\n';
  return out;
}

std::string RenderCodeText(const doctor::CodeReport& r) {
  if (!r.ran) {
    return fmt::format("stallscope doctor --code: could not check {}: {}\n", EscapeControl(r.path),
                       EscapeControl(r.error));
  }
  const int64_t warns = doctor::CountWarnFindings(r);
  const int64_t infos = static_cast<int64_t>(r.findings.size()) - warns;
  // B12: a file that was not read is never passed as OK; the verdict says so first.
  const bool incomplete = r.files_not_checked > 0;
  std::string out = incomplete ? fmt::format("INCOMPLETE: {} could not be checked; ",
                                             Plural(r.files_not_checked, "file", "files"))
                               : std::string(warns > 0 ? "WARN: " : "OK: ");
  out += fmt::format("{}, {} in {} ({}, Python {})\n",
                     Plural(warns, "GPU-stalling pattern", "GPU-stalling patterns"),
                     Plural(infos, "note", "notes"), Plural(r.files_checked, "file", "files"),
                     EscapeControl(r.path), EscapeControl(r.python_version));
  size_t width = 0;
  for (const doctor::CodeFinding& f : r.findings) {
    width = std::max(width, EscapeControl(Location(f.file, f.line)).size());
  }
  for (const doctor::CodeFinding& f : r.findings) {
    out += fmt::format("\n{:<4}  {:<{}}  {}\n",
                       f.severity == doctor::CodeSeverity::kWarn ? "WARN" : "INFO",
                       EscapeControl(Location(f.file, f.line)), width, f.id);
    if (!f.source.empty()) out += fmt::format("      | {}\n", EscapeControl(f.source));
    out +=
        fmt::format("      why: {}\n      fix: {}\n", EscapeControl(f.why), EscapeControl(f.fix));
  }
  if (r.truncated) out += "\n(more findings than these: fix these and run it again)\n";
  if (incomplete || !r.warnings.empty()) out += "\n";
  for (const doctor::CodeWarning& w : r.warnings) {
    out += fmt::format("not checked: {}: {}\n", EscapeControl(Location(w.file, w.line)),
                       EscapeControl(w.message));
  }
  const int64_t unlisted = r.files_not_checked - static_cast<int64_t>(r.warnings.size());
  if (unlisted > 0) out += fmt::format("not checked: {} more, not listed\n", unlisted);
  if (r.files_checked == 0 && !incomplete && r.warnings.empty()) {
    out += fmt::format("warning: no .py file in {} (venv, site-packages and .git are skipped)\n",
                       EscapeControl(r.path));
  }
  if (r.malformed > 0) {
    out += fmt::format("warning: {} malformed entries in the analyzer's answer were skipped\n",
                       r.malformed);
  }
  if (incomplete) {
    out += fmt::format(
        "\nNext: fix the files that were not checked, or leave them out of what --code is given: "
        "until every file is read, the check fails (exit {})\n",
        doctor::kCodeExitNotChecked);
  }
  if (warns > 0) {
    out +=
        "\nNext: fix the WARN lines (each costs GPU time every step), then measure the change:\n"
        "  stallscope run -- python train.py\n";
  } else if (infos > 0) {
    out += "\nNext: nothing stalls every step; the INFO notes are worth a look.\n";
  }
  return out;
}

std::string RenderCodeJson(const doctor::CodeReport& r, std::string_view tool_version) {
  std::string out;
  JsonWriter w(out);
  const int64_t warns = doctor::CountWarnFindings(r);
  w.BeginObject().Field("schema_version", 1).Field("tool", "stallscope doctor --code");
  w.Field("version", tool_version).Field("path", r.path).Field("python", r.python);
  w.FieldBool("ran", r.ran).Key("error");
  r.ran ? w.Null() : w.String(r.error);
  w.Field("python_version", r.python_version).Field("files_checked", r.files_checked);
  w.Field("files_not_checked", r.files_not_checked);
  w.Key("summary").BeginObject().Field("warn", warns);
  w.Field("info", static_cast<int64_t>(r.findings.size()) - warns);
  w.Field("exit_code", doctor::CodeExitCode(r)).FieldBool("truncated", r.truncated).EndObject();
  w.Key("findings").BeginArray();
  for (const doctor::CodeFinding& f : r.findings) {
    w.BeginObject().Field("file", f.file).Field("line", f.line).Field("id", f.id);
    w.Field("severity", doctor::SeverityName(f.severity)).Field("source", f.source);
    w.Field("why", f.why).Field("fix", f.fix).EndObject();
  }
  w.EndArray().Key("warnings").BeginArray();
  for (const doctor::CodeWarning& x : r.warnings) {
    w.BeginObject().Field("file", x.file).Field("line", x.line).Field("message", x.message);
    w.EndObject();
  }
  w.EndArray().EndObject();
  out += '\n';
  return out;
}

}  // namespace stallscope::report
