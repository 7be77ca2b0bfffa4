// deck_schema.cpp: the table of deck keys, value and consistency checks, and
// deck_to_toml. No toml11 here: it is confined to deck_toml.cpp.
#include "deck_schema.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/runtime/recompute.hpp"

namespace pt::deck_schema {
namespace {
// ---- the key schema --------------------------------------------------------

constexpr Range at_least(double lo) { return {lo, kInf, false, false}; }
constexpr Range above(double lo) { return {lo, kInf, true, false}; }
constexpr Range between(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Range fraction() { return {0.0, 1.0, false, true}; }  // [0, 1)
constexpr Range any() { return {}; }

// "mlp|gpt": the registered model families.
std::string family_choices() {
  std::string text;
  for (const std::string& name : model_family_names()) text += (text.empty() ? "" : "|") + name;
  return text;
}

bool is_synthetic(const Deck& d) { return d.data.type == DataKind::Synthetic; }
bool is_teacher_data(const Deck& d) { return is_synthetic(d) || d.data.type == DataKind::Images; }
bool is_markov(const Deck& d) { return d.data.type == DataKind::Markov; }
bool is_hdf5(const Deck& d) { return d.data.type == DataKind::Hdf5; }
bool is_image_files(const Deck& d) { return d.data.type == DataKind::ImageFiles; }
bool is_data_file(const Deck& d) { return is_hdf5(d) || is_image_files(d); }
bool is_gpt(const Deck& d) { return d.model.type == "gpt"; }
bool is_fp16(const Deck& d) { return d.training.precision == Precision::Fp16; }
bool is_half(const Deck& d) {
  return d.training.precision == Precision::Bf16 || d.training.precision == Precision::Fp16;
}
bool is_rebalancing(const Deck& d) { return d.rebalance.enabled; }
bool is_auto(const Deck& d) { return d.pipeline.auto_plan; }
bool is_replanning(const Deck& d) { return d.pipeline.auto_plan && d.pipeline.auto_replan_every > 0; }
bool is_slowed(const Deck& d) { return d.slowdown.rank >= 0; }
// pipeline.schedule_times: a zero-bubble schedule places by it, and so may
// the one pipeline.auto chooses. Not only when the deck leaves the schedule
// open: ranks other than 0 read the deck as rank 0 writes it, every key set.
bool takes_times(const Deck& d) { return schedule_takes_times(d.pipeline.schedule) || is_auto(d); }
bool places_no_w(const Deck& d) {
  const ScheduleKind s = d.pipeline.schedule;
  return s == ScheduleKind::GPipe || s == ScheduleKind::OneFOneB || s == ScheduleKind::Interleaved;
}
bool has_virtual_stages(const Deck& d) {
  return d.pipeline.schedule == ScheduleKind::Interleaved || d.pipeline.schedule == ScheduleKind::File;
}

#define PT_FIELD(member) [](Deck& d) -> Field { return field_of(&d.member); }
#define PT_FAMILY nullptr, nullptr, nullptr, true
#define PT_ALWAYS nullptr, nullptr

// Upper bounds keep counts inside `int` where the runtime uses it.
const std::vector<KeySpec> kDeckKeys = {
    {"model", "type", PT_FIELD(model.type), any(), nullptr, "model family", PT_ALWAYS, family_choices},
    {"model", "input_dim", PT_FIELD(model.mlp.input_dim), between(1, 1 << 24), nullptr, "features per sample", PT_FAMILY},
    {"model", "hidden_dim", PT_FIELD(model.mlp.hidden_dim), between(1, 1 << 24), nullptr, "width of the hidden layers", PT_FAMILY},
    {"model", "output_dim", PT_FIELD(model.mlp.output_dim), between(1, 1 << 24), nullptr, "regression outputs, or classes for cross_entropy", PT_FAMILY},
    {"model", "depth", PT_FIELD(model.mlp.depth), between(1, 1 << 20), nullptr, "number of Linear layers (the unit split between stages)", PT_FAMILY},
    {"model", "activation", PT_FIELD(model.activation), any(), nullptr, "activation: between the Linear layers (mlp; default gelu), in the stem and the residual blocks (cnn; default relu, ResNet's), in the convolutional stem and residual blocks (hybrid; default relu; its Transformer blocks' MLPs use GELU)", PT_FAMILY},
    {"model", "loss", PT_FIELD(model.mlp.loss), any(), nullptr, "training loss", PT_FAMILY},
    {"model", "vocab_size", PT_FIELD(model.gpt.vocab_size), between(2, 1 << 24), nullptr, "vocabulary size V (token ids 0..V-1)", PT_FAMILY},
    {"model", "vocab_multiple", PT_FIELD(model.gpt.vocab_multiple), between(1, 1 << 16), nullptr, "pad the vocabulary of the embedding and the LM head to a multiple of this (1 = none; 128 on GPUs, for aligned GEMMs); token ids stay 0..V-1 and the padded logits get no probability and zero gradient, so the padded rows stay zero", PT_FAMILY},
    {"model", "seq_len", PT_FIELD(model.gpt.seq_len), between(1, 1 << 16), nullptr, "tokens per sample T", PT_FAMILY},
    {"model", "d_model", PT_FIELD(model.gpt.d_model), between(1, 1 << 16), nullptr, "model width C", PT_FAMILY},
    {"model", "heads", PT_FIELD(model.gpt.heads), between(1, 1 << 12), nullptr, "attention heads; must divide d_model", PT_FAMILY},
    {"model", "blocks", PT_FIELD(model.gpt.blocks), between(1, 1 << 16), nullptr, "transformer blocks (the unit split between stages)", PT_FAMILY},
    {"model", "mlp_ratio", PT_FIELD(model.gpt.mlp_ratio), between(1, 64), nullptr, "MLP hidden width = mlp_ratio * d_model", PT_FAMILY},
    {"model", "attention", PT_FIELD(model.gpt.attention), any(), nullptr, "attention kernels: reference (probabilities T x T materialised in fp32) or fused (forward and backward one kernel each, keeping only each row's log-sum-exp; on CUDA cuDNN's SDPA, needs training.precision = \"bf16\", a head width d_model / heads that is a multiple of 8 up to 128 and a GPU of compute capability 8.0 or newer; docs/cuda.md)", PT_FAMILY},
    {"model", "causal", PT_FIELD(model.gpt.causal), any(), nullptr, "attention of the Transformer blocks: true, each token attends to itself and the tokens before it; false, to every token of the image (hybrid: its tokens are pixels, with no order to respect; the reference attention kernels only)", PT_FAMILY},
    {"model", "image_size", PT_FIELD(model.cnn.image_size), between(1, 1 << 12), nullptr, "height = width of the input images", PT_FAMILY},
    {"model", "in_channels", PT_FIELD(model.cnn.in_channels), between(1, 1 << 12), nullptr, "channels of the input images", PT_FAMILY},
    {"model", "classes", PT_FIELD(model.cnn.classes), between(2, 1 << 20), nullptr, "classes of the classification head", PT_FAMILY},
    {"model", "width", PT_FIELD(model.cnn.width), between(1, 1 << 14), nullptr, "channels of the stem and the first stage; stage s has width * 2^s", PT_FAMILY},
    {"model", "stages", PT_FIELD(model.cnn.stages), between(1, 12), nullptr, "stages of residual blocks; each after the first halves the resolution (a strided first block)", PT_FAMILY},
    {"model", "stage_blocks", PT_FIELD(model.cnn.stage_blocks), between(1, 1 << 12), nullptr, "residual blocks per stage (stages * stage_blocks units split between pipeline stages)", PT_FAMILY},
    {"model", "norm_groups", PT_FIELD(model.cnn.norm_groups), between(1, 1 << 14), nullptr, "group normalisation groups; must divide model.width (1 = layer normalisation over C, H, W)", PT_FAMILY},
    {"model", "norm", PT_FIELD(model.cnn.norm), any(), nullptr, "normalisation of the convolutional layers: group (model.norm_groups per image; bitwise equal to one process for any micro-batch split) or batch (per channel over each micro-batch, torchgpipe's deferred batch normalisation: running statistics updated once per step from the step's micro-batches, used in evaluation, saved in checkpoints; bitwise equal to one process with the same micro-batches; with data-parallel replicas the running statistics are those of the global batch, the replicas' statistics gathered every step; docs/cnn.md)", PT_FAMILY},
    {"model", "init_seed", PT_FIELD(model.init_seed), at_least(0), nullptr, "parameter initialisation seed", PT_ALWAYS},
    {"data", "type", PT_FIELD(data.type), any(), nullptr, "synthetic: teacher-network data (mlp); markov: random Markov chain tokens, hdf5: token file (gpt); images: images labelled by a teacher network (cnn, hybrid)", PT_ALWAYS},
    {"data", "samples", PT_FIELD(data.samples), at_least(1), nullptr, "size of the training set (and of the evaluation set)", is_teacher_data, "data.type = \"synthetic\" or \"images\""},
    {"data", "seed", PT_FIELD(data.seed), at_least(0), nullptr, "data seed (teacher, Markov chain, shuffle)", PT_ALWAYS},
    {"data", "markov_order", PT_FIELD(data.markov_order), between(1, 8), nullptr, "Markov chain order k: tokens of context", is_markov, "data.type = \"markov\""},
    {"data", "concentration", PT_FIELD(data.concentration), above(0), nullptr, "Dirichlet concentration of each transition row (small = predictable)", is_markov, "data.type = \"markov\""},
    {"data", "path", [](Deck& d) -> Field { return PathsRef{&d.data.path, &d.data.path_list}; }, any(), nullptr, "training data: hdf5: token file(s), a file, a glob pattern (matches in byte order of their paths) or a list of files and patterns, read as one token sequence; image_files: one HDF5 file of images and labels (docs/data.md)", is_data_file, "data.type = \"hdf5\" or \"image_files\""},
    {"data", "dataset", PT_FIELD(data.dataset), any(), nullptr, "1-D integer dataset of token ids in the HDF5 files", is_hdf5, "data.type = \"hdf5\""},
    {"data", "eval_path", [](Deck& d) -> Field { return PathsRef{&d.data.eval_path, &d.data.eval_path_list}; }, any(), nullptr, "held-out evaluation data, as data.path (\"\" = none)", is_data_file, "data.type = \"hdf5\" or \"image_files\""},
    {"data", "shuffle", PT_FIELD(data.shuffle), any(), nullptr, "seeded shuffle of the training windows (hdf5) or images (image_files)", is_data_file, "data.type = \"hdf5\" or \"image_files\""},
    {"data", "tokenizer", PT_FIELD(data.tokenizer), any(), nullptr, "tokenizer every token file must carry: \"\" = any, the same in every file; \"bytes\" = the byte tokenizer; or a tokenizer.json, whose SHA-256 the files must record (docs/data.md)", is_hdf5, "data.type = \"hdf5\""},
    {"training", "steps", PT_FIELD(training.steps), at_least(1), nullptr, "optimizer steps", PT_ALWAYS},
    {"training", "batch_size", PT_FIELD(training.batch_size), between(1, 1 << 30), nullptr, "samples per optimizer step (global batch)", PT_ALWAYS},
    {"training", "optimizer", PT_FIELD(training.optimizer), any(), nullptr, "optimizer", PT_ALWAYS},
    {"training", "lr", PT_FIELD(training.lr), above(0), nullptr, "peak learning rate", PT_ALWAYS},
    {"training", "min_lr", PT_FIELD(training.min_lr), at_least(0), nullptr, "floor of the cosine decay (<= lr)", PT_ALWAYS},
    {"training", "warmup_steps", PT_FIELD(training.warmup_steps), at_least(0), nullptr, "linear warm-up steps (< steps)", PT_ALWAYS},
    {"training", "lr_schedule", PT_FIELD(training.lr_schedule), any(), nullptr, "learning-rate schedule after warm-up", PT_ALWAYS},
    {"training", "momentum", PT_FIELD(training.momentum), fraction(), nullptr, "SGD momentum", PT_ALWAYS},
    {"training", "beta1", PT_FIELD(training.beta1), fraction(), nullptr, "AdamW first-moment decay", PT_ALWAYS},
    {"training", "beta2", PT_FIELD(training.beta2), fraction(), nullptr, "AdamW second-moment decay", PT_ALWAYS},
    {"training", "eps", PT_FIELD(training.eps), above(0), nullptr, "AdamW denominator epsilon", PT_ALWAYS},
    {"training", "weight_decay", PT_FIELD(training.weight_decay), at_least(0), nullptr, "decoupled weight decay (AdamW), L2 (SGD)", PT_ALWAYS},
    {"training", "grad_clip", PT_FIELD(training.grad_clip), at_least(0), nullptr, "global gradient-norm clip; 0 = off", PT_ALWAYS},
    {"training", "blas_threads", PT_FIELD(training.blas_threads), between(0, 4096), nullptr, "BLAS threads per rank; 0 = node cores / ranks on the node", PT_ALWAYS},
    {"training", "cpu_gemm", PT_FIELD(training.cpu_gemm), any(), nullptr, "library of the CPU backend's GEMMs: auto (oneDNN, with OpenBLAS for the weight gradients of wide layers over <= 64 rows), onednn (oneDNN, kernels chosen from the CPU's features; its matmul primitive for A B^T), onednn-sgemm (dnnl_sgemm for every GEMM) or openblas", PT_ALWAYS},
    {"training", "eval_every", PT_FIELD(training.eval_every), at_least(0), nullptr, "held-out evaluation loss every k steps; 0 = off", PT_ALWAYS},
    {"training", "init_from", PT_FIELD(training.init_from), any(), nullptr, "checkpoint whose weights (only) initialise the model; \"\" = none", PT_ALWAYS},
    {"training", "device", PT_FIELD(training.device), any(), nullptr, "where each rank computes: cpu, or cuda (one GPU per rank)", PT_ALWAYS},
    {"training", "precision", PT_FIELD(training.precision), any(), nullptr, "GEMM operand precision (fp32 master weights and accumulation; fp16 uses dynamic loss scaling); on the CPU the rounding is emulated exactly", PT_ALWAYS},
    {"training", "weight_copies", PT_FIELD(training.weight_copies), any(), nullptr, "keep a bf16/fp16 copy of every GEMM weight, rounded once per optimizer step, which the GEMMs read instead of rounding the fp32 master weight each time (2 bytes per weight element; results bitwise the same either way; docs/cuda.md)", is_half, "training.precision = \"bf16\" or \"fp16\""},
    {"training", "activation_copies", PT_FIELD(training.activation_copies), any(), nullptr, "keep the activations that the backward reads only as GEMM operands (the inputs of Linear layers; in a GPT the inputs of the qkv, attention projection, fc, MLP projection and LM head GEMMs) as bf16/fp16 copies, which the GEMMs read as they are: half the bytes of those activations, results bitwise the same either way; docs/cuda.md", is_half, "training.precision = \"bf16\" or \"fp16\""},
    {"training", "loss_scale", PT_FIELD(training.loss_scale), between(1, 16777216), nullptr, "fp16: the initial dynamic loss scale (halved on overflow, doubled after 2000 finite steps, at most 2^24)", is_fp16, "training.precision = \"fp16\""},
    {"training", "eval_batches", PT_FIELD(training.eval_batches), between(1, 1 << 20), nullptr, "batches per evaluation", PT_ALWAYS},
    {"pipeline", "stages", PT_FIELD(pipeline.stages), between(0, 1 << 16), nullptr, "pipeline stages, one per rank of a pipeline; 0 = ranks / data_parallel.replicas", PT_ALWAYS},
    {"pipeline", "micro_batches", PT_FIELD(pipeline.micro_batches), between(1, 1 << 20), nullptr, "micro-batches per step; must divide batch_size", PT_ALWAYS},
    {"pipeline", "schedule", PT_FIELD(pipeline.schedule), any(), nullptr, "pipeline schedule (docs/schedules.md): zb-h1 and zb-v split the backward into B and W", PT_ALWAYS},
    {"pipeline", "virtual_stages", PT_FIELD(pipeline.virtual_stages), between(1, 64), nullptr, "stages per rank: interleaved (rank r owns stages r, r+P, ...) or a schedule file with several stages per rank", has_virtual_stages, "pipeline.schedule = \"interleaved\" or \"file\""},
    {"pipeline", "schedule_times", PT_FIELD(pipeline.schedule_times), any(), nullptr, "how zb-h1 and zb-v place F, B and W: unit (every action one time unit, as in the papers), measured (placed again after the first 3 steps at each stage's measured F, B and W times when that simulates a bubble at least half a point smaller; results stay bitwise the same; docs/schedules.md) or auto (measured, but unit with rebalance.enabled = true)", takes_times, "pipeline.schedule = \"zb-h1\" or \"zb-v\", or pipeline.auto = true"},
    {"pipeline", "weight_grad", PT_FIELD(pipeline.weight_grad), any(), nullptr, "when the weight gradients are computed: micro_batch (in each micro-batch's backward) or step (B computes input gradients only; each stage's weight gradients run once after its last B, one GEMM per weight over all the step's micro-batches: faster at small micro-batches, at the memory of keeping every micro-batch's weight-gradient inputs until then; docs/schedules.md)", places_no_w, "pipeline.schedule = \"gpipe\", \"1f1b\" or \"interleaved\""},
    {"pipeline", "schedule_file", PT_FIELD(pipeline.schedule_file), any(), nullptr, "schedule text file, with schedule = \"file\"", PT_ALWAYS},
    {"pipeline", "partition", [](Deck& d) -> Field { return PartitionRef{&d.pipeline.partition_strategy, &d.pipeline.partition}; }, at_least(1), nullptr, "split of the partition units (Linear layers or blocks) between stages: uniform (by count), time (fastest slowest stage), memory (smallest largest peak), balanced (time within memory_budget_mb), or a list of per-stage counts", PT_ALWAYS},
    {"pipeline", "predict", PT_FIELD(pipeline.predict), any(), nullptr, "profile every unit briefly at start and report the planner's predicted step time, bubble and memory beside the measured ones", PT_ALWAYS},
    {"pipeline", "recompute", PT_FIELD(pipeline.recompute), any(), nullptr, "activation recomputation: none | selective | every:K | full | auto", PT_ALWAYS},
    {"pipeline", "recompute_stages", PT_FIELD(pipeline.recompute_stages), any(), nullptr, "per-stage recompute policies, one per stage; [] = pipeline.recompute everywhere", PT_ALWAYS},
    {"pipeline", "memory_budget_mb", PT_FIELD(pipeline.memory_budget_mb), at_least(0), nullptr, "per-stage memory budget (MiB) for recompute = \"auto\" and partition = \"balanced\"; 0 = none", PT_ALWAYS},
    {"pipeline", "transport", PT_FIELD(pipeline.transport), any(), nullptr, "activation/gradient exchange: cpu: auto = mpi, or nccl_model (MPI with NCCL's semantics); cuda: auto picks nccl unless ranks share a GPU, or mpi_staged", PT_ALWAYS},
    {"pipeline", "auto", PT_FIELD(pipeline.auto_plan), any(), nullptr, "choose at start, from brief profiles, the fastest plan within the memory budget for what the deck leaves open: schedule, micro_batches, recompute, partition, weight_grad and the P x D grid (docs/planner.md); keys the deck sets are kept", PT_ALWAYS},
    {"pipeline", "auto_replan_every", PT_FIELD(pipeline.auto_replan_every), between(0, 1 << 30), nullptr, "with pipeline.auto: every k steps compare the measured step time (median of the steps since the last check) with the prediction; past auto_replan_margin, plan again at the measured stage speeds and switch plans at the step boundary when the new one is predicted faster by more than the margin (docs/planner.md); 0 = off", is_auto, "pipeline.auto = true"},
    {"pipeline", "auto_replan_margin", PT_FIELD(pipeline.auto_replan_margin), Range{0.0, 1.0, true, true}, nullptr, "re-planning: the measured step must leave the prediction by more than this fraction before the run plans again, and a new plan must be predicted this fraction faster than the one in force before the run switches", is_replanning, "pipeline.auto_replan_every > 0"},
    {"pipeline", "timeout_s", PT_FIELD(pipeline.timeout_s), between(0.1, 1e6), nullptr, "seconds a rank waits for a peer before aborting (0.1 s to 1e6 s, about 11 days)", PT_ALWAYS},
    {"pipeline", "check_messages", PT_FIELD(pipeline.check_messages), any(), nullptr, "every activation and gradient sent between ranks carries an envelope (step, micro-batch, stages, kind, element count, checksum) that the receiver verifies, and every stage output is checked for inf/NaN; a mismatch ends the run naming the link and the message (docs/reliability.md)", PT_ALWAYS},
    {"data_parallel", "replicas", PT_FIELD(data_parallel.replicas), between(0, 1 << 16), nullptr, "data-parallel replicas D of the pipeline (ranks = pipeline ranks x D, docs/data-parallel.md); 0 = ranks / pipeline.stages, or 1 when pipeline.stages = 0", PT_ALWAYS},
    {"data_parallel", "reduction", PT_FIELD(data_parallel.reduction), any(), nullptr, "how the replicas' gradients are summed: replica (each replica's sum, added in replica order: bitwise across P at one D) or ordered (each micro-batch's gradient, added in global micro-batch order: bitwise across every P x D with the same micro-batch size; costs micro-batch copies of the gradients)", PT_ALWAYS},
    {"data_parallel", "check_every", PT_FIELD(data_parallel.check_every), at_least(0), nullptr, "every k steps, and before each checkpoint, the replicas compare a digest of each stage's parameters; a difference ends the run naming the stage, the replicas and the first differing parameter; 0 = off", PT_ALWAYS},
    {"data_parallel", "bucket_mb", PT_FIELD(data_parallel.bucket_mb), above(0), nullptr, "gradient MiB per data-parallel reduction bucket; a bucket is reduced as soon as its layers' last backward is done", PT_ALWAYS},
    {"rebalance", "enabled", PT_FIELD(rebalance.enabled), any(), nullptr, "move units between running stages when one becomes slow (docs/rebalance.md)", PT_ALWAYS},
    {"rebalance", "threshold", PT_FIELD(rebalance.threshold), above(1), nullptr, "slowest / fastest stage median compute time that starts a rebalancing decision", is_rebalancing, "rebalance.enabled = true"},
    {"rebalance", "every", PT_FIELD(rebalance.every), between(1, 1 << 30), nullptr, "steps between rebalancing checks; each check uses the medians over those steps", is_rebalancing, "rebalance.enabled = true"},
    {"rebalance", "margin", PT_FIELD(rebalance.margin), fraction(), nullptr, "smallest predicted gain (fraction of the slowest stage's time) worth a move", is_rebalancing, "rebalance.enabled = true"},
    {"slowdown", "rank", PT_FIELD(slowdown.rank), between(-1, 1 << 16), nullptr, "fault injection: this rank's F and B take slowdown.factor times as long; -1 = none", PT_ALWAYS},
    {"slowdown", "factor", PT_FIELD(slowdown.factor), between(1, 1000), nullptr, "fault injection: how many times as long the slowed rank computes", is_slowed, "slowdown.rank >= 0"},
    {"slowdown", "from_step", PT_FIELD(slowdown.from_step), at_least(0), nullptr, "fault injection: the first (0-based) step the rank is slowed", is_slowed, "slowdown.rank >= 0"},
    {"output", "dir", PT_FIELD(output.dir), any(), nullptr, "run directory: metrics.h5, deck.resolved.toml, ...", PT_ALWAYS},
    {"output", "log_every", PT_FIELD(output.log_every), at_least(1), nullptr, "print a step line every k steps", PT_ALWAYS},
    {"output", "trace", PT_FIELD(output.trace), any(), nullptr, "write trace.h5: every rank's timeline of F, B, recompute, communication, waits, optimizer", PT_ALWAYS},
    {"output", "checkpoint_every", PT_FIELD(output.checkpoint_every), at_least(0), nullptr, "checkpoint every k steps and at the end; 0 = off", PT_ALWAYS},
    {"output", "checkpoint_keep", PT_FIELD(output.checkpoint_keep), between(1, 1000000), nullptr, "newest checkpoints kept", PT_ALWAYS},
    {"output", "checkpoint_dir", PT_FIELD(output.checkpoint_dir), any(), nullptr, "checkpoint directory; \"\" = <dir>/checkpoints", PT_ALWAYS},
    {"output", "checkpoint_async", PT_FIELD(output.checkpoint_async), any(), nullptr, "copy each checkpoint into host memory and write it on a background thread while training goes on", PT_ALWAYS},
    {"output", "sample_every", PT_FIELD(output.sample_every), at_least(0), nullptr, "print text the model generates from output.sample_prompt every k steps (docs/sampling.md); 0 = off", is_gpt, "model.type = \"gpt\""},
    {"output", "sample_prompt", PT_FIELD(output.sample_prompt), any(), nullptr, "the prompt of those samples; \"\" = \"The\" (token 0 for a deck without a tokenizer)", is_gpt, "model.type = \"gpt\""},
    {"output", "sample_tokens", PT_FIELD(output.sample_tokens), between(1, 1 << 16), nullptr, "tokens generated per sample", is_gpt, "model.type = \"gpt\""},
};

#undef PT_FIELD
#undef PT_FAMILY
#undef PT_ALWAYS

const std::vector<std::string> kSections = {"model",         "data",      "training", "pipeline",
                                            "data_parallel", "rebalance", "slowdown", "output"};

// Keys that moved out of [pipeline] into sections of their own (#41). A deck
// may still write the old name: it sets the same field, with a notice
// (deck_toml.cpp); deck_to_toml writes the new one.
const std::vector<MovedKey> kMovedKeys = {
    {"pipeline.data_parallel", "data_parallel.replicas"},
    {"pipeline.dp_reduction", "data_parallel.reduction"},
    {"pipeline.dp_bucket_mb", "data_parallel.bucket_mb"},
    {"pipeline.replica_check_every", "data_parallel.check_every"},
    {"pipeline.rebalance", "rebalance.enabled"},
    {"pipeline.rebalance_threshold", "rebalance.threshold"},
    {"pipeline.rebalance_every", "rebalance.every"},
    {"pipeline.rebalance_margin", "rebalance.margin"},
    {"pipeline.slowdown_rank", "slowdown.rank"},
    {"pipeline.slowdown_factor", "slowdown.factor"},
    {"pipeline.slowdown_from_step", "slowdown.from_step"},
};

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::istringstream in(choices);
  for (std::string item; std::getline(in, item, '|');) out.push_back(item);
  return out;
}

}  // namespace

const std::vector<KeySpec>& keys() { return kDeckKeys; }
const std::vector<std::string>& sections() { return kSections; }

bool is_section(const std::string& name) {
  return std::find(kSections.begin(), kSections.end(), name) != kSections.end();
}

bool KindRef::parse(const std::string& text) const {
  size_t index = 0;
  if (!names.find(text, index)) return false;
  set(field, index);
  return true;
}

std::string partition_choices() {
  return kind_names(PartitionStrategy{}).joined(static_cast<size_t>(PartitionStrategy::Explicit));
}

const KeySpec* find_spec(const std::string& section, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section && name == spec.name) return &spec;
  }
  return nullptr;
}

const MovedKey* moved_key(const std::string& old_key) {
  for (const MovedKey& m : kMovedKeys)
    if (old_key == m.old_key) return &m;
  return nullptr;
}

namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// `text` with every whole `from` replaced by `to`.
std::string replace_key(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    const size_t end = at + from.size();
    if ((at > 0 && is_name_char(text[at - 1])) || (end < text.size() && is_name_char(text[end]))) {
      at = end;
      continue;
    }
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}

}  // namespace

std::string in_old_names(std::string text) {
  for (const MovedKey& m : kMovedKeys) text = replace_key(text, m.new_key, m.old_key);
  return text;
}

// ---- text helpers ----------------------------------------------------------

// Shortest %g text that reads back as exactly `x`.
std::string shortest(double x) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::string toml_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::string text = shortest(x);
  if (text.find('e') != std::string::npos && std::fabs(x) >= 1 && std::fabs(x) < 1e15) {
    char buf[40];  // an integer written as 1.2e+02: write 120 instead (exact below 2^53)
    std::snprintf(buf, sizeof buf, "%.0f", x);
    text = buf;
  }
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// The value of a deck field as TOML text.
std::string toml_text(const Field& field) {
  if (auto p = std::get_if<int64_t*>(&field)) return std::to_string(**p);
  if (auto p = std::get_if<uint64_t*>(&field)) return std::to_string(**p);
  if (auto p = std::get_if<double*>(&field)) return toml_float(**p);
  if (auto p = std::get_if<bool*>(&field)) return **p ? "true" : "false";
  if (auto p = std::get_if<std::string*>(&field)) return toml_string(**p);
  if (auto p = std::get_if<std::vector<std::string>*>(&field)) {
    std::string text = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) text += (i ? ", " : "") + toml_string((**p)[i]);
    return text + "]";
  }
  if (auto p = std::get_if<KindRef>(&field)) return toml_string(p->name());
  if (auto p = std::get_if<PathsRef>(&field))
    return p->list->empty() ? toml_string(*p->one) : toml_text(Field(p->list));
  if (auto p = std::get_if<PartitionRef>(&field))
    return *p->strategy == PartitionStrategy::Explicit ? toml_text(Field(p->counts))
                                                       : toml_string(kind_name(*p->strategy));
  const std::vector<int64_t>& list = *std::get<std::vector<int64_t>*>(field);
  std::string text = "[";
  for (size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + std::to_string(list[i]);
  return text + "]";
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      bool same = std::tolower(a[i - 1]) == std::tolower(b[j - 1]);
      size_t next = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.size()];
}

bool is_close(const std::string& typed, const std::string& known) {
  return edit_distance(typed, known) <= std::max<size_t>(1, typed.size() / 3);
}

std::string section_list() {
  std::string text;
  for (const std::string& s : kSections) text += (text.empty() ? "" : ", ") + ("[" + s + "]");
  return text;
}

// "; did you mean 'micro_batches'?" or the list of keys of the section.
std::string key_hint(const std::string& section, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section && is_close(name, spec.name)) {
      return "; did you mean '" + std::string(spec.name) + "'?";
    }
  }
  for (const MovedKey& m : kMovedKeys) {
    const std::string old_key = m.old_key;
    if (old_key.rfind(section + ".", 0) == 0 && is_close(name, old_key.substr(section.size() + 1)))
      return "; did you mean '" + std::string(m.new_key) + "' (formerly " + old_key + ")?";
  }
  for (const KeySpec& spec : kDeckKeys) {
    if (is_close(name, spec.name)) {
      return "; did you mean '" + std::string(spec.section) + "." + spec.name + "'?";
    }
  }
  std::string keys;
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section) keys += (keys.empty() ? "" : ", ") + std::string(spec.name);
  }
  return "; the keys of [" + section + "] are: " + keys;
}

}  // namespace

[[noreturn]] void unknown_key(const std::string& origin, const std::string& section,
                              const std::string& name) {
  throw InputError(origin + ": " + section + "." + name + ": unknown key" + key_hint(section, name));
}

[[noreturn]] void unknown_section(const std::string& origin, const std::string& name) {
  for (const std::string& s : kSections) {
    if (is_close(name, s)) {
      throw InputError(origin + ": [" + name + "]: unknown section; did you mean [" + s + "]?");
    }
  }
  throw InputError(origin + ": [" + name + "]: unknown section; the sections are " + section_list());
}

// A key written outside any section, e.g. "steps = 5" at the top of the file.
[[noreturn]] void key_outside_section(const std::string& origin, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (name == spec.name) {
      throw InputError(origin + ": " + name + ": key outside any section; did you mean to put it under [" +
                       spec.section + "]?");
    }
  }
  throw InputError(origin + ": " + name + ": key outside any section; the sections are " + section_list());
}

namespace {

// ---- value checks ----------------------------------------------------------

bool in_range(double x, const Range& r) {
  bool lo_ok = r.lo_open ? x > r.lo : x >= r.lo;
  bool hi_ok = r.hi_open ? x < r.hi : x <= r.hi;
  return lo_ok && hi_ok;
}

// A range's bound as a reader writes it: whole numbers in full (1000000,
// not 1e+06), others at their shortest.
std::string bound_text(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
  return shortest(x);
}

std::string range_text(const Range& r) {
  if (r.hi == kInf) return std::string(r.lo_open ? "> " : ">= ") + bound_text(r.lo);
  return std::string("in ") + (r.lo_open ? "(" : "[") + bound_text(r.lo) + ", " + bound_text(r.hi) +
         (r.hi_open ? ")" : "]");
}

bool applies(const Deck& deck, const KeySpec& spec) {
  if (spec.of_family) {
    const ModelFamily* family = find_model_family(deck.model.type);
    return family && family->uses_key(spec.name);
  }
  return spec.applies == nullptr || spec.applies(deck);
}

// When a key applies: its own text, or for a [model] key the families that
// declare it ("model.type = \"mlp\"").
std::string applies_when(const KeySpec& spec) {
  if (!spec.of_family) return spec.applies_when;
  std::string names;
  for (const std::string& name : model_family_names())
    if (find_model_family(name)->uses_key(spec.name)) names += (names.empty() ? "" : " or ") + toml_string(name);
  return "model.type = " + names;
}

// "a|b|c", or "" when any value goes.
std::string choices_text(const KeySpec& spec) {
  if (spec.choices) return spec.choices;
  if (spec.choices_of) return spec.choices_of();
  Deck probe;  // only the field's type matters
  const Field field = spec.field(probe);
  if (auto p = std::get_if<KindRef>(&field)) return p->choices();
  if (std::holds_alternative<PartitionRef>(field)) return partition_choices();
  return "";
}

// `allowed` ("a|b|c") as "\"a\", \"b\", \"c\"".
std::string quoted_list(const std::string& allowed) {
  std::string list;
  for (const std::string& a : split_choices(allowed.c_str())) list += (list.empty() ? "" : ", ") + toml_string(a);
  return list;
}

// A key the user set that the chosen model or data type does not use.
void check_applies(const Deck& deck, const KeySpec& spec) {
  const std::string dotted = std::string(spec.section) + "." + spec.name;
  if (applies(deck, spec) || deck.key_origin.count(dotted) == 0) return;
  // A key written under its old name gets its rule in old names too.
  const std::string rule = deck.written_as.count(dotted) ? in_old_names(applies_when(spec)) : applies_when(spec);
  throw InputError(deck.where(dotted) + ": only applies with " + rule + "; remove it or change that key");
}

void check_counts(const std::string& at, const std::vector<int64_t>& list, const Range& range) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (!in_range(static_cast<double>(list[i]), range)) {
      throw InputError(at + ": entry " + std::to_string(i) + " is " + std::to_string(list[i]) +
                       "; every entry must be " + range_text(range));
    }
  }
}

void check_value(Deck& deck, const KeySpec& spec, const UnreadKinds& unread) {
  if (!applies(deck, spec)) return;
  Field field = spec.field(deck);
  const std::string dotted = std::string(spec.section) + "." + spec.name;
  const auto bad = unread.find(dotted);
  const std::string value = bad != unread.end() ? toml_string(bad->second) : toml_text(field);
  std::string at = deck.where(dotted) + " = " + value;
  if (auto p = std::get_if<int64_t*>(&field)) {
    if (!in_range(static_cast<double>(**p), spec.range)) throw InputError(at + ": must be " + range_text(spec.range));
  } else if (auto p = std::get_if<double*>(&field)) {
    if (!std::isfinite(**p)) throw InputError(at + ": must be a finite number " + range_text(spec.range));
    if (!in_range(**p, spec.range)) throw InputError(at + ": must be " + range_text(spec.range));
  } else if (auto p = std::get_if<std::string*>(&field)) {
    const std::string choices = choices_text(spec);
    if (choices.empty()) return;
    std::vector<std::string> allowed = split_choices(choices.c_str());
    if (std::find(allowed.begin(), allowed.end(), **p) != allowed.end()) return;
    throw InputError(at + ": must be one of " + quoted_list(choices));
  } else if (std::holds_alternative<KindRef>(field)) {
    if (bad != unread.end()) throw InputError(at + ": must be one of " + quoted_list(choices_text(spec)));
  } else if (auto p = std::get_if<PartitionRef>(&field)) {
    if (bad != unread.end())
      throw InputError(at + ": must be one of " + quoted_list(partition_choices()) +
                       ", or a list of per-stage unit counts");
    if (*p->strategy == PartitionStrategy::Explicit) check_counts(at, *p->counts, spec.range);
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&field)) {
    check_counts(at, **p, spec.range);
  }
}

void check_image_file_keys(const Deck& deck);

// The data source must suit the model family, the family's own cross-key
// checks pass, and the data's keys must be complete.
void check_model_data(const Deck& deck) {
  const ModelConfig& m = deck.model;
  const DataConfig& d = deck.data;
  const ModelFamily& family = model_family(m);
  if (!family.trains_on(d.type))
    throw InputError(deck.where("model.type") + " = " + toml_string(family.name) + ": " + family.data_rule +
                     ", not " + deck.described("data.type", toml_string(kind_name(d.type))));
  if (family.check) family.check(deck);
  if (d.type == DataKind::Markov) {
    double entries = std::pow(static_cast<double>(m.gpt.vocab_size), static_cast<double>(d.markov_order + 1));
    if (entries > 16777216.0)
      throw InputError(deck.where("data.markov_order") + " = " + std::to_string(d.markov_order) +
                       ": the chain needs vocab_size^(order+1) = " + shortest(entries) +
                       " transition probabilities; at most 2^24 (16777216) are allowed with " +
                       deck.described("model.vocab_size", std::to_string(m.gpt.vocab_size)));
  }
  if (d.type == DataKind::ImageFiles) return check_image_file_keys(deck);
  if (d.type != DataKind::Hdf5) return;
  // An empty list names no file: said as such, whether or not it is needed.
  for (const char* key : {"data.path", "data.eval_path"}) {
    const bool train = std::strcmp(key, "data.path") == 0;
    const std::string& one = train ? d.path : d.eval_path;
    const std::vector<std::string>& list = train ? d.path_list : d.eval_path_list;
    if (one.empty() && list.empty() && deck.key_origin.count(key) && (train || deck.training.eval_every > 0))
      throw InputError(deck.where(key) +
                       ": names no token file (an empty string or list); give a file, a glob pattern or a "
                       "list of them");
  }
  if (d.path.empty() && d.path_list.empty())
    throw InputError(deck.where("data.type") + " = \"hdf5\": needs data.path (the token file)");
  if (deck.training.eval_every > 0 && d.eval_path.empty() && d.eval_path_list.empty())
    throw InputError(deck.where("training.eval_every") + " = " + std::to_string(deck.training.eval_every) +
                     ": needs data.eval_path (held-out token file) with data.type = \"hdf5\"");
}

// data.type = "image_files": one file per split, named; an MLP classifies.
void check_image_file_keys(const Deck& deck) {
  const DataConfig& d = deck.data;
  for (const char* key : {"data.path", "data.eval_path"}) {
    const bool train = std::strcmp(key, "data.path") == 0;
    if (!(train ? d.path_list : d.eval_path_list).empty())
      throw InputError(deck.where(key) + ": data.type = \"image_files\" reads one file per split; give one "
                       "file name, not a list");
  }
  if (d.path.empty())
    throw InputError(deck.where("data.type") + " = \"image_files\": needs data.path (the HDF5 image file)");
  if (deck.training.eval_every > 0 && d.eval_path.empty())
    throw InputError(deck.where("training.eval_every") + " = " + std::to_string(deck.training.eval_every) +
                     ": needs data.eval_path (held-out image file) with data.type = \"image_files\"");
  if (deck.model.type == "mlp" && deck.model.mlp.loss != LossKind::CrossEntropy)
    throw InputError(deck.where("model.loss") + " = " + toml_string(kind_name(deck.model.mlp.loss)) +
                     ": an MLP on data.type = \"image_files\" classifies its labels; set model.loss = "
                     "\"cross_entropy\"");
}

void check_recompute(const Deck& deck) {
  const PipelineConfig& p = deck.pipeline;
  const char* forms = "expected \"none\", \"selective\", \"every:K\" (K >= 1), \"full\" or \"auto\"";
  if (!is_recompute_setting(p.recompute))
    throw InputError(deck.where("pipeline.recompute") + " = " + toml_string(p.recompute) + ": " + forms);
  for (size_t i = 0; i < p.recompute_stages.size(); ++i)
    if (!is_recompute_setting(p.recompute_stages[i]))
      throw InputError(deck.where("pipeline.recompute_stages") + " entry " + std::to_string(i) +
                       " = " + toml_string(p.recompute_stages[i]) + ": " + forms);
  const bool uses_auto = any_auto_recompute(p);
  if (uses_auto && p.memory_budget_mb <= 0.0)
    throw InputError(deck.where("pipeline.recompute") +
                     " = \"auto\": needs pipeline.memory_budget_mb, the memory each stage may use");
  // "auto" sizes a policy's stash per micro-batch in flight; with
  // weight_grad = "step" every micro-batch also keeps its weight-gradient
  // inputs until the pass, which no policy drops and the estimate omits.
  if (uses_auto && p.weight_grad == WeightGradKind::Step)
    throw InputError(deck.where(is_auto_recompute(p.recompute) ? "pipeline.recompute" : "pipeline.recompute_stages") +
                     ": \"auto\" cannot be combined with " +
                     deck.described("pipeline.weight_grad", "\"step\"") +
                     " (every micro-batch keeps its weight-gradient inputs until the step's pass, "
                     "which recomputation does not drop); give a fixed policy");
}

void check_partition_strategy(const Deck& deck) {
  if (deck.pipeline.partition_strategy == PartitionStrategy::Balanced && deck.pipeline.memory_budget_mb <= 0.0)
    throw InputError(deck.where("pipeline.partition") +
                     " = \"balanced\": needs pipeline.memory_budget_mb, the memory each stage may use");
}

// The transports each device offers (docs/reliability.md for nccl_model).
void check_transport(const Deck& deck) {
  const TransportKind t = deck.pipeline.transport;
  const bool cpu = deck.training.device == DeviceKind::Cpu;
  if (cpu && (t == TransportKind::Nccl || t == TransportKind::MpiStaged))
    throw InputError(deck.where("pipeline.transport") + " = " + toml_string(kind_name(t)) +
                     ": needs training.device = \"cuda\"; the CPU offers auto, mpi and nccl_model");
  if (!cpu && (t == TransportKind::Mpi || t == TransportKind::NcclModel))
    throw InputError(deck.where("pipeline.transport") + " = " + toml_string(kind_name(t)) +
                     ": a CPU transport; with training.device = \"cuda\" use auto, nccl or mpi_staged");
}

void check_consistency(const Deck& deck) {
  const TrainingConfig& t = deck.training;
  const PipelineConfig& p = deck.pipeline;
  if (t.batch_size % p.micro_batches != 0) {
    throw InputError(deck.where("training.batch_size") + " = " + std::to_string(t.batch_size) +
                     ": must be divisible by " +
                     deck.described("pipeline.micro_batches", std::to_string(p.micro_batches)));
  }
  if (t.warmup_steps >= t.steps) {
    throw InputError(deck.where("training.warmup_steps") + " = " + std::to_string(t.warmup_steps) +
                     ": must be < " + deck.described("training.steps", std::to_string(t.steps)) +
                     " (a shorter run needs a shorter warm-up too, e.g. --set training.warmup_steps=" +
                     std::to_string(std::max<int64_t>(0, t.steps / 10)) + ")");
  }
  if (t.min_lr > t.lr) {
    throw InputError(deck.where("training.min_lr") + " = " + toml_float(t.min_lr) + ": must be <= " +
                     deck.described("training.lr", toml_float(t.lr)));
  }
  if (p.schedule == ScheduleKind::File && p.schedule_file.empty()) {
    throw InputError(deck.where("pipeline.schedule") +
                     " = \"file\": needs pipeline.schedule_file (the schedule text file to run)");
  }
  if (p.schedule != ScheduleKind::File && !p.schedule_file.empty()) {
    throw InputError(deck.where("pipeline.schedule_file") + " = " + toml_string(p.schedule_file) +
                     ": is only used with pipeline.schedule = \"file\", but " +
                     deck.described("pipeline.schedule", toml_string(kind_name(p.schedule))));
  }
  if (p.schedule_times == ScheduleTimesKind::Measured && deck.rebalance.enabled) {
    throw InputError(deck.where("pipeline.schedule_times") +
                     " = \"measured\": cannot be combined with " +
                     deck.described("rebalance.enabled", "true") +
                     " (a move changes the stage times the schedule was placed at)");
  }
  if (is_replanning(deck) && deck.rebalance.enabled) {
    throw InputError(deck.where("pipeline.auto_replan_every") + " = " +
                     std::to_string(p.auto_replan_every) + ": cannot be combined with " +
                     deck.described("rebalance.enabled", "true") +
                     " (re-planning solves the partition again at the measured stage speeds "
                     "itself); use one of them");
  }
  if (deck.output.dir.empty()) {
    throw InputError(deck.where("output.dir") + " = \"\": must name a directory");
  }
  check_model_data(deck);
  check_recompute(deck);
  check_partition_strategy(deck);
  check_transport(deck);
}

// The family's own defaults (ModelFamily::key_defaults) for the keys the
// deck left out.
void apply_family_defaults(Deck& deck) {
  for (const auto& [name, value] : find_model_family(deck.model.type)->key_defaults) {
    if (deck.key_origin.count("model." + name)) continue;
    const KeySpec* spec = find_spec("model", name);
    PT_CHECK(spec, "model family \"" + deck.model.type + "\" defaults model." + name + ", which is no key");
    const Field field = spec->field(deck);  // a kind (model.activation); no other is defaulted yet
    const KindRef* kind = std::get_if<KindRef>(&field);
    PT_CHECK(kind && kind->parse(value), "model family \"" + deck.model.type + "\": its default model." +
                                             name + " = \"" + value + "\" is not a value of the key");
  }
}

}  // namespace

void check_deck(Deck& deck, const UnreadKinds& unread) {
  // The family first: the keys that apply, their defaults, and every later
  // check depend on it.
  check_value(deck, *find_spec("model", "type"), unread);
  apply_family_defaults(deck);
  for (const KeySpec& spec : kDeckKeys) check_applies(deck, spec);
  for (const KeySpec& spec : kDeckKeys) check_value(deck, spec, unread);
  check_consistency(deck);
}

}  // namespace pt::deck_schema

namespace pt {

std::string deck_to_toml(const Deck& deck) {
  using namespace deck_schema;
  Deck copy = deck;  // the schema hands out non-const field pointers
  std::ostringstream out;
  out << "# pipetrain input deck, resolved: every key that applies, defaults included.\n"
         "# Run it with: mpirun -np <ranks> pipetrain train <this file>\n";
  for (const std::string& section : sections()) {
    out << "\n[" << section << "]\n";
    for (const KeySpec& spec : keys()) {
      if (section != spec.section || !applies(deck, spec)) continue;
      std::string line = std::string(spec.name) + " = " + toml_text(spec.field(copy));
      if (line.size() < 32) line.resize(32, ' ');
      out << line << "  # " << spec.help;
      const std::string choices = choices_text(spec);
      if (!choices.empty()) out << " (" << choices << ")";
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace pt
