#include "stacks/stack_sampler.h"

#include <algorithm>
#include <filesystem>

#include "base/file_read.h"
#include "base/units.h"
#include "host/proc_parse.h"
#include "phase/phase_reader.h"
#include "pystack/stack_reader.h"

namespace stallscope::stacks {
namespace {

constexpr size_t kMaxTextBytes = 200;
constexpr int64_t kFlushEveryNs = kNsPerSec;
constexpr int64_t kTargetsEveryNs = 100'000'000;  // `run` drains the rings every 100 ms

std::string CwdOf(int32_t pid) {
  std::error_code ec;
  auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
  return ec ? std::string() : cwd.string();
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
    if (t.worker) continue;
    for (int32_t child : ChildrenOf(t.pid)) {
      out.push_back({child, t.rank, true, t.pid});
      for (int32_t grandchild : ChildrenOf(child)) out.push_back({grandchild, t.rank, true, child});
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
  int64_t last_torn = 0;
};

Result<std::unique_ptr<StackSampler>> StackSampler::Start(const std::string& path,
                                                          StackSamplerOptions options,
                                                          Targets targets) {
  options.main_hz = std::clamp(options.main_hz, 1, 1000);
  options.worker_hz = std::clamp(options.worker_hz, 0, options.main_hz);
  TRY(StackLogWriter writer, StackLogWriter::Open(path, options.main_hz, options.worker_hz));
  std::unique_ptr<StackSampler> sampler(
      new StackSampler(std::move(writer), options, std::move(targets)));
  sampler->thread_ = std::thread([s = sampler.get()] { s->Run(); });
  return sampler;
}

StackSampler::StackSampler(StackLogWriter writer, StackSamplerOptions options, Targets targets)
    : writer_(std::move(writer)), options_(options), targets_(std::move(targets)) {}

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

void StackSampler::Refresh(bool children) {
  std::vector<StackTarget> targets = targets_();
  // A rank not seen before has its children listed at once; the others every refresh_ns.
  for (const StackTarget& t : targets) {
    children |= !t.worker && std::none_of(processes_.begin(), processes_.end(), [&](const auto& p) {
      return p->target.pid == t.pid;
    }) && std::find(refused_.begin(), refused_.end(), t.pid) == refused_.end();
  }
  for (const StackTarget& t : children ? WithChildren(targets) : targets) {
    const bool known = std::any_of(processes_.begin(), processes_.end(),
                                   [&](const auto& p) { return p->target.pid == t.pid; });
    if (known || std::find(refused_.begin(), refused_.end(), t.pid) != refused_.end()) continue;
    StackProcess note;
    note.pid = t.pid;
    note.rank = t.rank;
    note.worker = t.worker;
    note.forked_from = t.forked_from;
    auto reader = pystack::StackReader::Open(t.pid);
    if (!reader.ok()) {
      refused_.push_back(t.pid);
      note.error = reader.error().message;
      // A child that is no Python (a shell, nvidia-smi) is no news; a process we may not read is.
      const bool say = !t.worker || reader.error().code != ErrorCode::kNotFound;
      if (say && phase::ProcessExists(t.pid)) writer_.AddProcess(note);
      continue;
    }
    const pystack::PythonProcess& py = reader->process();
    note.python = fmt::format("3.{}", py.layout.minor);
    note.binary = py.binary;
    note.cwd = CwdOf(t.pid);
    writer_.AddProcess(note);
    processes_.push_back(std::make_unique<Process>(Process{t, std::move(reader).value(), 0}));
  }
}

bool StackSampler::SampleOne(Process& p, int64_t now) {
  Status sampled = p.reader.SampleInto(p.target.pid, options_.max_frames, stack_);
  const int64_t torn_total = p.reader.stats().torn;
  const bool torn = torn_total > p.last_torn;
  p.last_torn = torn_total;
  if (!sampled.ok()) {
    // kIo: torn, transient. kNotFound: no thread state yet, or gone. Anything else (no right to
    // read it, implausible offsets) does not change: the process is dropped.
    const ErrorCode code = sampled.error().code;
    const bool gone = (code == ErrorCode::kNotFound && !phase::ProcessExists(p.target.pid)) ||
                      (code != ErrorCode::kNotFound && code != ErrorCode::kIo);
    std::lock_guard lock(mu_);
    if (torn) {
      ++totals_.torn;
    } else if (!gone) {
      ++totals_.failed;
    }
    return !gone;
  }
  views_.clear();
  for (const pystack::Frame& f : stack_.frames)
    views_.push_back({f.file, f.function, f.line.value_or(0)});
  const bool written =
      writer_.AddSample(now, p.target.pid, p.target.pid, views_, [&](const FrameView& f) {
        auto text = sources_.Line(p.target.pid, std::string(f.file), f.line);
        return text ? CutUtf8(*text, kMaxTextBytes) : std::string();
      });
  std::lock_guard lock(mu_);
  ++(written ? totals_.samples : totals_.dropped);
  return true;
}

void StackSampler::Run() {
  SystemClock clock;
  const int64_t period = kNsPerSec / options_.main_hz;
  const int64_t worker_every =
      options_.worker_hz > 0 ? std::max<int64_t>(1, options_.main_hz / options_.worker_hz) : 0;
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
      if (p->target.worker && (worker_every == 0 || tick % worker_every != 0)) return false;
      if (SampleOne(*p, clock.MonotonicNs())) return false;
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
