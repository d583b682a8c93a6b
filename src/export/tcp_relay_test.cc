#include "export/tcp_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace stallscope::exporter {
namespace {

/// True when this machine can bind [::1] (some CI containers have no IPv6).
bool HaveIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

/// A one-shot echo-ish server on 127.0.0.1: reads until the client's end of data, answers
/// "got:" + what it read, closes.
class OneShotServer {
 public:
  OneShotServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char buf[4096];
      for (ssize_t n; (n = read(c, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
      const std::string answer = "got:" + got;
      // MSG_NOSIGNAL: the relay may have closed this connection (the idle test).
      [[maybe_unused]] ssize_t sent = send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      close(c);
    });
  }
  ~OneShotServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

int ConnectV6(uint16_t port) {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  a.sin6_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  return fd;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Issue 27 B13: `--listen [::1]:PORT` is served through the relay (Debian's civetweb has no
// IPv6). Bytes both ways, a half-close passed on, larger than one 16 KiB buffer.
TEST(TcpRelay, ForwardsBothWaysOverIpv6) {
  if (!HaveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  OneShotServer server;
  auto relay = TcpRelay::Listen("::1", 0, {});
  ASSERT_TRUE(relay.ok()) << relay.error().message;
  ASSERT_NE((*relay)->port(), 0);
  ASSERT_TRUE((*relay)->Start(server.port()).ok());
  const int fd = ConnectV6((*relay)->port());
  const std::string request = "GET /metrics HTTP/1.0\r\n" + std::string(40000, 'x') + "\r\n\r\n";
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  shutdown(fd, SHUT_WR);
  EXPECT_EQ(ReadAll(fd), "got:" + request);
  close(fd);
}

// More clients than max_connections: the extra ones are closed at once; an idle one is closed
// after idle_timeout_ms. The relay never blocks on either.
TEST(TcpRelay, BoundsConnectionsAndClosesIdleOnes) {
  if (!HaveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  OneShotServer server;  // accepts one connection and waits for its end of data
  auto relay = TcpRelay::Listen("::1", 0, {.max_connections = 1, .idle_timeout_ms = 300});
  ASSERT_TRUE(relay.ok()) << relay.error().message;
  ASSERT_TRUE((*relay)->Start(server.port()).ok());
  const int first = ConnectV6((*relay)->port());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int second = ConnectV6((*relay)->port());
  EXPECT_EQ(ReadAll(second), "");  // closed at once: the one slot is taken
  close(second);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadAll(first), "");  // idle: closed by the relay, not by the client
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  close(first);
}

// Issue 27 B21: a port that may not be bound was reported as "in use".
TEST(ListenFailure, NamesTheRealCause) {
  EXPECT_EQ(ListenFailure(EADDRINUSE, 9400), "the port is in use");
  EXPECT_EQ(ListenFailure(EACCES, 80),
            "permission denied (port 80 needs root or CAP_NET_BIND_SERVICE)");
  EXPECT_EQ(ListenFailure(EACCES, 9400), "permission denied");
  EXPECT_EQ(ListenFailure(EADDRNOTAVAIL, 9400), "the address is not on this machine");
  EXPECT_EQ(ListenFailure(EINVAL, 9400), strerror(EINVAL));
}

TEST(TcpRelay, ATakenPortNamesTheCause) {
  if (!HaveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  auto first = TcpRelay::Listen("::1", 0, {});
  ASSERT_TRUE(first.ok()) << first.error().message;
  const uint16_t port = (*first)->port();
  auto second = TcpRelay::Listen("::1", port, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().message,
            "cannot listen on [::1]:" + std::to_string(port) + ": the port is in use");
}

}  // namespace
}  // namespace stallscope::exporter
