// attention_dims.hpp: the geometry of the fused qkv tensor (mb, T, 3C) that
// both backends' attention kernels read: queries in columns [0, C), keys in
// [C, 2C), values in [2C, 3C), head h at offset h * D within each. Private to
// src/ (the CPU kernels and the CUDA backend).
#pragma once

#include <cmath>
#include <cstdint>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

struct AttnDims {
  int64_t mb, T, C, H, D;
  float scale;  // 1 / sqrt(D)
  int64_t qkv_seq() const { return T * 3 * C; }  // elements of one sequence in qkv
  int64_t probs_seq() const { return H * T * T; }
  // Element offset of head h of sequence b in qkv (mb, T, 3C), leading
  // dimension 3C; which = 0 queries, 1 keys, 2 values.
  int64_t qkv_offset(int64_t b, int64_t h, int which) const {
    return b * qkv_seq() + which * C + h * D;
  }
  // Element offset of head h of sequence b in y (mb, T, C), leading dimension C.
  int64_t out_offset(int64_t b, int64_t h) const { return b * T * C + h * D; }
};

inline AttnDims attn_dims(const Tensor& qkv, int64_t heads) {
  PT_CHECK(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0,
           "attention qkv must be (mb, T, 3C): " + shape_string(qkv.shape()));
  AttnDims d;
  d.mb = qkv.dim(0);
  d.T = qkv.dim(1);
  d.C = qkv.dim(2) / 3;
  d.H = heads;
  PT_CHECK(heads >= 1 && d.C % heads == 0, "attention heads must divide C");
  d.D = d.C / heads;
  d.scale = 1.f / std::sqrt(static_cast<float>(d.D));
  return d;
}

}  // namespace pt
