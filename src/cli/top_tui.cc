// The ncurses layer of `stallscope top` (issue 14): paints report::RenderTopScreen's rows, reads
// keys, follows SIGWINCH (ncurses turns it into KEY_RESIZE). Kept thin so the screen itself is
// tested without a terminal (report/top_screen_test.cc) and end to end in tmux
// (tests/e2e/top_tui_e2e_test.cc).

#include "cli/top_tui.h"

#include <curses.h>
#include <langinfo.h>
#include <time.h>

#include <algorithm>
#include <clocale>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "base/clock.h"

namespace stallscope::cli {
namespace {

using report::TopAttr;

constexpr int64_t kKeyPollNs = 250'000'000;  // how often a pending signal is noticed at most

/// Colour pairs, one per TopAttr that has a colour; 0 = the terminal's default.
void SetUpColours() {
  if (!has_colors() || std::getenv("NO_COLOR") != nullptr) return;
  start_color();
  use_default_colors();
  init_pair(1, COLOR_CYAN, -1);    // title
  init_pair(2, COLOR_BLUE, -1);    // headers
  init_pair(3, COLOR_GREEN, -1);   // < 50%
  init_pair(4, COLOR_YELLOW, -1);  // < 80%
  init_pair(5, COLOR_RED, -1);     // >= 80%
  init_pair(6, COLOR_RED, -1);     // warnings
}

attr_t AttrOf(TopAttr attr) {
  switch (attr) {
    case TopAttr::kNormal:
      return A_NORMAL;
    case TopAttr::kTitle:
      return A_BOLD | COLOR_PAIR(1);
    case TopAttr::kHeader:
      return A_BOLD | COLOR_PAIR(2);
    case TopAttr::kLow:
      return COLOR_PAIR(3);
    case TopAttr::kMid:
      return COLOR_PAIR(4);
    case TopAttr::kHigh:
      return COLOR_PAIR(5);
    case TopAttr::kDim:
      return A_DIM;
    case TopAttr::kWarn:
      return A_BOLD | COLOR_PAIR(6);
    case TopAttr::kReverse:
      return A_REVERSE;
  }
  return A_NORMAL;
}

void Paint(const std::vector<report::TopRow>& rows) {
  erase();  // into ncurses' buffer only; refresh() sends just the cells that changed
  for (size_t y = 0; y < rows.size(); ++y) {
    move(static_cast<int>(y), 0);
    for (const auto& span : rows[y].spans) {
      attrset(AttrOf(span.attr));
      addstr(span.text.c_str());  // may stop at the right margin: the row was sized for it
    }
  }
  attrset(A_NORMAL);
  refresh();
}

/// Applies a key to the view; returns false for quit.
bool OnKey(int ch, report::TopView& view) {
  if (view.help && ch != ERR && ch != KEY_RESIZE) {
    view.help = false;  // any key closes the help
    return ch != 'q' && ch != 'Q';
  }
  switch (ch) {
    case 'q':
    case 'Q':
      return false;
    case 'p':
    case 'P':
    case ' ':
      view.paused = !view.paused;
      break;
    case 's':
    case 'S':
      view.sort =
          static_cast<report::TopSort>((static_cast<int>(view.sort) + 1) % report::kTopSortCount);
      break;
    case 'h':
    case 'H':
    case '?':
      view.help = true;
      break;
    default:
      break;
  }
  return true;
}

}  // namespace

int RunTopTui(report::TopModel& model, int64_t interval_ns, const TopTuiHooks& hooks) {
  std::setlocale(LC_ALL, "");  // ncursesw draws UTF-8 only under a UTF-8 locale
  report::TopView view;
  view.unicode = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  if (newterm(nullptr, stdout, stdin) == nullptr) {
    fmt::print(stderr, "stallscope top: cannot drive this terminal (TERM={}); try --plain\n",
               std::getenv("TERM") ? std::getenv("TERM") : "unset");
    return 1;
  }
  cbreak();
  noecho();
  nonl();
  keypad(stdscr, TRUE);
  curs_set(0);
  SetUpColours();

  // The model is what was last shown; `live` keeps sampling while paused so rates stay right.
  std::optional<report::TopModel> frozen;
  hooks.refresh(model);
  int64_t next = MonotonicNs() + interval_ns;
  bool running = true;
  bool dirty = true;  // repaint only after a key, a resize or a new sample
  while (running && !hooks.stop_requested()) {
    if (dirty) {
      getmaxyx(stdscr, view.height, view.width);
      Paint(report::RenderTopScreen(frozen ? *frozen : model, view));
      dirty = false;
    }
    const int64_t wait_ns = std::clamp<int64_t>(next - MonotonicNs(), 0, kKeyPollNs);
    timeout(static_cast<int>(wait_ns / 1'000'000));
    const int ch = getch();
    if (ch != ERR) {
      running = OnKey(ch, view);
      dirty = true;
    }
    if (view.paused && !frozen) frozen = model;
    if (!view.paused) frozen.reset();
    if (MonotonicNs() >= next) {
      hooks.refresh(model);
      next = std::max(next + interval_ns, MonotonicNs());
      dirty = dirty || !view.paused;
    }
  }
  endwin();
  return 0;
}

}  // namespace stallscope::cli
