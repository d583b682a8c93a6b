#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "doctor/facts.h"

namespace stallscope::doctor {

/// statvfs + statfs of `path`: sizes, free inodes and the filesystem's name. On failure only
/// `path` and `error` ("No such file or directory") are set.
[[nodiscard]] SpaceFacts ExamineSpace(const std::string& path);

/// The name of a statfs f_type magic (linux/magic.h, statfs(2)): "ext4", "xfs", "overlay",
/// "tmpfs", "nfs", ...; "0x..." for others.
[[nodiscard]] std::string FsTypeName(uint64_t magic);

/// Filesystems whose every open and read is a network round trip: NFS, SMB, FUSE (s3fs, gcsfuse,
/// sshfs, ...), Lustre, GPFS, CephFS, 9p.
[[nodiscard]] bool IsNetworkFs(std::string_view name);

}  // namespace stallscope::doctor
