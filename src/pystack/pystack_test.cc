#include "pystack/pystack.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <string>

namespace stallscope::pystack {
namespace {

TEST(Dump, NonPythonProcessIsOneLineNotFound) {
  auto dumped = Dump(getpid());
  ASSERT_FALSE(dumped.ok());
  EXPECT_EQ(dumped.error().code, ErrorCode::kNotFound);
  EXPECT_NE(dumped.error().message.find(fmt::format("pid {}", getpid())), std::string::npos);
}

// A reader without the right to the target: kPermission, one line naming the pid. As root, a
// child drops to nobody (65534) and reads our own (root's) process.
TEST(Dump, PermissionDeniedIsOneLine) {
  if (geteuid() != 0) {
    auto dumped = Dump(1);
    ASSERT_FALSE(dumped.ok());
    EXPECT_EQ(dumped.error().code, ErrorCode::kPermission) << dumped.error().message;
    return;
  }
  pid_t target = getpid();
  int verdict[2];
  ASSERT_EQ(pipe(verdict), 0);
  pid_t child = fork();
  if (child == 0) {
    close(verdict[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto dumped = Dump(target);
    int value = 0;
    Status read = ProcessMemory(target).Read(reinterpret_cast<uint64_t>(&value), &value, 4);
    std::string message = fmt::format(
        "{}|{}|{}|{}", !dumped.ok() && dumped.error().code == ErrorCode::kPermission ? 1 : 0,
        !read.ok() && read.error().code == ErrorCode::kPermission ? 1 : 0,
        dumped.ok() ? "" : dumped.error().message, read.ok() ? "" : read.error().message);
    if (write(verdict[1], message.data(), message.size()) < 0) _exit(3);
    _exit(0);
  }
  close(verdict[1]);
  std::string message(1024, '\0');
  ssize_t n = read(verdict[0], message.data(), message.size());
  close(verdict[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) GTEST_SKIP() << "setuid(65534) refused here";
  message.resize(n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_TRUE(message.starts_with("1|1|")) << message;
  EXPECT_NE(message.find(fmt::format("pid {}: may not read", target)), std::string::npos)
      << message;
}

TEST(Dump, GoneProcessIsNotFound) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  auto dumped = Dump(child);
  ASSERT_FALSE(dumped.ok());
  EXPECT_EQ(dumped.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(dumped.error().message, fmt::format("pid {}: no such process", child));
}

TEST(ProcessMemory, GoneProcessIsNotFound) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  int value = 0;
  Status read = ProcessMemory(child).Read(0x1000, &value, sizeof(value));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ErrorCode::kNotFound) << read.error().message;
}

TEST(ProcessMemory, ReadManyReadsEverySpanInOneGo) {
  const std::array<uint64_t, 2> words = {0x1122334455667788, 0x99aabbccddeeff00};
  std::array<uint64_t, 2> got{};
  ProcessMemory memory(getpid());
  std::array<ReadRequest, 2> requests = {
      ReadRequest{reinterpret_cast<uint64_t>(&words[1]), &got[0], 8},
      ReadRequest{reinterpret_cast<uint64_t>(&words[0]), &got[1], 8}};
  ASSERT_TRUE(memory.ReadMany(requests).ok());
  EXPECT_EQ(got[0], words[1]);
  EXPECT_EQ(got[1], words[0]);
  // The second span unmapped: a short read naming that span's address.
  requests[1].address = 8;
  Status short_read = memory.ReadMany(requests);
  ASSERT_FALSE(short_read.ok());
  EXPECT_EQ(short_read.error().code, ErrorCode::kIo);
  EXPECT_NE(short_read.error().message.find("short read at 0x8"), std::string::npos)
      << short_read.error().message;
}

TEST(ReadPyString, CompactKindsAndHostileHeaders) {
  const Layout layout = *BuiltinLayout(12);  // compact data after 40 / 56 bytes
  struct alignas(8) Str {
    uint64_t refcnt = 1, type = 0x42;
    int64_t length = 0;
    uint64_t hash = 0;
    uint32_t state = 0, pad = 0;
    char data[32] = {};
  };
  ProcessMemory self(getpid());
  Str ascii;
  ascii.length = 5;
  ascii.state = (1u << 2) | (1u << 5) | (1u << 6);
  std::memcpy(ascii.data, "hello", 5);
  auto address = reinterpret_cast<uint64_t>(&ascii);
  EXPECT_EQ(*ReadPyString(self, layout, address), "hello");
  EXPECT_EQ(*ReadPyString(self, layout, address, 4096, 0x42), "hello");
  EXPECT_FALSE(ReadPyString(self, layout, address, 4096, 0x43).ok());  // not a str
  EXPECT_FALSE(ReadPyString(self, layout, address, 4).ok());           // over max_chars
  ascii.state = (1u << 2);                                             // not compact
  EXPECT_FALSE(ReadPyString(self, layout, address).ok());
  Str ucs2;  // kind 2, compact, not ascii: "é€" after the 56-byte PyCompactUnicodeObject
  ucs2.length = 2;
  ucs2.state = (2u << 2) | (1u << 5);
  const uint16_t chars[2] = {0xe9, 0x20ac};
  std::memcpy(ucs2.data + 16, chars, sizeof(chars));
  EXPECT_EQ(*ReadPyString(self, layout, reinterpret_cast<uint64_t>(&ucs2)), "\xc3\xa9\xe2\x82\xac");
}

}  // namespace
}  // namespace stallscope::pystack
