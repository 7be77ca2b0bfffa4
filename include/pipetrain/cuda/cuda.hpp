// cuda.hpp: the public API of the CUDA build (library pt_cuda, only built
// with -DPIPETRAIN_CUDA=ON): device selection, the CUDA backend, the GPU
// transports (NCCL and host-staged MPI), device memory statistics.
//
// Pure C++ and MPI: no CUDA header is needed to include it. Call order on
// each rank (docs/cuda.md has the whole integration list):
//   DeviceInfo info = cuda::select_device(comm);      // collective; before any CUDA use
//   auto backend   = cuda::make_backend({precision});  // Backend on that device
//   auto transport = cuda::make_transport("auto", comm, info, timeout_s);  // collective
// Stream contract: every Backend kernel and every host<->device tensor copy
// runs on one compute stream per process; the transports order themselves
// after it (isend and irecv both make their stream wait for the work already
// queued on the compute stream) and complete in PendingTransfer::test(), after
// which the buffer may be used by any later Backend call. Backend calls that
// return a value to the host (losses, sum_squares, all_finite) synchronise the
// compute stream.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/tensor/tensor.hpp"
#include "pipetrain/runtime/replica_group.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt::cuda {

// ---- devices ----

// Number of visible CUDA devices; 0 when there is no driver or device (never
// throws). `why` (optional) receives the CUDA error text when 0.
int device_count(std::string* why = nullptr);

// The device picked for this rank and where it is, for the run log.
struct DeviceInfo {
  int rank = 0;          // in the communicator given to select_device
  int local_rank = 0;    // among the ranks on this host
  int local_size = 1;    // ranks on this host
  int device = 0;        // CUDA device index (after CUDA_VISIBLE_DEVICES)
  int device_count = 0;  // visible devices
  std::string host;      // MPI processor name
  std::string name;      // "NVIDIA H200"
  std::string pci_bus_id;  // "0000:19:00.0": where the GPU sits on its host (for the log)
  std::string uuid;        // "GPU-8f1c...": identifies the physical GPU across hosts
  size_t total_memory = 0;  // bytes
  int cc_major = 0, cc_minor = 0;
  bool override_used = false;  // PIPETRAIN_DEVICE decided the device
  // "rank 3 on node7: cuda:1 NVIDIA H200 (sm_90, 139.8 GiB) pci 0000:2a:00.0
  //  GPU-8f1c2d3e, local rank 1/4" (the UUID shortened to its first 8 hex digits)
  std::string describe() const;
};

// Device index for a rank: local_rank mod device_count, or the environment
// override PIPETRAIN_DEVICE when set: one index ("2": every rank of the host
// uses device 2) or a comma list indexed by local rank mod its length
// ("0,0,1,1"). Throws InputError on a malformed or out-of-range override.
int choose_device_index(int local_rank, int device_count, const char* override_env);

// Collective over comm: local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED),
// choose_device_index(getenv("PIPETRAIN_DEVICE")), cudaSetDevice, creates the
// compute stream and cuBLAS handle and registers Device::CUDA tensor memory.
// Throws Error when no device is visible. Call before any other CUDA use.
DeviceInfo select_device(MPI_Comm comm);
// Single process (tests, benchmarks): the same on a given device index.
DeviceInfo init_device(int device);

// prepare_gpu_process_environment (base/gpu_environment.hpp): main and the
// MPI test main call it before MPI_Init, since a CUDA-aware MPI starts CUDA
// there; device_count, select_device and init_device call it again for
// programs without that main (tests, benchmarks).
void prepare_cuda_environment();

// True when two ranks of comm drive the same physical GPU (same UUID).
// Collective. NCCL refuses such a communicator.
bool any_device_shared(const DeviceInfo& info, MPI_Comm comm);
// The pure rule behind it: keys[r] identifies rank r's GPU (its UUID). Returns
// each group of two or more ranks with the same key, ranks ascending, groups
// ordered by their first rank.
std::vector<std::vector<int>> ranks_sharing(const std::vector<std::string>& keys);

// Waits for all work queued on the compute stream (and checks kernel errors).
void synchronize();

// ---- backend ----

// fp32: plain fp32 GEMMs (pedantic, no TF32). tf32: fp32 tensors, TF32 tensor
// cores in GEMMs. bf16 / fp16: fp32 master weights and fp32 activations in
// memory; each GEMM casts its operands to bf16 / fp16 on the fly and
// accumulates in fp32 into an fp32 output. Everything but GEMMs is fp32.
// fp16 needs dynamic loss scaling (pipetrain/model/loss_scaler.hpp); bf16 does not.
// The precision is pt::Precision (base/deck_kinds.hpp), the deck's
// training.precision; kind_name gives its name.
struct BackendOptions {
  Precision precision = Precision::Fp32;
};

// The CUDA backend on the device chosen by select_device / init_device.
// Tensors given to it must be Device::CUDA (checked).
std::unique_ptr<Backend> make_backend(const BackendOptions& options = {});

// GEMMs issued by the CUDA backend between start and stop (for benchmarks):
// row-major shapes as pt::GemmShape; batch > 1 (element strides between the
// batch's matrices) for the attention GEMMs.
struct DeviceGemm {
  GemmShape shape;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};
void start_device_gemm_recording();
std::vector<DeviceGemm> stop_device_gemm_recording();
// Linear forwards (Backend::linear_forward) the CUDA backend ran as one
// cuBLASLt matmul with the bias, or bias and GELU, in its epilogue, and
// those it ran as separate kernels, since the process started; likewise the
// input gradients through a GELU (Backend::linear_backward_input with a
// gelu_input) run with cuBLASLt's DGELU epilogue, or as a GEMM and GELU's
// backward kernel.
struct LinearEpilogueCounts {
  int64_t fused = 0;
  int64_t unfused = 0;
  int64_t dgelu_fused = 0;
  int64_t dgelu_unfused = 0;
};
LinearEpilogueCounts linear_epilogue_counts();

// ---- transports ----

// "nccl": one 2-rank NCCL communicator per ring link (r, r+1 mod P) and
// direction, split from a world communicator bootstrapped with MPI_Bcast of
// the unique id; peers rank +- 1 mod P only (no self-sends). The messages from
// one rank to another must be posted in the same order by both sides (NCCL
// has no tags; GPipe and 1F1B post each link's messages in micro-batch order).
// A transfer still pending after timeout_s, or an asynchronous NCCL error,
// aborts the communicators and throws (TimeoutError / Error).
std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, double timeout_s);
// "mpi_staged": device -> pinned host -> MPI_Isend, MPI_Irecv -> pinned ->
// device (Open MPI here is not CUDA-aware). Works when ranks share a GPU.
std::unique_ptr<Transport> make_staged_transport(MPI_Comm comm);
// The transport chosen for a communicator, and one log line per pipeline link
// r -> r+1 (and the closing link P-1 -> 0 that NCCL also connects for P > 2):
//   "link 0->1: nccl (node7 cuda:0 GPU-8f1c2d3e -> node7 cuda:1 GPU-77a01b2c)"
//   "link 0->1: mpi_staged (same GPU GPU-8f1c2d3e)"
// The same on every rank; the caller prints it on rank 0.
struct TransportPlan {
  std::string kind;                // "nccl" | "mpi_staged"
  std::vector<std::string> links;  // empty with one rank
};
// For a request "nccl" | "mpi_staged" | "auto" (auto: mpi_staged when any two
// ranks share a GPU, or with one rank; else nccl). Collective. Throws
// InputError for an unknown name, or for "nccl" when ranks share a GPU (the
// message names them).
TransportPlan plan_transport(const std::string& requested, const DeviceInfo& info,
                             MPI_Comm comm);
// plan_transport(...).kind.
std::string resolve_transport(const std::string& requested, const DeviceInfo& info,
                              MPI_Comm comm);
// plan_transport, then the matching factory; the plan goes to *plan when given.
// Collective.
std::unique_ptr<Transport> make_transport(const std::string& requested, MPI_Comm comm,
                                          const DeviceInfo& info, double timeout_s,
                                          TransportPlan* plan = nullptr);

// The data-parallel replica group of this rank's stages (grad_reducer.hpp):
// one NCCL communicator over `replicas` (and one split from it for the
// all-gathers), bootstrapped by MPI and connected before it returns; buckets
// on the GPU. An operation pending after timeout_s, or an asynchronous NCCL
// error, aborts the communicators and throws (TimeoutError / Error) naming
// it; the group is destroyed with ncclCommAbort while anything is in flight.
// Collective over `replicas`.
std::unique_ptr<ReplicaGroup> make_nccl_replica_group(MPI_Comm replicas, double timeout_s);

// ---- memory ----

// Live and peak bytes of Device::CUDA tensors per MemCategory (this process),
// plus what the caching allocator holds from cudaMalloc.
MemoryStats device_memory_stats();
size_t device_bytes_reserved();
void reset_device_memory_peaks();
// Bytes free on this rank's device now, cudaMemGetInfo's (0 when it fails),
// for the memory check before a run builds its stages (app/memory_check.hpp).
double device_free_memory_bytes();
// Returns cached, unused device blocks to the driver: all of them (before a
// rebalancing move), or those no allocation reused since the previous trim
// (at step boundaries). Both synchronise the device, under a DeadlineScope,
// when there is anything to free: call them where no NCCL transfer is
// pending. An allocation cudaMalloc refuses does the same (release, then
// one retry) before it fails with an Error naming the rank and the bytes
// requested, in use, cached and released.
void release_cached_device_memory();
void trim_cached_device_memory();

// ---- versions ----

// Versions as CUDA encodes them (13000 = 13.0): the runtime pipetrain was
// built with, the newest CUDA the installed driver supports (0: no driver),
// cuBLAS and NCCL (NCCL: 22805 = 2.28.5).
struct Versions {
  int runtime = 0, driver = 0, cublas = 0, nccl = 0;
  // "CUDA runtime 13.0, driver supports CUDA 12.4 (too old for this runtime), cuBLAS 13.0.0, NCCL 2.28.5"
  std::string describe() const;
  bool driver_supports_runtime() const { return driver >= runtime && driver > 0; }
};
Versions versions();  // no device needed

}  // namespace pt::cuda
