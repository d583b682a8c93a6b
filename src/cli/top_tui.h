#pragma once

#include <cstdint>
#include <functional>

#include "report/top_screen.h"

namespace stallscope::cli {

/// The ncurses layer of the full-screen `stallscope top`: keys, resizes and painting. What is
/// drawn comes from report::RenderTopScreen; this file only maps its rows onto the terminal.
struct TopTuiHooks {
  /// Called every `interval_ns` (and once at the start) while not paused: take a sample into the
  /// model. Always called, paused or not, so rates stay right; the display freezes when paused.
  std::function<void(report::TopModel&)> refresh;
  /// Whether a termination signal (SIGINT, SIGTERM, SIGHUP) arrived; polled between keys.
  std::function<bool()> stop_requested;
};

/// Runs the full-screen UI on the terminal until `q` or a termination signal. Keys: q quit,
/// p pause, s sort, h help; the terminal may be resized at any time. Returns the exit code
/// (0; 1 when the terminal cannot be set up, with a message on stderr).
int RunTopTui(report::TopModel& model, int64_t interval_ns, const TopTuiHooks& hooks);

}  // namespace stallscope::cli
