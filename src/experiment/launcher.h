#pragma once
// Launcher knowledge: torchrun, `python -m torch.distributed.run`, `accelerate launch` and the
// examples' launch.py recognised in a command line, and their process count set
// (`stallscope passes --ranks`).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::experiment {

/// "1,8" → {1, 8}: two or more distinct counts from 1 to 1024, returned ascending.
[[nodiscard]] Result<std::vector<int>> ParseProcessCounts(std::string_view text);

/// The launcher of a command whose process count stallscope can set.
struct Launcher {
  std::string name;    ///< "torchrun", "python -m torch.distributed.run", "accelerate launch", ...
  std::string option;  ///< the option that sets the count: "--nproc_per_node"
  std::optional<size_t> at;   ///< index of that option's word in the command, when given
  bool inline_value = false;  ///< given as "--option=N"
  size_t options_begin = 0;   ///< index of the launcher's first option word
  std::string given;          ///< the value as the command gives it ("" when absent)
  /// accelerate's --multi_gpu words: dropped for 1 process (accelerate refuses the pair).
  std::vector<size_t> multi_gpu_at;
};

/// Recognises torchrun, `python -m torch.distributed.run` (or `.launch`), `accelerate launch`
/// (or `python -m accelerate.commands.launch`) and the examples' launch.py (given
/// --nproc-per-node). The error for any other command, or a multi-node one, begins "cannot
/// change the process count of this command" and says how to run the passes by hand.
[[nodiscard]] Result<Launcher> RecogniseLauncher(const std::vector<std::string>& command);

/// `command` with its launcher's process count set to `n`: the option's value replaced, or the
/// option added as the launcher's first option; for 1 process, accelerate's --multi_gpu is
/// dropped.
[[nodiscard]] Result<std::vector<std::string>> WithProcessCount(
    const std::vector<std::string>& command, int n);

}  // namespace stallscope::experiment
