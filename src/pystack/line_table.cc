#include "pystack/line_table.h"

#include <climits>

namespace stallscope::pystack {
namespace {

// Lines are summed in 64 bits and a table whose running line leaves int's range is corrupt (a
// hostile table could overflow an int: fuzz crash 2ea227c8, UBSan in LineFromLocations).
bool InIntRange(int64_t line) { return line >= INT_MIN && line <= INT_MAX; }

// 3.8-3.9: (byte offset increment, signed line increment) pairs.
std::optional<int> LineFromLnotab(std::string_view table, int64_t line, uint64_t byte_offset) {
  uint64_t address = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    address += static_cast<uint8_t>(table[i]);
    if (address > byte_offset) break;
    line += static_cast<int8_t>(table[i + 1]);
    if (!InIntRange(line)) return std::nullopt;
  }
  return static_cast<int>(line);
}

// 3.10: (byte length of a range, signed line delta) pairs; delta -128 means "no line".
std::optional<int> LineFrom310(std::string_view table, int64_t line, uint64_t byte_offset) {
  uint64_t end = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    uint64_t start = end;
    end += static_cast<uint8_t>(table[i]);
    auto delta = static_cast<int8_t>(table[i + 1]);
    if (delta != -128) line += delta;
    if (!InIntRange(line)) return std::nullopt;
    if (byte_offset >= start && byte_offset < end) {
      if (delta == -128) return std::nullopt;
      return static_cast<int>(line);
    }
  }
  return std::nullopt;
}

class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size(); }
  bool ok() const { return ok_; }
  uint8_t Byte() {
    if (done()) {
      ok_ = false;
      return 0;
    }
    return static_cast<uint8_t>(bytes_[at_++]);
  }
  // 6-bit chunks, least significant first, 0x40 = more follow.
  uint64_t Varint() {
    uint8_t byte = Byte();
    uint64_t value = byte & 63u;
    for (int shift = 6; (byte & 64u) != 0 && ok_ && shift < 60; shift += 6) {
      byte = Byte();
      value |= uint64_t{byte & 63u} << shift;
    }
    return value;
  }
  int64_t Svarint() {
    uint64_t value = Varint();
    auto magnitude = static_cast<int64_t>(value >> 1);
    return (value & 1u) != 0 ? -magnitude : magnitude;
  }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

// 3.11+: entries start with a byte 1CCCCLLL: code C, length L+1 code units.
std::optional<int> LineFromLocations(std::string_view table, int64_t line, uint64_t code_unit) {
  Cursor cursor(table);
  uint64_t address = 0;
  while (!cursor.done()) {
    uint8_t first = cursor.Byte();
    if ((first & 0x80u) == 0) return std::nullopt;  // not at an entry start: corrupt
    int code = (first >> 3) & 15;
    uint64_t length = (first & 7u) + 1;
    bool has_line = true;
    if (code == 15) {
      has_line = false;
    } else if (code == 14) {
      line += cursor.Svarint();
      cursor.Varint();  // end line
      cursor.Varint();  // column
      cursor.Varint();  // end column
    } else if (code == 13) {
      line += cursor.Svarint();
    } else if (code >= 10) {
      line += code - 10;
      cursor.Byte();
      cursor.Byte();
    } else {
      cursor.Byte();
    }
    if (!cursor.ok() || !InIntRange(line)) return std::nullopt;
    if (code_unit < address + length) {
      if (!has_line) return std::nullopt;
      return static_cast<int>(line);
    }
    address += length;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> LineForInstruction(LineTable format, std::string_view table, int first_line,
                                      uint64_t code_unit) {
  switch (format) {
    case LineTable::kLnotab:
      return LineFromLnotab(table, first_line, code_unit * 2);
    case LineTable::kLinetable310:
      return LineFrom310(table, first_line, code_unit * 2);
    case LineTable::kLocations311:
      return LineFromLocations(table, first_line, code_unit);
  }
  return std::nullopt;
}

}  // namespace stallscope::pystack
