// test_cuda_kernels.cpp: every method of the CUDA backend against the CPU
// backend on the same inputs. Tolerances (max abs error over max |CPU|):
// fp32 GEMM-based 1e-5, elementwise and row kernels 1e-6, TF32 and fp16
// GEMMs 5e-3, bf16 2e-2; the embedding backward and the optimizer updates
// are exact (same operations in the same order). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "pipetrain/base/error.hpp"
#include "test_cuda_util.hpp"
#include "bitwise.hpp"

namespace pt {
namespace {

using test::expect_close;
using test::cuda_backend;
using test::gemm_tol;
using test::gpu;
using test::host;
using test::random_host;
using test::transformer;


// Bitwise equal, wherever the tensors live.
bool same_bits(const Tensor& a, const Tensor& b) { return test::same_bits(host(a), host(b)); }

Tensor tokens_host(int64_t mb, int64_t T, int64_t V) {
  Tensor t = Tensor::empty({mb, T}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < mb * T; ++i) t.i32()[i] = static_cast<int32_t>((i * 7 + 3) % V);
  t.i32()[1] = t.i32()[0];  // repeats
  t.i32()[mb * T - 1] = t.i32()[0];
  return t;
}

TEST(CudaKernels, MatmulAllTransposesAndPrecisions) {
  PT_REQUIRE_GPU();
  const int64_t m = 37, n = 53, k = 64;
  for (Precision p : {Precision::Fp32, Precision::Tf32,
                            Precision::Bf16, Precision::Fp16}) {
    auto be = cuda_backend(p);
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = random_host(ta ? Shape{k, m} : Shape{m, k}, 1);
        Tensor b = random_host(tb ? Shape{n, k} : Shape{k, n}, 2);
        Tensor c = random_host({m, n}, 3);
        Tensor gc = gpu(c);
        cpu_backend().matmul(a, ta, b, tb, c, 0.5f, 0.75f);
        be->matmul(gpu(a), ta, gpu(b), tb, gc, 0.5f, 0.75f);
        expect_close(gc, c, gemm_tol(p),
                     std::string("matmul ") + kind_name(p) + (ta ? " A^T" : " A") +
                         (tb ? " B^T" : " B"));
      }
    }
  }
}

// The weight copies (training.weight_copies): the GPU's round_to gives the
// CPU's bits, on random values at several scales and on edge values (ties,
// a carry into the exponent, the fp16 range ends and subnormals, inf, quiet
// and signalling NaNs of either sign).
TEST(CudaKernels, RoundToGivesTheCpuBits) {
  PT_REQUIRE_GPU();
  Tensor x = random_host({4, 500}, 4);
  for (int64_t i = 0; i < 500; ++i) x.f32()[500 + i] *= 1e-6f;   // fp16 subnormals
  for (int64_t i = 0; i < 500; ++i) x.f32()[1000 + i] *= 3e4f;   // near fp16's end
  const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3fffffffu, 0x477fe000u, 0xc77ff000u,
                            0x33800000u, 0x33000000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                            0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fa5a5a5u,
                            0x00000001u, 0x80000000u};
  std::memcpy(x.f32() + 1500, edges, sizeof edges);
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    Tensor want = Tensor::empty(x.shape(), stored_dtype(p));
    cpu_backend().round_to(x, want);
    Tensor got = Tensor::empty(x.shape(), stored_dtype(p), MemCategory::Workspace, Device::CUDA);
    cuda_backend(p)->round_to(gpu(x), got);
    EXPECT_TRUE(same_bits(got, want)) << kind_name(p);
  }
}

// A GEMM whose weight operand is a BF16/F16 copy equals, bit for bit on the
// GPU, the GEMM that casts the fp32 weight per call: cuBLAS gets the same
// 16-bit operands either way.
TEST(CudaKernels, GemmOnAWeightCopyEqualsTheCastPerCall) {
  PT_REQUIRE_GPU();
  const int64_t m = 37, n = 53, k = 64;
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    auto be = cuda_backend(p);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const Tensor a = gpu(random_host(ta ? Shape{k, m} : Shape{m, k}, 1));
        const Tensor w = gpu(random_host(tb ? Shape{n, k} : Shape{k, n}, 2));
        Tensor copy = Tensor::empty(w.shape(), stored_dtype(p), MemCategory::Parameters, Device::CUDA);
        be->round_to(w, copy);
        const Tensor c = random_host({m, n}, 3);
        Tensor per_call = gpu(c), from_copy = gpu(c);
        be->matmul(a, ta, w, tb, per_call, 0.5f, 0.75f);
        be->matmul(a, ta, copy, tb, from_copy, 0.5f, 0.75f);
        EXPECT_TRUE(same_bits(from_copy, per_call))
            << kind_name(p) << (ta ? " A^T" : " A") << (tb ? " W^T" : " W");
      }
  }
}

TEST(CudaKernels, BiasAndActivations) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor y = random_host({33, 70}, 4), bias = random_host({70}, 5), dy = random_host({33, 70}, 6);
  Tensor gy = gpu(y);
  cpu_backend().add_bias(y, bias);
  be->add_bias(gy, gpu(bias));
  expect_close(gy, y, 1e-6, "add_bias");
  Tensor db = random_host({70}, 7), gdb = gpu(db);
  cpu_backend().accumulate_bias_grad(dy, db);
  be->accumulate_bias_grad(gpu(dy), gdb);
  expect_close(gdb, db, 1e-5, "accumulate_bias_grad");
  for (bool gelu : {false, true}) {
    Tensor out = Tensor::empty(y.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
    Tensor dx = Tensor::empty(y.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
    Tensor gout = Tensor::empty(y.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
    Tensor gdx = Tensor::empty(y.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
    if (gelu) {
      cpu_backend().gelu_forward(y, out);
      cpu_backend().gelu_backward(y, dy, dx);
      be->gelu_forward(gy, gout);
      be->gelu_backward(gy, gpu(dy), gdx);
    } else {
      cpu_backend().relu_forward(y, out);
      cpu_backend().relu_backward(y, dy, dx);
      be->relu_forward(gy, gout);
      be->relu_backward(gy, gpu(dy), gdx);
    }
    expect_close(gout, out, 1e-6, gelu ? "gelu forward" : "relu forward");
    expect_close(gdx, dx, 1e-6, gelu ? "gelu backward" : "relu backward");
  }
}

TEST(CudaKernels, Losses) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor pred = random_host({19, 13}, 8), target = random_host({19, 13}, 9);
  Tensor d = Tensor::empty(pred.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
  Tensor gd = Tensor::empty(pred.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  const double mse = cpu_backend().mse_loss(pred, target, 0.25f, d);
  const double gmse = be->mse_loss(gpu(pred), gpu(target), 0.25f, gd);
  EXPECT_NEAR(gmse, mse, 1e-9 * mse);
  expect_close(gd, d, 1e-6, "mse dpred");
  Tensor logits = random_host({21, 300}, 10, 3.f);
  Tensor labels = Tensor::empty({21}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int i = 0; i < 21; ++i) labels.i32()[i] = (i * 37) % 300;
  Tensor dl = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
  Tensor gdl = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  const double ce = cpu_backend().softmax_cross_entropy(logits, labels, 0.5f, dl);
  const double gce = be->softmax_cross_entropy(gpu(logits), gpu(labels), 0.5f, gdl);
  EXPECT_NEAR(gce, ce, 1e-9 * ce);
  expect_close(gdl, dl, 1e-6, "cross-entropy dlogits");
}

// A padded vocabulary (model.vocab_multiple): 300 classes in rows of 384.
// The padding holds values that would take all the probability if the
// kernel counted them; the GPU kernel must match the CPU one over the real
// classes and write exact zeros in the padding, immediate and deferred.
TEST(CudaKernels, CrossEntropyOverPaddedRows) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  const int64_t rows = 21, classes = 300, width = 384;
  Tensor logits = random_host({rows, width}, 10, 3.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = classes; j < width; ++j) logits.f32()[r * width + j] = 50.f;
  Tensor labels = Tensor::empty({rows}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < rows; ++i) labels.i32()[i] = static_cast<int32_t>((i * 37) % classes);
  Tensor dl = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
  const double ce = cpu_backend().softmax_cross_entropy(logits, labels, classes, 0.5f, dl);
  Tensor gdl = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  be->fill(gdl, 7.f);  // every element must be written
  const Tensor glogits = gpu(logits), glabels = gpu(labels);
  const double gce = be->softmax_cross_entropy(glogits, glabels, classes, 0.5f, gdl);
  EXPECT_NEAR(gce, ce, 1e-9 * ce);
  expect_close(gdl, dl, 1e-6, "padded cross-entropy dlogits");
  const Tensor got = host(gdl);
  int64_t nonzero = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = classes; j < width; ++j) nonzero += got.f32()[r * width + j] != 0.f;
  EXPECT_EQ(nonzero, 0) << "padded columns' gradient";
  std::unique_ptr<ScalarBatch> batch = be->make_scalar_batch(1);
  be->softmax_cross_entropy_to(glogits, glabels, classes, 0.5f, gdl, *batch, 0);
  EXPECT_TRUE(test::same_bits(batch->read()[0], gce));
}

// The deferred forms (#42) leave their results in a device ScalarBatch: one
// read returns, bit for bit, what the immediate kernels return, in slot order.
TEST(CudaKernels, DeferredScalarsAreTheImmediateOnesReadOnce) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor x = gpu(random_host({1000, 37}, 11));
  Tensor bad = random_host({50}, 12);
  bad.f32()[7] = std::numeric_limits<float>::infinity();
  Tensor pred = gpu(random_host({19, 13}, 8)), target = gpu(random_host({19, 13}, 9));
  Tensor logits = gpu(random_host({21, 300}, 10, 3.f));
  Tensor labels = Tensor::empty({21}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int i = 0; i < 21; ++i) labels.i32()[i] = (i * 37) % 300;
  labels = gpu(labels);
  Tensor gd = Tensor::empty(pred.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  Tensor gdl = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  std::unique_ptr<ScalarBatch> batch = be->make_scalar_batch(6);
  be->sum_squares_to(x, *batch, 0);
  be->nonfinite_to(x, *batch, 1);
  be->nonfinite_to(gpu(bad), *batch, 2);
  be->mse_loss_to(pred, target, 0.25f, gd, *batch, 3);
  be->softmax_cross_entropy_to(logits, labels, 0.5f, gdl, *batch, 4);
  const std::vector<double> got = batch->read();  // slot 5: never written
  ASSERT_EQ(got.size(), 6u);
  EXPECT_TRUE(test::same_bits(got[0], be->sum_squares(x)));
  EXPECT_EQ(got[1], 0.0);
  EXPECT_GT(got[2], 0.0);
  EXPECT_TRUE(test::same_bits(got[3], be->mse_loss(pred, target, 0.25f, gd)));
  EXPECT_TRUE(test::same_bits(got[4], be->softmax_cross_entropy(logits, labels, 0.5f, gdl)));
  EXPECT_EQ(got[5], 0.0);
}

TEST(CudaKernels, FillCopyScaleReductions) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor x = random_host({1000, 37}, 11);
  Tensor gx = gpu(x);
  const double ss = cpu_backend().sum_squares(x);
  EXPECT_NEAR(be->sum_squares(gx), ss, 1e-10 * ss);
  EXPECT_TRUE(be->all_finite(gx));
  Tensor gy = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace, Device::CUDA);
  be->copy(gx, gy);
  be->scale(gy, 0.5f);
  cpu_backend().scale(x, 0.5f);
  expect_close(gy, x, 0.0, "copy + scale");
  Tensor bad = x.clone(MemCategory::Workspace);
  bad.f32()[12345] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(be->all_finite(gpu(bad)));
  bad.f32()[12345] = std::nanf("");
  EXPECT_FALSE(be->all_finite(gpu(bad)));
  be->fill(gy, 2.5f);
  EXPECT_DOUBLE_EQ(be->sum_squares(gy), 6.25 * x.numel());
  Tensor a = random_host({77}, 12), b = random_host({77}, 13);
  Tensor ga = gpu(a);
  cpu_backend().add(a, b, a);
  be->add(ga, gpu(b), ga);
  expect_close(ga, a, 0.0, "add in place");
}

TEST(CudaKernels, LayerNorm) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  const int64_t rows = 70, C = 96;  // 3 backward chunks, the last partial
  Tensor x = random_host({rows, C}, 14, 2.f), gamma = random_host({C}, 15);
  Tensor beta = random_host({C}, 16), dy = random_host({rows, C}, 17);
  auto cpu_t = [](const Shape& s) {
    return Tensor::empty(s, DType::F32, MemCategory::Workspace, Device::CPU);
  };
  auto gpu_t = [](const Shape& s) {
    return Tensor::empty(s, DType::F32, MemCategory::Workspace, Device::CUDA);
  };
  Tensor y = cpu_t({rows, C}), mean = cpu_t({rows}), rstd = cpu_t({rows});
  Tensor gy = gpu_t({rows, C}), gmean = gpu_t({rows}), grstd = gpu_t({rows});
  transformer(cpu_backend()).layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  Tensor gx = gpu(x), ggamma = gpu(gamma);
  transformer(*be).layernorm_forward(gx, ggamma, gpu(beta), 1e-5f, gy, gmean, grstd);
  expect_close(gy, y, 1e-6, "layernorm y");
  expect_close(gmean, mean, 1e-6, "layernorm mean");
  expect_close(grstd, rstd, 1e-6, "layernorm rstd");
  Tensor dx = cpu_t({rows, C}), dg = random_host({C}, 18), dbt = random_host({C}, 19);
  Tensor gdx = gpu_t({rows, C}), gdg = gpu(dg), gdbt = gpu(dbt);
  transformer(cpu_backend()).layernorm_backward(x, gamma, mean, rstd, dy, dx, dg, dbt);
  transformer(*be).layernorm_backward(gx, ggamma, gmean, grstd, gpu(dy), gdx, gdg, gdbt);
  expect_close(gdx, dx, 1e-5, "layernorm dx");
  expect_close(gdg, dg, 1e-5, "layernorm dgamma (added)");
  expect_close(gdbt, dbt, 1e-5, "layernorm dbeta (added)");
}

TEST(CudaKernels, EmbeddingExact) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  const int64_t mb = 3, T = 9, V = 17, C = 300, Tmax = 12;
  Tensor tok = tokens_host(mb, T, V);
  Tensor wte = random_host({V, C}, 20), wpe = random_host({Tmax, C}, 21);
  Tensor y = Tensor::empty({mb, T, C}, DType::F32, MemCategory::Workspace, Device::CPU);
  Tensor gy = Tensor::empty({mb, T, C}, DType::F32, MemCategory::Workspace, Device::CUDA);
  Tensor gtok = gpu(tok);
  transformer(cpu_backend()).embedding_forward(tok, wte, wpe, y);
  transformer(*be).embedding_forward(gtok, gpu(wte), gpu(wpe), gy);
  EXPECT_TRUE(same_bits(gy, y)) << "embedding forward";
  Tensor dy = random_host({mb, T, C}, 22);
  Tensor dwte = random_host({V, C}, 23), dwpe = random_host({Tmax, C}, 24);
  Tensor gdwte = gpu(dwte), gdwpe = gpu(dwpe);
  transformer(cpu_backend()).embedding_backward(tok, dy, dwte, dwpe);
  transformer(*be).embedding_backward(gtok, gpu(dy), gdwte, gdwpe);
  EXPECT_TRUE(same_bits(gdwte, dwte)) << "embedding dwte";
  EXPECT_TRUE(same_bits(gdwpe, dwpe)) << "embedding dwpe";
}

TEST(CudaKernels, BadTokenIsReportedAtTheNextSync) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor tok = tokens_host(1, 4, 5);
  tok.i32()[2] = 5;  // == V
  Tensor gy = Tensor::empty({1, 4, 8}, DType::F32, MemCategory::Workspace, Device::CUDA);
  transformer(*be).embedding_forward(gpu(tok), gpu(random_host({5, 8}, 25)),
                                     gpu(random_host({4, 8}, 26)), gy);
  try {
    cuda::synchronize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
  }
  cuda::synchronize();  // the flag is cleared once reported
}

// Both masks: causal (the GPT's) and over every token (the hybrid's
// model.causal = false), each against the CPU's in every precision.
void expect_attention_like_cpu(AttentionMask mask, const std::string& what) {
  const int64_t mb = 2, T = 19, H = 3, D = 16, C = H * D;
  Tensor qkv = random_host({mb, T, 3 * C}, 27), dy = random_host({mb, T, C}, 28);
  auto cpu_t = [](const Shape& s) {
    return Tensor::empty(s, DType::F32, MemCategory::Workspace, Device::CPU);
  };
  Tensor probs = cpu_t({mb, H, T, T}), y = cpu_t({mb, T, C}), dqkv = cpu_t({mb, T, 3 * C});
  transformer(cpu_backend()).attention_probs(qkv, H, probs, mask);
  transformer(cpu_backend()).attention_values(qkv, probs, H, y);
  transformer(cpu_backend()).attention_backward(qkv, probs, dy, H, dqkv, mask);
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
    auto be = cuda_backend(p);
    Tensor gq = gpu(qkv), gp = gpu(probs), gy = gpu(y), gd = gpu(dqkv);
    transformer(*be).attention_probs(gq, H, gp, mask);
    transformer(*be).attention_values(gq, gp, H, gy);
    transformer(*be).attention_backward(gq, gp, gpu(dy), H, gd, mask);
    const std::string tag = " " + what + " " + kind_name(p);
    // Two chained low-precision GEMMs in the backward pass: twice the GEMM tolerance.
    const double tol = p == Precision::Fp32 ? 1e-5 : gemm_tol(p);
    expect_close(gp, probs, tol, "attention probs" + tag);
    expect_close(gy, y, tol, "attention values" + tag);
    expect_close(gd, dqkv, p == Precision::Fp32 ? tol : 2 * tol, "attention dqkv" + tag);
    const Tensor hp = host(gp);
    for (int64_t r = 0; r < mb * H * T; ++r)
      for (int64_t j = r % T + 1; j < T; ++j) {
        if (mask == AttentionMask::Causal) ASSERT_EQ(hp.f32()[r * T + j], 0.f) << "above the diagonal";
        else ASSERT_GT(hp.f32()[r * T + j], 0.f) << "above the diagonal, over every token";
      }
  }
}

TEST(CudaKernels, AttentionAllPrecisions) {
  PT_REQUIRE_GPU();
  expect_attention_like_cpu(AttentionMask::Causal, "causal");
}

TEST(CudaKernels, AttentionOverEveryTokenAllPrecisions) {
  PT_REQUIRE_GPU();
  expect_attention_like_cpu(AttentionMask::None, "over every token");
}

TEST(CudaKernels, OptimizerStepsExact) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor p = random_host({1234}, 29), g = random_host({1234}, 30);
  Tensor m = random_host({1234}, 31, 0.1f), v = random_host({1234}, 32, 0.1f);
  for (int64_t i = 0; i < v.numel(); ++i) v.f32()[i] = std::fabs(v.f32()[i]);
  Tensor gp = gpu(p), gm = gpu(m), gv = gpu(v), gg = gpu(g);
  cpu_backend().adamw_step(p, g, m, v, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  be->adamw_step(gp, gg, gm, gv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  expect_close(gp, p, 1e-7, "adamw p");
  expect_close(gm, m, 1e-7, "adamw m");
  expect_close(gv, v, 1e-7, "adamw v");
  cpu_backend().sgd_step(p, g, m, 0.01f, 0.9f, 1e-4f);
  be->sgd_step(gp, gg, gm, 0.01f, 0.9f, 1e-4f);
  expect_close(gp, p, 1e-7, "sgd p");
  expect_close(gm, m, 1e-7, "sgd velocity");
}

TEST(CudaKernels, RepeatedCallsAreBitwiseIdentical) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend(Precision::Bf16);
  const int64_t mb = 2, T = 33, H = 2, C = 64;
  Tensor gq = gpu(random_host({mb, T, 3 * C}, 33)), gdy = gpu(random_host({mb, T, C}, 34));
  Tensor gp = Tensor::empty({mb, H, T, T}, DType::F32, MemCategory::Workspace, Device::CUDA);
  transformer(*be).attention_probs(gq, H, gp);
  Tensor first = Tensor::zeros({mb, T, 3 * C}, DType::F32, MemCategory::Workspace, Device::CUDA);
  Tensor second = Tensor::zeros({mb, T, 3 * C}, DType::F32, MemCategory::Workspace, Device::CUDA);
  transformer(*be).attention_backward(gq, gp, gdy, H, first);
  transformer(*be).attention_backward(gq, gp, gdy, H, second);
  EXPECT_TRUE(same_bits(first, second));
  Tensor x = gpu(random_host({300, C}, 35));
  Tensor dg1 = Tensor::zeros({C}, DType::F32, MemCategory::Workspace, Device::CUDA);
  Tensor dg2 = Tensor::zeros({C}, DType::F32, MemCategory::Workspace, Device::CUDA);
  be->accumulate_bias_grad(x, dg1);
  be->accumulate_bias_grad(x, dg2);
  EXPECT_TRUE(same_bits(dg1, dg2));
}

TEST(CudaKernels, DeviceMemoryIsCountedPerCategory) {
  PT_REQUIRE_GPU();
  const size_t before = cuda::device_memory_stats().live[static_cast<int>(MemCategory::Parameters)];
  {
    Tensor t = Tensor::zeros({1024}, DType::F32, MemCategory::Parameters, Device::CUDA);
    EXPECT_EQ(cuda::device_memory_stats().live[static_cast<int>(MemCategory::Parameters)],
              before + 4096);
    EXPECT_GE(cuda::device_bytes_reserved(), 4096u);
    EXPECT_EQ(host(t).f32()[1023], 0.f);
    const int act = static_cast<int>(MemCategory::Activations);
    const size_t acts = cuda::device_memory_stats().live[act];
    t.retag(MemCategory::Activations);  // as the executor does for stashed outputs
    EXPECT_EQ(cuda::device_memory_stats().live[static_cast<int>(MemCategory::Parameters)], before);
    EXPECT_EQ(cuda::device_memory_stats().live[act], acts + 4096);
  }
  EXPECT_EQ(cuda::device_memory_stats().live[static_cast<int>(MemCategory::Parameters)], before);
}

}  // namespace
}  // namespace pt
