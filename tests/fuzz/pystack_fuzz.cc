// pystack's frame walker (src/pystack/stack_reader.h) on a fake address space: the input's
// bytes after a 2-byte header are the memory at testing::kFakeBase, every other address is
// unmapped. Byte 0 picks the layout (3.8..3.13), byte 1: bit 0 checks object types, bit 1 (3.13)
// takes the layout from the input's own _Py_DebugOffsets, bits 2-4 pick max_frames. Each input
// is walked as SampleAll and twice as Sample (the second through the code cache).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../support/pystack_fake_memory.h"
#include "fuzz_support.h"
#include "pystack/stack_reader.h"

namespace {

namespace pystack = stallscope::pystack;
namespace fake = stallscope::pystack::testing;

constexpr size_t kMaxFramesChoices[] = {0, 1, 2, 3, 8, 64, 256, 4096};

// A small interpreter per layout: two threads (tids 1 and 2), a few frames, a repeated code
// object, shim frames where the layout has them; with and without type checks.
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
    for (int flags : {0, 1, 2 | 1, 4 * 3 + 1}) {
      std::string input{static_cast<char>(i), static_cast<char>(flags)};
      input.append(image.bytes.begin(), image.bytes.end());
      stallscope::fuzz::WriteSeed(dir, "layout" + std::to_string(i) + "_" + std::to_string(flags),
                                  input);
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
  std::vector<uint8_t> image(data + 2, data + size);
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
  pystack::StackReader reader(process, memory.Share());
  (void)reader.SampleAll(max_frames);
  for (int round = 0; round < 2; ++round) {
    auto stack = reader.Sample(1, max_frames);
    if (stack.ok() && stack->frames.size() > max_frames) __builtin_trap();
  }
  return 0;
}
