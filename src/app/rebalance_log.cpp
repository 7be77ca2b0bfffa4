// rebalance_log.cpp: the rebalancing check after a step and its log line
// (app/rebalance_log.hpp).
#include "pipetrain/app/rebalance_log.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

std::string counts_text(const std::vector<int64_t>& v) {
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + std::to_string(v[i]);
  return "[" + text + "]";
}

// "12 tensors, 25.19 MB sent in 0.045 s"
std::string sent_text(const MoveReport& m) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%lld tensors, %.2f MB sent in %.3f s",
                static_cast<long long>(m.tensors_sent), m.bytes_sent / 1e6, m.seconds);
  return buf;
}

}  // namespace

bool rebalance_after_step(int rank, const Deck& deck, Trainer& trainer, int64_t step,
                          StepRecord& rec) {
  set_wait_phase("in the rebalancing check after step " + std::to_string(step));
  const RebalanceCheck c = trainer.rebalance_after(step);
  if (!c.checked) return false;
  const RebalanceDecision& d = c.decision;
  const bool moved = c.forced || d.move;
  if (!c.forced) rec.rebalance_ratio = d.measured_ratio;
  if (d.move && !c.forced) rec.rebalance_predicted_ratio = d.predicted_ratio;
  if (rank != 0) return moved;
  const std::string at = "rebalance after step " + std::to_string(step + 1) + ": ";
  const std::string partitions = counts_text(c.move.from) + " -> " + counts_text(c.move.to);
  const std::string sent = sent_text(c.move);
  if (c.forced)
    std::printf("%spartition %s (test hook %s); %s\n", at.c_str(), partitions.c_str(),
                fault_hook_info(FaultHook::Rebalance).variable, sent.c_str());
  else if (d.move)
    std::printf("%spartition %s, measured stage ratio %s before (medians of %lld steps), "
                "predicted %s after; %s\n",
                at.c_str(), partitions.c_str(), ratio_text(d.measured_ratio).c_str(),
                static_cast<long long>(c.window_steps), ratio_text(d.predicted_ratio).c_str(),
                sent.c_str());
  else if (d.measured_ratio >= deck.rebalance.threshold)
    std::printf("%sno move: %s\n", at.c_str(), d.reason.c_str());
  std::fflush(stdout);
  return moved;
}

}  // namespace pt
