#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <prometheus/metric_family.h>

#include "analysis/live_stats.h"
#include "base/result.h"
#include "sample/sample.h"

namespace prometheus {
class Exposer;
}

namespace stallscope::exporter {

class TcpRelay;

/// Where `serve` / `--serve` listens: a numeric IPv4 or bracketed IPv6 address and a port.
struct ListenAddress {
  std::string host;  ///< "127.0.0.1", "0.0.0.0", "::1" (no brackets)
  uint16_t port = 0;
  /// "127.0.0.1:9400", "[::1]:9400": how messages name it and civetweb's listening_ports.
  [[nodiscard]] std::string ToString() const;
  /// True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104: only this machine can connect.
  [[nodiscard]] bool IsLoopback() const;
  /// True for 0.0.0.0 and ::: every interface of the machine.
  [[nodiscard]] bool IsAny() const;
};

/// The default: loopback only (issue 15: safe by default).
inline constexpr std::string_view kDefaultListen = "127.0.0.1:9400";

/// Parses "HOST:PORT" (HOST a numeric IPv4 address or "[IPv6]"; PORT 1..65535, or 0 for any
/// free port). kInvalidArgument with a one-line reason otherwise ("--listen" is not in it).
[[nodiscard]] Result<ListenAddress> ParseListenAddress(std::string_view text);

/// Issue 27 B18: the one-line warning for an address other machines can reach (anything but
/// loopback): the metrics (host name, GPUs, phase names) are served there with no
/// authentication. nullopt for a loopback address. Names `address` and says what to do.
[[nodiscard]] std::optional<std::string> ExposureWarning(const ListenAddress& address);

/// Whether `address` can be listened on now: a socket of ours binds it as the server would
/// (SO_REUSEADDR; IPv6 only for an IPv6 address) and is closed at once. kIo "cannot listen on
/// ADDR: <ListenFailure>" when it cannot. Issue 27 B19: `run --serve` checks this before it makes
/// the run directory or starts the job. A check, not a reservation: the port may still be
/// taken before the server binds it (Exporter::Start then fails the same way).
[[nodiscard]] Status CheckListen(const ListenAddress& address);

/// Everything one scrape shows: the latest sample and the job's live statistics.
struct Snapshot {
  sample::RecordingHeader header;  ///< hostname and the GPUs' static facts
  bool have_sample = false;
  sample::Sample sample;
  std::vector<analysis::ProcessTotals> processes;  ///< processes with a phase ring (ranks)
  /// The busiest process's recent window (steps/s, phase shares), for the suspicion; empty
  /// before a step was made in it.
  std::optional<analysis::LiveWindow> window;
};

/// Maps a snapshot to metric families: GPU metrics named and labelled as NVIDIA dcgm-exporter
/// (default-counters.csv; GPM as its DCGM_FI_PROF_* profiling fields, ratios 0..1 and bytes/s),
/// the rest `stallscope_*` (docs/commands/serve.md lists them all). Pure: the same snapshot gives
/// the same families. Absent metrics are left out, never exported as 0.
[[nodiscard]] std::vector<prometheus::MetricFamily> MapMetrics(const Snapshot& snapshot);

/// Limits of the HTTP side (civetweb options): a slow or hostile client holds at most one
/// worker thread for at most request_timeout_ms, and never the sampling thread.
struct ServerLimits {
  int num_threads = 4;
  int request_timeout_ms = 5000;
  int max_request_size = 16 * 1024;  ///< bytes of request line + headers
};

/// Fills `snapshot` (reused, so steady state does not allocate) from the running session.
using SnapshotSource = std::function<void(Snapshot& snapshot)>;

/// The HTTP exporter: GET /metrics. A publisher thread refreshes a snapshot from `source` every
/// `period_ns` and swaps it in under a short lock; a scrape copies the published snapshot under
/// that lock and maps it outside it. So the sampling thread never waits on the HTTP side: it
/// only meets the publisher at the session's own short lock (CopyLatest).
class Exporter {
 public:
  /// Listens on `address` and starts the publisher. kIo "cannot listen on ADDR: reason" when
  /// it cannot, the reason from the errno of a bind (tcp_relay.h ListenFailure: "the port is in
  /// use", "permission denied (...)", "the address is not on this machine"). An IPv6 address,
  /// when the linked civetweb has no IPv6 (Debian's), is served through a TcpRelay to civetweb
  /// on 127.0.0.1 (a free port).
  [[nodiscard]] static Result<std::unique_ptr<Exporter>> Start(const ListenAddress& address,
                                                               SnapshotSource source,
                                                               int64_t period_ns,
                                                               const ServerLimits& limits = {});
  ~Exporter();  ///< Stops the publisher, then the server.
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  /// The port actually listened on (the given one, or the chosen one for port 0).
  [[nodiscard]] uint16_t port() const { return port_; }
  /// Snapshots published so far. Thread-safe.
  [[nodiscard]] int64_t published() const;

 private:
  class Collector;
  Exporter() = default;
  void Publish();

  SnapshotSource source_;
  int64_t period_ns_ = 0;
  uint16_t port_ = 0;
  Snapshot scratch_;  ///< Publish's, reused (Start's thread first, then the publisher only)
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<TcpRelay> relay_;  ///< the IPv6 front, when civetweb has no IPv6
  std::thread publisher_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

/// The recent-window keeper for SnapshotSource implementations: feeds it each process-totals
/// reading with its monotonic time, gives the busiest process's window over about `span_ns`.
class WindowTracker {
 public:
  explicit WindowTracker(int64_t span_ns) : span_ns_(span_ns) {}
  /// The window of the process with the most steps between the oldest kept reading no younger
  /// than span_ns and this one (or the oldest one kept).
  std::optional<analysis::LiveWindow> Update(int64_t mono_ns,
                                             const std::vector<analysis::ProcessTotals>& now);

 private:
  struct Reading {
    int64_t mono_ns;
    analysis::ProcessTotals totals;
  };
  int64_t span_ns_;
  std::vector<Reading> readings_;  ///< of the busiest process, oldest first; bounded
};

}  // namespace stallscope::exporter
