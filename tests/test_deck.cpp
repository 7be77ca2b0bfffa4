// test_deck.cpp: the input deck: every class of bad deck gets its one clear
// message (file, line, key, expectation), --set overrides, the deck_to_toml
// round trip, check_deck_layout, the command line, and the example decks.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/app/command_line.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace {

using Strings = std::vector<std::string>;

// The directory of this file: fixtures live in tests/decks/, examples in inputs/.
std::string tests_dir() {
  std::string file = __FILE__;
  return file.substr(0, file.rfind('/'));
}
std::string deck_fixture(const std::string& name) { return tests_dir() + "/decks/" + name; }
std::string example_deck(const std::string& name) { return tests_dir() + "/../inputs/" + name; }

// The message of the InputError `action` throws ("" and a test failure if none).
std::string input_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const pt::InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected pt::InputError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected pt::InputError, nothing was thrown";
  return "";
}

std::string text_error(const std::string& text, const Strings& overrides = {}) {
  return input_error([&] { pt::parse_deck_text(text, "t.toml", overrides); });
}

#define EXPECT_HAS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "message: " << (message) << "\nmissing: " << (part)

// ---- clean decks -----------------------------------------------------------

TEST(Deck, EmptyTextGivesDefaultsAndWhereNamesTheFile) {
  pt::Deck deck = pt::parse_deck_text("", "t.toml", {});
  EXPECT_EQ(deck.source_file, "t.toml");
  EXPECT_TRUE(deck.key_origin.empty());
  EXPECT_EQ(deck.model.mlp.depth, pt::ModelConfig{}.mlp.depth);
  EXPECT_EQ(deck.where("training.lr"), "t.toml: training.lr");
}

TEST(Deck, RecordsTheLineOfEveryKey) {
  pt::Deck deck = pt::parse_deck_text("[model]\ndepth = 4\n\n[training]\nlr = 2\n", "t.toml", {});
  EXPECT_EQ(deck.model.mlp.depth, 4);
  EXPECT_EQ(deck.training.lr, 2.0);  // an integer is accepted for a float
  EXPECT_EQ(deck.key_origin.at("model.depth"), "t.toml:2");
  EXPECT_EQ(deck.where("training.lr"), "t.toml:5: training.lr");
}

TEST(Deck, ExampleDecksParseAndFitTheirRankCounts) {
  pt::Deck big = pt::parse_deck_file(example_deck("mlp.toml"), {});
  EXPECT_EQ(big.model.mlp.depth, 16);
  EXPECT_EQ(big.model.mlp.input_dim, 256);
  EXPECT_EQ(big.pipeline.micro_batches, 8);
  EXPECT_EQ(big.output.dir, "runs/mlp");
  EXPECT_EQ(pt::check_deck_layout(big, 4), 4);
  pt::Deck small = pt::parse_deck_file(example_deck("mlp_small.toml"), {});
  EXPECT_EQ(small.model.mlp.depth, 8);
  EXPECT_EQ(small.training.batch_size, 16);
  EXPECT_EQ(small.training.steps, 5);
  for (int ranks : {1, 2, 4, 8}) EXPECT_EQ(pt::check_deck_layout(small, ranks), ranks);
}

TEST(Deck, EveryDeckInInputsParsesAndRoundTrips) {
  int decks = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tests_dir() + "/../inputs")) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    const pt::Deck deck = pt::parse_deck_file(entry.path().string(), {});
    const pt::Deck again = pt::parse_deck_text(pt::deck_to_toml(deck), "resolved", {});
    EXPECT_EQ(pt::deck_to_toml(again), pt::deck_to_toml(deck));
    ++decks;
  }
  EXPECT_GE(decks, 8);
}

// ---- one test per class of bad deck ----------------------------------------

TEST(DeckErrors, MissingFileNamesThePath) {
  std::string msg = input_error([] { pt::parse_deck_file("no/such/deck.toml", {}); });
  EXPECT_EQ(msg, "'no/such/deck.toml': no such file; expected a TOML deck file");
  msg = input_error([] { pt::parse_deck_file(tests_dir() + "/decks", {}); });
  EXPECT_EQ(msg, "'" + tests_dir() + "/decks': a directory, not a regular file; expected a TOML deck file");
  // A FIFO would block the open for ever: refused before it is opened.
  const std::string fifo = testing::TempDir() + "deck_fifo_" + std::to_string(::getpid()) + ".toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  msg = input_error([&] { pt::parse_deck_file(fifo, {}); });
  std::remove(fifo.c_str());
  EXPECT_EQ(msg, "'" + fifo + "': a FIFO, not a regular file; expected a TOML deck file");
  EXPECT_EQ(input_error([] { pt::parse_deck_file("/dev/zero", {}); }),
            "'/dev/zero': a character device, not a regular file; expected a TOML deck file");
}

// The TOML parser recurses once per level of nesting: a deck nested
// thousands deep is refused by name before it is parsed (it overflowed the
// stack before), in the file and in --set.
TEST(DeckErrors, DeepNestingIsRefusedNamingTheLine) {
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  EXPECT_EQ(text_error("[model]\n# [[[[ in a comment\nname = \"[[[[\"\ndepth = " + deep + "\n"),
            "t.toml:4: arrays or inline tables nested over 64 deep; a deck needs a few levels at most");
  EXPECT_EQ(text_error("[model]\n", {"model.depth=" + deep}),
            "--set model.depth=...: the value has arrays or inline tables nested over 64 deep; a deck "
            "needs a few levels at most");
  // A few levels parse as before, to the key's own type error.
  EXPECT_HAS(text_error("[model]\ndepth = [[[1]]]\n"), "t.toml:2: model.depth: expected an integer");
}

TEST(DeckErrors, SyntaxErrorGivesFileLineAndTomlExplanation) {
  std::string msg = text_error("[model]\ndepth = 3\nhidden_dim = \n");
  EXPECT_EQ(msg.rfind("t.toml:3: TOML syntax error: ", 0), 0u) << msg;
  msg = input_error([] { pt::parse_deck_file(deck_fixture("bad_syntax.toml"), {}); });
  EXPECT_HAS(msg, "bad_syntax.toml:5: TOML syntax error: ");
  EXPECT_HAS(msg, "hidden_dim 32");  // toml11's excerpt of the line
  msg = text_error("[model]\ndepth = 3\ndepth = 4\n");
  EXPECT_HAS(msg, "t.toml:3: TOML syntax error: ");
}

TEST(DeckErrors, UnknownSectionSuggestsOrListsSections) {
  EXPECT_EQ(text_error("[model]\ndepth = 3\n[trainig]\nlr = 1\n"),
            "t.toml:3: [trainig]: unknown section; did you mean [training]?");
  EXPECT_HAS(text_error("[optim]\nlr = 1\n"),
             "t.toml:1: [optim]: unknown section; the sections are [model], [data], [training], "
             "[pipeline], [data_parallel], [rebalance], [slowdown], [output]");
}

TEST(DeckErrors, KeyOutsideAnySection) {
  EXPECT_EQ(text_error("steps = 5\n"),
            "t.toml:1: steps: key outside any section; did you mean to put it under [training]?");
  EXPECT_EQ(text_error("\nmodel = 3\n"),
            "t.toml:2: model: expected a section [model], got an integer (3)");
}

TEST(DeckErrors, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(text_error("[pipeline]\nmicro_batch = 8\n"),
            "t.toml:2: pipeline.micro_batch: unknown key; did you mean 'micro_batches'?");
  EXPECT_EQ(text_error("[training]\n\nmicro_batches = 8\n"),
            "t.toml:3: training.micro_batches: unknown key; did you mean 'pipeline.micro_batches'?");
  std::string msg = text_error("[output]\nformat = \"h5\"\n");
  EXPECT_HAS(msg, "t.toml:2: output.format: unknown key; the keys of [output] are: dir, log_every");
  msg = input_error([] { pt::parse_deck_file(deck_fixture("bad_unknown_key.toml"), {}); });
  EXPECT_HAS(msg, "bad_unknown_key.toml:6: pipeline.micro_batch: unknown key; did you mean 'micro_batches'?");
}

TEST(DeckErrors, WrongTypeSaysExpectedAndGot) {
  EXPECT_EQ(text_error("[training]\nsteps = 10.0\n"),
            "t.toml:2: training.steps: expected an integer, got a float (10.0)");
  EXPECT_EQ(text_error("[model]\nactivation = 1\n"),
            "t.toml:2: model.activation: expected a string, got an integer (1)");
  EXPECT_EQ(text_error("[pipeline]\npartition = 4\n"),
            "t.toml:2: pipeline.partition: expected a strategy (\"uniform\", \"time\", \"memory\", "
            "\"balanced\") or an array of integers, got an integer (4)");
  EXPECT_EQ(text_error("[pipeline]\npartition = [4, 2.5]\n"),
            "t.toml:2: pipeline.partition entry 1: expected an integer, got a float (2.5)");
  EXPECT_EQ(text_error("[training]\ngrad_clip = true\n"),
            "t.toml:2: training.grad_clip: expected a float (an integer is accepted), got a boolean (true)");
  std::string msg = input_error([] { pt::parse_deck_file(deck_fixture("bad_type.toml"), {}); });
  EXPECT_HAS(msg, "bad_type.toml:5: training.lr: expected a float (an integer is accepted), got a string (\"0.001\")");
}

TEST(DeckErrors, OutOfRangeNamesTheAllowedRange) {
  struct Case { std::string text, message; };
  const Case cases[] = {
      {"[training]\nbatch_size = 0", "t.toml:2: training.batch_size = 0: must be in [1, 1073741824]"},
      {"[pipeline]\nmicro_batches = 0", "t.toml:2: pipeline.micro_batches = 0: must be in [1, 1048576]"},
      {"[training]\nlr = 0", "t.toml:2: training.lr = 0.0: must be > 0"},
      {"[training]\nlr = -1e-3", "t.toml:2: training.lr = -0.001: must be > 0"},
      {"[training]\nlr = inf", "t.toml:2: training.lr = inf: must be a finite number > 0"},
      {"[training]\nbeta1 = 1", "t.toml:2: training.beta1 = 1.0: must be in [0, 1)"},
      {"[training]\nbeta2 = nan", "t.toml:2: training.beta2 = nan: must be a finite number in [0, 1)"},
      {"[training]\nmomentum = -0.5", "t.toml:2: training.momentum = -0.5: must be in [0, 1)"},
      {"[training]\neps = 0.0", "t.toml:2: training.eps = 0.0: must be > 0"},
      {"[training]\nweight_decay = -1", "t.toml:2: training.weight_decay = -1.0: must be >= 0"},
      {"[training]\nsteps = 0", "t.toml:2: training.steps = 0: must be >= 1"},
      {"[training]\nwarmup_steps = -1", "t.toml:2: training.warmup_steps = -1: must be >= 0"},
      {"[training]\nblas_threads = -1", "t.toml:2: training.blas_threads = -1: must be in [0, 4096]"},
      {"[pipeline]\ntimeout_s = 0", "t.toml:2: pipeline.timeout_s = 0.0: must be in [0.1, 1000000]"},
      {"[pipeline]\ntimeout_s = 1e10", "t.toml:2: pipeline.timeout_s = 10000000000.0: must be in [0.1, 1000000]"},
      {"[pipeline]\nstages = -2", "t.toml:2: pipeline.stages = -2: must be in [0, 65536]"},
      {"[model]\ndepth = 0", "t.toml:2: model.depth = 0: must be in [1, 1048576]"},
      {"[model]\nhidden_dim = -4", "t.toml:2: model.hidden_dim = -4: must be in [1, 16777216]"},
      {"[model]\ninit_seed = -1", "t.toml:2: model.init_seed = -1: must be >= 0"},
      {"[data]\nsamples = 0", "t.toml:2: data.samples = 0: must be >= 1"},
      {"[output]\nlog_every = 0", "t.toml:2: output.log_every = 0: must be >= 1"},
  };
  for (const Case& c : cases) EXPECT_EQ(text_error(c.text), c.message) << c.text;
}

TEST(DeckErrors, BadChoiceListsTheAllowedValues) {
  EXPECT_EQ(text_error("[model]\nactivation = \"tanh\""),
            "t.toml:2: model.activation = \"tanh\": must be one of \"relu\", \"gelu\"");
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"zb\""),
            "t.toml:2: pipeline.schedule = \"zb\": must be one of \"gpipe\", \"1f1b\", \"interleaved\", \"zb-h1\", \"zb-v\", \"file\"");
  EXPECT_HAS(text_error("[training]\noptimizer = \"adam\""), "must be one of \"sgd\", \"adamw\"");
  EXPECT_HAS(text_error("[training]\nlr_schedule = \"linear\""), "must be one of \"constant\", \"cosine\"");
  EXPECT_HAS(text_error("[model]\nloss = \"l1\""), "must be one of \"mse\", \"cross_entropy\"");
  EXPECT_HAS(text_error("[model]\ntype = \"rnn\""), "model.type = \"rnn\": must be one of \"mlp\", \"gpt\"");
  EXPECT_HAS(text_error("[data]\ntype = \"mnist\""),
             "data.type = \"mnist\": must be one of \"synthetic\", \"markov\", \"hdf5\", \"images\"");
}

// training.cpu_gemm is read through its kind table (the one parser of CPU
// GEMM names): every library by its name, an unknown one named with the choices.
TEST(DeckErrors, CpuGemmChoicesParseAndUnknownOnesAreNamed) {
  const std::pair<const char*, pt::CpuGemmKind> choices[] = {
      {"auto", pt::CpuGemmKind::Auto},
      {"onednn", pt::CpuGemmKind::OneDNN},
      {"onednn-sgemm", pt::CpuGemmKind::OneDNNSgemm},
      {"openblas", pt::CpuGemmKind::OpenBLAS}};
  for (const auto& [name, kind] : choices)
    EXPECT_EQ(pt::parse_deck_text("[training]\ncpu_gemm = \"" + std::string(name) + "\"", "t.toml", {})
                  .training.cpu_gemm,
              kind)
        << name;
  EXPECT_EQ(text_error("[training]\ncpu_gemm = \"mkl\""),
            "t.toml:2: training.cpu_gemm = \"mkl\": must be one of \"auto\", \"onednn\", "
            "\"onednn-sgemm\", \"openblas\"");
}

TEST(DeckErrors, BatchSizeMustBeDivisibleByMicroBatches) {
  EXPECT_EQ(text_error("[training]\nbatch_size = 60\n[pipeline]\nmicro_batches = 8\n"),
            "t.toml:2: training.batch_size = 60: must be divisible by pipeline.micro_batches = 8 (t.toml:4)");
  EXPECT_EQ(text_error("[pipeline]\nmicro_batches = 5\n"),
            "t.toml: training.batch_size = 64: must be divisible by pipeline.micro_batches = 5 (t.toml:2)");
  std::string path = deck_fixture("bad_batch.toml");
  EXPECT_EQ(input_error([&] { pt::parse_deck_file(path, {}); }),
            path + ":7: training.batch_size = 60: must be divisible by pipeline.micro_batches = 8 (" +
                path + ":10)");
}

TEST(DeckErrors, ScheduleFileNeedsScheduleFileAndViceVersa) {
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"file\"\n"),
            "t.toml:2: pipeline.schedule = \"file\": needs pipeline.schedule_file (the schedule text file to run)");
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"gpipe\"\nschedule_file = \"s.txt\"\n"),
            "t.toml:3: pipeline.schedule_file = \"s.txt\": is only used with pipeline.schedule = \"file\", "
            "but pipeline.schedule = \"gpipe\" (t.toml:2)");
  EXPECT_NO_THROW(pt::parse_deck_text("[pipeline]\nschedule = \"file\"\nschedule_file = \"s.txt\"\n", "t.toml", {}));
}

TEST(DeckErrors, OtherInconsistencies) {
  EXPECT_EQ(text_error("[pipeline]\npartition = [3, 0, 5]\n"),
            "t.toml:2: pipeline.partition = [3, 0, 5]: entry 1 is 0; every entry must be >= 1");
  EXPECT_EQ(text_error("[training]\nlr = 0.01\nmin_lr = 0.1\n"),
            "t.toml:3: training.min_lr = 0.1: must be <= training.lr = 0.01 (t.toml:2)");
  EXPECT_EQ(text_error("[model]\nloss = \"cross_entropy\"\noutput_dim = 1\n"),
            "t.toml:2: model.loss = \"cross_entropy\": needs at least 2 classes, but model.output_dim = 1 (t.toml:3)");
  EXPECT_EQ(text_error("[training]\nsteps = 10\nwarmup_steps = 10\n"),
            "t.toml:3: training.warmup_steps = 10: must be < training.steps = 10 (t.toml:2) (a shorter run "
            "needs a shorter warm-up too, e.g. --set training.warmup_steps=1)");
  EXPECT_EQ(text_error("[output]\ndir = \"\"\n"), "t.toml:2: output.dir = \"\": must name a directory");
}

// TOML integers are 64-bit; a longer literal is an error, not INT64_MAX.
TEST(DeckErrors, IntegerBeyond64BitsIsRejected) {
  const std::string range = ": does not fit in a 64-bit integer (-9223372036854775808..9223372036854775807)";
  EXPECT_EQ(text_error("[training]\nsteps = 99999999999999999999\n"),
            "t.toml:2: training.steps = 99999999999999999999" + range);
  EXPECT_EQ(text_error("[model]\ninit_seed = -9_223_372_036_854_775_809\n"),
            "t.toml:2: model.init_seed = -9_223_372_036_854_775_809" + range);
  EXPECT_EQ(text_error("[data]\nseed = 0x1_0000_0000_0000_0000\n"),
            "t.toml:2: data.seed = 0x1_0000_0000_0000_0000" + range);
  EXPECT_EQ(text_error("[pipeline]\npartition = [4, 18446744073709551616]\n"),
            "t.toml:2: pipeline.partition entry 1 = 18446744073709551616" + range);
  EXPECT_EQ(text_error("[training]\nlr = 99999999999999999999\n"),
            "t.toml:2: training.lr = 99999999999999999999" + range);
  EXPECT_EQ(text_error("", {"training.steps=99999999999999999999"}),
            "--set training.steps=99999999999999999999: training.steps = 99999999999999999999" + range);
  // The extremes themselves fit.
  EXPECT_EQ(pt::parse_deck_text("[training]\nsteps = 9223372036854775807\n", "t.toml", {}).training.steps,
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(text_error("[training]\nwarmup_steps = -9223372036854775808\n"),
            "t.toml:2: training.warmup_steps = -9223372036854775808: must be >= 0");
}

// ---- overrides -------------------------------------------------------------

TEST(DeckErrors, MeasuredScheduleTimesNeedAZeroBubbleScheduleAndNoRebalancing) {
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"1f1b\"\nschedule_times = \"measured\"\n"),
            "t.toml:3: pipeline.schedule_times: only applies with pipeline.schedule = \"zb-h1\" or "
            "\"zb-v\", or pipeline.auto = true; remove it or change that key");
  EXPECT_HAS(text_error("[pipeline]\nschedule = \"zb-v\"\nschedule_times = \"fast\"\n"),
             "t.toml:3: pipeline.schedule_times = \"fast\": must be one of \"auto\", \"unit\", \"measured\"");
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"zb-h1\"\nschedule_times = \"measured\"\n"
                       "rebalance = true\n"),
            "t.toml:3: pipeline.schedule_times = \"measured\": cannot be combined with "
            "pipeline.rebalance = true (t.toml:4) (a move changes the stage times the schedule was "
            "placed at)");
}

// With pipeline.auto the key applies (auto may choose zb-h1 or zb-v), and it
// travels in the text rank 0 writes for the others, every key set there.
TEST(Deck, ScheduleTimesTravelWithAnAutoDeck) {
  const pt::Deck deck = pt::parse_deck_text("[pipeline]\nauto = true\nschedule_times = \"unit\"\n", "t.toml", {});
  const pt::Deck again = pt::parse_deck_text(pt::deck_to_toml(deck), "resolved", {});
  EXPECT_EQ(again.pipeline.schedule_times, pt::ScheduleTimesKind::Unit);
  EXPECT_FALSE(pt::zero_bubble_placed_at_measured_times(again));
}

// "auto" (the default) places a zero-bubble schedule at measured times
// unless units may move under it; "unit" and "measured" say which.
TEST(Deck, ScheduleTimesAutoMeansMeasuredForZeroBubbleWithoutRebalancing) {
  pt::Deck d;
  pt::PipelineConfig& p = d.pipeline;
  EXPECT_EQ(p.schedule_times, pt::ScheduleTimesKind::Auto);
  p.schedule = pt::ScheduleKind::OneFOneB;
  EXPECT_FALSE(pt::places_at_measured_times(d));
  for (const char* zb : {"zb-h1", "zb-v"}) {
    p.schedule = pt::kind_named<pt::ScheduleKind>(zb);
    d.rebalance.enabled = false;
    p.schedule_times = pt::ScheduleTimesKind::Auto;
    EXPECT_TRUE(pt::places_at_measured_times(d)) << zb;
    p.schedule_times = pt::ScheduleTimesKind::Unit;
    EXPECT_FALSE(pt::places_at_measured_times(d)) << zb;
    p.schedule_times = pt::ScheduleTimesKind::Measured;
    EXPECT_TRUE(pt::places_at_measured_times(d)) << zb;
    p.schedule_times = pt::ScheduleTimesKind::Auto;
    d.rebalance.enabled = true;
    EXPECT_FALSE(pt::places_at_measured_times(d)) << zb;
  }
}

TEST(DeckErrors, StepWeightGradsNeedAScheduleWithoutW) {
  EXPECT_EQ(text_error("[pipeline]\nschedule = \"zb-h1\"\nweight_grad = \"step\"\n"),
            "t.toml:3: pipeline.weight_grad: only applies with pipeline.schedule = \"gpipe\", "
            "\"1f1b\" or \"interleaved\"; remove it or change that key");
  EXPECT_HAS(text_error("[pipeline]\nschedule = \"1f1b\"\nweight_grad = \"batch\"\n"),
             "t.toml:3: pipeline.weight_grad = \"batch\": must be one of \"micro_batch\", \"step\"");
  EXPECT_EQ(text_error("[pipeline]\nweight_grad = \"step\"\nrecompute = \"auto\"\nmemory_budget_mb = 64.0\n"),
            "t.toml:3: pipeline.recompute: \"auto\" cannot be combined with pipeline.weight_grad = "
            "\"step\" (t.toml:2) (every micro-batch keeps its weight-gradient inputs until the step's "
            "pass, which recomputation does not drop); give a fixed policy");
}

TEST(DeckErrors, KeysOfAnotherModelOrDataTypeAreRejected) {
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\nhidden_dim = 64\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.hidden_dim: only applies with model.type = \"mlp\"; remove it or change that key");
  EXPECT_EQ(text_error("[model]\nd_model = 64\n"),
            "t.toml:2: model.d_model: only applies with model.type = \"gpt\" or \"hybrid\"; remove it or change that key");
  EXPECT_HAS(text_error("[model]\ntype = \"gpt\"\n[data]\ntype = \"markov\"\npath = \"x.h5\"\n"),
             "t.toml:5: data.path: only applies with data.type = \"hdf5\"");
}

TEST(DeckErrors, CnnNeedsImagesAndGroupsDividingWidth) {
  EXPECT_EQ(text_error("[model]\ntype = \"cnn\"\n"),
            "t.toml:2: model.type = \"cnn\": trains on data.type = \"images\" or \"image_files\", not "
            "data.type = \"synthetic\" (default)");
  EXPECT_EQ(text_error("[model]\ntype = \"cnn\"\nwidth = 6\nnorm_groups = 4\n[data]\ntype = \"images\"\n"),
            "t.toml:4: model.norm_groups = 4: must divide model.width = 6 (t.toml:3) (every stage's "
            "width is a multiple of it)");
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\nstage_blocks = 2\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.stage_blocks: only applies with model.type = \"cnn\" or \"hybrid\"; remove it or change that key");
  EXPECT_EQ(text_error("[model]\ntype = \"cnn\"\nnorm = \"layer\"\n[data]\ntype = \"images\"\n"),
            "t.toml:3: model.norm = \"layer\": must be one of \"group\", \"batch\"");
  // Batch normalisation has no groups: norm_groups need not divide width;
  // with replicas, the replicas share their statistics (test_cnn_equivalence).
  const pt::Deck batch = pt::parse_deck_text(
      "[model]\ntype = \"cnn\"\nwidth = 6\nnorm_groups = 4\nnorm = \"batch\"\n"
      "[data]\ntype = \"images\"\n[pipeline]\nstages = 2\n",
      "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(batch, 2), 2);
  EXPECT_EQ(pt::check_deck_layout(batch, 4), 2);
}

// model.activation's default is the family's: gelu for the mlp, relu for
// the cnn and the hybrid (ModelFamily::key_defaults), whatever the order of
// the keys; a value the deck writes is kept; the resolved deck writes the
// value used, so it reads back the same; a gpt does not take the key.
TEST(DeckDefaults, ActivationDefaultsPerFamily) {
  using pt::ActivationKind;
  EXPECT_EQ(pt::parse_deck_text("", "t.toml", {}).model.activation, ActivationKind::Gelu);
  for (const char* type : {"cnn", "hybrid"}) {
    const std::string images = std::string("[data]\ntype = \"images\"\n[model]\ntype = \"") + type + "\"\n";
    const pt::Deck plain = pt::parse_deck_text(images, "t.toml", {});
    EXPECT_EQ(plain.model.activation, ActivationKind::Relu) << type;
    EXPECT_EQ(plain.where("model.activation"), "t.toml: model.activation") << type << ": not the deck's";
    EXPECT_HAS(pt::deck_to_toml(plain), "activation = \"relu\"");
    const pt::Deck gelu = pt::parse_deck_text(
        std::string("[model]\nactivation = \"gelu\"\ntype = \"") + type + "\"\n[data]\ntype = \"images\"\n",
        "t.toml", {});
    EXPECT_EQ(gelu.model.activation, ActivationKind::Gelu) << type << ": the key before the type";
    EXPECT_EQ(pt::parse_deck_text(pt::deck_to_toml(gelu), "resolved", {}).model.activation, ActivationKind::Gelu);
    EXPECT_EQ(pt::parse_deck_text(images, "t.toml", {"model.activation=gelu"}).model.activation,
              ActivationKind::Gelu) << type;
  }
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\nactivation = \"relu\"\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.activation: only applies with model.type = \"mlp\" or \"cnn\" or \"hybrid\"; "
            "remove it or change that key");
}

// The hybrid family: the cnn's keys and the GPT block's, on images.
TEST(DeckErrors, HybridNeedsImagesAndHeadsDividingWidth) {
  EXPECT_EQ(text_error("[model]\ntype = \"hybrid\"\n[data]\ntype = \"markov\"\n"),
            "t.toml:2: model.type = \"hybrid\": trains on data.type = \"images\" or \"image_files\", not "
            "data.type = \"markov\" (t.toml:4)");
  EXPECT_EQ(text_error("[model]\ntype = \"hybrid\"\nd_model = 30\nheads = 4\n[data]\ntype = \"images\"\n"),
            "t.toml:4: model.heads = 4: must divide model.d_model = 30 (t.toml:3)");
  EXPECT_EQ(text_error("[model]\ntype = \"hybrid\"\nseq_len = 8\n[data]\ntype = \"images\"\n"),
            "t.toml:3: model.seq_len: only applies with model.type = \"gpt\"; remove it or change that key");

  // Attention over every token: the hybrid's only, and the reference kernels'.
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\ncausal = false\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.causal: only applies with model.type = \"hybrid\"; remove it or change that key");
  EXPECT_EQ(text_error("[model]\ntype = \"hybrid\"\nattention = \"fused\"\ncausal = false\n[data]\n"
                       "type = \"images\"\n"),
            "t.toml:4: model.causal = false: the fused attention kernels are causal only; with "
            "model.attention = \"fused\" (t.toml:3) keep model.causal = true, or use model.attention = "
            "\"reference\"");
}

TEST(DeckErrors, GptNeedsTokenDataAndHeadsDividingWidth) {
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\n"),
            "t.toml:2: model.type = \"gpt\": needs token data, data.type = \"markov\" or \"hdf5\", not "
            "data.type = \"synthetic\" (default)");
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\nd_model = 100\nheads = 8\n[data]\ntype = \"markov\"\n"),
            "t.toml:4: model.heads = 8: must divide model.d_model = 100 (t.toml:3)");
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\n[data]\ntype = \"hdf5\"\n"),
            "t.toml:4: data.type = \"hdf5\": needs data.path (the token file)");
  EXPECT_EQ(text_error("[data]\ntype = \"markov\"\n"),
            "t.toml: model.type = \"mlp\": trains on data.type = \"synthetic\" or \"image_files\", not data.type = \"markov\" "
            "(t.toml:2)");
  EXPECT_HAS(text_error("[model]\ntype = \"gpt\"\n[data]\ntype = \"markov\"\nshuffle = true\n"),
             "data.shuffle: only applies with data.type = \"hdf5\"");
}

// model.attention = "fused" (#42): a GPT key; on CUDA only in bf16 (cuDNN's
// SDPA); on the CPU in every precision.
TEST(DeckErrors, FusedAttentionIsAGptKeyAndNeedsBf16OnCuda) {
  const std::string gpt = "[model]\ntype = \"gpt\"\nattention = \"fused\"\n[data]\ntype = \"markov\"\n";
  const std::string cuda = gpt + "[training]\ndevice = \"cuda\"\n";
  EXPECT_EQ(text_error(cuda),
            "t.toml:3: model.attention = \"fused\": on CUDA it is cuDNN's bf16 attention and needs "
            "training.precision = \"bf16\", not training.precision = \"fp32\" (default); use "
            "model.attention = \"reference\" in other precisions");
  EXPECT_HAS(text_error(cuda + "precision = \"fp16\"\n"),
             "needs training.precision = \"bf16\", not training.precision = \"fp16\" (t.toml:8)");
  const std::string narrow = "[model]\ntype = \"gpt\"\nattention = \"fused\"\nd_model = 40\nheads = 4\n"
                             "[data]\ntype = \"markov\"\n[training]\ndevice = \"cuda\"\nprecision = \"bf16\"\n";
  EXPECT_EQ(text_error(narrow),
            "t.toml:3: model.attention = \"fused\": on CUDA it is cuDNN's bf16 attention, whose head "
            "width d_model / heads must be a multiple of 8 and at most 128, not 10 (model.d_model = 40 "
            "(t.toml:4), model.heads = 4 (t.toml:5)); use model.attention = \"reference\"");
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\nattention = \"flash\"\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.attention = \"flash\": must be one of \"reference\", \"fused\"");
  EXPECT_EQ(text_error("[model]\nattention = \"fused\"\n"),
            "t.toml:2: model.attention: only applies with model.type = \"gpt\" or \"hybrid\"; remove it or change that key");
  EXPECT_EQ(pt::parse_deck_text(cuda + "precision = \"bf16\"\n", "t.toml", {}).model.gpt.attention,
            pt::AttentionKind::Fused);
  EXPECT_EQ(pt::parse_deck_text(gpt + "[training]\nprecision = \"fp16\"\n", "t.toml", {}).model.gpt.attention,
            pt::AttentionKind::Fused);
  // deck_to_toml writes it, and it reads back.
  const pt::Deck deck = pt::parse_deck_text(gpt, "t.toml", {});
  const std::string text = pt::deck_to_toml(deck);
  EXPECT_HAS(text, "attention = \"fused\"");
  EXPECT_EQ(pt::parse_deck_text(text, "resolved.toml", {}).model.gpt.attention, pt::AttentionKind::Fused);
}

// model.vocab_multiple (#42): a GPT key, a whole number from 1 (no padding)
// up; 0, a negative or an absurd multiple is refused naming file, line and
// the range; written by deck_to_toml, and read back.
TEST(DeckErrors, VocabMultipleIsAPositiveGptKey) {
  const std::string gpt = "[model]\ntype = \"gpt\"\n";
  const std::string markov = "[data]\ntype = \"markov\"\n";
  EXPECT_EQ(text_error(gpt + "vocab_multiple = 0\n" + markov),
            "t.toml:3: model.vocab_multiple = 0: must be in [1, 65536]");
  EXPECT_EQ(text_error(gpt + "vocab_multiple = -128\n" + markov),
            "t.toml:3: model.vocab_multiple = -128: must be in [1, 65536]");
  EXPECT_EQ(text_error(gpt + "vocab_multiple = 131072\n" + markov),
            "t.toml:3: model.vocab_multiple = 131072: must be in [1, 65536]");
  EXPECT_HAS(text_error(gpt + "vocab_multiple = 1.5\n" + markov), "model.vocab_multiple");
  EXPECT_EQ(text_error("[model]\nvocab_multiple = 128\n"),
            "t.toml:2: model.vocab_multiple: only applies with model.type = \"gpt\"; remove it or change that key");
  const pt::Deck deck = pt::parse_deck_text(gpt + "vocab_size = 200\nvocab_multiple = 128\n" + markov, "t.toml", {});
  EXPECT_EQ(deck.model.gpt.vocab_multiple, 128);
  EXPECT_EQ(deck.model.gpt.padded_vocab(), 256);
  EXPECT_EQ(pt::parse_deck_text(gpt + markov, "t.toml", {}).model.gpt.vocab_multiple, 1);  // default: none
  const std::string text = pt::deck_to_toml(deck);
  EXPECT_HAS(text, "vocab_multiple = 128");
  EXPECT_EQ(pt::parse_deck_text(text, "resolved.toml", {}).model.gpt.padded_vocab(), 256);
}

TEST(DeckErrors, BooleanKeysNeedBooleans) {
  EXPECT_EQ(text_error("[model]\ntype = \"gpt\"\n[data]\ntype = \"hdf5\"\npath = \"a.h5\"\nshuffle = 1\n"),
            "t.toml:6: data.shuffle: expected a boolean (true or false), got an integer (1)");
}

TEST(DeckOverrides, ValuesAreTomlAndBareWordsAreStrings) {
  pt::Deck deck = pt::parse_deck_text(
      "[training]\nsteps = 10\n", "t.toml",
      {"training.steps=3", "training.lr=0.5", "model.activation=relu", "pipeline.partition=[2, 6]",
       "output.dir = \"runs/a b\"", "training.steps=4", "output.log_every=2", "output.dir=2024"});
  EXPECT_EQ(deck.training.steps, 4);  // the last --set wins
  EXPECT_EQ(deck.training.lr, 0.5);
  EXPECT_EQ(deck.model.activation, pt::ActivationKind::Relu);
  EXPECT_EQ(deck.pipeline.partition, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(deck.output.dir, "2024");  // a string key takes the text as written
  EXPECT_EQ(deck.key_origin.at("training.steps"), "--set training.steps=4");
  EXPECT_EQ(deck.where("model.activation"), "--set model.activation=relu: model.activation");
}

TEST(DeckOverrides, BadFormNamesTheArgument) {
  EXPECT_EQ(text_error("", {"training.lr"}),
            "--set training.lr: expected section.key=value, e.g. --set training.lr=0.01");
  EXPECT_HAS(text_error("", {"lr=0.1"}), "--set lr=0.1: the key must name its section");
  EXPECT_HAS(text_error("", {".lr=0.1"}), "--set .lr=0.1: the key must name its section");
}

TEST(DeckOverrides, UnknownKeyOrSectionUsesTheSameMessages) {
  EXPECT_EQ(text_error("", {"pipeline.microbatches=4"}),
            "--set pipeline.microbatches=4: pipeline.microbatches: unknown key; did you mean 'micro_batches'?");
  EXPECT_EQ(text_error("", {"pipe.stages=4"}),
            "--set pipe.stages=4: [pipe]: unknown section; the sections are [model], [data], [training], "
            "[pipeline], [data_parallel], [rebalance], [slowdown], [output]");
}

TEST(DeckOverrides, TypeRangeAndConsistencyErrorsPointAtTheOverride) {
  EXPECT_EQ(text_error("", {"training.steps=ten"}),
            "--set training.steps=ten: training.steps: expected an integer, got a string (\"ten\")");
  EXPECT_EQ(text_error("", {"training.beta2=1.5"}),
            "--set training.beta2=1.5: training.beta2 = 1.5: must be in [0, 1)");
  EXPECT_EQ(text_error("[training]\nbatch_size = 32\n", {"pipeline.micro_batches=3"}),
            "t.toml:2: training.batch_size = 32: must be divisible by pipeline.micro_batches = 3 "
            "(--set pipeline.micro_batches=3)");
}

// ---- moved keys ------------------------------------------------------------
// Ten keys left [pipeline] for [data_parallel], [rebalance] and [slowdown]
// (docs/decks.md, "Moved keys"). The old names set the same fields, each
// with one notice; messages name a key as the deck wrote it.

// Every moved key, under its old name and under its new one, each on the
// same line of its text (so the origins agree too).
const char* const kOldNames =
    "[pipeline]\ndata_parallel = 2\ndp_reduction = \"ordered\"\ndp_bucket_mb = 0.5\n#\n"
    "rebalance = true\nrebalance_threshold = 2.5\nrebalance_every = 7\nrebalance_margin = 0.125\n#\n"
    "slowdown_rank = 1\nslowdown_factor = 3.0\nslowdown_from_step = 4\n";
const char* const kNewNames =
    "[data_parallel]\nreplicas = 2\nreduction = \"ordered\"\nbucket_mb = 0.5\n[rebalance]\n"
    "enabled = true\nthreshold = 2.5\nevery = 7\nmargin = 0.125\n[slowdown]\n"
    "rank = 1\nfactor = 3.0\nfrom_step = 4\n";

// The deck of `text` and the notices its reading gave.
pt::Deck read_noting(const std::string& text, Strings& notices, const Strings& overrides = {}) {
  return pt::parse_deck_text(text, "t.toml", overrides, [&](const std::string& n) { notices.push_back(n); });
}

TEST(DeckMovedKeys, OldAndNewNamesGiveTheSameDeck) {
  Strings old_notices, new_notices;
  const pt::Deck old_deck = read_noting(kOldNames, old_notices);
  const pt::Deck new_deck = read_noting(kNewNames, new_notices);
  for (const pt::Deck* d : {&old_deck, &new_deck}) {
    EXPECT_EQ(d->data_parallel.replicas, 2);
    EXPECT_EQ(d->data_parallel.reduction, pt::DpReductionKind::Ordered);
    EXPECT_EQ(d->data_parallel.bucket_mb, 0.5);
    EXPECT_TRUE(d->rebalance.enabled);
    EXPECT_EQ(d->rebalance.threshold, 2.5);
    EXPECT_EQ(d->rebalance.every, 7);
    EXPECT_EQ(d->rebalance.margin, 0.125);
    EXPECT_EQ(d->slowdown.rank, 1);
    EXPECT_EQ(d->slowdown.factor, 3.0);
    EXPECT_EQ(d->slowdown.from_step, 4);
  }
  EXPECT_EQ(pt::deck_to_toml(old_deck), pt::deck_to_toml(new_deck));
  EXPECT_EQ(old_deck.key_origin, new_deck.key_origin);
  EXPECT_EQ(old_deck.key_origin.at("rebalance.every"), "t.toml:8");
  // Only the record of how each key was written differs.
  EXPECT_EQ(old_deck.written_as.size(), 10u);
  EXPECT_EQ(old_deck.written_as.at("slowdown.from_step"), "pipeline.slowdown_from_step");
  EXPECT_TRUE(new_deck.written_as.empty());
  EXPECT_EQ(new_notices, Strings{});
}

TEST(DeckMovedKeys, OneNoticePerOldNameNamesFileLineOldAndNewKey) {
  Strings notices;
  read_noting(kOldNames, notices, {"pipeline.rebalance_every=9"});
  ASSERT_EQ(notices.size(), 10u);  // the --set of an old name already read adds none
  EXPECT_EQ(notices[0], "t.toml:2: pipeline.data_parallel is now data_parallel.replicas; the old name still works");
  EXPECT_EQ(notices[5], "t.toml:8: pipeline.rebalance_every is now rebalance.every; the old name still works");
  EXPECT_EQ(notices[9], "t.toml:13: pipeline.slowdown_from_step is now slowdown.from_step; the old name still works");
}

// The name of the replica check (#44) is an old name of
// data_parallel.check_every; the message check is a [pipeline] key.
TEST(DeckMovedKeys, ReplicaCheckEveryIsDataParallelCheckEvery) {
  Strings notices;
  const pt::Deck deck = read_noting("[pipeline]\nreplica_check_every = 7\ncheck_messages = true\n", notices);
  EXPECT_EQ(deck.data_parallel.check_every, 7);
  EXPECT_TRUE(deck.pipeline.check_messages);
  EXPECT_EQ(notices, (Strings{"t.toml:2: pipeline.replica_check_every is now data_parallel.check_every; the old name still works"}));
  EXPECT_EQ(pt::parse_deck_text("", "t.toml", {}).data_parallel.check_every, 100);
  EXPECT_FALSE(pt::parse_deck_text("", "t.toml", {}).pipeline.check_messages);
  try {
    pt::parse_deck_text("[data_parallel]\ncheck_every = -1\n", "t.toml", {});
    FAIL() << "a negative check_every was accepted";
  } catch (const pt::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.toml:2: data_parallel.check_every"), std::string::npos) << e.what();
  }
}

TEST(DeckMovedKeys, SetTakesTheOldNameToo) {
  Strings notices;
  const pt::Deck deck = read_noting("", notices, {"pipeline.rebalance=true", "pipeline.rebalance_every=5"});
  EXPECT_TRUE(deck.rebalance.enabled);
  EXPECT_EQ(deck.rebalance.every, 5);
  EXPECT_EQ(deck.key_origin.at("rebalance.every"), "--set pipeline.rebalance_every=5");
  EXPECT_EQ(deck.where("rebalance.every"), "--set pipeline.rebalance_every=5: pipeline.rebalance_every");
  EXPECT_EQ(notices, (Strings{"--set pipeline.rebalance=true: pipeline.rebalance is now rebalance.enabled; the old name still works",
                              "--set pipeline.rebalance_every=5: pipeline.rebalance_every is now rebalance.every; the old name still works"}));
  // A --set overrides the file's value under either name.
  const pt::Deck over = pt::parse_deck_text(kNewNames, "t.toml", {"pipeline.rebalance_every=3"});
  EXPECT_EQ(over.rebalance.every, 3);
  EXPECT_EQ(over.where("rebalance.every"), "--set pipeline.rebalance_every=3: pipeline.rebalance_every");
  const pt::Deck back = pt::parse_deck_text(kOldNames, "t.toml", {"rebalance.every=3"});
  EXPECT_EQ(back.rebalance.every, 3);
  EXPECT_EQ(back.where("rebalance.every"), "--set rebalance.every=3: rebalance.every");
}

TEST(DeckMovedKeys, BothNamesAtOnceAreAnErrorNamingBothPlaces) {
  EXPECT_EQ(text_error("[pipeline]\nrebalance_every = 5\n[rebalance]\nenabled = true\nevery = 6\n"),
            "t.toml:5: rebalance.every and pipeline.rebalance_every (t.toml:2) name the same key; write "
            "it once, as rebalance.every (pipeline.rebalance_every is its old name)");
  EXPECT_EQ(text_error("[slowdown]\nrank = 0\n[pipeline]\nslowdown_rank = 1\n"),
            "t.toml:4: pipeline.slowdown_rank and slowdown.rank (t.toml:2) name the same key; write it "
            "once, as slowdown.rank (pipeline.slowdown_rank is its old name)");
  EXPECT_EQ(text_error("", {"data_parallel.replicas=2", "pipeline.data_parallel=2"}),
            "--set pipeline.data_parallel=2: pipeline.data_parallel and data_parallel.replicas "
            "(--set data_parallel.replicas=2) name the same key; write it once, as "
            "data_parallel.replicas (pipeline.data_parallel is its old name)");
}

// A message about a key names it as written, and words its rule in the
// same names.
TEST(DeckMovedKeys, MessagesNameTheKeyAsWritten) {
  EXPECT_EQ(text_error("[pipeline]\nrebalance_every = 4\n"),
            "t.toml:2: pipeline.rebalance_every: only applies with pipeline.rebalance = true; remove it "
            "or change that key");
  EXPECT_EQ(text_error("[rebalance]\nevery = 4\n"),
            "t.toml:2: rebalance.every: only applies with rebalance.enabled = true; remove it or change "
            "that key");
  EXPECT_EQ(text_error("[slowdown]\nfactor = 0.5\nrank = 0\n"),
            "t.toml:2: slowdown.factor = 0.5: must be in [1, 1000]");
  EXPECT_EQ(text_error("[pipeline]\nslowdown_factor = 0.5\nslowdown_rank = 0\n"),
            "t.toml:2: pipeline.slowdown_factor = 0.5: must be in [1, 1000]");
  EXPECT_EQ(text_error("", {"pipeline.rebalance_evry=3"}),
            "--set pipeline.rebalance_evry=3: pipeline.rebalance_evry: unknown key; did you mean "
            "'rebalance.every' (formerly pipeline.rebalance_every)?");
}

TEST(DeckMovedKeys, TheEchoWritesTheNewSections) {
  const std::string text = pt::deck_to_toml(pt::parse_deck_text(kOldNames, "t.toml", {}));
  for (const char* part : {"\n[data_parallel]\nreplicas = 2 ", "\n[rebalance]\nenabled = true ",
                           "\nevery = 7 ", "\n[slowdown]\nrank = 1 ", "\nfrom_step = 4 "})
    EXPECT_HAS(text, part);
  for (const char* old_name : {"rebalance_every", "dp_reduction", "slowdown_rank", "\nrebalance ="})
    EXPECT_EQ(text.find(old_name), std::string::npos) << old_name;
}

// ---- deck_to_toml ----------------------------------------------------------

void expect_same_deck(const pt::Deck& a, const pt::Deck& b) {
  EXPECT_EQ(a.model.type, b.model.type);
  EXPECT_EQ(a.model.mlp.input_dim, b.model.mlp.input_dim);
  EXPECT_EQ(a.model.mlp.hidden_dim, b.model.mlp.hidden_dim);
  EXPECT_EQ(a.model.mlp.output_dim, b.model.mlp.output_dim);
  EXPECT_EQ(a.model.mlp.depth, b.model.mlp.depth);
  EXPECT_EQ(a.model.activation, b.model.activation);
  EXPECT_EQ(a.model.mlp.loss, b.model.mlp.loss);
  EXPECT_EQ(a.model.init_seed, b.model.init_seed);
  EXPECT_EQ(a.data.type, b.data.type);
  EXPECT_EQ(a.data.samples, b.data.samples);
  EXPECT_EQ(a.data.seed, b.data.seed);
  const pt::TrainingConfig &t = a.training, &u = b.training;
  EXPECT_EQ(t.steps, u.steps);
  EXPECT_EQ(t.batch_size, u.batch_size);
  EXPECT_EQ(t.optimizer, u.optimizer);
  EXPECT_EQ(t.lr, u.lr);  // exact: floats must round-trip bit for bit
  EXPECT_EQ(t.min_lr, u.min_lr);
  EXPECT_EQ(t.warmup_steps, u.warmup_steps);
  EXPECT_EQ(t.lr_schedule, u.lr_schedule);
  EXPECT_EQ(t.momentum, u.momentum);
  EXPECT_EQ(t.beta1, u.beta1);
  EXPECT_EQ(t.beta2, u.beta2);
  EXPECT_EQ(t.eps, u.eps);
  EXPECT_EQ(t.weight_decay, u.weight_decay);
  EXPECT_EQ(t.grad_clip, u.grad_clip);
  EXPECT_EQ(t.blas_threads, u.blas_threads);
  EXPECT_EQ(a.pipeline.stages, b.pipeline.stages);
  EXPECT_EQ(a.pipeline.micro_batches, b.pipeline.micro_batches);
  EXPECT_EQ(a.pipeline.schedule, b.pipeline.schedule);
  EXPECT_EQ(a.pipeline.schedule_file, b.pipeline.schedule_file);
  EXPECT_EQ(a.pipeline.partition, b.pipeline.partition);
  EXPECT_EQ(a.pipeline.partition_strategy, b.pipeline.partition_strategy);
  EXPECT_EQ(a.pipeline.timeout_s, b.pipeline.timeout_s);
  EXPECT_EQ(a.output.dir, b.output.dir);
  EXPECT_EQ(a.output.log_every, b.output.log_every);
}

TEST(DeckPartition, StrategyNameOrCountList) {
  const std::string head = "[model]\ntype = \"mlp\"\ndepth = 8\n[pipeline]\n";
  pt::Deck named = pt::parse_deck_text(
      head + "partition = \"balanced\"\nmemory_budget_mb = 64.0\n", "t.toml", {});
  EXPECT_EQ(named.pipeline.partition_strategy, pt::PartitionStrategy::Balanced);
  EXPECT_TRUE(named.pipeline.partition.empty());
  pt::Deck listed = pt::parse_deck_text(head + "partition = [6, 2]\n", "t.toml", {});
  EXPECT_EQ(listed.pipeline.partition_strategy, pt::PartitionStrategy::Explicit);
  EXPECT_EQ(listed.pipeline.partition, (std::vector<int64_t>{6, 2}));
  pt::Deck back = pt::parse_deck_text(pt::deck_to_toml(named), "resolved.toml", {});
  EXPECT_EQ(back.pipeline.partition_strategy, pt::PartitionStrategy::Balanced);
  EXPECT_EQ(text_error(head + "partition = \"fastest\"\n"),
            "t.toml:5: pipeline.partition = \"fastest\": must be one of \"uniform\", \"time\", "
            "\"memory\", \"balanced\", or a list of per-stage unit counts");
  EXPECT_EQ(text_error(head + "partition = \"balanced\"\n"),
            "t.toml:5: pipeline.partition = \"balanced\": needs pipeline.memory_budget_mb, the "
            "memory each stage may use");
}

// data.path and data.eval_path: a string (a file or a glob pattern) or a
// list; the resolved deck writes each form back as it was given.
TEST(DeckData, TokenPathIsAStringOrAList) {
  const std::string head = "[model]\ntype = \"gpt\"\n[data]\ntype = \"hdf5\"\n";
  pt::Deck one = pt::parse_deck_text(head + "path = \"runs/c/train_*.h5\"\ntokenizer = \"runs/c/tokenizer.json\"\n",
                                     "t.toml", {});
  EXPECT_EQ(one.data.path, "runs/c/train_*.h5");
  EXPECT_TRUE(one.data.path_list.empty());
  EXPECT_EQ(one.data.tokenizer, "runs/c/tokenizer.json");
  pt::Deck listed = pt::parse_deck_text(
      head + "path = [\"a.h5\", \"b_*.h5\"]\neval_path = [\"e.h5\"]\n[training]\neval_every = 2\n", "t.toml", {});
  EXPECT_TRUE(listed.data.path.empty());
  EXPECT_EQ(listed.data.path_list, (Strings{"a.h5", "b_*.h5"}));
  EXPECT_EQ(listed.data.eval_path_list, (Strings{"e.h5"}));
  for (const pt::Deck& d : {one, listed}) {
    const std::string text = pt::deck_to_toml(d);
    const pt::Deck back = pt::parse_deck_text(text, "resolved.toml", {});
    EXPECT_EQ(back.data.path, d.data.path);
    EXPECT_EQ(back.data.path_list, d.data.path_list);
    EXPECT_EQ(back.data.eval_path_list, d.data.eval_path_list);
    EXPECT_EQ(pt::deck_to_toml(back), text);
  }
  EXPECT_HAS(pt::deck_to_toml(listed), "path = [\"a.h5\", \"b_*.h5\"]");
  // --set takes either form; a later string replaces a list and the other way round.
  pt::Deck set = pt::parse_deck_text(head + "path = [\"a.h5\"]\n", "t.toml", {"data.path=x.h5"});
  EXPECT_EQ(set.data.path, "x.h5");
  EXPECT_TRUE(set.data.path_list.empty());
  set = pt::parse_deck_text(head + "path = \"a.h5\"\n", "t.toml", {"data.path=[\"x.h5\", \"y.h5\"]"});
  EXPECT_EQ(set.data.path_list, (Strings{"x.h5", "y.h5"}));
  EXPECT_TRUE(set.data.path.empty());
  // Wrong types and empty values.
  EXPECT_EQ(text_error(head + "path = 3\n"),
            "t.toml:5: data.path: expected a string (a file or a glob pattern) or an array of strings, got an "
            "integer (3)");
  EXPECT_HAS(text_error(head + "path = [\"a.h5\", 2]\n"), "t.toml:5: data.path entry 1");
  EXPECT_EQ(text_error(head + "path = []\n"),
            "t.toml:5: data.path: names no token file (an empty string or list); give a file, a glob pattern or "
            "a list of them");
  EXPECT_EQ(text_error(head + "path = \"a.h5\"\neval_path = []\n[training]\neval_every = 2\n"),
            "t.toml:6: data.eval_path: names no token file (an empty string or list); give a file, a glob "
            "pattern or a list of them");
  EXPECT_HAS(text_error("[model]\ntype = \"gpt\"\n[data]\ntype = \"markov\"\ntokenizer = \"bytes\"\n"),
             "t.toml:5: data.tokenizer: only applies with data.type = \"hdf5\"");
}

TEST(DeckToToml, DefaultsRoundTripAndEveryKeyIsWritten) {
  pt::Deck deck;
  std::string text = pt::deck_to_toml(deck);
  for (const char* part : {"[model]", "[data]", "[training]", "[pipeline]", "[output]", "schedule_file = \"\"",
                           "partition = \"uniform\"", "timeout_s = 120.0", "lr = 0.001", "min_lr = 0.0", "# "}) {
    EXPECT_HAS(text, part);
  }
  expect_same_deck(pt::parse_deck_text(text, "resolved.toml", {}), deck);
}

TEST(DeckToToml, AwkwardValuesRoundTripExactly) {
  pt::Deck deck;
  deck.model.init_seed = std::numeric_limits<int64_t>::max();
  deck.data.seed = 0;
  deck.training.lr = 1.0 / 3.0;
  deck.training.min_lr = 5e-324;  // the smallest denormal
  deck.training.eps = 1e-300;
  deck.training.beta1 = 0.1;
  deck.training.beta2 = 0.9999999999999999;
  deck.training.grad_clip = 1e20;
  deck.training.weight_decay = 123456789.0;
  deck.pipeline.timeout_s = 0.30000000000000004;
  deck.pipeline.partition = {1, 2, 5};
  deck.pipeline.partition_strategy = pt::PartitionStrategy::Explicit;
  deck.pipeline.schedule = pt::ScheduleKind::File;
  deck.pipeline.schedule_file = "dir with \"quotes\"\\and\ttab\nnewline \x01 \xc3\xa9.txt";
  deck.output.dir = "runs/\xe2\x9c\x93";
  std::string text = pt::deck_to_toml(deck);
  pt::Deck back = pt::parse_deck_text(text, "resolved.toml", {});
  expect_same_deck(back, deck);
  EXPECT_EQ(pt::deck_to_toml(back), text);
}

// ---- check_deck_layout -----------------------------------------------------

TEST(DeckLayout, StagesMustMatchTheRankCount) {
  pt::Deck deck = pt::parse_deck_text("[pipeline]\nstages = 4\n", "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(deck, 4), 4);
  EXPECT_HAS(input_error([&] { pt::check_deck_layout(deck, 2); }),
             "t.toml:2: pipeline.stages = 4 but the job has 2 MPI ranks; pipetrain runs one stage per rank");
  pt::Deck any = pt::parse_deck_text("", "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(any, 3), 3);
}

TEST(DeckLayout, EachStageNeedsALayer) {
  pt::Deck deck = pt::parse_deck_text("[model]\ndepth = 3\n", "t.toml", {});
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(deck, 4); }),
            "t.toml:2: model.depth = 3: must be >= the number of stages (4, one per MPI rank); "
            "each stage needs at least one Linear layer");
}

TEST(DeckLayout, PartitionHasOneEntryPerStageSummingToDepth) {
  pt::Deck deck = pt::parse_deck_text("[model]\ndepth = 8\n[pipeline]\npartition = [3, 5]\n", "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(deck, 2), 2);
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(deck, 4); }),
            "t.toml:4: pipeline.partition = [3, 5]: has 2 entries but there are 4 stages; "
            "give one Linear layer count per stage");
  std::string path = deck_fixture("bad_partition.toml");
  pt::Deck bad = pt::parse_deck_file(path, {});
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(bad, 3); }),
            path + ":8: pipeline.partition = [4, 4, 4]: sums to 12 but model.depth = 8 (" + path +
                ":5); the entries count the Linear layers of each stage");
}

// A GPT splits transformer blocks (model.blocks), never model.depth, the
// MLP's key (default 8), in train and validate alike.
TEST(DeckLayout, GptPartitionCountsTransformerBlocks) {
  const std::string gpt = "[model]\ntype = \"gpt\"\nblocks = 4\n[data]\ntype = \"markov\"\n";
  pt::Deck two = pt::parse_deck_text(gpt + "[pipeline]\npartition = [2, 2]\n", "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(two, 2), 2);
  pt::Deck eight = pt::parse_deck_text(gpt, "t.toml", {"pipeline.partition=[4, 4]"});
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(eight, 2); }),
            "--set pipeline.partition=[4, 4]: pipeline.partition = [4, 4]: sums to 8 but model.blocks = 4 "
            "(t.toml:3); the entries count the transformer blocks of each stage");
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(two, 3); }),
            "t.toml:7: pipeline.partition = [2, 2]: has 2 entries but there are 3 stages; "
            "give one transformer block count per stage");
  pt::Deck uniform = pt::parse_deck_text(gpt, "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(uniform, 4), 4);
  EXPECT_EQ(input_error([&] { pt::check_deck_layout(uniform, 8); }),
            "t.toml:3: model.blocks = 4: must be >= the number of stages (8, one per MPI rank); "
            "each stage needs at least one transformer block");
}

TEST(DeckLayout, ScheduleFileMustExistAndMatch) {
  std::string path = testing::TempDir() + "pipetrain_test_deck_gpipe_p2_n2.txt";
  {
    std::ofstream out(path);
    out << pt::format_schedule(pt::generate_schedule("gpipe", 2, 2));
  }
  std::string text = "[training]\nbatch_size = 4\n[pipeline]\nmicro_batches = 2\nschedule = \"file\"\n"
                     "schedule_file = \"" + path + "\"\n";
  pt::Deck deck = pt::parse_deck_text(text, "t.toml", {});
  EXPECT_EQ(pt::check_deck_layout(deck, 2), 2);
  std::string msg = input_error([&] { pt::check_deck_layout(deck, 4); });  // 2 rank lines, 4 ranks
  EXPECT_HAS(msg, "t.toml:6: pipeline.schedule_file = \"" + path + "\": ");
  EXPECT_HAS(msg, "has 2 rank lines but the job runs 4 ranks (4 stages)");
  pt::Deck more = pt::parse_deck_text(text, "t.toml", {"pipeline.micro_batches=4"});
  msg = input_error([&] { pt::check_deck_layout(more, 2); });  // the file has 2 micro-batches
  EXPECT_HAS(msg, "t.toml:6: pipeline.schedule_file = \"" + path + "\": ");
  std::remove(path.c_str());
  msg = input_error([&] { pt::check_deck_layout(deck, 2); });
  EXPECT_HAS(msg, "t.toml:6: pipeline.schedule_file = \"" + path + "\": '" + path +
                      "': no such file; expected the schedule text file");
}

// ---- the command line ------------------------------------------------------

pt::CommandLine parse_args(Strings args) {
  args.insert(args.begin(), "pipetrain");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return pt::parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string args_error(const Strings& args) {
  return input_error([&] { parse_args(args); });
}

TEST(CommandLine, TrainAndValidate) {
  pt::CommandLine train = parse_args({"train", "--set", "training.steps=3", "d.toml", "--set=model.depth=4"});
  EXPECT_EQ(train.command, "train");
  EXPECT_EQ(train.deck_path, "d.toml");
  EXPECT_EQ(train.overrides, (Strings{"training.steps=3", "model.depth=4"}));
  pt::CommandLine validate = parse_args({"validate", "d.toml", "--ranks", "4", "--print-schedule"});
  EXPECT_EQ(validate.command, "validate");
  EXPECT_EQ(validate.ranks, 4);
  EXPECT_TRUE(validate.print_schedule);
  EXPECT_EQ(parse_args({"validate", "d.toml"}).ranks, 0);
}

TEST(CommandLine, HelpNeverExits) {
  for (const Strings& args : {Strings{}, Strings{"--help"}, Strings{"help"}, Strings{"train", "--help"}}) {
    pt::CommandLine cl = parse_args(args);
    EXPECT_EQ(cl.command, "help");
    EXPECT_HAS(cl.help_text, "Usage: pipetrain");
  }
  EXPECT_HAS(parse_args({"validate", "-h"}).help_text, "--print-schedule");
}

TEST(CommandLine, ErrorsCarryAUsageHint) {
  const std::pair<Strings, std::string> cases[] = {
      {{"frob"}, "unknown command 'frob'"},
      {{"train"}, "DECK is required"},
      {{"train", "a.toml", "b.toml"}, "b.toml"},
      {{"train", "a.toml", "--ranks", "2"}, "--ranks"},
      {{"validate", "a.toml", "--ranks", "0"}, "--ranks"},
      {{"train", "a.toml", "--set"}, "--set"},
      {{"sample", "a.toml", "--temperature", "nan"}, "expected a finite number, got nan"},
      {{"sample", "a.toml", "--seed", "-1"}, "expected a number >= 0, got -1"},
  };
  for (const auto& [args, part] : cases) {
    std::string msg = args_error(args);
    EXPECT_HAS(msg, part);
    EXPECT_HAS(msg, "usage: pipetrain train DECK");
    // The driver prefixes "pipetrain: error: "; the message must not say it again.
    EXPECT_NE(msg.rfind("pipetrain:", 0), 0u) << msg;
  }
}

}  // namespace
