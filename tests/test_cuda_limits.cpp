// test_cuda_limits.cpp: the CUDA kernels past the shapes where their launch
// geometry changes, against the CPU backend: attention over T > 256 (the
// causal softmax then loops over a row, 256 threads per block), LayerNorm at
// C >= 6144 (the backward pass needs over 48 KiB of shared memory with its static part, an
// opt-in launch attribute), and more than 65,535 rows (the limit of the
// y and z grid dimensions) for every row-wise kernel: LayerNorm, bias,
// cross-entropy, embedding, causal softmax. Tolerances are those of
// test_cuda_kernels.cpp, except for the column sums over 70,000 rows
// (dgamma, dbeta, bias gradient), where the CPU's float running sum is itself
// off by about 1e-5 (emulated: 4e-6 to 1.2e-5 against the chunked order).
// Skips without a GPU (fails under PIPETRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cstring>

#include "test_cuda_util.hpp"
#include "bitwise.hpp"

namespace pt {
namespace {

using test::expect_close;
using test::gpu;
using test::host;
using test::random_host;
using test::transformer;

constexpr int64_t kManyRows = 70000;   // > 65,535
constexpr double kLongSumTol = 1e-4;  // column sums over kManyRows rows

Tensor cpu_t(const Shape& s) {
  return Tensor::empty(s, DType::F32, MemCategory::Workspace, Device::CPU);
}
Tensor gpu_t(const Shape& s) {
  return Tensor::empty(s, DType::F32, MemCategory::Workspace, Device::CUDA);
}

// Bitwise equal, wherever the tensors live.
bool same_bits(const Tensor& a, const Tensor& b) { return test::same_bits(host(a), host(b)); }

// Forward and backward of causal attention on both backends (fp32).
void compare_attention(int64_t mb, int64_t T, int64_t H, int64_t D, const std::string& what) {
  const int64_t C = H * D;
  Tensor qkv = random_host({mb, T, 3 * C}, 50), dy = random_host({mb, T, C}, 51);
  Tensor probs = cpu_t({mb, H, T, T}), y = cpu_t({mb, T, C}), dqkv = cpu_t({mb, T, 3 * C});
  transformer(cpu_backend()).attention_probs(qkv, H, probs);
  transformer(cpu_backend()).attention_values(qkv, probs, H, y);
  transformer(cpu_backend()).attention_backward(qkv, probs, dy, H, dqkv);
  auto be = cuda::make_backend();
  Tensor gq = gpu(qkv), gp = gpu_t(probs.shape()), gy = gpu_t(y.shape());
  Tensor gd = Tensor::zeros(dqkv.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  transformer(*be).attention_probs(gq, H, gp);
  transformer(*be).attention_values(gq, gp, H, gy);
  transformer(*be).attention_backward(gq, gp, gpu(dy), H, gd);
  expect_close(gp, probs, 1e-5, what + " probs");
  expect_close(gy, y, 1e-5, what + " values");
  expect_close(gd, dqkv, 1e-5, what + " dqkv");
}

// LayerNorm forward and backward on both backends; `sum_tol` for dgamma, dbeta.
void compare_layernorm(int64_t rows, int64_t C, double sum_tol, const std::string& what) {
  Tensor x = random_host({rows, C}, 52, 2.f), gamma = random_host({C}, 53);
  Tensor beta = random_host({C}, 54), dy = random_host({rows, C}, 55);
  Tensor y = cpu_t({rows, C}), mean = cpu_t({rows}), rstd = cpu_t({rows});
  transformer(cpu_backend()).layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  auto be = cuda::make_backend();
  Tensor gx = gpu(x), ggamma = gpu(gamma);
  Tensor gy = gpu_t({rows, C}), gmean = gpu_t({rows}), grstd = gpu_t({rows});
  transformer(*be).layernorm_forward(gx, ggamma, gpu(beta), 1e-5f, gy, gmean, grstd);
  expect_close(gy, y, 1e-6, what + " y");
  expect_close(grstd, rstd, 1e-6, what + " rstd");
  Tensor dx = cpu_t({rows, C}), dg = random_host({C}, 56), db = random_host({C}, 57);
  Tensor gdx = gpu_t({rows, C}), gdg = gpu(dg), gdb = gpu(db);
  transformer(cpu_backend()).layernorm_backward(x, gamma, mean, rstd, dy, dx, dg, db);
  transformer(*be).layernorm_backward(gx, ggamma, gmean, grstd, gpu(dy), gdx, gdg, gdb);
  expect_close(gdx, dx, 1e-5, what + " dx");
  expect_close(gdg, dg, sum_tol, what + " dgamma");
  expect_close(gdb, db, sum_tol, what + " dbeta");
}

TEST(CudaLimits, AttentionBeyond256Positions) {
  PT_REQUIRE_GPU();
  compare_attention(1, 300, 2, 8, "attention T=300");
}

TEST(CudaLimits, LayerNormWiderThan6144) {
  PT_REQUIRE_GPU();
  compare_layernorm(40, 6400, 1e-5, "layernorm C=6400");  // 51,200 B of shared memory
  // 49,152 B dynamic: only with the kernel's static shared memory is the
  // block over 48 KiB, so the opt-in must count both.
  compare_layernorm(40, 6144, 1e-5, "layernorm C=6144");
}

TEST(CudaLimits, LayerNormOverManyRows) {
  PT_REQUIRE_GPU();
  compare_layernorm(kManyRows, 8, kLongSumTol, "layernorm 70000 rows");
}

TEST(CudaLimits, BiasOverManyRows) {
  PT_REQUIRE_GPU();
  auto be = cuda::make_backend();
  Tensor y = random_host({kManyRows, 3}, 58), bias = random_host({3}, 59);
  Tensor gy = gpu(y);
  cpu_backend().add_bias(y, bias);
  be->add_bias(gy, gpu(bias));
  expect_close(gy, y, 1e-6, "add_bias 70000 rows");
  Tensor db = random_host({3}, 60), gdb = gpu(db);
  cpu_backend().accumulate_bias_grad(y, db);
  be->accumulate_bias_grad(gy, gdb);
  expect_close(gdb, db, kLongSumTol, "accumulate_bias_grad 70000 rows");
}

TEST(CudaLimits, CrossEntropyOverManyRows) {
  PT_REQUIRE_GPU();
  auto be = cuda::make_backend();
  const int64_t classes = 5;
  Tensor logits = random_host({kManyRows, classes}, 61, 3.f);
  Tensor labels = Tensor::empty({kManyRows}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < kManyRows; ++i) labels.i32()[i] = static_cast<int32_t>((i * 3) % classes);
  Tensor dl = cpu_t(logits.shape()), gdl = gpu_t(logits.shape());
  const double ce = cpu_backend().softmax_cross_entropy(logits, labels, 0.5f, dl);
  const double gce = be->softmax_cross_entropy(gpu(logits), gpu(labels), 0.5f, gdl);
  EXPECT_NEAR(gce, ce, 1e-9 * ce);
  expect_close(gdl, dl, 1e-6, "cross-entropy 70000 rows dlogits");
  const Tensor last = host(gdl);
  EXPECT_NE(last.f32()[(kManyRows - 1) * classes], 0.f) << "the last row was never written";
}

TEST(CudaLimits, EmbeddingOverManyRows) {
  PT_REQUIRE_GPU();
  auto be = cuda::make_backend();
  const int64_t mb = 1000, T = 70, V = 50, C = 4;  // 70,000 token rows
  Tensor tok = Tensor::empty({mb, T}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < mb * T; ++i) tok.i32()[i] = static_cast<int32_t>((i * 7 + i / 13) % V);
  Tensor wte = random_host({V, C}, 62), wpe = random_host({T, C}, 63);
  Tensor y = cpu_t({mb, T, C}), gy = gpu_t({mb, T, C});
  Tensor gtok = gpu(tok);
  transformer(cpu_backend()).embedding_forward(tok, wte, wpe, y);
  transformer(*be).embedding_forward(gtok, gpu(wte), gpu(wpe), gy);
  EXPECT_TRUE(same_bits(gy, y)) << "embedding forward, 70000 rows";
  Tensor dy = random_host({mb, T, C}, 64);
  Tensor dwte = random_host({V, C}, 65), dwpe = random_host({T, C}, 66);
  Tensor gdwte = gpu(dwte), gdwpe = gpu(dwpe);
  transformer(cpu_backend()).embedding_backward(tok, dy, dwte, dwpe);
  transformer(*be).embedding_backward(gtok, gpu(dy), gdwte, gdwpe);
  EXPECT_TRUE(same_bits(gdwte, dwte)) << "embedding dwte, 70000 rows";
  EXPECT_TRUE(same_bits(gdwpe, dwpe)) << "embedding dwpe, 70000 rows";
}

TEST(CudaLimits, CausalSoftmaxOverManyRows) {
  PT_REQUIRE_GPU();
  compare_attention(2100, 16, 2, 4, "attention 67200 softmax rows");
}

}  // namespace
}  // namespace pt
