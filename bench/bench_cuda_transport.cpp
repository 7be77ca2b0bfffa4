// bench_cuda_transport.cpp: bandwidth of the GPU transports between two ranks
// (bench_cuda transport, under mpirun -np 2). Each rank sends a device
// tensor to the other and receives one from it at the same time, as the
// pipeline's crossing SEND_F / RECV_B do; GB/s per direction = bytes / time
// of the exchange (the slower rank's), median of reps. mpi_staged always
// runs; nccl only when the two ranks drive different GPUs (on one GPU NCCL
// refuses, and mpi_staged is the fallback the transport choice "auto" makes).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_cuda.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

// Tests both until both completed (each test() also advances the transport).
void wait_both(PendingTransfer& a, PendingTransfer& b) {
  bool a_done = false, b_done = false;
  while (!a_done || !b_done) {
    if (!a_done) a_done = a.test();
    if (!b_done) b_done = b.test();
  }
}

// Median seconds of one exchange of `bytes` each way between ranks 0 and 1:
// each posts its send before its receive, then waits for both.
double exchange_seconds(Transport& tr, int64_t bytes, int reps) {
  Tensor out = Tensor::zeros({bytes / 4}, DType::F32, MemCategory::Workspace, Device::CUDA);
  Tensor in = Tensor::zeros({bytes / 4}, DType::F32, MemCategory::Workspace, Device::CUDA);
  const int peer = 1 - tr.rank();
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {  // r == 0: warm-up (pinned buffers, NCCL connections)
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    std::unique_ptr<PendingTransfer> send = tr.isend(out, peer, 7);
    std::unique_ptr<PendingTransfer> recv = tr.irecv(in, peer, 7);
    wait_both(*send, *recv);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    double slowest = 0;
    MPI_Allreduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r > 0) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void report(const char* name, int64_t bytes, double seconds, int rank) {
  if (rank != 0) return;
  std::printf("| %s | %lld | %.3f | %.2f |\n", name, static_cast<long long>(bytes >> 20),
              seconds * 1e3, static_cast<double>(bytes) / seconds * 1e-9);
  std::printf("RESULT %s_gbps_%lldMiB %.2f\n", name, static_cast<long long>(bytes >> 20),
              static_cast<double>(bytes) / seconds * 1e-9);
}

}  // namespace

int run_transport_bench(int argc, char** argv) {
  int64_t mbytes = 64;
  int reps = 10;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--mbytes") mbytes = std::atol(argv[i + 1]);
    else if (key == "--reps") reps = std::atoi(argv[i + 1]);
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  try {
    if (size != 2) throw Error("bench_cuda transport needs exactly 2 ranks");
    const cuda::DeviceInfo info = cuda::select_device(MPI_COMM_WORLD);
    const bool shared = cuda::any_device_shared(info, MPI_COMM_WORLD);
    std::printf("%s\n", info.describe().c_str());
    std::fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("\n| transport (both directions at once) | message (MiB) | time (ms) | GB/s per "
                  "direction |\n|---|---:|---:|---:|\n");
    const std::vector<int64_t> sizes = {std::max<int64_t>(1, mbytes / 8) << 20, mbytes << 20};
    {
      auto staged = cuda::make_staged_transport(MPI_COMM_WORLD);
      for (int64_t b : sizes) report("mpi_staged", b, exchange_seconds(*staged, b, reps), rank);
    }
    if (shared) {
      if (rank == 0) {
        std::printf("| nccl | - | - | n/a: both ranks on one GPU (NCCL refuses; mpi_staged is "
                    "the fallback) |\n");
        std::printf("RESULT nccl_gbps n/a(shared-GPU)\n");
      }
    } else {
      auto nccl = cuda::make_nccl_transport(MPI_COMM_WORLD, 60.0);
      for (int64_t b : sizes) report("nccl", b, exchange_seconds(*nccl, b, reps), rank);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}

}  // namespace pt
