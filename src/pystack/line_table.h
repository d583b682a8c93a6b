#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "pystack/layouts.h"

namespace stallscope::pystack {

/// The source line of the instruction at `code_unit` (index in 2-byte code units, not bytes) in
/// a code object whose first line is `first_line` and whose line table bytes are `table`.
/// Empty when the table says the instruction has no line, or the table ends first.
/// Formats: CPython Objects/lnotab_notes.txt of each version (3.8-3.9 co_lnotab, 3.10
/// co_linetable) and InternalDocs/locations.md / 3.11 Objects/locations.md (co_linetable).
/// Hostile tables are safe: every read is bounds-checked.
std::optional<int> LineForInstruction(LineTable format, std::string_view table, int first_line,
                                      uint64_t code_unit);

}  // namespace stallscope::pystack
