#pragma once
// The exporter's IPv6 front: Debian's civetweb 1.15 is built without USE_IPV6
// (mg_check_feature(MG_FEATURES_IPV6) == 0, and "[::1]:9400" is an "invalid port spec" to it),
// so `--listen [::1]:PORT` listens here and forwards to civetweb on 127.0.0.1 (issue 27 B13).

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/result.h"

namespace stallscope::exporter {

/// Why binding `what` (e.g. "[::1]:9400") failed with `err` (an errno), in words: "the port is
/// in use", "permission denied (port 80 needs root or CAP_NET_BIND_SERVICE)", "the address is
/// not on this machine", else strerror. The one wording for every listen failure (issue 27 B21:
/// EACCES was reported as "port in use").
[[nodiscard]] std::string ListenFailure(int err, uint16_t port);

/// Accepts TCP connections on an IPv6 address and forwards each, byte for byte, to a server on
/// 127.0.0.1. One thread and poll(2); 16 KiB buffered per direction of a connection; at most
/// `max_connections` at a time (one more is closed at once) and each closed after
/// `idle_timeout_ms` without a byte moving, so a hostile client holds no more than it would
/// hold of civetweb behind it. Not copyable; the destructor stops the thread and closes all.
class TcpRelay {
 public:
  struct Limits {
    int max_connections = 16;
    int idle_timeout_ms = 5000;
  };

  /// Binds and listens on [`host`]:`port` (a numeric IPv6 address without brackets, IPv6
  /// only; port 0 = any free port). kIo "cannot listen on [HOST]:PORT: <ListenFailure>".
  [[nodiscard]] static Result<std::unique_ptr<TcpRelay>> Listen(const std::string& host,
                                                                uint16_t port, Limits limits);
  /// Starts forwarding each connection to 127.0.0.1:`backend_port`. kIo when the thread or its
  /// stop pipe cannot be made.
  [[nodiscard]] Status Start(uint16_t backend_port);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  /// The port listened on (the chosen one for port 0).
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  struct Conn;
  TcpRelay() = default;
  void Loop();

  Limits limits_;
  int listener_ = -1;
  int stop_read_ = -1;
  int stop_write_ = -1;
  uint16_t port_ = 0;
  sockaddr_in backend_{};
  std::thread thread_;
};

}  // namespace stallscope::exporter
