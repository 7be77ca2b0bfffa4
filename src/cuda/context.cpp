// context.cpp: creation of the per-process CUDA context and the
// synchronisation helpers shared by backend and transports.
#include "context.hpp"

#include <mutex>
#include <string>

#include "check.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

Context* g_context = nullptr;  // never destroyed: streams must outlive static tensors
std::mutex g_context_mutex;
thread_local int t_current_device = -1;

void make_current(int device) {
  if (t_current_device == device) return;
  CUDA_CHECK(cudaSetDevice(device));
  t_current_device = device;
}

}  // namespace

void create_context(int device) {
  std::lock_guard<std::mutex> lock(g_context_mutex);
  if (g_context != nullptr) {
    PT_CHECK(g_context->device == device,
             "CUDA context already on device " + std::to_string(g_context->device) +
                 ", asked for " + std::to_string(device));
    return;
  }
  make_current(device);
  auto* ctx = new Context();
  ctx->device = device;
  CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&ctx->cublas));
  CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->compute));
  void* word = nullptr;
  CUDA_CHECK(cudaHostAlloc(&word, sizeof(unsigned), cudaHostAllocMapped));
  ctx->error_host = static_cast<volatile unsigned*>(word);
  *ctx->error_host = 0;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ctx->error_word), word, 0));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ctx->readback), 64 * sizeof(double)));
  g_context = ctx;
  install_memory_hooks();
}

bool context_ready() { return g_context != nullptr; }

Context& context() {
  PT_CHECK(g_context != nullptr,
           "CUDA not initialised: call pt::cuda::select_device (or init_device) first");
  make_current(g_context->device);
  return *g_context;
}

// Bounded: the compute stream may wait on the device for a receive the
// executor ordered on it (PendingTransfer::order_before_compute), and a
// peer that never sends would otherwise hold this wait forever.
void wait_for_stream(cudaStream_t stream, const char* what) {
  DeadlineScope deadline(std::string("the wait for a GPU stream (") + what +
                         "; it may be held by a receive from a peer that never sent)");
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void wait_for_compute_stream(const char* what) { wait_for_stream(context().compute, what); }

bool event_completed(cudaEvent_t event) {
  const cudaError_t q = cudaEventQuery(event);
  if (q == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(q);
  return true;
}

void sync_and_check() {
  Context& ctx = context();
  wait_for_compute_stream("a synchronisation, a host copy or a reduction's result");
  const unsigned bits = *ctx.error_host;
  if (bits == 0) return;
  *ctx.error_host = 0;
  std::string what;
  if (bits & kBadToken) what += "a token id outside [0, vocab_size) in the embedding; ";
  if (bits & kBadLabel) what += "a label outside [0, classes) in the cross-entropy; ";
  PT_FAIL("CUDA kernels met invalid input: " + what.substr(0, what.size() - 2));
}

void synchronize() { sync_and_check(); }

}  // namespace pt::cuda
