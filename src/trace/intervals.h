#pragma once

#include <cstdint>
#include <vector>

namespace stallscope::trace {

// ---------------------------------------------------------------------------------------------
// Interval sets: sorted, disjoint, non-empty half-open [begin_ns, end_ns) ranges. The building
// block of the step breakdown and of the GPU idle attribution (sort + sweep, all linear merges).

/// A half-open time range [begin_ns, end_ns), ns.
struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

/// A union of intervals: sorted by begin, disjoint, no empty members.
using IntervalSet = std::vector<Interval>;

/// Turns arbitrary intervals (any order, overlapping, empty or inverted ones) into their union,
/// in place. O(n) when already sorted by begin, else O(n log n). Allocates nothing.
void NormalizeIntervals(IntervalSet& intervals);

/// Total length of a normalized set, ns.
[[nodiscard]] int64_t TotalNs(const IntervalSet& set);

/// Length of `set` ∩ [begin_ns, end_ns), ns. O(log n + overlapping members).
[[nodiscard]] int64_t OverlapNs(const IntervalSet& set, int64_t begin_ns, int64_t end_ns);

/// out = a ∩ b (both normalized). `out` is cleared first; must not alias a or b.
void IntersectIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

/// out = a \ b (both normalized). `out` is cleared first; must not alias a or b.
void SubtractIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

/// out = a ∪ b (both normalized). `out` is cleared first; must not alias a or b.
void UniteIntervals(const IntervalSet& a, const IntervalSet& b, IntervalSet& out);

}  // namespace stallscope::trace
