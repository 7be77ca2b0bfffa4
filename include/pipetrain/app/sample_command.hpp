// sample_command.hpp: text generation from a GPT (docs/sampling.md): the
// `sample` command, and the samples a training run prints every
// output.sample_every steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/app/command_line.hpp"
#include "pipetrain/app/run_state.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/text_tokenizer.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// Collective over w.comm: `pipetrain sample DECK --resume PATH --prompt ...`.
// One stage per rank (any number of ranks up to the model's blocks, whatever
// the checkpoint was saved with). Returns the exit status.
int run_sample(const World& w, const CommandLine& cli, const Deck& deck);

// What a training run needs to print its samples: the tokenizer (rank 0
// decodes) and the prompt's ids (every rank).
struct TrainingSamples {
  bool enabled = false;  // output.sample_every > 0
  TextTokenizer tokenizer;
  std::vector<int32_t> prompt;
  int64_t vocab = 0;     // ids drawn: 0..vocab-1
};
// Collective over w.comm: reads the deck's tokenizer and encodes
// output.sample_prompt (rank 0, then broadcast). Returns false after a bad
// tokenizer or prompt (rank 0 printed the message; the same on every rank).
bool prepare_training_samples(const World& w, const Deck& deck, TrainingSamples& out);
// Collective over w.comm when a sample is due after `step` (0-based): rank 0
// prints "sample after step N: <prompt><text>".
void print_training_sample(const World& w, const Deck& deck, Trainer& trainer,
                           const TrainingSamples& samples, int64_t step);

}  // namespace pt
