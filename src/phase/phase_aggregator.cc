#include "phase/phase_aggregator.h"

#include <algorithm>

namespace stallscope::phase {

void PhaseAggregator::Add(const PhaseRecord& record) {
  if (record.phase_id >= kNameCapacity) return;  // ids are < 256 by format; guard garbage
  switch (record.kind) {
    case RecordKind::kBegin: {
      std::vector<Open>& stack = stacks_[record.tid];
      if (stack.size() >= kMaxDepth) {
        stack.erase(stack.begin());
        ++unmatched_;
      }
      stack.push_back({record.phase_id, record.ts_ns});
      break;
    }
    case RecordKind::kEnd:
      AddEnd(record);
      break;
    case RecordKind::kStep:
      if (steps_ == 0) first_step_ = record.arg;
      last_step_ = record.arg;
      ++steps_;
      break;
    case RecordKind::kCounter: {
      PhaseTotal& total = counters_[record.phase_id];
      ++total.count;
      total.total_ns += record.arg;
      break;
    }
    case RecordKind::kMark:
    case RecordKind::kGpuSpan:  // GPU times are the run report's (analysis/phases.h), not profiles'
    case RecordKind::kInvalid:
      break;
  }
}

void PhaseAggregator::AddEnd(const PhaseRecord& record) {
  auto it = stacks_.find(record.tid);
  if (it == stacks_.end()) {
    ++unmatched_;
    return;
  }
  std::vector<Open>& stack = it->second;
  // Match the innermost open phase with this id; phases opened inside it and never closed
  // lost their end record.
  auto open = std::find_if(stack.rbegin(), stack.rend(),
                           [&](const Open& o) { return o.phase_id == record.phase_id; });
  if (open == stack.rend()) {
    ++unmatched_;
    return;
  }
  const int64_t duration_ns = std::max<int64_t>(0, record.ts_ns - open->begin_ns);
  PhaseTotal& total = phases_[record.phase_id];
  ++total.count;
  total.total_ns += duration_ns;
  total.max_ns = std::max(total.max_ns, duration_ns);
  const auto keep = static_cast<size_t>(stack.rend() - open) - 1;
  unmatched_ += stack.size() - keep - 1;
  stack.resize(keep);
}

void PhaseAggregator::PruneThreads() {
  if (stacks_.size() <= kMaxThreads) return;
  // Threads come and go (DataLoader pin-memory threads, thread pools): a stack with nothing
  // open is dropped (a thread seen again allocates once more); then, past the bound, any stack
  // (a thread that died inside a phase never closes it).
  std::erase_if(stacks_, [](const auto& entry) { return entry.second.empty(); });
  for (auto it = stacks_.begin(); it != stacks_.end() && stacks_.size() > kMaxThreads;) {
    unmatched_ += it->second.size();
    it = stacks_.erase(it);
  }
}

PhaseWindow PhaseAggregator::Take() {
  PhaseWindow window;
  auto collect = [](std::array<PhaseTotal, kNameCapacity>& totals, std::vector<PhaseTotal>& out) {
    for (size_t id = 0; id < totals.size(); ++id) {
      if (totals[id].count == 0) continue;
      totals[id].phase_id = static_cast<uint16_t>(id);
      out.push_back(totals[id]);
      totals[id] = PhaseTotal{};
    }
    std::stable_sort(out.begin(), out.end(), [](const PhaseTotal& a, const PhaseTotal& b) {
      return a.total_ns > b.total_ns;
    });
  };
  collect(phases_, window.phases);
  collect(counters_, window.counters);
  window.steps = std::exchange(steps_, 0);
  window.first_step = std::exchange(first_step_, 0);
  window.last_step = std::exchange(last_step_, 0);
  PruneThreads();
  window.unmatched = std::exchange(unmatched_, 0);
  return window;
}

}  // namespace stallscope::phase
