#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"

namespace stallscope::pystack {

/// How a version stores the line of a frame (see line_table.h).
enum class LineTable { kLnotab, kLinetable310, kLocations311 };

/// How a thread finds its innermost frame.
enum class FrameModel {
  kFrameObject,   ///< 3.8-3.10: tstate->frame, a PyFrameObject chain via f_back.
  kCFrame,        ///< 3.11-3.12: tstate->cframe->current_frame, _PyInterpreterFrame->previous.
  kCurrentFrame,  ///< 3.13: tstate->current_frame, _PyInterpreterFrame->previous.
};

/// The byte offsets (x86-64 / any 64-bit little-endian, CPython release builds, not free-threaded)
/// the walker needs. All are offsets inside the named struct.
struct Layout {
  int minor = 0;  ///< 3.<minor>
  FrameModel frame_model = FrameModel::kFrameObject;
  LineTable line_table = LineTable::kLnotab;
  uint64_t runtime_interp_head = 0;  ///< _PyRuntimeState.interpreters.head
  uint64_t interp_next = 0;          ///< PyInterpreterState.next
  uint64_t interp_tstate_head = 0;   ///< PyInterpreterState.tstate_head / threads.head
  uint64_t tstate_next = 0;          ///< PyThreadState.next
  uint64_t tstate_thread_id = 0;     ///< PyThreadState.thread_id (pthread_t)
  std::optional<uint64_t> tstate_native_thread_id;  ///< 3.11+
  /// PyThreadState.datastack_chunk (3.11+): the _PyStackChunk holding the newest frames.
  std::optional<uint64_t> tstate_datastack_chunk;
  uint64_t tstate_frame = 0;    ///< .frame (3.8-3.10), .cframe (3.11-3.12), .current_frame (3.13)
  uint64_t cframe_current = 0;  ///< _PyCFrame.current_frame (3.11-3.12)
  uint64_t frame_back = 0;      ///< f_back / previous
  uint64_t frame_code = 0;      ///< f_code / f_executable
  uint64_t frame_instr = 0;     ///< f_lasti (int) / prev_instr / instr_ptr (pointer)
  /// _PyInterpreterFrame.owner (3.11+): 3.12+ skip frames owned by the C stack (3); a chain that
  /// ends in a generator's frame (1) is torn.
  std::optional<uint64_t> frame_owner;
  /// PyFrameObject.f_gen (3.8-3.10): non-null in a generator's frame; a chain that ends there is
  /// torn.
  std::optional<uint64_t> frame_gen;
  uint64_t code_filename = 0;
  uint64_t code_name = 0;
  std::optional<uint64_t> code_qualname;  ///< co_qualname (3.11+)
  uint64_t code_firstlineno = 0;
  uint64_t code_linetable = 0;   ///< co_lnotab (3.8-3.9) / co_linetable (3.10+), a bytes object
  uint64_t code_adaptive = 0;    ///< co_code_adaptive (3.11+): where the bytecode starts
  uint64_t object_type = 8;      ///< PyObject.ob_type
  uint64_t bytes_size = 16;      ///< PyVarObject.ob_size
  uint64_t bytes_data = 32;      ///< PyBytesObject.ob_sval
  uint64_t unicode_length = 16;  ///< PyASCIIObject.length
  uint64_t unicode_state = 32;   ///< PyASCIIObject.state
  uint64_t ascii_size = 48;      ///< sizeof(PyASCIIObject): where compact ASCII data starts
  uint64_t compact_size = 72;    ///< sizeof(PyCompactUnicodeObject): other compact strings
};

/// The built-in layout for 3.<minor>, 8 <= minor <= 12; empty otherwise. 3.13 comes from the
/// target's own _Py_DebugOffsets (LayoutFromDebugOffsets).
std::optional<Layout> BuiltinLayout(int minor);

/// How many bytes at the start of _PyRuntime LayoutFromDebugOffsets reads.
inline constexpr size_t kDebugOffsetsBytes = 576;

/// The 3.13 layout from the `_Py_DebugOffsets` at the start of _PyRuntime (`bytes`, at least
/// kDebugOffsetsBytes of them). Field positions are those of 3.13.0's
/// Include/internal/pycore_runtime.h; the "xdebugpy" cookie and the version word guard them.
/// Errors (a message without the pid; callers prefix it): kUnsupported for a missing cookie,
/// another version, a free-threaded build or offsets over 64 KiB (not a real layout).
[[nodiscard]] Result<Layout> LayoutFromDebugOffsets(std::span<const uint8_t> bytes);

/// The measured 3.13.0 _Py_DebugOffsets (the bytes LayoutFromDebugOffsets reads), for tests and
/// the fuzz harness' seeds.
std::array<uint8_t, kDebugOffsetsBytes> DebugOffsets3130();

/// The Python minor version named by a file name such as "python3.11" or
/// "libpython3.12.so.1.0"; empty when the name says none.
std::optional<int> MinorFromFileName(std::string_view path);

}  // namespace stallscope::pystack
