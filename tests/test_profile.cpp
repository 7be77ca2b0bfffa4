// test_profile.cpp: cost profiles (runtime/profiler, io/profile_h5).
//   - profile.h5 round-trips every field; a damaged or mismatched file is
//     refused with its own message naming the file;
//   - unit bytes equal the analytic sizes (MLP and GPT), compose exactly into
//     what the executor's memory tracking reports for a stage (the rules of
//     docs/profile.md), and into a one-stage training run's tracked peaks;
//   - times are positive, a recompute costs about a forward; the stage-chain
//     calibration makes the planner's stage sums the measured stages; every rank gets
//     the same profile; the link is measured on >= 2 ranks;
//   - a profile derived from a traced run, in memory and through trace.h5.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <tuple>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/io/profile_io.hpp"
#include "pipetrain/io/trace_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/speed_probe.hpp"
#include "pipetrain/runtime/stage_probe.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"
#include "error_of.hpp"

namespace pt {
namespace {

using test::error_of;
using test::is_root;
using test::world_rank;
using test::world_size;

Deck small_mlp() {
  Deck d;
  d.model.mlp.input_dim = 6;
  d.model.mlp.hidden_dim = 10;
  d.model.mlp.output_dim = 3;
  d.model.mlp.depth = 4;
  d.data.samples = 64;
  d.training.steps = 2;
  d.training.batch_size = 8;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.timeout_s = 60;
  return d;
}

Deck small_gpt() {
  Deck d = small_mlp();
  d.model.type = "gpt";
  d.model.gpt.vocab_size = 11;
  d.model.gpt.seq_len = 6;
  d.model.gpt.d_model = 8;
  d.model.gpt.heads = 2;
  d.model.gpt.blocks = 4;
  d.model.gpt.mlp_ratio = 2;
  d.data.type = DataKind::Markov;
  d.data.markov_order = 1;
  return d;
}

// A file name of this rank in the temporary directory.
std::string temp_path(const std::string& name) {
  return "/tmp/pt_test_profile_" + std::to_string(getpid()) + "_" + std::to_string(world_rank()) +
         "_" + name;
}

// ---- profile.h5 ----------------------------------------------------------

ModelProfile distinct_profile() {
  ModelProfile p;
  p.model = profile_model_description(small_mlp());
  p.backend = "cpu";
  p.kernels = "OpenBLAS test kernels";
  p.micro_batch_rows = 2;
  p.link.latency_s = 3.5e-6;
  p.link.bandwidth_bytes_per_s = 7.25e9;
  p.step_overhead_s = 1.0 / 3.0;
  p.stage_data_bytes = 1234.0;
  p.cache = "cold: a test's words";
  p.calibration = "stage chains [2]: a test's ratios";
  for (int u = 0; u < 3; ++u) {
    UnitCost c;
    c.name = "linear" + std::to_string(u);
    c.partitionable = u != 1;
    double* fields[] = {&c.forward_s, &c.backward_s, &c.recompute_s, &c.recompute_end_s,
                        &c.recompute_selective_s,
                        &c.optimizer_s, &c.forward_flops, &c.input_bytes, &c.output_bytes,
                        &c.stash_none_bytes, &c.stash_selective_bytes, &c.stash_always_bytes,
                        &c.workspace_bytes, &c.backward_workspace_bytes, &c.forward_workspace_bytes,
                        &c.param_bytes, &c.grad_bytes, &c.optimizer_bytes, &c.data_bytes};
    for (size_t f = 0; f < std::size(fields); ++f) *fields[f] = (u * 100.0 + f + 1.0) / 7.0;
    c.step_input_s = (u + 0.5) / 9.0;
    c.step_weight_s = (u + 0.25) / 11.0;
    p.units.push_back(c);
  }
  p.reductions.push_back({2, {3e4, 6.3e6}, {2e-5, 4.1e-3}, {}});
  p.reductions.push_back({4, {1e6}, {3e-3}, {}});
  for (MeasuredReduction& r : p.reductions) r.link = fit_reduction_link(r.replicas, r.grad_bytes, r.seconds);
  return p;
}

void expect_same(const UnitCost& a, const UnitCost& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.partitionable, b.partitionable);
  EXPECT_EQ(a.forward_s, b.forward_s);
  EXPECT_EQ(a.backward_s, b.backward_s);
  EXPECT_EQ(a.recompute_s, b.recompute_s);
  EXPECT_EQ(a.recompute_end_s, b.recompute_end_s);
  EXPECT_EQ(a.recompute_selective_s, b.recompute_selective_s);
  EXPECT_EQ(a.optimizer_s, b.optimizer_s);
  EXPECT_EQ(a.forward_flops, b.forward_flops);
  EXPECT_EQ(a.input_bytes, b.input_bytes);
  EXPECT_EQ(a.output_bytes, b.output_bytes);
  EXPECT_EQ(a.stash_none_bytes, b.stash_none_bytes);
  EXPECT_EQ(a.stash_selective_bytes, b.stash_selective_bytes);
  EXPECT_EQ(a.stash_always_bytes, b.stash_always_bytes);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.backward_workspace_bytes, b.backward_workspace_bytes);
  EXPECT_EQ(a.forward_workspace_bytes, b.forward_workspace_bytes);
  EXPECT_EQ(a.param_bytes, b.param_bytes);
  EXPECT_EQ(a.grad_bytes, b.grad_bytes);
  EXPECT_EQ(a.optimizer_bytes, b.optimizer_bytes);
  EXPECT_EQ(a.data_bytes, b.data_bytes);
  EXPECT_EQ(a.step_input_s, b.step_input_s);
  EXPECT_EQ(a.step_weight_s, b.step_weight_s);
}

void expect_same(const ModelProfile& a, const ModelProfile& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.micro_batch_rows, b.micro_batch_rows);
  EXPECT_EQ(a.link.latency_s, b.link.latency_s);
  EXPECT_EQ(a.link.bandwidth_bytes_per_s, b.link.bandwidth_bytes_per_s);
  EXPECT_EQ(a.step_overhead_s, b.step_overhead_s);
  EXPECT_EQ(a.stage_data_bytes, b.stage_data_bytes);
  EXPECT_EQ(a.cache, b.cache);
  EXPECT_EQ(a.calibration, b.calibration);
  ASSERT_EQ(a.units.size(), b.units.size());
  for (size_t u = 0; u < a.units.size(); ++u) expect_same(a.units[u], b.units[u]);
  ASSERT_EQ(a.reductions.size(), b.reductions.size());
  for (size_t r = 0; r < a.reductions.size(); ++r) {
    EXPECT_EQ(a.reductions[r].replicas, b.reductions[r].replicas);
    EXPECT_EQ(a.reductions[r].grad_bytes, b.reductions[r].grad_bytes);
    EXPECT_EQ(a.reductions[r].seconds, b.reductions[r].seconds);
    EXPECT_EQ(a.reductions[r].link.latency_s, b.reductions[r].link.latency_s);
    EXPECT_EQ(a.reductions[r].link.bandwidth_bytes_per_s, b.reductions[r].link.bandwidth_bytes_per_s);
  }
}

TEST(ProfileFile, RoundTripKeepsEveryField) {
  const std::string path = temp_path("roundtrip.h5");
  const ModelProfile written = distinct_profile();
  write_profile_file(path, written, {"[model]\n", "test"});
  expect_same(read_profile_file(path), written);
  EXPECT_EQ(profile_source_of(path), ProfileSource::Profile);
  // without the step's split (not measured) no column is written: read as -1
  ModelProfile unmeasured = written;
  unmeasured.units[1].step_weight_s = -1.0;
  write_profile_file(path, unmeasured, {"[model]\n", "test"});
  for (const UnitCost& unit : read_profile_file(path).units) {
    EXPECT_EQ(unit.step_input_s, -1.0) << unit.name;
    EXPECT_EQ(unit.step_weight_s, -1.0) << unit.name;
  }
  // without timed reductions (D = 1) no group is written: read as none
  unmeasured.reductions.clear();
  write_profile_file(path, unmeasured, {"[model]\n", "test"});
  EXPECT_TRUE(read_profile_file(path).reductions.empty());
  std::remove(path.c_str());
}

// Opens `path` for writing and runs `edit` on it.
template <typename F>
void edit_file(const std::string& path, F edit) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  edit(file);
  H5Fclose(file);
}

void write_double_column(hid_t file, const char* name, const std::vector<double>& values) {
  hsize_t dims[1] = {values.size()};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t dset = H5Dcreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(dset);
  H5Sclose(space);
}

// Replaces the float64 column `name` of an open profile file by `values`.
void replace_column(hid_t file, const char* name, const std::vector<double>& values) {
  H5Ldelete(file, name, H5P_DEFAULT);
  write_double_column(file, name, values);
}

// The message reading `path` gives after `edit`, for a fresh valid file.
template <typename F>
std::string message_after(const std::string& path, F edit) {
  write_profile_file(path, distinct_profile(), {"", "test"});
  edit_file(path, edit);
  return error_of([&] { read_profile_file(path); });
}

void expect_message(const std::string& message, const std::string& path, const std::string& part) {
  EXPECT_NE(message.find(path + ":"), std::string::npos) << message;
  EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(ProfileFile, DamagedOrMismatchedFilesAreRefusedWithTheirReason) {
  const std::string path = temp_path("damaged.h5");
  std::remove(path.c_str());
  // The one regular-file check's form: the path quoted (base/input_file.hpp).
  const std::string missing = error_of([&] { read_profile_file(path); });
  EXPECT_NE(missing.find("'" + path + "': no such file; expected a profile.h5"), std::string::npos) << missing;
  std::ofstream(path) << "not an HDF5 file at all";
  expect_message(error_of([&] { read_profile_file(path); }), path, "not an HDF5 file");
  expect_message(error_of([&] { profile_source_of(path); }), path, "not an HDF5 file");

  expect_message(message_after(path, [](hid_t f) {
                   const int64_t four = 4;
                   hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
                   H5Awrite(a, H5T_NATIVE_INT64, &four);
                   H5Aclose(a);
                 }),
                 path, "profile format_version 4; this pipetrain reads version 3");
  expect_message(message_after(path, [](hid_t f) { H5Adelete(f, "calibration"); }), path,
                 "text attribute 'calibration' is missing");
  expect_message(message_after(path, [](hid_t f) { H5Adelete(f, "format"); }), path,
                 "text attribute 'format' is missing");
  EXPECT_NE(error_of([&] { profile_source_of(path); }).find("neither a profile nor a trace"),
            std::string::npos);
  expect_message(message_after(path, [](hid_t f) { H5Adelete(f, "micro_batch_rows"); }), path,
                 "integer attribute 'micro_batch_rows'");
  expect_message(message_after(path, [](hid_t f) { H5Ldelete(f, "units/backward_s", H5P_DEFAULT); }),
                 path, "dataset units/backward_s is missing");
  expect_message(message_after(path, [](hid_t f) { replace_column(f, "units/forward_s", {1.0, 2.0}); }),
                 path, "dataset units/forward_s has 2 rows, not 3");
  expect_message(message_after(path, [](hid_t f) { replace_column(f, "units/param_bytes", {1.0, NAN, 3.0}); }),
                 path, "dataset units/param_bytes[1] = nan is not a finite value >= 0");
  expect_message(message_after(path, [](hid_t f) { H5Ldelete(f, "units/step_weight_s", H5P_DEFAULT); }),
                 path, "dataset units/step_weight_s is missing (units/step_input_s and units/step_weight_s "
                       "come together)");
  expect_message(message_after(path, [](hid_t f) { replace_column(f, "units/step_input_s", {1.0, -2.0, 3.0}); }),
                 path, "dataset units/step_input_s[1] = -2.000000 is not a finite value >= 0");
  expect_message(message_after(path, [](hid_t f) { H5Ldelete(f, "reductions/replicas", H5P_DEFAULT); }),
                 path, "dataset reductions/replicas (1-D integer, the D of each timed reduction) is missing");
  expect_message(message_after(path, [](hid_t f) { replace_column(f, "reductions/seconds", {1.0, 2.0}); }),
                 path, "dataset reductions/seconds has 2 rows, not 3 (one per row of reductions/replicas)");
  expect_message(message_after(path, [](hid_t f) { replace_column(f, "reductions/grad_bytes", {1.0, 0.0, 3.0}); }),
                 path, "reductions/grad_bytes[1] and reductions/seconds[1] must be > 0");
  // Every refusal says what was expected.
  EXPECT_NE(message_after(path, [](hid_t f) { H5Ldelete(f, "units", H5P_DEFAULT); })
                .find("expected a profile.h5 written by `pipetrain profile`"),
            std::string::npos);

  // A good file of another model or micro-batch size.
  write_profile_file(path, distinct_profile(), {"", "test"});
  const ModelProfile profile = read_profile_file(path);
  Deck other = small_gpt();
  other.source_file = "inputs/other.toml";
  const std::string mismatch = error_of([&] { check_profile_matches(profile, other, path); });
  expect_message(mismatch, path, "made for \"mlp input_dim=6");
  EXPECT_NE(mismatch.find("but the deck inputs/other.toml has \"gpt vocab_size=11"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("micro-batches of 2 samples"), std::string::npos) << mismatch;
  Deck larger = small_mlp();
  larger.training.batch_size = 16;
  EXPECT_NE(error_of([&] { check_profile_matches(profile, larger, path); })
                .find("with micro-batches of 4 samples"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_profile_matches(profile, small_mlp(), path); }), "");
  std::remove(path.c_str());
}

// ---- bytes -----------------------------------------------------------------

TEST(ProfileBytes, MlpUnitsMatchTheAnalyticSizes) {
  const Deck d = small_mlp();
  const ModelProfile p = profile_memory(d, cpu_backend());
  ASSERT_EQ(p.units.size(), 4u);
  const double rows = 2.0;
  for (int u = 0; u < 4; ++u) {
    const UnitCost& c = p.units[u];
    const bool last = u == 3;
    const double in = u == 0 ? 6 : 10, out = last ? 3 : 10;
    EXPECT_EQ(c.name, "linear" + std::to_string(u));
    EXPECT_TRUE(c.partitionable);
    EXPECT_EQ(c.param_bytes, 4.0 * (in * out + out)) << c.name;  // weight and bias
    EXPECT_EQ(c.grad_bytes, c.param_bytes);
    EXPECT_EQ(c.optimizer_bytes, 2.0 * c.param_bytes);  // AdamW's two moments
    EXPECT_EQ(c.input_bytes, 4.0 * rows * in);
    EXPECT_EQ(c.output_bytes, 4.0 * rows * out);
    // Linear input + activation input, or + the loss gradient on the last unit.
    EXPECT_EQ(c.stash_none_bytes, 4.0 * rows * (in + out)) << c.name;
    EXPECT_EQ(c.stash_selective_bytes, c.stash_none_bytes);
    EXPECT_EQ(c.forward_flops, 2.0 * in * out * rows);
  }
  // Synthetic data: the teacher on every stage, 64 samples of inputs on the
  // first, of targets on the last.
  EXPECT_EQ(p.stage_data_bytes, 4.0 * 3 * 6);
  EXPECT_EQ(p.units.front().data_bytes, 4.0 * 64 * 6);
  EXPECT_EQ(p.units.back().data_bytes, 4.0 * 64 * 3);
}

TEST(ProfileBytes, GptUnitsMatchTheAnalyticSizes) {
  const Deck d = small_gpt();
  const ModelProfile p = profile_memory(d, cpu_backend());
  const double r = 2.0, T = 6, C = 8, H = 2, R = 2, V = 11;
  ASSERT_EQ(p.units.size(), 6u);
  const UnitCost& embedding = p.units.front();
  const UnitCost& head = p.units.back();
  EXPECT_EQ(embedding.name, "embedding");
  EXPECT_FALSE(embedding.partitionable);
  EXPECT_EQ(head.name, "head");
  EXPECT_FALSE(head.partitionable);
  EXPECT_EQ(embedding.param_bytes, 4.0 * (V * C + T * C));
  EXPECT_EQ(embedding.input_bytes, 4.0 * r * T);  // i32 token ids
  EXPECT_EQ(embedding.stash_none_bytes, 4.0 * r * T);
  EXPECT_EQ(embedding.forward_flops, 0.0);
  const double block_params = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C +
                              (R * C * C + R * C) + (R * C * C + C);
  for (int b = 1; b <= 4; ++b) {
    const UnitCost& c = p.units[b];
    EXPECT_EQ(c.name, "block" + std::to_string(b - 1));
    EXPECT_TRUE(c.partitionable);
    EXPECT_EQ(c.param_bytes, 4.0 * block_params);
    EXPECT_EQ(c.input_bytes, 4.0 * r * T * C);
    EXPECT_EQ(c.output_bytes, 4.0 * r * T * C);
    // docs/memory.md: T C (8 + 2R) + 4T + H T^2 per sample; selective drops H T^2.
    EXPECT_EQ(c.stash_none_bytes, 4.0 * r * (T * C * (8 + 2 * R) + 4 * T + H * T * T));
    EXPECT_EQ(c.stash_selective_bytes, 4.0 * r * (T * C * (8 + 2 * R) + 4 * T));
  }
  EXPECT_EQ(head.param_bytes, 4.0 * (2 * C + V * C));
  EXPECT_EQ(head.output_bytes, 4.0 * r * T * V);
  // Input, ln_f output and statistics, and the loss gradient (T V).
  EXPECT_EQ(head.stash_none_bytes, 4.0 * r * (2 * T * C + 2 * T + T * V));
  EXPECT_EQ(head.forward_flops, 2.0 * T * C * V * r);
  EXPECT_EQ(p.stage_data_bytes, 0.0);  // Markov data keeps no tensors
}

// docs/profile.md: the transient peak of stage [b, e) with recompute none or
// selective: over its units k, workspace_k (plus the recomputed stash under
// selective) less the stash of the units after k, less k's output when a
// later unit of the stage consumes it.
// backward: the same over the units' peaks during B alone.
double stage_workspace(const std::vector<UnitCost>& units, size_t b, size_t e, bool selective,
                       bool backward = false) {
  double peak = 0.0;
  for (size_t k = b; k < e; ++k) {
    double w = backward ? units[k].backward_workspace_bytes : units[k].workspace_bytes;
    if (selective) w += units[k].stash_none_bytes - units[k].stash_selective_bytes;
    for (size_t j = k + 1; j < e; ++j)
      w -= selective ? units[j].stash_selective_bytes : units[j].stash_none_bytes;
    if (k + 1 < e) w -= units[k].output_bytes;
    peak = std::max(peak, w);
  }
  return peak;
}

double sum_of(const std::vector<UnitCost>& units, size_t b, size_t e, double UnitCost::*field) {
  double total = 0.0;
  for (size_t k = b; k < e; ++k) total += units[k].*field;
  return total;
}

// Stage `s` of `parts` probed by the executor against its units' figures.
void check_stage(const Deck& d, const ModelProfile& p, const std::vector<int64_t>& parts, int s) {
  const MemoryStats start = memory_stats();
  StageModel stage = build_stage(d.model, parts, s);
  Optimizer optimizer(d.training, stage.params());
  const MemoryStats built = memory_stats();
  const auto grew = [&](MemCategory c) {
    return static_cast<double>(built.live[int(c)]) - static_cast<double>(start.live[int(c)]);
  };
  const bool gpt = d.model.type == "gpt";
  const size_t b = static_cast<size_t>(stage.first_unit) + (gpt && s > 0 ? 1 : 0);
  const size_t e = static_cast<size_t>(stage.first_unit + stage.num_units) + (gpt ? 1 : 0) +
                   (gpt && stage.is_last() ? 1 : 0);
  const std::string label = d.model.type + " stage " + std::to_string(s) + " of " +
                            std::to_string(parts.size());
  EXPECT_EQ(grew(MemCategory::Parameters), sum_of(p.units, b, e, &UnitCost::param_bytes)) << label;
  EXPECT_EQ(grew(MemCategory::Gradients), sum_of(p.units, b, e, &UnitCost::grad_bytes)) << label;
  EXPECT_EQ(grew(MemCategory::OptimizerState), sum_of(p.units, b, e, &UnitCost::optimizer_bytes)) << label;
  auto data = make_generated_dataset(data_set_config_for(d), Split::Train);
  const auto probe = [&](const char* policy) {
    StageProbe ex(stage, cpu_backend(), parse_recompute_policy(policy, "test"), executor_config_for(d));
    return ex.probe_micro_batch(*data, [] { return memory_stats(); }, {});
  };
  const MicroBatchProbe none = probe("none"), selective = probe("selective"), full = probe("full");
  const double stash = sum_of(p.units, b, e, &UnitCost::stash_none_bytes);
  const double loss_grad = stage.is_last() ? p.units.back().output_bytes : 0.0;
  EXPECT_EQ(none.stash_bytes, stash) << label;
  EXPECT_EQ(selective.stash_bytes, sum_of(p.units, b, e, &UnitCost::stash_selective_bytes)) << label;
  EXPECT_EQ(full.stash_bytes, p.units[b].input_bytes + loss_grad) << label;
  EXPECT_EQ(none.workspace_bytes, stage_workspace(p.units, b, e, false)) << label;
  EXPECT_EQ(selective.workspace_bytes, stage_workspace(p.units, b, e, true)) << label;
  EXPECT_EQ(none.backward_workspace_bytes, stage_workspace(p.units, b, e, false, true)) << label;
  // Full: what none keeps beyond the stage input and loss gradient is
  // recomputed as workspace, on top of B's own peak.
  EXPECT_EQ(full.backward_workspace_bytes,
            stash - p.units[b].input_bytes - loss_grad + stage_workspace(p.units, b, e, false, true))
      << label;
  // The planner's stage costs compose the units the same way, exactly.
  const auto planned = [&](const char* policy) {
    return pt::stage_costs(p, parts, {pt::PlanRecompute::parse(policy)})[static_cast<size_t>(s)];
  };
  // On a stage that is not the last the probe holds the output gradient from
  // before F and the output through B; a run holds one of them in each phase.
  const double held_output = stage.is_last() ? 0.0 : p.units[e - 1].output_bytes;
  for (const auto& [policy, probed] : {std::pair{"none", none}, std::pair{"selective", selective}}) {
    const pt::StageCost c = planned(policy);
    EXPECT_EQ(c.stash_bytes, probed.stash_bytes) << label << " " << policy;
    EXPECT_EQ(std::max(c.forward_transient_bytes, c.backward_transient_bytes),
              probed.workspace_bytes - held_output) << label << " " << policy;
  }
  // None: each phase's transient is the probe's peak in that phase alone.
  const pt::StageCost kept = planned("none");
  EXPECT_EQ(kept.forward_transient_bytes, none.forward_workspace_bytes - held_output) << label;
  EXPECT_EQ(kept.backward_transient_bytes, none.backward_workspace_bytes - held_output) << label;
  // Full: B is the probe's B alone, less the held output.
  const pt::StageCost c = planned("full");
  EXPECT_EQ(c.stash_bytes, full.stash_bytes) << label;
  EXPECT_EQ(c.backward_transient_bytes, full.backward_workspace_bytes - held_output) << label;
}

TEST(ProfileBytes, UnitsComposeIntoWhatTheExecutorTracksForAStage) {
  for (const Deck& d : {small_mlp(), small_gpt()}) {
    const ModelProfile p = profile_memory(d, cpu_backend());
    check_stage(d, p, {4}, 0);
    check_stage(d, p, {1, 2, 1}, 1);
    check_stage(d, p, {1, 3}, 0);
    check_stage(d, p, {1, 3}, 1);
    check_stage(d, p, {3, 1}, 1);
  }
}

// One stage trained with 1F1B (one micro-batch in flight): its tracked peaks
// are exactly the sums of its units' figures.
TEST(ProfileBytes, OneStageTrainingPeaksAreTheSumsOfItsUnits) {
  for (const Deck& d : {small_mlp(), small_gpt()}) {
    const ModelProfile p = profile_memory(d, cpu_backend());
    const size_t n = p.units.size();
    Trainer trainer(d, MPI_COMM_SELF);
    StepRecord rec;
    for (int64_t s = 0; s < d.training.steps; ++s) rec = trainer.train_step(s);
    const std::vector<double>& peak = rec.rank_peak_bytes.at(0);
    const double persistent = sum_of(p.units, 0, n, &UnitCost::param_bytes) +
                              sum_of(p.units, 0, n, &UnitCost::grad_bytes) +
                              sum_of(p.units, 0, n, &UnitCost::optimizer_bytes);
    const double data = p.stage_data_bytes + sum_of(p.units, 0, n, &UnitCost::data_bytes);
    const double stash = sum_of(p.units, 0, n, &UnitCost::stash_none_bytes);
    EXPECT_EQ(peak[int(MemCategory::Activations)], stash) << d.model.type;
    EXPECT_EQ(peak.back(), persistent + data + stash + stage_workspace(p.units, 0, n, false))
        << d.model.type;
    const int64_t units = d.model.type == "gpt" ? d.model.gpt.blocks : d.model.mlp.depth;
    const pt::StageCost planned = pt::stage_costs(p, {units}, {pt::PlanRecompute::parse("none")})[0];
    EXPECT_EQ(planned.peak_bytes(1), peak.back()) << d.model.type;
  }
}

// ---- times and link ------------------------------------------------------

Deck timing_gpt() {
  Deck d = small_gpt();
  d.model.gpt.vocab_size = 64;
  d.model.gpt.seq_len = 32;
  d.model.gpt.d_model = 64;
  d.model.gpt.heads = 4;
  d.model.gpt.blocks = 2;
  d.training.batch_size = 8;
  d.pipeline.micro_batches = 2;
  return d;
}

// Every rank holds the same figures as rank 0.
void expect_same_on_every_rank(const ModelProfile& p) {
  std::vector<double> mine;
  for (const UnitCost& u : p.units) mine.insert(mine.end(), {u.forward_s, u.backward_s, u.optimizer_s});
  mine.push_back(p.link.latency_s);
  mine.push_back(p.step_overhead_s);
  std::vector<double> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, root) << "rank " << world_rank();
}

TEST(ProfileTimes, PositiveAndARecomputeCostsAboutAForward) {
  const Deck d = timing_gpt();
  const ModelProfile p = profile_model(d, cpu_backend(), MPI_COMM_WORLD, ProfileOptions::brief());
  expect_same_on_every_rank(p);
  for (const UnitCost& u : p.units) {
    EXPECT_GT(u.forward_s, 0.0) << u.name;
    EXPECT_GT(u.backward_s, 0.0) << u.name;
    EXPECT_GT(u.optimizer_s, 0.0) << u.name;
    EXPECT_GE(u.recompute_end_s, 0.0) << u.name;
    if (is_root())
      std::printf("  %-10s fwd %.3f ms  bwd %.3f ms  recompute %.3f ms (segment end %.3f ms)  "
                  "optimizer %.3f ms\n",
                  u.name.c_str(), u.forward_s * 1e3, u.backward_s * 1e3, u.recompute_s * 1e3,
                  u.recompute_end_s * 1e3, u.optimizer_s * 1e3);
  }
  // Only signs are asserted: how a recompute's time compares with a
  // forward's is the CPU's business (kernels, caches), not the profiler's.
  for (size_t b = 1; b + 1 < p.units.size(); ++b) EXPECT_GT(p.units[b].recompute_s, 0.0) << p.units[b].name;
  EXPECT_GT(p.step_overhead_s, 0.0);
  EXPECT_EQ(p.micro_batch_rows, 4);
  EXPECT_EQ(p.backend, "cpu");
  EXPECT_NE(p.kernels.find("GEMM operands fp32"), std::string::npos) << p.kernels;
}

// ProfileOptions::after_pass runs once after each pass through the units
// and through the stage chains (up to 3 of each: min(reps, 3)), on every
// rank: the run's speed probes inside its profile hang on it.
TEST(ProfileTimes, AfterPassRunsOnceAfterEveryPass) {
  const Deck d = timing_gpt();
  for (const auto& [reps, chains, expected] : {std::tuple{3, true, 6}, std::tuple{2, true, 4},
                                               std::tuple{5, false, 3}, std::tuple{1, true, 2}}) {
    ProfileOptions o = ProfileOptions::brief();
    o.reps = reps;
    o.stage_chains = chains;
    int calls = 0;
    o.after_pass = [&calls] {
      ++calls;
      timed_barrier(MPI_COMM_WORLD, "the test's after_pass barrier");  // collective, as the probe is
    };
    profile_model(d, cpu_backend(), MPI_COMM_WORLD, o);
    EXPECT_EQ(calls, expected) << "reps " << reps << ", stage chains " << chains;
  }
}

// pipeline.weight_grad = "step": the units' backward again at a whole
// replica batch's rows (8 here, against micro-batches of 1), recompute
// times 0, everything else the profile's; the planner's pass per stage is
// W's share of those backwards summed over the stage's units.
// The widest weight-gradient GEMM (dW (+)= dY^T X) recorded: the rows it sums over.
int64_t widest_weight_gemm_rows(const std::vector<GemmShape>& gemms) {
  int64_t rows = 0;
  for (const GemmShape& g : gemms)
    if (g.trans_a && !g.trans_b) rows = std::max(rows, g.k);
  return rows;
}

TEST(ProfileTimes, WeightPassIsTimedAtTheBatchRows) {
  Deck d = timing_gpt();
  d.pipeline.micro_batches = 8;
  start_gemm_recording();
  const ModelProfile p = profile_model(d, cpu_backend(), MPI_COMM_WORLD, ProfileOptions::brief());
  const int64_t micro_batch_rows = widest_weight_gemm_rows(stop_gemm_recording());
  start_gemm_recording();
  const ModelProfile pass = profile_weight_pass(d, cpu_backend(), MPI_COMM_WORLD, p, ProfileOptions::brief());
  // What ran is proven by the GEMMs, not by timings: the pass's weight
  // gradients sum over the 8 micro-batches' rows at once.
  EXPECT_EQ(widest_weight_gemm_rows(stop_gemm_recording()), 8 * micro_batch_rows);
  expect_same_on_every_rank(pass);
  ASSERT_EQ(pass.units.size(), p.units.size());
  double per_micro_batch = 0.0, whole = 0.0;
  for (size_t u = 0; u < p.units.size(); ++u) {
    EXPECT_GT(pass.units[u].backward_s, 0.0) << p.units[u].name;
    EXPECT_EQ(pass.units[u].recompute_s + pass.units[u].recompute_end_s +
                  pass.units[u].recompute_selective_s, 0.0) << p.units[u].name;
    EXPECT_EQ(pass.units[u].forward_s, p.units[u].forward_s) << p.units[u].name;
    per_micro_batch += p.units[u].backward_s;
    whole += pass.units[u].backward_s;
  }
  if (is_root()) std::printf("  backward at 8 rows %.3f ms, at 1 row %.3f ms\n", whole * 1e3, per_micro_batch * 1e3);
  const std::vector<PlanRecompute> none(2, PlanRecompute::parse("none"));
  const std::vector<double> seconds = step_weight_seconds(pass, 0.4, {1, 1}, none);
  const std::vector<StageCost> stages = stage_costs(pass, {1, 1}, none);
  ASSERT_EQ(seconds.size(), 2u);
  for (size_t s = 0; s < 2; ++s) EXPECT_DOUBLE_EQ(seconds[s], 0.4 * stages[s].backward_s);
}

TEST(ProfileLink, MeasuredBetweenRanksZeroAndOne) {
  Deck d = small_mlp();
  d.model.mlp.depth = 2;
  d.model.mlp.hidden_dim = 1 << 16;  // a 1 MiB activation message of 4 rows
  d.training.batch_size = 8;
  d.pipeline.micro_batches = 2;
  const ModelProfile p = profile_model(d, cpu_backend(), MPI_COMM_WORLD, ProfileOptions::brief());
  expect_same_on_every_rank(p);
  if (world_size() < 2) {
    EXPECT_EQ(p.link.latency_s, 0.0);
    EXPECT_EQ(p.link.bandwidth_bytes_per_s, 0.0);
    return;
  }
  EXPECT_GT(p.link.latency_s, 0.0);
  EXPECT_GT(p.link.bandwidth_bytes_per_s, 0.0);
  const double message = p.units[0].output_bytes;
  EXPECT_EQ(message, 4.0 * 4 * (1 << 16));
  EXPECT_GT(p.link.time_s(message), p.link.latency_s);
  if (is_root())
    std::printf("  link: latency %.2f us, bandwidth %.2f GB/s, 1 MiB in %.1f us\n",
                p.link.latency_s * 1e6, p.link.bandwidth_bytes_per_s * 1e-9,
                p.link.time_s(message) * 1e6);
}

// The speed probe: a positive time, the same on every rank (the slowest's),
// and a spread that is max / min - 1 of the probes.
TEST(SpeedProbe, SlowestRanksTimeAndSpread) {
  const double t = time_speed_probe(cpu_backend(), MPI_COMM_WORLD, 3);
  EXPECT_GT(t, 0.0);
  EXPECT_LT(t, 10.0);  // 268 MFLOP
  double lowest = t, highest = t;
  MPI_Allreduce(&t, &lowest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&t, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lowest, highest);
  EXPECT_DOUBLE_EQ(speed_probe_spread({2.0e-3, 2.5e-3, 2.2e-3}), 0.25);
  EXPECT_EQ(speed_probe_spread({2.0e-3}), 0.0);
  EXPECT_EQ(speed_probe_spread({0.0, 1.0}), 0.0);
  // The steps' halves: medians 0.10 and 0.06 (a slow spell that ended).
  EXPECT_NEAR(pt::step_time_shift({0.10, 0.11, 0.09, 0.06, 0.06, 0.07}), 0.10 / 0.06 - 1.0, 1e-12);
  EXPECT_NEAR(pt::step_time_shift({0.06, 0.06, 0.10, 0.10}), 0.10 / 0.06 - 1.0, 1e-12);
  EXPECT_EQ(pt::step_time_shift({0.05, 0.05, 0.05, 0.05, 0.05}), 0.0);
  EXPECT_EQ(pt::step_time_shift({0.05, 0.5, 0.05}), 0.0);  // fewer than 4 steps
}

// The probes' log line names what was probed and, over 10% spread, what can
// explain it there: the host on the CPU; on a GPU the device, and for ranks
// that share it, that they took turns (so their time-slicing is not in it).
TEST(SpeedProbe, LineNamesTheDeviceAndTheCause) {
  EXPECT_EQ(speed_probe_size(Device::CPU), 512);
  EXPECT_GT(speed_probe_size(Device::CUDA), speed_probe_size(Device::CPU));
  const std::vector<double> steady = {2.0e-3, 2.1e-3, 2.05e-3}, unsteady = {0.25e-3, 0.3e-3, 0.26e-3};
  const std::string cpu = speed_probe_line(unsteady, {});
  EXPECT_EQ(cpu.rfind("plan: speed probe (a 512^3 matmul, slowest rank) 0.250 ms before the "
                      "profile, 0.300 ms after it, 0.260 ms after the steps: spread 20.0% (over "
                      "10%: the host's speed changed during the run", 0), 0u) << cpu;
  EXPECT_EQ(speed_probe_line(steady, {}).find("over 10%"), std::string::npos);
  // With probes after the profile's passes: between "before" and "after it".
  const std::string inside = speed_probe_line({2.0e-3, 2.6e-3, 2.1e-3, 2.05e-3, 2.0e-3}, {});
  EXPECT_EQ(inside.rfind("plan: speed probe (a 512^3 matmul, slowest rank) 2.000 ms before the "
                         "profile, 2.600, 2.100 ms after its passes, 2.050 ms after it, 2.000 ms "
                         "after the steps: spread 30.0% (over 10%", 0), 0u) << inside;
  const SpeedProbeSite own{Device::CUDA, "NVIDIA H100 80GB HBM3", false};
  const SpeedProbeSite shared{Device::CUDA, "NVIDIA H100 80GB HBM3", true};
  for (const SpeedProbeSite& site : {own, shared}) {
    const std::string gpu = speed_probe_line(unsteady, site);
    EXPECT_NE(gpu.find("(a 4096^3 matmul on the GPU, NVIDIA H100 80GB HBM3, timed by its events, "
                       "one rank at a time"), std::string::npos) << gpu;
    EXPECT_EQ(gpu.find("host"), std::string::npos) << gpu;
    EXPECT_NE(gpu.find("part of the plan's error is the device's"), std::string::npos) << gpu;
    EXPECT_EQ(gpu.find("take turns") != std::string::npos, site.shared) << gpu;
    EXPECT_EQ(speed_probe_line(steady, site).find("over 10%"), std::string::npos);
  }
  EXPECT_THROW(speed_probe_line({1.0, 1.0}, {}), Error);
}

// The stage chains: after calibration the planner's sums over each stage of
// the uniform partition over the ranks (pinned GPT units included) are the
// times measured for that stage run whole, and every unit of a stage is
// scaled by the same ratio.
TEST(ProfileChains, ScaledUnitsAddUpToTheMeasuredStages) {
  Deck d = timing_gpt();
  d.model.gpt.blocks = 4;
  ProfileOptions o = ProfileOptions::brief();
  o.stage_chains = false;
  const ModelProfile uncalibrated = profile_model(d, cpu_backend(), MPI_COMM_WORLD, o);
  EXPECT_EQ(uncalibrated.calibration, "");
  ModelProfile p = uncalibrated;
  const ChainCalibration cal = calibrate_with_stage_chains(p, d, cpu_backend(), MPI_COMM_WORLD, o);
  const int stages = std::min(world_size(), 4);
  ASSERT_EQ(cal.units_per_stage, partition_units(4, stages, {}));
  ASSERT_EQ(cal.forward_s.size(), static_cast<size_t>(stages));
  ASSERT_EQ(cal.refill_s.size(), static_cast<size_t>(stages));
  EXPECT_EQ(cal.refill_micro_batches, std::min<int>(3, static_cast<int>(batch_split_of(d).micro_batches)));
  EXPECT_EQ(cal.text.rfind("stage chains [", 0), 0u) << cal.text;
  EXPECT_NE(cal.text.find(" ms)"), std::string::npos) << cal.text;
  // the repetitions (at least --reps, at most 3x) are spread over 3 passes
  EXPECT_EQ(cal.passes, 3);
  ASSERT_EQ(cal.repetitions.size(), static_cast<size_t>(stages));
  for (int reps : cal.repetitions) {
    EXPECT_GE(reps, o.reps);
    EXPECT_LE(reps, 3 * o.reps);
  }
  expect_same_on_every_rank(p);
  const std::vector<StageCost> none = stage_costs(p, cal.units_per_stage, {PlanRecompute::parse("none")});
  const std::vector<StageCost> full = stage_costs(p, cal.units_per_stage, {PlanRecompute::parse("full")});
  size_t unit = 0;
  for (int s = 0; s < stages; ++s) {
    EXPECT_GT(cal.forward_s[s], 0.0);
    EXPECT_NEAR(none[s].forward_s, cal.forward_s[s], 1e-12 + 1e-9 * cal.forward_s[s]) << "stage " << s;
    EXPECT_NEAR(none[s].backward_s, cal.backward_s[s], 1e-12 + 1e-9 * cal.backward_s[s]) << "stage " << s;
    EXPECT_NEAR(full[s].recompute_s, cal.recompute_s[s], 1e-12 + 1e-9 * cal.recompute_s[s]) << "stage " << s;
    EXPECT_GT(cal.optimizer_s[s], 0.0);
    // the update and the refill of the caches after it, once a step
    EXPECT_GE(cal.refill_s[s], 0.0);
    const double per_step = cal.optimizer_s[s] + cal.refill_s[s];
    EXPECT_NEAR(none[s].optimizer_s, per_step, 1e-12 + 1e-9 * per_step) << "stage " << s;
    // embedding with stage 0, head with the last stage
    const size_t units = static_cast<size_t>(cal.units_per_stage[s]) + (s == 0) + (s + 1 == stages);
    for (size_t k = 0; k < units; ++k, ++unit) {
      const UnitCost &before = uncalibrated.units[unit], &after = p.units[unit];
      EXPECT_NEAR(after.forward_s, before.forward_s * cal.forward_ratio[s], 1e-15) << after.name;
      EXPECT_NEAR(after.backward_s, before.backward_s * cal.backward_ratio[s], 1e-15) << after.name;
      EXPECT_NEAR(after.recompute_s, before.recompute_s * cal.recompute_ratio[s], 1e-15) << after.name;
      EXPECT_NEAR(after.optimizer_s, before.optimizer_s * cal.optimizer_ratio[s], 1e-15) << after.name;
    }
  }
  EXPECT_EQ(unit, p.units.size());
  if (is_root())
    std::printf("  %s\n", cal.text.c_str());
}

// ---- from a trace ----------------------------------------------------------

TEST(ProfileTrace, ADerivedProfileSplitsStageTimesByFlops) {
  Deck d = timing_gpt();
  d.training.steps = 3;
  d.output.trace = true;
  d.pipeline.recompute = "full";
  Trainer trainer(d, MPI_COMM_WORLD);
  for (int64_t s = 0; s < d.training.steps; ++s) trainer.train_step(s);
  const auto events = trainer.gather_trace();
  if (!is_root()) return;
  RunTrace trace;
  trace.source = "the test's trace";
  trace.deck = deck_to_toml(d);
  trace.num_stages = world_size();
  trace.num_micro_batches = 2;
  trace.clock_error_us = trainer.clock_alignment().error_us;
  trace.events = events;
  const ModelProfile p = profile_from_trace(d, trace, cpu_backend());
  const ModelProfile bytes = profile_memory(d, cpu_backend());
  ASSERT_EQ(p.units.size(), bytes.units.size());
  for (size_t u = 0; u < p.units.size(); ++u) {
    const UnitCost& c = p.units[u];
    EXPECT_EQ(c.stash_none_bytes, bytes.units[u].stash_none_bytes);
    EXPECT_EQ(c.workspace_bytes, bytes.units[u].workspace_bytes);
    if (c.forward_flops == 0.0) continue;  // the embedding gets no share
    EXPECT_GT(c.forward_s, 0.0) << c.name;
    EXPECT_GT(c.backward_s, 0.0) << c.name;
    EXPECT_GT(c.recompute_s, 0.0) << c.name;  // recompute = "full": from RECOMPUTE events
    EXPECT_GT(c.optimizer_s, 0.0) << c.name;
  }
  EXPECT_EQ(p.units.front().forward_s, 0.0);
  EXPECT_GT(p.step_overhead_s, 0.0);
  if (world_size() >= 2) {
    EXPECT_GT(p.link.latency_s, 0.0);
  } else {  // both blocks on one stage: equal FLOPs, equal shares
    EXPECT_DOUBLE_EQ(p.units[1].forward_s, p.units[2].forward_s);
  }

  // The same through trace.h5, chosen by its contents, and refused for another model.
  const std::string path = temp_path("trace.h5");
  write_trace_file(path, deck_to_toml(d), trainer.schedule(), events, trainer.clock_alignment());
  EXPECT_EQ(profile_source_of(path), ProfileSource::Trace);
  const ModelProfile loaded = load_profile_for_deck(path, d, cpu_backend());
  for (size_t u = 0; u < p.units.size(); ++u) {
    EXPECT_DOUBLE_EQ(loaded.units[u].forward_s, p.units[u].forward_s);
    EXPECT_DOUBLE_EQ(loaded.units[u].backward_s, p.units[u].backward_s);
  }
  Deck other = d;
  other.model.gpt.d_model = 32;
  expect_message(error_of([&] { load_profile_for_deck(path, other, cpu_backend()); }), path,
                 "made for \"gpt vocab_size=64 seq_len=32 d_model=64");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pt
