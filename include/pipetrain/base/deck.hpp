// deck.hpp: the resolved input deck, as plain data.
//
// Every key with a closed set of names holds an enum of base/deck_kinds.hpp
// (whose tables are the only place those names are written); the model
// family stays a registry name and recompute settings stay text
// (schedule/recompute.hpp parses them).
//
// A deck is a TOML file with the sections [model], [data], [training],
// [pipeline], [data_parallel], [rebalance], [slowdown] and [output]; the
// ten keys the last three took over from [pipeline] are still read under
// their old names (kMovedKeys in src/io/deck_schema.cpp). It is parsed
// (with toml11, in src/io/deck_toml.cpp only) on rank 0, checked strictly,
// and broadcast to every rank as its resolved TOML text. Nothing in this
// header depends on toml11.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/base/deck_kinds.hpp"
#include "pipetrain/base/model_config.hpp"

namespace pt {

struct DataConfig {
  // "synthetic": MLP data from a fixed random teacher network
  // "markov": token streams from a seeded random Markov chain (GPT)
  // "hdf5": token ids from an HDF5 file (GPT)
  // "images": images labelled by a fixed random teacher network (CNN)
  // "image_files": labelled images from an HDF5 file (CNN, or an MLP on the flattened pixels)
  DataKind type = DataKind::Synthetic;
  int64_t samples = 4096;          // synthetic, images: size of the training set
  uint64_t seed = 42;              // data seed (teacher, chain, shuffle)
  int64_t markov_order = 2;        // markov: tokens of context (k)
  double concentration = 0.1;      // markov: Dirichlet concentration of each row
  // hdf5: the training token files. The deck's data.path is a string (one
  // file or one glob pattern), kept in `path`, or a list of files and
  // patterns, kept in `path_list` (then `path` is ""); the files are read as
  // one token sequence (model/data.hpp, token_file_entries).
  std::string path;
  std::vector<std::string> path_list;
  std::string dataset = "tokens";  // hdf5: 1-D integer dataset in the files
  std::string eval_path;           // hdf5: held-out token file(s) ("" = none), as data.path
  std::vector<std::string> eval_path_list;
  bool shuffle = false;            // hdf5: seeded shuffle of the windows
  // hdf5: the tokenizer every token file must carry: "" = any, as long as
  // all files carry the same; "bytes" = the byte tokenizer; else the path of
  // a tokenizer.json (files must carry its SHA-256).
  std::string tokenizer;
};

struct TrainingConfig {
  int64_t steps = 20;              // optimizer steps
  int64_t batch_size = 64;         // samples per optimizer step (global batch)
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 1e-3;                // peak learning rate
  double min_lr = 0.0;             // floor of the cosine decay
  int64_t warmup_steps = 0;        // linear warm-up steps
  LrScheduleKind lr_schedule = LrScheduleKind::Cosine;  // after warm-up
  double momentum = 0.9;           // SGD momentum
  double beta1 = 0.9;              // AdamW
  double beta2 = 0.999;            // AdamW
  double eps = 1e-8;               // AdamW
  double weight_decay = 0.0;       // decoupled weight decay (AdamW), L2 (SGD)
  double grad_clip = 0.0;          // global-norm clip; 0 = off
  int64_t blas_threads = 0;        // 0 = node cores / ranks on the node
  CpuGemmKind cpu_gemm = CpuGemmKind::Auto;  // the CPU GEMM library
  int64_t eval_every = 0;          // held-out loss every k steps; 0 = off
  int64_t eval_batches = 2;        // batches per evaluation
  std::string init_from;           // checkpoint whose weights (only) start training
  DeviceKind device = DeviceKind::Cpu;  // cuda: one GPU per rank
  Precision precision = Precision::Fp32;  // of GEMM operands (emulated on the CPU)
  double loss_scale = 65536.0;     // fp16: initial dynamic loss scale
  // bf16, fp16: each GEMM weight keeps a copy in that precision, rounded once
  // per optimizer step (model/weight_copies.hpp); false: rounded in every GEMM.
  bool weight_copies = true;
  // bf16, fp16: activations kept for the backward only as GEMM operands are
  // kept rounded to that precision, 2 bytes an element
  // (model/activation_copies.hpp); false: kept in fp32.
  bool activation_copies = true;
};

struct PipelineConfig {
  int64_t stages = 0;              // 0 = number of MPI ranks
  int64_t micro_batches = 4;       // N
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  std::string schedule_file;       // with schedule = "file"
  // zb-h1 / zb-v: "unit" (the papers' placement: every action one time
  // unit), "measured" (placed again after the first steps at each stage's
  // measured F, B and W times; runtime/schedule_placement.hpp) or "auto"
  // (measured, unless rebalance.enabled moves units under the schedule).
  ScheduleTimesKind schedule_times = ScheduleTimesKind::Auto;
  int64_t virtual_stages = 1;      // stages per rank: interleaved and file (zb-v: 2)
  // When gpipe, 1f1b and interleaved compute weight gradients:
  // "micro_batch" (in each micro-batch's backward) or "step" (B computes the
  // input gradient only; each stage's weight gradients run once at the end
  // of the step, one GEMM per product over all micro-batches' rows;
  // schedule.hpp, with_step_weight_grads).
  WeightGradKind weight_grad = WeightGradKind::MicroBatch;
  // How partition units are split between stages (docs/planner.md):
  // "uniform" (by count), "time" (slowest stage fastest), "memory" (largest
  // stage peak smallest), "balanced" (time, with every stage's peak within
  // memory_budget_mb), or "explicit" when the deck gives a list of counts.
  PartitionStrategy partition_strategy = PartitionStrategy::Uniform;
  std::vector<int64_t> partition;  // explicit per-stage unit counts; empty unless "explicit"
  bool predict = true;             // brief profile at start; the planner's prediction beside every step
  double timeout_s = 120.0;        // a wait longer than this aborts the job
  // Activation recomputation: "none" | "selective" | "every:K" | "full" | "auto"
  std::string recompute = "none";
  std::vector<std::string> recompute_stages;  // per-stage override; empty = recompute
  double memory_budget_mb = 0.0;   // per-stage budget for recompute "auto" and partition "balanced"; 0 = none
  // Activation/gradient exchange. CPU: "auto" (= "mpi") | "mpi" | "nccl_model"
  // (MPI with NCCL's semantics); CUDA: "auto" | "nccl" | "mpi_staged".
  TransportKind transport = TransportKind::Auto;
  // pipeline.auto: at start, the run takes the planner's fastest plan within
  // the memory budget for the keys above the deck does not set (schedule,
  // micro_batches, recompute, partition, weight_grad; docs/planner.md).
  bool auto_plan = false;
  // pipeline.auto_replan_every = k (with auto): every k steps the run
  // compares its measured step time with its prediction and, past
  // auto_replan_margin, plans again at the measured stage speeds and
  // switches at the step boundary when the new plan is predicted faster by
  // more than the margin (docs/planner.md, "Re-planning during training").
  // 0 = off.
  int64_t auto_replan_every = 0;
  double auto_replan_margin = 0.1;  // fraction, in (0, 1)
  // Every activation and gradient sent between ranks carries an envelope the
  // receiver verifies (step, micro-batch, stages, kind, element count,
  // checksum), and every stage output is checked for inf/NaN
  // (docs/reliability.md, "Checks on the data between stages").
  bool check_messages = false;
};

// [data_parallel] (docs/data-parallel.md): replicas = D replicas of the
// pipeline, ranks = pipeline ranks x D; 0 = ranks / pipeline.stages (1 when
// pipeline.stages = 0). batch_size stays the global batch; each replica runs
// micro_batches micro-batches of batch_size / (D x micro_batches).
struct DataParallelSection {
  int64_t replicas = 0;
  // How the D replicas' gradients are summed: "replica" (each replica's
  // accumulated gradient, added in replica order: bitwise across P at a
  // given D) or "ordered" (every micro-batch's gradient kept apart and added
  // in global micro-batch order: bitwise across every P x D with the same
  // micro-batch size, at (micro_batches + D x micro_batches) x the gradient
  // memory and D x micro_batches x the traffic).
  DpReductionKind reduction = DpReductionKind::Replica;
  double bucket_mb = 4.0;          // gradient bytes per reduction bucket (MiB)
  // Every check_every steps (and before every checkpoint) each stage's
  // parameters are compared across its replicas by digest; a difference
  // ends the run (docs/reliability.md, "Replicas that disagree"). 0 = off.
  int64_t check_every = 100;
};

// [rebalance] Dynamic rebalancing (docs/rebalance.md): every `every` steps
// the median measured compute time of each stage over those steps is
// compared; at slowest / fastest >= threshold, units move between the
// running stages when the solver predicts a gain of at least margin.
struct RebalanceSection {
  bool enabled = false;
  double threshold = 1.5;
  int64_t every = 10;
  double margin = 0.05;
};

// [slowdown] Fault injection (tests, benchmarks): from step from_step on,
// rank `rank`'s F and B take `factor` times as long (it sleeps after each);
// -1 = no rank is slowed. Changes no number.
struct SlowdownSection {
  int64_t rank = -1;
  double factor = 2.0;
  int64_t from_step = 0;
};

struct OutputConfig {
  std::string dir = "runs/default";  // metrics.h5, deck.resolved.toml, ...
  int64_t log_every = 1;             // print a step line every k steps
  bool trace = false;                // write <dir>/trace.h5 (every rank's timeline)
  int64_t checkpoint_every = 0;      // checkpoint every k steps (and at the end); 0 = off
  int64_t checkpoint_keep = 3;       // newest checkpoints kept
  std::string checkpoint_dir;        // "" = <dir>/checkpoints
  bool checkpoint_async = false;     // stage to host memory, write in the background
  int64_t sample_every = 0;          // GPT: print a generated sample every k steps; 0 = off
  std::string sample_prompt;         // its prompt; "" = "The" (token 0 without a tokenizer)
  int64_t sample_tokens = 32;        // tokens per sample
};

struct Deck {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  PipelineConfig pipeline;
  DataParallelSection data_parallel;
  RebalanceSection rebalance;
  SlowdownSection slowdown;
  OutputConfig output;

  // Where each "section.key" was set: "file:line" or "--set". Used to point
  // error messages at the source of a value. Keys left at default are absent.
  std::string source_file;
  std::map<std::string, std::string> key_origin;
  // Keys whose value was written under an old name (docs/decks.md, "Moved
  // keys"): "rebalance.every" -> "pipeline.rebalance_every". Messages name
  // such a key as it was written; absent when written under its own name.
  std::map<std::string, std::string> written_as;

  // "inputs/mlp.toml:12: training.batch_size" style prefix for messages.
  std::string where(const std::string& dotted_key) const;
  // "pipeline.micro_batches = 8 (inputs/mlp.toml:20)": a second key in a
  // message, with the origin of its value ("default" when not set).
  std::string described(const std::string& dotted_key, const std::string& value) const;
  // The name a message gives `dotted_key`: the old name the deck wrote it
  // under, else the key itself.
  std::string named(const std::string& dotted_key) const;
};

// D of data_parallel.replicas; 1 before the layout check resolves 0.
inline int64_t data_parallel_size(const Deck& deck) {
  return deck.data_parallel.replicas > 0 ? deck.data_parallel.replicas : 1;
}

// Whether a zb-h1 or zb-v run places its schedule again at the F, B and W
// times it measures: pipeline.schedule_times "measured", or "auto" without
// rebalance.enabled.
bool places_at_measured_times(const Deck& deck);
// The same for a zero-bubble schedule, whichever the deck names (what the
// planner assumes of the zb-h1 and zb-v plans it weighs).
bool zero_bubble_placed_at_measured_times(const Deck& deck);

}  // namespace pt
