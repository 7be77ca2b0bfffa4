// stage_probe.cpp: one micro-batch through one stage, its memory and times.
#include "pipetrain/runtime/stage_probe.hpp"

#include <algorithm>

#include "pipetrain/base/error.hpp"

namespace pt {

StageProbe::StageProbe(StageModel& stage, Backend& backend, RecomputePolicy policy,
                       const ExecutorConfig& config)
    : runner_(stage, std::move(policy), config, backend, nullptr), be_(backend), rows_(config.rows),
      regions_(backend) {}

// A stage input (not the first stage's: its data) and an output gradient
// (not the last stage's: its loss gradient) of the probe's rows, zero.
Tensor StageProbe::zero_input() const {
  const StageModel& stage = runner_.model();
  return Tensor::zeros(stage.input_shape(rows_), stage.input_dtype, MemCategory::Workspace, be_.device());
}

Tensor StageProbe::zero_output_grad() const {
  return Tensor::zeros(runner_.model().output_shape(rows_), DType::F32, MemCategory::Workspace,
                       be_.device());
}

MicroBatchProbe StageProbe::probe_micro_batch(const Dataset& data,
                                              const std::function<MemoryStats()>& stats,
                                              const std::function<void()>& reset_peaks,
                                              const std::function<void()>& before_each_pass) {
  const StageModel& stage = runner_.model();
  PassContext pass;
  pass.data = &data;
  pass.probing = true;
  runner_.begin_pass(pass);
  MicroBatchProbe probe;
  // Data that caches itself on first use (synthetic) does so before measuring.
  fill_data_cache(data, rows_, stage.is_first(), stage.is_last());
  const MemoryStats empty = stats();  // before the input and output-gradient buffers
  regions_.restart();
  // Timed regions, read at the end: the input fetch (first stage), F, B.
  const size_t fetched = stage.is_first() ? 1 : 0;
  if (fetched) regions_.begin();
  Tensor x = stage.is_first() ? data.inputs(0, rows_).to(be_.device()) : zero_input();
  if (fetched) regions_.end({});
  Tensor dy;
  if (!stage.is_last()) dy = zero_output_grad();
  const MemoryStats before = stats();
  reset_memory_peaks();
  if (reset_peaks) reset_peaks();
  if (before_each_pass) before_each_pass();
  regions_.begin();
  runner_.forward(0, std::move(x));
  regions_.end({});
  const int act = static_cast<int>(MemCategory::Activations);
  probe.stash_bytes = stats().live[act] - before.live[act];
  if (stage.is_last()) dy = std::move(runner_.state(0).grad_output);
  const MemoryStats after_forward = stats();  // its peak is the forward's
  reset_memory_peaks();
  if (reset_peaks) reset_peaks();
  if (before_each_pass) before_each_pass();
  regions_.begin();
  runner_.backward(0, std::move(dy));
  regions_.end({});
  const std::vector<double> seconds = regions_.read();
  probe.forward_s = seconds[fetched] + (fetched ? seconds[0] : 0.0);
  probe.backward_s = seconds[fetched + 1];
  probe.recompute_s = runner_.recompute_seconds();
  const MemoryStats after = stats();
  // Signed: a stage whose input is larger than all it allocates has a
  // transient below its stash.
  const auto above = [&](size_t peak, size_t base) {
    const double bytes = static_cast<double>(peak) - static_cast<double>(base) -
                         static_cast<double>(probe.stash_bytes);
    return static_cast<size_t>(std::max(0.0, bytes));
  };
  const size_t peak = std::max(after_forward.peak_total, after.peak_total);
  probe.transient_bytes = above(peak, before.live_total);
  probe.workspace_bytes = above(peak, empty.live_total);
  probe.backward_workspace_bytes = above(after.peak_total, empty.live_total);
  probe.forward_workspace_bytes = above(after_forward.peak_total, empty.live_total);
  runner_.end_pass();
  return probe;
}

StepSplitProbe StageProbe::probe_step_split(const Dataset& data, int micro_batches) {
  PT_CHECK(micro_batches >= 1, "a step's split backward needs a micro-batch");
  const StageModel& stage = runner_.model();
  PassContext pass;
  pass.data = &data;
  pass.probing = true;
  pass.micro_batches = micro_batches;
  pass.split = true;
  pass.step_weight_grads = true;
  runner_.begin_pass(pass);
  fill_data_cache(data, rows_, stage.is_first(), stage.is_last());
  regions_.restart();
  for (int mb = 0; mb < micro_batches; ++mb) {
    runner_.forward(mb, stage.is_first() ? runner_.data_input(mb) : zero_input());
    runner_.state(mb).output = Tensor();  // sent, in a run
    Tensor dy = stage.is_last() ? std::move(runner_.state(mb).grad_output) : zero_output_grad();
    regions_.begin();
    runner_.backward(mb, std::move(dy));
    regions_.end({});
    runner_.state(mb).grad_input = Tensor();  // sent, in a run
  }
  PT_CHECK(runner_.weight_pass_size(0) == micro_batches, "the probe's pass of weight gradients");
  regions_.begin();
  runner_.weights(0);
  regions_.end({});
  const std::vector<double> seconds = regions_.read();
  StepSplitProbe probe;
  for (int mb = 0; mb < micro_batches; ++mb) probe.input_s += seconds[static_cast<size_t>(mb)];
  probe.weight_s = seconds.back();
  runner_.end_pass();
  return probe;
}

}  // namespace pt
