#include "report/stacks_render.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::report {
namespace {

constexpr size_t kLinesShown = 3;       // per group in report.txt (report.json has kMaxStackLines)
constexpr size_t kUnreadableShown = 8;  // "not sampled" lines in report.txt

std::string GroupLabel(const diagnose::StackGroup& g) {
  return fmt::format("{} ({})", g.name, g.samples);
}

std::string GroupLines(const diagnose::StackGroup& g, size_t width) {
  std::string out;
  for (size_t i = 0; i < g.lines.size() && i < kLinesShown; ++i) {
    const diagnose::StackLine& l = g.lines[i];
    std::string what = EscapeControl(l.where);
    if (!l.text.empty()) what += "  " + EscapeControl(l.text);
    if (!l.via.empty()) {
      what += fmt::format("  (in {} {})", EscapeControl(l.via), FormatPercentShort(l.via_share));
    }
    out += fmt::format("  {:<{}} {:>4}  {}\n", i == 0 ? EscapeControl(GroupLabel(g)) : "", width,
                       FormatPercentShort(l.share), what);
  }
  return out;
}

void WriteGroupJson(JsonWriter& w, const diagnose::StackGroup& g) {
  w.BeginObject().Field("name", g.name).Field("samples", g.samples).Key("lines").BeginArray();
  for (const diagnose::StackLine& l : g.lines) {
    w.BeginObject()
        .Field("where", l.where)
        .Field("file", l.file)
        .Field("function", l.function)
        .Field("line", l.line)
        .Field("text", l.text)
        .FieldBool("library", l.library)
        .Field("samples", l.samples)
        .Field("share", l.share, 4)
        .Field("via", l.via)
        .Field("via_share", l.via_share, 4)
        .EndObject();
  }
  w.EndArray().EndObject();
}

}  // namespace

std::string RenderStacksText(const diagnose::StackReport& s) {
  if (!s.present) return {};
  const std::string torn =
      s.torn > 0 ? fmt::format("; {} torn read{} dropped", s.torn, s.torn == 1 ? "" : "s")
                 : std::string();
  std::string out =
      s.whole_run && s.phases.empty()
          ? fmt::format(
                "Stacks  where the Python was: the job marked no steps, so each main thread "
                "over the whole run ({} samples){}\n",
                s.whole_run->samples, torn)
          : fmt::format(
                "Stacks  where the Python was in the steady steps: the main thread by phase "
                "({} samples at {} Hz){}{}\n",
                s.steady_samples, s.main_hz,
                s.workers ? fmt::format(", DataLoader workers ({} at {} Hz)", s.workers->samples,
                                        s.worker_hz)
                          : std::string(),
                torn);
  size_t width = 0;
  for (const diagnose::StackGroup& g : s.phases) width = std::max(width, GroupLabel(g).size());
  for (const auto* g : {&s.workers, &s.gpu_idle, &s.threads, &s.whole_run}) {
    if (*g) width = std::max(width, GroupLabel(**g).size());
  }
  for (const diagnose::StackGroup& g : s.phases) out += GroupLines(g, width);
  for (const auto* g : {&s.workers, &s.gpu_idle, &s.threads, &s.whole_run}) {
    if (*g) out += GroupLines(**g, width);
  }
  // A job that starts many helpers (a shell, nvidia-smi) names each once in report.json.
  for (size_t i = 0; i < s.unreadable.size() && i < kUnreadableShown; ++i)
    out += fmt::format("  not sampled: {}\n", EscapeControl(s.unreadable[i]));
  if (s.unreadable.size() > kUnreadableShown) {
    out += fmt::format("  not sampled: {} more processes (report.json stacks.unreadable)\n",
                       s.unreadable.size() - kUnreadableShown);
  }
  return out;
}

void WriteStacksJson(JsonWriter& w, const diagnose::StackReport& s) {
  w.Key("stacks");
  if (!s.present) {
    w.Null();
    return;
  }
  w.BeginObject()
      .Field("main_hz", s.main_hz)
      .Field("worker_hz", s.worker_hz)
      .Field("samples", s.samples)
      .Field("steady_samples", s.steady_samples)
      .Field("torn", s.torn)
      .Field("failed", s.failed)
      .Field("cpu_s", s.cpu_s, 3);
  w.Key("phases").BeginArray();
  for (const auto& g : s.phases) WriteGroupJson(w, g);
  w.EndArray();
  for (const auto& [key, group] : {std::pair{"workers", &s.workers}, {"gpu_idle", &s.gpu_idle}}) {
    w.Key(key);
    if (*group) {
      WriteGroupJson(w, **group);
    } else {
      w.Null();
    }
  }
  // Only when there are such samples (issue 40; the keys of earlier reports are unchanged).
  for (const auto& [key, group] : {std::pair{"threads", &s.threads}, {"whole_run", &s.whole_run}}) {
    if (!*group) continue;
    w.Key(key);
    WriteGroupJson(w, **group);
  }
  w.FieldArray("unreadable", s.unreadable).EndObject();
}

}  // namespace stallscope::report
