#include "stacks/stack_sampler.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "base/file_read.h"
#include "base/units.h"
#include "host/proc_parse.h"
#include "phase/phase_reader.h"
#include "pystack/process_memory.h"
#include "pystack/pystack.h"
#include "pystack/stack_reader.h"

namespace stallscope::stacks {
namespace {

constexpr size_t kMaxTextBytes = 200;
constexpr int64_t kFlushEveryNs = kNsPerSec;
constexpr int64_t kTargetsEveryNs = 100'000'000;  // `run` drains the rings every 100 ms
// A process whose samples keep failing (no thread found, every read torn: a forged or corrupt
// interpreter, issue 40 P02): after kBackOffAfter failures in a row each wait doubles, up to a
// second; after kDropAfter it is dropped with a note. At 50 Hz that is ~5 s and 12 reads of at
// most the reader's budget (ReaderBudget::thread_states, 4096 thread states) each.
constexpr int kBackOffAfter = 3;
constexpr int kDropAfter = 12;
constexpr int64_t kMaxBackOffNs = kNsPerSec;
// Tries to open a process that is no Python (yet): a process just started may not have mapped
// libpython; an exec is tried afresh. Pids remembered as refused: a bound, then forgotten.
constexpr int kOpenTries = 3;
constexpr size_t kMaxRefused = 65536;
// --stacks-threads all: threads walked per sample of a process (the main thread first).
constexpr size_t kMaxThreadsPerSample = 64;

std::string CwdOf(int32_t pid) {
  std::error_code ec;
  auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
  return ec ? std::string() : cwd.string();
}

/// /proc/PID/exe: the file the process runs (an exec changes it); empty when unknown.
std::string ExeOf(int32_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return ec ? std::string() : exe.string();
}

std::string CommOf(int32_t pid) {
  auto comm = ReadSmallFile(fmt::format("/proc/{}/comm", pid), 64);
  return comm.ok() ? std::string(Trim(*comm)) : std::string();
}

/// The pids in a /proc/PID/task/PID/children file.
std::vector<int32_t> ChildrenOf(int32_t pid) {
  std::vector<int32_t> out;
  const auto text = ReadSmallFile(fmt::format("/proc/{}/task/{}/children", pid, pid), 4096);
  if (!text.ok()) return out;  // gone, or ~500 children: none listed
  host::AppendPidList(*text, out);
  return out;
}

/// The targets and the descendants of the ranks' processes two levels down, each once, as workers:
/// DataLoader workers are the main thread's children (fork, spawn) or a fork server's (forkserver).
std::vector<StackTarget> WithChildren(const std::vector<StackTarget>& targets) {
  std::vector<StackTarget> out;
  for (const StackTarget& t : targets) {
    if (t.worker || t.other) continue;
    for (int32_t child : ChildrenOf(t.pid)) {
      out.push_back({child, t.rank, true, t.pid, false});
      for (int32_t grandchild : ChildrenOf(child))
        out.push_back({grandchild, t.rank, true, child, false});
    }
  }
  for (const StackTarget& t : targets) {
    const bool child =
        std::any_of(out.begin(), out.end(), [&](const StackTarget& c) { return c.pid == t.pid; });
    if (!child) out.push_back(t);
  }
  return out;
}

}  // namespace

/// One process being sampled.
struct StackSampler::Process {
  StackTarget target;
  pystack::StackReader reader;
  std::string exe;  ///< /proc/PID/exe when opened
  int64_t last_torn = 0;
  int failures = 0;  ///< samples in a row that failed
  int64_t first_failure_ns = 0;
  int64_t not_before_ns = 0;  ///< backing off: no sample before this
};

/// A process that could not be opened: tried again after an exec, or a few times when it was
/// no Python yet (kOpenTries).
struct StackSampler::Refused {
  int32_t pid = 0;
  std::string exe;
  int tries = 0;
  bool final = false;  ///< noted: not tried again unless it execs
  /// While tries are left: the note it gets if it never becomes a Python (written at the end
  /// of the run when the tries did not run out: a short job's shell is named too).
  StackTarget target;
  std::string pending;
};

Result<std::unique_ptr<StackSampler>> StackSampler::Start(const std::string& path,
                                                          StackSamplerOptions options,
                                                          Targets targets) {
  options.main_hz = std::clamp(options.main_hz, 1, 1000);
  options.worker_hz = std::clamp(options.worker_hz, 0, options.main_hz);
  options.all_threads_hz = std::clamp(options.all_threads_hz, 0, options.main_hz);
  TRY(StackLogWriter writer, StackLogWriter::Open(path, options.main_hz, options.worker_hz));
  std::unique_ptr<StackSampler> sampler(
      new StackSampler(std::move(writer), options, std::move(targets)));
  sampler->thread_ = std::thread([s = sampler.get()] { s->Run(); });
  return sampler;
}

StackSampler::StackSampler(StackLogWriter writer, StackSamplerOptions options, Targets targets)
    : writer_(std::move(writer)), options_(std::move(options)), targets_(std::move(targets)) {}

StackSampler::~StackSampler() { (void)Stop(); }

Status StackSampler::Stop() {
  if (!stopped_) {
    stopped_ = true;
    stop_.Request();
    if (thread_.joinable()) thread_.join();
  }
  return write_status_;
}

StackTotals StackSampler::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

void StackSampler::Note(const StackTarget& t, std::string error) {
  StackProcess note;
  note.pid = t.pid;
  note.rank = t.rank;
  note.worker = t.worker;
  note.other = t.other;
  note.forked_from = t.forked_from;
  note.error = std::move(error);
  writer_.AddProcess(note);
}

bool StackSampler::Known(int32_t pid) const {
  return std::any_of(processes_.begin(), processes_.end(),
                     [&](const auto& p) { return p->target.pid == pid; });
}

StackSampler::Refused* StackSampler::RefusedOf(int32_t pid) {
  auto it = std::find_if(refused_.begin(), refused_.end(),
                         [&](const Refused& r) { return r.pid == pid; });
  return it == refused_.end() ? nullptr : &*it;
}

void StackSampler::Refresh(bool children) {
  std::vector<StackTarget> targets = targets_();
  // A rank not seen before has its children listed at once; the others every refresh_ns.
  for (const StackTarget& t : targets) {
    children |= !t.worker && !t.other && !Known(t.pid) && RefusedOf(t.pid) == nullptr;
  }
  std::vector<StackTarget> all = children ? WithChildren(targets) : targets;
  for (StackTarget& t : all) {
    if (Known(t.pid)) {
      Promote(t);
      continue;
    }
    if (const Refused* r = RefusedOf(t.pid)) {
      // Tried again on the slow refresh only: after an exec, or while it may still be starting.
      if (!children || (r->final && ExeOf(t.pid) == r->exe)) continue;
    }
    if (t.other) {
      // A child of a rank's process or of a worker is a worker (found here before the
      // children listing found it).
      auto parent = std::find_if(processes_.begin(), processes_.end(), [&](const auto& p) {
        return p->target.pid == t.forked_from && !p->target.other;
      });
      if (parent != processes_.end()) {
        t.other = false;
        t.worker = true;
        t.rank = (*parent)->target.rank;
      }
    }
    Open(t);
  }
}

// A process first found in the job's tree (before its hooks made a ring, or before the children
// listing named it a worker) takes the role its ring or parent gives it: a rank's process is
// sampled at main_hz from then on. Its process line is written again with the role.
void StackSampler::Promote(const StackTarget& t) {
  if (t.other) return;
  for (auto& p : processes_) {
    if (p->target.pid != t.pid || !p->target.other) continue;
    p->target = t;
    StackProcess note = ProcessLine(*p);
    writer_.AddProcess(note);
  }
}

StackProcess StackSampler::ProcessLine(const Process& p) {
  const pystack::PythonProcess& py = p.reader.process();
  StackProcess note;
  note.pid = p.target.pid;
  note.rank = p.target.rank;
  note.worker = p.target.worker;
  note.other = p.target.other;
  note.forked_from = p.target.forked_from;
  note.python = fmt::format("3.{}", py.layout.minor);
  note.binary = py.binary;
  note.cwd = CwdOf(p.target.pid);
  return note;
}

void StackSampler::Open(const StackTarget& t) {
  auto reader = pystack::StackReader::Open(t.pid);
  if (!reader.ok()) {
    Refused* r = RefusedOf(t.pid);
    if (r == nullptr) {
      if (refused_.size() >= kMaxRefused) refused_.clear();
      r = &refused_.emplace_back(Refused{t.pid, {}, 0, false, t, {}});
    }
    const std::string exe = ExeOf(t.pid);
    if (exe != r->exe) r->tries = 0;  // exec'd since: tries afresh
    r->exe = exe;
    ++r->tries;
    const Error& error = reader.error();
    const bool exists = phase::ProcessExists(t.pid);
    const bool not_python = error.code == ErrorCode::kNotFound && exists;
    // A child that is no Python (a shell, nvidia-smi) of a worker is no news.
    r->target = t;
    r->pending = not_python && !t.worker
                     ? fmt::format("pid {} ({}): not a Python process ({})", t.pid, CommOf(t.pid),
                                   exe.empty() ? "?" : exe)
                     : std::string();
    if (not_python && r->tries < kOpenTries) return;  // may be starting: once more later
    if (r->final) return;
    r->final = true;
    if (!exists) {
      // Gone before it was read: said for a rank's process (it ran the hooks: a Python).
      if (!t.worker && !t.other) Note(t, fmt::format("pid {}: exited before it was read", t.pid));
      return;
    }
    if (not_python) {
      if (!r->pending.empty()) Note(t, std::move(r->pending));
      r->pending.clear();
      return;
    }
    Note(t, error.message);
    return;
  }
  if (Refused* r = RefusedOf(t.pid)) {
    r->final = true;
    r->pending.clear();
  }
  processes_.push_back(
      std::make_unique<Process>(Process{t, std::move(reader).value(), ExeOf(t.pid)}));
  writer_.AddProcess(ProcessLine(*processes_.back()));
}

void StackSampler::ViewsOf(const pystack::ThreadStack& stack) {
  views_.clear();
  for (const pystack::Frame& f : stack.frames) {
    if (IsStallscopeFile(f.file) ||
        std::any_of(options_.own_files.begin(), options_.own_files.end(),
                    [&](const std::string& own) { return f.file.starts_with(own); })) {
      continue;  // stallscope's own hooks: never the job's line
    }
    views_.push_back({f.file, f.function, f.line.value_or(0)});
  }
}

void StackSampler::Write(Process& p, int64_t now, int32_t tid) {
  const bool written = writer_.AddSample(now, p.target.pid, tid, views_, [&](const FrameView& f) {
    auto text = sources_.Line(p.target.pid, std::string(f.file), f.line);
    return text ? CutUtf8(*text, kMaxTextBytes) : std::string();
  });
  std::lock_guard lock(mu_);
  ++(written ? totals_.samples : totals_.dropped);
}

bool StackSampler::SampleOne(Process& p, int64_t now, bool all) {
  if (now < p.not_before_ns) return true;
  Status sampled = OkStatus();
  if (all) {
    sampled = p.reader.SampleAllInto(options_.max_frames, kMaxThreadsPerSample, all_);
    // Cut thread lists are no real interpreter's: a failure, backed off like the others.
    if (sampled.ok() && all_.list_cut) {
      sampled =
          MakeError(ErrorCode::kNotFound, "pid {}: thread lists cut: {}", p.target.pid, all_.cut);
    }
  } else {
    sampled = p.reader.SampleInto(p.target.pid, options_.max_frames, stack_);
  }
  const int64_t torn_total = p.reader.stats().torn;
  const bool torn = torn_total > p.last_torn;
  p.last_torn = torn_total;
  if (!sampled.ok()) {
    {
      std::lock_guard lock(mu_);
      ++(torn ? totals_.torn : totals_.failed);
    }
    return Failed(p, sampled.error(), now);
  }
  p.failures = 0;
  if (!all) {
    ViewsOf(stack_);
    Write(p, now, p.target.pid);
    return true;
  }
  for (const pystack::ThreadStack& t : all_.threads) {
    if (t.error) {
      std::lock_guard lock(mu_);
      ++totals_.torn;
      continue;
    }
    if (!t.native_thread_id) continue;  // 3.8-3.10: a thread whose tid is not known
    ViewsOf(t);
    Write(p, now, *t.native_thread_id);
  }
  return true;
}

// An exec (issue 40 P05): the process runs another program now, read with the old layout and
// addresses every sample is torn. Found again: another Python is read afresh (a new process
// line), anything else is noted.
StackSampler::Exec StackSampler::CheckExec(Process& p) {
  const std::string exe = ExeOf(p.target.pid);
  auto found = pystack::FindPython(p.target.pid);
  if (found.ok()) {
    const pystack::PythonProcess& old = p.reader.process();
    if (found->runtime_address == old.runtime_address && found->binary == old.binary)
      return Exec::kNone;
    reads_of_gone_ += p.reader.stats().reads;
    p.reader = pystack::StackReader(std::move(found).value(),
                                    std::make_unique<pystack::ProcessMemory>(p.target.pid));
    StackProcess note = ProcessLine(p);
    note.exec = true;
    writer_.AddProcess(note);
    p.exe = exe;
    p.last_torn = 0;
    p.failures = 0;
    p.not_before_ns = 0;
    return Exec::kReopened;
  }
  if (!exe.empty() && exe != p.exe && found.error().code == ErrorCode::kNotFound &&
      phase::ProcessExists(p.target.pid)) {
    Note(p.target, fmt::format("pid {}: exec'd into {}: not a Python process; not sampled after",
                               p.target.pid, exe));
    return Exec::kNotPython;
  }
  return Exec::kNone;
}

// A process dropped while it lives is not opened again (the targets still name it), unless it
// execs.
bool StackSampler::Drop(Process& p) {
  if (refused_.size() >= kMaxRefused) refused_.clear();
  refused_.push_back(Refused{p.target.pid, ExeOf(p.target.pid), kOpenTries, true, p.target, {}});
  return false;
}

bool StackSampler::Failed(Process& p, const Error& error, int64_t now) {
  // kIo: torn, transient. kNotFound: no thread state yet, or gone. Anything else (no right to
  // read it, implausible offsets) does not change: the process is dropped.
  const ErrorCode code = error.code;
  if (code == ErrorCode::kNotFound && !phase::ProcessExists(p.target.pid)) return false;
  if (code != ErrorCode::kNotFound && code != ErrorCode::kIo) {
    // No right to read it any more (an exec of a setuid program), implausible offsets: said.
    Note(p.target, fmt::format("{}; not sampled after", error.message));
    return Drop(p);
  }
  if (p.failures++ == 0) p.first_failure_ns = now;
  if (p.failures == kBackOffAfter || p.failures == kDropAfter) {
    const Exec exec = CheckExec(p);
    if (exec == Exec::kReopened) return true;
    if (exec == Exec::kNotPython) return Drop(p);
  }
  if (p.failures >= kDropAfter) {
    std::string_view last = error.message;  // without the "pid N: " the note starts with
    if (const std::string pid = fmt::format("pid {}: ", p.target.pid); last.starts_with(pid))
      last.remove_prefix(pid.size());
    Note(p.target,
         fmt::format("pid {}: {} reads in a row failed over {:.1f} s (last: {}); not "
                     "sampled after",
                     p.target.pid, p.failures, NsToSeconds(now - p.first_failure_ns), last));
    return Drop(p);
  }
  if (p.failures >= kBackOffAfter) {
    const int hz = p.target.worker || p.target.other ? options_.worker_hz : options_.main_hz;
    const int64_t period = kNsPerSec / std::max(1, hz);
    const int shift = std::min(p.failures - kBackOffAfter + 1, 20);
    p.not_before_ns = now + std::min(period << shift, kMaxBackOffNs);
  }
  return true;
}

void StackSampler::Run() {
  SystemClock clock;
  const int64_t period = kNsPerSec / options_.main_hz;
  auto every = [&](int hz) { return hz > 0 ? std::max<int64_t>(1, options_.main_hz / hz) : 0; };
  const int64_t worker_every = every(options_.worker_hz);
  const int64_t all_every = every(options_.all_threads_hz);
  int64_t next = clock.MonotonicNs(), last_refresh = next - options_.refresh_ns, last_flush = next;
  int64_t last_targets = next - kTargetsEveryNs;
  for (int64_t tick = 0; !stop_.requested(); ++tick) {
    const int64_t now = clock.MonotonicNs();
    if (now - last_targets >= kTargetsEveryNs) {  // the session's list: cheap, and a short job
      const bool children = now - last_refresh >= options_.refresh_ns;  // is sampled at once
      Refresh(children);
      last_targets = now;
      if (children) last_refresh = now;
    }
    std::erase_if(processes_, [&](const std::unique_ptr<Process>& p) {
      const bool slow = p->target.worker || p->target.other;
      if (slow && (worker_every == 0 || tick % worker_every != 0)) return false;
      const bool all = all_every > 0 && !p->target.worker && tick % all_every == 0;
      if (SampleOne(*p, clock.MonotonicNs(), all)) return false;
      reads_of_gone_ += p->reader.stats().reads;  // the process is gone: forget it
      return true;
    });
    if (now - last_flush >= kFlushEveryNs) {
      if (auto st = writer_.Flush(); !st.ok() && write_status_.ok()) write_status_ = st;
      last_flush = now;
    }
    next += period;
    if (next < clock.MonotonicNs()) next = clock.MonotonicNs();  // late: no burst to catch up
    clock.SleepUntil(next, stop_);
  }
  for (Refused& r : refused_) {  // no Python when last tried, and no tries left to find out
    if (!r.final && !r.pending.empty()) Note(r.target, std::move(r.pending));
  }
  StackTotals end = totals();
  end.cpu_s = NsToSeconds(ReadClockNs(CLOCK_THREAD_CPUTIME_ID));
  end.reads = reads_of_gone_;
  for (const auto& p : processes_) end.reads += p->reader.stats().reads;
  writer_.AddTotals(end);
  if (auto st = writer_.Flush(); !st.ok() && write_status_.ok()) write_status_ = st;
  std::lock_guard lock(mu_);
  totals_ = end;
}

}  // namespace stallscope::stacks
