// profile_chain.cpp: the stage-chain calibration of a profile's unit times.
//
// A unit measured alone misses what the units of one stage do to each other
// in a run: one layer's gradient write-back and weights push the next
// layer's out of the caches, the allocator reuses another layer's buffers,
// the prefetchers see a longer stream. So after the units are timed, every
// stage of the uniform partition over the profiling ranks is built whole and
// runs micro-batch after micro-batch (F then B, nothing evicted in between,
// as the executor runs them), then takes optimizer updates of all its
// parameters at once; the ratio of the stage's measured F, B, recompute and
// optimizer update to what the planner adds up from its units scales those
// units (docs/profile.md, "Stage chains").
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/model/activation_copies.hpp"
#include "pipetrain/model/weight_copies.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/stage_probe.hpp"

namespace pt {

namespace {

// Figures timed per chain, in this order.
// The step's two (per micro-batch) only with options.step_weight_grads.
// kChainRefill: F + B of the micro-batches that follow an optimizer update
// (kRefillMicroBatches of them, or the step's N where fewer), less the same
// count of the chain's back-to-back pairs.
enum ChainTime : size_t {
  kChainForward, kChainBackward, kChainRecompute, kChainOptimizer, kChainRefill, kChainStepInput,
  kChainStepWeight, kChainTimes
};

// Micro-batches timed after each update: in the traced runs of the 512-wide
// MLP the first ran 25% over the later ones, the second 5%, the third 2%.
constexpr int kRefillMicroBatches = 3;

// Timed repetitions of a chain: at least options.reps, more (up to 3 x) while
// they fit kChainBudgetSeconds, so that a short stage gets enough samples for
// a burst of load from another process not to move its median; the same on
// every rank (the largest wanted).
constexpr double kChainBudgetSeconds = 0.3;

int chain_repetitions(double pair_seconds, const ProfileOptions& options, MPI_Comm comm) {
  int wanted = options.reps;
  if (pair_seconds > 0.0)
    wanted = static_cast<int>(std::clamp(kChainBudgetSeconds / pair_seconds,
                                         static_cast<double>(options.reps), 3.0 * options.reps));
  int agreed = wanted;
  timed_allreduce(&wanted, &agreed, 1, MPI_INT, MPI_MAX, comm,
                  "the profiler's stage-chain repetitions all-reduce");
  return agreed;
}

// One chain's timed figures, (kChainTimes, reps), and its repetition count.
struct ChainSamples {
  int reps = 0;  // decided in the first pass, the same on every rank
  std::vector<std::vector<double>> times = std::vector<std::vector<double>>(kChainTimes);
};

// Repetitions of pass `pass` of `passes` when `total` are spread over them.
int share_of(int total, int pass, int passes) { return total / passes + (pass < total % passes ? 1 : 0); }

// options.step_weight_grads: this pass's share of the options.reps steps of
// `micro_batches` (StageProbe::probe_step_split), after one untimed in the
// first pass; per micro-batch.
void time_step_split(StageProbe& probe, const Dataset& data, int micro_batches,
                     const ProfileOptions& options, int pass, int passes, ChainSamples& chain) {
  if (pass == 0) probe.probe_step_split(data, micro_batches);
  for (int r = 0; r < share_of(options.reps, pass, passes); ++r) {
    const StepSplitProbe step = probe.probe_step_split(data, micro_batches);
    chain.times[kChainStepInput].push_back(step.input_s / micro_batches);
    chain.times[kChainStepWeight].push_back(step.weight_s / micro_batches);
  }
}

int refill_micro_batches(const BatchSplit& split) {
  return static_cast<int>(std::clamp<int64_t>(split.micro_batches, 1, kRefillMicroBatches));
}

// This pass's share of the chain's optimizer updates of the whole stage (as
// many as its pairs; after one untimed, which gives AdamW its state's first
// values), as the run's one update a step: every unit's state at once, not a
// unit alone.
// After each timed update, the F and B of the `refill_count` micro-batches that
// follow it (their sum): the update streams the stage's parameters,
// gradients and optimizer state through the caches, so a step's first
// micro-batches find less of their working set there than the chain's
// back-to-back pairs do.
void time_optimizer(StageModel& model, Backend& be, const Deck& deck,
                    const std::function<MicroBatchProbe()>& next_micro_batch, int refill_count,
                    int pass, int passes, ChainSamples& chain) {
  Optimizer optimizer(deck.training, model.params());
  const float lr = static_cast<float>(deck.training.lr);
  optimizer.step(be, lr, 1.f);
  be.synchronize();
  for (int r = 0; r < share_of(chain.reps, pass, passes); ++r) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.step(be, lr, 1.f);
    be.synchronize();
    chain.times[kChainOptimizer].push_back(seconds_since(start));
    double after_update = 0.0;
    for (int mb = 0; mb < refill_count; ++mb) {
      const MicroBatchProbe next = next_micro_batch();
      after_update += next.forward_s + next.backward_s;
    }
    chain.times[kChainRefill].push_back(after_update);
  }
}

// This pass's share of one chain's repetitions (stage `stage` of `counts`):
// the stage built whole, the warm-ups (at least one) untimed, then timed
// pairs of F and B under recompute none and the recompute inside B under
// full. Pass 0 decides the chain's repetition count from its warm-up.
void time_chain_pass(const Deck& deck, const BatchSplit& split, Backend& be, const ProfileOptions& options,
                     const std::vector<int64_t>& counts, int stage, int pass, int passes,
                     MPI_Comm comm, ChainSamples& chain) {
  StageModel model = build_stage(deck.model, counts, stage);  // parameters initialised on the host
  move_parameters(model, be.device());
  if (deck.training.weight_copies) make_weight_copies(be, model.params());  // as the run keeps them
  set_activation_copies(model, deck.training.activation_copies);
  std::unique_ptr<Dataset> data = open_dataset(options.open_dataset, data_set_config_for(deck), Split::Train);
  const auto stats = options.memory_stats ? options.memory_stats : [] { return memory_stats(); };
  const ExecutorConfig config = executor_config_for(split, deck.pipeline.timeout_s);
  StageProbe none(model, be, parse_recompute_policy("none", "the profiler"), config);
  StageProbe full(model, be, parse_recompute_policy("full", "the profiler"), config);
  const auto pair = [&] {  // F + B under none, then under full
    return std::make_pair(none.probe_micro_batch(*data, stats, options.reset_memory_peaks),
                          full.probe_micro_batch(*data, stats, options.reset_memory_peaks));
  };
  double pair_seconds = 0.0;
  for (int r = 0; r < std::max(1, options.warmup); ++r) {
    const auto [kept, recomputed] = pair();
    pair_seconds = kept.forward_s + kept.backward_s + recomputed.forward_s + recomputed.backward_s;
  }
  if (pass == 0) chain.reps = chain_repetitions(pair_seconds, options, comm);
  for (int r = 0; r < share_of(chain.reps, pass, passes); ++r) {
    const auto [kept, recomputed] = pair();
    chain.times[kChainForward].push_back(kept.forward_s);
    chain.times[kChainBackward].push_back(kept.backward_s);
    chain.times[kChainRecompute].push_back(recomputed.recompute_s);
  }
  const auto next_micro_batch = [&] { return none.probe_micro_batch(*data, stats, options.reset_memory_peaks); };
  time_optimizer(model, be, deck, next_micro_batch, refill_micro_batches(split), pass, passes, chain);
  if (options.step_weight_grads)
    time_step_split(none, *data, static_cast<int>(split.micro_batches), options, pass, passes, chain);
}

// This rank's medians of every chain, (stages, kChainTimes). The repetitions
// are spread over up to 3 passes through the stages, as the units' are: a
// burst of load from another process that outlasts one stage's repetitions
// then spoils at most a pass of each chain, not a whole chain (which scales
// every unit of its stage). One stage is built at a time.
std::vector<double> time_chains(const Deck& deck, const BatchSplit& split, Backend& be,
                                const ProfileOptions& options,
                                MPI_Comm comm, ChainCalibration& cal) {
  const std::vector<int64_t>& counts = cal.units_per_stage;
  cal.passes = std::clamp(options.reps, 1, 3);
  std::vector<ChainSamples> chains(counts.size());
  for (int pass = 0; pass < cal.passes; ++pass) {
    for (size_t s = 0; s < counts.size(); ++s) {
      timed_barrier(comm, "the profiler's barrier before a stage chain");
      time_chain_pass(deck, split, be, options, counts, static_cast<int>(s), pass, cal.passes, comm, chains[s]);
    }
    if (options.after_pass) options.after_pass();
  }
  std::vector<double> medians;
  for (const ChainSamples& chain : chains) {
    cal.repetitions.push_back(static_cast<int>(chain.times[kChainForward].size()));
    for (const auto& figure : chain.times) medians.push_back(median(figure));
  }
  return medians;
}

// measured / predicted, or 1 when either is not a positive time.
double ratio(double measured, double predicted) {
  return measured > 0.0 && predicted > 0.0 ? measured / predicted : 1.0;
}

// The step's figures of units [first, end) in the stage's measured
// proportion to its fused backward (the units' backward_s, scaled already).
void set_step_split(ModelProfile& p, size_t first, size_t end, double input_per_backward,
                    double weight_per_backward) {
  for (size_t u = first; u < end; ++u) {
    UnitCost& unit = p.units[u];
    unit.step_input_s = unit.backward_s * input_per_backward;
    unit.step_weight_s = unit.backward_s * weight_per_backward;
  }
}

void scale_units(ModelProfile& p, size_t first, size_t end, double forward, double backward,
                 double recompute, double optimizer) {
  for (size_t u = first; u < end; ++u) {
    UnitCost& unit = p.units[u];
    unit.optimizer_s *= optimizer;
    unit.forward_s *= forward;
    unit.backward_s *= backward;
    unit.recompute_selective_s *= backward;  // part of a backward
    unit.recompute_s *= recompute;
    unit.recompute_end_s *= recompute;
  }
}

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string text = "[";
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? ", " : "") + std::to_string(counts[i]);
  return text + "]";
}

std::string ratios_text(const std::vector<double>& ratios) {
  std::string text;
  for (size_t i = 0; i < ratios.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof number, "%s%.3f", i ? " " : "", ratios[i]);
    text += number;
  }
  return text;
}

// "0.412 0.380": seconds as milliseconds.
std::string milliseconds_text(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(s * 1e3);
  return ratios_text(ms);
}

// ", weight_grad step (N=8) B x 0.652 0.640, W x 0.488 0.505": the step's
// B and W per micro-batch over the chain's fused backward.
std::string step_split_text(const ChainCalibration& cal, int64_t micro_batches) {
  std::vector<double> input, weight;
  for (size_t s = 0; s < cal.step_input_s.size(); ++s) {
    input.push_back(ratio(cal.step_input_s[s], cal.backward_s[s]));
    weight.push_back(ratio(cal.step_weight_s[s], cal.backward_s[s]));
  }
  return ", weight_grad step (N=" + std::to_string(micro_batches) + ") B x " + ratios_text(input) +
         ", W x " + ratios_text(weight);
}

}  // namespace

ChainCalibration calibrate_with_stage_chains(ModelProfile& p, const Deck& deck, const BatchSplit& split,
                                             Backend& be, MPI_Comm comm, const ProfileOptions& options) {
  int ranks = 1;
  MPI_CHECK(MPI_Comm_size(comm, &ranks));
  const UnitLayout layout = unit_layout(p);
  const int stages = static_cast<int>(std::min<size_t>(static_cast<size_t>(ranks), layout.partitionable));
  ChainCalibration cal;
  cal.units_per_stage = partition_units(model_units(deck.model), stages, {});
  cal.refill_micro_batches = refill_micro_batches(split);
  const std::vector<double> measured =
      median_over_ranks(time_chains(deck, split, be, options, comm, cal), comm);
  const UnitRanges ranges(p);  // the sums before any stage is scaled
  const PlanRecompute none = PlanRecompute::parse("none"), full = PlanRecompute::parse("full");
  size_t first = 0;
  for (int s = 0; s < stages; ++s) {
    const bool first_stage = s == 0, last_stage = s + 1 == stages;
    const size_t end = first + (first_stage ? layout.leading : 0) +
                       static_cast<size_t>(cal.units_per_stage[s]) + (last_stage ? layout.trailing : 0);
    const StageCost sum_none = ranges.cost(first, end, first_stage, last_stage, none);
    const StageCost sum_full = ranges.cost(first, end, first_stage, last_stage, full);
    const double* m = &measured[static_cast<size_t>(s) * kChainTimes];
    cal.forward_s.push_back(m[kChainForward]);
    cal.backward_s.push_back(m[kChainBackward]);
    cal.recompute_s.push_back(m[kChainRecompute]);
    cal.forward_ratio.push_back(ratio(m[kChainForward], sum_none.forward_s));
    cal.backward_ratio.push_back(ratio(m[kChainBackward], sum_none.backward_s));
    cal.recompute_ratio.push_back(ratio(m[kChainRecompute], sum_full.recompute_s));
    cal.optimizer_s.push_back(m[kChainOptimizer]);
    const double pairs = cal.refill_micro_batches * (m[kChainForward] + m[kChainBackward]);
    cal.refill_s.push_back(std::max(0.0, m[kChainRefill] - pairs));
    cal.optimizer_ratio.push_back(ratio(m[kChainOptimizer] + cal.refill_s.back(), sum_none.optimizer_s));
    scale_units(p, first, end, cal.forward_ratio.back(), cal.backward_ratio.back(),
                cal.recompute_ratio.back(), cal.optimizer_ratio.back());
    if (options.step_weight_grads && m[kChainBackward] > 0.0) {
      cal.step_input_s.push_back(m[kChainStepInput]);
      cal.step_weight_s.push_back(m[kChainStepWeight]);
      set_step_split(p, first, end, m[kChainStepInput] / m[kChainBackward],
                     m[kChainStepWeight] / m[kChainBackward]);
    }
    first = end;
  }
  cal.text = "stage chains " + counts_text(cal.units_per_stage) + ": F x " +
             ratios_text(cal.forward_ratio) + ", B x " + ratios_text(cal.backward_ratio) +
             ", recompute x " + ratios_text(cal.recompute_ratio) + ", optimizer x " +
             ratios_text(cal.optimizer_ratio) + " (refill " + milliseconds_text(cal.refill_s) + " ms)";
  if (!cal.step_input_s.empty()) cal.text += step_split_text(cal, split.micro_batches);
  return cal;
}

}  // namespace pt
