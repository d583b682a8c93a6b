#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::pystack {

/// What we need from an Elf64 file on disk: its type, the page-aligned vaddr of its first
/// PT_LOAD segment (to compute the load bias) and a symbol lookup over .symtab and .dynsym.
class ElfSymbols {
 public:
  /// Opens `path` and reads its headers. Errors name the file: kNotFound, kParse (not Elf64
  /// little-endian, truncated or hostile headers).
  [[nodiscard]] static Result<ElfSymbols> Open(const std::string& path);

  /// The st_value of the first defined symbol named `name` (.symtab first, then .dynsym), or
  /// empty. Reads the tables from disk on each call; call it a few times per process, not per
  /// sample.
  [[nodiscard]] std::optional<uint64_t> Find(std::string_view name) const;

  /// Load bias of a mapping of this file whose file offset is 0 and whose start is `map_start`.
  uint64_t LoadBias(uint64_t map_start) const { return map_start - first_load_vaddr_; }

 private:
  struct Section {
    uint32_t type = 0;
    uint32_t link = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t entsize = 0;
  };
  std::string path_;
  std::vector<Section> sections_;
  uint64_t first_load_vaddr_ = 0;
  uint64_t file_size_ = 0;
};

/// One line of /proc/PID/maps.
struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  std::string path;  ///< Empty for anonymous mappings.
};

/// Parses the text of /proc/PID/maps; malformed lines are skipped.
std::vector<Mapping> ParseMaps(std::string_view text);

}  // namespace stallscope::pystack
