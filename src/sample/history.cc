#include "sample/history.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stallscope::sample {

History::History(size_t capacity) : capacity_(std::max<size_t>(capacity, 4)) {
  points_.reserve(capacity_);
}

void History::Add(int64_t t_ns, double value) {
  if (points_.size() == capacity_) Compact();
  points_.push_back({t_ns, t_ns, 1, value, value, value});
  ++total_;
}

void History::Compact() {
  // Merge pairs in the older half: [0, half) becomes half/2 points; the newer half shifts down.
  size_t half = capacity_ / 2;
  size_t out = 0;
  for (size_t i = 0; i + 1 < half; i += 2) {
    const HistoryPoint& a = points_[i];
    const HistoryPoint& b = points_[i + 1];
    HistoryPoint m;
    m.t_begin_ns = a.t_begin_ns;
    m.t_end_ns = b.t_end_ns;
    m.count = a.count + b.count;
    m.mean = (a.mean * a.count + b.mean * b.count) / m.count;
    m.min = std::min(a.min, b.min);
    m.max = std::max(a.max, b.max);
    points_[out++] = m;
  }
  if (half % 2 == 1) points_[out++] = points_[half - 1];
  for (size_t i = half; i < points_.size(); ++i) points_[out++] = points_[i];
  points_.resize(out);
}

double History::MeanOfLast(size_t n) const {
  n = std::min(n, points_.size());
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (size_t i = points_.size() - n; i < points_.size(); ++i) sum += points_[i].mean;
  return sum / static_cast<double>(n);
}

}  // namespace stallscope::sample
