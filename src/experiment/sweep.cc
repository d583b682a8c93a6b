#include "experiment/sweep.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "diagnose/thresholds.h"

namespace stallscope::experiment {
namespace {

constexpr const char* kLoaderKeys[] = {"num_workers", "batch_size", "prefetch_factor", "pin_memory",
                                       "persistent_workers"};

std::optional<int64_t> Int(const std::string& v) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return n;
}

std::optional<bool> Bool(const std::string& v) {
  if (v == "true" || v == "True" || v == "1") return true;
  if (v == "false" || v == "False" || v == "0") return false;
  return std::nullopt;
}

Status CheckLoaderValue(const std::string& key, const std::string& v) {
  if (key == "pin_memory" || key == "persistent_workers") {
    if (!Bool(v))
      return MakeError(ErrorCode::kInvalidArgument, "--set {}={}: true or false", key, v);
    return OkStatus();
  }
  int64_t min = key == "num_workers" ? 0 : 1;
  auto n = Int(v);
  if (!n || *n < min) {
    return MakeError(ErrorCode::kInvalidArgument, "--set {}={}: a whole number, {} or more", key, v,
                     min);
  }
  return OkStatus();
}

bool UsesKey(const std::vector<std::string>& words, const std::string& key) {
  const std::string marker = "{" + key + "}";
  return std::any_of(words.begin(), words.end(),
                     [&](const std::string& w) { return w.find(marker) != std::string::npos; });
}

std::string Substitute(std::string word,
                       const std::vector<std::pair<std::string, std::string>>& setting) {
  for (const auto& [key, value] : setting) {
    const std::string marker = "{" + key + "}";
    for (size_t at = word.find(marker); at != std::string::npos;
         at = word.find(marker, at + value.size())) {
      word.replace(at, marker.size(), value);
    }
  }
  return word;
}

}  // namespace

bool IsLoaderKey(const std::string& key) {
  return std::find(std::begin(kLoaderKeys), std::end(kLoaderKeys), key) != std::end(kLoaderKeys);
}

Result<std::vector<SweepAxis>> ParseSweepSets(const std::vector<std::string>& sets) {
  std::vector<SweepAxis> axes;
  for (const std::string& s : sets) {
    size_t eq = s.find('=');
    std::string key = s.substr(0, eq);
    if (eq == std::string::npos || key.empty() || !std::all_of(key.begin(), key.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
        })) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--set {}: give KEY=V1,V2,... (a key of letters, digits and _)", s);
    }
    if (std::any_of(axes.begin(), axes.end(), [&](const SweepAxis& a) { return a.key == key; }))
      return MakeError(ErrorCode::kInvalidArgument, "--set {}: {} is set twice", s, key);
    SweepAxis axis{key, {}};
    std::string rest = s.substr(eq + 1);
    for (size_t begin = 0; begin <= rest.size();) {
      size_t comma = std::min(rest.find(',', begin), rest.size());
      std::string v = rest.substr(begin, comma - begin);
      if (v.empty()) return MakeError(ErrorCode::kInvalidArgument, "--set {}: an empty value", s);
      if (IsLoaderKey(key)) TRY_STATUS(CheckLoaderValue(key, v));
      axis.values.push_back(v);
      begin = comma + 1;
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

Result<std::vector<SweepPoint>> PlanSweep(const std::vector<SweepAxis>& axes,
                                          const std::vector<std::string>& command,
                                          const std::vector<std::string>& args, size_t max_points) {
  if (axes.empty()) return MakeError(ErrorCode::kInvalidArgument, "give at least one --set");
  size_t total = 1;
  for (const auto& a : axes) {
    total *= a.values.size();
    if (total > max_points) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "{} combinations or more: at most {} (fewer values per --set)", total,
                       max_points);
    }
  }
  std::vector<bool> hooked;
  for (const auto& a : axes) {
    bool templated = UsesKey(command, a.key) || UsesKey(args, a.key);
    if (!templated && !IsLoaderKey(a.key)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "--set {}: not a DataLoader setting (num_workers, batch_size, "
                       "prefetch_factor, pin_memory, persistent_workers) and no {{{}}} in the "
                       "command or an --arg",
                       a.key, a.key);
    }
    hooked.push_back(!templated);
  }
  std::vector<SweepPoint> points;
  for (size_t i = 0; i < total; ++i) {
    SweepPoint p;
    size_t rest = i;
    std::vector<size_t> pick(axes.size());
    for (size_t k = axes.size(); k-- > 0;) {
      pick[k] = rest % axes[k].values.size();
      rest /= axes[k].values.size();
    }
    std::string loader;
    JsonWriter w(loader);
    w.BeginObject();
    bool any_hooked = false;
    for (size_t k = 0; k < axes.size(); ++k) {
      const std::string& v = axes[k].values[pick[k]];
      p.setting.emplace_back(axes[k].key, v);
      p.label += (p.label.empty() ? "" : " ") + axes[k].key + "=" + v;
      if (!hooked[k]) continue;
      any_hooked = true;
      w.Key(axes[k].key);
      if (auto b = Bool(v);
          b && (axes[k].key == "pin_memory" || axes[k].key == "persistent_workers")) {
        w.Bool(*b);
      } else {
        w.Int(*Int(v));
      }
    }
    w.EndObject();
    for (const auto& word : command) p.command.push_back(Substitute(word, p.setting));
    for (const auto& word : args) p.command.push_back(Substitute(word, p.setting));
    if (any_hooked) p.env.push_back("STALLSCOPE_LOADER_SET=" + loader);
    points.push_back(std::move(p));
  }
  return points;
}

SweepSummary SummarizeSweep(const std::vector<SweepRow>& rows) {
  SweepSummary s;
  std::vector<size_t> failed;
  for (size_t i = 0; i < rows.size(); ++i) {
    (rows[i].run && rows[i].run->rate && rows[i].failure.empty() ? s.order : failed).push_back(i);
  }
  auto rate = [&](size_t i) { return rows[i].run->rate->per_s; };
  std::stable_sort(s.order.begin(), s.order.end(),
                   [&](size_t x, size_t y) { return rate(x) > rate(y); });
  if (!s.order.empty()) {
    s.best = s.order.front();
    const double floor = rate(*s.best) * kThresholds.sweep_recommend_within.value;
    auto cost = [&](size_t i) {
      return std::make_pair(rows[i].run->job_cpus.value_or(1e9),
                            rows[i].run->peak_rss_bytes.value_or(UINT64_MAX));
    };
    for (size_t i : s.order) {
      if (rate(i) < floor) break;
      if (!s.recommended || cost(i) < cost(*s.recommended)) s.recommended = i;
    }
  }
  // A verdict's prediction for a setting the sweep ran, with every other key the same.
  for (size_t from = 0; from < rows.size(); ++from) {
    const auto& run = rows[from].run;
    if (!run || !run->principal || !run->principal->predicted_steps_per_s ||
        run->principal->predicted_for.empty()) {
      continue;
    }
    const std::string& want = run->principal->predicted_for;  // "num_workers=4"
    const std::string key = want.substr(0, want.find('='));
    for (size_t to : s.order) {
      if (to == from) continue;
      bool match = true;
      for (size_t k = 0; k < rows[to].point.setting.size() && match; ++k) {
        const auto& [tk, tv] = rows[to].point.setting[k];
        match = tk == key ? tk + "=" + tv == want
                          : k < rows[from].point.setting.size() &&
                                rows[from].point.setting[k].second == tv;
      }
      if (!match || std::none_of(rows[to].point.setting.begin(), rows[to].point.setting.end(),
                                 [&](const auto& kv) { return kv.first == key; })) {
        continue;
      }
      PredictionCheck c;
      c.from = from;
      c.to = to;
      c.setting = want;
      c.predicted = *run->principal->predicted_steps_per_s;
      c.measured = rate(to);
      c.error = c.measured / c.predicted - 1;
      s.predictions.push_back(c);
      break;
    }
  }
  s.order.insert(s.order.end(), failed.begin(), failed.end());
  return s;
}

}  // namespace stallscope::experiment
