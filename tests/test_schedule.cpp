// test_schedule.cpp: tests of schedule text I/O, the GPipe and 1F1B
// generators, and the validator (including its error messages and grid).
// Schedules are written as action strings, one string per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "error_of.hpp"

namespace {

using pt::Action;
using pt::ActionKind;
using pt::InputError;
using pt::test::error_of;
using pt::Schedule;
using Lines = std::vector<std::string>;

// One string per rank -> schedule text -> parsed schedule.
Schedule from_lines(const Lines& ranks, int num_stages, int num_micro_batches) {
  std::string text;
  for (const std::string& line : ranks) text += line + "\n";
  return pt::parse_schedule(text, "test", num_stages, num_micro_batches);
}

Lines to_lines(const Schedule& s) {
  Lines lines;
  std::istringstream in(pt::format_schedule(s));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string tests_dir() {
  std::string file = __FILE__;
  return file.substr(0, file.find_last_of('/'));
}

// ---------------------------------------------------------------- actions

TEST(Action, RoundTripsEveryKind) {
  struct Case { std::string text; int stage; ActionKind kind; int mb; };
  const std::vector<Case> cases = {
      {"2F5", 2, ActionKind::F, 5},           {"0B3", 0, ActionKind::B, 3},
      {"1SEND_F4", 1, ActionKind::SEND_F, 4}, {"7RECV_F0", 7, ActionKind::RECV_F, 0},
      {"12SEND_B345", 12, ActionKind::SEND_B, 345}, {"3RECV_B0", 3, ActionKind::RECV_B, 0},
  };
  for (const Case& c : cases) {
    Action a = pt::parse_action(c.text);
    EXPECT_EQ(a.stage, c.stage) << c.text;
    EXPECT_EQ(a.kind, c.kind) << c.text;
    EXPECT_EQ(a.mb, c.mb) << c.text;
    EXPECT_EQ(pt::to_string(a), c.text);
  }
}

TEST(Action, KindNames) {
  EXPECT_STREQ(pt::kind_name(ActionKind::F), "F");
  EXPECT_STREQ(pt::kind_name(ActionKind::RECV_B), "RECV_B");
}

TEST(Action, RejectsBadTextNamingIt) {
  const Lines bad = {"",      "F5",   "2F",    "2X5",     "2f5",        "2F5x", "-1F0",
                     " 2F5",  "2SEND5", "2F+5", "2SEND_F", "2RECV_FF1", "2 F5",
                     "99999999999F0", "0F99999999999"};
  for (const std::string& text : bad) {
    std::string msg = error_of([&] { pt::parse_action(text); });
    EXPECT_NE(msg.find("bad action '" + text + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected <stage><KIND><micro-batch>"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------- schedule text

TEST(ScheduleText, FormatParseRoundTrip) {
  for (const char* name : {"gpipe", "1f1b"}) {
    for (int p = 1; p <= 4; ++p) {
      for (int n = 1; n <= 5; ++n) {
        Schedule s = pt::generate_schedule(name, p, n);
        Schedule back = pt::parse_schedule(pt::format_schedule(s), "src", p, n);
        EXPECT_EQ(back.ranks, s.ranks) << name << " P=" << p << " N=" << n;
        EXPECT_EQ(back.num_ranks, s.num_ranks);
        EXPECT_EQ(back.name, "src");
      }
    }
  }
}

// pipeline.weight_grad = "step": B computes input gradients only and each
// rank ends with W of every micro-batch of each stage it owns, highest stage
// first; the schedule prints the "weight_grad: step" line and parses back.
TEST(ScheduleText, StepWeightGradsAppendWAndRoundTrip) {
  const Schedule s = pt::with_step_weight_grads(pt::generate_1f1b(2, 2));
  const Lines plain = to_lines(pt::generate_1f1b(2, 2));
  EXPECT_EQ(to_lines(s), (Lines{"weight_grad: step", plain[0] + " 0W0 0W1", plain[1] + " 1W0 1W1"}));
  const Schedule back = pt::parse_schedule(pt::format_schedule(s), "src", 2, 2);
  EXPECT_TRUE(back.step_weight_grads);
  EXPECT_EQ(back.ranks, s.ranks);
  const Schedule v = pt::with_step_weight_grads(pt::generate_interleaved(2, 2, 2));
  EXPECT_EQ(to_lines(v)[1].substr(to_lines(v)[1].size() - 15), "2W0 2W1 0W0 0W1");
  for (const char* name : {"gpipe", "1f1b", "interleaved"})
    for (int p : {1, 2, 4})
      for (int n : {4, 8}) {
        const Schedule step = pt::with_step_weight_grads(pt::generate_schedule(name, p, n, 2));
        EXPECT_NO_THROW(pt::validate_schedule(step)) << name << " P=" << p << " N=" << n;
        EXPECT_FALSE(pt::forward_only_schedule(step).step_weight_grads);
      }
  std::string msg = error_of([] { pt::with_step_weight_grads(pt::generate_zb_h1(2, 4)); });
  EXPECT_NE(msg.find("places its own W actions"), std::string::npos) << msg;
  msg = error_of([] { pt::parse_schedule("weight_grad: often\n0F0 0B0\n", "w.sched", 1, 1); });
  EXPECT_NE(msg.find("w.sched:1: bad weight_grad line"), std::string::npos) << msg;
  msg = error_of([] { pt::parse_schedule("0F0 0B0 0W0\nweight_grad: step\n", "w.sched", 1, 1); });
  EXPECT_NE(msg.find("w.sched:2: the weight_grad line must come once, before the rank lines"),
            std::string::npos) << msg;
}

TEST(ScheduleText, IgnoresCommentsBlankLinesAndCarriageReturns) {
  Schedule s = pt::parse_schedule("# two ranks\r\n\n  0F0 0SEND_F0\r\n \t\n  # x\n1RECV_F0 1F0\n",
                                  "src", 2, 1);
  ASSERT_EQ(s.num_ranks, 2);
  EXPECT_EQ(to_lines(s), (Lines{"0F0 0SEND_F0", "1RECV_F0 1F0"}));
}

TEST(ScheduleText, RejectsBadInputNamingSourceAndLine) {
  std::string msg = error_of([] {
    pt::parse_schedule("# comment\n0F0 0B0\n\n1F0 zz 1B0\n", "my.sched", 2, 1);
  });
  EXPECT_NE(msg.find("my.sched:4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad action 'zz'"), std::string::npos) << msg;

  msg = error_of([] { pt::parse_schedule("0F0\n1F0\n2F0\n", "three.sched", 2, 1); });
  EXPECT_NE(msg.find("three.sched: found 3 rank lines"), std::string::npos) << msg;
  msg = error_of([] { pt::parse_schedule("# nothing\n\n", "empty.sched", 2, 1); });
  EXPECT_NE(msg.find("empty.sched: found 0 rank lines"), std::string::npos) << msg;
  msg = error_of([] { pt::parse_schedule("0F0\n", "zero.sched", 1, 0); });
  EXPECT_NE(msg.find("zero.sched"), std::string::npos) << msg;
}

TEST(ScheduleText, LoadsFileAndNamesMissingPath) {
  Schedule s = pt::load_schedule_file(tests_dir() + "/schedules/1f1b_p2_n3.txt", 2, 3);
  EXPECT_EQ(s.ranks, pt::generate_1f1b(2, 3).ranks);
  EXPECT_NE(s.name.find("1f1b_p2_n3.txt"), std::string::npos);
  pt::validate_schedule(s);

  std::string msg = error_of([] { pt::load_schedule_file("/no/such/file.sched", 2, 3); });
  EXPECT_NE(msg.find("'/no/such/file.sched'"), std::string::npos) << msg;
}

// -------------------------------------------------------------- generators

struct Expected { std::string name; int p, n; Lines ranks; };

const std::vector<Expected>& expected_schedules() {
  static const std::vector<Expected> table = {
      {"gpipe", 2, 3,
       {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0F2 0SEND_F2 0RECV_B1 0B0 0RECV_B2 0B1 0B2",
        "1RECV_F0 1RECV_F1 1F0 1RECV_F2 1F1 1F2 1B0 1SEND_B0 1B1 1SEND_B1 1B2 1SEND_B2"}},
      {"1f1b", 2, 3,
       {"0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0RECV_B1 0F2 0SEND_F2 0RECV_B2 0B1 0B2",
        "1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1RECV_F2 1B1 1SEND_B1 1F2 1B2 1SEND_B2"}},
      {"gpipe", 3, 4,
       {"0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0RECV_B0 0F3 0SEND_F3 0RECV_B1 0B0 "
        "0RECV_B2 0B1 0RECV_B3 0B2 0B3",
        "1RECV_F0 1RECV_F1 1F0 1SEND_F0 1RECV_F2 1F1 1SEND_F1 1RECV_F3 1F2 1SEND_F2 "
        "1RECV_B0 1F3 1SEND_F3 1RECV_B1 1B0 1SEND_B0 1RECV_B2 1B1 1SEND_B1 1RECV_B3 "
        "1B2 1SEND_B2 1B3 1SEND_B3",
        "2RECV_F0 2RECV_F1 2F0 2RECV_F2 2F1 2RECV_F3 2F2 2F3 2B0 2SEND_B0 2B1 2SEND_B1 "
        "2B2 2SEND_B2 2B3 2SEND_B3"}},
      {"1f1b", 3, 4,
       {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0F2 0SEND_F2 0B0 0RECV_B1 0F3 0SEND_F3 "
        "0RECV_B2 0B1 0RECV_B3 0B2 0B3",
        "1RECV_F0 1RECV_F1 1F0 1SEND_F0 1RECV_B0 1F1 1SEND_F1 1RECV_F2 1B0 1SEND_B0 "
        "1RECV_B1 1F2 1SEND_F2 1RECV_F3 1B1 1SEND_B1 1RECV_B2 1F3 1SEND_F3 1RECV_B3 "
        "1B2 1SEND_B2 1B3 1SEND_B3",
        "2RECV_F0 2F0 2RECV_F1 2B0 2SEND_B0 2F1 2RECV_F2 2B1 2SEND_B1 2F2 2RECV_F3 2B2 "
        "2SEND_B2 2F3 2B3 2SEND_B3"}},
      // One micro-batch: RECV_B waits until after F (never posted before it).
      {"1f1b", 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"}},
      {"gpipe", 1, 2, {"0F0 0F1 0B0 0B1"}},
      {"1f1b", 1, 2, {"0F0 0B0 0F1 0B1"}},
  };
  return table;
}

TEST(Generators, ExactActionLists) {
  for (const Expected& e : expected_schedules()) {
    Schedule s = pt::generate_schedule(e.name, e.p, e.n);
    EXPECT_EQ(s.name, e.name);
    EXPECT_EQ(s.num_stages, e.p);
    EXPECT_EQ(s.num_micro_batches, e.n);
    EXPECT_EQ(s.num_ranks, e.p);
    EXPECT_EQ(to_lines(s), e.ranks) << e.name << " P=" << e.p << " N=" << e.n;
  }
}

TEST(Generators, RejectBadArguments) {
  EXPECT_NE(error_of([] { pt::generate_schedule("zigzag", 2, 2); }).find("'zigzag'"),
            std::string::npos);
  EXPECT_THROW(pt::generate_gpipe(0, 4), InputError);
  EXPECT_THROW(pt::generate_1f1b(4, 0), InputError);
}

// Backward ascending per stage; each send right after its compute; each
// RECV_B after the F of its micro-batch.
void expect_generator_rules(const Schedule& s) {
  for (const std::vector<Action>& rank : s.ranks) {
    int next_backward = 0;
    for (size_t i = 0; i < rank.size(); ++i) {
      const Action& a = rank[i];
      if (a.kind == ActionKind::B) {
        EXPECT_EQ(a.mb, next_backward++) << s.name;
      }
      if (a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B) {
        ASSERT_GT(i, 0u);
        ActionKind producer = a.kind == ActionKind::SEND_F ? ActionKind::F : ActionKind::B;
        EXPECT_EQ(rank[i - 1], (Action{a.stage, producer, a.mb})) << s.name;
      }
      if (a.kind == ActionKind::RECV_B) {
        Action f{a.stage, ActionKind::F, a.mb};
        EXPECT_NE(std::find(rank.begin(), rank.begin() + i, f), rank.begin() + i) << s.name;
      }
    }
  }
}

TEST(Generators, AllValidateWithExpectedPeakInFlight) {
  for (int p = 1; p <= 8; ++p) {
    for (int n = 1; n <= 16; ++n) {
      Schedule gpipe = pt::generate_gpipe(p, n);
      Schedule ofob = pt::generate_1f1b(p, n);
      pt::ScheduleReport rg = pt::validate_schedule(gpipe);
      pt::ScheduleReport r1 = pt::validate_schedule(ofob);
      ASSERT_EQ(rg.peak_in_flight.size(), static_cast<size_t>(p));
      ASSERT_EQ(r1.peak_in_flight.size(), static_cast<size_t>(p));
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(rg.peak_in_flight[s], n) << "gpipe P=" << p << " N=" << n << " s=" << s;
        EXPECT_EQ(r1.peak_in_flight[s], std::min(p - s, n))
            << "1f1b P=" << p << " N=" << n << " s=" << s;
      }
      EXPECT_GT(rg.simulated_rounds, 0);
      EXPECT_GT(r1.simulated_rounds, 0);
      expect_generator_rules(gpipe);
      expect_generator_rules(ofob);
    }
  }
}

// --------------------------------------------------- sends finished first

// 1F1B at P = 3: a middle stage's B finishes the activation it sent before
// it (the next stage takes it right after sending B's gradient), and the
// next stage's F finishes that gradient; GPipe has none (each stage's next
// compute after a send consumes nothing from the peer).
TEST(SendsFinishedFirst, OneFOneBPairsEachBWithTheActivationSentBeforeIt) {
  const Schedule s = pt::generate_1f1b(3, 4);
  const std::vector<std::vector<int>> finish = pt::sends_finished_before(s);
  std::vector<std::string> pairs;
  for (int r = 0; r < s.num_ranks; ++r)
    for (size_t i = 0; i < finish[r].size(); ++i)
      if (finish[r][i] >= 0)
        pairs.push_back(pt::to_string(s.ranks[r][i]) + "<" + pt::to_string(s.ranks[r][finish[r][i]]));
  const std::vector<std::string> expected{
      "0B0<0SEND_F2", "0B1<0SEND_F3",  // stage 1 takes 0F2 (0F3) right after 1SEND_B0 (1SEND_B1)
      "1B0<1SEND_F1", "1F2<1SEND_B0", "1B1<1SEND_F2", "1F3<1SEND_B1", "1B2<1SEND_F3",
      "2F1<2SEND_B0", "2F2<2SEND_B1", "2F3<2SEND_B2"};  // 2F0, 1F1, 0B2, 0B3: none
  EXPECT_EQ(pairs, expected) << pt::format_schedule(s);
  for (const std::vector<int>& rank : pt::sends_finished_before(pt::generate_gpipe(3, 4)))
    for (int index : rank) EXPECT_EQ(index, -1);
}

// Every generated schedule: each entry is an earlier send of the same rank,
// to the stage whose input the compute waits for.
TEST(SendsFinishedFirst, AreEarlierSendsToTheInputsRank) {
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    for (int p : {2, 3, 4})
      for (int n : {1, 2, 4, 8}) {
        Schedule s;
        try {
          s = pt::generate_schedule(name, p, n, std::string(name) == "interleaved" ? 2 : 1);
        } catch (const InputError&) {
          continue;  // a count the schedule does not take
        }
        const std::vector<std::vector<int>> finish = pt::sends_finished_before(s);
        for (int r = 0; r < s.num_ranks; ++r)
          for (size_t i = 0; i < finish[r].size(); ++i) {
            if (finish[r][i] < 0) continue;
            const Action& c = s.ranks[r][i];
            const Action& send = s.ranks[r][finish[r][i]];
            const std::string where = std::string(name) + " P=" + std::to_string(p) + " N=" +
                                      std::to_string(n) + " " + pt::to_string(c);
            EXPECT_LT(finish[r][i], static_cast<int>(i)) << where;
            EXPECT_TRUE(c.kind == ActionKind::F || c.kind == ActionKind::B) << where;
            const int input_stage = c.kind == ActionKind::F ? c.stage - 1 : c.stage + 1;
            const int send_to = send.kind == ActionKind::SEND_F ? send.stage + 1 : send.stage - 1;
            EXPECT_TRUE(send.kind == ActionKind::SEND_F || send.kind == ActionKind::SEND_B) << where;
            EXPECT_EQ(pt::stage_rank(s, send_to), pt::stage_rank(s, input_stage)) << where;
          }
      }
}

// --------------------------------------------------------------- validator

TEST(Validator, AcceptsLocalHandoffOnOneRank) {
  pt::ScheduleReport r = pt::validate_schedule(from_lines({"0F0 1F0 1B0 0B0"}, 2, 1));
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{1, 1}));
  EXPECT_EQ(r.simulated_rounds, 4);
}

struct Broken {
  std::string what;
  int p, n;
  Lines ranks;
  std::vector<std::string> message_parts;  // each must appear in the message
};

const std::vector<Broken>& broken_schedules() {
  static const std::vector<Broken> table = {
      {"B before F", 1, 2, {"0B0 0F0 0F1 0B1"},
       {"0B0 (rank 0, step 0) comes before 0F0 (rank 0, step 1)", ">0B0<", ">0F0<"}},
      {"missing RECV_F", 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1B0 1SEND_B0"},
       {"missing 1RECV_F0: 1F0 needs a receive of its input from stage 0 on rank 0", ">1F0<"}},
      {"missing RECV_B", 2, 1, {"0F0 0SEND_F0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"missing 0RECV_B0", ">0B0<"}},
      {"duplicate F", 1, 2, {"0F0 0F0 0B0 0F1 0B1"}, {"0F0 appears 2 times", "| >0F0< >0F0<  0B0"}},
      {"missing F", 1, 2, {"0F0 0B0 0B1"}, {"missing 0F1: every stage runs exactly one F"}},
      {"duplicate send", 2, 1, {"0F0 0SEND_F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"0SEND_F0 appears 2 times", ">0SEND_F0<"}},
      {"send before its compute", 2, 1, {"0SEND_F0 0F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"0SEND_F0 (rank 0, step 0) comes before 0F0", "a send must follow the compute",
        ">0SEND_F0<"}},
      {"receive after its consumer", 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"},
       {"1F0 (rank 1, step 0) comes before 1RECV_F0", "a receive must be posted before", ">1F0<"}},
      {"send from the last stage", 2, 1,
       {"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1SEND_F0 1B0 1SEND_B0"},
       {"1SEND_F0 (rank 1, step 2): comm action not allowed: the last stage has no next stage",
        ">1SEND_F0<"}},
      {"receive into stage 0", 2, 1, {"0RECV_F0 0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"stage 0 reads the data and receives no activations", ">0RECV_F0<"}},
      {"comm between stages on one rank", 2, 1, {"0F0 0SEND_F0 1F0 1B0 0B0"},
       {"stages 0 and 1 both live on rank 0, so their handoff is local", ">0SEND_F0<"}},
      {"action on wrong rank", 2, 1, {"0F0 1F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1B0 1SEND_B0"},
       {"1F0 (rank 0, step 1): wrong rank; stage 1 lives on rank 1", ">1F0<"}},
      {"micro-batch out of range", 1, 2, {"0F0 0B0 0F2 0B1"},
       {"0F2 (rank 0, step 2): micro-batch out of range; micro-batches are 0..1", ">0F2<"}},
      {"stage out of range", 1, 1, {"0F0 0B0 3F0"},
       {"3F0 (rank 0, step 2): stage out of range; stages are 0..0", ">3F0<"}},
      {"deadlock: B waits for a gradient that needs F", 2, 1,
       {"0F0 0RECV_B0 0B0 0SEND_F0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"schedule deadlocks", "0B0 (rank 0, step 2) waits for 1SEND_B0 on rank 1",
        "1F0 (rank 1, step 1) waits for 0SEND_F0 on rank 0", ">0B0<", ">1F0<"}},
      {"deadlock: two ranks each wait for the other's F", 4, 1,
       {"2RECV_F0 2F0 2SEND_F0 0F0 0SEND_F0 2RECV_B0 2B0 2SEND_B0 0RECV_B0 0B0",
        "1RECV_F0 1F0 1SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 1RECV_B0 1B0 1SEND_B0"},
       {"schedule deadlocks", "2F0 (rank 0, step 1) waits for 1SEND_F0 on rank 1",
        "1F0 (rank 1, step 1) waits for 0SEND_F0 on rank 0", ">2F0<", ">1F0<"}},
      {"weight_grad: step with a W apart", 1, 2, {"weight_grad: step", "0F0 0B0 0W0 0F1 0B1 0W1"},
       {"0W1 (rank 0, step 5) does not follow 0W0 (rank 0, step 2) directly",
        "run as one pass over the step's micro-batches", ">0W0<", ">0W1<"}},
      {"weight_grad: step without W", 1, 1, {"weight_grad: step", "0F0 0B0"},
       {"says 'weight_grad: step' but has no W actions"}},
      {"deadlock: local handoff out of order", 2, 1, {"1F0 0F0 0B0 1B0"},
       {"schedule deadlocks", "1F0 (rank 0, step 0) waits for 0F0 on rank 0", ">1F0<"}},
  };
  return table;
}

TEST(Validator, RejectsBrokenSchedulesWithSpecificMessages) {
  for (const Broken& b : broken_schedules()) {
    Schedule s = from_lines(b.ranks, b.p, b.n);
    std::string msg = error_of([&] { pt::validate_schedule(s); });
    ASSERT_FALSE(msg.empty()) << b.what << ": accepted";
    EXPECT_NE(msg.find("invalid schedule 'test'"), std::string::npos) << b.what << "\n" << msg;
    EXPECT_NE(msg.find("step   |"), std::string::npos) << b.what << ": no grid\n" << msg;
    EXPECT_NE(msg.find("rank 0 |"), std::string::npos) << b.what << ": no grid\n" << msg;
    for (const std::string& part : b.message_parts)
      EXPECT_NE(msg.find(part), std::string::npos) << b.what << ": no '" << part << "' in\n" << msg;
  }
}

TEST(Validator, RejectsBadShape) {
  Schedule s = pt::generate_gpipe(2, 2);
  s.num_ranks = 3;
  EXPECT_THROW(pt::validate_schedule(s), InputError);
  s = pt::generate_gpipe(2, 2);
  s.ranks.pop_back();
  EXPECT_NE(error_of([&] { pt::validate_schedule(s); }).find("1 rank lists for 2 ranks"),
            std::string::npos);
}

// ------------------------------------------------------------------- grid

TEST(Grid, ExactSmallGridWithMarks) {
  Schedule s = pt::generate_1f1b(2, 1);
  const std::string expected =
      "step   |  0          1          2          3\n"
      "rank 0 |  0F0        0SEND_F0   0RECV_B0   0B0\n"
      "rank 1 |  1RECV_F0  >1F0<       1B0        1SEND_B0\n";
  EXPECT_EQ(pt::format_grid(s, {{1, 1}}), expected);
}

TEST(Grid, WrapsLongSchedulesIntoReadableBlocks) {
  Schedule s = pt::generate_1f1b(4, 8);
  std::string grid = pt::format_grid(s);
  std::istringstream in(grid);
  int rank_rows = 0;
  for (std::string line; std::getline(in, line);) {
    EXPECT_LE(line.size(), 120u) << line;
    if (line.rfind("rank ", 0) == 0) ++rank_rows;
  }
  size_t longest = 0;
  for (const auto& rank : s.ranks) longest = std::max(longest, rank.size());
  size_t blocks = (longest + 9) / 10;  // 10 columns of width 10 fit in 120
  EXPECT_EQ(rank_rows, static_cast<int>(4 * blocks));
  for (const auto& rank : s.ranks)
    for (const Action& a : rank) EXPECT_NE(grid.find(pt::to_string(a)), std::string::npos);
}

}  // namespace

// ---- NCCL semantics (CommSemantics) -------------------------------------

// NCCL's lazy connection deadlocks GPipe (stage 0 posts RECV_B0, its first
// action on the channel from rank 1, before F1; rank 1 sends B0 only after
// F1) and 1F1B with 2 <= N < P; the simulation names the first-use block and
// marks it in the grid. Eager connection (what the transports do) accepts all.
TEST(NcclSemantics, LazyConnectionDeadlocksAreRefused) {
  const pt::CommSemantics lazy = pt::CommSemantics::nccl(true);
  std::string msg = error_of([&] { pt::validate_schedule(pt::generate_gpipe(2, 2), lazy); });
  EXPECT_NE(msg.find("deadlocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0RECV_B0 (rank 0, step 2) is rank 0's first action on the NCCL channel "
                     "1->0 and blocks (lazy connection)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(">0RECV_B0<"), std::string::npos) << msg;
  EXPECT_NO_THROW(pt::validate_schedule(pt::generate_gpipe(2, 1), lazy));
  EXPECT_THROW(pt::validate_schedule(pt::generate_1f1b(4, 2), lazy), InputError);
  EXPECT_THROW(pt::validate_schedule(pt::generate_1f1b(4, 3), lazy), InputError);
  EXPECT_NO_THROW(pt::validate_schedule(pt::generate_1f1b(4, 4), lazy));
  EXPECT_NO_THROW(pt::validate_schedule(pt::generate_1f1b(4, 1), lazy));
  for (int p : {1, 2, 3, 4, 8})
    for (int n : {1, 2, 3, 4, 8, 16})
      for (const char* name : {"gpipe", "1f1b"})
        EXPECT_NO_THROW(pt::validate_schedule(pt::generate_schedule(name, p, n),
                                              pt::CommSemantics::nccl()))
            << name << " P=" << p << " N=" << n;
}

// NCCL has no tags: receives posted in another order than the sends would
// exchange payloads. MPI (tags) accepts the schedule; NCCL semantics refuse it.
TEST(NcclSemantics, ChannelOrderMustMatch) {
  Schedule s = from_lines({"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1",
                           "1RECV_F1 1RECV_F0 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1"},
                          2, 2);
  EXPECT_NO_THROW(pt::validate_schedule(s));
  std::string msg = error_of([&] { pt::validate_schedule(s, pt::CommSemantics::nccl()); });
  EXPECT_NE(msg.find("meet by order, not by tag, but the 1st send is 0SEND_F0 (rank 0, step 1) "
                     "and the 1st receive is 1RECV_F1 (rank 1, step 0)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(">1RECV_F1<"), std::string::npos) << msg;
}
