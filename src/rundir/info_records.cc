#include "rundir/info_records.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"

namespace stallscope::rundir {
namespace {

using nlohmann::json;

/// JsonOpt for a key from the declarations (a string literal's view: NUL-terminated).
template <typename T>
std::optional<T> Opt(const json& j, std::string_view key) {
  return JsonOpt<T>(j, key.data());
}

/// What the decoders share while they walk the records once.
struct Decoding {
  InfoRecords out;
  std::set<int32_t> torch_seen;
  std::map<std::pair<int32_t, int64_t>, size_t> loader_of;  // (pid, loader serial) → index
  /// (pid, kind, file, line) → index in out.sync_sites
  std::map<std::tuple<int32_t, std::string, std::string, int64_t>, size_t> site_of;
};

bool DecodeTorch(const phase::MetaItem& m, const json& j, Decoding& d) {
  constexpr auto K = InfoKind::kTorch;
  if (!d.torch_seen.insert(m.pid).second) return true;  // the first per process
  TorchProcess t;
  t.pid = m.pid;
  t.rank = m.rank;
  t.intra_op_threads = Opt<int64_t>(j, Key<K>("intra_op_threads"));
  t.cpu_count = Opt<int64_t>(j, Key<K>("cpu_count"));
  t.cpu_affinity = Opt<int64_t>(j, Key<K>("cpu_affinity"));
  if (auto it = j.find(Key<K>("omp_num_threads_env")); it != j.end() && it->is_string())
    t.omp_num_threads_env = it->get<std::string>();
  d.out.torch.push_back(std::move(t));
  return true;
}

void AddWorkers(const json& j, std::string_view key, std::vector<int32_t>& pids) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return;
  for (const auto& p : *it) {
    if (p.is_number_integer() &&
        std::find(pids.begin(), pids.end(), p.get<int32_t>()) == pids.end()) {
      pids.push_back(p.get<int32_t>());
    }
  }
}

bool DecodeLoader(const phase::MetaItem& m, const json& j, Decoding& d) {
  constexpr auto K = InfoKind::kDataLoader;
  auto key = std::make_pair(m.pid, Opt<int64_t>(j, Key<K>("loader")).value_or(0));
  LoaderInfo l;
  l.pid = m.pid;
  l.rank = m.rank;
  l.num_workers = Opt<int64_t>(j, Key<K>("num_workers"));
  l.batch_size = Opt<int64_t>(j, Key<K>("batch_size"));
  l.pin_memory = Opt<bool>(j, Key<K>("pin_memory"));
  l.persistent_workers = Opt<bool>(j, Key<K>("persistent_workers"));
  l.prefetch_factor = Opt<int64_t>(j, Key<K>("prefetch_factor"));
  l.drop_last = Opt<bool>(j, Key<K>("drop_last"));
  l.dataset_length = Opt<int64_t>(j, Key<K>("dataset_len"));
  l.raw_json = m.data_json;
  AddWorkers(j, Key<K>("worker_pids"), l.worker_pids);
  d.loader_of[key] = d.out.loaders.size();
  d.out.loaders.push_back(std::move(l));
  return true;
}

bool DecodeLoaderWorkers(const phase::MetaItem& m, const json& j, Decoding& d) {
  constexpr auto K = InfoKind::kDataLoaderWorkers;
  auto key = std::make_pair(m.pid, Opt<int64_t>(j, Key<K>("loader")).value_or(0));
  auto it = d.loader_of.find(key);
  if (it != d.loader_of.end())
    AddWorkers(j, Key<K>("worker_pids"), d.out.loaders[it->second].worker_pids);
  return true;
}

template <InfoKind K>
std::tuple<int32_t, std::string, std::string, int64_t> SiteKey(int32_t pid, const json& j) {
  return std::make_tuple(pid, Opt<std::string>(j, Key<K>("kind")).value_or(""),
                         Opt<std::string>(j, Key<K>("file")).value_or(""),
                         Opt<int64_t>(j, Key<K>("line")).value_or(0));
}

bool DecodeSyncSite(const phase::MetaItem& m, const json& j, Decoding& d) {
  constexpr auto K = InfoKind::kSyncSite;
  SyncSite s;
  s.pid = m.pid;
  s.rank = m.rank;
  s.kind = Opt<std::string>(j, Key<K>("kind")).value_or("");
  s.file = Opt<std::string>(j, Key<K>("file")).value_or("");
  s.line = Opt<int64_t>(j, Key<K>("line")).value_or(0);
  s.function = Opt<std::string>(j, Key<K>("function")).value_or("");
  s.user_file = Opt<std::string>(j, Key<K>("user_file")).value_or("");
  s.user_line = Opt<int64_t>(j, Key<K>("user_line")).value_or(0);
  s.first_ts_ns = m.ts_ns;
  if (s.kind.empty() || s.file.empty()) return false;
  d.site_of.try_emplace(SiteKey<K>(m.pid, j), d.out.sync_sites.size());
  d.out.sync_sites.push_back(std::move(s));
  return true;
}

/// "sync_sites": {"sites": [{"kind", "file", "line", "count"}, ...]}
/// (python/stallscope/_protocol.py SYNC_SITES_ENTRY_KEYS; an entry's keys are a sync_site's, plus
/// its count).
bool DecodeSyncSites(const phase::MetaItem& m, const json& j, Decoding& d) {
  auto sites = j.find(Key<InfoKind::kSyncSites>("sites"));
  if (sites == j.end() || !sites->is_array()) return false;
  for (const auto& site : *sites) {
    if (!site.is_object()) continue;
    auto it = d.site_of.find(SiteKey<InfoKind::kSyncSite>(m.pid, site));
    if (it != d.site_of.end()) d.out.sync_sites[it->second].count = Opt<int64_t>(site, "count");
  }
  return true;
}

void Sum(const json& j, std::string_view key, int64_t& out) {
  out += Opt<int64_t>(j, key).value_or(0);
}

void Join(const json& j, std::string_view key, std::string& out) {
  auto v = Opt<std::string>(j, key);
  if (v && !v->empty() && out.find(*v) == std::string::npos) out += (out.empty() ? "" : "; ") + *v;
}

bool DecodeExperiment(const json& j, ExperimentNote& n) {
  constexpr auto K = InfoKind::kExperiment;
  n.present = true;
  if (auto s = Opt<int64_t>(j, Key<K>("stop_after_steps"))) n.stop_after_steps = s;
  n.stopped = n.stopped || Opt<bool>(j, Key<K>("stopped")).value_or(false);
  Sum(j, Key<K>("synthetic_batches_cached"), n.synthetic_batches_cached);
  Sum(j, Key<K>("synthetic_batches_served"), n.synthetic_batches_served);
  Join(j, Key<K>("synthetic_not_applied"), n.synthetic_not_applied);
  Sum(j, Key<K>("saves_skipped"), n.saves_skipped);
  Sum(j, Key<K>("saves_redirected"), n.saves_redirected);
  Sum(j, Key<K>("saves_not_redirected"), n.saves_not_redirected);
  Sum(j, Key<K>("eval_forwards_cached"), n.eval_forwards_cached);
  Sum(j, Key<K>("eval_forwards_run"), n.eval_forwards_run);
  if (auto it = j.find(Key<K>("loader_set"));
      it != j.end() && it->is_object() && n.loader_set.empty())
    n.loader_set = it->dump();
  Sum(j, Key<K>("loader_set_applied"), n.loader_set_applied);
  Join(j, Key<K>("loader_set_errors"), n.loader_set_errors);
  return true;
}

/// {"begin_ns", "end_ns"[, "frame"]} as a TimedInfo; nullopt when malformed.
template <InfoKind K>
std::optional<TimedInfo> Timed(const phase::MetaItem& m, const json& j) {
  auto begin = Opt<int64_t>(j, Key<K>("begin_ns"));
  auto end = Opt<int64_t>(j, Key<K>("end_ns"));
  if (!begin || !end || *end < *begin) return std::nullopt;
  std::string what;
  if constexpr (K == InfoKind::kCompile) what = Opt<std::string>(j, Key<K>("frame")).value_or("");
  return TimedInfo{m.pid, m.rank, *begin, *end, std::move(what)};
}

bool DecodeCompileTotals(const phase::MetaItem& m, const json& j, JobInfo& job) {
  constexpr auto K = InfoKind::kCompileTotals;
  auto count = Opt<int64_t>(j, Key<K>("count"));
  auto total = Opt<int64_t>(j, Key<K>("total_ns"));
  if (!count || !total || *count < 0 || *total < 0) return false;
  job.compile_totals.push_back({m.pid, *count, static_cast<double>(*total) / 1e9});
  return true;
}

bool DecodeBackends(const phase::MetaItem& m, const json& j, JobInfo& job) {
  constexpr auto K = InfoKind::kBackends;
  BackendsInfo b;
  b.pid = m.pid;
  b.rank = m.rank;
  b.cudnn_benchmark = Opt<bool>(j, Key<K>("cudnn_benchmark"));
  b.cudnn_deterministic = Opt<bool>(j, Key<K>("cudnn_deterministic"));
  b.float32_matmul_precision = Opt<std::string>(j, Key<K>("float32_matmul_precision"));
  b.cuda_initialized = Opt<bool>(j, Key<K>("cuda_initialized"));
  job.backends.push_back(std::move(b));
  return true;
}

/// Decodes one record of a known kind; false when it is malformed.
bool Decode(InfoKind kind, const phase::MetaItem& m, const json& j, Decoding& d) {
  JobInfo& job = d.out.job;
  switch (kind) {
    case InfoKind::kTorch:
      return DecodeTorch(m, j, d);
    case InfoKind::kDataLoader:
      return DecodeLoader(m, j, d);
    case InfoKind::kDataLoaderWorkers:
      return DecodeLoaderWorkers(m, j, d);
    case InfoKind::kSyncSite:
      return DecodeSyncSite(m, j, d);
    case InfoKind::kSyncSites:
      return DecodeSyncSites(m, j, d);
    case InfoKind::kExperiment:
      return DecodeExperiment(j, d.out.experiment);
    case InfoKind::kCudaInit: {
      auto t = Timed<InfoKind::kCudaInit>(m, j);
      if (t) job.cuda_init.push_back(std::move(*t));
      return t.has_value();
    }
    case InfoKind::kCompile: {
      auto t = Timed<InfoKind::kCompile>(m, j);
      if (t) job.compiles.push_back(std::move(*t));
      return t.has_value();
    }
    case InfoKind::kCompileTotals:
      return DecodeCompileTotals(m, j, job);
    case InfoKind::kBackends:
      return DecodeBackends(m, j, job);
  }
  return false;
}

}  // namespace

std::optional<InfoKind> InfoKindOf(std::string_view name) {
  for (const auto& spec : kInfoKinds) {
    if (spec.name == name) return spec.kind;
  }
  return std::nullopt;
}

InfoRecords DecodeInfoRecords(const phase::EventLog& events) {
  Decoding d;
  for (const auto& m : events.meta) {
    if (m.kind != "info") continue;
    auto kind = InfoKindOf(m.name);
    if (!kind) {
      ++d.out.unknown;
      continue;
    }
    const json j = json::parse(m.data_json, nullptr, false);
    if (!j.is_object() || !Decode(*kind, m, j, d)) ++d.out.malformed;
  }
  std::stable_sort(d.out.sync_sites.begin(), d.out.sync_sites.end(),
                   [](const SyncSite& a, const SyncSite& b) {
                     return a.count.value_or(-1) > b.count.value_or(-1);
                   });
  return std::move(d.out);
}

}  // namespace stallscope::rundir
