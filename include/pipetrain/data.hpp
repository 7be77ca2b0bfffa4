// data.hpp: training data, addressed by global sample index.
//
// Step t uses samples (t * batch + j) mod samples, j = 0..batch-1; micro-batch
// m of that step holds j = m * rows .. (m + 1) * rows - 1. The first stage
// asks for inputs and the last stage for targets; neither needs the other.
#pragma once

#include <memory>

#include "pipetrain/deck.hpp"
#include "pipetrain/tensor.hpp"

namespace pt {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // (count, input_dim) f32 for samples first..first+count-1 (mod size).
  virtual Tensor inputs(int64_t first, int64_t count) const = 0;
  // (count, output_dim) f32 for MSE, (count) i32 class labels for cross-entropy.
  virtual Tensor targets(int64_t first, int64_t count) const = 0;
};

// Synthetic regression/classification: x ~ N(0, 1); a fixed random teacher
// A (output_dim, input_dim) gives targets tanh(A x) (MSE) or argmax(A x)
// (cross-entropy). Every value is a pure function of (seed, sample index).
std::unique_ptr<Dataset> make_dataset(const Deck& deck);

// First global sample of micro-batch `mb` of step `step`.
inline int64_t micro_batch_first_sample(const Deck& deck, int64_t step, int64_t mb) {
  const int64_t rows = deck.training.batch_size / deck.pipeline.micro_batches;
  return step * deck.training.batch_size + mb * rows;
}

}  // namespace pt
