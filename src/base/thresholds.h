#pragma once
// The one table of numbers the analysis and the verdict compare against (README "Thresholds",
// `stallscope diagnose --thresholds`). Lower modules take the values as parameters (a
// `const ThresholdSet&`); thresholds_test.cc fails when an entry is read by no code in src/.

#include <algorithm>
#include <array>
#include <span>
#include <string_view>

namespace stallscope {

/// One threshold: the number, its unit, and where it comes from.
struct Threshold {
  std::string_view name;
  double value = 0;
  std::string_view unit;
  std::string_view source;  ///< "<cite>: <why>", e.g. "seed 000 §4: data_loading > 30% ..."

  /// The short citation before the first ':' ("seed 000 §4"), for evidence text.
  [[nodiscard]] constexpr std::string_view cite() const {
    return source.substr(0, std::min(source.find(':'), source.size()));
  }
};

/// The thresholds by name, so code reads `thresholds.data_bound_share.value`.
struct ThresholdSet {
  // --- input pipeline -------------------------------------------------------------------------
  Threshold data_bound_share{"data_bound_share", 0.30, "fraction of step time",
                             "seed 000 §4: data_loading > 30% means the input pipeline is primary"};
  Threshold loader_cpu_busy{"loader_cpu_busy", 0.70, "fraction of one CPU",
                            "seed 001 T3: the process doing the loading is CPU-busy (running or "
                            "cpu ≥ 70%)"};
  Threshold worker_cpu_pegged{"worker_cpu_pegged", 0.80, "fraction of one CPU (or of all allowed)",
                              "seed 001 T3/T8: a worker pegged at ~100% CPU = CPU-transform-bound"};
  Threshold io_blocked_share{"io_blocked_share", 0.20, "fraction of samples in state D",
                             "seed 001 T8: workers sit in read (uninterruptible sleep)"};
  Threshold io_wait_pct{"io_wait_pct", 10.0, "% (host iowait or PSI io some avg10)",
                        "seed 001 T3: both CPU and GPU idle ⇒ I/O-bound"};
  Threshold io_low_cpu{"io_low_cpu", 0.50, "fraction of one CPU",
                       "seed 001 T3: loaders waiting, not computing"};
  Threshold worker_headroom_cpus{"worker_headroom_cpus", 1, "CPUs left to the main process",
                                 "seed 001 T4: start num_workers at cores − 1"};
  Threshold prefetch_factor_target{"prefetch_factor_target", 4, "batches per worker",
                                   "seed 001 T7: raise prefetch_factor to 3–4"};
  Threshold worker_pick_tolerance{"worker_pick_tolerance", 1.02, "× the best predicted step time",
                                  "stallscope: advise the fewest workers predicted within 2% of "
                                  "the fastest"};
  Threshold min_predicted_speedup{"min_predicted_speedup", 1.05,
                                  "× (step time now / best predicted step time)",
                                  "stallscope: a change predicted to help by < 5% is not "
                                  "advised"};
  // --- training loop --------------------------------------------------------------------------
  Threshold host_sync_other_share{"host_sync_other_share", 0.20, "fraction of step time",
                                  "seed 000 §2: per-step metrics/logging time outside phases"};
  Threshold live_outside_phases_share{
      "live_outside_phases_share", 0.30, "fraction of wall time",
      "stallscope: the live status line's hint only (diagnose::Suspect) — the same 30% bar as "
      "data_bound_share (seed 000 §4) for time outside every phase; the report decides"};
  Threshold host_sync_per_step_low{"host_sync_per_step_low", 1, "syncs per step",
                                   "seed 000 §5: DtoH spikes from CPU metric computations"};
  Threshold host_sync_per_step_high{"host_sync_per_step_high", 10, "syncs per step",
                                    "seed 000 §2: per-parameter .cpu()/.item() scans each step"};
  Threshold logging_residual_share{
      "logging_residual_share", 0.01, "fraction of step time",
      "stallscope: the log interval is chosen so logging costs < 1% of the step"};
  Threshold periodic_share{"periodic_share", 0.05, "fraction of wall time",
                           "seed 000 §3: drops aligned with checkpoint/sampling intervals"};
  Threshold min_cost{"min_cost", 0.05, "fraction of wall time",
                     "TensorBoard profiler tutorial: exposed DataLoader > 5% is worth a fix; "
                     "gpu_bound is named only when nothing else costs this much"};
  // --- the verdict from the step ledger (issue 39) -----------------------------------------
  Threshold gpu_bound_step_share{
      "gpu_bound_step_share", 0.5, "fraction of step time",
      "stallscope: gpu_bound (the good case) is the principal finding when the model's "
      "own work (the ledger's compute: GPU time by CUDA events) is more than half of the steady "
      "step: then removing every other part would not double the speed; below it the largest "
      "lost part is principal (issue 39)"};
  Threshold comm_wait_share{
      "comm_wait_share", 0.10, "fraction of step time",
      "seed 001 T1/T23: ranks that wait alike in collectives compute does not hide are "
      "communication-bound (a trace's comm_exposed_share, for a run's comm_wait)"};
  Threshold confidence_margin_span{
      "confidence_margin_span", 0.5, "fraction of the threshold",
      "stallscope: a finding's confidence grows with its margin over its threshold, "
      "continuously: half the rule's confidence at the threshold, all of it this far (50% of the "
      "threshold) above, none as far below; 88% and 91% of a 90% bar get nearly one confidence "
      "(issue 39)"};
  Threshold oscillation_ratio{"oscillation_ratio", 0.5, "std/mean of step time",
                              "seed 003: variation > 0.5 is an oscillation"};
  Threshold gpu_time_coverage{"gpu_time_coverage", 0.80, "fraction of a phase's instances",
                              "stallscope: a compute phase's share uses its CUDA-event GPU time "
                              "when at least this many of its instances have one"};
  // --- the life of a run: start-up, warm-up, steady state (issue 26) -------------------------
  Threshold warmup_robust_z{"warmup_robust_z", 3.5, "robust σ above the steady median step",
                            "Iglewicz & Hoaglin: a modified z-score above 3.5 is an outlier; a "
                            "leading step that far above the steady state is warm-up"};
  Threshold warmup_min_excess{"warmup_min_excess", 0.5, "fraction of the steady median step",
                              "stallscope: and at least 50% longer than the steady median, so "
                              "the jitter of a very regular loop is no warm-up"};
  Threshold warmup_min_excess_s{"warmup_min_excess_s", 0.001, "s over the steady median step",
                                "stallscope: and at least 1 ms longer: microsecond loops (a "
                                "recorder test, a no-op step) have no warm-up worth naming"};
  Threshold warmup_settle_steps{"warmup_settle_steps", 5, "steps",
                                "stallscope: warm-up ends at the first step that, with the median "
                                "of it and the next 4, is back at the steady level"};
  Threshold warmup_max_share{"warmup_max_share", 0.5, "fraction of the steps",
                             "stallscope: the steady reference is the second half of the steps, "
                             "so warm-up is at most the first half"};
  Threshold steady_sure_steps{"steady_sure_steps", 20, "steps",
                              "stallscope: fewer steady steps than this give a verdict, not a "
                              "sure one (seed 000 §1 measures over a few hundred steps)"};
  Threshold steady_sure_s{"steady_sure_s", 5.0, "s",
                          "stallscope: a sure verdict needs 5 s of steady state: 25 samples at "
                          "200 ms, and NVML averages utilization over up to 1 s (seed 004)"};
  Threshold startup_most_share{"startup_most_share", 0.5, "fraction of the run's wall time",
                               "stallscope (issue 26): when start-up and warm-up are most of "
                               "the run, the report says so first"};
  Threshold gpu_busy_by_events{"gpu_busy_by_events", 0.5, "fraction of steady step time",
                               "stallscope (issue 26): CUDA events outrank NVML averages; when "
                               "the compute phases' GPU time is most of the step, the GPU is "
                               "busy whatever the sampled utilization says"};
  // --- slow steps and periods (analysis/detect.h, analysis/life.h) ---------------------------
  Threshold outlier_robust_z{"outlier_robust_z", 3.5, "robust σ above the median",
                             "Iglewicz & Hoaglin: a modified z-score above 3.5 is an outlier; a "
                             "step that far above the median step is a slow step (periodic side "
                             "work, loader stalls, a trace's slow steps)"};
  Threshold robust_sigma_floor{"robust_sigma_floor", 0.01, "fraction of the median",
                               "stallscope: the robust σ (1.4826 × MAD) is at least 1% of the "
                               "median, so that in a loop of identical steps microseconds of "
                               "jitter are neither outliers nor the end of warm-up"};
  Threshold period_min_points{"period_min_points", 16, "points of the series",
                              "stallscope: fewer points leave the periodogram too few "
                              "frequencies to test for a period"};
  Threshold period_min_cycles{"period_min_cycles", 3, "full periods in the series",
                              "stallscope: a period is named only when the series holds at "
                              "least 3 of it"};
  Threshold period_alpha{"period_alpha", 0.01, "p-value (Fisher's g test)",
                         "Fisher (1929): the periodogram's peak is a period when white noise "
                         "would give it with p < 0.01"};
  Threshold period_min_strength{"period_min_strength", 0.3, "autocorrelation at the period",
                                "stallscope: and the series must correlate with itself one "
                                "period later by at least 0.3"};
  Threshold period_lag_window{"period_lag_window", 0.2, "± fraction of the candidate period",
                              "stallscope: the autocorrelation peak that refines a periodogram "
                              "candidate is searched within ±20% of it"};
  Threshold period_subharmonic_power{
      "period_subharmonic_power", 0.5, "fraction of the peak's power",
      "stallscope: spikes every N steps put the periodogram's peak on a harmonic; a sub-harmonic "
      "with half the peak's power is the fundamental"};
  Threshold regular_gap_share{"regular_gap_share", 0.7, "fraction of the gaps",
                              "stallscope: slow steps recur \"every N steps\" when 70% of the "
                              "gaps between them are within gap_jitter_steps of the modal gap"};
  Threshold gap_jitter_steps{"gap_jitter_steps", 1, "steps",
                             "stallscope: a gap one step off the modal gap is still regular"};
  Threshold loader_pattern_share{"loader_pattern_share", 0.6,
                                 "fraction of the epochs or worker cycles",
                                 "seed 001 T5/T7: the stall at each epoch start, or at every "
                                 "num_workers-th step, must hold in 60% of them"};
  // --- CPU threads ----------------------------------------------------------------------------
  Threshold oversub_threads_per_cpu{"oversub_threads_per_cpu", 2.0,
                                    "runnable (or intra-op) threads per allowed CPU",
                                    "seed 001 T3/U40: many threads thrash a few cores"};
  Threshold oversub_nvcsw_per_cpu{"oversub_nvcsw_per_cpu", 100, "involuntary switches/s per CPU",
                                  "Linux CFS: a thread sharing its CPU is preempted every "
                                  "few ms (sched_min_granularity 0.75–3 ms): hundreds/s"};
  Threshold cpu_compute_share{"cpu_compute_share", 0.70, "fraction of step time",
                              "seed 003: train > 80% is a model bottleneck; 70% here "
                              "since glue code lands in 'other'"};
  Threshold cpu_compute_other_max{"cpu_compute_other_max", 0.10, "fraction of step time",
                                  "stallscope: no data or sync finding ≥ 10% on a "
                                  "compute-bound CPU-only run"};
  // --- GPU ------------------------------------------------------------------------------------
  Threshold gpu_bound_util{"gpu_bound_util", 90, "%",
                           "seed 001 T1: util consistently > 90% ⇒ GPU-bound"};
  Threshold gpu_bound_clock{"gpu_bound_clock", 0.80, "fraction of max SM clock",
                            "seed 001 T1/T2: util high *and* SM clock high"};
  Threshold gpu_bound_power{"gpu_bound_power", 0.60, "fraction of power limit",
                            "seed 001 T1/T2: util high *and* power high"};
  Threshold util_misleading_util{"util_misleading_util", 80, "%",
                                 "seed 001 T2/U21: a 100%-util tile can hide a starved GPU"};
  Threshold util_misleading_clock{"util_misleading_clock", 0.70, "fraction of max SM clock",
                                  "seed 001 T2: correlate clocks.current.sm"};
  Threshold util_misleading_power{"util_misleading_power", 0.50, "fraction of power limit",
                                  "seed 001 T2: correlate power draw"};
  Threshold gpm_sm_active_low{"gpm_sm_active_low", 0.5, "fraction of time (GPM SM active)",
                              "DCGM profiling metrics: SM activity below 0.5 likely indicates "
                              "ineffective GPU use; with utilization high, the kernels are too "
                              "small to fill the GPU (util_misleading, measured)"};
  Threshold gpm_sm_active_busy{"gpm_sm_active_busy", 0.8, "fraction of time (GPM SM active)",
                               "DCGM profiling metrics: SM activity of 0.8 or more is necessary "
                               "for effective use; at or above it a low clock or power does not "
                               "mean small kernels"};
  Threshold gpm_tensor_idle{"gpm_tensor_idle", 0.05, "fraction of time (GPM tensor active)",
                            "issue 28: tensor pipes nearly idle while the SMs are busy: the "
                            "matmuls run on CUDA cores (FP32 without TF32, or half precision off "
                            "the tensor path); a bf16 matmul burn on an H100 reads 93%"};
  Threshold gpm_tensor_busy{"gpm_tensor_busy", 0.30, "fraction of time (GPM tensor active)",
                            "issue 28: tensor pipes this busy already do the math: precision "
                            "advice (bf16, TF32) is not given"};
  Threshold throttled_share{"throttled_share", 0.10, "fraction of samples",
                            "seed 001 T2/U23: thermal/power throttle; clock-event reasons other "
                            "than idle"};
  Threshold low_util_warn{"low_util_warn", 30, "%",
                          "seed 004: automatic warning if GPU util < 30%"};
  Threshold low_util_window{"low_util_window", 10, "samples",
                            "stallscope: `top` warns when the mean of the last 10 samples is low"};
  Threshold small_batch_util{"small_batch_util", 50, "%",
                             "seed 004: GPU util still < 50% ⇒ check VRAM headroom"};
  Threshold small_batch_memory{"small_batch_memory", 0.40, "fraction of GPU memory",
                               "seed 004: VRAM mostly unused ⇒ increase batch_size"};
  Threshold memory_pressure{"memory_pressure", 0.90, "fraction of GPU memory",
                            "stallscope: near the limit the caching allocator retries "
                            "cudaMalloc, then OOMs"};
  Threshold balance_good_cv{"balance_good_cv", 5, "% CV across GPUs", "seed 002: < 5% Excellent"};
  Threshold balance_fair_cv{"balance_fair_cv", 10, "% CV across GPUs",
                            "seed 002: 10–20% Fair (review batch size and data loading)"};
  Threshold balance_poor_cv{"balance_poor_cv", 20, "% CV across GPUs",
                            "seed 002: ≥ 20% Poor (investigate DDP config and data)"};
  Threshold straggler_ratio{"straggler_ratio", 1.15, "× the median rank's mean step time",
                            "seed 000 §1: ranks wait for the slowest at every sync"};
  Threshold straggler_wait_share{
      "straggler_wait_share", 0.10, "fraction of step time",
      "seed 000 §1: in lockstep (DDP) every rank's step takes as long as the slowest's; the "
      "others' measured comm_wait beyond the slowest rank's own is the time they lose to it"};
  // --- traces (GPU timeline) ------------------------------------------------------------------
  Threshold launch_bound_idle_share{"launch_bound_idle_share", 0.15, "fraction of the window",
                                    "seed 001 T15: Python/launch overhead dominates between "
                                    "kernels (GPU idle while the host launches or runs ops)"};
  Threshold launch_queue_shallow{"launch_queue_shallow", 2, "kernels queued (mean)",
                                 "HTA queue length: a host that stays ahead keeps kernels "
                                 "queued; < 2 means each kernel waits for its launch"};
  Threshold trace_sync_idle_share{"trace_sync_idle_share", 0.10, "fraction of the window",
                                  "seed 001 T3: .item()/.cpu()/synchronize in the loop drain the "
                                  "queue; the GPU idles during the sync and until the host "
                                  "launches again"};
  Threshold step_boundary_idle_share{"step_boundary_idle_share", 0.15, "fraction of the window",
                                     "stallscope: as launch_bound_idle_share, for idle at the "
                                     "start or end of the step with a deep queue inside it"};
  Threshold startup_window_share{"startup_window_share", 0.5, "fraction of the window",
                                 "stallscope: more than half the profiled window in one-time "
                                 "CUDA set-up calls is start-up, not training"};
  Threshold allocator_churn_steps{"allocator_churn_steps", 0.5, "fraction of steps",
                                  "PyTorch CUDA caching allocator: after warm-up a steady loop "
                                  "reuses cached blocks and calls cudaMalloc/cudaFree no more"};
  Threshold allocator_churn_idle_share{"allocator_churn_idle_share", 0.05, "fraction of the window",
                                       "the min_cost of a finding: GPU idle during memory calls"};
  Threshold comm_exposed_share{"comm_exposed_share", 0.10, "fraction of the window",
                               "seed 001 T1/T23: all_reduce/all_gather not overlapped with "
                               "compute ⇒ comms-bound"};
  Threshold trace_idle_share{"trace_idle_share", 0.15, "fraction of the window",
                             "issue 26: a window whose GPU idles this much and that no rule above "
                             "explains is named by the largest attributed cause of the idle "
                             "(the launch_bound_idle_share bar, seed 001 T15)"};
  Threshold trace_idle_cause_most{"trace_idle_cause_most", 0.5, "fraction of the GPU's idle time",
                                  "stallscope: a cause behind at least half the idle is the "
                                  "cause (confidence fair); less is the likeliest of several "
                                  "(weak)"};
  // --- sampling cost (issue 28): how often the sampler reads each tier of GPU fields ---------
  // A tier's period is its base, stretched so that its measured CPU cost (probed at open) stays
  // within its budget, never past its maximum. Budgets are fractions of one core at 10 samples/s
  // and shrink in proportion at slower sampling. Costs: issue 28's H100 table (driver 580).
  Threshold poll_util_buffer_s{"poll_util_buffer_s", 1, "s (shortest period)",
                               "issue 28: the driver's utilization buffer at <= 1 Hz; each call "
                               "returns every entry since the last, so none is lost"};
  Threshold poll_util_buffer_max_s{"poll_util_buffer_max_s", 10, "s (longest period)",
                                   "NVML keeps ~100 entries, one per 1/6-1/5 s (H100: 200 ms), "
                                   "i.e. 16-20 s: 10 s leaves margin"};
  Threshold poll_util_buffer_budget{"poll_util_buffer_budget", 0.0005, "fraction of a core",
                                    "issue 28: nvmlDeviceGetSamples costs 2.4 ms of CPU per GPU "
                                    "on an H100 (vs 20 us for the utilization rate); with the "
                                    "other budgets, 1 GPU at 10 Hz aims at 2x nvidia-smi's CPU"};
  Threshold poll_energy_s{"poll_energy_s", 5, "s (shortest period)",
                          "issue 28: energy at <= 0.2 Hz (power is read every sample)"};
  Threshold poll_energy_max_s{"poll_energy_max_s", 30, "s (longest period)",
                              "stallscope: a counter since driver load; slower reads lose nothing"};
  Threshold poll_energy_budget{"poll_energy_budget", 0.0002, "fraction of a core",
                               "issue 28: nvmlDeviceGetTotalEnergyConsumption costs 3.9 ms"};
  Threshold poll_process_util_s{"poll_process_util_s", 5, "s (shortest period)",
                                "issue 28: per-process utilization at <= 0.2 Hz, only while the "
                                "GPU has processes"};
  Threshold poll_process_util_max_s{"poll_process_util_max_s", 30, "s (longest period)",
                                    "stallscope: the driver keeps its samples since lastSeen"};
  Threshold poll_process_util_budget{"poll_process_util_budget", 0.0002, "fraction of a core",
                                     "issue 28: nvmlDeviceGetProcessUtilization costs 2.2 ms"};
  Threshold poll_slow_s{"poll_slow_s", 30, "s",
                        "issue 28: PCIe link generation and width, volatile ECC counts: at start "
                        "and then every 30 s (link width 37 us, ECC 9 us per call)"};
  Threshold poll_gpm_s{"poll_gpm_s", 2, "s (shortest period)",
                       "issue 28: GPM metrics are exact averages between two samples, so a low "
                       "rate loses no coverage; default >= 2 s (W&B: 15 s)"};
  Threshold poll_gpm_max_s{"poll_gpm_max_s", 30, "s (longest period)",
                           "stallscope: the steady window's average needs a few GPM windows"};
  Threshold poll_gpm_budget{"poll_gpm_budget", 0.0025, "fraction of a core",
                            "issue 28: GPM on 8 GPUs adds <= 0.5% of a core; nvmlGpmSampleGet "
                            "76-93 us + nvmlGpmMetricsGet 1.4-1.9 ms per GPU"};
  Threshold poll_host_slow_s{"poll_host_slow_s", 1, "s",
                             "issue 28: memory, load, PSI, disks, cgroup and /dev/shm at <= 1 Hz "
                             "(load and PSI avg10 are themselves 1 min and 10 s averages); CPU "
                             "shares and the process tree every sample"};
  Threshold poll_pcie_s{"poll_pcie_s", 5, "s",
                        "issue 28: nvmlDeviceGetPcieThroughput blocks 20 ms per direction: only "
                        "with --pcie, on its own thread, at <= 0.2 Hz"};
  // --- confidence levels (Finding::confidence; the rules pick one by what was measured) ------
  Threshold confidence_measured{"confidence_measured", 0.9, "confidence (0..1)",
                                "stallscope: the symptom and its mechanism are both measured"};
  Threshold confidence_pattern{"confidence_pattern", 0.85, "confidence (0..1)",
                               "stallscope: a measured symptom with its signature (a period, "
                               "syncs per step, a shallow launch queue)"};
  Threshold confidence_strong{"confidence_strong", 0.8, "confidence (0..1)",
                              "stallscope: a measured symptom with one supporting signal"};
  Threshold confidence_likely{"confidence_likely", 0.75, "confidence (0..1)",
                              "stallscope: a signature whose precondition was checked"};
  Threshold confidence_fair{"confidence_fair", 0.7, "confidence (0..1)",
                            "stallscope: a measured symptom, its cause inferred"};
  Threshold confidence_weak{"confidence_weak", 0.6, "confidence (0..1)",
                            "stallscope: a symptom without its signature"};
  Threshold confidence_guess{"confidence_guess", 0.5, "confidence (0..1)",
                             "stallscope: the likelier of two causes the data cannot split"};
  Threshold confidence_doubtful{"confidence_doubtful", 0.4, "confidence (0..1)",
                                "stallscope: a signature whose precondition failed"};
  Threshold corrupt_data_confidence_max{
      "corrupt_data_confidence_max", 0.3, "confidence (0..1)",
      "stallscope: the most any finding gets when phase records were corrupt (issue 12)"};
  Threshold busy_host_other_share{
      "busy_host_other_share", 0.25, "fraction of the host's CPUs",
      "stallscope: processes outside the job used this much of the host's CPUs (issue 12)"};
  Threshold busy_host_other_cpus{"busy_host_other_cpus", 0.5, "CPUs",
                                 "stallscope: and at least this many CPUs (not noise)"};
  Threshold busy_host_confidence_max{
      "busy_host_confidence_max", 0.6, "confidence (0..1)",
      "stallscope: the most a host-CPU finding gets on a busy host (issue 12)"};
  Threshold rate_change_min{
      "rate_change_min", 1.05, "× steps/s",
      "stallscope: a smaller change is within what two runs of the same job differ by (measured "
      "up to 4% on a quiet 2-CPU VM, 5% on a CI host, issue 13)"};
  Threshold pass_recovery_min{
      "pass_recovery_min", 1.10, "× steps/s of pass A",
      "issue 13: a pass recovers the loss only when significantly faster by this much"};
  Threshold rate_min_steps{"rate_min_steps", 3, "steady steps per run",
                           "stallscope: fewer steps give a rate without a bootstrap interval, "
                           "and `compare` says too few steps to say"};
  Threshold sweep_recommend_within{
      "sweep_recommend_within", 0.97, "× the best steps/s",
      "issue 13: the sweep recommends the cheapest setting within 3% of the best"};
  Threshold pass_untimed_margin{
      "pass_untimed_margin", 0.05, "fraction of pass A's step",
      "stallscope: what pass C may save beyond A's data_loading share (plus A→A2 drift) for the "
      "loading that data_loading does not time; more is the synthetic batches' own effect"};
  Threshold scaling_uneven_step_share{
      "scaling_uneven_step_share", 0.25, "fraction of the median step",
      "stallscope: a rank waits in comm_wait, or is slower in a phase than every other rank, by "
      "this much of its ordinary (median) step: uneven at every step, not a main-rank conclusion"};
  Threshold scaling_host_full_share{
      "scaling_host_full_share", 0.90, "fraction of the allowed CPUs",
      "stallscope: N processes using this much of the CPUs they may run on compete for the host"};
  // --- Python stacks: which lines the verdict names (diagnose/stack_attribution.cc) ----------
  Threshold stack_min_samples{
      "stack_min_samples", 20, "samples in the phase",
      "stallscope: fewer stack samples of a phase than this name no line (at 50 Hz, 0.4 s of "
      "it): one line's share would move by 5 points or more with a single sample"};
  Threshold stack_gpu_idle_pct{
      "stack_gpu_idle_pct", 5, "% utilization (the driver's sub-second samples)",
      "stallscope: a driver sample period at or below this is the GPU idle; the main thread's "
      "stack samples in it say what the host did while the GPU waited (issue 31)"};
  Threshold stack_line_min_share{
      "stack_line_min_share", 0.10, "fraction of the phase's samples",
      "stallscope: a line the main thread was at in fewer of a phase's samples is not named in the "
      "evidence (report.json and the HTML report list every line)"};
  // --- doctor: the machine before a job (doctor/host_checks.cc, doctor/gpu_checks.cc) -------
  Threshold shm_min_gib{"shm_min_gib", 1, "GiB of /dev/shm",
                        "PyTorch issues and README: DataLoader workers die of a container's "
                        "default 64 MiB /dev/shm (docker run --shm-size); doctor asks for 1 GiB"};
  Threshold nofile_min{"nofile_min", 4096, "open files (soft RLIMIT_NOFILE)",
                       "torch.multiprocessing: the file_descriptor sharing strategy keeps a "
                       "descriptor per tensor in flight; many distributions' default is 1024"};
  Threshold checkpoint_free_warn_gib{
      "checkpoint_free_warn_gib", 10, "GiB free",
      "ZeRO (Rajbhandari et al., 2020) §3.1: mixed-precision Adam holds 16 bytes per parameter, "
      "so a full checkpoint of a 1B-parameter model is ~16 GB"};
  Threshold checkpoint_free_fail_gib{"checkpoint_free_fail_gib", 1, "GiB free",
                                     "stallscope: below this the first torch.save fails"};
  Threshold data_slow_mbps{"data_slow_mbps", 200, "MB/s (files of data_small_file_mib or more)",
                           "seed 001 T8/U8: below a single SATA SSD's ~500 MB/s; network disks "
                           "and HDDs sit here"};
  Threshold data_small_file_mib{"data_small_file_mib", 1, "MiB (mean file size)",
                                "seed 001 U25: smaller files are read for their count (latency, "
                                "a round trip per open on a network filesystem), not their bytes"};
  Threshold data_slow_read_us{"data_slow_read_us", 1000, "µs (p50 of 4 KiB random reads)",
                              "stallscope: ~0.1 ms on local NVMe, ~0.2 ms on a SATA SSD, several "
                              "ms on a disk that seeks or across a network"};
  Threshold cpu_quota_short_cpus{"cpu_quota_short_cpus", 0.5, "CPUs below the affinity mask",
                                 "seed 001 T4/U40: torch and os.sched_getaffinity count the "
                                 "mask's CPUs; a cgroup quota this far below it is a limit they "
                                 "do not see"};
  Threshold retired_pages_warn{"retired_pages_warn", 15, "retired pages",
                               "DCGM gpu_hardware_limits.h: 15 retired pages warn"};
  Threshold retired_pages_fail{"retired_pages_fail", 63, "retired pages",
                               "DCGM gpu_hardware_limits.h: 63 retired pages fail a GPU"};
  Threshold power_limit_cut{"power_limit_cut", 0.95, "fraction of the default power limit",
                            "stallscope: boards report limits rounded to a few watts; a cap "
                            "someone set is a round, large cut"};
  Threshold unseen_gpu_mem_gib{"unseen_gpu_mem_gib", 1, "GiB used with no listed process",
                               "stallscope: the driver reserves a few hundred MiB; more is a "
                               "process this container cannot see"};
  Threshold unseen_gpu_util_pct{"unseen_gpu_util_pct", 10, "% busy with no listed process",
                                "stallscope: a GPU this busy with no process listed is used by "
                                "one this container cannot see"};
};

/// The values every command uses.
inline constexpr ThresholdSet kThresholds{};

/// Every threshold in table order (README "Thresholds", `stallscope diagnose --thresholds`).
inline constexpr std::array<Threshold, 127> kThresholdTable{{
    kThresholds.data_bound_share,
    kThresholds.loader_cpu_busy,
    kThresholds.worker_cpu_pegged,
    kThresholds.io_blocked_share,
    kThresholds.io_wait_pct,
    kThresholds.io_low_cpu,
    kThresholds.worker_headroom_cpus,
    kThresholds.prefetch_factor_target,
    kThresholds.worker_pick_tolerance,
    kThresholds.min_predicted_speedup,
    kThresholds.host_sync_other_share,
    kThresholds.live_outside_phases_share,
    kThresholds.host_sync_per_step_low,
    kThresholds.host_sync_per_step_high,
    kThresholds.logging_residual_share,
    kThresholds.periodic_share,
    kThresholds.min_cost,
    kThresholds.gpu_bound_step_share,
    kThresholds.comm_wait_share,
    kThresholds.confidence_margin_span,
    kThresholds.oscillation_ratio,
    kThresholds.gpu_time_coverage,
    kThresholds.warmup_robust_z,
    kThresholds.warmup_min_excess,
    kThresholds.warmup_min_excess_s,
    kThresholds.warmup_settle_steps,
    kThresholds.warmup_max_share,
    kThresholds.steady_sure_steps,
    kThresholds.steady_sure_s,
    kThresholds.startup_most_share,
    kThresholds.gpu_busy_by_events,
    kThresholds.outlier_robust_z,
    kThresholds.robust_sigma_floor,
    kThresholds.period_min_points,
    kThresholds.period_min_cycles,
    kThresholds.period_alpha,
    kThresholds.period_min_strength,
    kThresholds.period_lag_window,
    kThresholds.period_subharmonic_power,
    kThresholds.regular_gap_share,
    kThresholds.gap_jitter_steps,
    kThresholds.loader_pattern_share,
    kThresholds.oversub_threads_per_cpu,
    kThresholds.oversub_nvcsw_per_cpu,
    kThresholds.cpu_compute_share,
    kThresholds.cpu_compute_other_max,
    kThresholds.gpu_bound_util,
    kThresholds.gpu_bound_clock,
    kThresholds.gpu_bound_power,
    kThresholds.util_misleading_util,
    kThresholds.util_misleading_clock,
    kThresholds.util_misleading_power,
    kThresholds.gpm_sm_active_low,
    kThresholds.gpm_sm_active_busy,
    kThresholds.gpm_tensor_idle,
    kThresholds.gpm_tensor_busy,
    kThresholds.throttled_share,
    kThresholds.low_util_warn,
    kThresholds.low_util_window,
    kThresholds.small_batch_util,
    kThresholds.small_batch_memory,
    kThresholds.memory_pressure,
    kThresholds.balance_good_cv,
    kThresholds.balance_fair_cv,
    kThresholds.balance_poor_cv,
    kThresholds.straggler_ratio,
    kThresholds.straggler_wait_share,
    kThresholds.launch_bound_idle_share,
    kThresholds.launch_queue_shallow,
    kThresholds.trace_sync_idle_share,
    kThresholds.step_boundary_idle_share,
    kThresholds.startup_window_share,
    kThresholds.allocator_churn_steps,
    kThresholds.allocator_churn_idle_share,
    kThresholds.comm_exposed_share,
    kThresholds.trace_idle_share,
    kThresholds.trace_idle_cause_most,
    kThresholds.poll_util_buffer_s,
    kThresholds.poll_util_buffer_max_s,
    kThresholds.poll_util_buffer_budget,
    kThresholds.poll_energy_s,
    kThresholds.poll_energy_max_s,
    kThresholds.poll_energy_budget,
    kThresholds.poll_process_util_s,
    kThresholds.poll_process_util_max_s,
    kThresholds.poll_process_util_budget,
    kThresholds.poll_slow_s,
    kThresholds.poll_gpm_s,
    kThresholds.poll_gpm_max_s,
    kThresholds.poll_gpm_budget,
    kThresholds.poll_host_slow_s,
    kThresholds.poll_pcie_s,
    kThresholds.confidence_measured,
    kThresholds.confidence_pattern,
    kThresholds.confidence_strong,
    kThresholds.confidence_likely,
    kThresholds.confidence_fair,
    kThresholds.confidence_weak,
    kThresholds.confidence_guess,
    kThresholds.confidence_doubtful,
    kThresholds.corrupt_data_confidence_max,
    kThresholds.busy_host_other_share,
    kThresholds.busy_host_other_cpus,
    kThresholds.busy_host_confidence_max,
    kThresholds.rate_change_min,
    kThresholds.pass_recovery_min,
    kThresholds.rate_min_steps,
    kThresholds.sweep_recommend_within,
    kThresholds.pass_untimed_margin,
    kThresholds.scaling_uneven_step_share,
    kThresholds.scaling_host_full_share,
    kThresholds.stack_min_samples,
    kThresholds.stack_gpu_idle_pct,
    kThresholds.stack_line_min_share,
    kThresholds.shm_min_gib,
    kThresholds.nofile_min,
    kThresholds.checkpoint_free_warn_gib,
    kThresholds.checkpoint_free_fail_gib,
    kThresholds.data_slow_mbps,
    kThresholds.data_small_file_mib,
    kThresholds.data_slow_read_us,
    kThresholds.cpu_quota_short_cpus,
    kThresholds.retired_pages_warn,
    kThresholds.retired_pages_fail,
    kThresholds.power_limit_cut,
    kThresholds.unseen_gpu_mem_gib,
    kThresholds.unseen_gpu_util_pct,
}};

/// The table for the README and the CLI.
[[nodiscard]] constexpr std::span<const Threshold> ThresholdTable() { return kThresholdTable; }

}  // namespace stallscope
