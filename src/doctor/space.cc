#include "doctor/space.h"

#include <sys/statfs.h>
#include <sys/statvfs.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace stallscope::doctor {
namespace {

// statfs(2) and linux/magic.h; spelled out because several (lustre, gpfs, zfs, fuse) have no
// constant in the kernel headers.
constexpr std::array<std::pair<uint64_t, std::string_view>, 20> kFsTypes{{
    {0xEF53, "ext4"},      {0x58465342, "xfs"},     {0x9123683E, "btrfs"},    {0x2FC12FC1, "zfs"},
    {0x01021994, "tmpfs"}, {0x794C7630, "overlay"}, {0x6969, "nfs"},          {0xFF534D42, "cifs"},
    {0xFE534D42, "smb2"},  {0x65735546, "fuse"},    {0x0BD00BD0, "lustre"},   {0x47504653, "gpfs"},
    {0x00C36400, "ceph"},  {0x01021997, "9p"},      {0x73717368, "squashfs"}, {0x4D44, "vfat"},
    {0x5346544E, "ntfs"},  {0x858458F6, "ramfs"},   {0x62656572, "sysfs"},    {0x9FA0, "proc"},
}};

}  // namespace

std::string FsTypeName(uint64_t magic) {
  for (const auto& [value, name] : kFsTypes) {
    if (value == magic) return std::string(name);
  }
  return fmt::format("{:#x}", magic);
}

bool IsNetworkFs(std::string_view name) {
  return name == "nfs" || name == "cifs" || name == "smb2" || name == "fuse" || name == "lustre" ||
         name == "gpfs" || name == "ceph" || name == "9p";
}

SpaceFacts ExamineSpace(const std::string& path) {
  SpaceFacts s;
  s.path = path;
  struct statvfs vfs {};
  struct statfs fs {};
  if (statvfs(path.c_str(), &vfs) != 0 || statfs(path.c_str(), &fs) != 0) {
    s.error = std::strerror(errno);
    return s;
  }
  s.total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  s.free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // Filesystems without an inode table (btrfs, tmpfs with nr_inodes=0) report 0 files.
  if (vfs.f_files > 0) s.inodes_free = vfs.f_favail;
  s.fs_type = FsTypeName(static_cast<uint64_t>(fs.f_type));
  return s;
}

}  // namespace stallscope::doctor
