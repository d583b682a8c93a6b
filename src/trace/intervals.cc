#include "trace/intervals.h"

#include <algorithm>

#include "trace/huge_pages.h"

namespace stallscope::trace {

void NormalizeIntervals(IntervalSet& intervals) {
  auto by_begin = [](const Interval& a, const Interval& b) { return a.begin_ns < b.begin_ns; };
  if (!std::is_sorted(intervals.begin(), intervals.end(), by_begin)) {
    std::sort(intervals.begin(), intervals.end(), by_begin);
  }
  size_t out = 0;
  for (const Interval& iv : intervals) {
    if (iv.end_ns <= iv.begin_ns) continue;  // empty, or inverted by HTA rounding
    if (out > 0 && iv.begin_ns <= intervals[out - 1].end_ns) {
      intervals[out - 1].end_ns = std::max(intervals[out - 1].end_ns, iv.end_ns);
    } else {
      intervals[out++] = iv;
    }
  }
  intervals.resize(out);
}

int64_t TotalNs(const IntervalSet& set) {
  int64_t total = 0;
  for (const Interval& iv : set) total += iv.end_ns - iv.begin_ns;
  return total;
}

int64_t OverlapNs(const IntervalSet& set, int64_t begin_ns, int64_t end_ns) {
  if (end_ns <= begin_ns) return 0;
  auto it = std::partition_point(set.begin(), set.end(),
                                 [&](const Interval& iv) { return iv.end_ns <= begin_ns; });
  int64_t total = 0;
  for (; it != set.end() && it->begin_ns < end_ns; ++it) {
    total += std::min(it->end_ns, end_ns) - std::max(it->begin_ns, begin_ns);
  }
  return total;
}

void IntersectIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  // At most one member per input member (no regrowth, no copy faults).
  ReserveHuge(out, a.size() + b.size());
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t begin = std::max(a[i].begin_ns, b[j].begin_ns);
    int64_t end = std::min(a[i].end_ns, b[j].end_ns);
    if (begin < end) out.push_back({begin, end});
    // Advance whichever ends first; the other may still overlap the next member.
    if (a[i].end_ns < b[j].end_ns) {
      ++i;
    } else {
      ++j;
    }
  }
}

void SubtractIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  ReserveHuge(out, a.size() + b.size());  // as above
  size_t j = 0;
  for (const Interval& iv : a) {
    int64_t cursor = iv.begin_ns;
    while (j < b.size() && b[j].end_ns <= cursor) ++j;
    // b[j..] may cut this member several times; do not advance j past members that reach
    // beyond it (they may cut the next member of a too).
    size_t k = j;
    while (k < b.size() && b[k].begin_ns < iv.end_ns) {
      if (b[k].begin_ns > cursor) out.push_back({cursor, b[k].begin_ns});
      cursor = std::max(cursor, b[k].end_ns);
      if (cursor >= iv.end_ns) break;
      ++k;
    }
    if (cursor < iv.end_ns) out.push_back({cursor, iv.end_ns});
  }
}

void UniteIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out) {
  out.clear();
  ReserveHuge(out, a.size() + b.size());  // as above
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() || j < b.size()) {
    const Interval& next =
        (j >= b.size() || (i < a.size() && a[i].begin_ns <= b[j].begin_ns)) ? a[i++] : b[j++];
    if (!out.empty() && next.begin_ns <= out.back().end_ns) {
      out.back().end_ns = std::max(out.back().end_ns, next.end_ns);
    } else {
      out.push_back(next);
    }
  }
}

}  // namespace stallscope::trace
