// plan_command.cpp: `pipetrain plan DECK [--ranks P] [--profile FILE |
// --device NAME] [--micro-batches N,...] [--reps K] [--top K]`: predicts,
// without training, the step time, bubble, throughput and per-stage peak
// memory of the deck and of the alternatives a user would weigh (schedules,
// micro-batch counts, recompute policies, partitions), by simulating the
// schedules the executor would run (plan/alternatives.hpp), and prints them
// ranked with the best plan under the memory budget (docs/planner.md).
//
// Costs come from one of three places:
//   measured   (default) a brief profile per micro-batch size on the deck's
//              backend, every rank measuring at once (collective);
//   --profile  a profile.h5 or trace.h5 (its micro-batch size only);
//   --device   a device description (h200) and the analytic GPT costs, for
//              scales this machine cannot run.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/app/memory_check.hpp"
#include "pipetrain/app/blas_report.hpp"
#include "pipetrain/app/profile_command.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/profile_io.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/plan/device.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/tensor/blas_info.hpp"

namespace pt {

namespace {

const char* const kDevices = "h200";

DeviceSpec device_named(const std::string& name) {
  if (name == "h200") return h200_device();
  throw InputError("plan --device " + name + ": unknown device; expected one of: " + kDevices);
}

// The deck's GPT as the analytic cost model sees it: activations and working
// weights in the training precision (no working copy in bf16/fp16 with
// training.weight_copies = false: the GEMMs round the masters), fp32
// gradients, fp32 master weights when the precision is lower, and the
// optimizer's fp32 state.
GptSpec gpt_spec_of(const Deck& deck, const std::string& device) {
  const ModelFamily& family = model_family(deck.model);
  if (!family.analytic_dims)
    throw InputError(deck.where("model.type") + " = \"" + family.name + "\": plan --device " + device +
                     " models GPT decks only (analytic costs); plan this family by measuring it "
                     "(no --device) or from a profile (--profile FILE)");
  GptSpec g;
  g.dims = family.analytic_dims(deck.model);
  const GptDims& d = g.dims;
  g.name = family.name + " blocks=" + std::to_string(d.blocks) + " d_model=" + std::to_string(d.d_model) +
           " heads=" + std::to_string(d.heads) + " seq_len=" + std::to_string(d.seq_len) +
           " vocab_size=" + std::to_string(d.vocab_size);
  const bool half = deck.training.precision == Precision::Bf16 || deck.training.precision == Precision::Fp16;
  g.activation_bytes = half ? 2.0 : 4.0;
  g.param_bytes = half ? (deck.training.weight_copies ? 2.0 : 0.0) : 4.0;
  g.grad_bytes = 4.0;
  const double moments = deck.training.optimizer == OptimizerKind::AdamW ? 8.0 : 4.0;
  g.optimizer_bytes = moments + (half ? 4.0 : 0.0);
  return g;
}

PlanRequest request_for(const Deck& deck, const CommandLine& cli, int stages) {
  PlanRequest r;
  r.num_stages = stages;
  r.batch_size = deck.training.batch_size;
  r.micro_batch_counts = cli.micro_batch_counts;
  r.memory_budget_bytes = deck.pipeline.memory_budget_mb * 1024.0 * 1024.0;
  r.weight_grad_share = weight_grad_share(deck.model);
  r.weight_grad = deck.pipeline.weight_grad;
  r.timed_placement = zero_bubble_placed_at_measured_times(deck);
  r.schedules = cli.schedules;
  if (r.schedules.empty()) {  // the defaults, and the deck's own when it is generated
    r.schedules = {"gpipe", "1f1b"};
    const std::string own = kind_name(deck.pipeline.schedule);
    if (deck.pipeline.schedule != ScheduleKind::File &&
        std::find(r.schedules.begin(), r.schedules.end(), own) == r.schedules.end())
      r.schedules.push_back(own);
  }
  if (deck.pipeline.schedule == ScheduleKind::Interleaved)
    r.virtual_stages = static_cast<int>(deck.pipeline.virtual_stages);
  // Selective recomputation drops attention probabilities; an MLP has none,
  // nor does a GPT with fused attention (it keeps only row statistics).
  if (!selective_recompute_drops(deck.model)) r.recompute = {"none", "full"};
  for (int n : r.micro_batch_counts)
    if (deck.training.batch_size % n != 0)
      throw InputError("plan --micro-batches " + std::to_string(n) + ": does not divide " +
                       deck.where("training.batch_size") + " = " +
                       std::to_string(deck.training.batch_size));
  return r;
}

// A profile read from a file holds for its own micro-batch size only.
PlanTable plan_from_file(const Deck& deck, const CommandLine& cli, PlanRequest request,
                         Backend& be) {
  const ModelProfile profile = load_profile_for_deck(cli.profile_path, deck, be, {});
  const int n = static_cast<int>(deck.training.batch_size / profile.micro_batch_rows);
  if (!cli.micro_batch_counts.empty() && cli.micro_batch_counts != std::vector<int>{n})
    throw InputError("plan --profile " + cli.profile_path + ": the profile holds for micro-batches " +
                     "of " + std::to_string(profile.micro_batch_rows) + " samples, i.e. " +
                     std::to_string(n) + " micro-batches; measure (no --profile) to weigh others");
  request.micro_batch_counts = {n};
  // D > 1: the file's timed reductions at D when it has them (a run's at that D), else its link.
  request.replica_link = replica_link_of(profile, request.data_parallel, profile.link);
  return rank_plans([&](int64_t) { return profile; }, {profile.link}, request);
}

}  // namespace

int run_plan(MPI_Comm comm, const CommandLine& cli, const Deck& deck, const std::string& blas_note) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  set_wait_phase("in the planner");
  // Data parallelism: with data_parallel.replicas = 0 and pipeline.stages = 0
  // (the defaults) every P x D grid of the ranks is weighed (request
  // data_parallel = 0 here); else the deck's D on ranks / D stages.
  const int ranks = cli.ranks > 0 ? cli.ranks : size;
  // (Values, not where they were set: every rank sees the same resolved deck.)
  // pipeline.auto weighs every grid when the deck sets neither key (as the
  // run does: auto_chooses_grid), else the deck's.
  const bool every_grid = !deck.pipeline.auto_plan && deck.data_parallel.replicas == 0 &&
                          deck.pipeline.stages == 0;
  const int d = every_grid ? 1 : static_cast<int>(data_parallel_size(deck));
  const int stages = every_grid ? ranks : ranks / d;
  // pipeline.auto: the request a run would weigh, and the choice it would take.
  const bool auto_plan = deck.pipeline.auto_plan && !every_grid;
  const Deck open = auto_plan ? with_open_keys_of_rank0(deck, comm) : deck;
  PlanRequest request = auto_plan ? auto_plan_request(open, stages, 1.0) : request_for(deck, cli, stages);
  if (auto_plan) request.memory_budget_bytes = deck.pipeline.memory_budget_mb * 1024.0 * 1024.0;
  if (!auto_plan) request.data_parallel = every_grid ? 0 : d;
  PlanTable table;
  std::string source;
  if (!cli.device.empty()) {
    const DeviceSpec device = device_named(cli.device);
    if (every_grid) {
      request.data_parallel = 1;
      table = plan_grid_alternatives(gpt_spec_of(deck, cli.device), device, request, ranks);
    } else {
      request.replica_link = ranks <= device.devices_per_node ? device.intra_node : device.inter_node;
      table = plan_alternatives(gpt_spec_of(deck, cli.device), device, request);
    }
    source = "device description " + device.name + " (analytic GPT costs, docs/planner.md)";
  } else {
    const BlasThreadsChoice blas = profile_blas_threads(deck, comm, stages);
    set_blas_threads(blas.threads);
    choose_wait_mode();
    const BlasReport report = gather_blas_report(comm, blas_note);
    ComputeResources compute = make_compute_resources(deck, comm);
    Backend& be = compute.setup.backend ? *compute.setup.backend : cpu_backend();
    if (request.memory_budget_bytes == 0.0) request.memory_budget_bytes = plan_budget_bytes(deck, stages);
    if (!cli.profile_path.empty() && request.data_parallel == 0) request.data_parallel = 1;
    if (cli.profile_path.empty()) {
      check_profile_fits(deck, comm, memory_on_hand(compute));  // before a unit is built
      table = measure_plans(deck, request, comm, comm, compute,
                            options_for(cli, compute, ProfileOptions::brief()),
                            auto_plan && weight_grad_open(open));
      source = "brief profiles measured now on " + std::to_string(size) + " rank" +
               (size == 1 ? "" : "s") + ", one per micro-batch size (" +
               (compute.kernels.empty() ? blas_info().describe() : compute.kernels) + ")";
    } else {
      table = plan_from_file(deck, cli, request, be);
      source = "the profile " + cli.profile_path;
    }
    if (rank == 0 && report.any_fallback)
      std::printf("BLAS: warning: some ranks run fallback kernels; the measured costs are not "
                  "those of the CPU's best kernels\n%s", report.lines.c_str());
  }
  if (rank != 0) return 0;
  std::printf("plan: costs from %s; budget %s\n", source.c_str(),
              deck.pipeline.memory_budget_mb > 0.0
                  ? "pipeline.memory_budget_mb"
                  : (cli.device.empty() ? "this node's memory / stages" : "the device's memory"));
  if (request.weight_grad == WeightGradKind::Step)
    std::printf("plan: weight gradients once per step (pipeline.weight_grad = \"step\") under "
                "gpipe, 1f1b and interleaved; each stage's B and pass as the profile's stage chains "
                "timed a step (else the pass at a whole replica batch's rows)\n");
  std::printf("%s", format_plan_table(table, static_cast<size_t>(cli.top)).c_str());
  std::printf("%s\n", deck_rank_text(deck, table).c_str());
  if (auto_plan && table.best >= 0)
    std::printf("pipeline.auto: a run of this deck chooses rank %d, %s (on its own profiles)\n",
                table.best + 1, plan_choice_text(table.rows[static_cast<size_t>(table.best)]).c_str());
  else if (auto_plan)
    std::printf("pipeline.auto: a run of this deck stops: no plan fits the budget\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace pt
