#include "report/stacks_render.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::report {
namespace {

constexpr size_t kLinesShown = 3;  // per group in report.txt (report.json has kMaxStackLines)

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
  std::string out = fmt::format(
      "Stacks  where the Python was in the steady steps: the main thread by phase ({} samples at "
      "{} Hz){}{}\n",
      s.steady_samples, s.main_hz,
      s.workers ? fmt::format(", DataLoader workers ({} at {} Hz)", s.workers->samples, s.worker_hz)
                : std::string(),
      s.torn > 0 ? fmt::format("; {} torn read{} dropped", s.torn, s.torn == 1 ? "" : "s")
                 : std::string());
  size_t width = 0;
  for (const diagnose::StackGroup& g : s.phases) width = std::max(width, GroupLabel(g).size());
  for (const auto* g : {&s.workers, &s.gpu_idle}) {
    if (*g) width = std::max(width, GroupLabel(**g).size());
  }
  for (const diagnose::StackGroup& g : s.phases) out += GroupLines(g, width);
  if (s.workers) out += GroupLines(*s.workers, width);
  if (s.gpu_idle) out += GroupLines(*s.gpu_idle, width);
  for (const std::string& u : s.unreadable)
    out += fmt::format("  not sampled: {}\n", EscapeControl(u));
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
  w.FieldArray("unreadable", s.unreadable).EndObject();
}

}  // namespace stallscope::report
