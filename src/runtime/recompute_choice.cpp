// recompute_choice.cpp: each stage's recomputation policy, fixed or decided
// by measurement ("auto"); see runtime/recompute_choice.hpp.
#include "pipetrain/runtime/recompute_choice.hpp"

#include <cstdio>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/stage_probe.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

const std::string& RecomputeSettings::setting(int stage) const {
  return recompute_stages.empty() ? recompute : recompute_stages[static_cast<size_t>(stage)];
}

std::string RecomputeSettings::key_of(int stage) const {
  return recompute_stages.empty() ? recompute_key : stages_key + " entry " + std::to_string(stage);
}

RecomputeSettings recompute_settings_for(const Deck& deck) {
  RecomputeSettings s;
  s.recompute = deck.pipeline.recompute;
  s.recompute_stages = deck.pipeline.recompute_stages;
  s.recompute_key = deck.where("pipeline.recompute");
  s.stages_key = deck.where("pipeline.recompute_stages");
  s.budget_mb = deck.pipeline.memory_budget_mb;
  s.budget_key = deck.where("pipeline.memory_budget_mb");
  s.any_auto = any_auto_recompute(deck.pipeline);
  s.probe = executor_config_for(deck);
  return s;
}

RecomputeDecision fixed_recompute(const RecomputeSettings& settings, const Schedule& schedule,
                                  int rank) {
  RecomputeDecision d;
  for (int st = 0; st < schedule.num_stages; ++st) {
    RecomputeChoice c;
    c.requested = settings.setting(st);
    PT_CHECK(!is_auto_recompute(c.requested), "recompute \"auto\" with several stages per rank");
    const RecomputePolicy policy = parse_recompute_policy(c.requested, settings.recompute_key);
    c.policy = policy.name();
    d.choices.push_back(c);
    if (stage_rank(schedule, st) == rank) d.mine.push_back(policy);
  }
  return d;
}

namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

// "auto" measures one micro-batch under each candidate policy, from the
// cheapest in compute to the most frugal in memory, and keeps the first whose
// estimated peak -- persistent state + peak in-flight micro-batches x stash +
// transient + communication buffers -- fits the budget. `mine` gets the
// estimate and the budget; false when no candidate fits (`chosen` is then
// "full").
bool probe_candidates(const RecomputeSettings& settings, const RecomputeProbeSite& site,
                      const std::string& key, RecomputeChoice& mine, RecomputePolicy& chosen) {
  mine.budget_bytes = settings.budget_mb * 1048576.0;
  const double persistent = static_cast<double>(site.memory_stats().live_total);
  // Receives posted one action early and sends not yet completed: up to two
  // micro-batches of stage input and output each.
  const int64_t rows = settings.probe.rows;
  const double comm = 2.0 * 4.0 * static_cast<double>(shape_numel(site.stage.input_shape(rows)) +
                                                      shape_numel(site.stage.output_shape(rows)));
  for (const char* candidate : {"none", "selective", "every:2", "full"}) {
    chosen = parse_recompute_policy(candidate, key);
    StageProbe probe(site.stage, site.backend, chosen, settings.probe);
    const MicroBatchProbe m = probe.probe_micro_batch(site.data, site.memory_stats, site.reset_peaks);
    mine.needed_bytes = stage_peak_bytes(persistent + comm, site.in_flight,
                                         static_cast<double>(m.stash_bytes),
                                         static_cast<double>(m.transient_bytes));
    if (mine.needed_bytes <= mine.budget_bytes) return true;
  }
  return false;
}

// Every stage's choice on every rank: (fits, needed, budget) numbers and the
// policy names all-gathered; InputError when some stage fits with none.
std::vector<RecomputeChoice> share_choices(const RecomputeSettings& settings,
                                           const RecomputeChoice& mine, bool fits,
                                           MPI_Comm pipeline) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(pipeline, &size));
  double numbers[3] = {fits ? 1.0 : 0.0, mine.needed_bytes, mine.budget_bytes};
  std::vector<double> all(3 * size);
  timed_allgather(numbers, 3, MPI_DOUBLE, all.data(), pipeline,
                  "the recomputation choices all-gather");
  char name[32] = {0};
  std::snprintf(name, sizeof name, "%s", mine.policy.c_str());
  std::vector<char> names(32 * size);
  timed_allgather(name, 32, MPI_CHAR, names.data(), pipeline,
                  "the recomputation policy names all-gather");
  std::vector<RecomputeChoice> choices;
  std::string failures;
  for (int r = 0; r < size; ++r) {
    RecomputeChoice c;
    c.requested = settings.setting(r);
    c.policy = std::string(&names[32 * r]);
    c.needed_bytes = all[3 * r + 1];
    c.budget_bytes = all[3 * r + 2];
    if (all[3 * r] == 0.0)
      failures += "\n  stage " + std::to_string(r) + ": needs " + mib(c.needed_bytes) +
                  " even with full recomputation, has " + mib(c.budget_bytes);
    choices.push_back(c);
  }
  if (!failures.empty())
    throw InputError(settings.budget_key + " = " + std::to_string(settings.budget_mb) +
                     ": no recomputation policy fits the budget on every stage:" + failures);
  return choices;
}

}  // namespace

RecomputeDecision choose_recompute(const RecomputeSettings& settings,
                                   const RecomputeProbeSite& site, MPI_Comm pipeline) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(pipeline, &rank));
  const std::string& setting = settings.setting(rank);
  const std::string key = settings.key_of(rank);
  RecomputeChoice mine;
  mine.requested = setting;
  RecomputePolicy chosen;
  bool fits = true;
  if (!is_auto_recompute(setting))
    chosen = parse_recompute_policy(setting, key);
  else
    fits = probe_candidates(settings, site, key, mine, chosen);
  mine.policy = chosen.name();
  RecomputeDecision d;
  d.choices = share_choices(settings, mine, fits, pipeline);
  d.mine = {chosen};
  return d;
}

}  // namespace pt
