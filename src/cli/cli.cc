#include "cli/cli.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include "base/thresholds.h"

#include "base/units.h"

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/record_args.h"

namespace stallscope::cli {
namespace {

/// CLI11's text line by line with control characters escaped: its errors quote the user's
/// arguments ("The following argument was not expected: ..."), which may hold escapes.
std::string EscapeLines(std::string_view text) {
  std::string out;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = std::min(text.find('\n', begin), text.size());
    out += EscapeControl(text.substr(begin, end - begin));
    if (end < text.size()) out.push_back('\n');
    begin = end + 1;
  }
  return out;
}

/// The job's command of `run`, `passes` and `sweep` (command_line.h FindJobStart).
constexpr const char* kJobCommandHelp =
    "The job's command and its arguments: every word from the job's command on is the job's, "
    "with or without a `--` before it";

/// A whole number of at least `min`, said in words ("must be 1 or more") rather than as CLI11's
/// range of doubles.
CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        int64_t n = 0;
        if (!CLI::detail::lexical_cast(value, n) || n < min) {
          return fmt::format("{}: must be a whole number, {} or more", value, min);
        }
        return {};
      },
      fmt::format("INT>={}", min));
}

/// One of `record`'s own specs (a text, number or flag of RecordOptions).
void AddRecordSpec(CLI::App* cmd, const OptionSpec& spec, RecordOptions& rec) {
  CLI::Option* opt = nullptr;
  if (spec.flag != nullptr) {
    opt = cmd->add_flag(spec.names, *spec.flag(rec), spec.help);
  } else if (spec.number != nullptr) {
    opt = cmd->add_option(spec.names, *spec.number(rec), spec.help)->check(AtLeast(spec.min_value));
  } else {
    opt = cmd->add_option(spec.names, *spec.text(rec), spec.help);
  }
  if (spec.default_value != nullptr) opt->default_val(spec.default_value);
}

/// --nvml-lib and --proc-root (record_args.cc kSampling), on every sampling command.
void AddSamplingFlags(CLI::App* cmd, SamplingOptions& o) {
  for (const OptionSpec& spec : SamplingOptionSpecs()) {
    if (spec.sampling_flag != nullptr) {
      cmd->add_flag(spec.names, *spec.sampling_flag(o), spec.help);
      continue;
    }
    CLI::Option* opt = cmd->add_option(spec.names, *spec.sampling(o), spec.help);
    if (spec.default_value != nullptr) opt->default_val(spec.default_value);
  }
}

/// --demo (record_args.h DemoOptionSpecs): on the commands that show GPUs.
void AddDemoFlag(CLI::App* cmd, SamplingOptions& o) {
  for (const OptionSpec& spec : DemoOptionSpecs()) {
    cmd->add_flag(spec.names, *spec.sampling_flag(o), spec.help);
  }
}

/// From the specs the front binary parses too (record_args.h).
CLI::App* AddRecord(CLI::App& app, RecordOptions& rec) {
  auto* record = app.add_subcommand("record", "Sample GPUs and host to a JSON Lines file");
  for (const OptionSpec& spec : RecordOptionSpecs()) AddRecordSpec(record, spec, rec);
  record->add_option("command", rec.command, "Command to start and follow (after --)");
  record->footer(
      "Examples:\n  stallscope record --duration 60s -o run.jsonl\n"
      "  stallscope record -i 500ms -- python train.py --epochs 1\n"
      "With a command, the recording ends when it exits and its exit code is returned.\n" +
      PollingHelp());
  AddSamplingFlags(record, rec.sampling);
  AddDemoFlag(record, rec.sampling);
  return record;
}

/// `record --serve` and `run --serve`: only stallscope-full has them (the front binary leaves
/// such lines to it, record_args.cc knows no --serve).
void AddServeFlag(CLI::App* cmd, std::string& serve) {
  cmd->add_option(
      "--serve", serve,
      "Also serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9400; docs/commands/serve.md)");
}

CLI::App* AddServe(CLI::App& app, ServeOptions& o) {
  auto* serve = app.add_subcommand("serve", "Serve GPU and host metrics to Prometheus");
  serve->add_option("--listen", o.listen, "HOST:PORT to listen on (loopback by default)")
      ->default_val("127.0.0.1:9400");
  serve->add_option("-i,--interval", o.interval, "Sampling interval, 50ms or more")
      ->default_val("1s");
  serve->add_option("--duration", o.duration, "Stop after this long (default: until Ctrl-C)");
  serve->footer(
      "Examples:\n  stallscope serve\n  stallscope serve --listen 0.0.0.0:9400\n"
      "GPU metrics use dcgm-exporter's names and labels; see docs/commands/serve.md.\n");
  AddSamplingFlags(serve, o.sampling);
  AddDemoFlag(serve, o.sampling);
  return serve;
}

CLI::App* AddTop(CLI::App& app, TopOptions& top) {
  auto* top_cmd = app.add_subcommand(
      "top", "Show GPUs and host now: full screen on a terminal, else a refreshed text table");
  top_cmd->footer("On a terminal: q quit, p pause, s sort, h help.\n");
  top_cmd->add_flag("--once", top.once, "Print one snapshot and exit");
  top_cmd->add_flag("--json", top.json, "JSON output (numbers as numbers, units in key names)");
  top_cmd->add_flag(
      "--status", top.status,
      fmt::format("One status line per interval, with a warning when GPU "
                  "utilization stays under {:g}% for {:g} samples",
                  kThresholds.low_util_warn.value, kThresholds.low_util_window.value));
  top_cmd->add_flag("--plain", top.plain,
                    "The refreshed text table instead of the full screen (the default when "
                    "stdout is not a terminal, or with --count)");
  top_cmd
      ->add_option("--pid", top.pid,
                   "Follow this process and its children (main process, DataLoader workers: "
                   "CPU, state, I/O rate)")
      ->check(AtLeast(1));
  top_cmd->add_option("--run", top.run_dir,
                      "Follow a run directory that `stallscope run` writes (or wrote), read-only: "
                      "steps/s, phase shares and the live suspicion over the last 5 s, and the "
                      "job's process tree");
  top_cmd->add_option("-i,--interval", top.interval, "Refresh interval")->default_val("1s");
  top_cmd->add_option("-n,--count", top.count, "Stop after N refreshes (default: until Ctrl-C)")
      ->check(AtLeast(1));
  AddSamplingFlags(top_cmd, top.sampling);
  AddDemoFlag(top_cmd, top.sampling);
  return top_cmd;
}

CLI::App* AddSummary(CLI::App& app, SummaryOptions& sum) {
  auto* summary =
      app.add_subcommand("summary", "Summarize a recording: per-GPU stats, load balance");
  summary->add_option("recording", sum.path, "A file written by `stallscope record`")->required();
  summary->add_flag("--json", sum.json, "JSON output");
  return summary;
}

CLI::App* AddRun(CLI::App& app, RunOptions& run) {
  auto* run_cmd = app.add_subcommand("run", "Run a training job, time its phases, write a report");
  run_cmd->add_option("--name", run.name, "Run name (default: the script's name)");
  run_cmd->add_option("--out", run.out,
                      "Run directory (default stallscope-runs/<date>-<time>-<name>)");
  run_cmd->add_option("-i,--interval", run.interval, "Sampling interval, 50ms or more")
      ->default_val("1s");
  run_cmd->add_flag(
      "--no-auto", run.no_auto,
      "Do not hook PyTorch inside the job (explicit stallscope.phase() markers still count)");
  run_cmd->add_flag("--quiet", run.quiet,
                    "Print nothing while the job runs (stdout and stderr stay the job's)");
  run_cmd
      ->add_option("--report-every", run.report_every,
                   "Interim phase report every N steps (0 = off)")
      ->default_val(100)
      ->check(AtLeast(0));
  run_cmd->add_flag("--force", run.force,
                    "Reuse a previous run's --out directory (its files are replaced)");
  run_cmd
      ->add_option("--steps", run.stop_after_steps,
                   "End the job after N training steps (the PyTorch hooks stop it, exit code 0)")
      ->check(AtLeast(1));
  run_cmd->add_option("--duration", run.stop_after,
                      "Stop the job after this long (SIGTERM to it, SIGKILL 10 s later), e.g. 2m");
  run_cmd->add_flag("--tui", run.tui,
                    "Show the full-screen `top` (GPUs, host, the job's processes, steps/s, phase "
                    "shares, the live suspicion) while the job runs; its output goes to job.log "
                    "in the run directory; the report follows when the screen closes");
  run_cmd
      ->add_option("--stacks", run.stacks_hz,
                   "Sample the Python stack of each rank's main thread HZ times a second "
                   "(DataLoader workers at a fifth of it), without stopping the job")
      ->default_val(50)
      ->check(CLI::Range(1, 1000));
  run_cmd
      ->add_option("--stacks-threads", run.stacks_threads,
                   "Which threads' stacks: main (each process's main thread), or all (every "
                   "thread of the ranks' processes too, at a fifth of --stacks)")
      ->default_val("main")
      ->check(CLI::IsMember({"main", "all"}));
  run_cmd->add_flag("--no-stacks", run.no_stacks, "Do not sample Python stacks");
  run_cmd->add_option("command", run.command, kJobCommandHelp)->required();
  run_cmd->footer(
      "Examples:\n  stallscope run -- python train.py --epochs 1\n"
      "  stallscope run --name resnet -i 500ms -- torchrun --nproc_per_node 8 train.py\n"
      "The job runs unchanged (no shell); its exit code is returned. Ctrl-C is forwarded to it.\n" +
      PollingHelp());
  AddSamplingFlags(run_cmd, run.sampling);
  AddServeFlag(run_cmd, run.serve);
  return run_cmd;
}

CLI::App* AddDiagnose(CLI::App& app, DiagnoseOptions& diag) {
  auto* diagnose = app.add_subcommand(
      "diagnose", "Redo the analysis of a run directory, or of one job's nodes' run directories");
  diagnose->add_option("run_dir", diag.dirs,
                       "A directory written by `stallscope run`; several: one per node of one "
                       "job (torchrun --nnodes N), merged into one job report");
  diagnose->add_flag("--force", diag.force,
                     "With several directories: merge them even when they do not look like one "
                     "job (world size, command, ranks)");
  diagnose->add_flag("--thresholds", diag.thresholds,
                     "Print the verdict's thresholds table (Markdown) and exit");
  diagnose->add_flag("--json", diag.json, "Print report.json instead of the text report");
  return diagnose;
}

CLI::App* AddReport(CLI::App& app, ReportOptions& rep) {
  auto* report = app.add_subcommand(
      "report", "A self-contained HTML report of a run directory, profiler traces or a recording");
  report
      ->add_option("path", rep.path,
                   "Run directory, trace (.json, .json.gz) or folder of traces, "
                   "or a recording (.jsonl)")
      ->required();
  report->add_option("--html", rep.html, "Write the HTML report to FILE");
  report->add_option("--png", rep.png,
                     "Write seed 002's figures (utilization.png, memory.png, load_balance.png) "
                     "into DIR");
  report->add_flag("--force", rep.force, "Replace an existing FILE or figures");
  report->add_option("-j,--threads", rep.threads, "Trace reading threads (default: all cores)");
  report->footer(
      "Examples:\n  stallscope report stallscope-runs/train-1 --html train.html\n"
      "  stallscope report traces/ --html traces.html\n"
      "  stallscope report gpus.jsonl --png figures/\n"
      "One file, no network: the chart library is inside it. Opens from file:// and as an\n"
      "e-mail attachment. `stallscope run` writes report.html into every run directory.\n");
  return report;
}

CLI::App* AddCompare(CLI::App& app, CompareOptions& cmp) {
  auto* compare = app.add_subcommand(
      "compare", "Two runs side by side: steps/s change with a 95% interval, phases, differences");
  compare->add_option("a", cmp.a, "Run directory A (the baseline)")->required();
  compare->add_option("b", cmp.b, "Run directory B (compared with A)")->required();
  compare->add_flag("--json", cmp.json, "JSON output (docs/commands/compare.md)");
  compare->footer(
      "Example:\n  stallscope run --steps 60 --out runs/w0 -- python train.py --workers 0\n"
      "  stallscope run --steps 60 --out runs/w4 -- python train.py --workers 4\n"
      "  stallscope compare runs/w0 runs/w4\n"
      "The change is significant when its 95% interval (block bootstrap of the steady-state step\n"
      "times) excludes 1. Exit status 0 whatever it says; 1 when A or B is not a run directory.\n");
  return compare;
}

CLI::App* AddTrace(CLI::App& app, TraceOptions& tr) {
  auto* trace_cmd = app.add_subcommand(
      "trace", "Analyse torch.profiler traces: step breakdown, GPU idle causes, verdict");
  trace_cmd
      ->add_option("paths", tr.paths,
                   "Trace files (.json, .json.gz) or folders of them (one per rank)")
      ->required();
  trace_cmd->add_flag("--json", tr.json,
                      "JSON output (docs/formats.md#trace---json-schema-version-1)");
  trace_cmd->add_option("--rank", tr.rank,
                        "Rank of a file whose rank neither distributedInfo nor its name gives");
  trace_cmd->add_option("--steps", tr.steps, "Only ProfilerStep numbers A to B (A:B, A:, :B)");
  trace_cmd->add_flag("--hta-compat", tr.hta_compat,
                      "Holistic Trace Analysis conventions: µs rounding, last step dropped, "
                      "cuda_sync counted as busy");
  trace_cmd->add_flag("--per-step", tr.per_step, "One step-breakdown row per step");
  trace_cmd->add_option("--top", tr.top, "Rows of the top-kernels table")->default_val(8);
  trace_cmd->add_option(
      "--html", tr.html,
      "Also write the HTML report (step breakdown, idle causes, kernels) to FILE");
  trace_cmd->add_option("--export-perfetto", tr.export_perfetto,
                        "Also write one merged timeline of all ranks for ui.perfetto.dev");
  trace_cmd->add_flag(
      "--force", tr.force,
      "Let --export-perfetto / --html overwrite an existing file (never an input trace)");
  trace_cmd->add_option("-j,--threads", tr.threads, "Ranks read in parallel (default: all cores)");
  trace_cmd->footer(
      "Examples:\n  stallscope trace trace.json.gz\n  stallscope trace traces/ --json > "
      "report.json\n"
      "  stallscope trace traces/ --export-perfetto merged.json\n"
      "Write traces with torch.profiler.profile(schedule=..., on_trace_ready=\n"
      "  torch.profiler.tensorboard_trace_handler(DIR)) and call prof.step() every iteration.\n");
  return trace_cmd;
}

/// What `passes` and `sweep` share.
void AddExperimentFlags(CLI::App* cmd, ExperimentOptions& e) {
  cmd->add_option("--steps", e.steps, "Steps per run (the hooks end the job; default 50)")
      ->check(AtLeast(1));
  cmd->add_option("--duration", e.duration, "At most this long per run (SIGTERM), e.g. 2m");
  cmd->add_option("--out", e.out,
                  "Folder of the runs (default stallscope-runs/<date>-<time>-<name>-<command>)");
  cmd->add_option("-i,--interval", e.interval, "Sampling interval, 50ms or more")
      ->default_val("1s");
  cmd->add_flag("--json", e.json, "JSON output (also written to the folder)");
  cmd->add_flag("--force", e.force, "Reuse a non-empty --out (its runs are replaced)");
  cmd->add_option("command", e.command, kJobCommandHelp)->required();
  AddSamplingFlags(cmd, e.sampling);
}

CLI::App* AddPasses(CLI::App& app, PassesOptions& p) {
  auto* cmd = app.add_subcommand(
      "passes", "Controlled passes: the job with side work off, then with synthetic data");
  cmd->add_option("--synthetic-batches", p.synthetic_batches,
                  "Pass C: real batches each DataLoader caches and then repeats")
      ->default_val(4)
      ->check(AtLeast(1));
  cmd->add_option("--ranks", p.ranks,
                  "1,N: run the job with 1 and with N processes instead (torchrun, "
                  "accelerate launch, examples/launch.py)");
  AddExperimentFlags(cmd, p.e);
  cmd->footer(
      "Seed 000's method: run the job bounded, A as it is, B without its side work (torch.save\n"
      "skipped, no-grad forwards served from a cache), C with synthetic data (each DataLoader\n"
      "repeats copies of its first batches), A2 as it is again (the machine's drift). The pass\n"
      "that recovers the lost speed names the bottleneck; it is checked against A's verdict.\n"
      "The job's code is not changed; its output goes to job.log in each pass's run directory;\n"
      "torch.save goes to a scratch folder in every pass (removed), never the job's paths.\n"
      "--ranks 1,N (seed 000 §1): the job with 1 and with N processes, per-step time, variation\n"
      "and GPU utilization of each; single smooth, multi sawtooth → cross-rank sync, or\n"
      "main-rank side work when rank 0 works while the others wait at the next all-reduce.\n"
      "Examples:\n  stallscope passes -- python train.py\n"
      "  stallscope passes --steps 100 --json -- torchrun --nproc_per_node 8 train.py\n"
      "  stallscope passes --ranks 1,8 -- accelerate launch --num_processes 8 train.py\n");
  return cmd;
}

CLI::App* AddSweep(CLI::App& app, SweepOptions& s) {
  auto* cmd = app.add_subcommand(
      "sweep", "Run the job once per setting (DataLoader knobs or the job's flags), compare");
  cmd->add_option("--set", s.sets,
                  "KEY=V1,V2,...: num_workers, batch_size, prefetch_factor, pin_memory, "
                  "persistent_workers (set through the hooks), or any KEY used as {KEY} in the "
                  "command or an --arg")
      ->required();
  cmd->add_option("--arg", s.args, "A word appended to the command, {KEY} substituted (no shell)");
  AddExperimentFlags(cmd, s.e);
  cmd->footer(fmt::format(
      "Every combination runs bounded; one that fails (crash, OOM) is recorded and the sweep\n"
      "goes on. The table is sorted by steps/s; the recommended setting is the one using the\n"
      "least CPU within {:.0f}% of the best; the verdict's prediction is checked against it.\n"
      "Examples:\n  stallscope sweep --set num_workers=0,2,4,8 -- python train.py\n"
      "  stallscope sweep --set w=2,4 --arg \"--workers={{w}}\" -- python train.py\n",
      (1 - kThresholds.sweep_recommend_within.value) * 100));
  return cmd;
}

/// `--workers` is kept apart: DoctorOptions::workers stays empty unless the flag is given.
CLI::App* AddDoctor(CLI::App& app, DoctorOptions& doc, int64_t& doctor_workers,
                    CLI::Option** workers_opt) {
  auto* doctor_cmd =
      app.add_subcommand("doctor", "Check the machine and the job's environment before a long run");
  doctor_cmd->add_flag("--json", doc.json,
                       "JSON output (docs/formats.md#doctor---json-schema-version-1)");
  *workers_opt =
      doctor_cmd
          ->add_option("--workers", doctor_workers,
                       "DataLoader workers the job will use (judges /dev/shm, CPUs, threads)")
          ->check(AtLeast(0));
  doctor_cmd->add_option("--data", doc.data,
                         "Training data directory: read throughput and IOPS (reads only)");
  doctor_cmd->add_option("--data-time", doc.data_time, "Time bound of the --data test")
      ->default_val("3s");
  doctor_cmd->add_option("--checkpoint-dir", doc.checkpoint_dir, "Where checkpoints are saved")
      ->default_val(".");
  doctor_cmd
      ->add_option("--python", doc.python,
                   "The job's Python: asked about torch and CUDA; parses the --code files "
                   "(default: python3 on PATH)")
      ->default_val("python3");
  auto* no_python = doctor_cmd->add_flag("--no-python", doc.no_python, "Do not run Python");
  doctor_cmd
      ->add_option("--code", doc.code,
                   "Only check training code (a .py file or a directory of them) for patterns "
                   "that stall the GPU: .item()/.cpu()/print(loss) every step, DataLoader "
                   "without workers or pinned memory, ... (parsed by --python, never run)")
      ->type_name("PATH")
      ->excludes(no_python);
  AddSamplingFlags(doctor_cmd, doc.sampling);
  doctor_cmd->add_option("--sys-root", doc.sys_root, "Root of sysfs (for tests)")
      ->default_val("/sys")
      ->group("");
  doctor_cmd->add_option("--cgroup-root", doc.cgroup_root, "cgroup v2 mount (for tests)")
      ->default_val("/sys/fs/cgroup")
      ->group("");
  doctor_cmd->add_option("--shm-path", doc.shm_path, "/dev/shm (for tests)")
      ->default_val("/dev/shm")
      ->group("");
  doctor_cmd->footer(
      "Each check is OK, WARN, FAIL or SKIP, with the fix. Exit status: 0 when no check FAILs,\n"
      "1 when one does, 2 on bad flags. Run it in the job's environment (venv, container).\n"
      "--code PATH runs only the code check: each finding is file:line, the pattern, why it\n"
      "stalls the GPU and the fix; exit 0 when no finding is WARN, 1 when one is, 2 when PATH\n"
      "is missing or Python cannot run it.\n"
      "Examples:\n  stallscope doctor\n  stallscope doctor --workers 8 --data /data/train "
      "--checkpoint-dir /ckpt\n  stallscope doctor --python ~/venvs/train/bin/python --json\n"
      "  stallscope doctor --code train.py\n  stallscope doctor --code src/ --json\n");
  return doctor_cmd;
}

/// `dump`'s subcommand and its options (on the heap: CLI11 keeps their addresses).
struct DumpCommand {
  CLI::App* cmd = nullptr;
  std::unique_ptr<DumpOptions> options = std::make_unique<DumpOptions>();
};

DumpCommand AddDump(CLI::App& app) {
  DumpCommand out;
  DumpOptions& dump = *out.options;
  auto* cmd = app.add_subcommand(
      "dump", "The Python stacks of a process and its children now, without stopping them");
  cmd->add_option("pid", dump.pid, "The process (its descendants too)")
      ->required()
      ->check(AtLeast(1));
  cmd->add_flag("--no-children", dump.no_children, "Only PID, not its descendants");
  cmd->add_flag("--all", dump.all, "Also list the descendants that are not Python processes");
  cmd->add_flag("--json", dump.json, "JSON output (docs/formats.md#dump---json-schema-version-1)");
  cmd->footer(
      "Every thread's stack, innermost frame first, with the source line where the file is\n"
      "readable. Read from outside with process_vm_readv (CPython 3.8-3.13): nothing is stopped\n"
      "or attached. Needs the right to read the process: the same user (kernel.yama.ptrace_scope\n"
      "0; at 1 only a descendant) or CAP_SYS_PTRACE; `stallscope doctor` says which applies.\n"
      "Exit status: 0 when a stack was read, 1 when none was, 2 on bad flags.\n"
      "Examples:\n  stallscope dump 4242\n  sudo stallscope dump --json 4242 > stacks.json\n");
  out.cmd = cmd;
  return out;
}

/// `stallscope rnu` (issue 41): one line naming the word and the command it likely meant, or
/// every command when none is near; nullopt for a command's name or an option.
std::optional<std::string> UnknownCommand(const CLI::App& app, std::string_view word) {
  if (word.empty() || word[0] == '-') return std::nullopt;
  std::vector<std::string> names;
  for (const CLI::App* c : app.get_subcommands({})) {
    if (c->get_name() == word) return std::nullopt;
    names.push_back(c->get_name());
  }
  const std::vector<std::string> near = NearestNames(word, names);
  if (!near.empty()) {
    return fmt::format("stallscope: unknown command '{}' — did you mean {}?", EscapeControl(word),
                       fmt::join(near, " or "));
  }
  return fmt::format(
      "stallscope: unknown command '{}'; the commands are {} (`stallscope --help` "
      "says what each does)",
      EscapeControl(word), fmt::join(names, ", "));
}

/// How `run`, `passes` and `sweep` are given a job: said when there is none.
struct JobUsage {
  const char* name;
  const char* usage;    ///< after "stallscope NAME "
  const char* example;  ///< a whole command line
};

constexpr JobUsage kJobUsages[] = {
    {"run", "[OPTIONS] [--] COMMAND [ARGS...]", "stallscope run python train.py"},
    {"passes", "[OPTIONS] [--] COMMAND [ARGS...]", "stallscope passes python train.py"},
    {"sweep", "--set KEY=V1,V2,... [OPTIONS] [--] COMMAND [ARGS...]",
     "stallscope sweep --set num_workers=0,2,4 python train.py"}};

/// `run`, `passes`, `sweep` ARGS (args[1] names the command): a `--` goes before the job's first
/// word where the user wrote none, so that CLI11 gives every word from there to the job (issue
/// 41: `run python train.py --out x` gave `--out x` to `run`). Returns the usage error when
/// there is no job.
std::optional<std::string> SeparateJob(const CLI::App& cmd, const JobUsage& job,
                                       std::vector<std::string>& args) {
  const std::span<const std::string> words(args.begin() + 2, args.end());
  const JobStart start = FindJobStart(words, [&cmd](std::string_view name) {
    const CLI::Option* opt = cmd.get_option_no_throw(std::string(name));
    return opt != nullptr && opt->get_items_expected_min() > 0;
  });
  if (start.help) return std::nullopt;  // CLI11 prints the help
  if (start.index == words.size()) {
    return fmt::format(
        "stallscope {0}: no job to run: give its command, e.g. {1}\n"
        "usage: stallscope {0} {2}   (stallscope {0} --help: the options)",
        cmd.get_name(), job.example, job.usage);
  }
  if (!start.dashes) args.insert(args.begin() + 2 + static_cast<std::ptrdiff_t>(start.index), "--");
  return std::nullopt;
}

/// The command line as CLI11 is to read it: a typo of a command's name (UnknownCommand) and a
/// job-running command without a job (SeparateJob) are refused here, with their message on
/// stderr (false: exit 2).
bool PrepareArgs(const CLI::App& app, std::vector<std::string>& args) {
  if (args.size() < 2) return true;
  if (auto unknown = UnknownCommand(app, args[1]))
    return fmt::print(stderr, "{}\n", *unknown), false;
  for (const JobUsage& job : kJobUsages) {
    if (args[1] != job.name) continue;
    // The command by name without CLI11's get_subcommand, which throws when there is none.
    for (const CLI::App* cmd : app.get_subcommands({})) {
      if (cmd->get_name() != job.name) continue;
      if (auto no_job = SeparateJob(*cmd, job, args)) {
        return fmt::print(stderr, "{}\n", *no_job), false;
      }
    }
  }
  return true;
}

/// CLI11 reads the command line (after PrepareArgs). The exit code when that ends the command
/// (its help: 0; a usage error: 2), nullopt when the command is to run.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (!PrepareArgs(app, args)) return 2;
  std::vector<const char*> words;
  for (const std::string& a : args) words.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the help or the error; a usage error exits 2 (README "Commands"), whatever
    // CLI11's own code for it (105 for a value out of range, 109 for an unknown flag, ...).
    std::ostringstream out, err;
    int code = app.exit(e, out, err);
    fmt::print(stdout, "{}", EscapeLines(out.str()));
    fmt::print(stderr, "{}", EscapeLines(err.str()));
    return code == 0 ? 0 : 2;
  }
  return std::nullopt;
}

/// `stallscope` alone and `stallscope --help`: what it is, where to start, and every command
/// with its one line, as `git` and `py-spy` greet a user (issue 30).
std::string Greeting(const CLI::App& app) {
  std::string out = fmt::format(
      "{}: why is my GPU training slow, and what do I change?\n\n"
      "Start here: wrap the training command. stallscope runs it, times its phases and ends with\n"
      "the verdict: the one bottleneck, what it costs, the fix.\n"
      "  stallscope run -- python train.py\n"
      "  stallscope run -- torchrun --nproc-per-node 8 train.py\n\n"
      "Commands:\n",
      ToolVersion());
  size_t width = 0;
  const std::vector<const CLI::App*> commands = app.get_subcommands({});
  for (const CLI::App* c : commands) width = std::max(width, c->get_name().size());
  for (const CLI::App* c : commands) {
    out += fmt::format("  {:<{}}  {}\n", c->get_name(), width, c->get_description());
  }
  out +=
      "\nOptions: -h, --help (this text), --version\n"
      "`stallscope COMMAND --help` gives a command's options; docs/commands/ has a page for "
      "each.\n";
  return out;
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app{"stallscope: why is my GPU training slow, and what do I change?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ToolVersion());
  app.footer("Run `stallscope COMMAND --help` for a command's options.\n");

  RecordOptions rec;
  TopOptions top;
  SummaryOptions sum;
  RunOptions run;
  DiagnoseOptions diag;
  CompareOptions cmp;
  ReportOptions rep;
  TraceOptions tr;
  DoctorOptions doc;
  PassesOptions passes;
  SweepOptions sweep;
  int64_t doctor_workers = 0;
  CLI::Option* workers_opt = nullptr;
  CLI::App* record = AddRecord(app, rec);
  AddServeFlag(record, rec.serve);
  ServeOptions serve;
  CLI::App* serve_cmd = AddServe(app, serve);
  CLI::App* top_cmd = AddTop(app, top);
  CLI::App* summary = AddSummary(app, sum);
  CLI::App* run_cmd = AddRun(app, run);
  CLI::App* diagnose = AddDiagnose(app, diag);
  CLI::App* compare = AddCompare(app, cmp);
  CLI::App* report_cmd = AddReport(app, rep);
  CLI::App* trace_cmd = AddTrace(app, tr);
  CLI::App* passes_cmd = AddPasses(app, passes);
  CLI::App* sweep_cmd = AddSweep(app, sweep);
  CLI::App* doctor_cmd = AddDoctor(app, doc, doctor_workers, &workers_opt);
  const DumpCommand dump = AddDump(app);

  // Nothing, or only --help: the greeting (a missing command is still a usage error, exit 2).
  const std::string_view first = argc > 1 ? std::string_view(argv[1]) : std::string_view();
  if (argc == 1 || (argc == 2 && (first == "--help" || first == "-h"))) {
    fmt::print(stdout, "{}", Greeting(app));
    return argc == 1 ? 2 : 0;
  }
  if (auto code = ParseCommandLine(app, argc, argv)) return *code;
  if (doctor_cmd->parsed()) {
    if (workers_opt->count() > 0) doc.workers = doctor_workers;
    return RunDoctor(doc);
  }
  for (const auto& [cmd, addr] : {std::pair{"record", &rec.serve}, std::pair{"run", &run.serve}}) {
    if (addr->empty()) continue;
    if (auto bad = BadListenAddress(*addr))
      return fmt::print(stderr, "stallscope {}: --serve {}\n", cmd, *bad), 2;
  }
  if (serve_cmd->parsed()) return RunServe(serve);
  // Issue 27 B19: a port that cannot be listened on, before the command starts (RunRun checks
  // its own; RunRecord is in the front binary, which links no exporter).
  if (record->parsed() && !rec.serve.empty()) {
    if (auto cannot = CannotListen(rec.serve))
      return fmt::print(stderr, "stallscope record: {}\n", *cannot), 1;
  }
  if (record->parsed()) return RunRecord(rec, StartServe);
  if (top_cmd->parsed()) return RunTop(top);
  if (summary->parsed()) return RunSummary(sum);
  if (run_cmd->parsed()) return RunRun(run);
  if (diagnose->parsed()) return RunDiagnose(diag);
  if (compare->parsed()) return RunCompare(cmp);
  if (report_cmd->parsed()) return RunReport(rep);
  if (trace_cmd->parsed()) return RunTrace(tr);
  if (passes_cmd->parsed()) return RunPasses(passes);
  if (sweep_cmd->parsed()) return RunSweep(sweep);
  return dump.cmd->parsed() ? RunDump(*dump.options) : 2;
}

std::optional<RecordOptions> ParseRecordWithCli11(int argc, const char* const* argv) {
  CLI::App app;
  app.require_subcommand(1);
  RecordOptions rec;
  CLI::App* record = AddRecord(app, rec);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    return std::nullopt;
  }
  if (!record->parsed()) return std::nullopt;
  return rec;
}

}  // namespace stallscope::cli
