#include "monitor/session.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::monitor {

Result<int64_t> ParseIntervalNs(std::string_view text) {
  TRY(int64_t interval_ns, ParseDurationNs(text));
  if (interval_ns < sample::kMinIntervalNs) {
    return MakeError(ErrorCode::kInvalidArgument, "interval {} is below the 50ms minimum", text);
  }
  return interval_ns;
}

Session::Session(gpu::GpuBackend& gpus, host::ProcFs fs, Clock& clock,
                 sample::RecordingHeader header, SessionOptions options)
    : gpus_(gpus),
      fs_(std::move(fs)),
      clock_(clock),
      header_(std::move(header)),
      options_(std::move(options)),
      host_(fs_),
      gpu_lost_(gpus.DeviceCount(), false) {}

Session::~Session() {
  stop_.Request();
  if (thread_.joinable()) thread_.join();
}

Status Session::StartCommand(const std::vector<std::string>& argv,
                             const std::vector<std::string>& extra_env, const std::string& output) {
  TRY(ChildProcess started, ChildProcess::Start(argv, extra_env, output));
  child_.emplace(std::move(started));
  header_.command = argv;
  header_.root_pid = child_->pid();
  tracker_.emplace(fs_, child_->pid());
  return OkStatus();
}

Status Session::FollowPid(int32_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
    return MakeError(ErrorCode::kNotFound, "no process with pid {}", pid);
  }
  header_.root_pid = pid;
  tracker_.emplace(fs_, pid);
  return OkStatus();
}

Status Session::OpenRecording(const std::string& path, sample::RecordingFormat format) {
  TRY(sample::RecordingWriter writer, sample::RecordingWriter::Open(path, header_, format));
  writer_.emplace(std::move(writer));
  recording_ = true;
  return OkStatus();
}

Status Session::WatchPhases(const std::string& run_dir) {
  TRY(phase::EventLogWriter events, phase::EventLogWriter::Open(run_dir));
  events_.emplace(std::move(events));
  watcher_.emplace(run_dir + "/phases");
  return OkStatus();
}

std::vector<std::string> Session::DrainPhases(phase::DrainMode mode) {
  std::vector<std::string> warnings;
  if (!watcher_) return warnings;
  auto result = watcher_->Poll(
      [&](phase::PhaseReader& ring, const phase::PhaseRecord& r) {
        events_->Add(ring, r);
        std::lock_guard lock(mu_);
        live_.Add(ring, r);
      },
      mode,
      [&](phase::PhaseReader& ring) {
        // The process is gone and its ring was read to the end: nothing of it stays in memory
        // (its records are in events.bin, which the report reads).
        events_->Forget(ring.info().pid);
        std::lock_guard lock(mu_);
        live_.Forget(ring.info().pid);
      });
  for (const auto& e : result.new_errors) warnings.push_back(e.message);
  {
    std::lock_guard lock(mu_);
    live_rings_.clear();
    for (const auto& ring : watcher_->rings()) live_rings_.push_back(ring->info());
  }
  // The event log is the report's input: a failed flush is said once, and draining goes on
  // (the live statistics and the job do not depend on it).
  if (auto st = events_->Flush(); !st.ok() && !events_failed_) {
    events_failed_ = true;
    warnings.push_back(st.error().message);
  }
  return warnings;
}

std::vector<phase::RingInfo> Session::LiveRings() const {
  std::lock_guard lock(mu_);
  return live_rings_;
}

void Session::EnsureSampler() {
  if (!sampler_) {
    sampler_ =
        std::make_unique<sample::Sampler>(gpus_, host_, tracker_ ? &*tracker_ : nullptr, clock_);
    if (header_.poll.tick_ns > 0) sampler_->SetPlan(header_.poll);
    if (header_.host_slow_ns > 0) host_.SetSlowPeriod(header_.host_slow_ns);
  }
}

void Session::StartSampling() {
  EnsureSampler();
  thread_ = std::thread([this] {
    sampler_->Run(
        options_.interval_ns, stop_, [this](const sample::Sample& s) { return OnSample(s); },
        options_.max_samples);
    stop_.Request();
  });
}

const sample::Sample& Session::SampleNow() {
  EnsureSampler();
  sampler_->SampleOnce(scratch_);
  std::lock_guard lock(mu_);
  PublishLocked(scratch_);
  return latest_;
}

void Session::PublishLocked(const sample::Sample& s) {
  // Copy-assignment reuses the vectors' storage: no allocation in steady state.
  std::swap(latest_, previous_);
  latest_ = s;
  if (have_latest_) {
    const size_t n = std::min(latest_.gpus.size(), previous_.gpus.size());
    for (size_t i = 0; i < n; ++i) gpu::CarrySlowFields(previous_.gpus[i], latest_.gpus[i]);
    host::CarrySlowFields(previous_.host, latest_.host);
  }
  have_latest_ = true;
}

bool Session::OnSample(const sample::Sample& s) {
  bool go_on = true;
  if (recording_) {
    for (size_t i = 0; i < s.gpus.size() && i < gpu_lost_.size(); ++i) {
      if (!s.gpus[i].lost || gpu_lost_[i]) continue;
      gpu_lost_[i] = true;
      auto st =
          writer_->AppendEvent("gpu_lost", s.mono_ns, fmt::format("GPU {} stopped answering", i));
      if (!st.ok()) go_on = NoteWriteError(st.take_error());
    }
  }
  if (recording_) {
    if (auto st = writer_->Append(s); !st.ok()) go_on = NoteWriteError(st.take_error());
  }
  std::lock_guard lock(mu_);
  if (options_.keep_latest) PublishLocked(s);
  if (writer_) samples_written_ = writer_->samples_written();
  return go_on;
}

bool Session::NoteWriteError(Error error) {
  // Lines are whole or absent (one write(2) each), so the recording stays readable up to here;
  // nothing more is written to it: a retry after ENOSPC could succeed and leave a gap unsaid.
  recording_ = false;
  bool first = false;
  {
    std::lock_guard lock(mu_);
    if (!write_error_) {
      write_error_ = error;
      first = true;
    }
  }
  if (first && options_.on_first_write_error) options_.on_first_write_error(error);
  return options_.on_write_error == OnWriteError::kContinue;
}

Status Session::Finish(std::optional<int> exit_code) {
  stop_.Request();
  if (thread_.joinable()) thread_.join();
  end_mono_ns_ = clock_.MonotonicNs();
  if (writer_) {
    // The trailer goes out even after a failed sample line under kStop (the file then says
    // where it ended); under kContinue a broken recording gets no trailer, as it got no lines.
    bool write_trailer = recording_ || options_.on_write_error == OnWriteError::kStop;
    if (write_trailer) {
      if (auto st = writer_->Finish(end_mono_ns_, exit_code); !st.ok()) {
        NoteWriteError(st.take_error());
      }
    }
    recording_ = false;
  }
  if (auto error = write_error()) return *error;
  return OkStatus();
}

std::optional<Error> Session::write_error() const {
  std::lock_guard lock(mu_);
  return write_error_;
}

int64_t Session::samples_written() const {
  std::lock_guard lock(mu_);
  return samples_written_;
}

bool Session::CopyLatest(sample::Sample& out) const {
  std::lock_guard lock(mu_);
  if (!have_latest_) return false;
  out = latest_;
  return true;
}

std::optional<analysis::LiveWindow> Session::TakeLiveWindow(int64_t window_ns) {
  std::lock_guard lock(mu_);
  return live_.TakeWindow(window_ns);
}

std::optional<analysis::LiveWindow> Session::TakeLiveInterim(int64_t every_steps,
                                                             int64_t since_ns) {
  std::lock_guard lock(mu_);
  return live_.TakeInterim(every_steps, since_ns);
}

std::optional<analysis::LiveWindow> Session::LiveTotals(int64_t since_start_ns) const {
  std::lock_guard lock(mu_);
  return live_.Totals(since_start_ns);
}

void Session::TrackProcessTotals() {
  std::lock_guard lock(mu_);
  live_.TrackTotals();
}

std::vector<analysis::ProcessTotals> Session::LiveProcessTotals() {
  std::lock_guard lock(mu_);
  return live_.AllTotals();
}

}  // namespace stallscope::monitor
