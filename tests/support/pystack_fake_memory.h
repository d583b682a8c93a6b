#pragma once
// Fake address spaces for src/pystack's tests and tests/fuzz/pystack_fuzz.cc: FakeMemory (bytes
// at known addresses, the rest unmapped, a hook before each read to change the space mid-walk),
// RandomMemory (random bytes everywhere) and FakePython, which lays out a CPython interpreter,
// its threads, frames, code objects, strings and line tables for any Layout, as the real
// structs are laid out for the fields pystack reads. Test code only.

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pystack/layouts.h"
#include "pystack/process_memory.h"
#include "pystack/stack_reader.h"

namespace stallscope::pystack::testing {

/// Bytes at known addresses; a read touching anything else fails with kIo, as process_vm_readv
/// does for an unmapped address. Copies share one space, so a test keeps one and hands another
/// to a StackReader.
class FakeMemory final : public MemoryReader {
 public:
  FakeMemory() : space_(std::make_shared<Space>()) {}
  /// Maps `bytes` at `address` (regions must not overlap).
  void Map(uint64_t address, std::vector<uint8_t> bytes) {
    space_->regions[address] = std::move(bytes);
  }
  /// Overwrites mapped bytes (false when they are not all mapped).
  bool Write(uint64_t address, const void* data, size_t size) {
    uint8_t* at = Find(address, size);
    if (at != nullptr) std::memcpy(at, data, size);
    return at != nullptr;
  }
  bool Write64(uint64_t address, uint64_t value) { return Write(address, &value, 8); }
  /// Called before each read with its number (1-based): a test changes the space mid-walk.
  void OnRead(std::function<void(int64_t)> hook) { space_->hook = std::move(hook); }
  int64_t reads() const { return space_->reads; }
  std::unique_ptr<MemoryReader> Share() const { return std::make_unique<FakeMemory>(*this); }

  [[nodiscard]] Status Read(uint64_t address, void* out, size_t size) const override {
    ++space_->reads;
    if (space_->hook) space_->hook(space_->reads);
    const uint8_t* at = Find(address, size);
    if (at == nullptr) return MakeError(ErrorCode::kIo, "pid 1: unmapped {:#x}", address);
    if (size > 0) std::memcpy(out, at, size);
    return OkStatus();
  }

 private:
  struct Space {
    std::map<uint64_t, std::vector<uint8_t>> regions;
    std::function<void(int64_t)> hook;
    int64_t reads = 0;
  };
  uint8_t* Find(uint64_t address, size_t size) const {
    auto it = space_->regions.upper_bound(address);
    if (it == space_->regions.begin()) return nullptr;
    --it;
    uint64_t offset = address - it->first;
    if (offset > it->second.size() || it->second.size() - offset < size) return nullptr;
    return it->second.data() + offset;
  }
  std::shared_ptr<Space> space_;
};

/// An address space of random bytes (the same bytes for the same address), with some words set.
class RandomMemory final : public MemoryReader {
 public:
  explicit RandomMemory(uint64_t seed) : seed_(seed) {}
  void Set(uint64_t address, uint64_t value) { words_[address] = value; }
  [[nodiscard]] Status Read(uint64_t address, void* out, size_t size) const override {
    if (address < 0x1000) return MakeError(ErrorCode::kIo, "pid 1: unmapped {:#x}", address);
    auto* bytes = static_cast<unsigned char*>(out);
    for (size_t i = 0; i < size; ++i) {
      // splitmix64 of the address: cheap, and the same byte on every read.
      uint64_t z = seed_ + (address + i) * 0x9E3779B97F4A7C15ULL;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      // Small values often, so pointers land in "mapped" memory and lengths look plausible.
      bytes[i] = static_cast<unsigned char>(z % 4 == 0 ? z >> 8 : (z >> 8) % 8);
    }
    for (const auto& [at, value] : words_) {
      for (size_t i = 0; i < 8; ++i) {
        if (at + i >= address && at + i < address + size) {
          bytes[at + i - address] = static_cast<unsigned char>(value >> (8 * i));
        }
      }
    }
    return OkStatus();
  }

 private:
  uint64_t seed_;
  std::map<uint64_t, uint64_t> words_;
};

/// A PythonProcess without type checks (fakes whose objects carry no ob_type).
inline PythonProcess MakeProcess(pid_t pid, const Layout& layout, uint64_t runtime) {
  PythonProcess process;
  process.pid = pid;
  process.layout = layout;
  process.runtime_address = runtime;
  process.binary = "fake";
  return process;
}

/// Where FakePython puts its image, and the type objects it gives its objects.
inline constexpr uint64_t kFakeBase = 0x100000;
inline constexpr uint64_t kFakeCodeType = 0x7000;
inline constexpr uint64_t kFakeStrType = 0x7100;
inline constexpr uint64_t kFakeBytesType = 0x7200;
/// glibc's struct pthread: the tid at +0x2d0 (what the reader uses on 3.8-3.10).
inline constexpr uint64_t kFakePthreadTidOffset = 0x2d0;

/// The runtime's fields sit at the start of the image: &_PyRuntime is this.
inline uint64_t FakeRuntimeAddress(const Layout& layout) {
  return layout.minor >= 13 ? kFakeBase : kFakeBase - layout.runtime_interp_head;
}

/// One frame of a fake thread: a code object (by FakePython::AddCode's index) at an
/// instruction, or a C-stack shim frame (3.12+).
struct FakeFrame {
  size_t code = 0;
  uint64_t unit = 0;
  bool shim = false;
  bool generator = false;  ///< a generator's frame (owner 1 on 3.11+, f_gen set on 3.8-3.10)
};

/// What FakePython built: the image (mapped at kFakeBase) and where things are.
struct FakeImage {
  std::vector<uint8_t> bytes;
  PythonProcess process;
  std::vector<uint64_t> codes;                // by AddCode index
  std::vector<std::vector<uint64_t>> frames;  // per thread, innermost first
  std::vector<uint64_t> tstates;
  FakeMemory Memory() const {
    FakeMemory memory;
    memory.Map(kFakeBase, bytes);
    return memory;
  }
};

/// Lays out an interpreter for `layout`: only the fields pystack reads are placed (each struct
/// gets the byte span of its used fields), so the image stays small whatever the offsets.
class FakePython {
 public:
  explicit FakePython(Layout layout, pid_t pid = 1) : layout_(layout), pid_(pid) {}

  /// A code object whose every instruction is at line first_line + line_delta (0..31); its line
  /// table padded with entries that change nothing to at least `table_bytes` bytes.
  size_t AddCode(std::string file, std::string name, std::string qualname, int first_line,
                 int line_delta, size_t table_bytes = 0) {
    codes_.push_back({std::move(file), std::move(name), std::move(qualname), first_line, line_delta,
                      table_bytes});
    return codes_.size() - 1;
  }
  /// Every code object added names the first one's line-table bytes object (as
  /// `code.replace(co_linetable=shared)` does): the first one's line delta applies to all.
  void ShareLineTables() { share_tables_ = true; }
  /// A thread with kernel tid `tid`; frames innermost first.
  void AddThread(pid_t tid, std::vector<FakeFrame> frames) {
    threads_.push_back({tid, std::move(frames)});
  }

  FakeImage Build() {
    FakeImage image;
    bytes_.clear();
    shared_table_ = 0;
    const Layout& l = layout_;
    uint64_t runtime = FakeRuntimeAddress(l);
    if (l.minor >= 13) {
      std::array<uint8_t, kDebugOffsetsBytes> debug = DebugOffsets3130();
      Alloc(debug.size());
      std::memcpy(bytes_.data(), debug.data(), debug.size());
    }
    uint64_t interp_head_at = runtime + l.runtime_interp_head;
    if (l.minor < 13) Alloc(8);
    if (l.minor >= 13) Alloc(interp_head_at + 8 - (kFakeBase + bytes_.size()));
    for (const Code& code : codes_) image.codes.push_back(PlaceCode(code));
    uint64_t interp = PlaceStruct({{l.interp_next, 8}, {l.interp_tstate_head, 8}});
    Put(interp_head_at, interp);
    Put(interp + l.interp_next, 0);
    uint64_t next = 0;
    // Built last to first so each thread state can point at the next.
    std::vector<uint64_t> tstates(threads_.size());
    image.frames.resize(threads_.size());
    for (size_t t = threads_.size(); t-- > 0;) {
      tstates[t] = PlaceThread(threads_[t], image.codes, next, image.frames[t]);
      next = tstates[t];
    }
    Put(interp + l.interp_tstate_head, next);
    image.tstates = tstates;
    image.bytes = bytes_;
    image.process = MakeProcess(pid_, l, runtime);
    image.process.code_type = kFakeCodeType;
    image.process.str_type = kFakeStrType;
    image.process.bytes_type = kFakeBytesType;
    return image;
  }

 private:
  struct Code {
    std::string file, name, qualname;
    int first_line = 0;
    int line_delta = 0;
    size_t table_bytes = 0;
  };
  struct Thread {
    pid_t tid = 0;
    std::vector<FakeFrame> frames;
  };

  uint64_t Alloc(uint64_t size) {
    uint64_t at = kFakeBase + bytes_.size();
    bytes_.resize(bytes_.size() + ((size + 7) & ~uint64_t{7}), 0);
    return at;
  }
  // A struct holding the given (offset, size) fields: returns its address.
  uint64_t PlaceStruct(std::initializer_list<std::pair<uint64_t, uint64_t>> fields) {
    uint64_t begin = UINT64_MAX, end = 0;
    for (auto [offset, size] : fields) {
      begin = std::min(begin, offset);
      end = std::max(end, offset + size);
    }
    return Alloc(end - begin) - begin;
  }
  template <typename T>
  void Put(uint64_t address, T value) {
    std::memcpy(bytes_.data() + (address - kFakeBase), &value, sizeof(T));
  }
  uint64_t PlaceString(const std::string& text) {
    const Layout& l = layout_;
    uint64_t header_end = std::max({l.object_type + 8, l.unicode_length + 8, l.unicode_state + 4});
    uint64_t size = std::max(header_end, l.ascii_size + text.size() + 1) - l.object_type;
    uint64_t at = Alloc(size) - l.object_type;
    Put(at + l.object_type, kFakeStrType);
    Put(at + l.unicode_length, static_cast<int64_t>(text.size()));
    Put(at + l.unicode_state,
        uint32_t{(1u << 2) | (1u << 5) | (1u << 6)});  // kind 1, compact, ascii
    std::memcpy(bytes_.data() + (at + l.ascii_size - kFakeBase), text.data(), text.size());
    return at;
  }
  uint64_t PlaceBytes(const std::string& data) {
    const Layout& l = layout_;
    uint64_t at = Alloc(l.bytes_data + data.size() - l.object_type) - l.object_type;
    Put(at + l.object_type, kFakeBytesType);
    Put(at + l.bytes_size, static_cast<int64_t>(data.size()));
    std::memcpy(bytes_.data() + (at + l.bytes_data - kFakeBase), data.data(), data.size());
    return at;
  }
  // A line table (in this layout's format) giving line first + delta to code units 0..63, then
  // entries that change nothing up to `pad_to` bytes.
  std::string LineTableFor(int delta, size_t pad_to) const {
    std::string table;
    if (layout_.line_table == LineTable::kLnotab) {
      table = {'\0', static_cast<char>(delta)};
      if (table.size() < pad_to) table.resize(pad_to + pad_to % 2, '\0');  // (+0 bytes, +0 lines)
    } else if (layout_.line_table == LineTable::kLinetable310) {
      table = {static_cast<char>(128), static_cast<char>(delta)};
      if (table.size() < pad_to) table.resize(pad_to + pad_to % 2, '\0');  // (+0 bytes, +0 lines)
    } else {
      // 1CCCCLLL, code 13 (no columns), 8 code units, then the svarint line delta.
      for (int i = 0; i < 8 || table.size() < pad_to; ++i) {
        table += static_cast<char>(0x80 | (13 << 3) | 7);
        table += static_cast<char>(i == 0 ? delta << 1 : 0);
      }
    }
    return table;
  }
  uint64_t PlaceCode(const Code& code) {
    const Layout& l = layout_;
    uint64_t filename = PlaceString(code.file);
    uint64_t name = PlaceString(code.name);
    uint64_t qualname = l.code_qualname ? PlaceString(code.qualname) : 0;
    if (!share_tables_ || shared_table_ == 0)
      shared_table_ = PlaceBytes(LineTableFor(code.line_delta, code.table_bytes));
    uint64_t table = shared_table_;
    uint64_t qual_offset = l.code_qualname.value_or(l.code_name);
    uint64_t at = PlaceStruct({{l.object_type, 8},
                               {l.code_filename, 8},
                               {l.code_name, 8},
                               {qual_offset, 8},
                               {l.code_linetable, 8},
                               {l.code_firstlineno, 4},
                               {l.code_adaptive, 2}});
    Put(at + l.object_type, kFakeCodeType);
    Put(at + l.code_filename, filename);
    Put(at + l.code_name, name);
    if (l.code_qualname) Put(at + *l.code_qualname, qualname);
    Put(at + l.code_linetable, table);
    Put(at + l.code_firstlineno, static_cast<int32_t>(code.first_line));
    return at;
  }
  uint64_t FrameEnd() const {
    uint64_t end = std::max({layout_.frame_back, layout_.frame_code, layout_.frame_instr}) + 8;
    if (layout_.frame_owner) end = std::max(end, *layout_.frame_owner + 1);
    if (layout_.frame_gen) end = std::max(end, *layout_.frame_gen + 8);
    return (end + 7) & ~uint64_t{7};
  }
  void FillFrame(uint64_t at, const FakeFrame& frame, const std::vector<uint64_t>& codes,
                 uint64_t back) {
    const Layout& l = layout_;
    Put(at + l.frame_back, back);
    if (frame.shim) {
      Put(at + l.frame_code, uint64_t{0});
      if (l.frame_owner) Put(at + *l.frame_owner, uint8_t{3});
      return;
    }
    uint64_t code = codes.at(frame.code);
    Put(at + l.frame_code, code);
    if (l.frame_owner) Put(at + *l.frame_owner, static_cast<uint8_t>(frame.generator ? 1 : 0));
    if (l.frame_gen) Put(at + *l.frame_gen, static_cast<uint64_t>(frame.generator ? 0x7000 : 0));
    if (l.frame_model == FrameModel::kFrameObject) {
      Put(at + l.frame_instr, static_cast<int32_t>(l.minor >= 10 ? frame.unit : frame.unit * 2));
    } else {
      Put(at + l.frame_instr, code + l.code_adaptive + 2 * frame.unit);
    }
  }
  // Frames: 3.11+ in one _PyStackChunk (outermost at the lowest address), else one by one.
  std::vector<uint64_t> PlaceFrames(const Thread& thread, const std::vector<uint64_t>& codes,
                                    uint64_t& chunk) {
    const size_t n = thread.frames.size();
    std::vector<uint64_t> at(n);
    const uint64_t stride = FrameEnd();
    if (layout_.tstate_datastack_chunk) {
      chunk = Alloc(24 + n * stride);
      Put(chunk, uint64_t{0});  // previous
      Put(chunk + 8, 24 + n * stride);
      for (size_t i = 0; i < n; ++i) at[i] = chunk + 24 + (n - 1 - i) * stride;
    } else {
      for (size_t i = 0; i < n; ++i) at[i] = Alloc(stride);
    }
    for (size_t i = 0; i < n; ++i) {
      FillFrame(at[i], thread.frames[i], codes, i + 1 < n ? at[i + 1] : 0);
    }
    return at;
  }
  uint64_t PlaceThread(const Thread& thread, const std::vector<uint64_t>& codes, uint64_t next,
                       std::vector<uint64_t>& frames) {
    const Layout& l = layout_;
    uint64_t chunk = 0;
    frames = PlaceFrames(thread, codes, chunk);
    uint64_t innermost = frames.empty() ? 0 : frames[0];
    uint64_t tstate = PlaceStruct({{l.tstate_next, 8},
                                   {l.tstate_thread_id, 8},
                                   {l.tstate_frame, 8},
                                   {l.tstate_native_thread_id.value_or(l.tstate_next), 8},
                                   {l.tstate_datastack_chunk.value_or(l.tstate_next), 8}});
    Put(tstate + l.tstate_next, next);
    uint64_t pthread = Alloc(8) - kFakePthreadTidOffset;
    Put(pthread + kFakePthreadTidOffset, static_cast<int32_t>(thread.tid));
    Put(tstate + l.tstate_thread_id, pthread);
    if (l.tstate_native_thread_id) Put(tstate + *l.tstate_native_thread_id, int64_t{thread.tid});
    if (l.tstate_datastack_chunk) Put(tstate + *l.tstate_datastack_chunk, chunk);
    if (l.frame_model == FrameModel::kCFrame) {
      uint64_t cframe = PlaceStruct({{l.cframe_current, 8}});
      Put(cframe + l.cframe_current, innermost);
      Put(tstate + l.tstate_frame, cframe);
    } else {
      Put(tstate + l.tstate_frame, innermost);
    }
    return tstate;
  }

  Layout layout_;
  pid_t pid_;
  bool share_tables_ = false;
  uint64_t shared_table_ = 0;  // the last line table placed
  std::vector<Code> codes_;
  std::vector<Thread> threads_;
  std::vector<uint8_t> bytes_;
};

/// The shape of a forged interpreter list (what a job that corrupts its interpreter, by a C
/// extension's bug or on purpose with ctypes, can make): ForgedMemory synthesizes it.
struct ForgedLists {
  size_t interpreters = 1;  ///< interpreters in the list
  size_t states = 1;        ///< thread states in each interpreter's list
  bool shared = false;      ///< every interpreter names the first one's list
  /// The last thread state of each list links back to this one of the list (a loop).
  std::optional<size_t> loop_to = std::nullopt;
  uint64_t frame = 0;  ///< every thread state's frame (or cframe) field: e.g. a real thread's
  uint64_t chunk = 0;  ///< and its datastack_chunk (3.11+)
  int64_t first_tid = 1'000'000;  ///< native_thread_id of the first state, + 1 for each next
};

/// An address space whose interpreter and thread-state structs at kForgedInterps and
/// kForgedStates are computed on read from a ForgedLists (a million thread states cost no
/// memory), over another address space for everything else; `Set` overrides single words (the
/// runtime's interpreter head: `Set(runtime + layout.runtime_interp_head, kForgedInterps)`).
class ForgedMemory final : public MemoryReader {
 public:
  static constexpr uint64_t kForgedInterps = 0x10'0000'0000;
  static constexpr uint64_t kForgedStates = 0x20'0000'0000;

  ForgedMemory(std::unique_ptr<MemoryReader> real, const Layout& layout, ForgedLists lists)
      : real_(std::move(real)), lists_(lists) {
    interp_.Add(layout.interp_next);
    interp_.Add(layout.interp_tstate_head);
    state_.Add(layout.tstate_next);
    state_.Add(layout.tstate_thread_id);
    state_.Add(layout.tstate_frame);
    if (layout.tstate_native_thread_id) state_.Add(*layout.tstate_native_thread_id);
    if (layout.tstate_datastack_chunk) state_.Add(*layout.tstate_datastack_chunk);
    layout_ = layout;
  }
  void Set(uint64_t address, uint64_t value) { words_[address] = value; }
  /// Where interpreter `k` and thread state `j` (k * states + i) are.
  uint64_t Interp(size_t k) const { return kForgedInterps + k * interp_.stride() - interp_.begin; }
  uint64_t State(size_t j) const { return kForgedStates + j * state_.stride() - state_.begin; }

  [[nodiscard]] Status Read(uint64_t address, void* out, size_t size) const override {
    auto* bytes = static_cast<uint8_t*>(out);
    Status read = ReadStructs(address, bytes, size);
    if (!read.ok()) return read;
    for (const auto& [at, value] : words_) {
      for (size_t i = 0; i < 8; ++i) {
        if (at + i >= address && at + i < address + size)
          bytes[at + i - address] = static_cast<uint8_t>(value >> (8 * i));
      }
    }
    return OkStatus();
  }

 private:
  struct Fields {
    uint64_t begin = UINT64_MAX, end = 0;
    void Add(uint64_t offset) {
      begin = std::min(begin, offset);
      end = std::max(end, offset + 8);
    }
    uint64_t stride() const { return (end - begin + 63) & ~uint64_t{63}; }
  };
  // A struct's bytes from its first used field on, `stride` long (at most kMaxStride).
  static constexpr uint64_t kMaxStride = 4096;
  using Bytes = std::array<uint8_t, kMaxStride>;
  void InterpBytes(size_t k, Bytes& b) const {
    Put(b, interp_, layout_.interp_next, k + 1 < lists_.interpreters ? Interp(k + 1) : 0);
    Put(b, interp_, layout_.interp_tstate_head, State(lists_.shared ? 0 : k * lists_.states));
  }
  void StateBytes(size_t j, Bytes& b) const {
    const size_t list = j / lists_.states, i = j % lists_.states;
    uint64_t next = 0;
    if (i + 1 < lists_.states) {
      next = State(j + 1);
    } else if (lists_.loop_to) {
      next = State(list * lists_.states + *lists_.loop_to % lists_.states);
    }
    Put(b, state_, layout_.tstate_next, next);
    Put(b, state_, layout_.tstate_thread_id, 0);  // no pthread: 3.8-3.10 find no tid
    Put(b, state_, layout_.tstate_frame, lists_.frame);
    if (layout_.tstate_native_thread_id)
      Put(b, state_, *layout_.tstate_native_thread_id, static_cast<uint64_t>(lists_.first_tid) + j);
    if (layout_.tstate_datastack_chunk)
      Put(b, state_, *layout_.tstate_datastack_chunk, lists_.chunk);
  }
  static void Put(Bytes& b, const Fields& f, uint64_t offset, uint64_t value) {
    std::memcpy(b.data() + (offset - f.begin), &value, 8);
  }
  Status ReadStructs(uint64_t address, uint8_t* out, size_t size) const {
    const uint64_t interps_end = kForgedInterps + lists_.interpreters * interp_.stride();
    const uint64_t states_end =
        kForgedStates + lists_.interpreters * lists_.states * state_.stride();
    const bool in_interps = address >= kForgedInterps && address < interps_end;
    const bool in_states = address >= kForgedStates && address < states_end;
    if (!in_interps && !in_states) return real_->Read(address, out, size);
    const uint64_t base = in_interps ? kForgedInterps : kForgedStates;
    const uint64_t stride = in_interps ? interp_.stride() : state_.stride();
    const size_t index = static_cast<size_t>((address - base) / stride);
    const uint64_t offset = (address - base) % stride;
    if (stride > kMaxStride || offset + size > stride)
      return MakeError(ErrorCode::kIo, "pid 1: unmapped {:#x}", address);
    Bytes bytes{};
    if (in_interps) {
      InterpBytes(index, bytes);
    } else {
      StateBytes(index, bytes);
    }
    std::memcpy(out, bytes.data() + offset, size);
    return OkStatus();
  }

  std::unique_ptr<MemoryReader> real_;
  ForgedLists lists_;
  Layout layout_;
  Fields interp_, state_;
  std::map<uint64_t, uint64_t> words_;
};

/// Every layout: the built-in 3.8-3.12 and 3.13 from the measured _Py_DebugOffsets.
inline std::vector<Layout> AllLayouts() {
  std::vector<Layout> layouts;
  for (int minor = 8; minor <= 12; ++minor) layouts.push_back(*BuiltinLayout(minor));
  layouts.push_back(*LayoutFromDebugOffsets(DebugOffsets3130()));
  return layouts;
}

}  // namespace stallscope::pystack::testing
