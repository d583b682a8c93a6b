#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "analysis/live_stats.h"
#include "base/clock.h"
#include "base/result.h"
#include "gpu/gpu_backend.h"
#include "host/host.h"
#include "monitor/child_process.h"
#include "phase/event_log.h"
#include "phase/phase_reader.h"
#include "sample/recording.h"
#include "sample/sample.h"
#include "sample/sampler.h"

namespace stallscope::monitor {

/// Parses a sampling interval ("100ms", "1s"); the error message is what every subcommand
/// prints after its name: "interval 10ms is below the 50ms minimum", or ParseDurationNs's.
[[nodiscard]] Result<int64_t> ParseIntervalNs(std::string_view text);

/// What a session does when a recording write fails (the disk is full, the pipe closed, ...).
enum class OnWriteError {
  kStop,      ///< `record`: the recording is the product; stop sampling, the command fails.
  kContinue,  ///< `run`: the user's job goes on; stop recording, keep sampling and say so.
};

struct SessionOptions {
  int64_t interval_ns = kNsPerSec;
  OnWriteError on_write_error = OnWriteError::kStop;
  /// Called once, on the sampling thread, with the first write error ("<file>: write failed:
  /// ..."); empty = no callback (the caller reads write_error() at the end).
  std::function<void(const Error&)> on_first_write_error;
  /// Keep a copy of each sample for CopyLatest (status lines, an exporter). `record` shows no
  /// live status, so it skips the copy (the per-sample cost is the sampler's budget).
  bool keep_latest = true;
  int64_t max_samples = 0;  ///< > 0: the sampling thread stops after this many (tests)
};

/// One monitoring session: sampler (+ its thread), followed process tree, child process,
/// recording, latest sample and live phase statistics. Set up in this order: follow a tree
/// (StartCommand or FollowPid, optional), OpenRecording (optional), WatchPhases (optional),
/// StartSampling; then Finish. Not copyable; the setup calls and Finish belong to one thread;
/// the readers marked thread-safe may be called from any thread at any time.
///
/// Memory does not grow with the run's length (hours of samples, 100k steps): a sample is taken
/// into reused buffers and written out (the recording is on disk; only the latest sample is
/// kept), the process tracker keeps the processes of the last sample only, the phase rings of
/// gone processes are closed and forgotten (RingDirWatcher, EventLogWriter::Forget,
/// LiveStats::Forget), and the live statistics are running sums. Whatever a report needs from the
/// whole run is read afterwards from the run directory (recording.jsonl, events.bin).
/// session_mem_test.cc checks it: 86,400 samples of 8 GPUs, 100k steps.
class Session {
 public:
  /// `gpus` and `clock` must outlive the session; `header` is written at OpenRecording, with
  /// the command and root pid filled in by StartCommand/FollowPid.
  Session(gpu::GpuBackend& gpus, host::ProcFs fs, Clock& clock, sample::RecordingHeader header,
          SessionOptions options);
  ~Session();  ///< Stops the sampling thread (the child, if any, is left alone).
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Starts `argv` (ChildProcess::Start) and follows its process tree.
  [[nodiscard]] Status StartCommand(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& extra_env = {},
                                    const std::string& output = {});
  /// Follows the tree of a running process; kNotFound "no process with pid N" when it is gone.
  [[nodiscard]] Status FollowPid(int32_t pid);
  /// The child started by StartCommand, else null.
  ChildProcess* child() { return child_ ? &*child_ : nullptr; }
  /// The header as it will be (or was) written.
  const sample::RecordingHeader& header() const { return header_; }

  /// Opens the recording (path "-" = stdout) and writes its header.
  [[nodiscard]] Status OpenRecording(const std::string& path, sample::RecordingFormat format);
  /// Opens `<run_dir>/events.bin` (phase::EventLogWriter) and watches `<run_dir>/phases` for
  /// the job's rings; DrainPhases then feeds both the event log and the live statistics.
  [[nodiscard]] Status WatchPhases(const std::string& run_dir);
  /// Reads what the rings hold now (call periodically, and once with kFinal after the job
  /// ended) and flushes the event log. Returns warnings for people, one line each.
  std::vector<std::string> DrainPhases(phase::DrainMode mode);

  /// The phase rings open at the last DrainPhases: one per live process of the job that runs the
  /// hooks (pid, rank, forked_from: a DataLoader worker names its parent). Thread-safe.
  [[nodiscard]] std::vector<phase::RingInfo> LiveRings() const;

  /// Starts the sampling thread.
  void StartSampling();
  /// Takes one sample on the calling thread (sessions without a sampling thread: `top`).
  const sample::Sample& SampleNow();
  /// Asks the sampling thread to stop (it also stops by itself on a write error under kStop).
  void RequestStop() { stop_.Request(); }
  /// Whether sampling was asked to stop or stopped by itself. Thread-safe.
  bool stop_requested() const { return stop_.requested(); }
  /// Stops and joins the sampling thread, then writes the recording's trailer (exit code of the
  /// followed command, if any). Returns the first write error of the whole session, if any.
  [[nodiscard]] Status Finish(std::optional<int> exit_code);
  /// When Finish stopped sampling (the trailer's time), CLOCK_MONOTONIC ns; 0 before.
  int64_t end_mono_ns() const { return end_mono_ns_; }

  /// The first write error (recording or trailer), if any. Thread-safe.
  [[nodiscard]] std::optional<Error> write_error() const;
  /// Samples written to the recording so far. Thread-safe.
  [[nodiscard]] int64_t samples_written() const;
  /// Copies the latest sample into `out`; false when none was taken yet. Thread-safe.
  bool CopyLatest(sample::Sample& out) const;

  /// Live phase statistics (analysis::LiveStats), under the session's lock. Thread-safe.
  [[nodiscard]] std::optional<analysis::LiveWindow> TakeLiveWindow(int64_t window_ns);
  [[nodiscard]] std::optional<analysis::LiveWindow> TakeLiveInterim(int64_t every_steps,
                                                                    int64_t since_ns);
  [[nodiscard]] std::optional<analysis::LiveWindow> LiveTotals(int64_t since_start_ns) const;
  /// Keep every process's totals from now on (analysis::LiveStats::TrackTotals): call before
  /// the first phase records are drained, when something will read LiveProcessTotals.
  void TrackProcessTotals();
  /// Every process's totals (analysis::LiveStats::AllTotals), under the session's lock.
  /// Thread-safe; restarts nothing the other live readers see. Empty without TrackProcessTotals.
  [[nodiscard]] std::vector<analysis::ProcessTotals> LiveProcessTotals();

 private:
  void EnsureSampler();
  bool OnSample(const sample::Sample& s);
  /// Records `error` if it is the first; returns whether sampling goes on.
  bool NoteWriteError(Error error);

  gpu::GpuBackend& gpus_;
  host::ProcFs fs_;
  Clock& clock_;
  sample::RecordingHeader header_;
  SessionOptions options_;

  std::optional<ChildProcess> child_;
  host::HostSampler host_;
  std::optional<host::ProcessTracker> tracker_;
  std::unique_ptr<sample::Sampler> sampler_;
  std::optional<sample::RecordingWriter> writer_;  ///< used by the sampling thread only
  bool recording_ = false;                         ///< writer_ still takes lines
  std::vector<bool> gpu_lost_;
  sample::Sample scratch_;  ///< SampleNow's
  int64_t end_mono_ns_ = 0;

  std::optional<phase::EventLogWriter> events_;
  std::optional<phase::RingDirWatcher> watcher_;
  bool events_failed_ = false;  ///< a flush of the event log failed (said once)

  StopFlag stop_;
  std::thread thread_;

  mutable std::mutex mu_;  // guards the members below
  /// Makes `s` the live view, the slow tiers' last values carried into it (under mu_).
  void PublishLocked(const sample::Sample& s);

  sample::Sample latest_;    ///< the live view: the newest sample, slow tiers carried over
  sample::Sample previous_;  ///< the view before it (storage reused)
  bool have_latest_ = false;
  std::optional<Error> write_error_;
  int64_t samples_written_ = 0;
  analysis::LiveStats live_;
  std::vector<phase::RingInfo> live_rings_;
};

}  // namespace stallscope::monitor
