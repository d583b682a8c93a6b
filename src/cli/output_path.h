#pragma once
// The one rule for files a command writes (record -o, trace --export-perfetto): nothing the
// user owns is replaced without --force, and an output is never one of the command's inputs.

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace stallscope::cli {

/// Why `path` must not be written as the output of option `flag` ("-o", "--export-perfetto"),
/// or nullopt when it may be:
/// - one of `inputs` (the same device and inode, so through symlinks and hard links too): always
///   refused, --force or not;
/// - a directory: refused;
/// - an existing regular file with something in it: refused unless `force`.
/// A new path, an empty file (mktemp's), a device such as /dev/null and stdout ("-") are fine.
/// The message starts with `flag` and the path and says what to do.
[[nodiscard]] std::optional<std::string> RefuseOutputPath(std::string_view flag,
                                                          const std::string& path, bool force,
                                                          std::span<const std::string> inputs = {});

}  // namespace stallscope::cli
