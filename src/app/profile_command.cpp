// profile_command.cpp: `pipetrain profile DECK [--ranks P] [--out FILE]
// [--reps K]`: every rank measures the deck's model unit by unit on the
// deck's backend (ranks 0 and 1 also their link); rank 0 writes the profile
// (docs/profile.md) and prints it as a table.
#include "pipetrain/app/profile_command.hpp"

#include <algorithm>
#include <cstdio>

#include "pipetrain/app/blas_report.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/app/memory_check.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/io/profile_io.hpp"
#include "pipetrain/runtime/profile_reduction.hpp"
#include "pipetrain/runtime/profiler.hpp"

namespace pt {

BlasThreadsChoice profile_blas_threads(const Deck& deck, MPI_Comm comm, int planned_ranks) {
  BlasThreadsChoice c = choose_blas_threads(deck.training.blas_threads, comm);
  if (planned_ranks > c.ranks_on_node) {
    c.ranks_on_node = planned_ranks;
    if (c.automatic) c.threads = std::max(1, c.node_cores / planned_ranks);
  }
  return c;
}

ProfileOptions options_on(const ComputeResources& compute, ProfileOptions o) {
  o.memory_stats = compute.setup.device_memory_stats;
  o.reset_memory_peaks = compute.setup.reset_device_memory_peaks;
  o.make_transport = compute.setup.make_transport;
  o.make_replica_group = compute.setup.make_replica_group;
  o.open_dataset = compute.setup.open_dataset;
  o.kernels = compute.kernels;
  return o;
}

ProfileOptions options_for(const CommandLine& cli, const ComputeResources& compute,
                           ProfileOptions o) {
  if (cli.reps > 0) o.reps = cli.reps;
  return options_on(compute, o);
}

namespace {

std::string how_measured(const ProfileOptions& o, int ranks) {
  std::string text = "measured by `pipetrain profile` on " + std::to_string(ranks) +
                     (ranks == 1 ? " rank" : " ranks") + ": " + std::to_string(o.warmup) +
                     " warm-up and " + std::to_string(o.reps) +
                     " timed repetitions per figure (in up to 3 passes through the units), "
                     "times are medians";
  if (ranks > 1) text += " (over the ranks too); link by ping-pong between ranks 0 and 1";
  return text;
}

double ms(double seconds) { return seconds * 1e3; }

// Bytes in MiB, or in KiB when no figure of the table reaches 1 MiB.
struct ByteUnit {
  const char* name;
  double scale;
};
ByteUnit byte_unit(const ModelProfile& p) {
  double largest = 0.0;
  for (const UnitCost& u : p.units)
    largest = std::max({largest, u.stash_none_bytes, u.workspace_bytes, u.param_bytes,
                        u.output_bytes, u.input_bytes});
  return largest < 1048576.0 ? ByteUnit{"KiB", 1.0 / 1024.0} : ByteUnit{"MiB", 1.0 / 1048576.0};
}

void print_table(const ModelProfile& p) {
  const ByteUnit b = byte_unit(p);
  const auto bytes = [&b](const char* what) { return std::string(what) + " " + b.name; };
  std::printf("%-10s %5s %9s %9s %9s %9s %10s %10s %10s %10s %10s %10s %9s\n", "unit", "part.",
              "fwd ms", "bwd ms", "recomp ms", "rc end ms", bytes("stash").c_str(),
              bytes("sel").c_str(), bytes("input").c_str(), bytes("out").c_str(),
              bytes("work").c_str(), bytes("param").c_str(), "optim ms");
  for (const UnitCost& u : p.units)
    std::printf("%-10s %5s %9.3g %9.3g %9.3g %9.3g %10.4g %10.4g %10.4g %10.4g %10.4g %10.4g %9.3g\n",
                u.name.c_str(), u.partitionable ? "yes" : "no", ms(u.forward_s), ms(u.backward_s),
                ms(u.recompute_s), ms(u.recompute_end_s), u.stash_none_bytes * b.scale,
                u.stash_selective_bytes * b.scale, u.input_bytes * b.scale, u.output_bytes * b.scale,
                u.workspace_bytes * b.scale, u.param_bytes * b.scale, ms(u.optimizer_s));
}

void print_link(const ModelProfile& p, int ranks) {
  if (ranks < 2) {
    std::printf("link: not measured on 1 rank (profile on 2 ranks to measure it)\n");
    return;
  }
  double message = 0.0;
  for (size_t u = 0; u + 1 < p.units.size(); ++u) message = std::max(message, p.units[u].output_bytes);
  std::printf("link rank 0 <-> 1: latency %.3g us, bandwidth %.3g GB/s; the %.0f-byte activation "
              "message of a micro-batch takes %.3g us\n",
              p.link.latency_s * 1e6, p.link.bandwidth_bytes_per_s * 1e-9, message,
              p.link.time_s(message) * 1e6);
  for (const MeasuredReduction& r : p.reductions)
    std::printf("data-parallel reduction (as the run reduces, every replica group at once) at %s\n",
                describe_reduction(r).c_str());
}

void print_profile(const ModelProfile& p, const ProfileOptions& o, int ranks,
                   const BlasThreadsChoice& blas, const std::string& path) {
  std::printf("profile of %s\nbackend %s; %s\n", p.model.c_str(), p.backend.c_str(),
              p.kernels.c_str());
  std::printf("BLAS threads per rank: %d (a run of %d rank%s on this node's %d cores%s)\n",
              blas.threads, blas.ranks_on_node, blas.ranks_on_node == 1 ? "" : "s", blas.node_cores,
              blas.automatic ? "" : "; training.blas_threads");
  std::printf("per micro-batch of %lld samples; medians of %d repetitions (in up to 3 passes "
              "through the units, each after %d warm-up) on %d rank%s\n",
              static_cast<long long>(p.micro_batch_rows), o.reps, o.warmup, ranks,
              ranks == 1 ? "" : "s (every rank measures every unit at once)");
  std::printf("caches %s\n%s\n", p.cache.c_str(), p.calibration.c_str());
  print_table(p);
  std::printf("stash / sel: kept from F to B with recompute none / selective (full and every:K "
              "keep the input of a segment's first unit); rc end: recompute when the unit ends a "
              "segment; work: transient peak above the stash\n");
  print_link(p, ranks);
  std::printf("per-step overhead outside the schedule and the optimizer: %.3g ms\n",
              ms(p.step_overhead_s));
  if (p.stage_data_bytes + p.units.front().data_bytes + p.units.back().data_bytes > 0.0)
    std::printf("training data in host memory: %.4g KiB on every stage, %.4g KiB more on the "
                "first, %.4g KiB more on the last\n",
                p.stage_data_bytes / 1024.0, p.units.front().data_bytes / 1024.0,
                p.units.back().data_bytes / 1024.0);
  std::printf("profile: %s\n", path.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_profile(MPI_Comm comm, const CommandLine& cli, const Deck& deck,
                const std::string& blas_note) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  set_wait_phase("in the profile");
  const BlasThreadsChoice blas = profile_blas_threads(deck, comm, cli.ranks);
  set_blas_threads(blas.threads);
  choose_wait_mode();
  const BlasReport report = gather_blas_report(comm, blas_note);
  ComputeResources compute = make_compute_resources(deck, comm);
  check_profile_fits(deck, comm, memory_on_hand(compute));  // before a unit is built
  Backend& be = compute.setup.backend ? *compute.setup.backend : cpu_backend();
  ProfileOptions options = options_for(cli, compute, ProfileOptions{});
  // The step's split backward, for a plan that may weigh weight_grad = "step".
  options.step_weight_grads = deck.pipeline.weight_grad == WeightGradKind::Step || deck.pipeline.auto_plan;
  ModelProfile profile = profile_model(deck, be, comm, options);
  // The reductions of every P x D grid of these ranks (`pipetrain plan --profile` at a deck's D).
  profile.reductions =
      time_replica_reductions(deck, be, comm, grid_replica_counts(size, deck.training.batch_size), options);
  if (rank != 0) return 0;
  if (report.any_fallback)
    std::printf("BLAS: warning: some ranks ran fallback kernels; these times are not those of "
                "the CPU's best kernels\n%s", report.lines.c_str());
  const std::string path = prepare_profile_output(deck, cli.out);
  write_profile_file(path, profile, {deck_to_toml(deck), how_measured(options, size)});
  print_profile(profile, options, size, blas, path);
  return 0;
}

}  // namespace pt
