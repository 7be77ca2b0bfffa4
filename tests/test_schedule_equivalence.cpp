// test_schedule_equivalence.cpp: interleaved, ZB-H1 and ZB-V training gives
// the single-process model, bit for bit.
//
// For P in {1, 2, 4} ranks (those that fit in the MPI world), every N in
// {1, 2, 3, 4, 8} the schedule accepts (interleaved: multiples of P), with
// recompute none and full (and selective for the GPT), several AdamW steps
// on the MLP and a small GPT (8 blocks, so that 4 ranks x 2 stages fit): every
// parameter and every step's loss on rank 0 must be bitwise those of one
// process running one stage over the same N micro-batches. They are, because
// every parameter's gradient is accumulated in ascending micro-batch order
// (F, B and W each run in that order on every stage), the split backward
// makes the same calls on the same tensors as the fused one, and the gradient
// norm adds the per-parameter sums in global order whatever the placement.
// Interleaved and ZB-V at P = 1 put 2 (or 3) stages on one rank: local
// handoffs only. pipeline.weight_grad = "step" (one weight-gradient pass
// per stage after its last B) is bitwise the single process with the same
// setting. Last, a checkpoint written under one schedule resumes bitwise
// under another (parameters are keyed by name, not by stage), weight_grad
// included.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "mpi_test_util.hpp"
#include "training_run.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::is_root;
using test::world_size;

// A run, and where its schedule was last placed (Trainer::schedule_first_step).
struct RunResult : test::RunResult {
  int64_t schedule_first_step = 0;
};

Deck mlp_deck() {
  Deck d = pt_test::tiny_mlp(24);  // clipping: the norm must be bitwise too
  return d;
}

Deck gpt_deck() {
  Deck d = pt_test::tiny_gpt(mlp_deck(), 8);
  d.training.lr = 3e-3;
  return d;
}

RunResult run_trainer(const Deck& deck, MPI_Comm comm) {
  RunResult result;
  Trainer trainer(deck, comm);
  static_cast<test::RunResult&>(result) = test::train_steps(trainer, deck);
  result.schedule_first_step = trainer.schedule_first_step();
  return result;
}

// Trains `deck` on the first `ranks` ranks of the world; others sit out.
RunResult train_on(const Deck& deck, int ranks) {
  RunResult result;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) { result = run_trainer(deck, comm); });
  return result;
}

struct Variant {
  std::string schedule;
  int virtual_stages;
  std::string weight_grad = "micro_batch";
};

const std::vector<Variant> kVariants = {
    {"interleaved", 2}, {"interleaved", 3}, {"zb-h1", 1}, {"zb-v", 1}};

Deck with_schedule(Deck deck, const Variant& v) {
  deck.pipeline.schedule = kind_named<ScheduleKind>(v.schedule);
  deck.pipeline.virtual_stages = v.virtual_stages;
  deck.pipeline.weight_grad = kind_named<WeightGradKind>(v.weight_grad);
  return deck;
}

bool accepts(const Variant& v, int ranks, int n, int units) {
  if (v.schedule == "interleaved" && n % ranks != 0) return false;
  return ranks * stages_per_rank(v.schedule, v.virtual_stages) <= units;
}

void expect_bitwise(const RunResult& got, const RunResult& want, const std::string& label) {
  test::expect_bitwise(got, want, label + " (against the single-process run)", /*norms=*/true);
}

void check_schedules(const Deck& base, const std::vector<std::string>& recomputes) {
  const int units = static_cast<int>(model_units(base.model));
  for (const std::string& recompute : recomputes)
    for (int n : {1, 2, 3, 4, 8}) {
      Deck reference = base;
      reference.pipeline.micro_batches = n;
      reference.pipeline.schedule = ScheduleKind::GPipe;
      RunResult alone;
      if (is_root()) alone = run_trainer(reference, MPI_COMM_SELF);
      for (int p : {1, 2, 4}) {
        if (p > world_size()) continue;
        for (const Variant& v : kVariants) {
          if (!accepts(v, p, n, units)) continue;
          Deck deck = reference;
          deck.pipeline.schedule = kind_named<ScheduleKind>(v.schedule);
          deck.pipeline.virtual_stages = v.virtual_stages;
          deck.pipeline.recompute = recompute;
          const RunResult piped = train_on(deck, p);
          if (!is_root()) continue;
          expect_bitwise(piped, alone, deck.model.type + " " + v.schedule + " v=" +
                                           std::to_string(v.virtual_stages) + " P=" +
                                           std::to_string(p) + " N=" + std::to_string(n) +
                                           " recompute " + recompute);
        }
      }
    }
}

TEST(ScheduleEquivalence, MlpEverySchedule) { check_schedules(mlp_deck(), {"none", "full"}); }

TEST(ScheduleEquivalence, GptEverySchedule) {
  check_schedules(gpt_deck(), {"none", "selective", "every:2"});
}

// Weight-gradient GEMMs (dW (+)= dY^T X: A transposed, B not) of a run,
// counted by their inner dimension, the rows they sum over.
struct WeightGemms {
  RunResult run;
  std::map<int64_t, int64_t> count_by_rows;
};

WeightGemms run_counting_weight_gemms(const Deck& deck) {
  WeightGemms out;
  start_gemm_recording();
  out.run = run_trainer(deck, MPI_COMM_SELF);
  for (const GemmShape& g : stop_gemm_recording())
    if (g.trans_a && !g.trans_b) ++out.count_by_rows[g.k];
  return out;
}

int64_t rows_per_step(const Deck& deck) {
  const int64_t per_sample = deck.model.type == "gpt" ? deck.model.gpt.seq_len : 1;
  return deck.training.batch_size * per_sample;
}

// pipeline.weight_grad = "step": gpipe, 1f1b and interleaved with every
// stage's weight gradients in one pass after its last B (each product one
// GEMM over all the step's rows) give bitwise the single process with the
// same setting, at every P, N and recompute policy. That the pass really ran
// is proven by the GEMMs themselves (recorded by the CPU backend), not by
// rounding: per step, the single process makes W weight-gradient GEMMs over
// all the step's rows with the setting, and N x W over one micro-batch's rows
// without it, where W > 0 is the number of weights.
void expect_one_weight_gemm_per_step(const Deck& reference, const WeightGemms& step_wise,
                                     const WeightGemms& per_micro_batch) {
  const int64_t n = reference.pipeline.micro_batches;
  const int64_t rows = rows_per_step(reference);
  const auto count = [](const WeightGemms& w, int64_t k) {
    const auto it = w.count_by_rows.find(k);
    return it == w.count_by_rows.end() ? int64_t{0} : it->second;
  };
  const std::string label = reference.model.type + " N=" + std::to_string(n) + " recompute " +
                            reference.pipeline.recompute;
  EXPECT_GT(count(step_wise, rows), 0) << label << ": no weight-gradient GEMM over the step's "
                                       << rows << " rows with weight_grad = step";
  EXPECT_EQ(count(per_micro_batch, rows / n), n * count(step_wise, rows))
      << label << ": per-micro-batch weight-gradient GEMMs over " << rows / n << " rows";
  if (n > 1) {
    EXPECT_EQ(count(step_wise, rows / n), 0)
        << label << ": weight_grad = step still made GEMMs over one micro-batch's rows";
  }
}

void check_step_weight_grads(const Deck& base, const std::vector<std::string>& recomputes) {
  const int units = static_cast<int>(model_units(base.model));
  const std::vector<Variant> variants = {
      {"gpipe", 1, "step"}, {"1f1b", 1, "step"}, {"interleaved", 2, "step"}};
  for (const std::string& recompute : recomputes)
    for (int n : {1, 2, 4, 8}) {
      Deck reference = with_schedule(base, {"1f1b", 1, "step"});
      reference.pipeline.micro_batches = n;
      reference.pipeline.recompute = recompute;
      RunResult alone;
      if (is_root()) {
        const WeightGemms step_wise = run_counting_weight_gemms(reference);
        const WeightGemms per_micro_batch =
            run_counting_weight_gemms(with_schedule(reference, {"1f1b", 1}));
        expect_one_weight_gemm_per_step(reference, step_wise, per_micro_batch);
        alone = step_wise.run;
      }
      for (int p : {1, 2, 4}) {
        if (p > world_size()) continue;
        for (const Variant& v : variants) {
          if (!accepts(v, p, n, units)) continue;
          const RunResult piped = train_on(with_schedule(reference, v), p);
          if (!is_root()) continue;
          expect_bitwise(piped, alone, base.model.type + " " + v.schedule + " weight_grad=step P=" +
                                           std::to_string(p) + " N=" + std::to_string(n) +
                                           " recompute " + recompute);
        }
      }
    }
}

TEST(ScheduleEquivalence, StepWeightGradsMlp) { check_step_weight_grads(mlp_deck(), {"none", "full"}); }

TEST(ScheduleEquivalence, StepWeightGradsGpt) { check_step_weight_grads(gpt_deck(), {"none", "selective"}); }

// The comparison itself is not trivially equal: a run that trains on other
// samples (another data seed, as a schedule that skipped or repeated a
// micro-batch would) differs in its parameters and losses. Micro-batch
// counts are not compared here: whether N = 2 and N = 4 round differently
// is the GEMM kernel's business; that every micro-batch's weight gradient
// is accumulated is proven by the recorded GEMMs (StepWeightGrads*).
TEST(ScheduleEquivalence, OtherSamplesChangeTheBits) {
  if (!is_root()) return;
  Deck a = mlp_deck();
  a.pipeline.micro_batches = 4;
  a.pipeline.schedule = ScheduleKind::GPipe;
  Deck b = a;
  b.data.seed = a.data.seed + 1;
  const RunResult ra = run_trainer(a, MPI_COMM_SELF), rb = run_trainer(b, MPI_COMM_SELF);
  EXPECT_GT(test::bitwise_differences(ra.params, rb.params), ra.params.size() / 2);
  EXPECT_NE(ra.losses.front(), rb.losses.front());
}

// Steps [from, to) on the first `ranks` ranks, loading `load` first when
// given and saving into `save_dir` at the end when given.
RunResult segment(Deck deck, int ranks, int64_t from, int64_t to, const std::string& load,
                  const std::string& save_dir) {
  RunResult run;
  test::on_first_ranks(ranks, [&](MPI_Comm comm) {
    Trainer trainer(deck, comm);
    const std::string text = deck_to_toml(deck);
    if (!load.empty()) load_checkpoint(load, LoadMode::Resume, deck, text, trainer, comm);
    for (int64_t s = from; s < to; ++s) run.losses.push_back(trainer.train_step(s).loss);
    if (!save_dir.empty()) {
      deck.output.checkpoint_dir = save_dir;
      save_checkpoint(deck, text, trainer, to, comm);
    }
    run.params = trainer.gather_parameters();
  });
  return run;
}

std::string shared_temp_dir() {
  char buf[256] = {0};
  if (is_root()) {
    std::snprintf(buf, sizeof buf, "%s",
                  (std::filesystem::temp_directory_path() / "pt_sched_XXXXXX").c_str());
    if (mkdtemp(buf) == nullptr) buf[0] = 0;
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

// K steps under `from`, save, resume under `to` for K more: bitwise the 2K
// steps straight under `to`.
void check_cross_resume(const Deck& base, const Variant& from, const Variant& to) {
  const int p = std::min(world_size(), 4);
  const std::string dir = shared_temp_dir();
  const std::string label = base.model.type + " " + from.schedule + " -> " + to.schedule +
                            " P=" + std::to_string(p);
  const RunResult straight = segment(with_schedule(base, to), p, 0, 4, "", "");
  segment(with_schedule(base, from), p, 0, 2, "", dir + "/ckpt");
  const RunResult resumed = segment(with_schedule(base, to), p, 2, 4, dir + "/ckpt", "");
  MPI_Barrier(MPI_COMM_WORLD);
  if (!is_root()) return;
  std::filesystem::remove_all(dir);
  ASSERT_EQ(resumed.params.size(), straight.params.size()) << label;
  EXPECT_EQ(test::bitwise_differences(resumed.params, straight.params), 0u) << label;
  for (size_t s = 0; s < 2; ++s) EXPECT_EQ(resumed.losses[s], straight.losses[2 + s]) << label;
}

TEST(ScheduleEquivalence, ResumesBitwiseUnderAnotherSchedule) {
  const std::vector<std::pair<Variant, Variant>> pairs = {
      {{"1f1b", 1}, {"zb-v", 1}},
      {{"zb-v", 1}, {"interleaved", 2}},
      {{"interleaved", 2}, {"zb-h1", 1}},
      {{"zb-h1", 1}, {"gpipe", 1}},
      {{"1f1b", 1, "step"}, {"interleaved", 2, "step"}},
      {{"interleaved", 2, "step"}, {"gpipe", 1, "step"}}};
  for (const Deck& base : {mlp_deck(), gpt_deck()})
    for (const auto& [from, to] : pairs) {
      Deck deck = base;
      deck.pipeline.micro_batches = 4;
      deck.training.steps = 4;
      deck.output.checkpoint_keep = 10;
      check_cross_resume(deck, from, to);
    }
}

// Placements at real times: a ZB-V placed at given times (W much shorter
// than F and B, so that it differs from the paper's), run from a schedule
// file, and pipeline.schedule_times = "measured" (steps 0-2 in the unit-time
// placement, then placed again at the measured times): both bitwise the
// single process, as every placement runs a stage's F, B and W in
// micro-batch order.
TEST(ScheduleEquivalence, PlacementsAtGivenAndMeasuredTimes) {
  const std::string dir = shared_temp_dir();
  for (const Deck& base : {mlp_deck(), gpt_deck()})
    for (int n : {4, 8}) {
      Deck reference = base;
      reference.pipeline.micro_batches = n;
      reference.pipeline.schedule = ScheduleKind::GPipe;
      reference.training.steps = 5;
      RunResult alone;
      if (is_root()) alone = run_trainer(reference, MPI_COMM_SELF);
      for (int p : {2, 4}) {  // one rank never waits: every placement is the paper's
        if (p > world_size() || 2 * p > static_cast<int>(model_units(base.model))) continue;
        const std::string at = base.model.type + " P=" + std::to_string(p) + " N=" + std::to_string(n);
        const Schedule timed =
            generate_zb_v(p, n, StageActionTimes(static_cast<size_t>(2 * p), {1.0, 1.0, 0.3}));
        ASSERT_NE(timed.ranks, generate_zb_v(p, n).ranks) << at;  // another order of actions
        const std::string file = dir + "/zb_v_timed_p" + std::to_string(p) + ".txt";
        if (is_root()) std::ofstream(file) << format_schedule(timed);
        MPI_Barrier(MPI_COMM_WORLD);
        Deck from_file = reference;
        from_file.pipeline.schedule = ScheduleKind::File;
        from_file.pipeline.schedule_file = file;
        from_file.pipeline.virtual_stages = 2;
        const RunResult placed = train_on(from_file, p);
        Deck measured = reference;
        measured.pipeline.schedule = ScheduleKind::ZbV;
        measured.pipeline.schedule_times = ScheduleTimesKind::Measured;
        const RunResult remeasured = train_on(measured, p);
        if (!is_root()) continue;
        expect_bitwise(placed, alone, "zb-v placed at given times, " + at);
        expect_bitwise(remeasured, alone, "zb-v schedule_times = measured, " + at);
        EXPECT_EQ(remeasured.schedule_first_step, MeasuredPlacement::kWarmupSteps + MeasuredPlacement::kMeasuredSteps)
            << at;
      }
    }
  MPI_Barrier(MPI_COMM_WORLD);
  if (is_root()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pt
