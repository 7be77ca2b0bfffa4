// test_simulate.cpp: the schedule simulator against timelines computed by
// hand (GPipe and 1F1B, 2 stages), the bubble formula (P-1)/(N+P-1) for
// equal stages and free links, peak memory = in flight x stash (+ base and
// transient) against the validator's counts and the partition's formula,
// per-link message times, hand-written multi-stage-per-rank schedules, and
// bad schedules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/partition.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace {

using pt::LinkCost;
using pt::Schedule;
using pt::SimulationInput;
using pt::SimulationResult;
using pt::StageCost;
using testing::HasSubstr;

StageCost stage(double forward_s, double backward_s, double optimizer_s = 0.0) {
  StageCost c;
  c.forward_s = forward_s;
  c.backward_s = backward_s;
  c.optimizer_s = optimizer_s;
  return c;
}

// The memory tests' stage: stash 100, persistent 5000, transients F 40 / B 70.
StageCost memory_stage(double forward_s, double backward_s) {
  StageCost c = stage(forward_s, backward_s);
  c.stash_bytes = 100.0;
  c.persistent_bytes = 5000.0;
  c.forward_transient_bytes = 40.0;
  c.backward_transient_bytes = 70.0;
  return c;
}

// Link time independent of bytes: latency only.
LinkCost latency(double seconds) { return LinkCost{seconds, 0.0}; }

struct Span {
  double start, end;
};
using Timeline = std::map<std::string, Span>;  // action text -> expected start, end

void expect_timeline(const SimulationResult& r, int rank, const Timeline& expected) {
  ASSERT_LT(static_cast<size_t>(rank), r.events.size());
  EXPECT_EQ(r.events[rank].size(), expected.size()) << "rank " << rank;
  for (const pt::SimEvent& e : r.events[rank]) {
    const std::string name = pt::to_string(e.action);
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "unexpected " << name << " on rank " << rank;
    EXPECT_DOUBLE_EQ(e.start_s, it->second.start) << name << " start";
    EXPECT_DOUBLE_EQ(e.end_s, it->second.end) << name << " end";
  }
}

std::string simulation_error(const Schedule& s, const SimulationInput& in) {
  try {
    pt::simulate_schedule(s, in);
  } catch (const pt::InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// P = 2, N = 2, GPipe; F = 1, B = 2 on both stages, every message 0.5.
// Rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0RECV_B1 0B0 0B1
// Rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
//   0F0 [0, 1], its message arrives at 1.5; 0F1 [1, 2], arrives 2.5.
//   1F0 waits for 1.5: [1.5, 2.5]; 1F1 [2.5, 3.5]; 1B0 [3.5, 5.5], sent,
//   arrives 6; 1B1 [5.5, 7.5], arrives 8.
//   0B0 waits for 6: [6, 8]; 0B1 waits for 8: [8, 10].
// Spans 10 and 8 (1SEND_B1 completes at 8); busy 6 each; bubble
// (1 - 6/10 + 1 - 6/10) / 2 = 0.4; step 10 + 0.25 overhead + 0.75 (the
// larger optimizer step).
TEST(Simulator, GpipeTwoStagesByHand) {
  const Schedule s = pt::generate_gpipe(2, 2);
  SimulationInput in{{stage(1, 2, 0.5), stage(1, 2, 0.75)}, {latency(0.5)}, 0.25, 8, true};
  const SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, 0, {{"0F0", {0, 1}},       {"0SEND_F0", {1, 1.5}}, {"0RECV_B0", {1, 6}},
                         {"0F1", {1, 2}},       {"0SEND_F1", {2, 2.5}}, {"0RECV_B1", {2, 8}},
                         {"0B0", {6, 8}},       {"0B1", {8, 10}}});
  expect_timeline(r, 1, {{"1RECV_F0", {0, 1.5}}, {"1RECV_F1", {0, 2.5}}, {"1F0", {1.5, 2.5}},
                         {"1F1", {2.5, 3.5}},    {"1B0", {3.5, 5.5}},    {"1SEND_B0", {5.5, 6}},
                         {"1B1", {5.5, 7.5}},    {"1SEND_B1", {7.5, 8}}});
  EXPECT_EQ(r.span_s, (std::vector<double>{10, 8}));
  EXPECT_EQ(r.busy_s, (std::vector<double>{6, 6}));
  EXPECT_EQ(r.idle_s, (std::vector<double>{4, 4}));
  EXPECT_DOUBLE_EQ(r.span_s_max, 10.0);
  EXPECT_DOUBLE_EQ(r.bubble, 0.4);
  EXPECT_DOUBLE_EQ(r.optimizer_s, 0.75);
  EXPECT_DOUBLE_EQ(r.step_time_s, 11.0);
  EXPECT_DOUBLE_EQ(r.throughput_samples_per_s, 8.0 / 11.0);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{2, 2}));
}

// P = 2, N = 3, 1F1B; the same costs.
// Rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0RECV_B1 0F2 0SEND_F2 0RECV_B2 0B1 0B2
// Rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1RECV_F2 1B1 1SEND_B1 1F2 1B2 1SEND_B2
// Besides its input, a compute waits for the send sends_finished_before
// names: 1F1 for 1SEND_B0 (rank 0's next compute after 0SEND_F1 is 0B0,
// which takes it), 0B0 for 0SEND_F1, 1F2 for 1SEND_B1, 0B1 for 0SEND_F2.
//   0F0 [0, 1] (arrives 1.5), 0F1 [1, 2]
//   1F0 [1.5, 2.5]; 1RECV_F1 posted at 2.5, so 0SEND_F1's transfer starts
//   then (rendezvous) and its data arrive at 3; 1B0 [2.5, 4.5]
//   (arrives 5); 1F1 waits for 1SEND_B0 to arrive: [5, 6]; 1B1 [6, 8]
//   (arrives 8.5)
//   0B0 waits for 5: [5, 7]; 0F2 [7, 8] (arrives 8.5); 0B1 [8.5, 10.5]
//   1F2 [8.5, 9.5]; 1B2 [9.5, 11.5] (arrives 12); 0B2 [12, 14]
// Spans 14 and 12, busy 9 each: bubble 1 - 9/14 = 5/14.
TEST(Simulator, OneFOneBTwoStagesByHand) {
  const Schedule s = pt::generate_1f1b(2, 3);
  SimulationInput in{{stage(1, 2), stage(1, 2)}, {latency(0.5)}, 0.0, 0, true};
  const SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, 0, {{"0F0", {0, 1}},        {"0SEND_F0", {1, 1.5}}, {"0RECV_B0", {1, 5}},
                         {"0F1", {1, 2}},        {"0SEND_F1", {2, 3}},   {"0B0", {5, 7}},
                         {"0RECV_B1", {7, 8.5}}, {"0F2", {7, 8}},        {"0SEND_F2", {8, 8.5}},
                         {"0RECV_B2", {8, 12}},  {"0B1", {8.5, 10.5}},   {"0B2", {12, 14}}});
  expect_timeline(r, 1, {{"1RECV_F0", {0, 1.5}},   {"1F0", {1.5, 2.5}},  {"1RECV_F1", {2.5, 3}},
                         {"1B0", {2.5, 4.5}},      {"1SEND_B0", {4.5, 5}}, {"1F1", {5, 6}},
                         {"1RECV_F2", {6, 8.5}},   {"1B1", {6, 8}},      {"1SEND_B1", {8, 8.5}},
                         {"1F2", {8.5, 9.5}},      {"1B2", {9.5, 11.5}}, {"1SEND_B2", {11.5, 12}}});
  EXPECT_EQ(r.span_s, (std::vector<double>{14, 12}));
  EXPECT_DOUBLE_EQ(r.bubble, 5.0 / 14.0);
  EXPECT_DOUBLE_EQ(r.step_time_s, 14.0);
  EXPECT_DOUBLE_EQ(r.throughput_samples_per_s, 0.0);  // no batch size given
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{2, 1}));
}

// 1F1B with receiver_progress (MPI on the CPU: the receiver copies between
// its computes), stage 0 at F = B = 2. 0SEND_F1 is posted at 4 while rank 1
// runs 1B0 [3.5, 5.5], so its transfer starts at 5.5 and arrives at 6 (at
// 4.5 without receiver_progress); 1SEND_B1, posted at 9 during 0F2 [8, 10],
// arrives at 10.5 (9.5). 0B0 and 1F1 start at 6 either way: each also waits
// for the other's send (sends_finished_before), which arrives at 6.
TEST(Simulator, ReceiverProgressStartsTransfersBetweenItsComputes) {
  const Schedule s = pt::generate_1f1b(2, 3);
  SimulationInput in{{stage(2, 2), stage(1, 2)}, {latency(0.5)}, 0.0, 0, true};
  in.receiver_progress = true;
  const SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, 0, {{"0F0", {0, 2}},         {"0SEND_F0", {2, 2.5}}, {"0RECV_B0", {2, 6}},
                         {"0F1", {2, 4}},         {"0SEND_F1", {4, 6}},   {"0B0", {6, 8}},
                         {"0RECV_B1", {8, 10.5}}, {"0F2", {8, 10}},       {"0SEND_F2", {10, 10.5}},
                         {"0RECV_B2", {10, 14}},  {"0B1", {10.5, 12.5}},  {"0B2", {14, 16}}});
  expect_timeline(r, 1, {{"1RECV_F0", {0, 2.5}},    {"1F0", {2.5, 3.5}},   {"1RECV_F1", {3.5, 6}},
                         {"1B0", {3.5, 5.5}},       {"1SEND_B0", {5.5, 6}}, {"1F1", {6, 7}},
                         {"1RECV_F2", {7, 10.5}},   {"1B1", {7, 9}},       {"1SEND_B1", {9, 10.5}},
                         {"1F2", {10.5, 11.5}},     {"1B2", {11.5, 13.5}}, {"1SEND_B2", {13.5, 14}}});
  EXPECT_EQ(r.span_s, (std::vector<double>{16, 14}));
  in.receiver_progress = false;
  const SimulationResult free_links = pt::simulate_schedule(s, in);
  EXPECT_DOUBLE_EQ(free_links.events[1][2].end_s, 4.5);  // 1RECV_F1
  EXPECT_DOUBLE_EQ(free_links.events[0][4].end_s, 4.5);  // 0SEND_F1
  EXPECT_DOUBLE_EQ(free_links.events[1][8].end_s, 9.5);  // 1SEND_B1
  EXPECT_DOUBLE_EQ(free_links.events[0][10].start_s, 10.5);  // 0B1
}

// Equal stages and free links: span (N + P - 1)(F + B) and bubble
// (P - 1) / (N + P - 1), for both generated schedules.
TEST(Simulator, BubbleFormulaForEqualStages) {
  for (int p : {1, 2, 3, 4, 8})
    for (int n : {1, 2, 3, 4, 8, 16})
      for (const char* name : {"gpipe", "1f1b"}) {
        const Schedule s = pt::generate_schedule(name, p, n);
        SimulationInput in{std::vector<StageCost>(p, stage(1.0, 2.0)), {latency(0.0)}, 0.0, 0, false};
        const SimulationResult r = pt::simulate_schedule(s, in);
        EXPECT_DOUBLE_EQ(r.span_s_max, (n + p - 1) * 3.0) << name << " P=" << p << " N=" << n;
        EXPECT_NEAR(r.bubble, (p - 1.0) / (n + p - 1.0), 1e-12) << name << " P=" << p << " N=" << n;
        EXPECT_TRUE(r.events.empty());
      }
}

// Peak memory: base + in-flight x stash + the larger transient, where the
// in-flight counts are the validator's; equal to the partition's formula.
TEST(Simulator, PeakMemoryIsInFlightTimesStash) {
  for (int p : {1, 2, 3, 5})
    for (int n : {1, 2, 4, 7})
      for (const char* name : {"gpipe", "1f1b"}) {
        const Schedule s = pt::generate_schedule(name, p, n);
        const std::vector<int> in_flight = pt::validate_schedule(s).peak_in_flight;
        EXPECT_EQ(pt::schedule_in_flight(s), in_flight);
        std::vector<StageCost> stages;
        for (int st = 0; st < p; ++st) {
          StageCost c = stage(1.0 + st, 2.0);
          c.stash_bytes = 100.0 * (st + 1);
          stages.push_back(c);
        }
        SimulationInput in{stages, {latency(0.1)}, 0.0, 0, false};
        SimulationResult r = pt::simulate_schedule(s, in);
        EXPECT_EQ(r.peak_in_flight, in_flight);
        for (int st = 0; st < p; ++st)
          EXPECT_DOUBLE_EQ(r.peak_bytes[st], in_flight[st] * 100.0 * (st + 1));
        if (std::string(name) == "gpipe") {
          EXPECT_EQ(in_flight, std::vector<int>(p, n));
        } else {
          for (int st = 0; st < p; ++st) EXPECT_EQ(in_flight[st], std::min(p - st, n));
        }
        // With persistent, data and transient bytes: the stage's peak_bytes()
        // less its bound on message buffers (the simulator tracks them; these
        // stages send empty messages).
        for (StageCost& c : stages) {
          c.persistent_bytes = 5000.0;
          c.data_bytes = 800.0;
          c.comm_buffer_bytes = 300.0;
          c.forward_transient_bytes = 40.0;
          c.backward_transient_bytes = 70.0;
        }
        in.stages = stages;
        r = pt::simulate_schedule(s, in);
        for (int st = 0; st < p; ++st)
          EXPECT_DOUBLE_EQ(r.peak_bytes[st], stages[st].peak_bytes(in_flight[st]) - 300.0);
      }
}

// Message buffers by hand, GPipe P = 2, N = 2, F = 1 s, B = 2 s, 0.1 s links,
// 10-byte messages, stash 100, persistent 5000, transients F 40 / B 70:
//   rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0RECV_B1 0B0 0B1
//   rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
// Stage 0 peaks at 0B0 (t = 5.2): two stashes, the posted RECV_B1 (RECV_B0's
// buffer is B0's own), SEND_F1 long complete: 5000 + 200 + 10 + 70. Stage 1
// peaks at 1B0 (t = 3.1): 5000 + 200 + 70, no buffer: both receives were
// consumed by the F's, no send posted yet; at 1B1 (t = 5.1) SEND_B0 (complete
// at 5.2) holds its 10 bytes beside one stash: 5180.
TEST(Simulator, MessageBuffersLiveFromPostToUse) {
  const Schedule s = pt::generate_schedule("gpipe", 2, 2);
  ASSERT_EQ(pt::format_schedule(s),
            "0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0RECV_B1 0B0 0B1\n"
            "1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n");
  std::vector<StageCost> stages(2, memory_stage(1.0, 2.0));
  stages[0].output_message_bytes = 10.0;
  stages[1].input_message_bytes = 10.0;
  const SimulationResult r = pt::simulate_schedule(s, {stages, {latency(0.1)}, 0.0, 0, false});
  EXPECT_DOUBLE_EQ(r.peak_bytes[0], 5000.0 + 200.0 + 10.0 + 70.0);
  EXPECT_DOUBLE_EQ(r.peak_bytes[1], 5000.0 + 200.0 + 70.0);
}

// A late stage finishes its send before its B (sends_finished_before), as
// the executor does: 1F1B P = 2, N = 3, stage 0 at F = 3 s, B = 1 s, stage 1
// at 1 s each, 0.1 s links, 10-byte messages, stash 100, persistent 5000,
// transients F 40 / B 70.
//   0F0 [0, 3], 0F1 [3, 6] (0SEND_F1 posted at 6, arrives 6.1)
//   1F0 [3.1, 4.1], 1B0 [4.1, 5.1] (0's gradient arrives 5.2)
//   0B0 has its input at 5.2 but waits for 0SEND_F1: [6.1, 7.1], so it
//   holds no send buffer (at 6 it would hold 10 bytes)
//   0B1 likewise waits for 0SEND_F2 (10.2), not only for its input (8.2)
// (with receiver_progress the gradients arrive only when 0F1 and 0F2 end,
// at 6.1 and 10.2, and the B's start at the same moments)
// Stage 0 peaks at 0B1: 5000 + 2 x 100 + 70 + the posted 0RECV_B2's 10.
TEST(Simulator, LateStageFinishesItsSendBeforeItsBackward) {
  const Schedule s = pt::generate_1f1b(2, 3);
  std::vector<StageCost> stages{memory_stage(3.0, 1.0), memory_stage(1.0, 1.0)};
  stages[0].output_message_bytes = 10.0;
  stages[1].input_message_bytes = 10.0;
  for (bool progress : {false, true}) {
    SimulationInput in{stages, {latency(0.1)}, 0.0, 0, true};
    in.receiver_progress = progress;
    const SimulationResult r = pt::simulate_schedule(s, in);
    // With receiver_progress the gradients wait for 0F1 and 0F2 to end.
    const double grad0 = progress ? 6.1 : 5.2, grad1 = progress ? 10.2 : 8.2;
    expect_timeline(r, 0, {{"0F0", {0, 3}},          {"0SEND_F0", {3, 3.1}},    {"0RECV_B0", {3, grad0}},
                           {"0F1", {3, 6}},          {"0SEND_F1", {6, 6.1}},    {"0B0", {6.1, 7.1}},
                           {"0RECV_B1", {7.1, grad1}}, {"0F2", {7.1, 10.1}},    {"0SEND_F2", {10.1, 10.2}},
                           {"0RECV_B2", {10.1, 12.3}}, {"0B1", {10.2, 11.2}},   {"0B2", {12.3, 13.3}}});
    EXPECT_DOUBLE_EQ(r.peak_bytes[0], 5000.0 + 200.0 + 70.0 + 10.0) << "receiver_progress " << progress;
  }
  const std::vector<std::vector<int>> finish = pt::sends_finished_before(s);
  EXPECT_EQ(finish[0][5], 4);  // 0B0 finishes 0SEND_F1 first
  EXPECT_EQ(finish[1][5], 4);  // 1F1 finishes 1SEND_B0 first
}

// Rendezvous by hand: a slow stage 1 (F = 3 s) posts each RECV_F just before
// its F, so stage 0's sends wait for those posts. F0/B 1 s/2 s on stage 0,
// 0.1 s links, 1000-byte messages, stash 100, persistent 5000, transients
// F 40 / B 70:
//   rank 1: F0 [1.1, 4.1], RECV_F1 posted 4.1, F1 [4.2, 7.2], F2 [7.3, 10.3],
//           F3 [10.4, 13.4], B0..B3 [13.4, 21.4], SEND_B3 done at 21.8
//   rank 0: F0..F3 [0, 4]; SEND_F1 (posted 2) completes at 4.2, SEND_F2
//           (posted 3) at 7.3; B0 [15.5, 17.5] ... B3 [21.8, 23.8]
// Stage 0 peaks at F3 (t = 3): 4 stashes, SEND_F1 and SEND_F2 incomplete:
// 5000 + 400 + 40 + 2000 (had the transfers started at the send's post,
// SEND_F1 would be done at 2.1: 6440). Stage 1 peaks at B1 (t = 15.4):
// 3 stashes and SEND_B0 (complete at 15.5): 5000 + 300 + 70 + 1000.
TEST(Simulator, SendsWaitForTheirReceivePost) {
  const Schedule s = pt::parse_schedule(
      "0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0F3 0SEND_F3 "
      "0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2 0RECV_B3 0B3\n"
      "1RECV_F0 1F0 1RECV_F1 1F1 1RECV_F2 1F2 1RECV_F3 1F3 "
      "1B0 1SEND_B0 1B1 1SEND_B1 1B2 1SEND_B2 1B3 1SEND_B3\n",
      "late-posts", 2, 4);
  std::vector<StageCost> stages{memory_stage(1.0, 2.0), memory_stage(3.0, 2.0)};
  stages[0].output_message_bytes = 1000.0;
  stages[1].input_message_bytes = 1000.0;
  const SimulationResult r = pt::simulate_schedule(s, {stages, {latency(0.1)}, 0.0, 0, true});
  EXPECT_DOUBLE_EQ(r.peak_bytes[0], 5000.0 + 400.0 + 40.0 + 2000.0);
  EXPECT_DOUBLE_EQ(r.peak_bytes[1], 5000.0 + 300.0 + 70.0 + 1000.0);
  EXPECT_NEAR(r.span_s[0], 23.8, 1e-9);
  EXPECT_NEAR(r.span_s[1], 21.8, 1e-9);  // SEND_B3 waits for RECV_B3, posted at 21.7
  EXPECT_NEAR(r.step_time_s, 23.8, 1e-9);
  std::map<std::string, Span> rank1;
  for (const pt::SimEvent& e : r.events[1]) rank1[pt::to_string(e.action)] = {e.start_s, e.end_s};
  EXPECT_NEAR(rank1["1RECV_F1"].start, 4.1, 1e-9);
  EXPECT_NEAR(rank1["1RECV_F1"].end, 4.2, 1e-9);
  EXPECT_NEAR(rank1["1F1"].start, 4.2, 1e-9);
  EXPECT_NEAR(rank1["1F3"].start, 10.4, 1e-9);
  EXPECT_NEAR(rank1["1SEND_B0"].end, 15.5, 1e-9);
}

// Message time = latency + bytes / bandwidth of that link: stage 0 -> 1 over
// a slow link (1 + 50/10 = 6 s), stage 1 -> 2 over a fast one (0.5 + 20/40).
TEST(Simulator, PerLinkMessageTimes) {
  const Schedule s = pt::forward_only_schedule(pt::generate_gpipe(3, 1));
  std::vector<StageCost> stages(3, stage(1.0, 0.0));
  stages[0].output_message_bytes = 50.0;
  stages[1].output_message_bytes = 20.0;
  SimulationInput in{stages, {LinkCost{1.0, 10.0}, LinkCost{0.5, 40.0}}, 0.0, 0, true};
  const SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, 0, {{"0F0", {0, 1}}, {"0SEND_F0", {1, 7}}});
  expect_timeline(r, 1, {{"1RECV_F0", {0, 7}}, {"1F0", {7, 8}}, {"1SEND_F0", {8, 9}}});
  expect_timeline(r, 2, {{"2RECV_F0", {0, 9}}, {"2F0", {9, 10}}});
  EXPECT_DOUBLE_EQ(r.span_s_max, 10.0);
}

// A hand-written schedule of two stages on one rank (one line): F and B hand
// over locally, with no comm actions and no link time.
TEST(Simulator, StagesSharingARank) {
  const Schedule s = pt::parse_schedule("0F0 1F0 1B0 0B0 0F1 1F1 1B1 0B1\n", "one-rank", 2, 2);
  pt::validate_schedule(s);
  SimulationInput in{{stage(1, 2, 0.5), stage(3, 4, 0.25)}, {latency(100.0)}, 0.0, 4, true};
  const SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, 0, {{"0F0", {0, 1}},   {"1F0", {1, 4}},   {"1B0", {4, 8}},
                         {"0B0", {8, 10}},  {"0F1", {10, 11}}, {"1F1", {11, 14}},
                         {"1B1", {14, 18}}, {"0B1", {18, 20}}});
  EXPECT_DOUBLE_EQ(r.bubble, 0.0);
  EXPECT_DOUBLE_EQ(r.optimizer_s, 0.75);  // both stages' optimizer steps on the one rank
  EXPECT_DOUBLE_EQ(r.step_time_s, 20.75);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{1, 1}));
}

// A schedule read back from its text simulates like the generator's.
TEST(Simulator, HandWrittenScheduleMatchesGenerated) {
  const Schedule file = pt::parse_schedule(pt::format_schedule(pt::generate_1f1b(4, 6)), "file", 4, 6);
  SimulationInput in{{stage(1, 2), stage(2, 1), stage(1, 1), stage(3, 2)}, {latency(0.2)}, 0.0, 0, true};
  const SimulationResult a = pt::simulate_schedule(file, in);
  const SimulationResult b = pt::simulate_schedule(pt::generate_1f1b(4, 6), in);
  EXPECT_EQ(a.span_s, b.span_s);
  EXPECT_EQ(a.busy_s, b.busy_s);
}

TEST(Simulator, DeadlocksAndBadInputsAreInputErrors) {
  SimulationInput in{{stage(1, 2), stage(1, 2)}, {latency(0.5)}, 0.0, 0, true};
  const Schedule early_b = pt::parse_schedule(
      "0RECV_B0 0B0 0F0 0SEND_F0\n1RECV_F0 1F0 1B0 1SEND_B0\n", "early", 2, 1);
  EXPECT_THAT(simulation_error(early_b, in), HasSubstr("0B0 on rank 0 runs before its F"));
  const Schedule no_peer = pt::parse_schedule(
      "0F0 0SEND_F0 0RECV_B0 0B0 0SEND_B0\n1RECV_F0 1F0 1B0 1SEND_B0\n", "nopeer", 2, 1);
  EXPECT_THAT(simulation_error(no_peer, in), HasSubstr("0SEND_B0 on rank 0 has no remote peer stage"));
  // Rank 0 waits for the gradient before it sends the activation.
  const Schedule waits = pt::parse_schedule(
      "0RECV_B0 0F0 0B0 0SEND_F0\n1RECV_F0 1F0 1B0 1SEND_B0\n", "wait", 2, 1);
  const std::string msg = simulation_error(waits, in);
  EXPECT_THAT(msg, HasSubstr("deadlocks"));
  EXPECT_THAT(msg, HasSubstr("rank 0 waits at 0B0 (step 2) for 1SEND_B0 on rank 1"));
  EXPECT_THAT(msg, HasSubstr("rank 1 waits at 1F0 (step 1) for 0SEND_F0 on rank 0"));
  const Schedule no_recv = pt::parse_schedule("0F0 0SEND_F0 0RECV_B0 0B0\n1F0 1B0 1SEND_B0\n",
                                              "norecv", 2, 1);
  EXPECT_THAT(simulation_error(no_recv, in), HasSubstr("1F0 on rank 1 runs before its 1RECV_F0"));
  const Schedule twice = pt::parse_schedule("0F0 0SEND_F0 0RECV_B0 0B0 0F0\n1RECV_F0 1F0 1B0 1SEND_B0\n",
                                            "twice", 2, 1);
  EXPECT_THAT(simulation_error(twice, in), HasSubstr("0F0 appears more than once"));
  EXPECT_THAT(simulation_error(pt::generate_gpipe(2, 1), {{stage(1, 2)}, {latency(0.5)}, 0.0, 0, true}),
              HasSubstr("1 stage costs given"));
  EXPECT_THAT(simulation_error(pt::generate_gpipe(2, 1), {{stage(1, 2), stage(-1, 2)}, {latency(0.5)}, 0.0, 0, true}),
              HasSubstr("stage 1 has a negative (or NaN) time"));
  // One stage, micro-batch 1 never runs backward.
  const Schedule missing = pt::parse_schedule("0F0 0B0 0F1\n", "missing", 1, 2);
  EXPECT_THAT(simulation_error(missing, {{stage(1, 2)}, {latency(0.5)}, 0.0, 0, true}),
              HasSubstr("no rank runs 0B1"));
}

}  // namespace
