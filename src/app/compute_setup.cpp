// compute_setup.cpp: where each rank computes, from training.device. The CPU
// needs nothing; CUDA selects this rank's GPU (node-local rank mod visible
// devices), logs it on every rank, and hands the trainer the CUDA backend, a
// GPU transport (NCCL or host-staged MPI) and device memory statistics. On
// every device the trainer also gets io's make_dataset to open its data. The
// only file of the runtime's callers that knows about CUDA. Also how a
// rank's waits spend the core (yield or sleep).
#include "pipetrain/app/compute_setup.hpp"

#include <cstdio>
#include <cstdlib>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/data_files.hpp"

#ifdef PIPETRAIN_HAVE_CUDA
#include "pipetrain/cuda/cuda.hpp"
#endif

namespace pt {

// Yielding waits, whatever the node's ranks and cores: measured with
// jobs/bench_oversubscribe.sh they are as fast as sleeping ones with a core
// per rank, and 4-14% faster with 4 ranks on 2 cores (a sleeping rank wakes
// late for its message). PIPETRAIN_WAIT=sleep gives the core away for real,
// for schedulers that favour spinners; PIPETRAIN_WAIT=yield|sleep overrides.
void choose_wait_mode() {
  const char* env = std::getenv("PIPETRAIN_WAIT");
  const std::string forced = env ? env : "";
  if (!forced.empty() && forced != "yield" && forced != "sleep")
    throw InputError("PIPETRAIN_WAIT=" + forced + ": expected yield or sleep");
  set_wait_mode(forced == "sleep" ? WaitMode::Sleep : WaitMode::Yield);
}

bool cuda_available_in_build() {
#ifdef PIPETRAIN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

#ifdef PIPETRAIN_HAVE_CUDA
// Rank 0 prints the CUDA, cuBLAS and NCCL versions and every rank's device line, in rank order.
void log_devices(MPI_Comm comm, const std::string& line) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  char mine[256] = {0};
  std::snprintf(mine, sizeof mine, "%s", line.c_str());
  std::vector<char> all(rank == 0 ? 256 * size : 0);
  timed_gather(mine, 256, MPI_CHAR, all.data(), 0, comm, "the device log gather");
  if (rank == 0) std::printf("cuda: %s\n", cuda::versions().describe().c_str());
  for (int r = 0; rank == 0 && r < size; ++r) std::printf("device: %s\n", &all[256 * r]);
  std::fflush(stdout);
}

// Rank 0 of the pipeline prints the transport of every link ("link 0->1: nccl (...)").
void log_links(MPI_Comm comm, const cuda::TransportPlan& plan) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (rank != 0) return;
  for (const std::string& line : plan.links) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}
#endif

}  // namespace

ComputeResources make_compute_resources(const Deck& deck, MPI_Comm comm) {
  ComputeResources c;
  c.setup.open_dataset = make_dataset;  // every data.type, files included (io/data_files.hpp)
  if (deck.training.device != DeviceKind::Cuda) {
    if (deck.training.precision != Precision::Fp32) {
      c.backend = make_cpu_backend(deck.training.precision);
      c.setup.backend = c.backend.get();
    }
    if (deck.pipeline.transport == TransportKind::NcclModel)
      c.setup.make_transport = [](MPI_Comm stage_comm) { return make_nccl_model_transport(stage_comm); };
    return c;
  }
#ifdef PIPETRAIN_HAVE_CUDA
  auto info = std::make_shared<cuda::DeviceInfo>(cuda::select_device(comm));
  log_devices(comm, info->describe());
  c.device_name = info->name;
  c.device_shared = cuda::any_device_shared(*info, comm);
  c.backend = cuda::make_backend({deck.training.precision});
  c.setup.backend = c.backend.get();
  const TransportKind kind = deck.pipeline.transport;
  const std::string transport = kind_name(kind);  // the CUDA layer's name of it
  const double timeout_s = deck.pipeline.timeout_s;
  c.setup.make_transport = [info, transport, timeout_s](MPI_Comm stage_comm) {
    cuda::TransportPlan plan;
    auto made = cuda::make_transport(transport, stage_comm, *info, timeout_s, &plan);
    log_links(stage_comm, plan);
    return made;
  };
  // Data parallelism: the replica group is decided like a pipeline link, by
  // GPU UUID over the group's own ranks (cuda::plan_transport, collective):
  // NCCL when every rank of the group has a GPU of its own, else the MPI
  // group (host buffers, device copies); "nccl" with ranks sharing a GPU is
  // refused with the ranks named. (Counting ranks against visible devices
  // took MPI with --gpus-per-task=1, and NCCL over one GPU with
  // PIPETRAIN_DEVICE=0 on a multi-GPU node.)
  c.setup.make_replica_group = [info, kind, transport, timeout_s](MPI_Comm replicas)
      -> std::unique_ptr<ReplicaGroup> {
    int replicas_size = 1;
    MPI_CHECK(MPI_Comm_size(replicas, &replicas_size));
    // D = 1 (a group active only for dp_reduction = "ordered"): one rank, one
    // GPU, no sharing possible; NCCL keeps the sums on the device.
    if (replicas_size == 1 && kind != TransportKind::MpiStaged)
      return cuda::make_nccl_replica_group(replicas, timeout_s);
    if (cuda::resolve_transport(transport, *info, replicas) == "nccl")
      return cuda::make_nccl_replica_group(replicas, timeout_s);
    return make_mpi_replica_group(replicas);
  };
  c.kernels = cuda::versions().describe() + "; GEMM operands " + kind_name(deck.training.precision);
  c.setup.device_memory_stats = [] { return cuda::device_memory_stats(); };
  c.setup.reset_device_memory_peaks = [] { cuda::reset_device_memory_peaks(); };
  c.free_device_memory = [] { return cuda::device_free_memory_bytes(); };
#else
  (void)comm;
  PT_FAIL("training.device = \"cuda\" in a build without the CUDA backend");
#endif
  return c;
}

}  // namespace pt
