// auto_plan.hpp: pipeline.auto = true (docs/planner.md, "pipeline.auto"):
// at start, after a brief profile per micro-batch size, the run takes the
// planner's fastest plan within the memory budget among what the deck
// leaves open (schedule, micro-batch count, recompute policy, partition),
// keeping every key the deck sets itself, and writes the choice into the
// deck it runs, so deck.resolved.toml repeats it without `auto`.
// `pipetrain plan` on such a deck ranks the same request and names the
// same choice.
#pragma once

#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/runtime/profiler.hpp"

namespace pt {

// The plans auto weighs for `deck` on `stages` pipeline stages (the
// deck's pipeline.weight_grad; measure_plans adds the other when it is
// open): every
// micro-batch count dividing the replica batch, the generated schedules
// (gpipe, 1f1b, zb-h1; interleaved and zb-v where the model has units for
// two stages per rank), recompute none / selective / full (none / full
// where selective drops nothing) and the four partition objectives, each
// narrowed to the deck's own value where the deck sets the key. InputError
// for what auto cannot keep (pipeline.recompute_stages, a recompute policy
// or schedule it cannot weigh).
// When auto_chooses_grid, `stages` is the job's rank count and the request
// weighs every P x D grid of it (data_parallel = 0).
PlanRequest auto_plan_request(const Deck& deck, int stages, double budget_bytes);

// Whether auto chooses the P x D grid too: the deck sets neither
// data_parallel.replicas nor pipeline.stages nor a list of per-stage counts,
// the job has more than one rank, and rebalancing is off (it needs one replica). The run then
// profiles on all ranks as one pipeline and splits the grid it chose.
bool auto_chooses_grid(const Deck& deck, int ranks);

// The memory budget auto and `plan` weigh against: pipeline.memory_budget_mb,
// else this node's memory over the stages; and how to name it in messages.
double plan_budget_bytes(const Deck& deck, int stages);
std::string plan_budget_name(const Deck& deck);

// Collective: `deck` whose key_origin says, on every rank, which of the keys
// auto may choose rank 0's deck sets (the other ranks hold the resolved
// deck, which writes every key).
Deck with_open_keys_of_rank0(const Deck& deck, MPI_Comm comm);

// Collective over the pipeline's ranks (a brief profile per micro-batch
// size; every rank ranks the same measured table): the table of the
// request, measured on this backend.
// With `both_weight_grads` (pipeline.weight_grad open: weight_grad_open),
// the schedules without W of their own (gpipe, 1f1b, interleaved) are also
// weighed with one weight-gradient pass per step, the rows ranked together.
// `profiles` (optional) receives the profiles measured, by micro-batch rows.
// `world`: every rank of the job (comm, or all its replicas at a fixed D):
// the data-parallel reductions of the D weighed are timed on it
// (time_replica_reductions) and kept in every profile.
PlanTable measure_plans(const Deck& deck, const PlanRequest& request, MPI_Comm comm, MPI_Comm world,
                        const ComputeResources& compute, const ProfileOptions& options,
                        bool both_weight_grads = false,
                        std::map<int64_t, ModelProfile>* profiles = nullptr);
// Whether pipeline.weight_grad is left to auto (with_open_keys_of_rank0's deck).
bool weight_grad_open(const Deck& deck);

struct AutoChoice {
  PlanTable table;  // every plan weighed, fastest first
  int chosen = -1;  // table.best
  // The brief profiles measured, by micro-batch rows (the same on every rank
  // of a pipeline); empty on a resume, which measures nothing.
  std::map<int64_t, ModelProfile> profiles;
};

// The row auto takes from a ranked table: table.best, the simplest of the
// feasible rows tied with the fastest feasible one (kPlanTieMargin).
// InputError when none fits, naming the budget and the smallest budget that
// some plan fits, with that plan.
int auto_pick(const PlanTable& table, const Deck& deck);

// `deck` with row's choices written in (schedule, micro_batches, recompute,
// an explicit partition, weight_grad; virtual_stages for interleaved;
// data_parallel.replicas when auto_chooses_grid) and pipeline.auto cleared,
// each chosen key's origin "pipeline.auto". `stages`: as auto_plan_request's.
Deck deck_with_plan(const Deck& deck, const PlanRow& row, int stages);

// Collective over `world` (the profiles over each `pipeline`'s ranks):
// measures, picks on world rank 0, shares the choice and returns the deck to
// run. Rank 0 prints the choice, the runners-up and where the deck as
// written ranks; `choice` (rank 0's is the one taken) keeps the table.
// `earlier_resolved`: on a resume, the deck.resolved.toml of the run being
// resumed; when it exists its choice is kept (a new choice could change the
// micro-batch count, and with it the summation order) and nothing is measured.
Deck choose_auto_plan(const Deck& deck, MPI_Comm world, MPI_Comm pipeline,
                      const ComputeResources& compute, const std::string& earlier_resolved,
                      AutoChoice* choice);

// "1f1b N=8 recompute none, partition [2, 2] (time)": a row as a choice.
std::string plan_choice_text(const PlanRow& row);
// Where the deck as written falls in the table ("... ranks 25 of 96").
std::string deck_rank_text(const Deck& deck, const PlanTable& table);

}  // namespace pt
