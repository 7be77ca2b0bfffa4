// profiler.cpp: profile_model and profile_memory: every cost unit of a
// model measured alone with the executor's own code, the per-step work
// outside the schedule, and (src/runtime/profile_link.cpp) the link.
#include "pipetrain/runtime/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/model/activation_copies.hpp"
#include "pipetrain/model/weight_copies.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/stage_probe.hpp"
#include "pipetrain/tensor/blas_info.hpp"

namespace pt {

ProfileOptions ProfileOptions::brief() {
  ProfileOptions o;
  o.warmup = 1;
  o.reps = 3;
  return o;
}

int64_t micro_batch_rows(const Deck& deck) { return batch_split_of(deck).rows(); }

std::string profile_model_description(const Deck& deck) {
  const ModelFamily& family = model_family(deck.model);
  std::string text = family.name + family.describe(deck.model);
  text += std::string("; ") + kind_name(deck.training.optimizer) + "; " + kind_name(deck.training.precision);
  if (deck.data.type == DataKind::Synthetic)  // cached in memory (profile_memory's data bytes)
    text += "; synthetic data samples=" + std::to_string(deck.data.samples) +
            (deck.training.eval_every > 0 ? " with evaluation" : "");
  return text;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The element-wise lower median over the ranks of comm (of an even count,
// the smaller middle value): a rank that another process slowed down for a
// whole unit does not shift it (with 2 ranks it is the faster rank's).
std::vector<double> median_over_ranks(const std::vector<double>& mine, MPI_Comm comm) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const size_t n = mine.size();
  std::vector<double> all(n * static_cast<size_t>(size));
  timed_allgather(mine.data(), static_cast<int>(n), MPI_DOUBLE, all.data(), comm,
                  "the profiler's unit times all-gather");
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> column;
    for (int r = 0; r < size; ++r) column.push_back(all[static_cast<size_t>(r) * n + i]);
    std::nth_element(column.begin(), column.begin() + (size - 1) / 2, column.end());
    out[i] = column[static_cast<size_t>(size - 1) / 2];
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

ModelProfile profile_header(const Deck& deck, const BatchSplit& split, Backend& be,
                            const ProfileOptions& options) {
  ModelProfile p;
  p.model = profile_model_description(deck);
  p.backend = be.name();
  p.kernels = options.kernels;
  if (p.kernels.empty())
    p.kernels = (be.device() == Device::CPU ? blas_info().describe() : std::string(be.name())) +
                "; GEMM operands " + kind_name(deck.training.precision);
  p.micro_batch_rows = split.rows();
  return p;
}

double category_delta(const MemoryStats& before, const MemoryStats& after, MemCategory cat) {
  const int c = static_cast<int>(cat);
  return static_cast<double>(after.live[c]) - static_cast<double>(before.live[c]);
}

// What every measurement of one profile shares.
struct Context {
  ModelConfig model;        // the deck's [model]
  TrainingConfig training;  // optimizer, learning rate, precision
  double timeout_s;         // pipeline.timeout_s
  BatchSplit split;  // the micro-batches measured
  Backend& be;
  std::function<MemoryStats()> stats;
  std::function<void()> reset_peaks;
  std::unique_ptr<Dataset> data;
  int64_t rows;
  std::vector<char> evictor;  // non-empty: written before every timed pass (cold caches)

  // Untimed: pushes every unit's state out of the caches.
  void before_pass() {
    if (evictor.empty()) return;
    std::memset(evictor.data(), static_cast<int>(++evictions & 0x7f), evictor.size());
    volatile char sink = 0;
    for (size_t i = 0; i < evictor.size(); i += 4096) sink = sink + evictor[i];
  }
  std::function<void()> pass_hook() {
    if (evictor.empty()) return {};
    return [this] { before_pass(); };
  }
  int evictions = 0;

  Context(const Deck& d, const BatchSplit& s, Backend& b, const ProfileOptions& o)
      : model(d.model), training(d.training), timeout_s(d.pipeline.timeout_s), split(s), be(b),
        stats(o.memory_stats ? o.memory_stats : [] { return memory_stats(); }),
        reset_peaks(o.reset_memory_peaks),
        data(open_dataset(o.open_dataset, data_set_config_for(d), Split::Train)),
        rows(s.rows()) {}
};

// A cost unit as a stage of its own on the backend's device, with its
// optimizer, and the persistent bytes they added.
struct UnitStage {
  StageModel stage;
  std::unique_ptr<Optimizer> optimizer;
  double param_bytes = 0.0, grad_bytes = 0.0, optimizer_bytes = 0.0;
};

UnitStage build_unit(Context& c, int64_t index) {
  UnitStage u;
  const MemoryStats before = c.stats();
  u.stage = build_cost_unit_stage(c.model, index);  // parameters initialised on the host
  move_parameters(u.stage, c.be.device());  // the optimizer's state follows them
  u.optimizer = std::make_unique<Optimizer>(c.training, u.stage.params());
  // bf16/fp16 weight copies (counted as parameters), as the run keeps them.
  if (c.training.weight_copies) make_weight_copies(c.be, u.stage.params());
  set_activation_copies(u.stage, c.training.activation_copies);  // the stash as the run keeps it
  const MemoryStats after = c.stats();
  u.param_bytes = category_delta(before, after, MemCategory::Parameters);
  u.grad_bytes = category_delta(before, after, MemCategory::Gradients);
  u.optimizer_bytes = category_delta(before, after, MemCategory::OptimizerState);
  return u;
}

StageProbe unit_probe(Context& c, UnitStage& u, const char* policy) {
  return StageProbe(u.stage, c.be, parse_recompute_policy(policy, "the profiler"),
                    executor_config_for(c.split, c.timeout_s));
}

MicroBatchProbe probe(Context& c, StageProbe& stage_probe) {
  return stage_probe.probe_micro_batch(*c.data, c.stats, c.reset_peaks, c.pass_hook());
}

double tensor_bytes(const Shape& shape, DType dtype) {
  return static_cast<double>(shape_numel(shape)) * static_cast<double>(dtype_size(dtype));
}

// The type in which the stage's first layer keeps its input (a Linear's with
// activation copies: the GEMM precision's; Layer::input_operand), from a
// one-sample input.
DType kept_input_dtype(Context& c, StageModel& stage) {
  const Tensor one = Tensor::zeros(stage.input_shape(1), stage.input_dtype, MemCategory::Workspace,
                                   c.be.device());
  return stage.layers.front()->input_operand(c.be, one).dtype();
}

UnitCost unit_memory(Context& c, int64_t index, const CostUnitInfo& info) {
  UnitStage u = build_unit(c, index);
  UnitCost cost;
  cost.name = info.name;
  cost.partitionable = info.partitionable;
  cost.layers = static_cast<int64_t>(u.stage.layers.size());  // every:K counts these
  cost.forward_flops = info.computed_flops() * static_cast<double>(c.rows);  // padding included
  cost.param_bytes = u.param_bytes;
  cost.grad_bytes = u.grad_bytes;
  cost.optimizer_bytes = u.optimizer_bytes;
  cost.input_bytes = tensor_bytes(u.stage.input_shape(c.rows), u.stage.input_dtype);
  cost.kept_input_bytes = tensor_bytes(u.stage.input_shape(c.rows), kept_input_dtype(c, u.stage));
  cost.output_bytes = tensor_bytes(u.stage.output_shape(c.rows), DType::F32);
  StageProbe none = unit_probe(c, u, "none");
  probe(c, none);  // warm-up: first-call allocations of the backend
  const MicroBatchProbe kept = probe(c, none);
  StageProbe selective = unit_probe(c, u, "selective");
  cost.stash_none_bytes = static_cast<double>(kept.stash_bytes);
  cost.stash_selective_bytes = static_cast<double>(probe(c, selective).stash_bytes);
  cost.workspace_bytes = static_cast<double>(kept.workspace_bytes);
  cost.backward_workspace_bytes = static_cast<double>(kept.backward_workspace_bytes);
  cost.forward_workspace_bytes = static_cast<double>(kept.forward_workspace_bytes);
  return cost;
}

// The forward as recomputation re-runs it inside a segment that goes on past
// this unit: every layer's forward keeping inputs and saved tensors, no loss
// (the same layer calls as Executor::recompute_segment).
double time_forward_rerun(Context& c, StageModel& stage) {
  Tensor x = stage.is_first() ? c.data->inputs(0, c.rows).to(c.be.device())
                              : Tensor::zeros(stage.input_shape(c.rows), stage.input_dtype,
                                              MemCategory::Workspace, c.be.device());
  c.be.synchronize();
  StagePass pass;
  c.before_pass();
  const auto start = Clock::now();
  stage_forward(stage, c.be, x, pass);
  c.be.synchronize();
  return seconds_since(start);
}

double time_optimizer_step(Context& c, UnitStage& u) {
  c.before_pass();
  const auto start = Clock::now();
  u.optimizer->step(c.be, static_cast<float>(c.training.lr), 1.f);
  c.be.synchronize();
  return seconds_since(start);
}

// The trainer's per-step passes over the gradients outside the optimizer:
// zeroing them and their sums of squares for the global norm, left on the
// device and read once, as StepCollectives::global_grad_norm does.
double time_gradient_passes(Context& c, UnitStage& u) {
  const std::vector<Param*> params = u.stage.params();
  std::unique_ptr<ScalarBatch> sums = c.be.make_scalar_batch(static_cast<int64_t>(params.size()));
  c.before_pass();
  const auto start = Clock::now();
  u.optimizer->zero_grad(c.be);
  for (size_t i = 0; i < params.size(); ++i)
    c.be.sum_squares_to(params[i]->grad, *sums, static_cast<int64_t>(i));
  sums->read();
  c.be.synchronize();
  return seconds_since(start);
}

// Figures timed per unit, in this order.
enum UnitTime : size_t {
  kForward, kBackward, kRecompute, kRecomputeEnd, kRecomputeSelective, kOptimizer, kGradPasses, kTimes
};

// Samples of each timed figure (kTimes lists) of one unit: built anew,
// `warmup` untimed rounds, then `reps` timed ones, appended to `samples`;
// counts its parameter tensors into *param_tensors.
void time_unit(Context& c, int64_t index, int warmup, int reps,
               std::vector<std::vector<double>>& samples, int64_t* param_tensors) {
  UnitStage u = build_unit(c, index);
  *param_tensors += static_cast<int64_t>(u.stage.params().size());
  StageProbe none = unit_probe(c, u, "none");
  StageProbe full = unit_probe(c, u, "full");
  // Selective recomputation re-creates attention probabilities inside a
  // block's backward: its cost is that backward's excess over none's. A
  // family without them (the MLP) drops nothing under selective.
  const bool drops = selective_recompute_drops(c.model);
  StageProbe selective = unit_probe(c, u, drops ? "selective" : "none");
  samples.resize(kTimes);
  for (int r = 0; r < warmup + reps; ++r) {
    const MicroBatchProbe kept = probe(c, none);
    const double selective_extra =
        drops ? std::max(0.0, probe(c, selective).backward_s - kept.backward_s) : 0.0;
    const double rerun = time_forward_rerun(c, u.stage);
    const MicroBatchProbe recomputed = probe(c, full);
    const double optimizer = time_optimizer_step(c, u);
    const double passes = time_gradient_passes(c, u);
    if (r < warmup) continue;
    samples[kForward].push_back(kept.forward_s);
    samples[kBackward].push_back(kept.backward_s);
    samples[kRecompute].push_back(rerun);
    samples[kRecomputeEnd].push_back(recomputed.recompute_s);
    samples[kRecomputeSelective].push_back(selective_extra);
    samples[kOptimizer].push_back(optimizer);
    samples[kGradPasses].push_back(passes);
  }
}

// This rank's medians of every unit's timed figures, (units, kTimes). The
// repetitions are spread over up to 3 passes through the units, so that a
// burst of load from another process spoils at most a third of a unit's
// samples, not all of them.
std::vector<double> time_units(Context& c, size_t units, const ProfileOptions& o, MPI_Comm comm,
                               int64_t* param_tensors) {
  const int passes = std::min(o.reps, 3);
  std::vector<std::vector<std::vector<double>>> samples(units);  // (units, kTimes, reps)
  for (int pass = 0; pass < passes; ++pass) {
    const int reps = o.reps / passes + (pass < o.reps % passes ? 1 : 0);
    int64_t tensors = 0;
    for (size_t u = 0; u < units; ++u) {
      timed_barrier(comm, "the profiler's barrier before a unit");
      time_unit(c, static_cast<int64_t>(u), o.warmup, reps, samples[u], &tensors);
    }
    *param_tensors = tensors;
    if (o.after_pass) o.after_pass();
  }
  std::vector<double> medians;
  for (const auto& unit : samples)
    for (const auto& figure : unit) medians.push_back(median(figure));
  return medians;
}

// Host bytes the training data (and evaluation data, when the deck
// evaluates) keeps on every stage, and besides on the first stage (cached
// inputs) and the last (cached targets), by the host statistics.
struct DataBytes {
  double every_stage = 0.0, inputs = 0.0, targets = 0.0;
};

DataBytes measure_data_bytes(const DatasetOpener& open, const DataSetConfig& config, bool evaluates,
                             int64_t rows) {
  const auto live = [] { return static_cast<double>(memory_stats().live_total); };
  DataBytes d;
  std::vector<Split> splits = {Split::Train};
  if (evaluates) splits.push_back(Split::Eval);
  for (Split split : splits) {
    const double start = live();
    std::unique_ptr<Dataset> data = open_dataset(open, config, split);
    const double made = live();
    data->inputs(0, rows);
    const double with_inputs = live();
    data->targets(0, rows);
    d.every_stage += made - start;
    d.inputs += with_inputs - made;
    d.targets += live() - with_inputs;
  }
  return d;
}

// The message a stage boundary carries: the largest output of a unit that a
// stage can end at (any but the last).
double boundary_message_bytes(const std::vector<UnitCost>& units) {
  double bytes = 0.0;
  for (size_t u = 0; u + 1 < units.size(); ++u) bytes = std::max(bytes, units[u].output_bytes);
  return bytes > 0.0 ? bytes : units.back().output_bytes;
}

// The highest-level CPU cache (sysfs; sysconf's figure is wrong in some
// VMs) and how many CPUs share it; {0, 1} when unknown.
struct LastLevelCache {
  double bytes = 0.0;
  int sharing_cpus = 1;
};

LastLevelCache last_level_cache() {
  LastLevelCache llc;
  int best_level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size"),
        shared_file(dir + "shared_cpu_list");
    int level = 0;
    std::string type, size, shared;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || level < best_level) continue;
    double bytes = std::atof(size.c_str());
    if (size.back() == 'K') bytes *= 1024.0;
    if (size.back() == 'M') bytes *= 1024.0 * 1024.0;
    int cpus = 0;  // "0-1,4-5" -> 4
    while (std::getline(shared_file, shared, ',')) {
      int first = 0, last = 0;
      const int read = std::sscanf(shared.c_str(), "%d-%d", &first, &last);
      cpus += read == 2 ? last - first + 1 : (read == 1 ? 1 : 0);
    }
    best_level = level;
    llc.bytes = bytes;
    llc.sharing_cpus = std::max(1, cpus);
  }
  return llc;
}

std::string mib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

// Warm or cold caches for the unit times (ModelProfile::cache). A unit
// measured alone keeps its state in the caches from one repetition to the
// next; in a run, the other units of its stage evict it between one
// micro-batch and the next once a stage's persistent bytes (the model's over
// the stages) exceed the rank's share of the last-level cache (the cache
// over the ranks of this node that share it). Then every timed pass starts
// from evicted caches. Device backends: warm (their caches are not modelled).
std::string choose_cache_state(Context& c, const ModelProfile& p, MPI_Comm comm) {
  if (c.be.device() != Device::CPU) return "warm: device caches are not modelled";
  const LastLevelCache llc = last_level_cache();
  if (llc.bytes <= 0.0) return "warm: the last-level cache size is unknown";
  int stages = 1;
  MPI_CHECK(MPI_Comm_size(comm, &stages));
  double persistent = 0.0;
  for (const UnitCost& u : p.units) persistent += u.param_bytes + u.grad_bytes + u.optimizer_bytes;
  const double per_stage = persistent / stages;
  const int sharing =
      std::min(llc.sharing_cpus, node_local_size(comm, "the node-local communicator split (profiler)"));
  const double share = llc.bytes / std::max(1, sharing);
  const std::string figures = "a stage's " + mib_text(per_stage) +
                              " of parameters, gradients and optimizer state " +
                              (per_stage > share ? "exceed" : "fit") + " its " + mib_text(share) +
                              " share of the " + mib_text(llc.bytes) + " last-level cache";
  if (per_stage <= share) return "warm: " + figures;
  c.evictor.assign(static_cast<size_t>(1.5 * llc.bytes), 1);
  return "cold: " + figures;
}

// profile_memory at a given split.
ModelProfile profile_memory_at(const Deck& deck, const BatchSplit& split, Backend& be,
                               const ProfileOptions& options) {
  ModelProfile p = profile_header(deck, split, be, options);
  Context c(deck, split, be, options);
  const std::vector<CostUnitInfo> infos = cost_units(deck.model);
  for (size_t u = 0; u < infos.size(); ++u)
    p.units.push_back(unit_memory(c, static_cast<int64_t>(u), infos[u]));
  // The loss gradient, kept from F to B under every recompute policy.
  p.units.back().stash_always_bytes = p.units.back().output_bytes;
  if (!options.memory_stats) {
    const DataBytes data =
        measure_data_bytes(options.open_dataset, data_set_config_for(deck), deck.training.eval_every > 0, c.rows);
    p.stage_data_bytes = data.every_stage;
    p.units.front().data_bytes += data.inputs;
    p.units.back().data_bytes += data.targets;
  }
  return p;
}

}  // namespace

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ModelProfile profile_memory(const Deck& deck, Backend& be, const ProfileOptions& options) {
  return profile_memory_at(deck, batch_split_of(deck), be, options);
}

ModelProfile profile_model(const Deck& deck, Backend& be, MPI_Comm comm,
                           const ProfileOptions& options) {
  return profile_model(deck, batch_split_of(deck), be, comm, options);
}

ModelProfile profile_model(const Deck& deck, const BatchSplit& split, Backend& be, MPI_Comm comm,
                           const ProfileOptions& options) {
  PT_CHECK(options.reps >= 1 && options.warmup >= 0, "profile repetitions");
  ModelProfile p = profile_memory_at(deck, split, be, options);
  Context c(deck, split, be, options);
  p.cache = choose_cache_state(c, p, comm);
  int64_t param_tensors = 0;
  const std::vector<double> mine = time_units(c, p.units.size(), options, comm, &param_tensors);
  const std::vector<double> times = median_over_ranks(mine, comm);
  double gradient_passes = 0.0;
  for (size_t u = 0; u < p.units.size(); ++u) {
    const double* t = &times[u * kTimes];
    UnitCost& unit = p.units[u];
    unit.forward_s = t[kForward];
    unit.backward_s = t[kBackward];
    unit.recompute_end_s = t[kRecomputeEnd];
    unit.recompute_selective_s = t[kRecomputeSelective];
    // The last unit always ends its segment: it never re-runs in full.
    unit.recompute_s = u + 1 == p.units.size() ? t[kRecomputeEnd] : t[kRecompute];
    unit.optimizer_s = t[kOptimizer];
    gradient_passes += t[kGradPasses];
  }
  p.step_overhead_s = gradient_passes + step_collectives_seconds(comm, param_tensors, options);
  if (options.stage_chains) p.calibration = calibrate_with_stage_chains(p, deck, split, be, comm, options).text;
  p.link = measure_link(comm, deck.pipeline.timeout_s, be, boundary_message_bytes(p.units), options);
  return p;
}

ModelProfile profile_weight_pass(const Deck& deck, Backend& be, MPI_Comm comm,
                                 const ModelProfile& profile, const ProfileOptions& options) {
  PT_CHECK(options.reps >= 1 && options.warmup >= 0, "profile repetitions");
  BatchSplit whole = batch_split_of(deck);
  whole.micro_batches = 1;  // a replica's whole batch: the pass's rows
  Context c(deck, whole, be, options);
  choose_cache_state(c, profile, comm);
  std::vector<double> mine;
  for (size_t u = 0; u < profile.units.size(); ++u) {
    timed_barrier(comm, "the profiler's barrier before a unit (weight-gradient pass)");
    UnitStage unit = build_unit(c, static_cast<int64_t>(u));
    StageProbe none = unit_probe(c, unit, "none");
    std::vector<double> times;
    for (int r = 0; r < options.warmup + options.reps; ++r) {
      const double backward_s = probe(c, none).backward_s;
      if (r >= options.warmup) times.push_back(backward_s);
    }
    mine.push_back(median(times));
  }
  const std::vector<double> times = median_over_ranks(mine, comm);
  ModelProfile pass = profile;
  for (size_t u = 0; u < pass.units.size(); ++u) {
    UnitCost& unit = pass.units[u];
    unit.backward_s = times[u];
    unit.recompute_s = unit.recompute_end_s = unit.recompute_selective_s = 0.0;
  }
  return pass;
}

}  // namespace pt
