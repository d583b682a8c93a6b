#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stallscope::sample {

/// One point of a history: an aggregate over [t_begin_ns, t_end_ns] of `count` raw samples.
struct HistoryPoint {
  int64_t t_begin_ns = 0;
  int64_t t_end_ns = 0;
  uint32_t count = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
};

/// A time series with a fixed memory bound for runs of days: the newest half of the capacity
/// keeps full resolution; when full, the older half is merged pairwise (its resolution halves),
/// so older data gets progressively coarser and memory never grows. All storage is allocated
/// once in the constructor: Add() never allocates.
class History {
 public:
  /// `capacity` ≥ 4 points.
  explicit History(size_t capacity);

  /// Appends a raw value at time `t_ns` (non-decreasing).
  void Add(int64_t t_ns, double value);

  /// Points, oldest first.
  const std::vector<HistoryPoint>& points() const { return points_; }
  size_t capacity() const { return capacity_; }
  /// Raw values ever added (also those merged away).
  uint64_t total_added() const { return total_; }

  /// Mean of the last `n` raw-resolution points (fewer if fewer exist); 0 points → nan.
  double MeanOfLast(size_t n) const;

 private:
  void Compact();

  size_t capacity_;
  std::vector<HistoryPoint> points_;
  uint64_t total_ = 0;
};

}  // namespace stallscope::sample
