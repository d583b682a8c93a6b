#include "experiment/launcher.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "rundir/run_dir.h"

namespace stallscope::experiment {
namespace {

std::string_view Base(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool IsPython(std::string_view word) {
  std::string_view b = Base(word);
  if (!b.starts_with("python")) return false;
  return std::all_of(b.begin() + 6, b.end(),
                     [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

/// "--nproc-per-node=4" → "--nproc_per_node": the option's name, '-' inside it read as '_'
/// (torchrun and accelerate accept both spellings).
std::string OptionName(std::string_view word) {
  std::string name(word.substr(0, word.find('=')));
  for (size_t i = 2; i < name.size(); ++i) {
    if (name[i] == '-') name[i] = '_';
  }
  return name;
}

/// How one launcher's options read.
struct LauncherSpec {
  std::string_view name;
  std::string_view count_option;        ///< normalised (OptionName)
  std::vector<std::string_view> flags;  ///< options without a value, normalised
  std::string_view nodes_option;        ///< "--nnodes", "--num_machines"
};

const LauncherSpec kTorchrun{"torchrun",
                             "--nproc_per_node",
                             {"--standalone", "--no_python", "--run_path", "-m", "--module"},
                             "--nnodes"};
const LauncherSpec kAccelerate{
    "accelerate launch",
    "--num_processes",
    {"--cpu", "--multi_gpu", "--tpu", "--ipex", "--use_xpu", "--use_deepspeed", "--use_fsdp",
     "--use_megatron_lm", "-m", "--module", "--no_python", "--debug", "-q", "--quiet",
     "--same_network", "--downcast_bf16", "--enable_cpu_affinity", "--dynamo_use_fullgraph",
     "--dynamo_use_dynamic"},
    "--num_machines"};
const LauncherSpec kExampleLaunch{"examples/launch.py", "--nproc_per_node", {"-m"}, "--nnodes"};

std::string ByHand(const std::vector<std::string>& command) {
  return fmt::format(
      "; run it by hand with each count, e.g. `stallscope run --out runs/1 -- torchrun "
      "--nproc_per_node 1 train.py` and `... --out runs/N -- torchrun --nproc_per_node N "
      "train.py`, then `stallscope compare runs/1 runs/N` (recognised: torchrun, python -m "
      "torch.distributed.run, accelerate launch, examples/launch.py --nproc-per-node N; "
      "the command was `{}`)",
      rundir::ShellJoin(command));
}

Error CannotChange(const std::vector<std::string>& command, std::string_view why) {
  return MakeError(ErrorCode::kInvalidArgument,
                   "cannot change the process count of this command: {}{}", why, ByHand(command));
}

/// Scans the launcher's options from `begin` to its first positional word (the script).
Result<Launcher> ScanOptions(const std::vector<std::string>& command, const LauncherSpec& spec,
                             size_t begin) {
  Launcher l;
  l.name = std::string(spec.name);
  l.option = std::string(spec.count_option);
  l.options_begin = begin;
  for (size_t i = begin; i < command.size();) {
    const std::string& w = command[i];
    if (w == "--" || w.size() < 2 || w[0] != '-') break;
    const std::string name = OptionName(w);
    const bool has_inline = w.find('=') != std::string::npos;
    const bool flag = std::find(spec.flags.begin(), spec.flags.end(), name) != spec.flags.end();
    const std::string value = has_inline ? w.substr(w.find('=') + 1)
                                         : (!flag && i + 1 < command.size() ? command[i + 1] : "");
    if (name == "--multi_gpu" && spec.count_option == kAccelerate.count_option) {
      l.multi_gpu_at.push_back(i);
    } else if (name == spec.count_option) {
      l.at = i;
      l.inline_value = has_inline;
      l.given = value;
    } else if (name == spec.nodes_option && value != "1" && value != "1:1") {
      return CannotChange(command, fmt::format("it is a multi-node job ({} {}); run the passes "
                                               "on one node with {} 1",
                                               w.substr(0, w.find('=')), value, spec.nodes_option));
    }
    i += has_inline || flag ? 1 : 2;
  }
  return l;
}

}  // namespace

Result<std::vector<int>> ParseProcessCounts(std::string_view text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    int n = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || n < 1 ||
        n > 1024) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--ranks {}: '{}' is not a process count from 1 to 1024 (e.g. --ranks 1,8)",
                       text, item);
    }
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    start = comma + 1;
  }
  if (out.size() < 2) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--ranks {}: give two or more different counts, e.g. --ranks 1,8", text);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Launcher> RecogniseLauncher(const std::vector<std::string>& command) {
  if (command.empty()) return CannotChange(command, "it is empty");
  const std::string_view first = Base(command[0]);
  if (first == "torchrun") return ScanOptions(command, kTorchrun, 1);
  if (first == "accelerate") {
    if (command.size() > 1 && command[1] == "launch") return ScanOptions(command, kAccelerate, 2);
    return CannotChange(command, "accelerate without `launch`");
  }
  if (IsPython(command[0])) {
    // The interpreter's own options, then `-m MODULE` or the script.
    for (size_t i = 1; i < command.size(); ++i) {
      const std::string& w = command[i];
      if (w == "-m" && i + 1 < command.size()) {
        const std::string& module = command[i + 1];
        if (module == "torch.distributed.run" || module == "torch.distributed.launch") {
          auto l = ScanOptions(command, kTorchrun, i + 2);
          if (l.ok()) l->name = "python -m " + module;
          return l;
        }
        if (module == "accelerate.commands.launch") {
          auto l = ScanOptions(command, kAccelerate, i + 2);
          if (l.ok()) l->name = "python -m " + module;
          return l;
        }
        break;
      }
      if (w == "-c") break;
      if (w == "-X" || w == "-W") {
        ++i;
        continue;
      }
      if (w.starts_with("-")) continue;
      if (Base(w) == "launch.py") {
        auto l = ScanOptions(command, kExampleLaunch, i + 1);
        if (l.ok() && !l->at) {
          return CannotChange(command,
                              "a launch.py without --nproc-per-node (stallscope recognises its "
                              "own examples/launch.py by that option)");
        }
        return l;
      }
      break;
    }
  }
  return CannotChange(command, "it is not a launcher stallscope knows");
}

Result<std::vector<std::string>> WithProcessCount(const std::vector<std::string>& command, int n) {
  TRY(Launcher l, RecogniseLauncher(command));
  std::vector<std::string> out = command;
  if (!l.at) {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(l.options_begin),
               {l.option, std::to_string(n)});
  } else if (l.inline_value) {
    const std::string& w = out[*l.at];
    out[*l.at] = w.substr(0, w.find('=') + 1) + std::to_string(n);
  } else if (*l.at + 1 < out.size()) {
    out[*l.at + 1] = std::to_string(n);
  } else {
    out.push_back(std::to_string(n));
  }
  if (n == 1) {
    // Indices of the command as given: the count option added (2 words) sits before them.
    const size_t shift = l.at ? 0 : 2;
    for (auto it = l.multi_gpu_at.rbegin(); it != l.multi_gpu_at.rend(); ++it)
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(*it + shift));
  }
  return out;
}

}  // namespace stallscope::experiment
