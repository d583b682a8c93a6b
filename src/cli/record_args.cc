#include "cli/record_args.h"

#include <charconv>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "base/thresholds.h"

namespace stallscope::cli {
namespace {

constexpr OptionSpec kRecord[] = {
    {.names = "-i,--interval",
     .help = "Sampling interval, 50ms or more",
     .default_value = "1s",
     .text = [](RecordOptions& o) { return &o.interval; }},
    {.names = "-o,--output",
     .help = "Output file ('-' for stdout; default stallscope-record-<time>.jsonl)",
     .default_value = nullptr,
     .text = [](RecordOptions& o) { return &o.output; }},
    {.names = "--duration",
     .help = "Stop recording after this long (e.g. 60s, 10m)",
     .default_value = nullptr,
     .text = [](RecordOptions& o) { return &o.duration; }},
    {.names = "--csv",
     .help = "Write CSV (one row per sample) instead of JSON Lines",
     .default_value = nullptr,
     .flag = [](RecordOptions& o) { return &o.csv; }},
    {.names = "--format",
     .help = "jsonl (default), csv (as --csv), or seed: seed 002's GPU monitor objects, the "
             "legacy single-GPU form for one GPU, the multi-GPU form otherwise",
     .default_value = nullptr,
     .text = [](RecordOptions& o) { return &o.format; }},
    {.names = "--pid",
     .help = "Follow the process tree of this PID",
     .default_value = nullptr,
     .min_value = 1,
     .number = [](RecordOptions& o) { return &o.pid; }},
    {.names = "--force",
     .help = "Replace the output file if it exists",
     .default_value = nullptr,
     .flag = [](RecordOptions& o) { return &o.force; }},
};

constexpr OptionSpec kSampling[] = {
    {.names = "--nvml-lib",
     .help = "Path of libnvidia-ml.so to load (default: $STALLSCOPE_NVML_LIB, then "
             "libnvidia-ml.so.1, then libnvidia-ml.so)",
     .default_value = nullptr,
     .sampling = [](SamplingOptions& o) { return &o.nvml_lib; }},
    {.names = "--proc-root",
     .help = "Root of the proc filesystem (for tests)",
     .default_value = "/proc",
     .sampling = [](SamplingOptions& o) { return &o.proc_root; }},
    {.names = "--pcie",
     .help = "Also read PCIe throughput (nvmlDeviceGetPcieThroughput blocks 20 ms per "
             "direction: on its own thread, every 5 s; GPM gives it without blocking on Hopper)",
     .default_value = nullptr,
     .sampling_flag = [](SamplingOptions& o) { return &o.pcie; }},
    {.names = "--no-gpm",
     .help = "Do not read GPM metrics (SM active, tensor, DRAM; Hopper and later)",
     .default_value = nullptr,
     .sampling_flag = [](SamplingOptions& o) { return &o.no_gpm; }},
    {.names = "--gpm-interval",
     .help = "Read GPM metrics this often (e.g. 500ms; default: every 2 s or more, by cost)",
     .default_value = nullptr,
     .sampling = [](SamplingOptions& o) { return &o.gpm_interval; }},
};

constexpr OptionSpec kDemo[] = {
    {.names = "--demo",
     .help = "Sample stallscope's demo GPUs, not NVIDIA's driver: a fake NVML shipped with "
             "stallscope (two made-up GPUs named DEMO, under a changing load), to try the GPU "
             "views on a machine without a GPU",
     .default_value = nullptr,
     .sampling_flag = [](SamplingOptions& o) { return &o.demo; }},
};

/// Whether `arg` ("-i", "--interval") is one of the comma-separated `names`.
bool Names(const OptionSpec& spec, std::string_view arg) {
  std::string_view names = spec.names;
  while (!names.empty()) {
    const size_t comma = names.find(',');
    if (names.substr(0, comma) == arg) return true;
    if (comma == std::string_view::npos) break;
    names.remove_prefix(comma + 1);
  }
  return false;
}

/// CLI11's int32 conversion for the plain decimal forms; anything else is left to CLI11.
std::optional<int32_t> PlainInt32(std::string_view text) {
  int32_t value = 0;
  const char* end = text.data() + text.size();
  if (text.empty() || text.front() == '+') return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace

std::span<const OptionSpec> RecordOptionSpecs() { return kRecord; }

std::string PollingHelp() {
  const ThresholdSet& t = kThresholds;
  auto range = [](const Threshold& lo, const Threshold& hi) {
    return fmt::format("{:g}-{:g} s", lo.value, hi.value);
  };
  return fmt::format(
      "GPU fields are read by cost (a real driver answers most in 2-20 us, a few in 2-4 ms):\n"
      "  every sample   utilization, memory, power, temperature, clocks, clock events, "
      "processes\n"
      "  {:<14} the driver's sub-second utilization buffer (nothing is lost)\n"
      "  {:<14} energy\n"
      "  {:<14} per-process utilization, while the GPU has processes\n"
      "  {:<14} PCIe link generation and width, ECC counts\n"
      "  {:<14} GPM: SM active, occupancy, tensor, DRAM, PCIe/NVLink bytes (Hopper+)\n"
      "  only --pcie    PCIe throughput, every {:g} s on its own thread\n"
      "A period stretches within its range to keep its measured CPU cost in budget "
      "(thresholds poll_*); the recording's header (gpu_polling) gives those used.\n",
      range(t.poll_util_buffer_s, t.poll_util_buffer_max_s),
      range(t.poll_energy_s, t.poll_energy_max_s),
      range(t.poll_process_util_s, t.poll_process_util_max_s),
      fmt::format("{:g} s", t.poll_slow_s.value), range(t.poll_gpm_s, t.poll_gpm_max_s),
      t.poll_pcie_s.value);
}
std::span<const OptionSpec> SamplingOptionSpecs() { return kSampling; }
std::span<const OptionSpec> DemoOptionSpecs() { return kDemo; }

std::optional<RecordOptions> ParseRecordArgs(int argc, const char* const* argv) {
  if (argc < 2 || std::string_view(argv[1]) != "record") return std::nullopt;
  RecordOptions o;
  std::string seen;  // names of the options given, each once ('\n'-separated)
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) o.command.emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') return std::nullopt;  // a command without `--`
    std::optional<std::string_view> value;
    if (arg[1] == '-') {
      if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.size() != 2) {
      return std::nullopt;  // -i100ms, -abc: CLI11's short forms
    }
    const OptionSpec* spec = nullptr;
    for (std::span<const OptionSpec> table :
         {RecordOptionSpecs(), SamplingOptionSpecs(), DemoOptionSpecs()}) {
      for (const OptionSpec& s : table) {
        if (Names(s, arg)) spec = &s;
      }
    }
    if (spec == nullptr) return std::nullopt;  // --help, -h, a typo
    const std::string key = std::string(spec->names) + "\n";
    if (seen.find(key) != std::string::npos) return std::nullopt;
    seen += key;
    if (spec->flag != nullptr || spec->sampling_flag != nullptr) {
      if (value) return std::nullopt;  // --csv=true
      *(spec->flag != nullptr ? spec->flag(o) : spec->sampling_flag(o.sampling)) = true;
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) return std::nullopt;
      value = argv[++i];
      if (!value->empty() && value->front() == '-' && *value != "-") return std::nullopt;
    }
    if (value->empty()) return std::nullopt;
    if (spec->number != nullptr) {
      auto n = PlainInt32(*value);
      if (!n || *n < spec->min_value) return std::nullopt;  // CLI11 says why
      *spec->number(o) = *n;
    } else if (spec->text != nullptr) {
      spec->text(o)->assign(*value);
    } else {
      spec->sampling(o.sampling)->assign(*value);
    }
  }
  return o;
}

}  // namespace stallscope::cli
