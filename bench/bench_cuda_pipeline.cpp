// bench_cuda_pipeline.cpp: MFU of a GPT trained by the application's own
// pipeline (bench_cuda pipeline, under mpirun -np P). The deck is built as
// TOML text and checked like a user's (parse_deck_text, check_deck_layout);
// the compute resources come from the application's make_compute_resources
// (the CUDA backend, the transport "auto" resolves); the steps are
// Trainer::train_step, the one executor and schedule a training run uses.
//
//   mpirun -np 2 bench_cuda pipeline [--dims 2048] [--seq 1024] [--mb 8]
//     [--micro-batches 8] [--blocks 2] [--warmup 2] [--reps 5]
//     [--precision bf16] [--schedule 1f1b] [--transport auto]
//     [--peak-tflops 989.4]
//   --mb: sequences per micro-batch; --blocks: transformer blocks per rank.
//
// Step time: per step the slowest rank's StepRecord::step_time_s, median of
// --reps steps after --warmup. Model FLOPs: model_train_flops_per_sample (the
// model family's count: the blocks' matmuls with full T x T attention, and
// the LM head; 3 x forward) x sequences per step. MFU divides the model's
// FLOP/s by the peak of the GPUs the ranks really drive: with every rank on
// one GPU (the check machine), ONE GPU's peak, not P x peak. The bubble is
// the trainer's measured one (1 - busy / span, mean over ranks, busy timed by
// device events); ranks that share a GPU time-slice, and a rank's events
// then also span the other rank's kernels, so there it understates the idle
// time. Prints Markdown rows, and "RESULT key value" lines for the script.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "bench_cuda.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

namespace {

struct PipelineOptions {
  int64_t dims = 2048, seq = 1024, mb = 8, micro_batches = 8, blocks = 2, warmup = 2, reps = 5;
  std::string precision = "bf16", schedule = "1f1b", transport = "auto";
  double peak_tflops = 0;  // per GPU; 0: dense_peak_tflops of the precision
};

PipelineOptions parse_pipeline(int argc, char** argv) {
  PipelineOptions o;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dims") o.dims = std::atol(value.c_str());
    else if (key == "--seq") o.seq = std::atol(value.c_str());
    else if (key == "--mb") o.mb = std::atol(value.c_str());
    else if (key == "--micro-batches") o.micro_batches = std::atol(value.c_str());
    else if (key == "--blocks") o.blocks = std::atol(value.c_str());
    else if (key == "--warmup") o.warmup = std::atol(value.c_str());
    else if (key == "--reps") o.reps = std::atol(value.c_str());
    else if (key == "--precision") o.precision = value;
    else if (key == "--schedule") o.schedule = value;
    else if (key == "--transport") o.transport = value;
    else if (key == "--peak-tflops") o.peak_tflops = std::atof(value.c_str());
    else throw InputError("bench_cuda pipeline: unknown option " + key);
  }
  if (o.reps < 1 || o.warmup < 0) throw InputError("bench_cuda pipeline: --reps >= 1, --warmup >= 0");
  return o;
}

// The deck of the benchmark, as a user would write it.
std::string deck_text(const PipelineOptions& o, int ranks) {
  char text[1536];
  std::snprintf(text, sizeof text,
                "[model]\ntype = \"gpt\"\nvocab_size = 256\nseq_len = %lld\nd_model = %lld\n"
                "heads = %lld\nblocks = %lld\nmlp_ratio = 4\n"
                "[data]\ntype = \"markov\"\nmarkov_order = 1\n"
                "[training]\nsteps = %lld\nbatch_size = %lld\noptimizer = \"adamw\"\n"
                "lr = 1e-4\nwarmup_steps = 0\nlr_schedule = \"constant\"\nblas_threads = 1\n"
                "device = \"cuda\"\nprecision = \"%s\"\n"
                "[pipeline]\nstages = 0\nmicro_batches = %lld\nschedule = \"%s\"\n"
                "transport = \"%s\"\npredict = false\ntimeout_s = 120\n",
                static_cast<long long>(o.seq), static_cast<long long>(o.dims),
                static_cast<long long>(std::max<int64_t>(1, o.dims / 128)),
                static_cast<long long>(o.blocks * ranks),
                static_cast<long long>(o.warmup + o.reps),
                static_cast<long long>(o.mb * o.micro_batches),
                o.precision.c_str(), static_cast<long long>(o.micro_batches), o.schedule.c_str(),
                o.transport.c_str());
  return text;
}

// Distinct physical GPUs driven by the ranks of comm (by UUID).
int distinct_gpus(const cuda::DeviceInfo& info, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  char mine[96] = {0};
  std::snprintf(mine, sizeof mine, "%s", info.uuid.c_str());
  std::vector<char> all(96 * static_cast<size_t>(size));
  timed_allgather(mine, 96, MPI_CHAR, all.data(), comm, "the GPU UUID all-gather");
  std::set<std::string> uuids;
  for (int r = 0; r < size; ++r) uuids.insert(std::string(&all[96 * static_cast<size_t>(r)]));
  return static_cast<int>(uuids.size());
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run(const PipelineOptions& o, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const Deck deck = parse_deck_text(deck_text(o, size), "bench_cuda pipeline", {});
  check_deck_layout(deck, size);
  set_wait_limit(deck.pipeline.timeout_s);  // a stuck exchange ends in an error, as in a run
  choose_wait_mode();
  // The device (collective; throws "no CUDA device visible" without one),
  // then the application's resources for the deck, which select it again.
  const cuda::DeviceInfo info = cuda::select_device(comm);
  const int gpus = distinct_gpus(info, comm);
  const std::string transport = cuda::resolve_transport(o.transport, info, comm);
  ComputeResources compute = make_compute_resources(deck, comm);
  Trainer trainer(deck, comm, compute.setup);
  const double peak = (o.peak_tflops > 0 ? o.peak_tflops : dense_peak_tflops(parse_precision(o.precision))) * gpus;
  std::vector<double> times, bubbles;
  for (int64_t s = 0; s < o.warmup + o.reps; ++s) {
    const StepRecord rec = trainer.train_step(s);
    double slowest = rec.step_time_s;
    timed_allreduce(&rec.step_time_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm,
                    "the step-time all-reduce");
    if (rank == 0)
      std::printf("step %lld: %.2f ms, loss %.4f, measured bubble %.1f%%\n",
                  static_cast<long long>(s), slowest * 1e3, rec.loss, 100 * rec.bubble);
    if (s >= o.warmup) {
      times.push_back(slowest);
      bubbles.push_back(rec.bubble);
    }
  }
  if (rank != 0) return;
  const double t_step = median_of(times), bubble = median_of(bubbles);
  const double flops = model_train_flops_per_sample(deck.model) *
                       static_cast<double>(deck.training.batch_size);
  const double tflops = flops / t_step * 1e-12, mfu = tflops / peak;
  // 1F1B's bubble with equal stages and free transfers: (P - 1) / (N + P - 1).
  const double ideal = static_cast<double>(size - 1) / static_cast<double>(o.micro_batches + size - 1);
  std::printf("\n| d_model | T | ranks | GPUs | transport | schedule | micro-batches x seqs | "
              "precision | step (ms) | model TFLOP/s | MFU (%% of %d GPU x %.1f) | measured bubble "
              "(%%) | 1F1B bubble, equal stages (%%) |\n",
              gpus, peak / gpus);
  std::printf("|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|\n");
  std::printf("| %lld | %lld | %d | %d | %s | %s | %lld x %lld | %s | %.2f | %.1f | %.1f | %.1f | "
              "%.1f |\n",
              static_cast<long long>(o.dims), static_cast<long long>(o.seq), size, gpus,
              transport.c_str(), o.schedule.c_str(), static_cast<long long>(o.micro_batches),
              static_cast<long long>(o.mb), o.precision.c_str(), t_step * 1e3, tflops, 100 * mfu,
              100 * bubble, 100 * ideal);
  if (gpus < size)
    std::printf("\n%d ranks on %d GPU(s): the ranks time-slice the GPU, so MFU is of %d GPU's "
                "peak; NCCL refuses ranks that share a GPU, so the transport is %s.\n",
                size, gpus, gpus, transport.c_str());
  const long long d = static_cast<long long>(o.dims);
  std::printf("RESULT pipeline_step_ms_d%lld %.2f\n", d, t_step * 1e3);
  std::printf("RESULT pipeline_tflops_d%lld %.1f\n", d, tflops);
  std::printf("RESULT pipeline_mfu_pct_d%lld %.1f\n", d, 100 * mfu);
  std::printf("RESULT pipeline_bubble_pct_d%lld %.1f\n", d, 100 * bubble);
  std::printf("RESULT pipeline_ideal_bubble_pct %.1f\n", 100 * ideal);
  std::printf("RESULT pipeline_gpus %d\n", gpus);
  std::printf("RESULT pipeline_ranks %d\n", size);
  std::printf("RESULT pipeline_transport %s\n", transport.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_pipeline_bench(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  try {
    run(parse_pipeline(argc, argv), MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda pipeline, rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}

}  // namespace pt
