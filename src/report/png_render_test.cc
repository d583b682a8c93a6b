#include "report/png_render.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope::report {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

/// A 4-GPU run: GPUs 0–2 follow a sawtooth (fine samples on GPU 0), GPU 3 idles at ~10%.
struct FakeRun {
  analysis::RecordingSummary machine;
  std::vector<diagnose::Series> series;
};

FakeRun FourGpus() {
  FakeRun r;
  diagnose::Series host{"host.cpu_busy_pct", "%", {}};
  for (uint32_t g = 0; g < 4; ++g) {
    analysis::GpuSummary s;
    s.index = g;
    s.name = "NVIDIA A10G";
    s.memory_total_mib = 24576;
    diagnose::Series util{fmt::format("gpu{}.utilization_pct", g), "%", {}};
    diagnose::Series fine{fmt::format("gpu{}.utilization_fine_pct", g), "%", {}};
    for (int i = 0; i < 300; ++i) {
      double t_s = i * 0.5;
      double v = g == 3 ? 10.0 + (i % 3) : static_cast<double>((i * 7 + g * 13) % 100);
      util.points.push_back({t_s, v});
      if (g == 0) fine.points.push_back({t_s + 0.25, 100 - v});
      s.util_pct.Add(v);
      s.memory_used_mib.Add(g == 3 ? 4000.0 + i : 12800.0 + 50.0 * (i % 5));
      if (g == 0) host.points.push_back({t_s, 30.0 + (i % 40)});
    }
    r.series.push_back(util);
    if (!fine.points.empty()) r.series.push_back(fine);
    r.machine.gpus.push_back(s);
  }
  r.series.push_back(host);
  std::vector<double> util_means, mem_means;
  for (const auto& g : r.machine.gpus) {
    util_means.push_back(g.util_pct.mean());
    mem_means.push_back(g.memory_used_mib.mean());
    r.machine.total_memory_used_mib += g.memory_used_mib.mean();
  }
  r.machine.util_balance = analysis::ComputeBalance(util_means, kThresholds);
  r.machine.memory_balance = analysis::ComputeBalance(mem_means, kThresholds);
  return r;
}

struct Decoded {
  int width = 0;
  int height = 0;
  size_t distinct_colors = 0;
  size_t non_background = 0;  ///< pixels of the central region not the region's top-left colour
};

/// Decodes `path` with cairo and measures how much is drawn.
Decoded Decode(const std::string& path) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> s(
      cairo_image_surface_create_from_png(path.c_str()), &cairo_surface_destroy);
  EXPECT_EQ(cairo_surface_status(s.get()), CAIRO_STATUS_SUCCESS) << path;
  Decoded d;
  if (cairo_surface_status(s.get()) != CAIRO_STATUS_SUCCESS) return d;
  d.width = cairo_image_surface_get_width(s.get());
  d.height = cairo_image_surface_get_height(s.get());
  const unsigned char* data = cairo_image_surface_get_data(s.get());
  int stride = cairo_image_surface_get_stride(s.get());
  std::set<uint32_t> colors;
  auto px = [&](int x, int y) {
    uint32_t v = 0;
    std::memcpy(&v, data + static_cast<ptrdiff_t>(y) * stride + x * 4, 4);
    return v;
  };
  for (int y = 0; y < d.height; ++y)
    for (int x = 0; x < d.width; ++x) colors.insert(px(x, y));
  d.distinct_colors = colors.size();
  // The plot area: the middle half of the image, where every figure draws its data.
  uint32_t background = px(d.width / 4, d.height / 4);
  for (int y = d.height / 4; y < d.height * 3 / 4; ++y)
    for (int x = d.width / 4; x < d.width * 3 / 4; ++x) d.non_background += px(x, y) != background;
  return d;
}

void ExpectDrawn(const std::string& path) {
  SCOPED_TRACE(path);
  ASSERT_TRUE(fs::exists(path));
  Decoded d = Decode(path);
  EXPECT_EQ(d.width, kPngWidthPx);
  EXPECT_EQ(d.height, kPngHeightPx);
  EXPECT_GT(d.distinct_colors, 20u);  // antialiased text and lines, several series colours
  EXPECT_GT(d.non_background, 1000u);
}

TEST(PngRender, WritesThreeDecodableNonBlankFigures) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  std::string dir = tmp.Sub("figs/nested");  // created, parents too
  auto out = WritePngFigures(r.machine, r.series, dir, false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->written.size(), 3u);
  EXPECT_TRUE(out->skipped.empty());
  EXPECT_EQ(out->written[0], dir + "/utilization.png");
  EXPECT_EQ(out->written[1], dir + "/memory.png");
  EXPECT_EQ(out->written[2], dir + "/load_balance.png");
  for (const auto& p : out->written) ExpectDrawn(p);
  for (const auto& e : fs::directory_iterator(dir))  // no .tmp left behind
    EXPECT_EQ(e.path().extension(), ".png") << e.path();
}

TEST(PngRender, ImbalancedGpuIsPoorInTheBalance) {
  // The figure names util_balance's class; make sure the fixture is the case it should show.
  FakeRun r = FourGpus();
  ASSERT_TRUE(r.machine.util_balance.quality.has_value());
  EXPECT_EQ(*r.machine.util_balance.quality, BalanceClass::kPoor);
}

TEST(PngRender, RefusesToOverwriteWithoutForce) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  std::string dir = tmp.path().string();
  std::ofstream(tmp.Sub("memory.png")) << "mine";
  auto refused = WritePngFigures(r.machine, r.series, dir, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find(tmp.Sub("memory.png")), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("--force"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.Sub("utilization.png")));  // checked before anything is written
  EXPECT_EQ(fs::file_size(tmp.Sub("memory.png")), 4u);

  auto forced = WritePngFigures(r.machine, r.series, dir, true);
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  ExpectDrawn(tmp.Sub("memory.png"));
}

TEST(PngRender, NoGpuDrawsHostCpuAndSkipsTheRest) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  r.machine.gpus.clear();
  r.machine.util_balance = {};
  r.machine.memory_balance = {};
  auto out = WritePngFigures(r.machine, r.series, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->written.size(), 1u);
  ExpectDrawn(out->written[0]);
  ASSERT_EQ(out->skipped.size(), 2u);
  EXPECT_EQ(out->skipped[0], "memory.png: no GPU in the recording");
  EXPECT_EQ(out->skipped[1], "load_balance.png: no GPU in the recording");
  EXPECT_FALSE(fs::exists(tmp.Sub("memory.png")));
}

TEST(PngRender, NothingAtAllWritesNothing) {
  TempDir tmp("png_render");
  std::string dir = tmp.Sub("never");
  auto out = WritePngFigures({}, {}, dir, false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(out->written.empty());
  EXPECT_EQ(out->skipped.size(), 3u);
  EXPECT_FALSE(fs::exists(dir));
}

TEST(PngRender, GpuWithoutSamplesStillDraws) {
  TempDir tmp("png_render");
  analysis::RecordingSummary m;
  m.gpus.push_back({});  // a GPU that never answered: no series, no statistics
  auto out = WritePngFigures(m, {}, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->written.size(), 3u);
  for (const auto& p : out->written) EXPECT_EQ(Decode(p).width, kPngWidthPx);
}

TEST(PngRender, HostileGpuNamesDoNotCrash) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  r.machine.gpus[0].name = std::string(10000, 'W');
  r.machine.gpus[1].name = std::string("A\x01\x1b[31m\n\t\xff\xfe\xc3(B\x7f", 14);
  r.machine.gpus[2].name = std::string("\0\0\0", 3);
  r.machine.gpus[3].name = "\xe2\x82";  // a cut UTF-8 sequence
  auto out = WritePngFigures(r.machine, r.series, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (const auto& p : out->written) ExpectDrawn(p);
}

TEST(PngRender, NonFiniteValuesDrawWithoutCairoErrors) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  r.series[0].points[5] = {nan, 50};
  r.series[0].points[6] = {7, inf};
  r.series[0].points.push_back({1e300, -1e300});
  r.machine.gpus[0].memory_total_mib = inf;
  r.machine.gpus[1].memory_total_mib = nan;
  r.machine.gpus[2].memory_used_mib.Add(1e308);
  r.machine.gpus[2].memory_used_mib.Add(1e308);  // the mean overflows: inf
  r.machine.gpus[3].util_pct.Add(nan);
  auto out = WritePngFigures(r.machine, r.series, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (const auto& p : out->written) ExpectDrawn(p);
}

TEST(PngRender, ManyGpusDraw) {
  TempDir tmp("png_render");
  FakeRun r = FourGpus();
  for (uint32_t g = 4; g < 64; ++g) {
    r.machine.gpus.push_back(r.machine.gpus[g % 4]);
    r.machine.gpus.back().index = g;
  }
  auto out = WritePngFigures(r.machine, r.series, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (const auto& p : out->written) ExpectDrawn(p);
}

TEST(PngRender, UnwritableDirectoryNamesThePath) {
  TempDir tmp("png_render");
  std::ofstream(tmp.Sub("file")) << "x";
  std::string dir = tmp.Sub("file/figs");  // a parent that is a file
  auto out = WritePngFigures(FourGpus().machine, {}, dir, false);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find(dir), std::string::npos) << out.error().message;
}

diagnose::RunReport RecordedRun() {
  auto data =
      rundir::LoadRun(std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/gpu_throttled");
  EXPECT_TRUE(data.ok()) << data.error().message;
  return data.ok() ? diagnose::BuildRunReport(*data) : diagnose::RunReport{};
}

// A real run directory through diagnose::BuildRunReport, as `--png` will feed it.
TEST(PngRender, RunReportOfARecordedRun) {
  TempDir tmp("png_render");
  diagnose::RunReport report = RecordedRun();
  ASSERT_FALSE(report.machine.gpus.empty());
  auto out = WritePngFigures(report.machine, report.series, tmp.path().string(), false);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->written.size(), 3u);
  for (const auto& p : out->written) ExpectDrawn(p);
}

// Review aid, not a check: STALLSCOPE_PNG_REVIEW_DIR=/some/dir writes the 4-GPU
// figures there, and those of tests/data/runs/gpu_throttled under recorded/.
TEST(PngRender, WriteForReview) {
  const char* dir = std::getenv("STALLSCOPE_PNG_REVIEW_DIR");
  if (dir == nullptr) GTEST_SKIP() << "set STALLSCOPE_PNG_REVIEW_DIR to look at the figures";
  FakeRun r = FourGpus();
  auto out = WritePngFigures(r.machine, r.series, dir, true);
  ASSERT_TRUE(out.ok()) << out.error().message;
  diagnose::RunReport rec = RecordedRun();
  auto recorded = WritePngFigures(rec.machine, rec.series, std::string(dir) + "/recorded", true);
  ASSERT_TRUE(recorded.ok()) << recorded.error().message;
}

// cairo and fontconfig keep font caches for the process's life; LeakSanitizer in the CI's ASan
// build reports them unless they are dropped at exit (cairo's debug call, then FcFini).
class CairoStaticData : public ::testing::Environment {
 public:
  void TearDown() override {
    cairo_debug_reset_static_data();
    FcFini();
  }
};
const auto* const kCairoStaticData = ::testing::AddGlobalTestEnvironment(new CairoStaticData);

struct LabelCase {
  std::string in;
  size_t max;
  std::string want;
};

TEST(PngRender, PngLabel) {
  const LabelCase cases[] = {
      {"NVIDIA A10G", 40, "NVIDIA A10G"},
      {"", 40, ""},
      {"abcdefgh", 5, "ab..."},
      {"abcdefgh", 8, "abcdefgh"},
      {"abcdefgh", 2, ".."},
      {"abc", 0, ""},
      {std::string("a\0b", 3), 40, "a?b"},
      {"tab\there\n", 40, "tab?here?"},
      {"\xc3\xa9t\xc3\xa9", 40, "??t??"},
  };
  for (const auto& c : cases) EXPECT_EQ(PngLabel(c.in, c.max), c.want) << c.in;
}

}  // namespace
}  // namespace stallscope::report
