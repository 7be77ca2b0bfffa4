// deck_layout.cpp: check_deck_layout, the deck checks that need the rank count:
// the P x D grid (data_parallel.replicas), stages, partition units (MLP
// Linear layers, GPT blocks) per stage, the explicit partition, schedule file.
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <numeric>
#include <string>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/schedule/recompute.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

namespace {

std::string list_text(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(values[i]);
  }
  return text + "]";
}

// "1 stage", "2 stages"; `many` is the plural when not word + "s".
std::string plural(int64_t n, const std::string& word, const std::string& many = "") {
  return std::to_string(n) + " " + (n == 1 ? word : many.empty() ? word + "s" : many);
}

// "the job has 4 MPI ranks", or with D replicas "each of the 2 pipelines has
// 2 MPI ranks (the job's 4 ranks / data_parallel.replicas = 2)": the ranks
// one pipeline's checks count.
std::string pipeline_ranks_text(int num_ranks, int replicas) {
  if (replicas <= 1) return "the job has " + plural(num_ranks, "MPI rank");
  return "each of the " + std::to_string(replicas) + " pipelines has " + plural(num_ranks, "MPI rank") +
         " (the job's " + std::to_string(num_ranks * replicas) + " ranks / data_parallel.replicas = " +
         std::to_string(replicas) + ")";
}

void check_stages(const Deck& deck, int num_ranks, int replicas) {
  int64_t stages = deck.pipeline.stages;
  if (stages == 0 || stages == num_ranks) return;
  throw InputError(deck.where("pipeline.stages") + " = " + std::to_string(stages) + " but " +
                   pipeline_ranks_text(num_ranks, replicas) +
                   "; pipetrain runs one stage per rank (use pipeline.stages = 0 to"
                   " take the rank count)");
}

// The partition unit of the deck's model: its key and what one unit is.
struct Units {
  std::string key, name;
  int64_t count = 0;
};

Units model_partition_units(const Deck& deck) {
  const ModelFamily& family = model_family(deck.model);
  return {"model." + family.units_key, family.unit_name, family.units(deck.model)};
}

void check_units_per_stage(const Deck& deck, const Units& units, int stages, int per_rank) {
  if (units.count >= stages) return;
  std::string why = per_rank > 1 ? ": " + std::to_string(stages / per_rank) + " ranks x " +
                                       std::to_string(per_rank) + " stages per rank"
                    : deck.pipeline.stages == 0 ? ", one per MPI rank"
                                                : "";
  throw InputError(deck.where(units.key) + " = " + std::to_string(units.count) +
                   ": must be >= the number of stages (" + std::to_string(stages) + why +
                   "); each stage needs at least one " + units.name);
}

void check_partition(const Deck& deck, const Units& units, int stages) {
  const std::vector<int64_t>& part = deck.pipeline.partition;
  if (part.empty()) return;
  std::string head = deck.where("pipeline.partition") + " = " + list_text(part) + ": ";
  if (static_cast<int64_t>(part.size()) != stages) {
    throw InputError(head + "has " + plural(static_cast<int64_t>(part.size()), "entry", "entries") +
                     " but there are " + plural(stages, "stage") + "; give one " + units.name +
                     " count per stage");
  }
  for (size_t s = 0; s < part.size(); ++s) {
    if (part[s] < 1) {
      throw InputError(head + "entry " + std::to_string(s) + " = " + std::to_string(part[s]) +
                       ": must be >= 1 (each stage needs at least one " + units.name + ")");
    }
  }
  int64_t sum = std::accumulate(part.begin(), part.end(), int64_t{0});
  if (sum != units.count) {
    throw InputError(head + "sums to " + std::to_string(sum) + " but " +
                     deck.described(units.key, std::to_string(units.count)) +
                     "; the entries count the " + units.name + "s of each stage");
  }
}

// The schedule file must open, parse, have one line per rank (= stage) and
// pass validate_schedule for the deck's stage and micro-batch counts.
void check_schedule_file(const Deck& deck, int stages) {
  const std::string& path = deck.pipeline.schedule_file;
  if (path.empty()) {
    throw InputError(deck.where("pipeline.schedule") +
                     " = \"file\": needs pipeline.schedule_file (the schedule text file)");
  }
  const std::string at = deck.where("pipeline.schedule_file") + " = \"" + path + "\"";
  std::string head = at + ": ";
  require_regular_file(path, "the schedule text file", at);
  std::ifstream probe(path);
  if (!probe) throw InputError(head + "cannot open the schedule file: " + std::strerror(errno));
  int micro_batches = static_cast<int>(deck.pipeline.micro_batches);
  try {
    Schedule schedule = load_schedule_file(path, stages, micro_batches);
    const int ranks = stages / static_cast<int>(deck.pipeline.virtual_stages);
    if (schedule.num_ranks != ranks) {
      throw InputError("has " + plural(schedule.num_ranks, "rank line") + " but the job runs " +
                       plural(ranks, "rank") + " (" + plural(stages, "stage") +
                       "); give one line per rank");
    }
    validate_schedule(schedule, comm_semantics_of(deck.pipeline.transport, deck.training.device));
  } catch (const InputError& e) {
    throw InputError(head + e.what());
  }
}

// With several stages per rank "auto" recomputation (which probes one stage
// per rank against the rank's budget) is refused.
void check_recompute_per_rank(const Deck& deck, int per_rank) {
  if (per_rank == 1) return;
  const auto& per_stage = deck.pipeline.recompute_stages;
  const bool any_auto = per_stage.empty()
                            ? is_auto_recompute(deck.pipeline.recompute)
                            : std::any_of(per_stage.begin(), per_stage.end(), is_auto_recompute);
  if (!any_auto) return;
  throw InputError(deck.where(per_stage.empty() ? "pipeline.recompute" : "pipeline.recompute_stages") +
                   ": \"auto\" chooses one stage per rank, but " +
                   deck.described("pipeline.schedule", "\"" + std::string(kind_name(deck.pipeline.schedule)) + "\"") +
                   " puts " + std::to_string(per_rank) +
                   " stages on each rank; give fixed policies (none, selective, every:K, full)");
}

// A generated schedule must accept the deck's micro-batch count.
void check_generated_schedule(const Deck& deck, int ranks) {
  try {
    generate_schedule(deck.pipeline.schedule, ranks, static_cast<int>(deck.pipeline.micro_batches),
                      static_cast<int>(deck.pipeline.virtual_stages));
  } catch (const InputError& e) {
    throw InputError(deck.where("pipeline.schedule") + " = \"" + kind_name(deck.pipeline.schedule) + "\" with " +
                     deck.described("pipeline.micro_batches",
                               std::to_string(deck.pipeline.micro_batches)) + ": " + e.what());
  }
}

// Rebalancing moves units between ranks of one stage each; the slowed rank
// of the fault injection must exist.
void check_rebalance_layout(const Deck& deck, int num_ranks, int per_rank, int replicas) {
  if (deck.rebalance.enabled && per_rank > 1)
    throw InputError(deck.where("rebalance.enabled") + " = true moves units between ranks of one " +
                     "stage each, but " +
                     deck.described("pipeline.schedule", "\"" + std::string(kind_name(deck.pipeline.schedule)) + "\"") +
                     " puts " + std::to_string(per_rank) + " stages on each rank");
  if (deck.slowdown.rank >= num_ranks)
    throw InputError(deck.where("slowdown.rank") + " = " + std::to_string(deck.slowdown.rank) + ": " +
                     pipeline_ranks_text(num_ranks, replicas) + ", numbered 0-" +
                     std::to_string(num_ranks - 1) + " in a pipeline; give one of them, or -1 for none");
}

// D replicas of a pipeline: D divides the ranks, and the global batch splits
// into D x micro_batches equal micro-batches.
int resolve_data_parallel(const Deck& deck, int world_ranks) {
  const int64_t stages = deck.pipeline.stages;
  int64_t d = deck.data_parallel.replicas;
  if (d == 0) d = stages > 0 && world_ranks % stages == 0 ? world_ranks / stages : 1;
  if (world_ranks % d != 0)
    throw InputError(deck.where("data_parallel.replicas") + " = " + std::to_string(d) +
                     " but the job has " + plural(world_ranks, "MPI rank") +
                     "; the ranks form a grid of pipeline ranks x data_parallel replicas, so " +
                     "data_parallel must divide the rank count");
  const int64_t n = deck.pipeline.micro_batches;
  if (deck.training.batch_size % (n * d) != 0)
    throw InputError(deck.where("training.batch_size") + " = " +
                     std::to_string(deck.training.batch_size) + ": the global batch must be " +
                     "divisible by data_parallel x micro_batches = " + std::to_string(d) + " x " +
                     std::to_string(n) + " (" +
                     deck.described("pipeline.micro_batches", std::to_string(n)) + ", " +
                     std::to_string(world_ranks) + " ranks as " +
                     std::to_string(world_ranks / d) + " x " + std::to_string(d) + ")");
  if (d > 1 && deck.rebalance.enabled)
    throw InputError(deck.where("rebalance.enabled") + " = true moves units between the " +
                     "ranks of one pipeline; it is not supported with " +
                     std::to_string(d) + " data-parallel replicas (" + deck.named("data_parallel.replicas") + ")");
  return static_cast<int>(d);
}

// "ordered" keeps each micro-batch's gradient apart at the end of its B; a
// split backward adds weight gradients later, in W.
void check_ordered_reduction(const Deck& deck, int ranks) {
  if (deck.data_parallel.reduction != DpReductionKind::Ordered) return;
  const ScheduleKind s = deck.pipeline.schedule;
  bool split = schedule_takes_times(s) || deck.pipeline.weight_grad == WeightGradKind::Step;
  if (s == ScheduleKind::File)
    split = splits_backward(load_schedule_file(deck.pipeline.schedule_file,
                                               ranks * static_cast<int>(deck.pipeline.virtual_stages),
                                               static_cast<int>(deck.pipeline.micro_batches)));
  if (split)
    throw InputError(deck.where("data_parallel.reduction") + " = \"ordered\" keeps each " +
                     "micro-batch's gradient at the end of its backward, but " +
                     deck.described("pipeline.schedule", "\"" + std::string(kind_name(s)) + "\"") +
                     (deck.pipeline.weight_grad == WeightGradKind::Step ? " with pipeline.weight_grad = \"step\"" : "") +
                     " splits the backward (W actions); use \"replica\", or gpipe, 1f1b, interleaved "
                     "with weight_grad = \"micro_batch\"");
}


}  // namespace

DeckLayout resolve_deck_layout(const Deck& deck, int world_ranks) {
  PT_CHECK(world_ranks >= 1, "world_ranks = " + std::to_string(world_ranks));
  DeckLayout layout;
  layout.data_parallel = resolve_data_parallel(deck, world_ranks);
  layout.pipeline_ranks = world_ranks / layout.data_parallel;
  check_layout_of_pipeline(deck, layout.pipeline_ranks, layout.data_parallel);
  check_ordered_reduction(deck, layout.pipeline_ranks);
  return layout;
}

int check_deck_layout(const Deck& deck, int world_ranks) {
  return resolve_deck_layout(deck, world_ranks).pipeline_ranks;
}

int check_layout_of_pipeline(const Deck& deck, int num_ranks, int replicas) {
  PT_CHECK(num_ranks >= 1, "num_ranks = " + std::to_string(num_ranks));
  check_stages(deck, num_ranks, replicas);
  const int per_rank = stages_per_rank(deck.pipeline.schedule,
                                       static_cast<int>(deck.pipeline.virtual_stages));
  const int stages = num_ranks * per_rank;
  const Units units = model_partition_units(deck);
  check_units_per_stage(deck, units, stages, per_rank);
  check_partition(deck, units, stages);
  const size_t overrides = deck.pipeline.recompute_stages.size();
  if (overrides != 0 && overrides != static_cast<size_t>(stages))
    throw InputError(deck.where("pipeline.recompute_stages") + " has " + std::to_string(overrides) +
                     " entries but " + (replicas > 1 ? "each pipeline" : "the job") + " has " +
                     std::to_string(stages) + " stages; give one policy per stage or leave it empty");
  check_recompute_per_rank(deck, per_rank);
  if (deck.pipeline.schedule == ScheduleKind::File) check_schedule_file(deck, stages);
  else check_generated_schedule(deck, num_ranks);
  check_rebalance_layout(deck, num_ranks, per_rank, replicas);
  return num_ranks;
}

}  // namespace pt
