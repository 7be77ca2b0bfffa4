// test_decks.hpp: the tiny GPT the equivalence, checkpoint and rebalancing
// tests train (a 16-token vocabulary, 8 tokens, width 16, 2 heads, Markov
// tokens), made from a test's own MLP deck so that its training settings
// (optimizer, schedule, micro-batches, clipping) carry over.
#pragma once

#include <cstdint>

#include "pipetrain/base/deck.hpp"

namespace pt_test {

// `d` becomes the tiny GPT with `blocks` blocks; everything else is kept.
inline pt::Deck tiny_gpt(pt::Deck d, int64_t blocks) {
  d.model.type = "gpt";
  d.model.loss = "cross_entropy";
  d.model.vocab_size = 16;
  d.model.seq_len = 8;
  d.model.d_model = 16;
  d.model.heads = 2;
  d.model.blocks = blocks;
  d.model.mlp_ratio = 2;
  d.data.type = "markov";
  d.data.markov_order = 1;
  d.data.concentration = 0.3;
  return d;
}

}  // namespace pt_test
