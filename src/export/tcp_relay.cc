#include "export/tcp_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

#include <fmt/format.h>

namespace stallscope::exporter {
namespace {

constexpr size_t kBufferBytes = 16 * 1024;
// How often the loop wakes without traffic to close idle connections.
constexpr int kTickMs = 250;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

std::string ListenFailure(int err, uint16_t port) {
  switch (err) {
    case EADDRINUSE:
      return "the port is in use";
    case EACCES:
    case EPERM:
      return port != 0 && port < 1024
                 ? fmt::format("permission denied (port {} needs root or CAP_NET_BIND_SERVICE)",
                               port)
                 : "permission denied";
    case EADDRNOTAVAIL:
      return "the address is not on this machine";
    default:
      return std::strerror(err);
  }
}

/// One forwarded connection: bytes from the client wait in `up` until the backend takes them,
/// bytes from the backend in `down` until the client does. A buffer is refilled only once empty.
struct TcpRelay::Conn {
  int client = -1;
  int backend = -1;
  bool connecting = true;
  bool client_eof = false;
  bool up_shut = false;  // the client's end of data was passed on (shutdown SHUT_WR)
  bool backend_eof = false;
  size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
  int64_t last_ms = 0;
  std::array<char, kBufferBytes> up{};
  std::array<char, kBufferBytes> down{};

  ~Conn() {
    if (client >= 0) ::close(client);
    if (backend >= 0) ::close(backend);
  }
  short ClientEvents() const {
    return static_cast<short>((!client_eof && up_len == 0 ? POLLIN : 0) |
                              (down_off < down_len ? POLLOUT : 0));
  }
  short BackendEvents() const {
    if (connecting) return POLLOUT;
    return static_cast<short>((!backend_eof && down_len == 0 ? POLLIN : 0) |
                              (up_off < up_len ? POLLOUT : 0));
  }
  /// Moves what it can; false when the connection is over (closed, failed or done).
  bool Step(short client_revents, short backend_revents, int64_t now_ms);
};

bool TcpRelay::Conn::Step(short client_revents, short backend_revents, int64_t now_ms) {
  if (((client_revents | backend_revents) & POLLNVAL) != 0) return false;
  if (connecting) {
    if ((backend_revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return true;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(backend, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return false;
    connecting = false;
    backend_revents = 0;  // poll again with the real interest
  }
  auto receive = [&](int fd, short revents, char* buf, size_t& len, size_t& off, bool& eof) {
    if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0 || eof || len != 0) return true;
    const ssize_t n = ::recv(fd, buf, kBufferBytes, 0);
    if (n < 0) return WouldBlock(errno);
    if (n == 0) {
      eof = true;
    } else {
      len = static_cast<size_t>(n);
      off = 0;
    }
    last_ms = now_ms;
    return true;
  };
  auto send = [&](int fd, short revents, const char* buf, size_t& len, size_t& off) {
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0 || off >= len) return true;
    const ssize_t n = ::send(fd, buf + off, len - off, MSG_NOSIGNAL);
    if (n < 0) return WouldBlock(errno);
    off += static_cast<size_t>(n);
    if (off == len) len = off = 0;
    last_ms = now_ms;
    return true;
  };
  if (!receive(client, client_revents, up.data(), up_len, up_off, client_eof)) return false;
  if (!receive(backend, backend_revents, down.data(), down_len, down_off, backend_eof))
    return false;
  // Try to pass on at once what just came (the peer is usually ready).
  if (!send(backend, static_cast<short>(backend_revents | POLLOUT), up.data(), up_len, up_off))
    return false;
  if (!send(client, static_cast<short>(client_revents | POLLOUT), down.data(), down_len, down_off))
    return false;
  if (client_eof && up_len == 0 && !up_shut) {
    ::shutdown(backend, SHUT_WR);
    up_shut = true;
  }
  // The server closed and everything it said was delivered: done (HTTP with keep-alive off).
  return !(backend_eof && down_len == 0);
}

Result<std::unique_ptr<TcpRelay>> TcpRelay::Listen(const std::string& host, uint16_t port,
                                                   Limits limits) {
  const std::string what = fmt::format("[{}]:{}", host, port);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(port);
  if (inet_pton(AF_INET6, host.c_str(), &addr.sin6_addr) != 1)
    return MakeError(ErrorCode::kInvalidArgument, "cannot listen on {}: not an IPv6 address", what);
  std::unique_ptr<TcpRelay> r(new TcpRelay());
  r->limits_ = limits;
  r->listener_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (r->listener_ < 0 ||
      ::setsockopt(r->listener_, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0 ||
      ::setsockopt(r->listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(r->listener_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(r->listener_, SOMAXCONN) != 0) {
    const int err = errno;
    return MakeError(ErrorCode::kIo, "cannot listen on {}: {}", what, ListenFailure(err, port));
  }
  socklen_t len = sizeof addr;
  if (::getsockname(r->listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    r->port_ = ntohs(addr.sin6_port);
  return r;
}

Status TcpRelay::Start(uint16_t backend_port) {
  backend_.sin_family = AF_INET;
  backend_.sin_port = htons(backend_port);
  backend_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return MakeError(ErrorCode::kIo, "IPv6 relay: cannot make a pipe: {}", std::strerror(errno));
  stop_read_ = fds[0];
  stop_write_ = fds[1];
  thread_ = std::thread([this] {
    try {
      Loop();
    } catch (const std::exception&) {
      // Out of memory in the relay: it stops accepting; the exporter's own server goes on.
    }
  });
  return OkStatus();
}

TcpRelay::~TcpRelay() {
  if (thread_.joinable()) {
    const char byte = 0;
    [[maybe_unused]] const ssize_t n = ::write(stop_write_, &byte, 1);
    thread_.join();
  }
  for (int fd : {listener_, stop_read_, stop_write_}) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpRelay::Loop() {
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<pollfd> fds;
  int64_t accept_paused_until_ms = 0;  // out of file descriptors: do not spin on the listener
  for (;;) {
    const int64_t now_ms = NowMs();
    fds.clear();
    fds.push_back({stop_read_, POLLIN, 0});
    fds.push_back({now_ms >= accept_paused_until_ms ? listener_ : -1, POLLIN, 0});
    for (const auto& c : conns) {
      // An fd with nothing wanted is left out (-1): a hung-up peer would wake poll at once,
      // again and again, while the other side is slow; the idle timeout still applies.
      const short client_events = c->ClientEvents(), backend_events = c->BackendEvents();
      fds.push_back({client_events != 0 ? c->client : -1, client_events, 0});
      fds.push_back({backend_events != 0 ? c->backend : -1, backend_events, 0});
    }
    if (::poll(fds.data(), fds.size(), kTickMs) < 0 && errno != EINTR) return;
    if ((fds[0].revents & POLLIN) != 0) return;
    const int64_t after_ms = NowMs();
    // Each connection first: `conns` grows below, and fds[2 + 2i] belongs to conns[i].
    size_t kept = 0;
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = *conns[i];
      const bool alive = c.Step(fds[2 + 2 * i].revents, fds[3 + 2 * i].revents, after_ms) &&
                         after_ms - c.last_ms < limits_.idle_timeout_ms;
      if (alive) conns[kept++] = std::move(conns[i]);
    }
    conns.resize(kept);
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (;;) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          accept_paused_until_ms = after_ms + 100;
        break;
      }
      if (conns.size() >= static_cast<size_t>(limits_.max_connections)) {
        ::close(client);  // as civetweb's queue would refuse it: the client sees a reset
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->client = client;
      c->last_ms = after_ms;
      c->backend = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c->backend < 0) continue;  // ~Conn closes the client
      if (::connect(c->backend, reinterpret_cast<const sockaddr*>(&backend_), sizeof backend_) ==
          0) {
        c->connecting = false;
      } else if (errno != EINPROGRESS) {
        continue;
      }
      conns.push_back(std::move(c));
    }
  }
}

}  // namespace stallscope::exporter
