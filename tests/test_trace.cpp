// test_trace.cpp: the recorded timeline of a real pipelined run.
//
// Trains a few steps with tracing on (GPipe and 1F1B, on every rank of the
// world) and checks on rank 0, for every rank: each step has exactly one F and
// one B per micro-batch and one SEND/RECV window per comm action; the compute
// events, in time order, are exactly the schedule's F/B actions of that rank;
// nested events (WAIT, RECOMPUTE) lie inside their F/B; times are ordered and
// the clock offsets' estimated errors are small. And the compute times the
// executor reports (the measured bubble, live rebalancing, zero-bubble
// placement) come from the backend's ComputeTimer, one region per F, B and W
// read once per step, never from the host clock around launches (#40 2.2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "forwarding_backend.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {
namespace {

// What a FakeClockBackend was asked to do.
struct TimingLedger {
  int begins = 0, ends = 0, reads = 0, syncs = 0;
  size_t regions_read = 0;  // regions returned by the reads
  bool read_while_open = false;
};

// A ComputeTimer on a fake clock: region k since the last read lasts
// (k + 1) ms, whatever the host clock says.
class FakeTimer final : public ComputeTimer {
 public:
  explicit FakeTimer(TimingLedger& ledger) : ledger_(ledger) {}
  void begin() override {
    ++ledger_.begins;
    open_ = true;
  }
  void end() override {
    ++ledger_.ends;
    open_ = false;
    seconds_.push_back(1e-3 * static_cast<double>(seconds_.size() + 1));
  }
  std::vector<double> read() override {
    ++ledger_.reads;
    ledger_.read_while_open = ledger_.read_while_open || open_;
    ledger_.regions_read += seconds_.size();
    return std::exchange(seconds_, {});
  }

 private:
  TimingLedger& ledger_;
  bool open_ = false;
  std::vector<double> seconds_;
};

// Computes on the CPU backend, its kernel groups included; its clock is a
// FakeTimer and it counts synchronisations, as a GPU backend's would cost.
class FakeClockBackend final : public test::ForwardingBackend {
 public:
  TimingLedger ledger;
  const char* name() const override { return "fake-clock"; }
  void synchronize() override { ++ledger.syncs; }
  std::unique_ptr<ComputeTimer> make_timer() override { return std::make_unique<FakeTimer>(ledger); }
  KernelGroup* kernel_group(const std::string& group) override { return target_.kernel_group(group); }
};

// The F, B and W actions of `rank` in `schedule`, in order ('F', 'B', 'W').
std::vector<char> compute_kinds(const Schedule& schedule, int rank) {
  std::vector<char> kinds;
  for (const Action& a : schedule.ranks[rank]) {
    if (a.kind == ActionKind::F) kinds.push_back('F');
    if (a.kind == ActionKind::B) kinds.push_back('B');
    if (a.kind == ActionKind::W) kinds.push_back('W');
  }
  return kinds;
}

// The fake clock's total over n regions: (1 + 2 + ... + n) ms.
double fake_total_s(size_t n) { return 1e-3 * static_cast<double>(n * (n + 1) / 2); }

Deck traced_deck(const std::string& schedule) {
  Deck d;
  d.model.mlp.input_dim = 8;
  d.model.mlp.hidden_dim = 16;
  d.model.mlp.output_dim = 4;
  d.model.mlp.depth = 8;
  d.training.steps = 3;
  d.training.batch_size = 16;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.recompute = "full";  // so RECOMPUTE events appear
  d.output.trace = true;
  return d;
}

std::vector<TraceEvent> of_step(const std::vector<TraceEvent>& events, int64_t step) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events)
    if (e.step == step) out.push_back(e);
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.start_us < b.start_us; });
  return out;
}

bool is_compute(int32_t kind) {
  return kind == static_cast<int32_t>(EventKind::F) || kind == static_cast<int32_t>(EventKind::B);
}

void check_rank(const Schedule& schedule, int rank, const std::vector<TraceEvent>& events,
                int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<TraceEvent> ev = of_step(events, step);
    // Compute events in time order = the schedule's compute actions.
    std::vector<std::string> got, want;
    for (const TraceEvent& e : ev)
      if (is_compute(e.kind))
        got.push_back(std::to_string(e.stage) + (e.kind == 0 ? "F" : "B") + std::to_string(e.mb));
    size_t comm_actions = 0;
    for (const Action& a : schedule.ranks[rank]) {
      if (a.kind == ActionKind::F || a.kind == ActionKind::B) want.push_back(to_string(a));
      else ++comm_actions;
    }
    EXPECT_EQ(got, want) << "rank " << rank << " step " << step;
    size_t windows = 0;
    for (const TraceEvent& e : ev) {
      EXPECT_LE(e.start_us, e.end_us);
      if (e.kind == static_cast<int32_t>(EventKind::Send) || e.kind == static_cast<int32_t>(EventKind::Recv))
        ++windows;
      if (e.kind == static_cast<int32_t>(EventKind::Recompute)) {
        // Inside the B of the same micro-batch.
        bool inside = false;
        for (const TraceEvent& b : ev)
          inside |= b.kind == static_cast<int32_t>(EventKind::B) && b.mb == e.mb &&
                    b.start_us <= e.start_us && e.end_us <= b.end_us;
        EXPECT_TRUE(inside) << "RECOMPUTE of micro-batch " << e.mb << " outside its B";
      }
    }
    EXPECT_EQ(windows, comm_actions) << "rank " << rank << " step " << step;
    int optimizer = 0;
    for (const TraceEvent& e : ev) optimizer += e.kind == static_cast<int32_t>(EventKind::Optimizer);
    EXPECT_EQ(optimizer, 1);
  }
}

TEST(Trace, EventsAreCompleteOrderedAndFollowTheSchedule) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const char* schedule : {"gpipe", "1f1b"}) {
    Deck deck = traced_deck(schedule);
    // An evaluation of 2 batches after the steps: its events must not count
    // as steps 0 and 1's (an evaluation records EVAL_F only).
    deck.training.eval_every = deck.training.steps;
    deck.training.eval_batches = 2;
    Trainer trainer(deck, MPI_COMM_WORLD);
    for (int64_t s = 0; s < deck.training.steps; ++s) trainer.train_step(s);
    trainer.evaluate();
    const auto events = trainer.gather_trace();
    if (rank != 0) continue;
    // The estimate's size is the host's (its round trips), so only its
    // presence and sign are asserted; the run prints it.
    for (double err : trainer.clock_alignment().error_us) {
      EXPECT_TRUE(std::isfinite(err));
      EXPECT_GE(err, 0.0);
    }
    for (size_t r = 0; r < events.size(); ++r) {
      check_rank(trainer.schedule(), static_cast<int>(r), events[r], deck.training.steps);
      // The evaluation: an EVAL_F per batch, micro-batch and stage of the
      // rank, and no WAIT (nor SEND or RECV, above) of its own.
      size_t eval_forwards = 0;
      double first_us = 1e300, last_us = -1e300;
      for (const TraceEvent& e : events[r]) {
        if (e.kind != static_cast<int32_t>(EventKind::EvalF)) continue;
        ++eval_forwards;
        first_us = std::min(first_us, e.start_us);
        last_us = std::max(last_us, e.end_us);
      }
      const size_t stages_here = rank_stages(trainer.schedule(), static_cast<int>(r)).size();
      EXPECT_EQ(eval_forwards, static_cast<size_t>(deck.training.eval_batches * deck.pipeline.micro_batches) * stages_here)
          << "rank " << r;
      for (const TraceEvent& e : events[r])
        EXPECT_FALSE(e.kind == static_cast<int32_t>(EventKind::Wait) && e.start_us >= first_us && e.end_us <= last_us)
            << "rank " << r << ": a WAIT inside the evaluation";
    }
  }
}

TEST(Trace, OffByDefaultRecordsNothing) {
  Deck deck = traced_deck("1f1b");
  deck.output.trace = false;
  Trainer trainer(deck, MPI_COMM_WORLD);
  trainer.train_step(0);
  const auto events = trainer.gather_trace();
  for (const auto& per_rank : events) EXPECT_TRUE(per_rank.empty());
}

// median_action_costs on a hand-made timeline: step 0 is left out, waits
// nested in an action are taken off it, medians per stage and kind, no W
// gives 0, and a stage without F or B gives no costs at all.
TEST(TraceCosts, MediansLessNestedWaitsAfterTheFirstStep) {
  const auto ev = [](EventKind k, int64_t step, int stage, double start, double end) {
    return TraceEvent{step, stage, 0, static_cast<int32_t>(k), start, end};
  };
  std::vector<std::vector<TraceEvent>> ranks(2);
  ranks[0] = {ev(EventKind::F, 0, 0, 0, 900),  // step 0: ignored
              ev(EventKind::Wait, 1, 0, 1000, 1400), ev(EventKind::F, 1, 0, 1000, 1500),
              ev(EventKind::F, 2, 0, 2000, 2100), ev(EventKind::F, 3, 0, 3000, 3300),
              ev(EventKind::B, 1, 0, 4000, 4200), ev(EventKind::B, 2, 0, 5000, 5200),
              ev(EventKind::W, 2, 0, 6000, 6050)};
  ranks[1] = {ev(EventKind::F, 1, 1, 1500, 1800), ev(EventKind::Wait, 1, 1, 1900, 1950),
              ev(EventKind::B, 1, 1, 1900, 2000)};
  const std::vector<ActionCost> costs = median_action_costs(ranks, 2);
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_NEAR(costs[0].forward_s, 100e-6, 1e-12);  // median of 100, 100, 300
  EXPECT_NEAR(costs[0].backward_s, 200e-6, 1e-12);
  EXPECT_NEAR(costs[0].weight_s, 50e-6, 1e-12);
  EXPECT_NEAR(costs[1].forward_s, 300e-6, 1e-12);
  EXPECT_NEAR(costs[1].backward_s, 50e-6, 1e-12);  // 100 less its 50 of waiting
  EXPECT_EQ(costs[1].weight_s, 0.0);
  ranks[1].clear();
  EXPECT_TRUE(median_action_costs(ranks, 2).empty());
}

// A resumed run's trace starts at its first step k > 0: step k (which
// allocates) is left out, not step 0.
TEST(TraceCosts, TheFirstTracedStepOfAResumedRunIsLeftOut) {
  const auto ev = [](EventKind k, int64_t step, double start, double end) {
    return TraceEvent{step, 0, 0, static_cast<int32_t>(k), start, end};
  };
  std::vector<std::vector<TraceEvent>> ranks = {
      {ev(EventKind::F, 7, 0, 900), ev(EventKind::B, 7, 900, 2900),
       ev(EventKind::F, 8, 3000, 3100), ev(EventKind::B, 8, 3100, 3300)}};
  const std::vector<ActionCost> costs = median_action_costs(ranks, 1);
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_NEAR(costs[0].forward_s, 100e-6, 1e-12);
  EXPECT_NEAR(costs[0].backward_s, 200e-6, 1e-12);
}

// replay_traced_steps on timelines made by the simulator itself: each step's
// actions, as trace events at the simulated times (plus a wait nested in
// one F, which the replay takes off), replay to the simulated bubble; a
// step missing an action and the steps before first_step are left out.
TEST(TraceReplay, SimulatedTimelinesReplayToTheirOwnBubble) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (const char* name : {"1f1b", "zb-v"}) {
    const Schedule s = generate_schedule(name, 2, 4);
    std::vector<std::vector<TraceEvent>> ranks(s.num_ranks);
    std::vector<double> want;
    for (int64_t step = 0; step < 3; ++step) {
      std::vector<double> seconds;  // (stages, mbs, 3)
      for (int i = 0; i < s.num_stages * s.num_micro_batches; ++i)
        seconds.insert(seconds.end(), {u(rng), u(rng), splits_backward(s) ? u(rng) : 0.0});
      SimulationInput in;
      in.stages.assign(static_cast<size_t>(s.num_stages), StageCost{});
      in.action_seconds = seconds;
      in.links = {LinkCost{}};
      const SimulationResult r = simulate_schedule(s, in);
      want.push_back(r.bubble);
      const double origin_us = 1e9 * static_cast<double>(step);  // steps apart
      for (int rank = 0; rank < s.num_ranks; ++rank)
        for (const SimEvent& e : r.events[rank]) {
          const ActionKind k = e.action.kind;
          if (k != ActionKind::F && k != ActionKind::B && k != ActionKind::W) continue;
          const EventKind kind = k == ActionKind::F ? EventKind::F : k == ActionKind::B ? EventKind::B
                                                                                         : EventKind::W;
          const double start_us = origin_us + 1e6 * e.start_s;
          double end_us = origin_us + 1e6 * e.end_s;
          if (k == ActionKind::F && e.action.mb == 1) {  // a 250 us wait a quarter into this F
            const double wait_us = start_us + 0.25 * (end_us - start_us);
            ranks[rank].push_back({step, e.action.stage, e.action.mb, static_cast<int32_t>(EventKind::Wait),
                                   wait_us, wait_us + 250.0});
            end_us += 250.0;
          }
          ranks[rank].push_back({step, e.action.stage, e.action.mb, static_cast<int32_t>(kind),
                                 start_us, end_us});
        }
    }
    std::vector<StepReplay> replay = replay_traced_steps(ranks, s, 0);
    ASSERT_EQ(replay.size(), 3u) << name;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(replay[i].step, static_cast<int64_t>(i));
      EXPECT_NEAR(replay[i].bubble, want[i], 1e-9) << name << " step " << i;
    }
    EXPECT_EQ(replay_traced_steps(ranks, s, 1).front().step, 1);
    ranks[1].erase(std::find_if(ranks[1].begin(), ranks[1].end(), [](const TraceEvent& e) {
      return e.step == 2 && e.kind == static_cast<int32_t>(EventKind::B);
    }));
    EXPECT_EQ(replay_traced_steps(ranks, s, 0).size(), 2u) << name;
  }
}

// A real run: every step replays, above zero on 2 ranks and at most what
// was measured (the replay runs the same actions at the same times with
// free links and no bookkeeping between them; both spans end on rank 0).
// The replay cannot see where inside an action its nested wait fell: the
// part before the wait (posting, a rank descheduled on an oversubscribed
// node) may overlap the producer in the run but not in the replay, so
// actions of a millisecond or more and a 2-point margin.
TEST(TraceReplay, ARealRunReplaysBelowItsMeasuredBubble) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Deck deck = traced_deck("1f1b");
  deck.model.mlp.hidden_dim = 512;  // 64-row micro-batches: about 1 ms per action
  deck.training.batch_size = 256;
  Trainer trainer(deck, MPI_COMM_WORLD);
  std::vector<double> measured;
  for (int64_t s = 0; s < deck.training.steps; ++s) measured.push_back(trainer.train_step(s).bubble);
  const auto events = trainer.gather_trace();
  if (rank != 0) return;
  const std::vector<StepReplay> replay = replay_traced_steps(events, trainer.schedule(), 0);
  ASSERT_EQ(replay.size(), static_cast<size_t>(deck.training.steps));
  for (const StepReplay& r : replay) {
    if (size > 1) {
      EXPECT_GT(r.bubble, 0.0) << "step " << r.step;
    }
    EXPECT_LE(r.bubble, measured[static_cast<size_t>(r.step)] + 0.02) << "step " << r.step;
  }
}

// The executor alone, on zb-h1 (F, B and W): every compute action is one
// region of the backend's timer, the timer is read once per run, and the
// run never synchronises the backend (a GPU would then report launch
// times on the middle stages before the fix, or wait after every action).
TEST(ComputeTiming, EachFBAndWIsOneTimerRegionReadOncePerStep) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Deck d = traced_deck("zb-h1");
  d.output.trace = false;
  d.pipeline.recompute = "none";
  const Schedule schedule = schedule_for_deck(d, size);
  ASSERT_EQ(schedule.num_stages, size);
  const std::vector<int64_t> parts = partition_units(model_units(d.model), size, {});
  StageModel stage = build_stage(d.model, parts, rank);
  auto transport = make_mpi_transport(MPI_COMM_WORLD);
  auto data = make_generated_dataset(data_set_config_for(d), Split::Train);
  FakeClockBackend be;
  Executor ex(executor_config_for(d), {&stage}, {parse_recompute_policy("none", "test")}, *transport,
              be);
  const std::vector<char> kinds = compute_kinds(schedule, rank);
  const size_t n = kinds.size();
  for (int64_t step = 0; step < 2; ++step) {
    be.ledger = TimingLedger();
    const StepOutcome out = ex.run(schedule, *data, step, Pass::Train);
    EXPECT_EQ(be.ledger.begins, static_cast<int>(n)) << "rank " << rank << " step " << step;
    EXPECT_EQ(be.ledger.ends, static_cast<int>(n));
    EXPECT_EQ(be.ledger.reads, 1) << "the timer is read once per step";
    EXPECT_EQ(be.ledger.regions_read, n);
    EXPECT_FALSE(be.ledger.read_while_open);
    EXPECT_EQ(be.ledger.syncs, 0) << "a synchronisation per action";
    EXPECT_NEAR(out.compute_us, 1e6 * fake_total_s(n), 1e-6) << "not the timer's clock";
    const std::vector<ActionTime>& times = ex.action_times();
    ASSERT_EQ(times.size(), n);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(times[k].stage, rank);
      EXPECT_EQ("FBW"[times[k].kind], kinds[k]) << "action " << k;
      EXPECT_NEAR(times[k].seconds, 1e-3 * static_cast<double>(k + 1), 1e-12) << "action " << k;
    }
  }
}

// Through the trainer: each stage's compute seconds of a step, which the
// rebalancer observes, are its timer's regions (every rank's, all-gathered).
TEST(ComputeTiming, TheTrainersStageComputeTimesAreTheBackendTimers) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Deck d = traced_deck("1f1b");
  d.output.trace = false;
  FakeClockBackend be;
  ComputeSetup setup;
  setup.backend = &be;
  Trainer trainer(d, MPI_COMM_WORLD, setup);
  for (int64_t step = 0; step < 2; ++step) {
    be.ledger = TimingLedger();
    const StepRecord rec = trainer.train_step(step);
    EXPECT_EQ(be.ledger.reads, 1) << "step " << step;
    ASSERT_EQ(rec.rank_compute_s.size(), static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      EXPECT_NEAR(rec.rank_compute_s[r], fake_total_s(compute_kinds(trainer.schedule(), r).size()),
                  1e-9)
          << "stage " << r << " step " << step;
  }
}

// The fault injection's slowdown ([slowdown]) waits for the
// backend before and after each F, B and W of a slowed step, and never in a
// step before slowdown_from_step: normal steps are not synchronised.
TEST(ComputeTiming, TheSlowdownSynchronisesOnlyTheSlowedSteps) {
  Deck d = traced_deck("gpipe");
  d.output.trace = false;
  d.pipeline.recompute = "none";
  const Schedule schedule = schedule_for_deck(d, 1);
  StageModel stage = build_stage(d.model, {model_units(d.model)}, 0);
  auto transport = make_mpi_transport(MPI_COMM_SELF);
  auto data = make_generated_dataset(data_set_config_for(d), Split::Train);
  FakeClockBackend be;
  ExecutorConfig config = executor_config_for(d);
  config.slowdown = {1, 1.5};
  Executor ex(config, {&stage}, {parse_recompute_policy("none", "test")}, *transport, be);
  const int actions = static_cast<int>(compute_kinds(schedule, 0).size());
  for (int64_t step = 0; step < 2; ++step) {
    be.ledger = TimingLedger();
    ex.run(schedule, *data, step, Pass::Train);
    EXPECT_EQ(be.ledger.syncs, step == 0 ? 0 : 2 * actions) << "step " << step;
    EXPECT_EQ(be.ledger.reads, 1) << "step " << step;
  }
}

// A backend that computes at once on the CPU but, like a GPU, queues device
// time: each GEMM adds kGemmMs of it, and synchronize() waits it out (sleeps).
// The host's steady clock is its timer. `queue` adds work the backend runs
// for someone else (a reduction's copies, say).
class QueuedWorkBackend final : public test::ForwardingBackend {
 public:
  static constexpr double kGemmMs = 1.0;
  double gemm_ms = 0.0;  // device time of the GEMMs, since the test reset it
  const char* name() const override { return "queued-work"; }
  void synchronize() override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(queued_ms_));
    queued_ms_ = 0.0;
  }
  void queue(double ms) { queued_ms_ += ms; }

 protected:
  void do_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha,
                 float beta) override {
    target_.matmul(a, ta, b, tb, c, alpha, beta);
    gemm_ms += kGemmMs;
    queue(kGemmMs);
  }

 private:
  double queued_ms_ = 0.0;
};

// On a backend that computes asynchronously a slowed action is stretched by
// (factor - 1) x the time its own kernels ran: work queued before it is
// waited for outside its timed region, and its kernels are waited for before
// its time is read. So the timed regions of a step slowed 3x total about 3 x
// the GEMMs' device time; counting the queued work (25 ms before each action
// but the first) would add 3 x 75 ms.
TEST(ComputeTiming, TheSlowdownStretchesTheActionsOwnKernelsOnly) {
  Deck d = traced_deck("gpipe");
  d.output.trace = false;
  d.pipeline.recompute = "none";
  d.model.mlp.depth = 2;
  d.training.batch_size = 8;
  d.pipeline.micro_batches = 2;
  const Schedule schedule = schedule_for_deck(d, 1);
  StageModel stage = build_stage(d.model, {model_units(d.model)}, 0);
  auto transport = make_mpi_transport(MPI_COMM_SELF);
  auto data = make_generated_dataset(data_set_config_for(d), Split::Train);
  QueuedWorkBackend be;
  constexpr double kQueuedMs = 25.0;
  ExecutorConfig config = executor_config_for(d);
  config.slowdown = {0, 3.0};
  config.reduction.progress = [&be] { be.queue(kQueuedMs); };
  Executor ex(config, {&stage}, {parse_recompute_policy("none", "test")}, *transport, be);
  const StepOutcome out = ex.run(schedule, *data, 0, Pass::Train);
  be.synchronize();
  const double compute_ms = out.compute_us / 1e3, stretched_ms = 3.0 * be.gemm_ms;
  ASSERT_EQ(compute_kinds(schedule, 0).size(), 4u);
  ASSERT_GT(be.gemm_ms, 0.0);
  EXPECT_GE(compute_ms, 0.95 * stretched_ms) << "the GEMMs' time was not waited for or stretched";
  // The two outcomes are 3 x 75 ms apart; the bound is half-way, so that a
  // loaded machine's late wake-ups from the sleeps (23 ms seen with both
  // cores busy) cannot fail it while stretched queued work still does.
  EXPECT_LT(compute_ms, stretched_ms + 0.5 * 3.0 * 3.0 * kQueuedMs) << "work queued before an action was stretched";
}

}  // namespace
}  // namespace pt
