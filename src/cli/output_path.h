#pragma once
// The one rule for files a command writes (record -o, trace --export-perfetto, report --html):
// nothing the user owns is replaced without --force, an output is never one of the command's
// inputs, and a node that is not a regular file is never replaced by one.

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace stallscope::cli {

/// How the command writes its output file.
enum class OutputWrite {
  kInPlace,  ///< opened and written where it is (record -o, --export-perfetto): through a FIFO,
             ///< a device or a symbolic link
  kReplace,  ///< written to a temporary file beside it and renamed over it (--html, --png):
             ///< the rename replaces whatever node has the name
};

/// Why `path` must not be written as the output of option `flag` ("-o", "--html"), or nullopt
/// when it may be:
/// - one of `inputs` (the same device and inode, so through symlinks and hard links too): always
///   refused, --force or not;
/// - a directory: refused;
/// - kReplace: anything that is not a regular file (a FIFO, a device such as /dev/null, a
///   socket, a symbolic link): refused, --force or not (issue 27 B01: `report --html /dev/null`
///   as root replaced /dev/null with the report);
/// - an existing regular file with something in it: refused unless `force`.
/// A new path, an empty file (mktemp's) and stdout ("-") are fine; with kInPlace a device such
/// as /dev/null too. The message starts with `flag` and the path and says what to do.
[[nodiscard]] std::optional<std::string> RefuseOutputPath(std::string_view flag,
                                                          const std::string& path, bool force,
                                                          OutputWrite how,
                                                          std::span<const std::string> inputs = {});

}  // namespace stallscope::cli
