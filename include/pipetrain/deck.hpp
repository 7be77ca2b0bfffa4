// deck.hpp: the resolved input deck, as plain data.
//
// A deck is a TOML file with the sections [model], [data], [training],
// [pipeline] and [output]. It is parsed (with toml11, in src/io/deck_toml.cpp
// only) on rank 0, checked strictly, and broadcast to every rank as its
// resolved TOML text. Nothing in this header depends on toml11.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pt {

struct ModelConfig {
  std::string type = "mlp";        // "mlp" (the GPT model arrives later)
  int64_t input_dim = 64;          // features per sample
  int64_t hidden_dim = 128;        // width of hidden layers
  int64_t output_dim = 8;          // regression outputs or classes
  int64_t depth = 8;               // number of Linear layers (partition units)
  std::string activation = "gelu"; // "relu" | "gelu"
  std::string loss = "mse";        // "mse" | "cross_entropy"
  uint64_t init_seed = 1234;       // parameter initialisation seed
};

struct DataConfig {
  std::string type = "synthetic";  // "synthetic": a fixed random teacher network
  int64_t samples = 4096;          // size of the training set
  uint64_t seed = 42;              // data seed
};

struct TrainingConfig {
  int64_t steps = 20;              // optimizer steps
  int64_t batch_size = 64;         // samples per optimizer step (global batch)
  std::string optimizer = "adamw"; // "sgd" | "adamw"
  double lr = 1e-3;                // peak learning rate
  double min_lr = 0.0;             // floor of the cosine decay
  int64_t warmup_steps = 0;        // linear warm-up steps
  std::string lr_schedule = "cosine";  // "constant" | "cosine"
  double momentum = 0.9;           // SGD momentum
  double beta1 = 0.9;              // AdamW
  double beta2 = 0.999;            // AdamW
  double eps = 1e-8;               // AdamW
  double weight_decay = 0.0;       // decoupled weight decay (AdamW), L2 (SGD)
  double grad_clip = 0.0;          // global-norm clip; 0 = off
  int64_t blas_threads = 0;        // 0 = node cores / ranks on the node
};

struct PipelineConfig {
  int64_t stages = 0;              // 0 = number of MPI ranks
  int64_t micro_batches = 4;       // N
  std::string schedule = "1f1b";   // "gpipe" | "1f1b" | "file"
  std::string schedule_file;       // with schedule = "file"
  std::vector<int64_t> partition;  // per-stage unit counts; empty = uniform
  double timeout_s = 120.0;        // a wait longer than this aborts the job
};

struct OutputConfig {
  std::string dir = "runs/default";  // metrics.h5, deck.resolved.toml, ...
  int64_t log_every = 1;             // print a step line every k steps
};

struct Deck {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  PipelineConfig pipeline;
  OutputConfig output;

  // Where each "section.key" was set: "file:line" or "--set". Used to point
  // error messages at the source of a value. Keys left at default are absent.
  std::string source_file;
  std::map<std::string, std::string> key_origin;

  // "inputs/mlp.toml:12: training.batch_size" style prefix for messages.
  std::string where(const std::string& dotted_key) const;
};

}  // namespace pt
