#include "analysis/detect.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <map>
#include <numbers>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "base/stats.h"
#include "base/units.h"
#include "base/vocabulary.h"

namespace stallscope::analysis {
namespace {

using Complex = std::complex<double>;

// Every number that decides an outlier, a period or a loader pattern is in the threshold table
// (base/thresholds.h: outlier_robust_z … loader_pattern_share); only this cost bound is not.
/// DetectPeriod in FindPeriodicPhases looks at no more than this many steps (2^16): bounds its
/// FFTs at 2^17 points (~tens of ms) on million-step runs.
constexpr size_t kMaxPeriodSeriesSteps = size_t{1} << 16;

/// Complex product without the C99 Annex G inf/NaN recovery (GCC calls __muldc3 for
/// std::complex `*` unless -fcx-limited-range): our operands are always finite.
Complex Mul(Complex a, Complex b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

size_t NextPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/// Radix-2 Cooley–Tukey FFT of one power-of-two size, its twiddles computed once and stored
/// per stage (contiguous, so every stage streams them).
class Fft {
 public:
  explicit Fft(size_t n) : n_(n), twiddle_(n > 1 ? n - 1 : 0) {
    // Stage `len` (2, 4, …, n) uses twiddle_[len/2 − 1 + k] = exp(−2πi k/len), k < len/2.
    for (size_t len = 2; len <= n_; len <<= 1) {
      const double angle = -2.0 * std::numbers::pi / static_cast<double>(len);
      for (size_t k = 0; k < len / 2; ++k) {
        twiddle_[len / 2 - 1 + k] = std::polar(1.0, angle * static_cast<double>(k));
      }
    }
  }

  size_t size() const { return n_; }

  /// In place; a.size() must be size(). `inverse` is unnormalised (the caller divides by n).
  void Transform(std::vector<Complex>& a, bool inverse) const {
    for (size_t i = 1, j = 0; i < n_; ++i) {  // bit-reversal permutation
      size_t bit = n_ >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) std::swap(a[i], a[j]);
    }
    // The inverse transform is conj(FFT(conj(a))).
    if (inverse) {
      for (Complex& c : a) c = std::conj(c);
    }
    for (size_t len = 2; len <= n_; len <<= 1) {
      const size_t half = len / 2;
      const Complex* w = &twiddle_[half - 1];
      for (size_t i = 0; i < n_; i += len) {
        for (size_t k = 0; k < half; ++k) {
          const Complex u = a[i + k];
          const Complex v = Mul(a[i + k + half], w[k]);
          a[i + k] = u + v;
          a[i + k + half] = u - v;
        }
      }
    }
    if (inverse) {
      for (Complex& c : a) c = std::conj(c);
    }
  }

 private:
  size_t n_;
  std::vector<Complex> twiddle_;
};

/// |X_k|² of the exact N-point DFT for k = 0..count-1, at the Fourier frequencies k/N for any N,
/// via Bluestein's chirp-z identity nk = (n² + k² − (k−n)²)/2 and radix-2 FFTs of size ≥ 2N−1
/// (Bluestein 1970; Rabiner, Schafer & Rader 1969, "The chirp z-transform algorithm").
std::vector<double> DftPower(const Fft& fft, std::span<const double> x, size_t count) {
  const size_t n = x.size();
  const size_t m = fft.size();
  // chirp[j] = exp(iπ j²/N); j² is reduced mod 2N so the angle stays exact for large N.
  std::vector<Complex> chirp(n);
  for (size_t j = 0; j < n; ++j) {
    const auto sq = static_cast<uint64_t>(j) * j % (2 * static_cast<uint64_t>(n));
    chirp[j] = std::polar(1.0, std::numbers::pi * static_cast<double>(sq) / static_cast<double>(n));
  }
  std::vector<Complex> a(m), b(m);
  for (size_t j = 0; j < n; ++j) a[j] = x[j] * std::conj(chirp[j]);
  b[0] = chirp[0];
  for (size_t j = 1; j < n; ++j) b[j] = b[m - j] = chirp[j];
  fft.Transform(a, false);
  fft.Transform(b, false);
  for (size_t j = 0; j < m; ++j) a[j] = Mul(a[j], b[j]);
  fft.Transform(a, true);
  std::vector<double> power(count);
  const double scale = 1.0 / static_cast<double>(m);
  // |conj(chirp_k) · conv_k| = |conv_k|: the output chirp drops out of the power.
  for (size_t k = 0; k < count && k < n; ++k) power[k] = std::norm(a[k]) * scale * scale;
  return power;
}

/// Σ_t x_t·x_{t+lag} for every lag 0..N−1 (Wiener–Khinchin: inverse FFT of |FFT(x)|², zero-padded
/// to ≥ 2N−1 so the correlation is linear, not circular).
std::vector<double> LaggedProducts(const Fft& fft, std::span<const double> x) {
  const size_t n = x.size();
  std::vector<Complex> a(fft.size());
  for (size_t j = 0; j < n; ++j) a[j] = x[j];
  fft.Transform(a, false);
  for (Complex& c : a) c = std::norm(c);
  fft.Transform(a, true);
  std::vector<double> out(n);
  const double scale = 1.0 / static_cast<double>(a.size());
  for (size_t j = 0; j < n; ++j) out[j] = a[j].real() * scale;
  return out;
}

/// Pearson correlation of x[0, N−lag) with x[lag, N) for any lag in O(1), from the lagged
/// products and prefix sums (seed 003: corrcoef(times[:-lag], times[lag:])).
class LagCorrelation {
 public:
  LagCorrelation(const Fft& fft, std::span<const double> x)
      : products_(LaggedProducts(fft, x)), sum_(x.size() + 1), sum_sq_(x.size() + 1) {
    for (size_t i = 0; i < x.size(); ++i) {
      sum_[i + 1] = sum_[i] + x[i];
      sum_sq_[i + 1] = sum_sq_[i] + x[i] * x[i];
    }
  }

  /// Correlation at `lag` (1 ≤ lag ≤ N−2), 0 when either segment is constant.
  double At(size_t lag) const {
    const size_t n = products_.size();
    const size_t len = n - lag;
    const auto count = static_cast<double>(len);
    const double sum_a = sum_[len];
    const double sum_b = sum_[n] - sum_[lag];
    const double var_a = sum_sq_[len] - sum_a * sum_a / count;
    const double var_b = sum_sq_[n] - sum_sq_[lag] - sum_b * sum_b / count;
    if (var_a <= 0.0 || var_b <= 0.0) return 0.0;
    const double cov = products_[lag] - sum_a * sum_b / count;
    return std::clamp(cov / std::sqrt(var_a * var_b), -1.0, 1.0);
  }

 private:
  std::vector<double> products_;
  std::vector<double> sum_;
  std::vector<double> sum_sq_;
};

/// Lag and correlation of the highest autocorrelation within ±`window` (period_lag_window) of
/// `period`, lags limited to [2, max_lag]; the lag is refined by a parabola through the peak and
/// its neighbours.
std::pair<double, double> RefineByAutocorrelation(const LagCorrelation& acf, double period,
                                                  size_t max_lag, double window) {
  const auto lo = std::max<size_t>(2, static_cast<size_t>(std::floor(period * (1 - window))));
  const auto hi = std::min(max_lag, static_cast<size_t>(std::ceil(period * (1 + window))));
  size_t best = lo;
  double best_r = acf.At(lo);
  for (size_t lag = lo + 1; lag <= hi; ++lag) {
    const double r = acf.At(lag);
    if (r > best_r) best_r = r, best = lag;
  }
  double lag = static_cast<double>(best);
  if (best > 1 && best + 1 <= max_lag) {
    const double left = acf.At(best - 1);
    const double right = acf.At(best + 1);
    const double curvature = left - 2 * best_r + right;
    if (curvature < 0) lag += std::clamp(0.5 * (left - right) / curvature, -0.5, 0.5);
  }
  return {lag, std::max(0.0, best_r)};
}

/// Fourier index of the fundamental behind the periodogram peak `peak`, as a fraction k*/j. A
/// spike train puts equal power on every harmonic, so the peak may be the j-th harmonic of the
/// true period: the lowest sub-harmonic k*/j (j ≥ 2, still ≥ period_min_cycles periods) that
/// carries at least period_subharmonic_power of the peak power is taken as the fundamental
/// ("subharmonic summation", Hermes 1988, JASA 83:257, reduced to a threshold).
double FundamentalIndex(const std::vector<double>& power, size_t peak, const ThresholdSet& t) {
  const auto min_periods = static_cast<size_t>(t.period_min_cycles.value);
  for (size_t j = peak / min_periods; j >= 2; --j) {
    const double k = static_cast<double>(peak) / static_cast<double>(j);
    const auto lo = static_cast<size_t>(std::floor(k));
    const auto hi = static_cast<size_t>(std::ceil(k));
    if (lo < min_periods) continue;
    if (std::max(power[lo], power[hi]) >= t.period_subharmonic_power.value * power[peak]) return k;
  }
  return static_cast<double>(peak);
}

/// Seconds of a step window.
double StepLengthS(const StepRecord& s) { return NsToSeconds(s.end_ns - s.begin_ns); }

/// Per-step time of one phase (0 where the step lacks it).
std::vector<double> PhaseSeries(const RankSteps& rank, const std::string& phase) {
  std::vector<double> out(rank.steps.size(), 0.0);
  for (size_t i = 0; i < rank.steps.size(); ++i) {
    auto it = rank.steps[i].phase_s.find(phase);
    if (it != rank.steps[i].phase_s.end()) out[i] = it->second;
  }
  return out;
}

/// Every phase of a rank as a per-step series, in one pass over the steps.
std::map<std::string, std::vector<double>> AllPhaseSeries(const RankSteps& rank) {
  std::map<std::string, std::vector<double>> out;
  std::unordered_map<std::string, std::vector<double>*> index;
  const size_t n = rank.steps.size();
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [name, seconds] : rank.steps[i].phase_s) {
      auto it = index.find(name);
      if (it == index.end()) {
        std::vector<double>& series = out[name];
        series.assign(n, 0.0);
        it = index.emplace(name, &series).first;
      }
      (*it->second)[i] = seconds;
    }
  }
  return out;
}

double WallSeconds(const RankSteps& rank) {
  if (rank.duration_s > 0) return rank.duration_s;
  double sum = 0;
  for (const StepRecord& s : rank.steps) sum += StepLengthS(s);
  return sum;
}

/// The modal gap between ascending step indices, counting gaps within ±gap_jitter_steps of it,
/// when ≥ regular_gap_share of all gaps are that close; 0 otherwise, with fewer than 2 gaps (two
/// occurrences make no period), or for a modal gap of 1 (a burst of slow steps, not a period).
int64_t RegularSpacing(const std::vector<int64_t>& steps, const ThresholdSet& t) {
  if (steps.size() < 3) return 0;
  const auto jitter = static_cast<int64_t>(t.gap_jitter_steps.value);
  std::map<int64_t, int64_t> counts;
  for (size_t i = 1; i < steps.size(); ++i) ++counts[steps[i] - steps[i - 1]];
  int64_t best_gap = 0, best_near = 0, best_exact = 0;
  for (const auto& [gap, exact] : counts) {
    int64_t near = 0;
    for (auto it = counts.lower_bound(gap - jitter);
         it != counts.end() && it->first <= gap + jitter; ++it) {
      near += it->second;
    }
    if (near > best_near || (near == best_near && exact > best_exact)) {
      best_gap = gap, best_near = near, best_exact = exact;
    }
  }
  const auto gaps = static_cast<double>(steps.size() - 1);
  if (best_gap < 2) return 0;
  return static_cast<double>(best_near) >= t.regular_gap_share.value * gaps ? best_gap : 0;
}

/// Outlier steps of one rank grouped by the phase with the largest excess over its own median
/// per-step time in that step; a step where no phase exceeds its median is left out.
std::map<std::string, std::vector<size_t>> AttributeOutliers(
    const std::map<std::string, std::vector<double>>& series, const Outliers& slow) {
  struct Column {
    const std::string* name;
    const std::vector<double>* values;
    double median;
  };
  std::vector<Column> columns;
  for (const auto& [name, values] : series) columns.push_back({&name, &values, Median(values)});
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t pos : slow.indices) {
    const Column* best = nullptr;
    double best_excess = 0.0;
    for (const Column& c : columns) {
      const double excess = (*c.values)[pos] - c.median;
      if (excess > best_excess) best_excess = excess, best = &c;
    }
    if (best != nullptr) groups[*best->name].push_back(pos);
  }
  return groups;
}

/// A step's per-name values: its phase times, instances (InstancesIn: phase_n is sparse) or
/// counters.
using StepValues = std::map<std::string, double> (*)(const StepRecord&);
std::map<std::string, double> TimesOf(const StepRecord& s) { return s.phase_s; }
std::map<std::string, double> InstancesOf(const StepRecord& s) {
  std::map<std::string, double> out;
  for (const auto& [name, t] : s.phase_s) {
    if (const int64_t n = InstancesIn(s, name); n > 0) out[name] = static_cast<double>(n);
  }
  for (const auto& [name, n] : s.phase_n) out[name] = static_cast<double>(n);
  return out;
}
std::map<std::string, double> CountersOf(const StepRecord& s) {
  std::map<std::string, double> out;
  for (const auto& [name, n] : s.counters) out[name] = static_cast<double>(n);
  return out;
}

/// The median over the steps of a per-step value (0 where a step has none).
std::map<std::string, double> MedianPerStep(const RankSteps& rank, StepValues values_of) {
  std::map<std::string, std::vector<double>> per;
  for (size_t i = 0; i < rank.steps.size(); ++i) {
    for (const auto& [name, v] : values_of(rank.steps[i])) {
      std::vector<double>& values = per[name];
      values.resize(i, 0.0);
      values.push_back(v);
    }
  }
  std::map<std::string, double> out;
  for (auto& [name, values] : per) {
    values.resize(rank.steps.size(), 0.0);
    out[name] = Median(values);
  }
  return out;
}

/// Mean over `positions` of each key's value beyond `median` (positive means only).
std::map<std::string, double> ExtraOver(const RankSteps& rank, const std::vector<size_t>& positions,
                                        StepValues values_of,
                                        const std::map<std::string, double>& median) {
  std::map<std::string, double> sum;
  for (size_t pos : positions) {
    for (const auto& [name, v] : values_of(rank.steps[pos])) {
      auto m = median.find(name);
      sum[name] += v - (m == median.end() ? 0.0 : m->second);
    }
  }
  std::map<std::string, double> out;
  for (const auto& [name, total] : sum) {
    const double mean = total / static_cast<double>(positions.size());
    if (mean > 0) out[name] = mean;
  }
  return out;
}

/// Periodic phases of one rank, appended to `out`.
void FindPeriodicPhasesOfRank(const RankSteps& rank, const ThresholdSet& t,
                              std::vector<PeriodicPhase>& out) {
  std::vector<double> step_s(rank.steps.size());
  for (size_t i = 0; i < step_s.size(); ++i) step_s[i] = StepLengthS(rank.steps[i]);
  const Outliers slow = FindOutliers(step_s, t);
  if (slow.indices.size() < 2) return;
  const auto series = AllPhaseSeries(rank);
  const double wall_s = WallSeconds(rank);
  const auto median_s = MedianPerStep(rank, TimesOf);
  const auto median_n = MedianPerStep(rank, InstancesOf);
  const auto median_counters = MedianPerStep(rank, CountersOf);
  for (const auto& [name, positions] : AttributeOutliers(series, slow)) {
    if (positions.size() < 2) continue;
    PeriodicPhase p;
    p.rank = rank.rank;
    p.phase = name;
    p.occurrences = static_cast<int64_t>(positions.size());
    double extra = 0;
    for (size_t pos : positions) {
      p.steps.push_back(rank.steps[pos].index);
      p.windows.emplace_back(rank.steps[pos].begin_ns, rank.steps[pos].end_ns);
      extra += step_s[pos] - slow.median;
    }
    p.extra_phase_s = ExtraOver(rank, positions, TimesOf, median_s);
    p.extra_phase_n = ExtraOver(rank, positions, InstancesOf, median_n);
    p.extra_counters = ExtraOver(rank, positions, CountersOf, median_counters);
    p.extra_s_each = extra / static_cast<double>(positions.size());
    p.share_of_wall =
        wall_s > 0 ? static_cast<double>(p.occurrences) * p.extra_s_each / wall_s : 0.0;
    p.every_steps = RegularSpacing(p.steps, t);
    if (p.every_steps == 0) {
      const std::vector<double>& values = series.at(name);
      const size_t len = std::min(values.size(), kMaxPeriodSeriesSteps);
      auto period = DetectPeriod(std::span<const double>(values.data(), len), t);
      if (period && period->significant) p.every_steps = std::llround(period->period);
    }
    out.push_back(std::move(p));
  }
}

/// data_loading per step, its outliers, and the matching step's extra data_loading time.
struct LoaderSeries {
  std::vector<double> data_loading_s;
  Outliers slow;
  std::vector<bool> is_slow;  ///< by position
};

LoaderSeries SlowDataLoading(const RankSteps& rank, const ThresholdSet& t) {
  LoaderSeries s;
  s.data_loading_s = PhaseSeries(rank, std::string(phase_name::kDataLoading));
  s.slow = FindOutliers(s.data_loading_s, t);
  s.is_slow.assign(s.data_loading_s.size(), false);
  for (size_t pos : s.slow.indices) s.is_slow[pos] = true;
  return s;
}

/// Fills the totals of a stall from the positions of its steps.
LoaderStall MakeStall(const RankSteps& rank, const LoaderSeries& s,
                      const std::vector<size_t>& positions, int64_t every_steps) {
  LoaderStall stall;
  stall.rank = rank.rank;
  stall.every_steps = every_steps;
  stall.stalls = static_cast<int64_t>(positions.size());
  double extra = 0;
  for (size_t pos : positions) {
    stall.steps.push_back(rank.steps[pos].index);
    extra += s.data_loading_s[pos] - s.slow.median;
  }
  if (!positions.empty()) stall.extra_s_each = extra / static_cast<double>(positions.size());
  const double wall_s = WallSeconds(rank);
  if (wall_s > 0) {
    stall.share_of_wall = static_cast<double>(stall.stalls) * stall.extra_s_each / wall_s;
  }
  return stall;
}

/// Position of the slowest slow step within ±1 of `pos`, if any.
std::optional<size_t> SlowNear(const LoaderSeries& s, size_t pos) {
  std::optional<size_t> best;
  const size_t lo = pos == 0 ? 0 : pos - 1;
  const size_t hi = std::min(pos + 1, s.is_slow.size() - 1);
  for (size_t p = lo; p <= hi; ++p) {
    if (s.is_slow[p] && (!best || s.data_loading_s[p] > s.data_loading_s[*best])) best = p;
  }
  return best;
}

}  // namespace

Outliers FindOutliers(std::span<const double> values, const ThresholdSet& t) {
  Outliers out;
  if (values.empty()) return out;
  std::vector<double> work(values.begin(), values.end());
  out.median = MedianInPlace(std::span(work));
  for (size_t i = 0; i < values.size(); ++i) work[i] = std::abs(values[i] - out.median);
  out.mad = MedianInPlace(std::span(work));
  const double spread = std::max(out.mad, t.robust_sigma_floor.value * std::abs(out.median));
  out.threshold = out.median + t.outlier_robust_z.value * kMadToSigma * spread;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] > out.threshold) out.indices.push_back(i);
  }
  return out;
}

std::optional<Period> DetectPeriod(std::span<const double> values, const ThresholdSet& t) {
  const size_t n = values.size();
  const auto min_periods = static_cast<size_t>(t.period_min_cycles.value);
  if (static_cast<double>(n) < t.period_min_points.value) return std::nullopt;
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(n);
  std::vector<double> x(values.begin(), values.end());
  for (double& v : x) v -= mean;
  // Fisher (1929), "Tests of significance in harmonic analysis", Proc. R. Soc. A 125:54: the m
  // Fourier frequencies k/N, k = 1..⌊(N−1)/2⌋ (0 and Nyquist excluded), are independent under
  // white noise; g = max I_k / Σ I_k. Candidates need ≥ period_min_cycles periods (k ≥ 3).
  const size_t m = (n - 1) / 2;
  const Fft fft(NextPowerOfTwo(2 * n - 1));  // both the periodogram and the ACF need ≥ 2N−1
  const std::vector<double> power = DftPower(fft, x, m + 1);
  double total = 0;
  size_t peak = 0;
  for (size_t k = 1; k <= m; ++k) {
    total += power[k];
    if (k >= min_periods && (peak == 0 || power[k] > power[peak])) peak = k;
  }
  if (peak == 0 || total <= 0 || power[peak] <= 0) return std::nullopt;
  Period out;
  const double g = power[peak] / total;
  // First term of Fisher's exact series P(g > x) = Σ_j (−1)^{j−1} C(m,j)(1 − jx)^{m−1}: an upper
  // bound, accurate in the tail that matters (Brockwell & Davis, Time Series: Theory and Methods,
  // 2nd ed. 1991, §10.2).
  const auto mm = static_cast<double>(m);
  out.p_value = g >= 1.0 ? 0.0 : std::min(1.0, mm * std::exp((mm - 1) * std::log1p(-g)));
  const double candidate = static_cast<double>(n) / FundamentalIndex(power, peak, t);
  const LagCorrelation acf(fft, x);
  std::tie(out.period, out.strength) =
      RefineByAutocorrelation(acf, candidate, n / min_periods, t.period_lag_window.value);
  out.significant =
      out.p_value < t.period_alpha.value && out.strength >= t.period_min_strength.value;
  return out;
}

std::vector<PeriodicPhase> FindPeriodicPhases(const PhaseAnalysis& phases, const ThresholdSet& t) {
  std::vector<PeriodicPhase> out;
  for (const RankSteps& rank : phases.ranks) FindPeriodicPhasesOfRank(rank, t, out);
  std::stable_sort(out.begin(), out.end(), [](const PeriodicPhase& a, const PeriodicPhase& b) {
    return a.share_of_wall > b.share_of_wall;
  });
  return out;
}

std::optional<LoaderStall> FindEpochStartStalls(const RankSteps& rank, int64_t steps_per_epoch,
                                                const ThresholdSet& t) {
  if (steps_per_epoch < 2 || rank.steps.empty()) return std::nullopt;
  const LoaderSeries s = SlowDataLoading(rank, t);
  if (s.slow.indices.empty()) return std::nullopt;
  // Epoch starts are at indices 1, 1+spe, 1+2·spe, …; positions follow the 1-based index.
  const int64_t first_index = rank.steps.front().index;
  std::vector<size_t> stalls;
  bool first_slow = false;
  int64_t later_starts = 0;
  const int64_t last_index = rank.steps.back().index;
  int64_t start = 1 + (std::max<int64_t>(first_index, 1) - 1) / steps_per_epoch * steps_per_epoch;
  for (; start <= last_index;
       start = last_index - start < steps_per_epoch ? last_index + 1 : start + steps_per_epoch) {
    if (start < first_index) continue;
    const auto pos = static_cast<size_t>(start - first_index);
    if (pos >= rank.steps.size()) break;
    auto hit = SlowNear(s, pos);
    if (hit && !stalls.empty() && stalls.back() == *hit) hit.reset();  // spe = 2: shared neighbour
    // The run's first step always carries startup; it only counts alongside later stalls.
    if (start == 1) {
      first_slow = hit.has_value();
      if (hit) stalls.push_back(*hit);
      continue;
    }
    ++later_starts;
    if (hit) stalls.push_back(*hit);
  }
  const auto later_slow = static_cast<int64_t>(stalls.size()) - (first_slow ? 1 : 0);
  // Seed 001 T5: a stall at the start of every epoch; ≥ loader_pattern_share of the epochs and
  // ≥ 2 in all.
  if (later_starts == 0 || later_slow == 0) return std::nullopt;
  if (static_cast<double>(later_slow) <
      t.loader_pattern_share.value * static_cast<double>(later_starts)) {
    return std::nullopt;
  }
  if (stalls.size() < 2) return std::nullopt;
  return MakeStall(rank, s, stalls, steps_per_epoch);
}

std::optional<LoaderStall> FindPrefetchStalls(const RankSteps& rank, int64_t num_workers,
                                              const ThresholdSet& t) {
  const auto workers = static_cast<size_t>(std::max<int64_t>(num_workers, 0));
  if (workers < 2 || rank.steps.size() < 2 * workers) return std::nullopt;
  const LoaderSeries s = SlowDataLoading(rank, t);
  if (s.slow.indices.size() < 2) return std::nullopt;
  // Seed 001 T7: the stall recurs every num_workers-th step, so it sits on one residue of the
  // step index modulo num_workers.
  std::vector<std::vector<size_t>> by_residue(workers);
  std::vector<int64_t> cycles(workers, 0);
  for (size_t pos = 0; pos < rank.steps.size(); ++pos) {
    const int64_t index = rank.steps[pos].index;
    const auto residue = static_cast<size_t>(((index % num_workers) + num_workers) % num_workers);
    ++cycles[residue];
    if (s.is_slow[pos]) by_residue[residue].push_back(pos);
  }
  size_t best = 0;
  for (size_t r = 1; r < workers; ++r) {
    if (by_residue[r].size() > by_residue[best].size()) best = r;
  }
  const auto hits = static_cast<double>(by_residue[best].size());
  // ≥ loader_pattern_share of the cycles stall there, and that residue holds most of the slow
  // steps.
  if (by_residue[best].size() < 2 ||
      hits < t.loader_pattern_share.value * static_cast<double>(cycles[best]) ||
      2 * by_residue[best].size() < s.slow.indices.size()) {
    return std::nullopt;
  }
  return MakeStall(rank, s, by_residue[best], num_workers);
}

}  // namespace stallscope::analysis
