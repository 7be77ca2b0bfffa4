// sampler.hpp: text generation with a GPT as a forward-only pipeline
// (docs/sampling.md).
//
// For each new token the context (the prompt and what was generated, its
// last seq_len tokens) runs through the stages in order, one sample of
// seq_len positions: tokens beyond the context are padding, which causal
// attention keeps from the positions before them, so the logits at the
// context's last position are those of the context alone. No KV cache: the
// whole context is computed again for every token (cheap at these sizes).
// A stage's output goes to the rank of the next stage over the run's
// Transport (waits bounded by the deck's timeout); the last stage picks the
// token and broadcasts it to every rank of the pipeline.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt {

struct SampleSettings {
  int64_t tokens = 64;       // new tokens to generate
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // sample among the k most likely tokens; 0: all
  uint64_t seed = 1;         // the draws: token i uses uniform01(seed, stream, i)
};

// The next token from `logits` (vocab values of one position): the first
// largest with temperature 0; else a draw from softmax(logits / temperature)
// over the top_k largest (ties: the lower id first), computed in double.
// `index`: the token's index in the generation (its draw).
int32_t choose_token(const float* logits, int64_t vocab, const SampleSettings& settings, int64_t index);

// One pipeline's stages as this rank holds them.
struct SamplePipeline {
  std::vector<StageModel*> stages;  // this rank's, ascending
  std::vector<int> stage_rank;      // (stages of the model) the rank of comm holding each
  Backend* backend = nullptr;
  Transport* transport = nullptr;   // over comm
  MPI_Comm comm = MPI_COMM_NULL;
  int64_t seq_len = 1;              // T: the model's context
  int64_t vocab = 1;                // ids drawn: 0..vocab-1 (the model's V, or a smaller tokenizer's)
};

// Collective over p.comm: settings.tokens new ids after `prompt` (1..T ids,
// checked by the caller), the same on every rank. `on_token` (may be empty)
// sees each new id as it is chosen, on every rank.
std::vector<int32_t> generate(SamplePipeline& p, const std::vector<int32_t>& prompt,
                              const SampleSettings& settings,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace pt
