#include "report/ledger_render.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace stallscope::report {
namespace {

using analysis::LedgerPart;

/// One rank's ledger of 40 steps of 100 ms: CUDA-event compute 88% (the host waiting for it 27%
/// of the step), data 7%, host work 5% of which a phase the job named itself.
analysis::Ledger GpuLedger() {
  analysis::StepLedger r;
  r.rank = 0;
  r.steps = 40;
  r.step_s = 0.1;
  r.compute_on_gpu = true;
  r.gpu_busy = 0.88;
  r.host_compute = 0.61;
  r.host_wait = 0.27;
  r.parts[static_cast<size_t>(LedgerPart::kCompute)] = 0.88;
  r.parts[static_cast<size_t>(LedgerPart::kData)] = 0.07;
  r.parts[static_cast<size_t>(LedgerPart::kHostWork)] = 0.05;
  r.members = {{"forward_pass", 0.30}, {"backward_pass", 0.50}, {"optimizer_step", 0.08},
               {"data_loading", 0.07}, {"other", 0.03},         {"my\x1b[2Jphase", 0.02}};
  analysis::Ledger l;
  l.ranks.push_back(r);
  l.job = r;
  l.job.rank = -1;
  return l;
}

/// Two lockstep ranks: rank 1 loads slowly, rank 0 waits for it.
analysis::Ledger LockstepLedger() {
  analysis::Ledger l;
  l.lockstep = true;
  auto set = [](analysis::StepLedger& s, int32_t rank, double data, double compute, double comm,
                double wait) {
    s.rank = rank;
    s.steps = 30;
    s.step_s = 0.042;
    s.parts[static_cast<size_t>(LedgerPart::kData)] = data;
    s.parts[static_cast<size_t>(LedgerPart::kCompute)] = compute;
    s.parts[static_cast<size_t>(LedgerPart::kComm)] = comm;
    s.parts[static_cast<size_t>(LedgerPart::kRankWait)] = wait;
  };
  l.ranks.resize(2);
  set(l.ranks[0], 0, 0.26, 0.13, 0.02, 0.59);
  set(l.ranks[1], 1, 0.88, 0.10, 0.02, 0.0);
  set(l.job, -1, 0.26, 0.10, 0.02, 0.62);
  l.job.steps = 60;
  return l;
}

TEST(RenderLedgerText, OneRankLargestFirstWithWhatEachPartHolds) {
  const std::string text = RenderLedgerText(GpuLedger());
  EXPECT_EQ(text,
            "Where the steady step goes (40 steady steps of 100.0 ms; compute is the GPU's time by "
            "CUDA events)\n"
            "  GPU compute                    88.0%  backward_pass 50.0%, forward_pass 30.0%, "
            "optimizer_step 8.0%\n"
            "                                (27.0%)  the host waiting for the GPU (a sync, or "
            "loading ahead), inside GPU compute\n"
            "  waiting for data                7.0%  data_loading\n"
            "  host work outside the phases    5.0%  other 3.0%, my\\x1b[2Jphase 2.0%\n");
}

TEST(RenderLedgerText, HostWorkSaysWhereTheMainThreadWasDuringOther) {
  diagnose::StackReport stacks;
  stacks.present = true;
  diagnose::StackLine line;
  line.where = "train.py:391\x1b[2J";
  line.share = 0.646;
  diagnose::StackLine next = line;
  next.where = "train.py:392";
  next.share = 0.152;
  stacks.phases.push_back({"data_loading", 50, {next}});
  stacks.phases.push_back({"other", 240, {line, next}});
  const std::string text = RenderLedgerText(GpuLedger(), &stacks);
  EXPECT_NE(text.find("  host work outside the phases    5.0%  other 3.0%, my\\x1b[2Jphase 2.0%\n"
                      "                                        the main thread at "
                      "train.py:391\\x1b[2J (64.6% of other's samples), train.py:392 (15.2%)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(RenderLedgerText(GpuLedger(), &stacks).find("data_loading ("), std::string::npos);
}

TEST(RenderLedgerText, RanksAsColumnsBesideTheJob) {
  const std::string text = RenderLedgerText(LockstepLedger());
  EXPECT_NE(text.find("2 ranks in lockstep, the job's part the least any rank spends"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  waiting for a slower rank      62.0%    59.0%     0.0%\n"),
            std::string::npos)
      << text;
  // Largest first: rank_wait, data, compute, communication.
  EXPECT_LT(text.find("waiting for a slower rank"), text.find("waiting for data"));
  EXPECT_LT(text.find("waiting for data"), text.find("  compute"));
  EXPECT_LT(text.find("  compute"), text.find("communication"));
}

TEST(RenderLedgerText, NothingWithoutSteadySteps) {
  EXPECT_EQ(RenderLedgerText(analysis::Ledger{}), "");
  EXPECT_EQ(RenderLedgerHtml(analysis::Ledger{}), "");
}

TEST(WriteLedgerJson, EveryPartInItsOrderAndEachRank) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteLedgerJson(w, LockstepLedger());
  w.EndObject();
  const auto j = nlohmann::ordered_json::parse(out);
  const auto& ledger = j["ledger"];
  EXPECT_TRUE(ledger["lockstep"].get<bool>());
  EXPECT_TRUE(ledger["job"]["rank"].is_null());
  EXPECT_EQ(ledger["job"]["compute_clock"], "host");
  EXPECT_TRUE(ledger["job"]["gpu_busy"].is_null());
  std::vector<std::string> names;
  for (const auto& [name, share] : ledger["job"]["parts"].items()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"compute", "data", "communication", "rank_wait",
                                             "side_work", "host_work", "unaccounted"}));
  EXPECT_DOUBLE_EQ(ledger["job"]["parts"]["rank_wait"].get<double>(), 0.62);
  ASSERT_EQ(ledger["ranks"].size(), 2u);
  EXPECT_EQ(ledger["ranks"][1]["rank"], 1);
  EXPECT_DOUBLE_EQ(ledger["ranks"][1]["parts"]["data"].get<double>(), 0.88);

  std::string none;
  JsonWriter n(none);
  n.BeginObject();
  WriteLedgerJson(n, analysis::Ledger{});
  n.EndObject();
  EXPECT_EQ(none, "{\"ledger\":null}");
}

TEST(RenderLedgerHtml, ABarPerRankAfterTheJobsWithEscapedTitles) {
  const std::string html = RenderLedgerHtml(LockstepLedger());
  EXPECT_NE(html.find("<span class=\"who\">job</span>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"who\">rank 1</span>"), std::string::npos);
  EXPECT_NE(html.find("class=\"p-rank_wait\" style=\"width:62.00%\""), std::string::npos) << html;
  EXPECT_EQ(html.find('\x1b'), std::string::npos);
}

TEST(RenderLedgerChangeText, ThePartsWhoseTimeMovedMostFirst) {
  analysis::Ledger a = GpuLedger();
  analysis::Ledger b = GpuLedger();
  // B: data from 7 to 30% of a 130 ms step (7.0 → 39.0 ms), compute 88 → 66% (88.0 → 85.8 ms).
  b.job.parts[static_cast<size_t>(LedgerPart::kData)] = 0.30;
  b.job.parts[static_cast<size_t>(LedgerPart::kCompute)] = 0.66;
  b.job.step_s = 0.13;
  const std::string text = RenderLedgerChangeText(a, b);
  EXPECT_NE(text.find("A 100.0 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("B 130.0 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("  waiting for data                  7.0 ms   7.0%    39.0 ms  30.0%   +32.0 "
                      "ms  +23.0 pt\n"),
            std::string::npos)
      << text;
  EXPECT_LT(text.find("waiting for data"), text.find("GPU compute"));
  EXPECT_EQ(text.find("unaccounted"), std::string::npos) << "under 0.5% in both";
  EXPECT_EQ(RenderLedgerChangeText(a, analysis::Ledger{}), "");
}

}  // namespace
}  // namespace stallscope::report
