// pystack's frame walker (src/pystack/stack_reader.h) on a fake address space: the input's
// bytes after a 2-byte header are the memory at testing::kFakeBase, every other address is
// unmapped. Byte 0 picks the layout (3.8..3.13), byte 1: bit 0 checks object types, bit 1 (3.13)
// takes the layout from the input's own _Py_DebugOffsets, bits 2-4 pick max_frames, bit 5 forges
// the interpreter list. Each input is walked as SampleAll and twice as Sample (the second through
// the code cache).
//
// Forged (bit 5, issue 40: the job is untrusted input): the next kForgeBytes bytes shape a forged
// interpreter list that testing::ForgedMemory synthesizes on read (a million thread states cost
// no memory): interpreters (1 byte, + 1), thread states per list (2 bytes, at most 8192), bit 0
// of a mode byte: every interpreter names the first list, bit 1: each list loops back to the
// state given by the next 2 bytes; then the frame (or cframe) and the stack chunk every forged
// thread state points at (8 bytes each); the image follows. The runtime's interpreter head
// names the forged list. The reader runs with a small budget (kBudget), and the harness traps
// when a result passes it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../support/pystack_fake_memory.h"
#include "fuzz_support.h"
#include "pystack/stack_reader.h"

namespace {

namespace pystack = stallscope::pystack;
namespace fake = stallscope::pystack::testing;

constexpr size_t kMaxFramesChoices[] = {0, 1, 2, 3, 8, 64, 256, 4096};
// The reader's budget, smaller than the tool's (src/pystack/README.md "Budgets"): every cut is
// reached within a few hundred reads, so a million forged thread states cost an input ~3 ms
// under ASan and coverage (each read's Result costs ~10 us there), not ~150 ms. The unit tests
// hold the tool's budget.
constexpr pystack::ReaderBudget kBudget{.thread_states = 32,
                                        .interpreters = 8,
                                        .frames_per_process = 128,
                                        .name_bytes_per_process = size_t{1} << 20,
                                        .name_bytes_per_walk = size_t{256} << 10,
                                        .code_cache_entries = 512,
                                        .code_cache_bytes = size_t{1} << 20};
constexpr uint8_t kForged = 0x20;
constexpr size_t kForgeBytes = 1 + 2 + 1 + 2 + 8 + 8;

uint64_t Le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void PutLe(std::string& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// The forge bytes of `lists` (the inverse of what LLVMFuzzerTestOneInput reads).
std::string ForgeBytes(const fake::ForgedLists& lists) {
  std::string out;
  PutLe(out, lists.interpreters - 1, 1);
  PutLe(out, lists.states, 2);
  PutLe(out, (lists.shared ? 1 : 0) | (lists.loop_to ? 2 : 0), 1);
  PutLe(out, lists.loop_to.value_or(0), 2);
  PutLe(out, lists.frame, 8);
  PutLe(out, lists.chunk, 8);
  return out;
}

uint64_t Word(const fake::FakeImage& image, uint64_t address) {
  uint64_t v = 0;
  std::memcpy(&v, image.bytes.data() + (address - fake::kFakeBase), 8);
  return v;
}

// A small interpreter per layout: two threads (tids 1 and 2), a few frames, a repeated code
// object, shim frames where the layout has them; with and without type checks. Then the shapes
// of issue 40: code objects sharing one padded line table, and forged interpreter lists (64
// interpreters naming one list of 4095 thread states, as probe P01; 256 x 4096 distinct states;
// a list that loops) pointing at an 8-frame thread.
void WriteSeeds(const std::string& dir) {
  std::vector<pystack::Layout> layouts = fake::AllLayouts();
  for (size_t i = 0; i < layouts.size(); ++i) {
    fake::FakePython python(layouts[i], 1);
    size_t inner = python.AddCode("/app/model.py", "forward", "Model.forward", 40, 2);
    size_t outer = python.AddCode("/app/train.py", "<module>", "<module>", 1, 9);
    size_t work = python.AddCode("/usr/lib/python3/threading.py", "run", "Thread.run", 900, 5);
    bool shims = layouts[i].frame_owner.has_value();
    python.AddThread(1, {{inner, 3}, {inner, 1}, {0, 0, shims}, {outer, 7}});
    python.AddThread(2, {{work, 2}, {outer, 0}});
    fake::FakeImage image = python.Build();
    const std::string name = "layout" + std::to_string(i);
    for (int flags : {0, 1, 2 | 1, 4 * 3 + 1}) {
      std::string input{static_cast<char>(i), static_cast<char>(flags)};
      input.append(image.bytes.begin(), image.bytes.end());
      stallscope::fuzz::WriteSeed(dir, name + "_" + std::to_string(flags), input);
    }

    fake::FakePython shared(layouts[i], 1);
    shared.ShareLineTables();
    std::vector<fake::FakeFrame> frames;
    for (int c = 0; c < 6; ++c) {
      frames.push_back(
          {shared.AddCode("/app/lt.py", "g" + std::to_string(c), "g", 10 * c, 1, c == 0 ? 2048 : 0),
           static_cast<uint64_t>(c)});
    }
    shared.AddThread(1, frames);
    fake::FakeImage shared_image = shared.Build();
    std::string input{static_cast<char>(i), static_cast<char>(4 * 7 + 1)};
    input.append(shared_image.bytes.begin(), shared_image.bytes.end());
    stallscope::fuzz::WriteSeed(dir, name + "_shared_table", input);

    fake::FakePython deep(layouts[i], 1);
    size_t rec = deep.AddCode("/app/forge.py", "rec", "rec", 20, 1);
    deep.AddThread(1, std::vector<fake::FakeFrame>(8, fake::FakeFrame{rec, 0}));
    fake::FakeImage deep_image = deep.Build();
    const pystack::Layout& l = layouts[i];
    fake::ForgedLists shapes[] = {{.interpreters = 64, .states = 4095, .shared = true},
                                  {.interpreters = 256, .states = 4096},
                                  {.interpreters = 2, .states = 10, .loop_to = 3}};
    for (size_t s = 0; s < std::size(shapes); ++s) {
      fake::ForgedLists& lists = shapes[s];
      lists.frame = Word(deep_image, deep_image.tstates[0] + l.tstate_frame);
      if (l.tstate_datastack_chunk)
        lists.chunk = Word(deep_image, deep_image.tstates[0] + *l.tstate_datastack_chunk);
      std::string forged{static_cast<char>(i), static_cast<char>(kForged | (4 * 7) | 1)};
      forged += ForgeBytes(lists);
      forged.append(deep_image.bytes.begin(), deep_image.bytes.end());
      stallscope::fuzz::WriteSeed(dir, name + "_forged" + std::to_string(s), forged);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<pystack::Layout> kLayouts = fake::AllLayouts();
  if (size < 2) return 0;
  const uint8_t flags = data[1];
  pystack::Layout layout = kLayouts[data[0] % kLayouts.size()];
  const uint8_t* rest = data + 2;
  size_t rest_size = size - 2;
  std::optional<fake::ForgedLists> forge;
  if ((flags & kForged) != 0) {
    if (rest_size < kForgeBytes) return 0;
    fake::ForgedLists lists;
    lists.interpreters = static_cast<size_t>(Le(rest, 1)) + 1;
    lists.states = std::min<size_t>(static_cast<size_t>(Le(rest + 1, 2)), 8192);
    lists.shared = (rest[3] & 1) != 0;
    if ((rest[3] & 2) != 0) lists.loop_to = static_cast<size_t>(Le(rest + 4, 2));
    lists.frame = Le(rest + 6, 8);
    lists.chunk = Le(rest + 14, 8);
    forge = lists;
    rest += kForgeBytes;
    rest_size -= kForgeBytes;
  }
  std::vector<uint8_t> image(rest, rest + rest_size);
  if (layout.minor == 13 && (flags & 2) != 0) {
    auto own = pystack::LayoutFromDebugOffsets(image);
    if (own.ok()) layout = *own;
  }
  fake::FakeMemory memory;
  memory.Map(fake::kFakeBase, std::move(image));
  pystack::PythonProcess process = fake::MakeProcess(1, layout, fake::FakeRuntimeAddress(layout));
  if ((flags & 1) != 0) {
    process.code_type = fake::kFakeCodeType;
    process.str_type = fake::kFakeStrType;
    process.bytes_type = fake::kFakeBytesType;
  }
  const size_t max_frames = kMaxFramesChoices[(flags >> 2) & 7];
  std::unique_ptr<pystack::MemoryReader> space = memory.Share();
  if (forge && forge->states > 0) {
    auto forged = std::make_unique<fake::ForgedMemory>(std::move(space), layout, *forge);
    forged->Set(process.runtime_address + layout.runtime_interp_head, forged->Interp(0));
    space = std::move(forged);
  }
  pystack::StackReader reader(process, std::move(space), kBudget);
  auto all = reader.SampleAll(max_frames);
  if (all.ok()) {
    size_t frames = 0;
    for (const pystack::ThreadStack& t : all->threads) frames += t.frames.size();
    // The per-process budget holds whatever the memory says.
    if (all->threads.size() > kBudget.thread_states || frames > kBudget.frames_per_process)
      __builtin_trap();
  }
  if (reader.code_cache_bytes() >
      kBudget.code_cache_bytes + kBudget.name_bytes_per_walk + (size_t{1} << 20))
    __builtin_trap();
  for (int round = 0; round < 2; ++round) {
    auto stack = reader.Sample(1, max_frames);
    if (stack.ok() && stack->frames.size() > max_frames) __builtin_trap();
  }
  return 0;
}
