#include "export/exporter.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "fakes/fake_gpu_backend.h"
#include "monitor/session.h"

namespace stallscope::exporter {
namespace {

struct ListenCase {
  const char* text;
  bool ok;
  const char* host;
  uint16_t port;
};

TEST(ParseListenAddress, Table) {
  const ListenCase cases[] = {
      {"127.0.0.1:9400", true, "127.0.0.1", 9400},
      {"0.0.0.0:80", true, "0.0.0.0", 80},
      {"127.0.0.1:0", true, "127.0.0.1", 0},  // any free port
      {"[::1]:9400", true, "::1", 9400},
      {"[::]:1", true, "::", 1},
      {"127.0.0.1:65535", true, "127.0.0.1", 65535},
      {"127.0.0.1:65536", false, "", 0},
      {"127.0.0.1:-1", false, "", 0},
      {"127.0.0.1:", false, "", 0},
      {"127.0.0.1:94x0", false, "", 0},
      {"127.0.0.1", false, "", 0},
      {":9400", false, "", 0},
      {"localhost:9400", false, "", 0},  // numeric only: no resolver in a flag
      {"::1:9400", false, "", 0},        // IPv6 needs brackets
      {"[127.0.0.1]:9400", false, "", 0},
      {"256.0.0.1:9400", false, "", 0},
      {"", false, "", 0},
  };
  for (const auto& c : cases) {
    auto r = ParseListenAddress(c.text);
    ASSERT_EQ(r.ok(), c.ok) << c.text;
    if (!c.ok) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
      EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line: " << c.text;
      continue;
    }
    EXPECT_EQ(r->host, c.host);
    EXPECT_EQ(r->port, c.port);
  }
  EXPECT_EQ(ParseListenAddress("[::1]:9400")->ToString(), "[::1]:9400");
}

// Issue 27 B18: a non-loopback address is warned about (serve_cmd.cc); which ones are.
TEST(ListenAddress, LoopbackAndAny) {
  struct Case {
    const char* text;
    bool loopback;
    bool any;
  } cases[] = {
      {"127.0.0.1:1", true, false},
      {"127.3.2.1:1", true, false},
      {"[::1]:1", true, false},
      {"[::ffff:127.0.0.1]:1", true, false},
      {"0.0.0.0:1", false, true},
      {"[::]:1", false, true},
      {"10.0.0.5:1", false, false},
      {"[2001:db8::1]:1", false, false},
      {"[::ffff:10.0.0.1]:1", false, false},
  };
  for (const auto& c : cases) {
    auto a = ParseListenAddress(c.text);
    ASSERT_TRUE(a.ok()) << c.text;
    EXPECT_EQ(a->IsLoopback(), c.loopback) << c.text;
    EXPECT_EQ(a->IsAny(), c.any) << c.text;
  }
  EXPECT_EQ(ParseListenAddress("127.0.0.1:9400")->ToString(), "127.0.0.1:9400");
}

/// One H100 at 40% with most metrics, a host, one rank with 3 steps, a data-bound window.
Snapshot FullSnapshot() {
  Snapshot s;
  s.header.hostname = "node-a";
  s.header.root_pid = 100;
  s.header.gpus.push_back(gpu::FakeGpuBackend::MakeStatic(0));
  s.have_sample = true;
  gpu::GpuSample g;
  g.util_gpu_pct = 40;
  g.util_mem_pct = 12;
  g.mem_used_bytes = 1024ULL << 20;
  g.mem_total_bytes = 81559ULL << 20;
  g.power_mw = 350'500;
  g.energy_mj = 123456;
  g.temperature_c = 61;
  g.sm_clock_mhz = 1755;
  g.mem_clock_mhz = 2619;
  g.clock_event_reasons = gpu::kClockEventSwPowerCap;
  s.sample.gpus.push_back(g);
  s.sample.host.cpu_count = 8;
  s.sample.host.cpu = host::CpuShares{.busy_pct = 50, .iowait_pct = 5};
  s.sample.host.psi_io = host::Pressure{.some_avg10_pct = 2.5, .full_avg10_pct = 1.0};
  s.sample.has_processes = true;
  for (auto [pid, cpu] : {std::pair{100, 90.0}, {101, 80.0}, {102, 70.0}}) {
    host::ProcessSample p;
    p.pid = pid;
    p.cpu_pct = cpu;
    s.sample.processes.push_back(p);
  }
  analysis::ProcessTotals t;
  t.pid = 100;
  t.steps = 3;
  t.phases = {{"data_loading", 1'500'000'000, 0}, {"forward_pass", 300'000'000, 0}};
  t.step_durations.Add(0.6);
  t.step_durations.Add(0.7);
  s.processes.push_back(t);
  analysis::LiveWindow w;
  w.steps = 3;
  w.steps_per_s = 1.5;
  w.data_share = 0.75;
  w.covered_share = 0.9;
  s.window = w;
  return s;
}

std::string Text(const Snapshot& s) {
  return prometheus::TextSerializer().Serialize(MapMetrics(s));
}

TEST(MapMetrics, ExpectedLines) {
  const std::string text = Text(FullSnapshot());
  const std::string gpu =
      R"({gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",pci_bus_id="00000000:17:00.0",)"
      R"(device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"})";
  const std::string expected[] = {
      "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
      "DCGM_FI_DEV_GPU_UTIL" + gpu + " 40\n",
      "DCGM_FI_DEV_MEM_COPY_UTIL" + gpu + " 12\n",
      "DCGM_FI_DEV_FB_USED" + gpu + " 1024\n",
      "DCGM_FI_DEV_FB_FREE" + gpu + " 80535\n",
      "DCGM_FI_DEV_POWER_USAGE" + gpu + " 350.5\n",
      "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n",
      "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" + gpu + " 123456\n",
      "DCGM_FI_DEV_GPU_TEMP" + gpu + " 61\n",
      "DCGM_FI_DEV_SM_CLOCK" + gpu + " 1755\n",
      "DCGM_FI_DEV_MEM_CLOCK" + gpu + " 2619\n",
      "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" + gpu + " 4\n",
      R"(stallscope_gpu_throttle_reason{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000",)"
      R"(device="nvidia0",reason="sw_power_cap"} 1)"
      "\n",
      R"(stallscope_gpu_throttle_reason{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000",)"
      R"(device="nvidia0",reason="hw_thermal"} 0)"
      "\n",
      "stallscope_host_cpu_busy_ratio 0.5\n",
      "stallscope_host_cpu_iowait_ratio 0.05\n",
      "stallscope_host_psi_some_avg10_ratio{resource=\"io\"} 0.025\n",
      "stallscope_host_psi_full_avg10_ratio{resource=\"io\"} 0.01\n",
      "stallscope_rank_process_cpu_cores{rank=\"0\"} 0.9\n",
      "stallscope_dataloader_workers 2\n",
      "stallscope_dataloader_worker_cpu_cores 1.5\n",
      "# TYPE stallscope_steps_total counter\n",
      "stallscope_steps_total{rank=\"0\"} 3\n",
      "# TYPE stallscope_phase_seconds_total counter\n",
      "stallscope_phase_seconds_total{phase=\"data_loading\",rank=\"0\"} 1.5\n",
      "stallscope_phase_seconds_total{phase=\"forward_pass\",rank=\"0\"} 0.3\n",
      "# TYPE stallscope_step_duration_seconds histogram\n",
      "stallscope_step_duration_seconds_count{rank=\"0\"} 2\n",
      "stallscope_step_duration_seconds_sum{rank=\"0\"} 1.3\n",
      "stallscope_step_duration_seconds_bucket{rank=\"0\",le=\"0.5\"} 0\n",
      "stallscope_step_duration_seconds_bucket{rank=\"0\",le=\"1\"} 2\n",
      "stallscope_step_duration_seconds_bucket{rank=\"0\",le=\"+Inf\"} 2\n",
      "stallscope_steps_per_second 1.5\n",
      "stallscope_data_wait_ratio 0.75\n",
      "stallscope_verdict_info{class=\"data_bound_cpu\"} 1\n",
      "stallscope_verdict_cost_ratio 0.75\n",
      "stallscope_run_stage_info{stage=\"steady\"} 1\n",
      "stallscope_warmup_steps 0\n",
  };
  for (const std::string& line : expected)
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "in:\n" << text;
}

TEST(MapMetrics, AbsentMetricsAreLeftOutNotZero) {
  Snapshot s;
  s.header.gpus.push_back(gpu::FakeGpuBackend::MakeStatic(0));
  s.header.gpus.push_back(gpu::FakeGpuBackend::MakeStatic(1));
  s.have_sample = true;
  s.sample.gpus.resize(2);
  s.sample.gpus[0].util_gpu_pct = 7;
  s.sample.gpus[1].lost = true;
  s.sample.gpus[1].util_gpu_pct = 99;  // a lost GPU says nothing
  const std::string text = Text(s);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), std::string::npos) << text;
  EXPECT_EQ(text.find("gpu=\"1\""), std::string::npos) << text;
  for (const char* absent :
       {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "stallscope_steps", "stallscope_verdict",
        "stallscope_host_cpu_busy_ratio", "stallscope_dataloader"})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent << " in:\n" << text;
  // Nothing sampled yet: no family at all (no HELP/TYPE lines without samples).
  EXPECT_EQ(Text(Snapshot{}), "");
}

// Issue 28: GPM under DCGM's profiling names and units (dcgm-exporter's dcp-metrics-included.csv:
// activities as ratios 0..1, link rates in bytes/s), with the labels of the other GPU metrics.
TEST(MapMetrics, GpmUnderDcgmProfilingNamesAsRatiosAndBytesPerSecond) {
  Snapshot s = FullSnapshot();
  gpu::GpmMetrics x;
  x.window_ns = 5'000'000'000;
  x.graphics_active_pct = 99.5;
  x.sm_active_pct = 96;
  x.sm_occupancy_pct = 14.25;
  x.tensor_active_pct = 93.75;
  x.dram_active_pct = 25;
  x.fp64_active_pct = 0;
  x.fp32_active_pct = 1.5;
  x.fp16_active_pct = 0.5;
  x.pcie_tx_mibps = 12.5;
  x.pcie_rx_mibps = 1200;
  x.nvlink_tx_mibps = 0;
  x.nvlink_rx_mibps = 2;
  s.sample.gpus[0].gpm = x;
  const std::string text = Text(s);
  const std::string gpu =
      R"({gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",pci_bus_id="00000000:17:00.0",)"
      R"(device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"})";
  const std::string expected[] = {
      "# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned "
      "(NVML GPM).\n# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n",
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE" + gpu + " 0.995\n",
      "DCGM_FI_PROF_SM_ACTIVE" + gpu + " 0.96\n",
      "DCGM_FI_PROF_SM_OCCUPANCY" + gpu + " 0.1425\n",
      "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" + gpu + " 0.9375\n",
      "DCGM_FI_PROF_DRAM_ACTIVE" + gpu + " 0.25\n",
      "DCGM_FI_PROF_PIPE_FP64_ACTIVE" + gpu + " 0\n",
      "DCGM_FI_PROF_PIPE_FP32_ACTIVE" + gpu + " 0.015\n",
      "DCGM_FI_PROF_PIPE_FP16_ACTIVE" + gpu + " 0.005\n",
      "# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge\n",
      "DCGM_FI_PROF_PCIE_TX_BYTES" + gpu + " 13107200\n",
      "DCGM_FI_PROF_PCIE_RX_BYTES" + gpu + " 1258291200\n",
      "DCGM_FI_PROF_NVLINK_TX_BYTES" + gpu + " 0\n",
      "DCGM_FI_PROF_NVLINK_RX_BYTES" + gpu + " 2097152\n",
  };
  for (const std::string& line : expected)
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "in:\n" << text;

  // A value the driver did not give, and a GPU without GPM: no line (never a 0).
  s.sample.gpus[0].gpm->tensor_active_pct.reset();
  s.header.gpus.push_back(gpu::FakeGpuBackend::MakeStatic(1));
  s.sample.gpus.push_back(s.sample.gpus[0]);
  s.sample.gpus[1].gpm.reset();
  const std::string partial = Text(s);
  EXPECT_EQ(partial.find("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), std::string::npos) << partial;
  EXPECT_NE(partial.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\""), std::string::npos) << partial;
  EXPECT_EQ(partial.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\""), std::string::npos) << partial;
  EXPECT_NE(partial.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), std::string::npos) << partial;
  EXPECT_EQ(Text(FullSnapshot()).find("DCGM_FI_PROF"), std::string::npos);
}

// Issue 26: the live verdict says nothing before the steady state, and the stage says why.
TEST(MapMetrics, StartupAndWarmupAreAStageWithNoVerdict) {
  Snapshot s;
  analysis::ProcessTotals a;
  a.pid = 1;
  s.processes = {a};
  EXPECT_NE(Text(s).find("stallscope_run_stage_info{stage=\"start-up\"} 1\n"), std::string::npos)
      << Text(s);
  analysis::LiveWindow w;
  w.steps = 2;
  w.data_share = 0.9;  // a slow first batch
  w.stage = analysis::RunStage::kWarmup;
  w.warmup_steps = 2;
  s.window = w;
  const std::string text = Text(s);
  EXPECT_NE(text.find("stallscope_run_stage_info{stage=\"warm-up\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("stallscope_verdict_info{class=\"none\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stallscope_warmup_steps 2\n"), std::string::npos) << text;
}

TEST(MapMetrics, RanksAreSummedPerRankAndVerdictClasses) {
  Snapshot s;
  analysis::ProcessTotals a, b, c;
  a.pid = 1, a.rank = 0, a.steps = 5;
  b.pid = 2, b.rank = 0, b.steps = 2;  // a second ring of rank 0 (a restarted process)
  c.pid = 3, c.rank = 1, c.steps = 4;
  s.processes = {a, b, c};
  analysis::LiveWindow w;
  w.steps = 4;
  w.covered_share = 0.2;  // 80% outside every phase
  s.window = w;
  const std::string text = Text(s);
  EXPECT_NE(text.find("stallscope_steps_total{rank=\"0\"} 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stallscope_steps_total{rank=\"1\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stallscope_verdict_info{class=\"host_sync_or_logging\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stallscope_verdict_cost_ratio 0.8\n"), std::string::npos) << text;
}

TEST(WindowTracker, GivesTheWindowOverTheSpan) {
  WindowTracker tracker(10 * kNsPerSec);
  analysis::ProcessTotals p;
  p.pid = 7;
  std::optional<analysis::LiveWindow> last;
  for (int t = 0; t <= 30; ++t) {
    p.steps = static_cast<uint64_t>(t * 2);  // 2 steps/s
    last = tracker.Update(t * kNsPerSec, {p});
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_DOUBLE_EQ(last->steps_per_s, 2.0);
  EXPECT_DOUBLE_EQ(last->window_s, 10.0);
  EXPECT_FALSE(tracker.Update(31 * kNsPerSec, {}).has_value());
}

/// GET `path` from 127.0.0.1:`port`; the whole response ("" when it cannot connect).
std::string HttpGet(uint16_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return close(fd), "";
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return close(fd), "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

/// An open TCP connection to 127.0.0.1:`port` that sends `partial` and then nothing.
int IdleConnection(uint16_t port, const std::string& partial) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  if (!partial.empty()) {
    EXPECT_GT(write(fd, partial.data(), partial.size()), 0);
  }
  return fd;
}

TEST(Exporter, ServesMetricsAndRefusesATakenPort) {
  Snapshot snap = FullSnapshot();
  auto e = Exporter::Start(
      *ParseListenAddress("127.0.0.1:0"), [&](Snapshot& out) { out = snap; }, 50'000'000);
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_NE((*e)->port(), 0);
  const std::string response = HttpGet((*e)->port(), "/metrics");
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("stallscope_verdict_info{class=\"data_bound_cpu\"} 1"), std::string::npos)
      << response;
  const std::string taken = fmt::format("127.0.0.1:{}", (*e)->port());
  auto again = Exporter::Start(
      *ParseListenAddress(taken), [](Snapshot&) {}, 50'000'000);
  ASSERT_FALSE(again.ok());
  // Issue 27 B21: the errno of the failed bind names the cause.
  EXPECT_EQ(again.error().message, "cannot listen on " + taken + ": the port is in use");
}

// Issue 27 B19: `run --serve` on a taken port is found before the run directory is made.
TEST(CheckListen, ATakenPortIsFoundBeforeTheServerStarts) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));
  Status st = CheckListen(*ParseListenAddress(taken));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "cannot listen on " + taken + ": the port is in use");
  close(fd);
  EXPECT_TRUE(CheckListen(*ParseListenAddress(taken)).ok());  // free again: nothing was held
  EXPECT_TRUE(CheckListen(*ParseListenAddress("127.0.0.1:0")).ok());
  // TEST-NET-3 (RFC 5737): on no interface here (unless the kernel lets any address be bound).
  std::ifstream nonlocal("/proc/sys/net/ipv4/ip_nonlocal_bind");
  if (int any = 0; nonlocal >> any && any != 0) return;
  Status foreign = CheckListen(*ParseListenAddress("203.0.113.7:9400"));
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().message,
            "cannot listen on 203.0.113.7:9400: the address is not on this machine");
}

// Issue 27 B18: 0.0.0.0 (and any address other machines can reach) was served without a word.
TEST(ExposureWarning, EveryAddressButLoopback) {
  for (const char* loopback : {"127.0.0.1:9400", "127.1.2.3:1", "[::1]:9400"})
    EXPECT_EQ(ExposureWarning(*ParseListenAddress(loopback)), std::nullopt) << loopback;
  EXPECT_EQ(ExposureWarning(*ParseListenAddress("0.0.0.0:9400")),
            "warning: 0.0.0.0:9400 is every network interface of this machine: anyone who can "
            "reach it can read the metrics (host name, GPUs, phase names), with no "
            "authentication; use 127.0.0.1:PORT unless you mean it");
  EXPECT_EQ(ExposureWarning(*ParseListenAddress("[::]:1")),
            "warning: [::]:1 is every network interface of this machine: anyone who can reach "
            "it can read the metrics (host name, GPUs, phase names), with no authentication; use "
            "127.0.0.1:PORT unless you mean it");
  EXPECT_EQ(ExposureWarning(*ParseListenAddress("10.1.2.3:9400")),
            "warning: 10.1.2.3:9400 is reachable from the network: anyone who can reach it can "
            "read the metrics (host name, GPUs, phase names), with no authentication; use "
            "127.0.0.1:PORT unless you mean it");
}

// Issue 27 B13: the documented `--listen [::1]:PORT` could not listen: Debian's civetweb has no
// IPv6. Served (through the relay when civetweb lacks it) and scraped over IPv6.
TEST(Exporter, ServesOverIpv6) {
  const int probe = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_addr = in6addr_loopback;
  const bool have_v6 =
      probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&any6), sizeof any6) == 0;
  if (probe >= 0) close(probe);
  if (!have_v6) GTEST_SKIP() << "no IPv6 loopback here";
  Snapshot snap = FullSnapshot();
  auto e = Exporter::Start(
      *ParseListenAddress("[::1]:0"), [&](Snapshot& out) { out = snap; }, 50'000'000);
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_NE((*e)->port(), 0);
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  any6.sin6_port = htons((*e)->port());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&any6), sizeof any6), 0);
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
    response.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("stallscope_verdict_info{class=\"data_bound_cpu\"} 1"), std::string::npos)
      << response;
}

/// Issue 15: a client that connects and sends nothing (or half a request) must not delay
/// sampling. 16 idle connections against 4 server threads, a 100 ms sampling session: every
/// sample still comes on time, and the publisher keeps publishing.
TEST(Exporter, IdleClientsDoNotDelaySampling) {
  constexpr int64_t kIntervalNs = 100'000'000;
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> sampled;
  gpu::FakeGpuBackend gpus({gpu::FakeGpuBackend::MakeStatic(0)},
                           [&](size_t, size_t, gpu::GpuSample& out) {
                             out.util_gpu_pct = 50;
                             std::lock_guard lock(mu);
                             sampled.push_back(std::chrono::steady_clock::now());
                           });
  SystemClock clock;
  sample::RecordingHeader header;
  header.gpus.push_back(gpus.Static(0));
  monitor::SessionOptions options;
  options.interval_ns = kIntervalNs;
  host::ProcFs procfs;
  procfs.proc_root = STALLSCOPE_SOURCE_DIR "/tests/data/proc/node_a";
  procfs.cgroup_root = STALLSCOPE_SOURCE_DIR "/tests/data/cgroup/node_a";
  monitor::Session session(gpus, procfs, clock, header, options);
  auto e = Exporter::Start(
      *ParseListenAddress("127.0.0.1:0"),
      [&](Snapshot& out) {
        out.header = header;
        out.have_sample = session.CopyLatest(out.sample);
      },
      kIntervalNs, ServerLimits{.num_threads = 4, .request_timeout_ms = 5000});
  ASSERT_TRUE(e.ok()) << e.error().message;
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(IdleConnection((*e)->port(), i % 2 ? "GET /me" : ""));
  session.StartSampling();
  const int64_t published_before = (*e)->published();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  session.RequestStop();
  ASSERT_TRUE(session.Finish(std::nullopt).ok());
  for (int fd : idle) close(fd);
  std::lock_guard lock(mu);
  ASSERT_GE(sampled.size(), 18u) << "20 samples expected in 2 s";
  for (size_t i = 1; i < sampled.size(); ++i) {
    const auto gap =
        std::chrono::duration_cast<std::chrono::milliseconds>(sampled[i] - sampled[i - 1]);
    // A missed interval would show as a gap of 200 ms or more; scheduling jitter on a busy CI
    // machine stays well under 50 ms.
    EXPECT_LT(gap.count(), 150) << "sample " << i;
  }
  EXPECT_GE((*e)->published() - published_before, 15);
}

}  // namespace
}  // namespace stallscope::exporter
