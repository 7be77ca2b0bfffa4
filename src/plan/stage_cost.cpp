// stage_cost.cpp: the cost of a contiguous range of units as one stage
// (formulas in include/pipetrain/plan/stage_cost.hpp).
#include "pipetrain/plan/stage_cost.hpp"

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <utility>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

namespace {

// prefix[i] = sum over the first i units of field(unit).
template <typename Field>
std::vector<double> prefix_of(const std::vector<UnitCost>& units, Field field) {
  std::vector<double> prefix(units.size() + 1, 0.0);
  for (size_t i = 0; i < units.size(); ++i) prefix[i + 1] = prefix[i] + field(units[i]);
  return prefix;
}

// Sparse table of range maxima: table[j][i] = max of values[i, i + 2^j).
std::vector<std::vector<double>> max_table(const std::vector<double>& values) {
  std::vector<std::vector<double>> table{values};
  for (size_t width = 2; width <= values.size(); width *= 2) {
    const std::vector<double>& prev = table.back();
    std::vector<double> next(values.size() - width + 1);
    for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + width / 2]);
    table.push_back(std::move(next));
  }
  return table;
}

template <typename Field>
std::vector<double> values_of(const std::vector<UnitCost>& units, Field field) {
  std::vector<double> values;
  values.reserve(units.size());
  for (const UnitCost& u : units) values.push_back(field(u));
  return values;
}

int floor_log2(size_t n) {
  int log = 0;
  while (n >>= 1) ++log;
  return log;
}

std::vector<int64_t> layers_of(const std::vector<UnitCost>& units) {
  std::vector<int64_t> layers;
  for (const UnitCost& u : units) layers.push_back(u.layers);
  return layers;
}

}  // namespace

double StageCost::peak_bytes(double in_flight) const {
  return stage_peak_bytes(base_bytes(), in_flight, stash_bytes,
                          std::max(forward_transient_bytes, backward_transient_bytes));
}

UnitRanges::UnitRanges(const ModelProfile& profile)
    : count_(profile.units.size()), layers_(layers_of(profile.units)) {
  const std::vector<UnitCost>& u = profile.units;
  if (u.empty()) throw InputError("the model profile '" + profile.model + "' has no units");
  forward_ = prefix_of(u, [](const UnitCost& c) { return c.forward_s; });
  backward_ = prefix_of(u, [](const UnitCost& c) { return c.backward_s; });
  recompute_ = prefix_of(u, [](const UnitCost& c) { return c.recompute_s; });
  recompute_selective_ = prefix_of(u, [](const UnitCost& c) { return c.recompute_selective_s; });
  optimizer_ = prefix_of(u, [](const UnitCost& c) { return c.optimizer_s; });
  stash_none_ = prefix_of(u, [](const UnitCost& c) { return c.stash_none_bytes; });
  stash_selective_ = prefix_of(u, [](const UnitCost& c) { return c.stash_selective_bytes; });
  stash_always_ = prefix_of(u, [](const UnitCost& c) { return c.stash_always_bytes; });
  persistent_ = prefix_of(
      u, [](const UnitCost& c) {
        return c.param_bytes + c.grad_bytes + c.optimizer_bytes + c.checkpoint_staging_bytes;
      });
  data_ = prefix_of(u, [](const UnitCost& c) { return c.data_bytes; });
  stage_data_ = profile.stage_data_bytes;
  input_bytes_ = values_of(u, [](const UnitCost& c) { return c.input_bytes; });
  kept_input_ = values_of(u, [](const UnitCost& c) { return c.kept_input(); });
  output_bytes_ = values_of(u, [](const UnitCost& c) { return c.output_bytes; });
  workspace_ = values_of(u, [](const UnitCost& c) { return c.workspace_bytes; });
  backward_workspace_ = values_of(u, [](const UnitCost& c) {
    return c.backward_workspace_bytes > 0.0 ? c.backward_workspace_bytes : c.workspace_bytes;
  });
  forward_workspace_ = values_of(u, [](const UnitCost& c) {
    return c.forward_workspace_bytes > 0.0 ? c.forward_workspace_bytes : c.workspace_bytes;
  });
  workspace_max_ = max_table(workspace_);
  // Unit k's transient term within a stage [first, end) with k < end - 1
  // (docs/profile.md, "From units to a stage"): its workspace, less its
  // output (consumed by the next unit of the stage), less the stash of the
  // units after it, i.e. term_k + prefix[k + 1] - prefix[end].
  std::vector<double> none_terms, selective_terms, backward_terms, forward_terms;
  for (size_t k = 0; k < u.size(); ++k) {
    const double drop = u[k].stash_none_bytes - u[k].stash_selective_bytes;
    none_terms.push_back(u[k].workspace_bytes - u[k].output_bytes + stash_none_[k + 1]);
    backward_terms.push_back(backward_workspace_[k] - u[k].output_bytes + stash_none_[k + 1]);
    forward_terms.push_back(forward_workspace_[k] - u[k].output_bytes + stash_none_[k + 1]);
    selective_terms.push_back(u[k].workspace_bytes + drop - u[k].output_bytes +
                              stash_selective_[k + 1]);
    selective_last_.push_back(u[k].workspace_bytes + drop);
  }
  none_terms_max_ = max_table(none_terms);
  backward_terms_max_ = max_table(backward_terms);
  forward_terms_max_ = max_table(forward_terms);
  selective_terms_max_ = max_table(selective_terms);
}

// The layered transient of B alone under recompute none (the units'
// backward_workspace_bytes): what recompute "full" adds its re-created stash
// to, since its forwards keep nothing and its re-run computes no loss. On a
// stage that is not the last, less the stage's output, which the probe held
// through B but a run sends after F (the simulator counts the send's buffer
// until its message has arrived).
double UnitRanges::backward_layered_transient(size_t first, size_t end, bool last_stage) const {
  return phase_transient(backward_terms_max_, backward_workspace_, stash_none_, first, end, last_stage);
}

// The same over the units' peaks during F alone (forward_workspace_bytes):
// the transient the simulator charges at an F under recompute none or full.
// The units' workspace_bytes is the larger of their F and B peaks, and on a
// convolutional block B's is the larger by far (the cnn's last block of
// stage 0: F 3 MiB, B 8 MiB at 32 images), so charging it at F, where the
// stage also holds a send not yet complete and a receive posted ahead, put
// stage 0's planned peak one message above the run's.
double UnitRanges::forward_alone_transient(size_t first, size_t end, bool last_stage) const {
  return phase_transient(forward_terms_max_, forward_workspace_, stash_none_, first, end, last_stage);
}

// A layered transient above the stash of one micro-batch through units
// [first, end): the largest of the units' terms (a unit's peak less its
// output and the later units' `stash`) over the stage. On the last stage
// the last unit counts its whole peak (`whole`: its output is the loss
// gradient, kept). Elsewhere the last unit's term is less the stage's
// output too: the probe measured it with its output gradient allocated
// before F and its output held through B; in a run the gradient does not
// exist yet during F and the output has been sent before B, so each phase
// holds one of the two (posted receives and incomplete sends are counted
// apart by the simulator).
double UnitRanges::phase_transient(const std::vector<std::vector<double>>& terms_max,
                                   const std::vector<double>& whole, const Prefix& stash,
                                   size_t first, size_t end, bool last_stage) const {
  if (!last_stage) return std::max(0.0, range_max(terms_max, first, end) - stash[end]);
  double peak = whole[end - 1];
  if (end - 1 > first) peak = std::max(peak, range_max(terms_max, first, end - 1) - stash[end]);
  return std::max(0.0, peak);
}

double UnitRanges::range_max(const std::vector<std::vector<double>>& table, size_t first,
                             size_t end) const {
  const int level = floor_log2(end - first);
  const std::vector<double>& row = table[static_cast<size_t>(level)];
  return std::max(row[first], row[end - (size_t{1} << level)]);
}

// Inputs of the stage's layers 0, K, 2K, ...: a unit's first layer takes
// its input, a later one (an MLP's activation) a tensor of its output's size.
double UnitRanges::kept_inputs(size_t first, size_t end, size_t every) const {
  double kept = 0.0;
  bool first_layer = true;
  for (size_t layer = 0; layer < layers_.layers(first, end); layer += every) {
    const size_t u = layers_.unit_of(first, layer, first_layer);
    kept += first_layer ? kept_input_[u] : output_bytes_[u];
  }
  return kept;
}

// The largest sum of stash_none over the units each K-layer segment of the
// stage touches.
double UnitRanges::segment_peak(size_t first, size_t end, size_t every) const {
  double peak = 0.0;
  bool first_layer = true;
  const size_t layers = layers_.layers(first, end);
  for (size_t begin = 0; begin < layers; begin += every) {
    const size_t from = layers_.unit_of(first, begin, first_layer);
    const size_t to = layers_.unit_of(first, std::min(layers, begin + every) - 1, first_layer) + 1;
    peak = std::max(peak, sum(stash_none_, from, to));
  }
  return peak;
}

double UnitRanges::stash_bytes(size_t first, size_t end, const PlanRecompute& policy) const {
  switch (policy.kind) {
    case PlanRecompute::Kind::None: return sum(stash_none_, first, end);
    case PlanRecompute::Kind::Selective: return sum(stash_selective_, first, end);
    case PlanRecompute::Kind::Every:
      return kept_inputs(first, end, policy.every) + sum(stash_always_, first, end);
    case PlanRecompute::Kind::Full: return kept_input_[first] + sum(stash_always_, first, end);
  }
  PT_FAIL("unknown PlanRecompute kind");
}

// F and B transients above the stash (stage_cost.hpp).
std::pair<double, double> UnitRanges::transients(size_t first, size_t end, bool last_stage,
                                                 const PlanRecompute& policy) const {
  const double forward_alone = forward_alone_transient(first, end, last_stage);
  switch (policy.kind) {
    case PlanRecompute::Kind::None:
      return {forward_alone, backward_layered_transient(first, end, last_stage)};
    case PlanRecompute::Kind::Selective: {  // with each unit's recomputed probabilities
      const double selective =
          phase_transient(selective_terms_max_, selective_last_, stash_selective_, first, end, last_stage);
      return {selective, selective};
    }
    case PlanRecompute::Kind::Every: {
      const double work = range_max(workspace_max_, first, end);
      return {work, work + segment_peak(first, end, policy.every)};
    }
    case PlanRecompute::Kind::Full:  // B re-creates what none keeps beyond the full stash
      return {forward_alone, sum(stash_none_, first, end) - kept_input_[first] -
                                sum(stash_always_, first, end) +
                                backward_layered_transient(first, end, last_stage)};
  }
  PT_FAIL("unknown PlanRecompute kind");
}

double UnitRanges::recompute_time(size_t first, size_t end, const PlanRecompute& policy) const {
  switch (policy.kind) {
    case PlanRecompute::Kind::None: return 0.0;
    case PlanRecompute::Kind::Selective: return sum(recompute_selective_, first, end);
    case PlanRecompute::Kind::Every:
    case PlanRecompute::Kind::Full: return sum(recompute_, first, end);
  }
  PT_FAIL("unknown PlanRecompute kind");
}

// Written as StageCost::time_per_micro_batch_s adds it up, so both round alike.
double UnitRanges::time_s(size_t first, size_t end, const PlanRecompute& policy) const {
  return sum(forward_, first, end) + (sum(backward_, first, end) + recompute_time(first, end, policy));
}

StageCost UnitRanges::cost(size_t first, size_t end, bool first_stage, bool last_stage,
                           const PlanRecompute& policy) const {
  PT_CHECK(first < end && end <= count_, "a stage holds a non-empty range of units");
  StageCost c;
  c.forward_s = sum(forward_, first, end);
  c.recompute_s = recompute_time(first, end, policy);
  c.backward_s = sum(backward_, first, end) + c.recompute_s;
  c.optimizer_s = sum(optimizer_, first, end);
  c.input_message_bytes = first_stage ? 0.0 : input_bytes_[first];
  c.output_message_bytes = last_stage ? 0.0 : output_bytes_[end - 1];
  c.persistent_bytes = sum(persistent_, first, end);
  c.data_bytes = stage_data_ + sum(data_, first, end);
  c.comm_buffer_bytes = 2.0 * (c.input_message_bytes + c.output_message_bytes);
  c.stash_bytes = stash_bytes(first, end, policy);
  std::tie(c.forward_transient_bytes, c.backward_transient_bytes) = transients(first, end, last_stage, policy);
  return c;
}

double UnitRanges::peak_lower_bound(size_t first, size_t end, const PlanRecompute& policy,
                                    double in_flight) const {
  // The layered transient with the last unit's output taken off as well
  // (below the transient): with at least one micro-batch in flight, a unit
  // added at either end adds its stash at least once for each time it takes
  // it from a term, so these never decrease as the range grows.
  const auto layered_bound = [&](bool selective) {
    const Prefix& stash = selective ? stash_selective_ : stash_none_;
    return std::max(0.0, range_max(selective ? selective_terms_max_ : none_terms_max_, first, end) -
                             stash[end]);
  };
  const double always = sum(stash_always_, first, end);
  const bool stashing = in_flight >= 1.0;
  double activations = 0.0;
  switch (policy.kind) {
    case PlanRecompute::Kind::None:
      activations = in_flight * sum(stash_none_, first, end) + (stashing ? layered_bound(false) : 0.0);
      break;
    case PlanRecompute::Kind::Selective:
      activations =
          in_flight * sum(stash_selective_, first, end) + (stashing ? layered_bound(true) : 0.0);
      break;
    case PlanRecompute::Kind::Every:
      activations = in_flight * always + range_max(workspace_max_, first, end);
      break;
    case PlanRecompute::Kind::Full: {  // the peak less (in_flight - 1) x the stage input
      const double backward_bound =
          std::max(0.0, range_max(backward_terms_max_, first, end) - stash_none_[end]);
      activations = stashing ? (in_flight - 1.0) * always + sum(stash_none_, first, end) +
                                   backward_bound
                             : in_flight * always;
      break;
    }
  }
  // Summed in peak_bytes' order, less a relative 1e-12, so that rounding
  // never lifts the bound above a peak it equals in exact arithmetic.
  const double base = sum(persistent_, first, end) + (stage_data_ + sum(data_, first, end));
  return (base + activations) * (1.0 - 1e-12);
}

UnitLayout unit_layout(const ModelProfile& profile) {
  const std::vector<UnitCost>& units = profile.units;
  UnitLayout layout;
  while (layout.leading < units.size() && !units[layout.leading].partitionable) ++layout.leading;
  size_t end = layout.leading;
  while (end < units.size() && units[end].partitionable) ++end;
  layout.partitionable = end - layout.leading;
  layout.trailing = units.size() - end;
  for (size_t i = end; i < units.size(); ++i) {
    if (units[i].partitionable)
      throw InputError("model profile '" + profile.model + "': unit " + std::to_string(i) + " (" +
                       units[i].name + ") is partitionable but follows the pinned unit " +
                       units[end].name + "; pinned units may only open or close the model");
  }
  if (layout.partitionable == 0)
    throw InputError("model profile '" + profile.model + "' has no partitionable unit");
  return layout;
}

namespace {

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string text = "[";
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? ", " : "") + std::to_string(counts[i]);
  return text + "]";
}

void check_counts(const std::vector<int64_t>& counts, size_t partitionable) {
  int64_t total = 0;
  bool empty_stage = false;
  for (int64_t c : counts) {
    total += c;
    empty_stage = empty_stage || c < 1;
  }
  if (counts.empty() || empty_stage || total != static_cast<int64_t>(partitionable))
    throw InputError("partition " + counts_text(counts) + ": expected one count >= 1 per stage, " +
                     "adding up to the " + std::to_string(partitionable) +
                     " partitionable units");
}

// Each stage's units [first, end) of the profile: the pinned units join the
// first and last stage.
std::vector<std::pair<size_t, size_t>> stage_unit_ranges(const ModelProfile& profile,
                                                         const std::vector<int64_t>& units_per_stage) {
  const UnitLayout layout = unit_layout(profile);
  check_counts(units_per_stage, layout.partitionable);
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t next = layout.leading;
  for (size_t s = 0; s < units_per_stage.size(); ++s) {
    const size_t first = s == 0 ? 0 : next;
    next += static_cast<size_t>(units_per_stage[s]);
    const bool last = s + 1 == units_per_stage.size();
    ranges.emplace_back(first, last ? profile.units.size() : next);
  }
  return ranges;
}

}  // namespace

std::vector<double> step_weight_seconds(const ModelProfile& pass_profile, double weight_grad_share,
                                        const std::vector<int64_t>& units_per_stage,
                                        const std::vector<PlanRecompute>& policies) {
  std::vector<double> seconds;
  for (const StageCost& c : stage_costs(pass_profile, units_per_stage, policies))
    seconds.push_back(weight_grad_share * std::max(0.0, c.backward_s - c.recompute_s));
  return seconds;
}

std::vector<StageCost> stage_costs(const ModelProfile& profile,
                                   const std::vector<int64_t>& units_per_stage,
                                   const std::vector<PlanRecompute>& policies) {
  const std::vector<std::pair<size_t, size_t>> stage_units = stage_unit_ranges(profile, units_per_stage);
  const size_t stages = stage_units.size();
  if (policies.size() != 1 && policies.size() != stages)
    throw InputError(std::to_string(policies.size()) + " recompute policies for " +
                     std::to_string(stages) + " stages; give one, or one per stage");
  const UnitRanges ranges(profile);
  std::vector<StageCost> costs;
  for (size_t s = 0; s < stages; ++s)
    costs.push_back(ranges.cost(stage_units[s].first, stage_units[s].second, s == 0, s + 1 == stages,
                                policies[policies.size() == 1 ? 0 : s]));
  return costs;
}

bool has_step_split(const ModelProfile& profile) {
  for (const UnitCost& unit : profile.units)
    if (unit.step_input_s < 0.0 || unit.step_weight_s < 0.0) return false;
  return !profile.units.empty();
}

std::vector<double> apply_step_split(const ModelProfile& profile,
                                     const std::vector<int64_t>& units_per_stage, int micro_batches,
                                     std::vector<StageCost>& stages) {
  PT_CHECK(has_step_split(profile), "the step's measured split backward");
  const std::vector<std::pair<size_t, size_t>> stage_units = stage_unit_ranges(profile, units_per_stage);
  PT_CHECK(stage_units.size() == stages.size(), "stage costs of the partition");
  std::vector<double> pass_s;
  for (size_t s = 0; s < stages.size(); ++s) {
    double input = 0.0, weight = 0.0;
    for (size_t u = stage_units[s].first; u < stage_units[s].second; ++u) {
      input += profile.units[u].step_input_s;
      weight += profile.units[u].step_weight_s;
    }
    stages[s].input_s = input + stages[s].recompute_s;
    pass_s.push_back(weight * micro_batches);
  }
  return pass_s;
}

std::vector<double> step_pass_seconds(const ModelProfile& profile, const ModelProfile* pass_profile,
                                      double weight_grad_share,
                                      const std::vector<int64_t>& units_per_stage,
                                      const std::vector<PlanRecompute>& policies, int micro_batches,
                                      std::vector<StageCost>& stages) {
  if (has_step_split(profile)) return apply_step_split(profile, units_per_stage, micro_batches, stages);
  if (!pass_profile) return {};
  return step_weight_seconds(*pass_profile, weight_grad_share, units_per_stage, policies);
}

}  // namespace pt
