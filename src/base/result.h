#pragma once

#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace stallscope {

/// What went wrong. Codes are coarse on purpose: callers branch on them, people read `message`.
enum class ErrorCode {
  kNotFound,         ///< A file, library, device or process does not exist.
  kPermission,       ///< Exists but may not be read.
  kInvalidArgument,  ///< A flag or value from the user is malformed.
  kParse,            ///< Input exists but is not in the expected format.
  kIo,               ///< A read or write failed mid-way.
  kUnsupported,      ///< The hardware or driver does not provide this.
  kGpuLost,          ///< The GPU stopped answering.
  kInternal,         ///< A bug in stallscope.
};

/// An error: a code to branch on and a one-line message naming the file/thing and the problem.
struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

/// Builds an Error with a fmt-formatted message.
template <typename... Args>
[[nodiscard]] Error MakeError(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Error{code, fmt::format(format, std::forward<Args>(args)...)};
}

/// Value or Error. No exceptions: callers check `ok()` or use TRY.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : data_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<Error>(data_); }
  Error&& take_error() { return std::get<Error>(std::move(data_)); }

 private:
  std::variant<T, Error> data_;
};

/// Result for operations with no value.
struct Ok {};
using Status = Result<Ok>;
inline Status OkStatus() { return Ok{}; }

}  // namespace stallscope

#define STALLSCOPE_CONCAT_INNER(a, b) a##b
#define STALLSCOPE_CONCAT(a, b) STALLSCOPE_CONCAT_INNER(a, b)

/// TRY(auto x, expr): evaluates expr (a Result); on error returns it, else binds the value.
#define TRY(decl, expr) TRY_IMPL(STALLSCOPE_CONCAT(try_result_, __LINE__), decl, expr)
#define TRY_IMPL(tmp, decl, expr)         \
  auto tmp = (expr);                      \
  if (!tmp.ok()) return tmp.take_error(); \
  decl = std::move(tmp).value()

/// TRY_STATUS(expr): returns the error of a Status/Result, discarding any value.
#define TRY_STATUS(expr)                                            \
  do {                                                              \
    auto STALLSCOPE_CONCAT(try_status_, __LINE__) = (expr);         \
    if (!STALLSCOPE_CONCAT(try_status_, __LINE__).ok())             \
      return STALLSCOPE_CONCAT(try_status_, __LINE__).take_error(); \
  } while (0)
