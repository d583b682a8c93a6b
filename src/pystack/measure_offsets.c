/* Prints the struct offsets layouts.cc uses, from an interpreter's own headers. Not built by
 * CMake; run it when adding a version or checking a patch release:
 *   P=/root/.pyenv/versions/3.12.1 V=3.12
 *   gcc -w measure_offsets.c -I$P/include/python$V -I$P/include/python$V/internal -o /tmp/m &&
 * /tmp/m Debian: -I/usr/include/python3.11 -I/usr/include/x86_64-linux-gnu/python3.11 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif
#if PY_VERSION_HEX < 0x03090000
#include "internal/pycore_pystate.h"
#else
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#define P(name, expr) printf("  %-22s %zu\n", name, (size_t)(expr))
int main(void) {
  printf("%s\n", PY_VERSION);
  P("runtime.interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030B0000
  P("interp.tstate_head", offsetof(PyInterpreterState, tstate_head));
#else
  P("interp.tstate_head", offsetof(PyInterpreterState, threads.head));
#endif
  P("interp.next", offsetof(PyInterpreterState, next));
  P("tstate.next", offsetof(PyThreadState, next));
  P("tstate.thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
  P("tstate.native_thread_id", offsetof(PyThreadState, native_thread_id));
  P("tstate.datastack_chunk", offsetof(PyThreadState, datastack_chunk));
  P("tstate.datastack_top", offsetof(PyThreadState, datastack_top));
  P("chunk.data", offsetof(_PyStackChunk, data));
#endif
#if PY_VERSION_HEX < 0x030B0000
  P("tstate.frame", offsetof(PyThreadState, frame));
  P("frame.back", offsetof(PyFrameObject, f_back));
  P("frame.code", offsetof(PyFrameObject, f_code));
  P("frame.lasti", offsetof(PyFrameObject, f_lasti));
#elif PY_VERSION_HEX < 0x030D0000
  P("tstate.cframe", offsetof(PyThreadState, cframe));
  P("cframe.current_frame", offsetof(_PyCFrame, current_frame));
  P("iframe.previous", offsetof(_PyInterpreterFrame, previous));
  P("iframe.code", offsetof(_PyInterpreterFrame, f_code));
  P("iframe.prev_instr", offsetof(_PyInterpreterFrame, prev_instr));
  P("iframe.owner", offsetof(_PyInterpreterFrame, owner));
#endif
  P("code.filename", offsetof(PyCodeObject, co_filename));
  P("code.name", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX >= 0x030B0000
  P("code.qualname", offsetof(PyCodeObject, co_qualname));
#endif
  P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX < 0x030A0000
  P("code.lnotab", offsetof(PyCodeObject, co_lnotab));
#else
  P("code.linetable", offsetof(PyCodeObject, co_linetable));
#endif
#if PY_VERSION_HEX >= 0x030B0000
  P("code.code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#endif
  P("bytes.sval", offsetof(PyBytesObject, ob_sval));
  P("ascii.size", sizeof(PyASCIIObject));
  P("compact.size", sizeof(PyCompactUnicodeObject));
#if PY_VERSION_HEX >= 0x030D0000
  P("dbg.runtime.interp_head", offsetof(_Py_DebugOffsets, runtime_state.interpreters_head));
  P("dbg.interp.threads_head", offsetof(_Py_DebugOffsets, interpreter_state.threads_head));
  P("dbg.interp.next", offsetof(_Py_DebugOffsets, interpreter_state.next));
  P("dbg.ts.next", offsetof(_Py_DebugOffsets, thread_state.next));
  P("dbg.ts.current_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
  P("dbg.ts.thread_id", offsetof(_Py_DebugOffsets, thread_state.thread_id));
  P("dbg.ts.native_thread_id", offsetof(_Py_DebugOffsets, thread_state.native_thread_id));
  P("dbg.fr.previous", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
  P("dbg.fr.executable", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
  P("dbg.fr.instr_ptr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
  P("dbg.fr.owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
  P("dbg.co.filename", offsetof(_Py_DebugOffsets, code_object.filename));
  P("dbg.co.name", offsetof(_Py_DebugOffsets, code_object.name));
  P("dbg.co.qualname", offsetof(_Py_DebugOffsets, code_object.qualname));
  P("dbg.ts.datastack_chunk", offsetof(_Py_DebugOffsets, thread_state.datastack_chunk));
  P("dbg.pyobject.ob_type", offsetof(_Py_DebugOffsets, pyobject.ob_type));
  P("dbg.co.linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
  P("dbg.co.firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
  P("dbg.co.code_adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
  P("dbg.bytes.ob_size", offsetof(_Py_DebugOffsets, bytes_object.ob_size));
  P("dbg.bytes.ob_sval", offsetof(_Py_DebugOffsets, bytes_object.ob_sval));
  P("dbg.uni.state", offsetof(_Py_DebugOffsets, unicode_object.state));
  P("dbg.uni.length", offsetof(_Py_DebugOffsets, unicode_object.length));
  P("dbg.uni.asciisize", offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
  P("iframe.previous", offsetof(_PyInterpreterFrame, previous));
  P("iframe.exe", offsetof(_PyInterpreterFrame, f_executable));
  P("iframe.instr_ptr", offsetof(_PyInterpreterFrame, instr_ptr));
  P("iframe.owner", offsetof(_PyInterpreterFrame, owner));
  P("tstate.current_frame", offsetof(PyThreadState, current_frame));
#endif
  return 0;
}
