#include "report/life_render.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "base/units.h"
#include "report/render.h"

namespace stallscope::report {
namespace {

using diagnose::LifePart;
using diagnose::LifePartKind;

constexpr double kShownS = 0.05;  // parts shorter than this are left out of the line
constexpr size_t kPartsShown = 4;

/// "18.4 s", "420 ms", "3 ms".
std::string LifeDur(double s) {
  if (s >= 99.5) return fmt::format("{:.0f} s", s);
  if (s >= 0.995) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.0f} ms", s * 1e3);
}

std::string PartText(const LifePart& p, bool excess) {
  const std::string phase = EscapeControl(p.phase);
  switch (p.kind) {
    case LifePartKind::kInterpreter:
      return "Python start " + LifeDur(p.seconds);
    case LifePartKind::kImportTorch:
      return "import torch " + LifeDur(p.seconds);
    case LifePartKind::kSetup:
      return "the job's set-up " + LifeDur(p.seconds);
    case LifePartKind::kCudaInit:
      return "CUDA context " + LifeDur(p.seconds);
    case LifePartKind::kFirstBatch:
      return "first batch " + LifeDur(p.seconds) +
             (p.count > 0 ? fmt::format(": {} worker{} started", p.count, p.count == 1 ? "" : "s")
                          : std::string());
    case LifePartKind::kPhase:
      return phase + (excess ? " +" : " ") + LifeDur(p.seconds);
    case LifePartKind::kCompile:
      return fmt::format("torch.compile {} ({} frame{})", LifeDur(p.seconds), p.count,
                         p.count == 1 ? "" : "s");
    case LifePartKind::kCudnnBenchmark:
      return "cudnn.benchmark on";
    case LifePartKind::kExit:
      return "exit " + LifeDur(p.seconds);
  }
  return "";
}

/// " (a, b, c)" of the parts worth showing, or "".
std::string Parts(const std::vector<LifePart>& parts, bool excess) {
  std::string out;
  size_t shown = 0;
  for (const LifePart& p : parts) {
    const bool flag = p.kind == LifePartKind::kCudnnBenchmark;
    if ((!flag && p.seconds < kShownS) || shown == kPartsShown) continue;
    out += (out.empty() ? "" : ", ") + PartText(p, excess);
    ++shown;
  }
  return out.empty() ? out : " (" + out + ")";
}

std::string Steps(int64_t n) { return fmt::format("{} step{}", n, n == 1 ? "" : "s"); }

void WriteParts(JsonWriter& w, const char* key, const std::vector<LifePart>& parts) {
  w.Key(key).BeginArray();
  for (const LifePart& p : parts) {
    w.BeginObject()
        .Field("what", diagnose::LifePartName(p.kind))
        .Field("seconds", p.seconds, 3)
        .Field("count", p.count);
    w.Key("phase");
    if (p.kind == LifePartKind::kPhase) {
      w.String(p.phase);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string RenderLifeLine(const diagnose::RunLife& l) {
  if (!l.has_steps) return "";
  std::string out = "start-up " + LifeDur(l.startup_s) + Parts(l.startup, false);
  if (l.warmup_steps > 0) {
    out += fmt::format(" · warm-up {} over {}{}", LifeDur(l.warmup_s), Steps(l.warmup_steps),
                       Parts(l.warmup, true));
  }
  out += fmt::format(" · steady {} over {}", LifeDur(l.steady_s), Steps(l.steady_steps));
  if (l.tail_s >= kShownS) out += " · tail " + LifeDur(l.tail_s) + Parts(l.tail, false);
  return out;
}

std::string RenderLifeHeadline(const diagnose::RunLife& l) {
  if (!l.has_steps || !l.mostly_startup) return "";
  return fmt::format(
      "START-UP {} of this {} run ({:.0f}%) was start-up and warm-up; the verdict below is the "
      "steady state's ({} over {})\n",
      LifeDur(l.startup_s + l.warmup_s), LifeDur(l.wall_s), l.StartupShare() * 100,
      LifeDur(l.steady_s), Steps(l.steady_steps));
}

void WriteLifeJson(JsonWriter& w, const diagnose::RunLife& l, int64_t start_ns) {
  w.Key("life").BeginObject().FieldBool("has_steps", l.has_steps);
  w.Field("text", RenderLifeLine(l))
      .FieldBool("sure", l.sure)
      .FieldBool("mostly_startup", l.mostly_startup);
  w.Field("rank", l.rank).Field("wall_s", l.wall_s, 3).Field("startup_s", l.startup_s, 3);
  w.Field("warmup_s", l.warmup_s, 3).Field("warmup_steps", l.warmup_steps);
  w.Field("steady_s", l.steady_s, 3).Field("steady_steps", l.steady_steps);
  w.Field("tail_s", l.tail_s, 3).Field("startup_share", l.StartupShare(), 4);
  w.Key("steady_window");
  if (l.has_steps) {
    w.BeginObject()
        .Field("begin_s", NsToSeconds(l.steady_begin_ns - start_ns), 3)
        .Field("end_s", NsToSeconds(l.steady_end_ns - start_ns), 3)
        .EndObject();
  } else {
    w.Null();
  }
  WriteParts(w, "startup", l.startup);
  WriteParts(w, "warmup", l.warmup);
  WriteParts(w, "tail", l.tail);
  w.EndObject();
}

}  // namespace stallscope::report
