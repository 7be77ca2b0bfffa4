// bench_cuda.cpp: GPU benchmarks (run by scripts/gpu-check.sh).
//
//   bench_cuda stage [--dims 2048] [--seq 1024] [--mb 8] [--blocks 2] [--reps 5]
//                    [--precision bf16] [--peak-tflops 989.4]
//                    [--attention reference|fused|reference,fused]
//     MFU of one middle GPT stage's training step (forward + backward of one
//     micro-batch + AdamW) on the CUDA backend, with each attention asked for
//     (model.attention; fused: cuDNN SDPA, bf16 only; its RESULT keys carry
//     "_fused"; the model FLOPs count the full T x T either way, so the two
//     MFUs compare step times), and GEMM efficiency: the same
//     GEMMs (recorded from the step) replayed alone on plain cuBLAS with
//     operands already in the GEMM precision, and the backend's matmul() (which
//     casts fp32 operands on the fly) against plain cuBLAS on the linear shapes.
//     Peak: H100/H200 SXM dense bf16 (and fp16) tensor-core peak, 989.4 TFLOP/s;
//     tf32 494.7, fp32 (no tensor cores) 66.9.
//   mpirun -np 2 bench_cuda transport [--mbytes 64] [--reps 10]
//     (bench_cuda_transport.cpp) staged-MPI and NCCL bandwidth between 2 ranks,
//     both directions at once (GB/s per direction).
//   mpirun -np 2 bench_cuda pipeline [--dims 2048] [--seq 1024] [--mb 8]
//                    [--micro-batches 8] [--blocks 2] [--warmup 2] [--reps 5]
//     (bench_cuda_pipeline.cpp) MFU of a GPT trained by the application's
//     pipeline (Trainer, executor, 1F1B) over the ranks, of the peak of the
//     GPUs they really drive (one GPU's when they share it), and its bubble.
// Prints Markdown rows, and "RESULT key value" lines for the script's summary.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src/cuda/check.hpp"
#include "bench_cuda.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {

double dense_peak_tflops(Precision p) {
  switch (p) {
    case Precision::Bf16:
    case Precision::Fp16: return 989.4;
    case Precision::Tf32: return 494.7;
    case Precision::Fp32: return 66.9;
  }
  return 1;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t blocks = 2, seq = 1024, mb = 8, reps = 5;
  std::vector<int64_t> dims = {2048};
  std::string precision = "bf16";
  double peak_tflops = 0;  // 0: by precision
  std::vector<AttentionKind> attention = {AttentionKind::Reference};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--blocks") o.blocks = std::atol(value.c_str());
    else if (key == "--seq") o.seq = std::atol(value.c_str());
    else if (key == "--mb") o.mb = std::atol(value.c_str());
    else if (key == "--reps") o.reps = std::atol(value.c_str());
    else if (key == "--precision") o.precision = value;
    else if (key == "--peak-tflops") o.peak_tflops = std::atof(value.c_str());
    else if (key == "--attention") {
      o.attention.clear();
      for (size_t p = 0; p < value.size();) {
        const size_t q = std::min(value.find(',', p), value.size());
        o.attention.push_back(kind_named<AttentionKind>(value.substr(p, q - p)));
        p = q + 1;
      }
    }
    else if (key == "--dims") {
      o.dims.clear();
      for (size_t p = 0; p < value.size();) {
        const size_t q = std::min(value.find(',', p), value.size());
        o.dims.push_back(std::atol(value.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Uniform values with standard deviation 1 (cheap to draw for 10^8 elements).
Tensor random_device(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::F32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 3.4641f * (uniform01(5, stream, static_cast<uint64_t>(i)) - 0.5f);
  return t.to(Device::CUDA, MemCategory::Activations);
}

// ---- plain cuBLAS replay ----

// Random device data of `elements` in the GEMM operand type (bf16/fp16 bits
// built from random signs, a narrow exponent range and random mantissas).
void* random_operand(int64_t elements, cudaDataType_t type) {
  const size_t es = type == CUDA_R_32F ? 4 : 2;
  std::vector<unsigned char> hostbuf(static_cast<size_t>(elements) * es);
  for (int64_t i = 0; i < elements; ++i) {
    const uint64_t r = random_bits(9, 1, static_cast<uint64_t>(i));
    if (type == CUDA_R_32F) {
      const uint32_t bits = (r & 0x8000'0000u) | ((120u + (r >> 40) % 8) << 23) | (r & 0x7f'ffffu);
      std::memcpy(&hostbuf[static_cast<size_t>(i) * 4], &bits, 4);
    } else {
      const uint16_t exp = type == CUDA_R_16BF ? 120 + (r >> 40) % 8 : 10 + (r >> 40) % 8;
      const uint16_t bits = type == CUDA_R_16BF
                                ? ((r & 0x8000u) | (exp << 7) | (r & 0x7fu))
                                : ((r & 0x8000u) | (exp << 10) | (r & 0x3ffu));
      std::memcpy(&hostbuf[static_cast<size_t>(i) * 2], &bits, 2);
    }
  }
  void* dev = nullptr;
  CUDA_CHECK(cudaMalloc(&dev, hostbuf.size() + 256));
  CUDA_CHECK(cudaMemcpy(dev, hostbuf.data(), hostbuf.size(), cudaMemcpyHostToDevice));
  return dev;
}

int64_t extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return (batch - 1) * stride + rows * ld;
}

struct Replay {
  cudaDataType_t type;
  cublasComputeType_t compute;
};

Replay replay_types(Precision p) {
  switch (p) {
    case Precision::Bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case Precision::Fp16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case Precision::Tf32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    case Precision::Fp32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
  }
  return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
}

// Seconds for one pass over `gemms` on plain cuBLAS (median of reps).
double replay_seconds(const std::vector<cuda::DeviceGemm>& gemms, Precision p, int reps) {
  const Replay rt = replay_types(p);
  int64_t max_a = 1, max_b = 1, max_c = 1;
  for (const auto& g : gemms) {
    const GemmShape& s = g.shape;
    max_a = std::max(max_a, extent(g.batch, g.stride_a, s.trans_a ? s.k : s.m, s.lda));
    max_b = std::max(max_b, extent(g.batch, g.stride_b, s.trans_b ? s.n : s.k, s.ldb));
    max_c = std::max(max_c, extent(g.batch, g.stride_c, s.m, s.ldc));
  }
  void* a = random_operand(max_a, rt.type);
  void* b = random_operand(max_b, rt.type);
  void* c = random_operand(max_c, CUDA_R_32F);
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {  // r == 0: warm-up
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (const auto& g : gemms) {
      const GemmShape& s = g.shape;
      const float alpha = 1.f, beta = s.beta;
      const auto opa = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
      const auto opb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, opb, opa, static_cast<int>(s.n), static_cast<int>(s.m), static_cast<int>(s.k),
          &alpha, b, rt.type, static_cast<int>(s.ldb), g.stride_b, a, rt.type,
          static_cast<int>(s.lda), g.stride_a, &beta, c, CUDA_R_32F, static_cast<int>(s.ldc),
          g.stride_c, static_cast<int>(g.batch), rt.compute, CUBLAS_GEMM_DEFAULT));
    }
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) times.push_back(ms * 1e-3);
  }
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return median(times);
}

double gemm_flops(const std::vector<cuda::DeviceGemm>& gemms) {
  double f = 0;
  for (const auto& g : gemms) f += 2.0 * g.batch * g.shape.m * g.shape.n * g.shape.k;
  return f;
}

// ---- the stage ----

void forward_backward(StageModel& stage, Backend& be, const Tensor& x, const Tensor& dy) {
  StagePass pass;
  stage_forward(stage, be, x, pass);
  stage_backward(stage, be, pass, dy, true);
}

// Training FLOPs of the stage: 3 x forward; forward per block = 24 rows C^2
// (qkv, proj, fc, mlp proj) + 4 mb T^2 C (scores and values, full T x T as computed).
double stage_flops(const Options& o, int64_t c) {
  const double rows = static_cast<double>(o.mb * o.seq);
  return 3.0 * o.blocks * (24.0 * rows * c * c + 4.0 * o.mb * o.seq * o.seq * c);
}

// The backend's matmul() (fp32 tensors, casts included) on the four linear
// shapes of a block's forward pass, and plain cuBLAS on the same shapes.
void matmul_efficiency(Backend& be, const Options& o, int64_t c, Precision p,
                       double& backend_s, double& plain_s) {
  const int64_t rows = o.mb * o.seq;
  const int64_t shapes[4][2] = {{c, 3 * c}, {c, c}, {c, 4 * c}, {4 * c, c}};  // (in, out)
  std::vector<Tensor> xs, ws, ys;
  for (const auto& s : shapes) {
    xs.push_back(random_device({rows, s[0]}, 60));
    ws.push_back(random_device({s[1], s[0]}, 61));
    ys.push_back(Tensor::empty({rows, s[1]}, DType::F32, MemCategory::Activations, Device::CUDA));
  }
  cuda::start_device_gemm_recording();
  std::vector<double> times;
  for (int r = 0; r <= o.reps; ++r) {  // r == 0: warm-up
    cuda::synchronize();
    const auto start = Clock::now();
    for (size_t i = 0; i < 4; ++i) be.matmul(xs[i], false, ws[i], true, ys[i], 1.f, 0.f);
    cuda::synchronize();
    if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::vector<cuda::DeviceGemm> gemms = cuda::stop_device_gemm_recording();
  gemms.resize(4);  // one pass
  backend_s = median(times);
  plain_s = replay_seconds(gemms, p, static_cast<int>(o.reps));
}

void run_stage(const Options& o, int64_t c, Precision p, double peak,
               AttentionKind attention) {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 256;
  m.gpt.seq_len = o.seq;
  m.gpt.d_model = c;
  m.gpt.heads = std::max<int64_t>(1, c / 128);
  m.gpt.blocks = 3 * o.blocks;
  m.gpt.attention = attention;
  StageModel stage = build_stage(m, {o.blocks, o.blocks, o.blocks}, 1);  // a middle stage
  for (Param* prm : stage.params()) {
    prm->value = prm->value.to(Device::CUDA, MemCategory::Parameters);
    prm->grad = prm->grad.to(Device::CUDA, MemCategory::Gradients);
  }
  cuda::BackendOptions bo;
  bo.precision = p;
  auto be = cuda::make_backend(bo);
  TrainingConfig tc;  // the optimizer's state goes beside the parameters, on the GPU
  tc.optimizer = OptimizerKind::AdamW;
  Optimizer opt(tc, stage.params());
  Tensor x = random_device({o.mb, o.seq, c}, 1), dy = random_device({o.mb, o.seq, c}, 2);
  auto step = [&] {
    forward_backward(stage, *be, x, dy);
    opt.step(*be, 1e-4f, 1.f);
    opt.zero_grad(*be);
  };
  step();  // warm-up: allocator cache, cuBLAS heuristics
  cuda::synchronize();
  std::vector<double> times;
  for (int64_t r = 0; r < o.reps; ++r) {
    const auto start = Clock::now();
    step();
    cuda::synchronize();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  const cuda::LinearEpilogueCounts before = cuda::linear_epilogue_counts();
  cuda::start_device_gemm_recording();
  forward_backward(stage, *be, x, dy);
  cuda::synchronize();
  const std::vector<cuda::DeviceGemm> gemms = cuda::stop_device_gemm_recording();
  const cuda::LinearEpilogueCounts after = cuda::linear_epilogue_counts();
  const double t_step = median(times);
  const double t_gemm = replay_seconds(gemms, p, static_cast<int>(o.reps));
  const double flops = stage_flops(o, c), gflops = gemm_flops(gemms);
  double mm_backend = 0, mm_plain = 0;
  matmul_efficiency(*be, o, c, p, mm_backend, mm_plain);
  const double mfu = flops / t_step / (peak * 1e12);
  std::printf("| %lld | %lld | %lld | %s | %s | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f "
              "| %.1f |\n",
              static_cast<long long>(c), static_cast<long long>(o.seq),
              static_cast<long long>(o.mb), kind_name(p), kind_name(attention), t_step * 1e3,
              flops / t_step * 1e-12, 100 * mfu, t_gemm * 1e3, 100 * t_gemm / t_step,
              gflops / t_gemm * 1e-12, 100 * gflops / t_gemm / (peak * 1e12),
              100 * mm_plain / mm_backend);
  const char* tag = attention == AttentionKind::Fused ? "_fused" : "";
  const long long d = static_cast<long long>(c);
  std::printf("RESULT stage_mfu_pct%s_d%lld %.1f\n", tag, d, 100 * mfu);
  std::printf("RESULT stage_step_ms%s_d%lld %.2f\n", tag, d, t_step * 1e3);
  std::printf("RESULT gemm_alone_mfu_pct%s_d%lld %.1f\n", tag, d,
              100 * gflops / t_gemm / (peak * 1e12));
  std::printf("RESULT gemm_share_pct%s_d%lld %.1f\n", tag, d, 100 * t_gemm / t_step);
  std::printf("RESULT matmul_vs_cublas_pct%s_d%lld %.1f\n", tag, d, 100 * mm_plain / mm_backend);
  // Linear forwards of one forward + backward that ran with cuBLASLt's
  // bias / GELU epilogue, and those that ran as separate kernels.
  std::printf("RESULT linear_fused%s_d%lld %lld\n", tag, d,
              static_cast<long long>(after.fused - before.fused));
  std::printf("RESULT linear_unfused%s_d%lld %lld\n", tag, d,
              static_cast<long long>(after.unfused - before.unfused));
  std::fflush(stdout);
}

int run_stage_bench(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo info = cuda::init_device(0);
  const Precision p = parse_precision(o.precision);
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : dense_peak_tflops(p);
  std::printf("%s\nOne middle GPT stage: %lld blocks, head size 128, AdamW; median of %lld "
              "steps; assumed peak %.1f TFLOP/s (%s).\n\n",
              info.describe().c_str(), static_cast<long long>(o.blocks),
              static_cast<long long>(o.reps), peak, kind_name(p));
  std::printf("| d_model | T | mb | precision | attention | step (ms) | TFLOP/s | MFU (%%) | "
              "GEMMs alone (ms) | GEMM share (%%) | GEMMs alone TFLOP/s | GEMMs alone MFU (%%) | "
              "matmul() vs plain cuBLAS (%%) |\n");
  std::printf("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t c : o.dims)
    for (AttentionKind attention : o.attention) run_stage(o, c, p, peak, attention);
  return 0;
}

}  // namespace
}  // namespace pt

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "stage") return pt::run_stage_bench(argc, argv);
    if (mode == "transport") return pt::run_transport_bench(argc, argv);
    if (mode == "pipeline") return pt::run_pipeline_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: bench_cuda stage|transport|pipeline [options]\n");
  return 2;
}
