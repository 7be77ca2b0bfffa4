// test_fault_injection.cpp: the fault-injection hooks (base/fault_injection.hpp):
// each hook's documented format parses to the request its action reads, a
// malformed value is refused with the variable, the value and the format,
// and a hook set in the environment fires only for its rank and step.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/fault_injection.hpp"
#include "error_of.hpp"

namespace pt {
namespace {

// The message that refuses `value` for `hook`; "" when it is accepted.
std::string refusal(FaultHook hook, const std::string& value) {
  return test::error_of([&] { parse_fault_hook(hook, value); });
}

TEST(FaultInjection, TheTableIsInHookOrderWithOneVariableEach) {
  const auto& hooks = fault_hooks();
  ASSERT_EQ(hooks.size(), 12u);
  for (size_t i = 0; i < hooks.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(hooks[i].hook), i);
    EXPECT_EQ(std::string(hooks[i].variable).rfind("PIPETRAIN_TEST_", 0), 0u) << hooks[i].variable;
  }
}

TEST(FaultInjection, EachDocumentedFormatParses) {
  const FaultRequest stall = parse_fault_hook(FaultHook::Stall, "1:reduction:3");
  EXPECT_EQ(stall.rank, 1);
  EXPECT_EQ(stall.point, "reduction");
  EXPECT_EQ(stall.step, 3);
  EXPECT_EQ(parse_fault_hook(FaultHook::Stall, "0:startup").step, -1);  // any step
  const FaultRequest kill = parse_fault_hook(FaultHook::KillAfterPublish, "0:4");
  EXPECT_EQ(kill.rank, 0);
  EXPECT_EQ(kill.step, 4);
  EXPECT_EQ(parse_fault_hook(FaultHook::Signal, "1:5").signo, SIGUSR1);
  EXPECT_EQ(parse_fault_hook(FaultHook::Signal, "1:5:15").signo, 15);
  const FaultRequest move = parse_fault_hook(FaultHook::Rebalance, "2:7,1");
  EXPECT_EQ(move.step, 2);
  EXPECT_EQ(move.counts, (std::vector<int64_t>{7, 1}));
  const FaultRequest message = parse_fault_hook(FaultHook::MessageFault, "1:2:wrong_mb");
  EXPECT_EQ(message.rank, 1);
  EXPECT_EQ(message.step, 2);
  EXPECT_EQ(message.point, "wrong_mb");
  EXPECT_EQ(parse_fault_hook(FaultHook::CorruptReplica, "3:0").rank, 3);
  const FaultRequest save = parse_fault_hook(FaultHook::AsyncSave, "1:4:fsynced");
  EXPECT_EQ(save.rank, 1);
  EXPECT_EQ(save.step, 4);
  EXPECT_EQ(save.point, "fsynced");
  EXPECT_EQ(parse_fault_hook(FaultHook::ReplanSpeed, "1,2.5").factors, (std::vector<double>{1.0, 2.5}));
}

TEST(FaultInjection, AMalformedValueIsRefusedWithVariableValueAndFormat) {
  const std::string point = refusal(FaultHook::Stall, "1:stpe:3");
  EXPECT_NE(point.find("PIPETRAIN_TEST_STALL=\"1:stpe:3\""), std::string::npos) << point;
  EXPECT_NE(point.find("POINT 'stpe' is not one of step, loss"), std::string::npos) << point;
  EXPECT_NE(point.find("expected RANK:POINT[:STEP]"), std::string::npos) << point;
  const std::string rank = refusal(FaultHook::CrashInCheckpoint, "x:6");
  EXPECT_NE(rank.find("RANK 'x' is not a whole number"), std::string::npos) << rank;
  EXPECT_NE(refusal(FaultHook::NonFinite, "1").find("two fields separated by ':'"),
            std::string::npos);
  EXPECT_NE(refusal(FaultHook::KillBeforePublish, "0:4:1").find("two fields"), std::string::npos);
  EXPECT_NE(refusal(FaultHook::Rebalance, "2:7,").find("unit count '' is not"), std::string::npos);
  EXPECT_NE(refusal(FaultHook::Signal, "0:1:999").find("not a signal number"), std::string::npos);
  EXPECT_EQ(refusal(FaultHook::BlasForced, "anything"), "");
  EXPECT_NE(refusal(FaultHook::MessageFault, "0:1:flip").find(
                "KIND 'flip' is not one of bitflip, wrong_mb, truncate, nan"),
            std::string::npos);
  EXPECT_NE(refusal(FaultHook::MessageFault, "0:1").find("three fields"), std::string::npos);
  const std::string phase = refusal(FaultHook::AsyncSave, "1:4:synced");
  EXPECT_NE(phase.find("PHASE 'synced' is not one of staged, written, fsynced, bound, published, write_error"),
            std::string::npos) << phase;
  EXPECT_NE(refusal(FaultHook::AsyncSave, "1:4").find("three fields"), std::string::npos);
  const std::string speed = refusal(FaultHook::ReplanSpeed, "1,-2");
  EXPECT_NE(speed.find("PIPETRAIN_TEST_REPLAN_SPEED"), std::string::npos) << speed;
  EXPECT_NE(speed.find("factor '-2' is not a number > 0"), std::string::npos) << speed;
  EXPECT_NE(refusal(FaultHook::ReplanSpeed, "1,,2").find("factor '' is not"), std::string::npos);
}

// The environment is parsed once per process: this is the only case that sets it.
TEST(FaultInjection, AHookFromTheEnvironmentFiresOnlyForItsRankAndStep) {
  ASSERT_TRUE(active_fault_hooks().empty()) << "run this test without PIPETRAIN_TEST_* set";
  setenv("PIPETRAIN_TEST_NONFINITE", "0:3", 1);
  setenv("PIPETRAIN_TEST_REBALANCE", "5:3,1", 1);
  check_fault_hooks();
  EXPECT_FALSE(nonfinite_gradient_requested(2));
  EXPECT_TRUE(nonfinite_gradient_requested(3));  // world rank 0 without MPI
  EXPECT_FALSE(fault_due(FaultHook::NonFinite, 1, 3));
  EXPECT_FALSE(fault_request(FaultHook::Stall).has_value());
  ASSERT_TRUE(fault_request(FaultHook::Rebalance).has_value());
  EXPECT_EQ(fault_request(FaultHook::Rebalance)->counts, (std::vector<int64_t>{3, 1}));
  const auto lines = active_fault_hooks();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("PIPETRAIN_TEST_NONFINITE=0:3: ", 0), 0u) << lines[0];
  unsetenv("PIPETRAIN_TEST_NONFINITE");
  unsetenv("PIPETRAIN_TEST_REBALANCE");
}

}  // namespace
}  // namespace pt
