// bench_gemm.cpp: the CPU GEMM libraries on a deck's own GEMMs, and the
// throughput limit they set for pipeline training.
//
// Builds the deck's whole model as one stage, records every GEMM one
// micro-batch's forward + backward issues (rows = batch_size / micro_batches),
// and times, for each choice of training.cpu_gemm (auto, the default: oneDNN
// with OpenBLAS for wide weight gradients over few rows; oneDNN: its matmul
// primitive for A B^T, dnnl_sgemm otherwise; oneDNN's dnnl_sgemm alone;
// OpenBLAS's cblas_sgemm; one thread):
//   - the recorded GEMMs alone, replayed on buffers of the same sizes;
//   - the model's whole forward + backward of one micro-batch.
// The GEMM-alone time t sets the limit #12 measures pipetrain against: P
// stages on P cores, each with 1/P of the GEMMs, run N micro-batches in
// (N + P - 1) stage slots, so at most P * rows / t * N / (N + P - 1) samples/s.
//   build/bench_gemm DECK [--set key=value]... [--reps K] [--stages P] [--tsv]
// Also times the GEMMs on the model's own buffers (ModelBuffers): the same
// calls moving the model's bytes, which shows how much of the gap to the
// limit is the memory traffic of a model larger than the caches.
// Prints a Markdown table (or, with --tsv, one tab-separated line per library:
// library, GEMM ms, GEMM GFLOP/s, model ms, limit samples/s at 1 and P stages,
// then GEMM ms on the model's buffers and its limits at 1 and P stages).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/tensor/blas_info.hpp"

namespace pt {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string deck;
  std::vector<std::string> overrides;
  int reps = 21;
  int stages = 2;
  bool tsv = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--set" && has_value) o.overrides.push_back(argv[++i]);
    else if (arg == "--reps" && has_value) o.reps = std::atoi(argv[++i]);
    else if (arg == "--stages" && has_value) o.stages = std::atoi(argv[++i]);
    else if (arg == "--tsv") o.tsv = true;
    else if (o.deck.empty() && arg[0] != '-') o.deck = arg;
    else throw InputError("bench_gemm: unexpected argument '" + arg +
                          "'; usage: bench_gemm DECK [--set key=value]... [--reps K] [--stages P] [--tsv]");
  }
  if (o.deck.empty()) throw InputError("bench_gemm: no deck given");
  if (o.reps < 1 || o.stages < 1) throw InputError("bench_gemm: --reps and --stages must be >= 1");
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The stage input of one micro-batch: token ids for the GPT, normal values for the MLP.
Tensor micro_batch_input(const StageModel& stage, int64_t rows, int64_t vocab) {
  Tensor x = Tensor::empty(stage.input_shape(rows), stage.input_dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (stage.input_dtype == DType::I32) x.i32()[i] = static_cast<int32_t>(i * 7919 % vocab);
    else x.f32()[i] = normal01(5, 1, static_cast<uint64_t>(i));
  }
  return x;
}

struct Model {
  StageModel stage;
  Tensor x, dy;  // (rows, input...), (rows, output...)
};

double forward_backward_seconds(Model& m) {
  const auto start = Clock::now();
  StagePass pass;
  stage_forward(m.stage, cpu_backend(), m.x, pass);
  stage_backward(m.stage, cpu_backend(), pass, m.dy, false);
  return seconds_since(start);
}

// Times the recorded GEMMs alone, on one set of buffers of the largest sizes:
// every call finds its operands in cache when they fit (the GEMM rate #12's
// limit is defined by).
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
  return seconds_since(start);
}

// The recorded GEMMs on buffers laid out as the model's own matrices: every
// byte range the calls touched (merged where they overlap, e.g. attention
// heads inside one (rows, 3C) tensor) gets one buffer, so a layer's weight
// read in forward is the one read again in backward and the GEMMs stream the
// model's whole footprint through the caches, as training does.
class ModelBuffers {
 public:
  explicit ModelBuffers(const std::vector<GemmShape>& shapes) {
    for (const GemmShape& g : shapes) {
      add(g.a_id, (g.trans_a ? g.k : g.m) * g.lda);
      add(g.b_id, (g.trans_b ? g.n : g.k) * g.ldb);
      add(g.c_id, g.m * g.ldc);
    }
    merge();
  }
  float* at(const void* id) {
    const auto addr = reinterpret_cast<uintptr_t>(id);
    for (Region& r : regions_)
      if (addr >= r.begin && addr < r.end) return r.data.data() + (addr - r.begin) / sizeof(float);
    PT_FAIL("bench_gemm: a recorded GEMM operand outside every region");
  }

 private:
  struct Region {
    uintptr_t begin, end;
    std::vector<float> data;
  };
  void add(const void* id, int64_t floats) {
    const auto begin = reinterpret_cast<uintptr_t>(id);
    regions_.push_back({begin, begin + static_cast<uintptr_t>(floats) * sizeof(float), {}});
  }
  void merge() {
    std::sort(regions_.begin(), regions_.end(),
              [](const Region& x, const Region& y) { return x.begin < y.begin; });
    std::vector<Region> merged;
    for (Region& r : regions_) {
      if (!merged.empty() && r.begin < merged.back().end)
        merged.back().end = std::max(merged.back().end, r.end);
      else merged.push_back(std::move(r));
    }
    for (Region& r : merged) r.data.assign((r.end - r.begin) / sizeof(float), 0.01f);
    regions_ = std::move(merged);
  }
  std::vector<Region> regions_;
};

// The calls of one kind: "NT" = A x B^T (a Linear's forward), "NN" (its
// input gradient), "TN" (its weight gradient), "TT"; "" = every call.
bool of_kind(const GemmShape& g, const std::string& kind) {
  if (kind.empty()) return true;
  return kind[0] == (g.trans_a ? 'T' : 'N') && kind[1] == (g.trans_b ? 'T' : 'N');
}

double replay_on_model_buffers_seconds(const std::vector<GemmShape>& shapes, ModelBuffers& buf,
                                       const std::string& kind = "") {
  std::vector<float*> operands;  // a, b, c of every call, resolved before the clock starts
  for (const GemmShape& g : shapes)
    for (const void* id : {g.a_id, g.b_id, g.c_id}) operands.push_back(buf.at(id));
  const auto start = Clock::now();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const GemmShape& g = shapes[i];
    if (!of_kind(g, kind)) continue;
    cpu::sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.f, operands[3 * i], g.lda,
               operands[3 * i + 1], g.ldb, g.beta, operands[3 * i + 2], g.ldc);
  }
  return seconds_since(start);
}

struct LibraryTimes {
  std::string library;
  double gemm_s = 0.0;   // the recorded GEMMs alone, per micro-batch
  double model_gemm_s = 0.0;  // the same on the model's own buffers
  double model_s = 0.0;  // the model's forward + backward, per micro-batch
  std::vector<double> kind_s;  // per kKinds entry: its calls alone on the model's buffers
};

const std::vector<std::string> kKinds = {"NT", "NN", "TN", "TT"};

// Alternates the measurements over repetitions so that noise hits all alike.
LibraryTimes time_library(CpuGemm gemm, Model& m, const std::vector<GemmShape>& shapes,
                          int reps) {
  set_cpu_gemm(gemm);
  LibraryTimes t;
  t.library = cpu_gemm_description();
  ModelBuffers buffers(shapes);
  replay_seconds(shapes);  // warm-up (oneDNN generates its kernels on first use)
  replay_on_model_buffers_seconds(shapes, buffers);
  forward_backward_seconds(m);
  std::vector<double> gemm_s, model_gemm_s, model_s;
  std::vector<std::vector<double>> kind_s(kKinds.size());
  for (int r = 0; r < reps; ++r) {
    gemm_s.push_back(replay_seconds(shapes));
    model_gemm_s.push_back(replay_on_model_buffers_seconds(shapes, buffers));
    model_s.push_back(forward_backward_seconds(m));
    for (size_t k = 0; k < kKinds.size(); ++k)
      kind_s[k].push_back(replay_on_model_buffers_seconds(shapes, buffers, kKinds[k]));
  }
  t.gemm_s = median(gemm_s);
  t.model_gemm_s = median(model_gemm_s);
  t.model_s = median(model_s);
  for (const std::vector<double>& k : kind_s) t.kind_s.push_back(median(k));
  return t;
}

double limit_samples_per_s(double rows, double gemm_s, int stages, int micro_batches) {
  return stages * rows / gemm_s * micro_batches / (micro_batches + stages - 1.0);
}

// Each kind of call on the model's buffers, per library: where one library
// gains on another (e.g. oneDNN's matmul primitive on A x B^T).
void print_kinds(const std::vector<GemmShape>& shapes, const std::vector<LibraryTimes>& all) {
  std::printf("\nBy kind of call (N = as stored, T = transposed; on the model's buffers, ms per "
              "micro-batch):\n\n| kind | calls | GFLOP |");
  for (const LibraryTimes& t : all) std::printf(" %s |", t.library.c_str());
  std::printf("\n|---|---:|---:|");
  for (size_t i = 0; i < all.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (size_t k = 0; k < kKinds.size(); ++k) {
    int calls = 0;
    double flops = 0.0;
    for (const GemmShape& g : shapes)
      if (of_kind(g, kKinds[k])) ++calls, flops += 2.0 * g.m * g.n * g.k;
    if (calls == 0) continue;
    std::printf("| A%s x B%s | %d | %.3f |", kKinds[k][0] == 'T' ? "^T" : "",
                kKinds[k][1] == 'T' ? "^T" : "", calls, flops * 1e-9);
    for (const LibraryTimes& t : all) std::printf(" %.3f |", t.kind_s[k] * 1e3);
    std::printf("\n");
  }
}

void print(const Options& o, const Deck& deck, int64_t rows, const std::vector<GemmShape>& shapes,
           double flops, const std::vector<LibraryTimes>& all) {
  const size_t calls = shapes.size();
  const int n = static_cast<int>(deck.pipeline.micro_batches);
  if (o.tsv) {
    for (const LibraryTimes& t : all)
      std::printf("%s\t%.4f\t%.2f\t%.4f\t%.2f\t%.2f\t%.4f\t%.2f\t%.2f\n", t.library.c_str(),
                  t.gemm_s * 1e3, flops / t.gemm_s * 1e-9, t.model_s * 1e3,
                  limit_samples_per_s(rows, t.gemm_s, 1, n),
                  limit_samples_per_s(rows, t.gemm_s, o.stages, n), t.model_gemm_s * 1e3,
                  limit_samples_per_s(rows, t.model_gemm_s, 1, n),
                  limit_samples_per_s(rows, t.model_gemm_s, o.stages, n));
    return;
  }
  std::printf("Deck %s: micro-batch of %lld rows (batch %lld / N = %d), %zu GEMMs per "
              "micro-batch forward + backward, one thread; median of %d repetitions.\n\n",
              o.deck.c_str(), static_cast<long long>(rows),
              static_cast<long long>(deck.training.batch_size), n, calls, o.reps);
  std::printf("| GEMM library | GEMMs alone (ms) | GEMM GFLOP/s | on the model's buffers (ms) | "
              "model fwd+bwd (ms) | GEMM share (%%) | limit, 1 stage (samples/s) | limit, %d "
              "stages (samples/s) | same, model's buffers |\n",
              o.stages);
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const LibraryTimes& t : all)
    std::printf("| %s | %.3f | %.1f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f |\n",
                t.library.c_str(), t.gemm_s * 1e3, flops / t.gemm_s * 1e-9,
                t.model_gemm_s * 1e3, t.model_s * 1e3, 100.0 * t.gemm_s / t.model_s,
                limit_samples_per_s(rows, t.gemm_s, 1, n),
                limit_samples_per_s(rows, t.gemm_s, o.stages, n),
                limit_samples_per_s(rows, t.model_gemm_s, o.stages, n));
  print_kinds(shapes, all);
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const Deck deck = parse_deck_file(o.deck, o.overrides);
  set_blas_threads(1);
  const int64_t rows = deck.training.batch_size / deck.pipeline.micro_batches;
  const int64_t units = model_units(deck.model);
  Model m{build_stage(deck.model, {units}, 0), Tensor(), Tensor()};
  m.x = micro_batch_input(m.stage, rows, deck.model.gpt.vocab_size);
  m.dy = Tensor::empty(m.stage.output_shape(rows));
  for (int64_t i = 0; i < m.dy.numel(); ++i) m.dy.f32()[i] = 1e-3f * normal01(5, 2, i);
  start_gemm_recording();
  forward_backward_seconds(m);
  const std::vector<GemmShape> shapes = stop_gemm_recording();
  double flops = 0.0;
  for (const GemmShape& g : shapes) flops += 2.0 * g.m * g.n * g.k;
  std::vector<LibraryTimes> all;
  // The default (auto) first: the benchmark scripts read the first line as the limit of a run.
  for (CpuGemm gemm : {CpuGemm::Auto, CpuGemm::OneDNN, CpuGemm::OneDNNSgemm, CpuGemm::OpenBLAS})
    all.push_back(time_library(gemm, m, shapes, o.reps));
  print(o, deck, rows, shapes, flops, all);
  return 0;
}

}  // namespace
}  // namespace pt

int main(int argc, char** argv) {
  const std::string blas_note = pt::select_blas_kernel(argc, argv);  // may restart the program
  try {
    return pt::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
