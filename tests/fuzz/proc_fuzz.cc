// /proc, cgroup v2 and sysfs parsers (src/host/proc_parse.h): the first byte picks the parser,
// the rest is the file's text.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "host/proc_parse.h"

namespace {

namespace fs = std::filesystem;
namespace host = stallscope::host;

enum Parser : uint8_t {
  kProcStat,
  kMeminfo,
  kLoadavg,
  kPressure,
  kDiskstats,
  kCpuMax,
  kMemoryMax,
  kCgroup,
  kCpuList,
  kPidStat,
  kPidList,
  kCmdline,
  kFields,  // FindU64Field: /proc/PID/io, /proc/PID/status, cgroup cpu.stat
  kCount,
};

// Which parser reads a fixture, by its path under tests/data/{proc,cgroup}.
std::optional<Parser> ParserFor(const fs::path& path) {
  std::string name = path.filename().string();
  std::string parent = path.parent_path().filename().string();
  bool in_pid_dir = !parent.empty() && parent.find_first_not_of("0123456789") == std::string::npos;
  if (name == "stat") return in_pid_dir ? kPidStat : kProcStat;
  if (name == "meminfo") return kMeminfo;
  if (name == "loadavg") return kLoadavg;
  if (parent == "pressure") return kPressure;
  if (name == "diskstats") return kDiskstats;
  if (name == "cpu.max") return kCpuMax;
  if (name == "memory.max") return kMemoryMax;
  if (name == "cgroup") return kCgroup;
  if (name == "cmdline") return kCmdline;
  if (name == "io" || name == "status" || name == "cpu.stat") return kFields;
  return std::nullopt;
}

void WriteSeeds(const std::string& dir) {
  int n = 0;
  for (const char* root : {"/tests/data/proc", "/tests/data/cgroup"}) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(STALLSCOPE_SOURCE_DIR + std::string(root), ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::optional<Parser> parser = ParserFor(it->path());
      if (!it->is_regular_file() || !parser) continue;
      std::string text = stallscope::fuzz::ReadPrefix(it->path(), 8 * 1024);
      stallscope::fuzz::WriteSeed(dir, std::to_string(n++), static_cast<char>(*parser) + text);
    }
  }
  stallscope::fuzz::WriteSeed(dir, "cpulist", std::string(1, kCpuList) + "0-3,8,10-11\n");
  stallscope::fuzz::WriteSeed(dir, "pidlist", std::string(1, kPidList) + "123 456 ");
}

void Parse(Parser parser, std::string_view text) {
  switch (parser) {
    case kProcStat: {
      host::ProcStat stat;
      host::ParseProcStat(text, stat);
      break;
    }
    case kMeminfo:
      (void)host::ParseMeminfo(text);
      break;
    case kLoadavg:
      (void)host::ParseLoadavg(text);
      break;
    case kPressure:
      (void)host::ParsePressure(text);
      break;
    case kDiskstats: {
      size_t pos = 0;
      while (auto line = host::NextLine(text, pos)) {
        if (auto disk = host::ParseDiskstatsLine(*line)) {
          (void)host::IsVirtualDiskName(disk->name);
          (void)host::LooksLikePartitionName(disk->name);
        }
      }
      break;
    }
    case kCpuMax:
      (void)host::ParseCpuMax(text);
      break;
    case kMemoryMax:
      (void)host::ParseMemoryMax(text);
      break;
    case kCgroup:
      (void)host::ParseCgroupV2Path(text);
      break;
    case kCpuList: {
      std::vector<uint32_t> cpus;
      (void)host::ParseCpuList(text, cpus);
      break;
    }
    case kPidStat:
      (void)host::ParsePidStat(text);
      break;
    case kPidList: {
      std::vector<int32_t> pids;
      (void)host::AppendPidList(text, pids);
      break;
    }
    case kCmdline: {
      std::string out;
      host::JoinCmdline(text, out);
      break;
    }
    case kFields:
      for (std::string_view key : {"read_bytes", "VmRSS", "nr_throttled", "Cpus_allowed_list"})
        (void)host::FindU64Field(text, key);
      break;
    case kCount:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // A copy of exactly the text: ASan then sees a read past its end.
  std::vector<char> text(data + 1, data + size);
  Parse(static_cast<Parser>(data[0] % kCount), {text.data(), text.size()});
  return 0;
}
