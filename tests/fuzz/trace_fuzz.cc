// Trace reader (src/trace/trace_reader.h): the input is a trace file as-is, so the gzip magic
// (1f 8b) takes the inflate path and anything else the JSON path. Small chunks, so that the
// chunk boundary and buffer growth code runs on small inputs too.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "trace/trace_reader.h"

namespace {

namespace fs = std::filesystem;
using stallscope::fuzz::ReadPrefix;
using stallscope::fuzz::WriteSeed;

constexpr size_t kSeedBytes = 8 * 1024;

std::string Gzip(std::string_view bytes) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 16: gzip wrapper
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// tests/data/traces/*.json, each also gzipped; the start of real traces in
// $STALLSCOPE_FUZZ_TRACES (default /tmp/shared/traces, when there), gzip or not, cut to 8 KiB.
void WriteSeeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/traces", ec)) {
    if (e.path().extension() != ".json") continue;
    std::string bytes = ReadPrefix(e.path(), kSeedBytes);
    WriteSeed(dir, e.path().filename().string(), bytes);
    WriteSeed(dir, e.path().filename().string() + ".gz", Gzip(bytes));
  }
  const char* extra = std::getenv("STALLSCOPE_FUZZ_TRACES");
  int n = 0;
  for (auto it = fs::recursive_directory_iterator(extra ? extra : "/tmp/shared/traces", ec);
       it != fs::recursive_directory_iterator() && n < 8; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.find(".json") == std::string::npos) continue;
    WriteSeed(dir, "real_" + std::to_string(n++) + "_" + name, ReadPrefix(it->path(), kSeedBytes));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = stallscope::fuzz::ScratchDir() + "/rank3.json";
  stallscope::fuzz::WriteFile(path, {reinterpret_cast<const char*>(data), size});
  stallscope::trace::ReadOptions options;
  options.chunk_bytes = 256;
  options.threaded_inflate = false;
  auto trace = stallscope::trace::ReadTrace(path, options);
  if (trace.ok()) stallscope::trace::MarkCudaGraphKernels(*trace);
  return 0;
}
