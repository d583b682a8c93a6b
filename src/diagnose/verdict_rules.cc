// The verdict rules: one function per finding class (data_bound_cpu and data_bound_io share one,
// since they split the same symptom). Each reads Facts facts, compares them to
// kThresholds (thresholds.h, every number cited there) and returns a priced Finding.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "analysis/detect.h"
#include "base/units.h"
#include "diagnose/gpu_rules.h"
#include "diagnose/loop_rules.h"
#include "diagnose/rule_util.h"
#include "diagnose/trace_rules.h"
#include "diagnose/verdict.h"
#include "diagnose/verdict_rules.h"

namespace stallscope::diagnose {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

namespace {

// ---------------------------------------------------------------------------------------------
// Thread oversubscription facts (shared: data-bound advice must not add workers on top of it)
// ---------------------------------------------------------------------------------------------

struct Oversubscription {
  std::optional<double> runnable;  ///< measured runnable threads (job, else host when unconfined)
  bool runnable_from_job = false;
  int64_t intra_op = 0;  ///< the largest intra_op_threads of the torch processes
  int64_t torch_procs = 0;
  double nvcsw_per_cpu = 0;
  bool hit = false;
  double load = 0;  ///< threads competing for the allowed CPUs (for the cost)
};

Oversubscription OversubscriptionOf(const Facts& c) {
  Oversubscription o;
  if (c.job_runnable_threads) {
    o.runnable = c.job_runnable_threads;
    o.runnable_from_job = true;
  } else if (c.host_procs_running && c.host_cpus == c.allowed_cpus) {
    // /proc/loadavg counts the whole host: only meaningful when the job may use all of it.
    o.runnable = c.host_procs_running;
  }
  for (const auto& t : c.torch) {
    o.intra_op = std::max(o.intra_op, t.intra_op_threads.value_or(0));
  }
  o.torch_procs = static_cast<int64_t>(c.torch.size());
  double allowed = static_cast<double>(c.allowed_cpus);
  o.nvcsw_per_cpu = c.job_nvcsw_per_s / allowed;
  double limit = T.oversub_threads_per_cpu.value * allowed;
  double planned = static_cast<double>(o.intra_op * o.torch_procs);
  bool many = (o.runnable && *o.runnable > limit) || planned > limit;
  o.hit = many && o.nvcsw_per_cpu >= T.oversub_nvcsw_per_cpu.value;
  o.load = std::max(o.runnable.value_or(0), planned);
  return o;
}

// ---------------------------------------------------------------------------------------------
// data_bound_cpu / data_bound_io
// ---------------------------------------------------------------------------------------------

/// How the loading processes (main with num_workers=0, else the workers) spend their time.
struct Loading {
  int64_t num_workers = 0;
  bool known = false;  ///< process samples exist for the loaders
  double cpu = 0;      ///< fraction of one CPU per loading process
  double running = 0;  ///< share of samples in R
  double blocked = 0;  ///< share of samples in D
  std::string who;     ///< "the main process", "the 2 DataLoader workers"
};

Loading LoadingOf(const Facts& c) {
  Loading l;
  l.num_workers = c.NumWorkers();
  if (l.num_workers == 0) {
    l.known = c.main_procs > 0;
    l.cpu = c.main_cpu;
    l.running = c.main_running_fraction;
    l.blocked = c.main_blocked_fraction;
    l.who = "the main process";
    return l;
  }
  l.known = c.worker_procs > 0 && c.worker_cpu_sum > 0;
  l.cpu = c.worker_cpu_sum / static_cast<double>(l.num_workers);
  l.running = c.worker_running_fraction;
  l.blocked = c.worker_blocked_fraction;
  l.who = fmt::format("the {}", Plural(l.num_workers, "DataLoader worker", "DataLoader workers"));
  return l;
}

/// Steady-state step time with `workers` loader processes per rank (seed 001 T4 model): the step
/// is gated by the compute left in the loop, by one worker's batch time divided over the
/// workers, and by the CPU budget all of it shares.
struct Prediction {
  double step_s = 0;
  double compute_s = 0;  ///< step time that is not waiting for data
  double batch_s = 0;    ///< one batch's production time
  double cpu_s = 0;      ///< CPU seconds per step (loaders + main) of one rank
  double cpus = 0;       ///< the CPUs the job gets (allowed, or its share of a busy host)
  int64_t workers = 0;
  bool cpu_limited = false;
};

std::optional<Prediction> Predict(const Facts& c, const Loading& l, int64_t workers) {
  if (c.step_mean_s <= 0 || workers <= 0) return std::nullopt;
  double t = c.step_mean_s;
  double data_s = c.Share(kData) * t;
  Prediction p;
  p.workers = workers;
  p.compute_s = t - data_s;
  double batch_cpu_s = 0, main_cpu_s = 0;
  if (l.num_workers == 0) {
    // The main process both loads and computes: split its CPU time between the two.
    double main_s = c.main_procs == 0 ? t : c.main_cpu * t;
    p.batch_s = data_s;
    batch_cpu_s = std::min(data_s, main_s);
    main_cpu_s = std::max(0.0, main_s - batch_cpu_s);
  } else {
    if (c.worker_cpu_sum <= 0) return std::nullopt;
    batch_cpu_s = c.worker_cpu_sum * t;  // one batch per step
    p.batch_s = batch_cpu_s;
    main_cpu_s = c.main_cpu * t;
  }
  double ranks = static_cast<double>(std::max<int64_t>(1, c.ranks));
  p.cpu_s = batch_cpu_s + main_cpu_s;
  // Every rank's main process and its workers, CPU-bound at worst: their share of a busy host.
  p.cpus = c.JobCpus(ranks * static_cast<double>(workers + 1));
  double cpu_bound_s = p.cpu_s * ranks / p.cpus;
  double worker_bound_s = p.batch_s / static_cast<double>(workers);
  p.step_s = std::max({p.compute_s, worker_bound_s, cpu_bound_s});
  p.cpu_limited = cpu_bound_s >= p.step_s && cpu_bound_s > p.compute_s;
  return p;
}

void LoaderKnobRecs(const Facts& c, Finding& f, int64_t workers) {
  const auto& ld = c.loader;
  if (!ld || !ld->persistent_workers.value_or(false)) {
    Rec(f, 0,
        fmt::format(
            "persistent_workers=True (keep {} alive across epochs instead of "
            "re-spawning each epoch; seed 001 T5)",
            workers == 1 ? std::string("the worker") : fmt::format("the {} workers", workers)));
  }
  if (c.has_gpu && !(ld && ld->pin_memory.value_or(false))) {
    Rec(f, 0, "pin_memory=True with .to(device, non_blocking=True) (seed 001 T6)");
  }
  int64_t pf = ld && ld->prefetch_factor ? *ld->prefetch_factor : 2;
  auto target = static_cast<int64_t>(T.prefetch_factor_target.value);
  if (pf < target) {
    Rec(f, 0,
        fmt::format("prefetch_factor={} → {} if steps still stall in bursts (seed 001 T7)", pf,
                    target));
  }
}

void TransformRecs(const Facts& c, Finding& f, int cost) {
  Rec(f, cost,
      "lighter per-sample transforms (cheaper decode/augmentation, or cache "
      "pre-processed samples)");
  if (c.has_gpu) {
    Rec(f, cost,
        "move transforms to the GPU: NVIDIA DALI, or torchvision.transforms.v2 on GPU "
        "tensors (seed 001 T8)");
  }
}

void AddCgroupThrottleEvidence(const Facts& c, Finding& f) {
  if (c.cgroup_nr_throttled == 0) return;
  f.evidence.push_back(
      Ev(fmt::format("cgroup CPU quota throttled the job {} times", c.cgroup_nr_throttled),
         "cgroup.nr_throttled", static_cast<double>(c.cgroup_nr_throttled), "periods"));
}

std::string DataCpuReason(const Facts& c, const Loading& l, bool saturated) {
  double share = c.Share(kData);
  if (l.num_workers == 0) {
    return fmt::format(
        "the main process spends {} of each step loading data (num_workers=0) while using "
        "{:.0f}% of {}",
        Pct(share), c.main_cpu * 100.0, c.allowed_cpus == 1 ? "the only allowed CPU" : "a CPU");
  }
  if (saturated) {
    return fmt::format(
        "the training loop waits for data {} of each step while {} {} CPU-bound (runnable in "
        "{} of samples, {:.0f}% CPU) on the {} allowed",
        Pct(share), l.who, l.num_workers == 1 ? "is" : "are", Pct(l.running),
        c.worker_cpu_sum * 100.0, Cpus(c.allowed_cpus));
  }
  return fmt::format(
      "the training loop waits for data {} of each step while {} {} {:.0f}% CPU ({} allowed)",
      Pct(share), l.who, l.num_workers == 1 ? "uses" : "use", c.worker_cpu_sum * 100.0,
      Cpus(c.allowed_cpus));
}

void AddLoaderCpuEvidence(const Facts& c, const Loading& l, Finding& f) {
  if (l.num_workers == 0) {
    f.evidence.push_back(
        Ev(fmt::format("main process CPU {:.0f}% of one core, running in {} of samples "
                       "(threshold {}, {})",
                       c.main_cpu * 100.0, Pct(c.main_running_fraction),
                       Pct(T.loader_cpu_busy.value), T.loader_cpu_busy.cite()),
           "process.main.cpu_mean_pct", c.main_cpu * 100.0, "%", T.loader_cpu_busy.value * 100));
    return;
  }
  double pegged_pct = T.worker_cpu_pegged.value * 100;
  f.evidence.push_back(
      Ev(fmt::format("{} {} {:.0f}% CPU in all, the least busy {:.0f}%, runnable in {} of "
                     "samples (threshold {:.0f}% each, or {:.0f}% of allowed CPUs; {})",
                     l.who, l.num_workers == 1 ? "uses" : "use", c.worker_cpu_sum * 100.0,
                     c.worker_cpu_min * 100.0, Pct(l.running), pegged_pct, pegged_pct,
                     T.worker_cpu_pegged.cite()),
         "process.workers.cpu_sum_pct", c.worker_cpu_sum * 100.0, "%",
         pegged_pct * static_cast<double>(c.allowed_cpus)));
}

/// Seed 001 T4: more workers, the knobs that go with them, and the predicted rate.
void AddWorkersAdvice(const Facts& c, const Loading& l, int64_t target, Finding& f) {
  Rec(f, 0,
      fmt::format("num_workers={} → num_workers={} ({} allowed)", l.num_workers, target,
                  Cpus(c.allowed_cpus)));
  LoaderKnobRecs(c, f, target);
  TransformRecs(c, f, 1);
  auto p = Predict(c, l, target);
  if (!p) return;
  f.predicted_steps_per_s = 1.0 / p->step_s;
  f.predicted_for = fmt::format("num_workers={}", target);
  bool persistent = c.loader && c.loader->persistent_workers.value_or(false);
  auto ranks = std::max<int64_t>(1, c.ranks);
  std::string cpus = c.HostBusy()
                         ? fmt::format("{:.1f} CPUs (its share beside other work)", p->cpus)
                         : Cpus(c.allowed_cpus);
  f.evidence.push_back(
      Ev(fmt::format("predicted {:.2f} steps/s steady state with num_workers={}{} (now {:.2f}): "
                     "step ≈ max(compute {}, batch {} / {}, CPU {}{} / {}); worker start-up "
                     "excluded",
                     *f.predicted_steps_per_s, target,
                     persistent ? "" : ", persistent_workers=True", c.steps_per_s,
                     Secs(p->compute_s), Secs(p->batch_s), Plural(target, "worker", "workers"),
                     Secs(p->cpu_s), ranks > 1 ? fmt::format(" × {} ranks", ranks) : "", cpus),
         "predicted_steps_per_s", *f.predicted_steps_per_s, "steps/s"));
  if (p->cpu_limited) {
    Rec(f, 2,
        fmt::format("more CPUs: the predicted rate is limited by the {} allowed ({})",
                    Cpus(c.allowed_cpus), AllowedWhy(c)));
  }
}

/// The loaders already fill every allowed CPU: never "add workers" (seed 001 T8).
void AddSaturatedAdvice(const Facts& c, const Loading& l, Finding& f) {
  std::string users = l.num_workers == 0
                          ? std::string("the main process already uses")
                          : fmt::format("{} and the main process already fill", l.who);
  // Busy host: the share of it the job's processes get now (main and workers, per rank).
  double share =
      c.JobCpus(static_cast<double>(std::max<int64_t>(1, c.ranks) * (l.num_workers + 1)));
  std::string all =
      c.HostBusy() ? fmt::format(
                         "the {:.1f} CPUs the job gets beside other work (of {} allowed): more "
                         "workers cannot help until it stops",
                         share, Cpus(c.allowed_cpus))
                   : fmt::format("all {} allowed: more workers cannot help", Cpus(c.allowed_cpus));
  f.evidence.push_back(Ev(fmt::format("{} {}", users, all), "allowed_cpus_used",
                          c.worker_cpu_sum + c.main_cpu, "CPUs", share));
  if (l.num_workers > 0 && !(c.loader && c.loader->persistent_workers.value_or(false))) {
    Rec(f, 0,
        "persistent_workers=True (re-spawning workers every epoch spends CPU that is already "
        "short; seed 001 T5)");
  }
  TransformRecs(c, f, 1);
  Rec(f, 2,
      fmt::format("more CPUs: the job is allowed {} ({})", Cpus(c.allowed_cpus), AllowedWhy(c)));
}

std::optional<Finding> DataBoundCpu(const Facts& c, const Loading& l, double confidence) {
  auto ranks = std::max<int64_t>(1, c.ranks);
  // Seed 001 T4: start at cores − 1 (per rank when ranks share the host).
  int64_t target = std::max<int64_t>(
      1, c.allowed_cpus / ranks - static_cast<int64_t>(T.worker_headroom_cpus.value));
  double pegged_cpus = T.worker_cpu_pegged.value * static_cast<double>(c.allowed_cpus);
  bool saturated = l.num_workers == 0 ? c.allowed_cpus <= ranks
                                      : c.worker_cpu_sum >= pegged_cpus || target <= l.num_workers;
  bool oversubscribed = OversubscriptionOf(c).hit;

  Finding f =
      Make(FindingClass::kDataBoundCpu, confidence, c.Share(kData), DataCpuReason(c, l, saturated));
  f.evidence.push_back(ShareEvidence(c, kData, T.data_bound_share));
  AddLoaderCpuEvidence(c, l, f);
  f.evidence.push_back(AllowedEvidence(c));
  AddLowUtilEvidence(c, f);
  AddCgroupThrottleEvidence(c, f);
  if (oversubscribed) {
    // Seed 001 T3/U40: many threads thrashing a few cores is not fixed by more processes.
    Rec(f, 0,
        "fix the thread oversubscription first (see thread_oversubscription); adding "
        "DataLoader workers would make it worse");
  }
  if (!saturated && !oversubscribed) {
    // Seed 001 T4 gives the starting point (cores − 1); the model then picks the worker count
    // it predicts fastest (the smallest within 2% of the best), up to the allowed CPUs. A change
    // the model does not predict to help by ≥ 5% is not advised (never advice the data
    // contradicts).
    int64_t most = std::max<int64_t>(target, c.allowed_cpus / ranks);
    double best_s = 0;
    for (int64_t n = l.num_workers + 1; n <= most; ++n) {
      if (auto p = Predict(c, l, n); p && (best_s == 0 || p->step_s < best_s)) best_s = p->step_s;
    }
    for (int64_t n = l.num_workers + 1; best_s > 0 && n <= most; ++n) {
      if (auto p = Predict(c, l, n); p && p->step_s <= best_s * T.worker_pick_tolerance.value) {
        target = n;
        break;
      }
    }
    if (best_s > 0 && c.step_mean_s > 0 && c.step_mean_s / best_s < T.min_predicted_speedup.value)
      saturated = true;
  }
  if (c.HostBusy()) {
    // Cheap, but outside the job's own knobs: the CPUs other work took are the job's again.
    f.evidence.push_back(
        Ev(fmt::format("other processes used {:.1f} of the host's {} during the "
                       "run (threshold {}, {})",
                       *c.other_cpu, Cpus(c.host_cpus), Pct(T.busy_host_other_share.value),
                       T.busy_host_other_share.cite()),
           "host.other_cpu", *c.other_cpu, "CPUs",
           T.busy_host_other_share.value * static_cast<double>(c.host_cpus)));
    Rec(f, 1,
        fmt::format("stop or move the other work on this host ({:.1f} CPUs of {} used outside "
                    "the job), then measure again",
                    *c.other_cpu, c.host_cpus));
  }
  if (saturated) {
    AddSaturatedAdvice(c, l, f);
  } else if (oversubscribed) {
    TransformRecs(c, f, 1);
  } else {
    AddWorkersAdvice(c, l, target, f);
  }
  SortRecs(f);
  return f;
}

/// Evidence of waiting on storage; returns the loaders' read rate (MiB/s, 0 when unknown).
double AddIoEvidence(const Facts& c, const Loading& l, Finding& f) {
  f.evidence.push_back(Ev(
      fmt::format("{} blocked on I/O (state D) in {} of samples (threshold {}, "
                  "{})",
                  l.who, Pct(l.blocked), Pct(T.io_blocked_share.value), T.io_blocked_share.cite()),
      "loaders.blocked_share", l.blocked, "fraction", T.io_blocked_share.value));
  f.evidence.push_back(
      Ev(fmt::format("{} CPU {:.0f}% of one core{} (low below {:.0f}%)", l.who, l.cpu * 100,
                     l.num_workers > 0 ? " each" : "", T.io_low_cpu.value * 100),
         "loaders.cpu_pct", l.cpu * 100, "%", T.io_low_cpu.value * 100));
  if (c.iowait_fraction || c.psi_io_fraction) {
    std::string what;
    if (c.iowait_fraction) what = fmt::format("host iowait {:.1f}%", *c.iowait_fraction * 100.0);
    if (c.psi_io_fraction) {
      what += fmt::format("{}PSI io some {:.1f}%", what.empty() ? "" : ", ",
                          *c.psi_io_fraction * 100.0);
    }
    // The threshold is in percent.
    double io = std::max(c.iowait_fraction.value_or(0), c.psi_io_fraction.value_or(0)) * 100.0;
    f.evidence.push_back(Ev(fmt::format("{} (threshold {:.0f}%)", what, T.io_wait_pct.value),
                            "host.io_wait_pct", io, "%", T.io_wait_pct.value));
  }
  uint64_t read = l.num_workers == 0 ? c.main_read_bytes : c.worker_read_bytes;
  if (read == 0 || c.wall_s <= 0) return 0;
  double mib = static_cast<double>(read) / kMiB;
  f.evidence.push_back(
      Ev(fmt::format("loaders read {:.0f} MiB from storage ({:.1f} MiB/s)", mib, mib / c.wall_s),
         "loaders.read_mib_per_s", mib / c.wall_s, "MiB/s"));
  return mib / c.wall_s;
}

/// More workers overlap more reads (they are cheap while blocked), storage permitting.
void AddIoWorkersAdvice(const Facts& c, const Loading& l, double read_mib_per_s, Finding& f) {
  int64_t target =
      l.num_workers == 0 ? std::max<int64_t>(4, 2 * c.allowed_cpus) : 2 * l.num_workers;
  target = std::min<int64_t>(target, 16);
  if (target <= l.num_workers) return;
  Rec(f, 0,
      fmt::format("num_workers={} → num_workers={} to overlap reads (workers blocked on I/O cost "
                  "little CPU; {} allowed)",
                  l.num_workers, target, Cpus(c.allowed_cpus)));
  if (c.step_mean_s <= 0) return;
  double t = c.step_mean_s, data_s = c.Share(kData) * t;
  // Each worker spends about one current batch time per batch; all of the job's CPU work shares
  // the allowed CPUs; the storage must deliver proportionally more bytes per second.
  double batch_s = l.num_workers == 0 ? data_s : static_cast<double>(l.num_workers) * t;
  double cpu_s =
      (c.main_cpu + c.worker_cpu_sum) * t * static_cast<double>(std::max<int64_t>(1, c.ranks));
  double step = std::max({t - data_s, batch_s / static_cast<double>(target),
                          cpu_s / static_cast<double>(c.allowed_cpus)});
  f.predicted_steps_per_s = 1.0 / step;
  f.predicted_for = fmt::format("num_workers={}", target);
  std::string bandwidth = read_mib_per_s > 0
                              ? fmt::format(" (needs {:.0f} MiB/s from storage, now {:.0f})",
                                            read_mib_per_s * t / step, read_mib_per_s)
                              : std::string();
  f.evidence.push_back(Ev(fmt::format("predicted at most {:.2f} steps/s with num_workers={} (now "
                                      "{:.2f}) if the storage keeps up{}",
                                      *f.predicted_steps_per_s, target, c.steps_per_s, bandwidth),
                          "predicted_steps_per_s", *f.predicted_steps_per_s, "steps/s"));
}

std::optional<Finding> DataBoundIo(const Facts& c, const Loading& l, double confidence,
                                   std::string_view how) {
  double share = c.Share(kData);
  Finding f =
      Make(FindingClass::kDataBoundIo, confidence, share,
           fmt::format("{} {} {} of each step loading data (num_workers={}) and {}",
                       l.num_workers == 0 ? "the main process" : "the training loop",
                       l.num_workers == 0 ? "spends" : "waits", Pct(share), l.num_workers, how));
  f.evidence.push_back(ShareEvidence(c, kData, T.data_bound_share));
  double read_mib_per_s = AddIoEvidence(c, l, f);
  AddLowUtilEvidence(c, f);
  AddIoWorkersAdvice(c, l, read_mib_per_s, f);
  std::string shm = "/dev/shm";
  if (c.shm_total_bytes) {
    uint64_t used = std::min(c.shm_used_bytes.value_or(0), *c.shm_total_bytes);
    shm = fmt::format("/dev/shm: {} GiB free of {} GiB",
                      GiB(static_cast<double>(*c.shm_total_bytes - used) / kMiB),
                      GiB(static_cast<double>(*c.shm_total_bytes) / kMiB));
  }
  Rec(f, 1,
      fmt::format("stage the dataset to local NVMe or a RAM disk ({}) before training (seed 001 "
                  "U8)",
                  shm));
  Rec(f, 1, "shard many small files into tar shards read sequentially (WebDataset; seed 001 U25)");
  SortRecs(f);
  return f;
}

/// Without the loaders' process samples and the host's CPUs (a profiler trace, or a run whose
/// recording is missing) the wait is known but not whether CPU or storage causes it: name the
/// wait, give the loader knobs, and say how to split CPU from storage.
std::optional<Finding> DataBoundWithoutHostFacts(const Facts& c, const Loading& l) {
  double share = c.Share(kData);
  Finding f = Make(FindingClass::kDataBoundCpu, T.confidence_guess.value, share,
                   c.has_gpu ? fmt::format("the GPU waits for the next batch {} of the time (the "
                                           "host is inside the DataLoader while no GPU work runs)",
                                           Pct(share))
                             : fmt::format("the training loop waits for data {} of each step (the "
                                           "host is inside the DataLoader, nothing else runs)",
                                           Pct(share)));
  f.evidence.push_back(ShareEvidence(c, kData, T.data_bound_share));
  if (c.loader && c.loader->num_workers == 0) {
    f.evidence.push_back(Ev("num_workers=0: the training process loads every batch itself",
                            "loader.num_workers", 0, "workers"));
    Rec(f, 0, "num_workers=0 → num_workers = CPU cores per rank − 1 (seed 001 T4)");
  } else {
    Rec(f, 0, "more DataLoader workers, up to CPU cores per rank − 1 (seed 001 T4)");
  }
  LoaderKnobRecs(c, f, l.num_workers > 0 ? l.num_workers : 1);
  Rec(f, 0,
      "run the job under `stallscope run` to tell CPU transforms (data_bound_cpu) from storage "
      "I/O (data_bound_io): it samples the loaders' CPU and I/O state, which is missing here");
  TransformRecs(c, f, 1);
  SortRecs(f);
  return f;
}

std::optional<Finding> ClassifyDataBound(const Facts& c, const Loading& l) {
  const double share = c.Share(kData);
  if (!l.known && c.host_cpus == 0) return DataBoundWithoutHostFacts(c, l);
  // With num_workers=0 a CPU-only job's main process is CPU-busy in its compute, side work and
  // host work (the ledger's parts; not while it waits in comm_wait): what it used inside the data
  // phase is what is left (issue 39: a process at 45% CPU loading 60% of each step loads at ~10%
  // CPU, waiting, not computing; its whole-step 45% put it between the CPU and I/O bars, one run
  // each way). A GPU job's main process may wait for the GPU outside the data phase: its
  // whole-step values stand.
  const analysis::StepLedger& j = c.ledger.job;
  const double busy_outside = j.Share(analysis::LedgerPart::kCompute) +
                              j.Share(analysis::LedgerPart::kSideWork) +
                              j.Share(analysis::LedgerPart::kHostWork);
  const bool inside = l.num_workers == 0 && !c.has_gpu && share > 0 && !c.ledger.empty();
  auto in_data = [&](double whole) {
    return inside ? std::clamp((whole - busy_outside) / share, 0.0, 1.0) : whole;
  };
  const double cpu = in_data(l.cpu), running = in_data(l.running);
  // Runnable most of the time counts as CPU-busy even when contention leaves less CPU time.
  bool cpu_busy = std::max(running, cpu) >= T.loader_cpu_busy.value;
  if (l.num_workers > 0) {
    cpu_busy =
        cpu_busy ||
        c.worker_cpu_sum >= T.worker_cpu_pegged.value * static_cast<double>(c.allowed_cpus) ||
        (c.worker_procs > 0 && c.worker_cpu_min >= T.worker_cpu_pegged.value);
  }
  bool blocked = l.blocked >= T.io_blocked_share.value;
  double io_pct = std::max(c.iowait_fraction.value_or(0), c.psi_io_fraction.value_or(0)) * 100.0;
  bool low_cpu = l.known && cpu < T.io_low_cpu.value && running < T.io_low_cpu.value;
  bool io_pressure = io_pct >= T.io_wait_pct.value && low_cpu;
  // With num_workers=0 the main process also runs (computes) outside data_loading: compare D
  // with the running time left inside the data phase.
  double running_in_data = l.num_workers == 0 ? l.running - (1.0 - share) : l.running;
  if (cpu_busy && !(blocked && l.blocked > running_in_data))
    return DataBoundCpu(c, l, T.confidence_measured.value);
  if (blocked) {
    return DataBoundIo(c, l, T.confidence_measured.value,
                       fmt::format("is blocked on I/O (state D) in {} of samples", Pct(l.blocked)));
  }
  if (io_pressure) {
    return DataBoundIo(c, l, T.confidence_strong.value,
                       fmt::format("waits on storage (host I/O wait {:.0f}%) at {:.0f}% CPU",
                                   io_pct, l.cpu * 100));
  }
  if (low_cpu) {
    // Neither computing nor in D: sleeping on a network filesystem or remote store.
    return DataBoundIo(
        c, l, T.confidence_weak.value,
        inside ? fmt::format("is mostly waiting, not computing ({:.0f}% CPU while "
                             "loading, {:.0f}% over the step)",
                             cpu * 100, l.cpu * 100)
               : fmt::format("is mostly waiting, not computing ({:.0f}% CPU)", l.cpu * 100));
  }
  return DataBoundCpu(c, l, T.confidence_guess.value);
}

}  // namespace

std::optional<Finding> DataBoundFinding(const Facts& c) {
  const double share = c.Share(kData);
  if (c.steps == 0 || share <= 0) return std::nullopt;
  std::optional<Finding> f = ClassifyDataBound(c, LoadingOf(c));
  if (f) {
    f->confidence = MarginConfidence(share, T.data_bound_share.value, f->confidence);
    f->significant = share >= T.data_bound_share.value;
  }
  return f;
}

namespace {

std::optional<Finding> DataBoundRule(const Facts& c) {
  if (c.Share(kData) <= FadeIn(T.data_bound_share.value)) return std::nullopt;
  return DataBoundFinding(c);
}

// ---------------------------------------------------------------------------------------------
// epoch_boundary_stall / prefetch_too_shallow
// ---------------------------------------------------------------------------------------------

std::optional<int64_t> StepsPerEpoch(const rundir::LoaderInfo& l) {
  if (!l.dataset_length || !l.batch_size || *l.batch_size <= 0 || *l.dataset_length <= 0) {
    return std::nullopt;
  }
  int64_t n = *l.dataset_length, b = *l.batch_size;
  return l.drop_last.value_or(false) ? n / b : (n + b - 1) / b;
}

std::optional<Finding> EpochStallRule(const Facts& c) {
  if (!c.loader || c.loader->persistent_workers.value_or(false) || c.NumWorkers() == 0) {
    return std::nullopt;
  }
  auto spe = StepsPerEpoch(*c.loader);
  if (!spe || *spe < 1) return std::nullopt;
  std::optional<analysis::LoaderStall> worst;
  for (const auto& rank : c.phases.ranks) {
    auto s = analysis::FindEpochStartStalls(rank, *spe);
    if (s && (!worst || s->share_of_wall > worst->share_of_wall)) worst = std::move(s);
  }
  if (!worst) return std::nullopt;
  int64_t nw = c.NumWorkers();
  Finding f =
      Make(FindingClass::kEpochBoundaryStall, T.confidence_pattern.value, worst->share_of_wall,
           fmt::format("the first step of each epoch waits {} longer for {} "
                       "(persistent_workers=False), {} of wall time",
                       Secs(worst->extra_s_each),
                       Plural(nw, "re-spawned DataLoader worker", "re-spawned DataLoader workers"),
                       Pct(worst->share_of_wall)));
  f.evidence.push_back(Ev(fmt::format("{} epoch starts stall +{} each in data_loading, every {} "
                                      "steps (rank {})",
                                      worst->stalls, Secs(worst->extra_s_each), *spe, worst->rank),
                          "epoch_stall.extra_s_each", worst->extra_s_each, "s"));
  f.evidence.push_back(Ev(fmt::format("{} of wall time (worth fixing above {})",
                                      Pct(worst->share_of_wall), Pct(T.min_cost.value)),
                          "epoch_stall.share_of_wall", worst->share_of_wall, "fraction",
                          T.min_cost.value));
  Rec(f, 0,
      fmt::format("persistent_workers=False → persistent_workers=True (epochs are {} steps; "
                  "seed 001 T5)",
                  *spe));
  return f;
}

std::optional<Finding> PrefetchRule(const Facts& c) {
  int64_t nw = c.NumWorkers();
  if (nw <= 0) return std::nullopt;
  std::optional<analysis::LoaderStall> worst;
  const analysis::RankSteps* worst_rank = nullptr;
  for (const auto& rank : c.phases.ranks) {
    auto s = analysis::FindPrefetchStalls(rank, nw);
    if (s && (!worst || s->share_of_wall > worst->share_of_wall)) {
      worst = std::move(s);
      worst_rank = &rank;
    }
  }
  if (!worst || worst_rank == nullptr) return std::nullopt;
  // Seed 001 T7: depth smooths bursts; it cannot fix an average rate that is too low.
  std::set<int64_t> stalled(worst->steps.begin(), worst->steps.end());
  std::vector<double> calm_share;
  for (const auto& s : worst_rank->steps) {
    double len = NsToSeconds(s.end_ns - s.begin_ns);
    if (!stalled.count(s.index) && len > 0) calm_share.push_back(PhaseOf(s, kData) / len);
  }
  double calm = Median(calm_share);
  bool rate_ok = calm < T.data_bound_share.value;
  int64_t pf = c.loader && c.loader->prefetch_factor ? *c.loader->prefetch_factor : 2;
  auto target = std::max(static_cast<int64_t>(T.prefetch_factor_target.value), 2 * pf);
  Finding f = Make(
      FindingClass::kPrefetchTooShallow,
      rate_ok ? T.confidence_likely.value : T.confidence_doubtful.value, worst->share_of_wall,
      fmt::format("every {} steps (num_workers={}) a step waits {} longer for data, {} "
                  "of wall time",
                  worst->every_steps, nw, Secs(worst->extra_s_each), Pct(worst->share_of_wall)));
  f.evidence.push_back(
      Ev(fmt::format("{} data_loading stalls +{} each with period {} = num_workers", worst->stalls,
                     Secs(worst->extra_s_each), worst->every_steps),
         "prefetch_stall.extra_s_each", worst->extra_s_each, "s"));
  f.evidence.push_back(Ev(fmt::format("between stalls data_loading is {} of the step (the average "
                                      "rate keeps up below {})",
                                      Pct(calm), Pct(T.data_bound_share.value)),
                          "prefetch_stall.calm_data_share", calm, "fraction",
                          T.data_bound_share.value));
  if (rate_ok) {
    Rec(f, 0,
        fmt::format("prefetch_factor={} → {} (seed 001 T7): it helps here because between "
                    "stalls the workers keep up",
                    pf, target));
  } else {
    Rec(f, 0,
        fmt::format("prefetch_factor={} → {} helps only if the average rate suffices; it "
                    "does not here (data_loading {} between stalls): raise the rate first",
                    pf, target, Pct(calm)));
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// thread_oversubscription
// ---------------------------------------------------------------------------------------------

std::optional<Finding> OversubscriptionRule(const Facts& c) {
  Oversubscription o = OversubscriptionOf(c);
  if (!o.hit) return std::nullopt;
  double allowed = static_cast<double>(c.allowed_cpus);
  double excess = o.load > allowed ? 1.0 - allowed / o.load : 0.0;
  double cost = excess * std::min(1.0, c.main_cpu);
  int64_t procs = std::max<int64_t>(1, o.torch_procs);
  int64_t per_proc = std::max<int64_t>(1, c.allowed_cpus / procs);
  std::string who = o.intra_op > 0 ? fmt::format("{} intra-op threads × {}", o.intra_op,
                                                 Plural(procs, "torch process", "torch processes"))
                                   : fmt::format("{:.1f} runnable threads", o.runnable.value_or(0));
  if (c.worker_procs > 0) {
    who +=
        fmt::format(" plus {}", Plural(c.NumWorkers(), "DataLoader worker", "DataLoader workers"));
  }
  Finding f = Make(FindingClass::kThreadOversubscription, T.confidence_fair.value, cost,
                   fmt::format("{} compete for {} allowed with {:.0f} involuntary context "
                               "switches/s, so adding DataLoader workers would make it worse",
                               who, Cpus(c.allowed_cpus), c.job_nvcsw_per_s));
  double limit = T.oversub_threads_per_cpu.value * allowed;
  if (o.runnable) {
    f.evidence.push_back(
        Ev(fmt::format("{:.1f} runnable threads on average ({}; threshold {:.0f} = "
                       "{:.0f}× allowed CPUs)",
                       *o.runnable, o.runnable_from_job ? "the job's" : "host-wide", limit,
                       T.oversub_threads_per_cpu.value),
           "runnable_threads", *o.runnable, "threads", limit));
  }
  if (o.intra_op > 0) {
    f.evidence.push_back(Ev(
        fmt::format("intra_op_threads {} × {} = {} (threshold {:.0f})", o.intra_op,
                    Plural(procs, "process", "processes"), o.intra_op * procs, limit),
        "torch.intra_op_threads_total", static_cast<double>(o.intra_op * procs), "threads", limit));
  }
  f.evidence.push_back(Ev(fmt::format("{:.0f} involuntary context switches/s per allowed CPU "
                                      "(threshold {:.0f})",
                                      o.nvcsw_per_cpu, T.oversub_nvcsw_per_cpu.value),
                          "nonvoluntary_switches_per_s_per_cpu", o.nvcsw_per_cpu, "1/s",
                          T.oversub_nvcsw_per_cpu.value));
  f.evidence.push_back(AllowedEvidence(c));
  AddCgroupThrottleEvidence(c, f);
  std::string now = o.intra_op > 0 ? fmt::format("now {}", o.intra_op) : std::string("now default");
  std::string where = procs == 1 ? std::string("in the training process")
                                 : fmt::format("in each of the {} processes", procs);
  Rec(f, 0,
      fmt::format("OMP_NUM_THREADS={0} / torch.set_num_threads({0}) {1} ({2}; {3} allowed; "
                  "seed 001 U40)",
                  per_proc, where, now, Cpus(c.allowed_cpus)));
  uint32_t worker_threads = c.worker_threads_max;
  if (worker_threads > 2) {
    Rec(f, 0,
        fmt::format("torch.set_num_threads(1) in each DataLoader worker (worker_init_fn); they "
                    "run up to {} threads",
                    worker_threads));
  }
  return f;
}

constexpr std::array<NamedRule, 20> kRules{{
    {"data_bound", DataBoundRule},
    {"host_sync_or_logging", HostSyncRule},
    {"periodic_side_work", PeriodicRule},
    {"epoch_boundary_stall", EpochStallRule},
    {"prefetch_too_shallow", PrefetchRule},
    {"thread_oversubscription", OversubscriptionRule},
    {"gpu_throttled", ThrottledRule},
    {"util_misleading", UtilMisleadingRule},
    {"load_imbalance", ImbalanceRule},
    {"straggler", StragglerRule},
    {"small_batch", SmallBatchRule},
    {"gpu_memory_pressure", MemoryPressureRule},
    {"startup_window", StartupRule},
    {"allocator_churn", AllocatorChurnRule},
    {"host_step_boundary", StepBoundaryRule},
    {"host_launch_bound", HostLaunchRule},
    {"communication_bound", CommunicationRule},
    {"communication_bound_run", CommWaitRule},
    {"trace_idle", TraceIdleRule},
    {"gpu_bound", GpuBoundRule},
}};

}  // namespace

std::span<const NamedRule> Rules() { return kRules; }

}  // namespace stallscope::diagnose
