#pragma once
// The command line before CLI11 reads it (issue 41): where a job's command starts in `run`,
// `passes` and `sweep`, and the command a typo meant.

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::cli {

/// Where the job's command starts among the words after `run`, `passes` or `sweep`.
struct JobStart {
  size_t index = 0;     ///< the job's first word; the words' count when there is no job
  bool dashes = false;  ///< a `--` stands right before it, as the user wrote it
  bool help = false;    ///< -h or --help came before it
};

/// The job's command starts at the first word that is neither one of the command's own options
/// nor an option's value, or right after a `--`; from there on every word is the job's, with or
/// without `--`, as `time`, `nohup` and `torchrun` read their command lines. So
/// `run python train.py --out x` gives `--out x` to the job. `takes_value(name)` says whether
/// the command's option `name` ("--out", "-i") takes a value (false for a flag and for a name
/// the command does not have: CLI11 reports that). `--name=value` and `-iVALUE` are one word.
[[nodiscard]] JobStart FindJobStart(std::span<const std::string> words,
                                    const std::function<bool(std::string_view)>& takes_value);

/// The edit distance of `a` and `b` (optimal string alignment: insertions, deletions,
/// substitutions and transpositions of neighbours cost 1 each), ignoring ASCII case.
[[nodiscard]] size_t EditDistance(std::string_view a, std::string_view b);

/// The names nearest to `typed` ("rnu" → {"run"}), in `names`' order: those at the smallest
/// edit distance, when it is at most 2 and less than the typed word's length; else none.
[[nodiscard]] std::vector<std::string> NearestNames(std::string_view typed,
                                                    std::span<const std::string> names);

}  // namespace stallscope::cli
