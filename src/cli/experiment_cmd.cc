// `stallscope passes` and `stallscope sweep`: the job run several times under `run`'s monitor,
// bounded, each time with one thing changed through the hooks' experiment controls; then one
// table from the runs' digests (experiment/experiment.h).

#include <signal.h>

#include <cctype>
#include <filesystem>
#include <functional>
#include <variant>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/run_job.h"
#include "experiment/passes.h"
#include "experiment/scaling.h"
#include "experiment/sweep.h"
#include "report/experiment_render.h"
#include "rundir/run_dir.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultSteps = 50;
constexpr int kInterrupted = 128 + SIGINT;
/// How every experiment's output says what its rates are.
constexpr std::string_view kSteadyRates =
    "rates are the steady state's: start-up and warm-up are left out";

/// The experiment's folder: --out (new, empty, or reused with --force), else a fresh
/// stallscope-runs/<date>-<time>-<name>-<kind>.
Result<std::string> MakeFolder(const ExperimentOptions& e, std::string_view kind) {
  std::error_code ec;
  if (e.out.empty()) {
    std::string name = rundir::DefaultRunName(e.command) + "-" + std::string(kind);
    TRY(auto paths, rundir::CreateRunDir("stallscope-runs", name, SystemClock().WallNs()));
    fs::remove(fs::path(paths.dir) / "phases", ec);  // a run's folder; this one holds runs
    return paths.dir;
  }
  if (fs::exists(e.out, ec) && !fs::is_directory(e.out, ec))
    return MakeError(ErrorCode::kInvalidArgument, "--out {}: exists and is not a directory", e.out);
  if (!fs::is_empty(e.out, ec) && !ec && !e.force) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--out {}: not empty; give --force to reuse it (its runs are replaced), or "
                     "another --out",
                     e.out);
  }
  fs::create_directories(e.out, ec);
  if (ec) return MakeError(ErrorCode::kIo, "{}: cannot create: {}", e.out, ec.message());
  return e.out;
}

std::string BoundText(const ExperimentOptions& e) {
  std::string out;
  if (e.steps > 0 || e.duration.empty())
    out = fmt::format("{} steps", e.steps > 0 ? e.steps : kDefaultSteps);
  if (!e.duration.empty()) out += (out.empty() ? "" : ", at most ") + e.duration;
  return out + " per run";
}

/// One bounded run of the job into `dir`, its digest, or why there is none.
struct Outcome {
  std::optional<experiment::RunDigest> run;
  std::string failure;
  bool interrupted = false;  ///< the user stopped it: no run after it starts
};

/// Why an interrupted run has no result. A SIGKILL at the third interrupt is stallscope's own
/// (run_cmd.cc Supervisor), never the out-of-memory killer's.
std::string InterruptedFailure(int code, int interrupts) {
  if (code == 128 + SIGKILL && interrupts >= 3)
    return "interrupted: stallscope killed the job (SIGKILL) at the third interrupt";
  if (code > 128) return fmt::format("interrupted: the job ended by signal {}", code - 128);
  return fmt::format("interrupted: the job exited {}", code);
}

/// True when SIGINT, SIGTERM or SIGHUP came after the last run's job ended (RunRun leaves them
/// blocked, so they wait instead of reaching the next run's job). Consumes them.
bool InterruptPending() {
  sigset_t set, pending;
  sigemptyset(&set);
  sigemptyset(&pending);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  if (sigpending(&pending) != 0) return false;
  bool any = false;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) any = any || sigismember(&pending, sig) == 1;
  if (!any) return false;
  const timespec now{0, 0};
  while (sigtimedwait(&set, nullptr, &now) > 0) {
  }
  return true;
}

Outcome RunOnce(const ExperimentOptions& e, const std::string& dir,
                const std::vector<std::string>& command, std::vector<std::string> env,
                int64_t skip_through_step = 0) {
  RunOptions ro;
  ro.sampling = e.sampling;
  ro.out = dir;
  ro.interval = e.interval;
  ro.quiet = true;
  ro.force = e.force;
  ro.report_every = 0;
  ro.job_log = true;
  ro.stop_after_steps =
      e.steps > 0 || e.duration.empty() ? (e.steps > 0 ? e.steps : kDefaultSteps) : 0;
  ro.stop_after = e.duration;
  ro.env = std::move(env);
  ro.command = command;
  Outcome o;
  const JobOutcome job = RunJob(ro);
  const int code = job.exit_code;
  // The user's interrupt reaches stallscope (counted by the monitor) or, at a terminal, the job
  // (it holds the terminal): either stops the experiment, whatever the job's exit status.
  o.interrupted = job.interrupts > 0 || code == kInterrupted;
  // The one analysis of the run: its reports written, its digest taken from the same analysis.
  // A run that never started, or whose directory is gone, gets no reports: loading it fails.
  auto run = job.started && !job.dir_removed ? AnalyzeAndWriteReports(rundir::RunPaths{dir}, "run")
                                             : diagnose::LoadAndAnalyzeRun(dir);
  if (!run.ok()) {
    o.failure = (o.interrupted ? "interrupted: " : "failed: ") + run.error().message;
    return o;
  }
  experiment::RunDigest digest = experiment::DigestRun(run->data, run->analysis, skip_through_step);
  const bool stopped = digest.meta.status == rundir::RunStatus::kStopped;
  if (o.interrupted) {
    o.failure = InterruptedFailure(code, job.interrupts);
  } else if (code != 0 && !stopped) {
    o.failure = code > 128 ? fmt::format("failed: killed by signal {}{}", code - 128,
                                         code - 128 == SIGKILL ? " (out of memory?)" : "")
                           : fmt::format("failed: exit {}", code);
    const std::string said = rundir::LastErrorLine(rundir::RunPaths{dir}.job_log());
    if (!said.empty()) o.failure += fmt::format(" ({}/job.log: {})", dir, said);
  } else if (!digest.rate) {
    o.failure = "failed: no steps measured (does the job train with PyTorch?)";
  }
  o.run = std::move(digest);
  return o;
}

void Progress(const std::string& what, const Outcome& o) {
  if (o.run && o.run->rate) {
    fmt::print(stderr, "[stallscope] {}: {:.2f} steps/s ({} steps)\n", EscapeControl(what),
               o.run->rate->per_s, o.run->rate->steps);
  } else {
    fmt::print(stderr, "[stallscope] {}: {}\n", EscapeControl(what), EscapeControl(o.failure));
  }
}

/// The folder of an experiment's runs and its scratch folder for the job's torch.save.
struct Folders {
  std::string dir;
  std::string scratch;  ///< absolute: the job may change its working directory
};

/// The folders, or the exit code after saying why not (2: --out is not usable, 1: I/O).
std::variant<Folders, int> MakeFolders(const ExperimentOptions& e, std::string_view cmd) {
  auto dir = MakeFolder(e, cmd);
  if (!dir.ok()) {
    fmt::print(stderr, "stallscope {}: {}\n", cmd, EscapeControl(dir.error().message));
    return dir.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  std::error_code ec;
  const fs::path scratch = fs::absolute(fs::path(*dir) / "scratch", ec);
  fs::create_directories(scratch, ec);
  return Folders{*dir, scratch.string()};
}

/// After the runs: the scratch folder removed, `<cmd>.txt` and `<cmd>.json` written, the report
/// printed. kInterrupted when the user stopped it, else nullopt.
std::optional<int> Finish(std::string_view cmd, const Folders& f, const std::string& text,
                          const std::string& json, bool print_json, bool interrupted) {
  std::error_code ec;
  fs::remove_all(f.scratch, ec);
  const fs::path base = fs::path(f.dir) / cmd;
  Status st = rundir::WriteFileAtomic(base.string() + ".txt", text);
  if (st.ok()) st = rundir::WriteFileAtomic(base.string() + ".json", json);
  if (!st.ok()) fmt::print(stderr, "stallscope {}: {}\n", cmd, EscapeControl(st.error().message));
  fmt::print("{}", print_json ? json : text);
  if (!interrupted) return std::nullopt;
  fmt::print(stderr, "stallscope {}: interrupted; the runs after it did not run\n", cmd);
  return kInterrupted;
}

/// Shared checks of both commands; an exit code when they fail.
std::optional<int> BadOptions(const ExperimentOptions& e, std::string_view cmd) {
  if (e.command.empty()) {
    fmt::print(stderr, "stallscope {}: no command given; usage: stallscope {} [OPTIONS] -- CMD\n",
               cmd, cmd);
    return 2;
  }
  if (!e.duration.empty()) {
    auto d = ParseDurationNs(e.duration);
    if (!d.ok() || *d <= 0) {
      fmt::print(stderr, "stallscope {}: --duration {}: {}\n", cmd, EscapeControl(e.duration),
                 d.ok() ? "must be more than 0" : EscapeControl(d.error().message));
      return 2;
    }
  }
  return std::nullopt;
}

/// A folder name for a sweep setting: "03-num_workers=2,batch_size=64".
std::string SettingDirName(size_t index, const experiment::SweepPoint& p) {
  std::string name = fmt::format("{:02}-", index + 1);
  for (size_t k = 0; k < p.setting.size(); ++k) {
    std::string kv = p.setting[k].first + "=" + p.setting[k].second;
    for (char& c : kv) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '=' && c != '.' && c != '-' &&
          c != '_') {
        c = '_';
      }
    }
    name += (k == 0 ? "" : ",") + kv;
  }
  return name.substr(0, 120);
}

/// `passes --ranks 1,N`: the job once per process count, then seed 000 §1's conclusion.
int RunRankPasses(const PassesOptions& o) {
  const ExperimentOptions& e = o.e;
  auto counts = experiment::ParseProcessCounts(o.ranks);
  if (!counts.ok()) {
    fmt::print(stderr, "stallscope passes: {}\n", EscapeControl(counts.error().message));
    return 2;
  }
  auto launcher = experiment::RecogniseLauncher(e.command);
  if (!launcher.ok()) {
    fmt::print(stderr, "stallscope passes: {}\n", EscapeControl(launcher.error().message));
    return 2;
  }
  experiment::ScalingReport report;
  for (int n : *counts) {
    auto command = experiment::WithProcessCount(e.command, n);
    if (!command.ok()) {  // recognised above: cannot fail, but say so if it does
      fmt::print(stderr, "stallscope passes: {}\n", EscapeControl(command.error().message));
      return 2;
    }
    report.runs.push_back({n, std::move(*command), std::nullopt, ""});
  }
  auto folders = MakeFolders(e, "passes");
  if (const int* code = std::get_if<int>(&folders)) return *code;
  const Folders& f = std::get<Folders>(folders);
  report.dir = f.dir;
  report.command = e.command;
  report.launcher = launcher->name;
  report.bound = BoundText(e) + "; " + std::string(kSteadyRates);
  fmt::print(stderr, "[stallscope] passes --ranks {} in {} ({}), {}\n", EscapeControl(o.ranks),
             EscapeControl(f.dir), EscapeControl(launcher->name), report.bound);
  bool interrupted = false;
  for (auto& run : report.runs) {
    interrupted = interrupted || InterruptPending();
    if (interrupted) break;
    const std::string name = report::ScalingRunDirName(run);
    fmt::print(stderr, "[stallscope] {} running: {}\n", name,
               EscapeControl(rundir::ShellJoin(run.command)));
    Outcome out = RunOnce(e, (fs::path(f.dir) / name).string(), run.command,
                          {"STALLSCOPE_SCRATCH_DIR=" + f.scratch});
    Progress(name, out);
    interrupted = out.interrupted;
    run.run = std::move(out.run);
    run.failure = std::move(out.failure);
  }
  report.conclusion = experiment::ConcludeScaling(report.runs);
  if (auto code = Finish("passes", f, report::RenderScalingText(report),
                         report::RenderScalingJson(report), e.json, interrupted)) {
    return *code;
  }
  return report.conclusion.cls == experiment::ScalingClass::kNone ? 1 : 0;
}

}  // namespace

int RunPasses(const PassesOptions& o) {
  const ExperimentOptions& e = o.e;
  if (auto bad = BadOptions(e, "passes")) return *bad;
  if (!o.ranks.empty()) return RunRankPasses(o);
  if (o.synthetic_batches < 1) {
    fmt::print(stderr, "stallscope passes: --synthetic-batches must be 1 or more\n");
    return 2;
  }
  auto folders = MakeFolders(e, "passes");
  if (const int* code = std::get_if<int>(&folders)) return *code;
  const Folders& f = std::get<Folders>(folders);
  experiment::PassesReport report;
  report.dir = f.dir;
  report.command = e.command;
  report.bound = BoundText(e) + fmt::format(
                                    "; {}, and so are the first {} steps (pass C's "
                                    "real batches)",
                                    kSteadyRates, o.synthetic_batches + 1);
  auto specs = experiment::StandardPasses(f.scratch, static_cast<int>(o.synthetic_batches));
  fmt::print(stderr,
             "[stallscope] passes in {}, {}; every pass sends torch.save to {} "
             "(removed at the end)\n",
             EscapeControl(f.dir), report.bound, EscapeControl(f.scratch));
  for (const auto& spec : specs) {
    fmt::print(stderr, "[stallscope]   {} {}: removes {}\n", experiment::PassIdName(spec.id),
               spec.name, spec.removes);
  }
  bool interrupted = false;
  for (const auto& spec : specs) {
    interrupted = interrupted || InterruptPending();
    if (interrupted) break;
    const std::string id(experiment::PassIdName(spec.id));
    fmt::print(stderr, "[stallscope] pass {} ({}) running\n", id, spec.name);
    // Every pass leaves out its start-up and warm-up, and the steps of pass C's real batches.
    Outcome out = RunOnce(e, (fs::path(f.dir) / id).string(), e.command, spec.env,
                          static_cast<int64_t>(o.synthetic_batches) + 1);
    Progress("pass " + id, out);
    interrupted = out.interrupted;
    report.passes.push_back({spec, std::move(out.run), std::move(out.failure), std::nullopt});
  }
  report.conclusion = experiment::ConcludePasses(report.passes);
  if (auto code = Finish("passes", f, report::RenderPassesText(report),
                         report::RenderPassesJson(report), e.json, interrupted)) {
    return *code;
  }
  const auto& a = report.passes.front();  // A always runs first
  return a.run && a.run->rate ? 0 : 1;
}

int RunSweep(const SweepOptions& o) {
  const ExperimentOptions& e = o.e;
  if (auto bad = BadOptions(e, "sweep")) return *bad;
  auto axes = experiment::ParseSweepSets(o.sets);
  if (!axes.ok()) {
    fmt::print(stderr, "stallscope sweep: {}\n", EscapeControl(axes.error().message));
    return 2;
  }
  auto points = experiment::PlanSweep(*axes, e.command, o.args);
  if (!points.ok()) {
    fmt::print(stderr, "stallscope sweep: {}\n", EscapeControl(points.error().message));
    return 2;
  }
  auto folders = MakeFolders(e, "sweep");
  if (const int* code = std::get_if<int>(&folders)) return *code;
  const Folders& f = std::get<Folders>(folders);
  experiment::SweepReport report;
  report.dir = f.dir;
  report.command = e.command;
  report.bound = BoundText(e) + "; " + std::string(kSteadyRates);
  fmt::print(stderr, "[stallscope] sweep of {} settings in {}, {}; torch.save goes to {}\n",
             points->size(), EscapeControl(f.dir), report.bound, EscapeControl(f.scratch));
  bool interrupted = false;
  for (size_t i = 0; i < points->size(); ++i) {
    interrupted = interrupted || InterruptPending();
    if (interrupted) break;
    const auto& p = (*points)[i];
    std::vector<std::string> env = p.env;
    env.push_back("STALLSCOPE_SCRATCH_DIR=" + f.scratch);
    fmt::print(stderr, "[stallscope] {}/{} {} running\n", i + 1, points->size(),
               EscapeControl(p.label));
    Outcome out = RunOnce(e, (fs::path(f.dir) / SettingDirName(i, p)).string(), p.command, env);
    Progress(p.label, out);
    interrupted = out.interrupted;
    report.rows.push_back({p, std::move(out.run), std::move(out.failure)});
  }
  report.summary = experiment::SummarizeSweep(report.rows);
  if (auto code = Finish("sweep", f, report::RenderSweepText(report),
                         report::RenderSweepJson(report), e.json, interrupted)) {
    return *code;
  }
  return report.summary.best ? 0 : 1;
}

}  // namespace stallscope::cli
