// sampler.cpp: the forward-only sampling pipeline of sampler.hpp.
#include "pipetrain/runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

constexpr uint64_t kSampleStream = 0x53414d504c45ull;  // "SAMPLE": the draws' RNG stream

void wait_for(PendingTransfer& t, const std::string& what) {
  if (!poll_until([&] { return t.test(); }, wait_limit()))
    throw TimeoutError("sampling: waited " + std::to_string(wait_limit()) + " s (pipeline.timeout_s) for " +
                       what + " " + wait_phase());
}

// Stage `s` of the model on this rank: its output for the (1, T) tokens.
Tensor run_stage(SamplePipeline& p, StageModel& stage, const Tensor& tokens, Tensor& carried) {
  const int s = stage.stage;
  const int me = p.transport->rank();
  Tensor x;
  if (s == 0) {
    x = tokens;
  } else if (p.stage_rank[static_cast<size_t>(s - 1)] == me) {
    x = carried;  // the previous stage is ours too
  } else {
    x = Tensor::empty(stage.input_shape(1), stage.input_dtype, MemCategory::Activations, p.backend->device());
    auto rx = p.transport->irecv(x, p.stage_rank[static_cast<size_t>(s - 1)], s);
    wait_for(*rx, "stage " + std::to_string(s - 1) + "'s output from rank " +
                      std::to_string(p.stage_rank[static_cast<size_t>(s - 1)]));
  }
  StagePass pass;
  Tensor y = stage_forward(stage, *p.backend, x, pass);
  const size_t next = static_cast<size_t>(s + 1);
  if (next < p.stage_rank.size() && p.stage_rank[next] != me) {
    auto tx = p.transport->isend(y, p.stage_rank[next], s + 1);
    wait_for(*tx, "rank " + std::to_string(p.stage_rank[next]) + " to receive stage " + std::to_string(s) +
                      "'s output");
  }
  return y;
}

}  // namespace

int32_t choose_token(const float* logits, int64_t vocab, const SampleSettings& settings, int64_t index) {
  PT_CHECK(vocab > 0, "choose_token over an empty vocabulary");
  if (settings.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Largest first, ties by the lower id: a total order, so the same on every machine.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const size_t kept = settings.top_k > 0 ? std::min<size_t>(static_cast<size_t>(settings.top_k), order.size())
                                         : order.size();
  const double top = logits[order[0]];
  std::vector<double> weight(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    weight[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / settings.temperature);
    total += weight[i];
  }
  const double u = static_cast<double>(uniform01(settings.seed, kSampleStream, static_cast<uint64_t>(index))) * total;
  double sum = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    sum += weight[i];
    if (u < sum) return order[i];
  }
  return order[kept - 1];  // u rounded to the total
}

std::vector<int32_t> generate(SamplePipeline& p, const std::vector<int32_t>& prompt,
                              const SampleSettings& settings, const std::function<void(int32_t)>& on_token) {
  PT_CHECK(!prompt.empty() && static_cast<int64_t>(prompt.size()) <= p.seq_len,
           "generate: a prompt of 1..seq_len tokens");
  const int last_rank = p.stage_rank.back();
  const int me = p.transport->rank();
  std::vector<int32_t> context = prompt, out;
  for (int64_t i = 0; i < settings.tokens; ++i) {
    // The last T tokens of the context, then padding (token 0) to T.
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(context.size()), p.seq_len);
    Tensor host = Tensor::zeros({1, p.seq_len}, DType::I32, MemCategory::Activations, Device::CPU);
    std::copy(context.end() - len, context.end(), host.i32());
    const Tensor tokens = host.to(p.backend->device());
    Tensor carried;
    for (StageModel* stage : p.stages) carried = run_stage(p, *stage, tokens, carried);
    int32_t next = 0;
    if (me == last_rank) {
      const Tensor logits = carried.to(Device::CPU);  // (1, T, Vp)
      PT_CHECK(logits.dtype() == DType::F32, "sampling reads f32 logits");
      next = choose_token(logits.f32() + (len - 1) * logits.cols(), p.vocab, settings, i);
    }
    timed_bcast(&next, 1, MPI_INT, last_rank, p.comm, "the sampled token from the last stage's rank");
    context.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
  }
  return out;
}

}  // namespace pt
