// test_model_family.cpp: a model family added from outside the library. The
// "toy" family below (square Linear + ReLU units and a Linear head pinned to
// the last stage, on the synthetic teacher data) lives in this file only and
// is added by one register_model_family call; it is then listed, checked in
// decks, built, partitioned, profiled and trained like the built-in ones,
// and a pipeline of it trains bitwise as one rank alone. Needing only the
// core kernels, it also trains on a backend without the transformer kernels,
// where the "gpt" family is refused with one message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "forwarding_backend.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "error_of.hpp"

namespace pt {
namespace {

// ---- the toy family: its whole definition ----------------------------------

int64_t toy_units(const ModelConfig& m) { return m.mlp.depth; }

int64_t toy_tokens(const ModelConfig&) { return 1; }

StageInput toy_input(const ModelConfig& m, int64_t, bool) { return {Shape{m.mlp.input_dim}, DType::F32}; }

void toy_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  sm.layers.push_back(make_linear("toy" + std::to_string(u), m.mlp.input_dim, m.mlp.input_dim, m.init_seed,
                                  static_cast<uint64_t>(u), std::sqrt(2.f), init));
  sm.layers.push_back(make_activation(ActivationKind::Relu));
  sm.layer_unit.insert(sm.layer_unit.end(), {u, u});
}

void toy_end(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_linear("toy.head", m.mlp.input_dim, m.mlp.output_dim, m.init_seed,
                                  static_cast<uint64_t>(m.mlp.depth), 1.f, ParamInit::FromSeed));
  sm.layer_unit.push_back(-1);
  sm.loss = make_loss(LossKind::Mse);
  sm.loss_terms_per_sample = m.mlp.output_dim;
}

std::vector<CostUnitInfo> toy_costs(const ModelConfig& m) {
  std::vector<CostUnitInfo> units;
  const double square = 2.0 * static_cast<double>(m.mlp.input_dim * m.mlp.input_dim);
  const double d = static_cast<double>(m.mlp.input_dim), out = static_cast<double>(m.mlp.output_dim);
  for (int64_t u = 0; u < m.mlp.depth; ++u) {
    units.push_back({"toy" + std::to_string(u), true, square});
    units.back().parameters = (d + 1.0) * d;  // weight and bias
  }
  units.push_back({"head", false, 2.0 * d * out});
  units.back().parameters = (d + 1.0) * out;
  return units;
}

double toy_weight_share(const ModelConfig&) { return 0.5; }

std::string toy_describe(const ModelConfig& m) {
  return " input_dim=" + std::to_string(m.mlp.input_dim) + " output_dim=" + std::to_string(m.mlp.output_dim) +
         " depth=" + std::to_string(m.mlp.depth);
}

ModelFamily toy_family() {
  ModelFamily f;
  f.name = "toy";
  f.summary = "square Linear + ReLU units, a pinned Linear head (test only)";
  f.keys = {"input_dim", "output_dim", "depth"};
  f.data_types = {DataKind::Synthetic};
  f.data_rule = "trains on data.type = \"synthetic\"";
  f.describe = toy_describe;
  f.units_key = "depth";
  f.unit_name = "toy unit";
  f.units = toy_units;
  f.tokens_per_sample = toy_tokens;
  f.stage_input = toy_input;
  f.add_unit = toy_unit;
  f.end_stage = toy_end;
  f.cost_units = toy_costs;
  f.pinned_back = 1;
  f.weight_grad_share = toy_weight_share;
  return f;
}

// The registry call: once per process, before any test uses the family.
void register_toy() {
  static const bool registered = (register_model_family(toy_family()), true);
  (void)registered;
}

// ---- the tests ---------------------------------------------------------------

Deck toy_deck() {
  register_toy();
  Deck d;
  d.model.type = "toy";
  d.model.mlp.input_dim = 6;
  d.model.mlp.output_dim = 3;
  d.model.mlp.depth = 4;
  d.data.samples = 64;
  d.training.steps = 2;
  d.training.batch_size = 16;
  d.training.lr = 1e-2;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.timeout_s = 60;
  return d;
}

std::string error_of(const std::string& text) {
  return test::error_of([&] { parse_deck_text(text, "t.toml", {}); });
}

TEST(ModelFamily, IsListedAndNamedInDeckMessages) {
  register_toy();
  EXPECT_EQ(model_family_names(), (std::vector<std::string>{"mlp", "gpt", "cnn", "hybrid", "toy"}));
  EXPECT_THROW(register_model_family(toy_family()), InputError);  // a name is taken once
  EXPECT_EQ(error_of("[model]\ntype = \"rnn\"\n"),
            "t.toml:2: model.type = \"rnn\": must be one of \"mlp\", \"gpt\", \"cnn\", \"hybrid\", \"toy\"");
  ModelConfig unknown;
  unknown.type = "rnn";
  try {
    model_family(unknown);
    ADD_FAILURE() << "no error for an unknown family";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "model.type = \"rnn\": unknown model family; the families are \"mlp\", \"gpt\", \"cnn\", \"hybrid\", \"toy\"");
  }
}

TEST(ModelFamily, DeckKeysAreTheFamilys) {
  register_toy();
  const Deck d = parse_deck_text("[model]\ntype = \"toy\"\ndepth = 3\ninput_dim = 5\n", "t.toml", {});
  EXPECT_EQ(d.model.type, "toy");
  EXPECT_EQ(model_units(d.model), 3);
  EXPECT_EQ(error_of("[model]\ntype = \"toy\"\nhidden_dim = 8\n"),
            "t.toml:3: model.hidden_dim: only applies with model.type = \"mlp\"; remove it or change that key");
  EXPECT_EQ(error_of("[model]\ntype = \"gpt\"\ndepth = 8\n[data]\ntype = \"markov\"\n"),
            "t.toml:3: model.depth: only applies with model.type = \"mlp\" or \"toy\"; remove it or change that key");
  EXPECT_EQ(error_of("[model]\ntype = \"toy\"\n[data]\ntype = \"markov\"\n"),
            "t.toml:2: model.type = \"toy\": trains on data.type = \"synthetic\", not data.type = \"markov\" (t.toml:4)");
}

TEST(ModelFamily, BuildsPartitionsAndCostsItsUnits) {
  const Deck d = toy_deck();
  const std::vector<int64_t> units = partition_units(model_units(d.model), 2, {3, 1});
  StageModel first = build_stage(d.model, units, 0), last = build_stage(d.model, units, 1);
  EXPECT_EQ(first.layers.size(), 6u);  // 3 units of Linear + ReLU
  EXPECT_EQ(last.layers.size(), 3u);   // 1 unit and the pinned head
  EXPECT_EQ(last.layer_unit.back(), -1);
  EXPECT_FALSE(first.loss);
  ASSERT_TRUE(last.loss);
  EXPECT_EQ(last.output_shape(2), (Shape{2, 3}));
  EXPECT_EQ(first.unit_params(1).front()->name, "toy1.weight");
  const std::vector<CostUnitInfo> costs = cost_units(d.model);
  ASSERT_EQ(costs.size(), 5u);
  EXPECT_EQ(build_cost_unit_stage(d.model, 4).layers.size(), 1u);  // the head alone
  EXPECT_EQ(build_cost_unit_stage(d.model, 0).layers.size(), 2u);
  EXPECT_EQ(profile_model_description(d).rfind("toy input_dim=6 output_dim=3 depth=4;", 0), 0u);
  EXPECT_EQ(weight_grad_share(d.model), 0.5);
}

struct Outcome {
  std::vector<double> losses;
  std::vector<float> params;
};

Outcome train(const Deck& deck, MPI_Comm comm, ComputeSetup setup = {}) {
  Trainer trainer(deck, comm, std::move(setup));
  Outcome run;
  for (int64_t s = 0; s < deck.training.steps; ++s) run.losses.push_back(trainer.train_step(s).loss);
  run.params = trainer.gather_parameters();
  return run;
}

TEST(ModelFamily, TrainsAsAPipelineBitwiseAsOneRank) {
  const Deck d = toy_deck();
  const Outcome piped = train(d, MPI_COMM_WORLD);
  if (!test::is_root()) return;
  const Outcome alone = train(d, MPI_COMM_SELF);
  ASSERT_EQ(piped.losses.size(), alone.losses.size());
  for (size_t i = 0; i < alone.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(alone.losses[i]));
    EXPECT_EQ(std::memcmp(&piped.losses[i], &alone.losses[i], sizeof(double)), 0) << "step " << i;
  }
  ASSERT_EQ(piped.params.size(), alone.params.size());
  EXPECT_EQ(std::memcmp(piped.params.data(), alone.params.data(), alone.params.size() * sizeof(float)), 0);
}

// The CPU backend's core kernels and no kernel group: a backend that a
// family with kernels of its own (gpt) cannot use.
class CoreOnlyBackend final : public test::ForwardingBackend {
 public:
  const char* name() const override { return "core-only"; }
};

TEST(ModelFamily, TrainsOnABackendWithoutTransformerKernels) {
  if (!test::is_root()) return;
  const Deck d = toy_deck();
  CoreOnlyBackend core;
  ASSERT_EQ(core.kernels<TransformerKernels>(), nullptr);
  ComputeSetup setup;
  setup.backend = &core;
  const Outcome on_core = train(d, MPI_COMM_SELF, setup);
  const Outcome on_cpu = train(d, MPI_COMM_SELF);
  ASSERT_EQ(on_core.losses.size(), on_cpu.losses.size());
  for (size_t i = 0; i < on_cpu.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&on_core.losses[i], &on_cpu.losses[i], sizeof(double)), 0) << "step " << i;
}

TEST(ModelFamily, GptIsRefusedByABackendWithoutTransformerKernels) {
  if (!test::is_root()) return;
  const Deck d = pt_test::tiny_gpt(toy_deck(), 2);
  CoreOnlyBackend core;
  ComputeSetup setup;
  setup.backend = &core;
  const std::string expected =
      "model family \"gpt\" needs the transformer kernels, which backend \"core-only\" does not provide";
  try {
    Trainer trainer(d, MPI_COMM_SELF, setup);
    ADD_FAILURE() << "a GPT trainer on a backend without transformer kernels";
  } catch (const InputError& e) {
    EXPECT_EQ(e.what(), expected);
  }
  try {  // the layers ask the same way, with the same message
    gpt_kernels(core);
    ADD_FAILURE() << "no error from gpt_kernels";
  } catch (const InputError& e) {
    EXPECT_EQ(e.what(), expected);
  }
  EXPECT_EQ(&gpt_kernels(cpu_backend()), cpu_backend().kernels<TransformerKernels>());
}

}  // namespace
}  // namespace pt
