#include "pystack/layouts.h"

#include <gtest/gtest.h>

#include <cstring>

namespace stallscope::pystack {
namespace {

TEST(MinorFromFileName, Names) {
  EXPECT_EQ(MinorFromFileName("/usr/bin/python3.11"), 11);
  EXPECT_EQ(MinorFromFileName("/x/lib/libpython3.12.so.1.0"), 12);
  EXPECT_EQ(MinorFromFileName("/x/lib/libpython3.so"), std::nullopt);
  EXPECT_EQ(MinorFromFileName("/x/bin/python3.13t"), std::nullopt);
  EXPECT_EQ(MinorFromFileName("/usr/bin/bash"), std::nullopt);
}

TEST(BuiltinLayout, QualnameAndStackChunkFrom311) {
  for (int minor = 8; minor <= 12; ++minor) {
    auto layout = BuiltinLayout(minor);
    ASSERT_TRUE(layout);
    EXPECT_EQ(layout->code_qualname.has_value(), minor >= 11) << minor;
    EXPECT_EQ(layout->tstate_datastack_chunk.has_value(), minor >= 11) << minor;
  }
  EXPECT_FALSE(BuiltinLayout(7));
  EXPECT_FALSE(BuiltinLayout(13));
}

// The measured 3.13.0 values (README.md's offsets table), read back through the parser.
TEST(LayoutFromDebugOffsets, Measured3130) {
  auto layout = LayoutFromDebugOffsets(DebugOffsets3130());
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->minor, 13);
  EXPECT_EQ(layout->runtime_interp_head, 632u);
  EXPECT_EQ(layout->interp_tstate_head, 7344u);
  EXPECT_EQ(layout->tstate_frame, 72u);
  EXPECT_EQ(layout->tstate_native_thread_id, 160u);
  EXPECT_EQ(layout->tstate_datastack_chunk, 232u);
  EXPECT_EQ(layout->frame_owner, 70u);
  EXPECT_EQ(layout->code_qualname, 128u);
  EXPECT_EQ(layout->code_adaptive, 200u);
  EXPECT_EQ(layout->ascii_size, 40u);
  EXPECT_EQ(layout->compact_size, 56u);
}

TEST(LayoutFromDebugOffsets, RefusesWhatIsNot3130) {
  auto with = [](size_t position, uint64_t word) {
    auto bytes = DebugOffsets3130();
    std::memcpy(bytes.data() + position, &word, sizeof(word));
    return LayoutFromDebugOffsets(bytes);
  };
  struct Case {
    size_t position;
    uint64_t word;
    const char* wanted;
  };
  for (const Case& c :
       {Case{0, 0, "no _Py_DebugOffsets cookie"}, Case{8, 0x030E00F0, "only 3.13 is known"},
        Case{16, 1, "free-threaded"}, Case{72, uint64_t{1} << 40, "implausible"},
        Case{296, 70000, "implausible"}}) {
    auto layout = with(c.position, c.word);
    ASSERT_FALSE(layout.ok()) << c.wanted;
    EXPECT_EQ(layout.error().code, ErrorCode::kUnsupported);
    EXPECT_NE(layout.error().message.find(c.wanted), std::string::npos) << layout.error().message;
  }
  auto bytes = DebugOffsets3130();
  auto short_input = LayoutFromDebugOffsets(std::span<const uint8_t>(bytes.data(), 100));
  ASSERT_FALSE(short_input.ok());
  EXPECT_EQ(short_input.error().code, ErrorCode::kParse);
}

}  // namespace
}  // namespace stallscope::pystack
