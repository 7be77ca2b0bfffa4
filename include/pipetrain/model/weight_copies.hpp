// weight_copies.hpp: low-precision copies of the GEMM weights, rounded once
// per change of the weights instead of in every GEMM (training.weight_copies).
//
// In bf16 and fp16 every GEMM rounds its fp32 operands to the GEMM precision.
// A weight is read by two GEMMs per micro-batch (forward, input gradient)
// but changes only once per optimizer step, so with copies each GEMM weight
// (Param::gemm_weight) keeps `copy`, its fp32 master value rounded to the
// backend's precision (BF16 / F16, Backend::round_to), and the layers pass
// weight_operand(be, p) to matmul: the copy, which matmul uses as it is.
// Rounding is idempotent, so a GEMM on the copy gives bitwise what the GEMM on the
// master gives (it rounds the master to the same values).
//
// The invariant: a GEMM never reads a copy older than its master. Every write
// of a master advances Param::version (note_value_written): the optimizer
// step (which re-rounds the copies of what it updated at once, so each
// applied step costs one cast per weight, and a step the fp16 loss scaler
// skipped costs none) and a checkpoint load; the units a rebalancing move
// brings arrive without copies and get theirs once received, and a move to
// another device takes the copy along. weight_operand hands out the copy
// only while copy_version == version, else the master (rounded by matmul
// per call, the same bits); and every pass of a stage starts by re-rounding
// the copies that fell behind (StageRunner::begin_pass), so in a pass none is
// stale. A copy costs 2 bytes per weight element, counted as
// MemCategory::Parameters (memory statistics, the profiler, the planner).
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/model/layers.hpp"

namespace pt {

// The tensor matmul reads for GEMM weight `p` on `be`: its copy when the copy
// holds the current value in be's precision, else the fp32 value.
const Tensor& weight_operand(const Backend& be, const Param& p);

// Records that p.value was written outside the optimizer (a checkpoint
// load); its copy, if any, is stale until refreshed.
void note_value_written(Param& p);

// Gives every GEMM weight of `params` that has none a copy in be's precision,
// on the value's device (nothing when that precision stores no copies: fp32,
// tf32). Returns the copies made. Where parameters come into being for a run
// (build, arriving units of a move, a profiled unit) with weight copies on.
int64_t make_weight_copies(Backend& be, const std::vector<Param*>& params);

// Re-rounds the copy of `p` if it is stale; true when it did.
bool refresh_weight_copy(Backend& be, Param& p);
// The same for every parameter; returns the copies re-rounded.
int64_t refresh_weight_copies(Backend& be, const std::vector<Param*>& params);

}  // namespace pt
