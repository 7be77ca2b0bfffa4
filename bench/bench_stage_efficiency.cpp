// bench_stage_efficiency.cpp: how much of one GPT stage's forward+backward is
// GEMM time, on one thread of the CPU backend.
//
// For each d_model it builds a middle pipeline stage (transformer blocks
// only), times forward+backward of one micro-batch, records every GEMM the
// stage issued, and times OpenBLAS sgemm alone on exactly those shapes. The
// ratio (GEMM-alone time / stage time) is the share of the stage that is GEMM;
// the rest is LayerNorm, softmax, GELU, residuals and bookkeeping.
//   build/bench_stage_efficiency [--blocks 2] [--seq 128] [--mb 4] [--reps 5] [--dims 256,512,1024]
// Prints a Markdown table (jobs/bench_stage_efficiency.sh stores it in results/).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/blas_info.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t blocks = 2, seq = 128, mb = 4, reps = 5;
  std::vector<int64_t> dims = {256, 512, 768, 1024};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--blocks") o.blocks = std::atol(value.c_str());
    else if (key == "--seq") o.seq = std::atol(value.c_str());
    else if (key == "--mb") o.mb = std::atol(value.c_str());
    else if (key == "--reps") o.reps = std::atol(value.c_str());
    else if (key == "--dims") {
      o.dims.clear();
      for (size_t p = 0; p < value.size();) {
        size_t q = value.find(',', p);
        o.dims.push_back(std::atol(value.substr(p, q - p).c_str()));
        p = q == std::string::npos ? value.size() : q + 1;
      }
    } else {
      throw InputError("unknown option '" + key + "'; expected --blocks, --seq, --mb, --reps or --dims");
    }
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor random_tensor(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal01(5, stream, i);
  return t;
}

// One forward + backward of the stage on x, with dy as the output gradient;
// adds the forward time to *forward_s when given.
void forward_backward(StageModel& stage, const Tensor& x, const Tensor& dy,
                      double* forward_s = nullptr) {
  const auto start = Clock::now();
  StagePass pass;
  stage_forward(stage, cpu_backend(), x, pass);
  if (forward_s) *forward_s += std::chrono::duration<double>(Clock::now() - start).count();
  stage_backward(stage, cpu_backend(), pass, dy, true);
}

// Times sgemm alone on the recorded shapes, with buffers of the same sizes.
double replay_seconds(const std::vector<GemmShape>& shapes) {
  size_t max_a = 0, max_b = 0, max_c = 0;
  for (const GemmShape& g : shapes) {
    max_a = std::max<size_t>(max_a, (g.trans_a ? g.k : g.m) * g.lda);
    max_b = std::max<size_t>(max_b, (g.trans_b ? g.n : g.k) * g.ldb);
    max_c = std::max<size_t>(max_c, g.m * g.ldc);
  }
  std::vector<float> a(max_a, 0.5f), b(max_b, 0.25f), c(max_c, 0.f);
  const auto start = Clock::now();
  for (const GemmShape& g : shapes)
    cpu::sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.f, a.data(), g.lda, b.data(), g.ldb,
               g.beta, c.data(), g.ldc);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double gemm_flops(const std::vector<GemmShape>& shapes) {
  double f = 0.0;
  for (const GemmShape& g : shapes) f += 2.0 * g.m * g.n * g.k;
  return f;
}

void run(const Options& o, int64_t c) {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 256;
  m.gpt.seq_len = o.seq;
  m.gpt.d_model = c;
  m.gpt.heads = std::max<int64_t>(1, c / 64);
  m.gpt.blocks = 3 * o.blocks;
  StageModel stage = build_stage(m, {o.blocks, o.blocks, o.blocks}, 1);  // a middle stage
  Tensor x = random_tensor({o.mb, o.seq, c}, 1), dy = random_tensor({o.mb, o.seq, c}, 2);
  forward_backward(stage, x, dy);  // warm-up: allocator cache, BLAS buffers
  std::vector<double> stage_times, gemm_times, forward_times;
  std::vector<GemmShape> shapes;
  for (int64_t r = 0; r < o.reps; ++r) {
    double forward_s = 0.0;
    const auto start = Clock::now();
    forward_backward(stage, x, dy, &forward_s);
    stage_times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    forward_times.push_back(forward_s);
  }
  start_gemm_recording();
  forward_backward(stage, x, dy);
  shapes = stop_gemm_recording();
  replay_seconds(shapes);  // warm-up
  for (int64_t r = 0; r < o.reps; ++r) gemm_times.push_back(replay_seconds(shapes));
  const double t_stage = median(stage_times), t_gemm = median(gemm_times);
  const double t_forward = median(forward_times);
  std::printf("| %lld | %lld | %zu | %.2f | %.1f | %.2f | %.1f | %.2f | %.2f |\n",
              static_cast<long long>(c), static_cast<long long>(m.gpt.heads), shapes.size(),
              t_stage * 1e3, 100.0 * t_forward / t_stage, t_gemm * 1e3, 100.0 * t_gemm / t_stage,
              gemm_flops(shapes) / t_stage * 1e-9, gemm_flops(shapes) / t_gemm * 1e-9);
  std::fflush(stdout);
}

}  // namespace
}  // namespace pt

int main(int argc, char** argv) {
  const std::string blas_note = pt::select_blas_kernel(argc, argv);  // may restart the program
  pt::Options o;
  try {
    o = pt::parse(argc, argv);
  } catch (const pt::Error& e) {
    std::fprintf(stderr, "bench_stage_efficiency: %s\n", e.what());
    return 2;
  }
  pt::set_blas_threads(1);
  std::printf("BLAS: %s\n", pt::blas_info().describe().c_str());
  if (!blas_note.empty()) std::printf("%s\n", blas_note.c_str());
  std::printf("One middle GPT stage: %lld blocks, T = %lld, micro-batch %lld, head size 64, "
              "one BLAS thread; median of %lld repetitions.\n\n",
              static_cast<long long>(o.blocks), static_cast<long long>(o.seq),
              static_cast<long long>(o.mb), static_cast<long long>(o.reps));
  std::printf("| d_model | heads | GEMM calls | stage fwd+bwd (ms) | forward share (%%) | "
              "same GEMMs alone (ms) | GEMM share (%%) | stage GFLOP/s | sgemm GFLOP/s |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t c : o.dims) pt::run(o, c);
  return 0;
}
