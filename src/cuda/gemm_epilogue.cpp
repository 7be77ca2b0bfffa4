// gemm_epilogue.cpp: cuBLASLt matmuls with a bias or bias + GELU epilogue
// for the Linear layers' forward (gemm_epilogue.hpp).
//
// Row-major y (rows, out) = x (rows, in) w^T is, column-major, y^T (out,
// rows) = op(A) B: w row-major (out, in) is column-major (in, out),
// so op(A) = A^T with A = w (in x out, ld in); x row-major (rows, in) is
// column-major (in, rows), op(B) = B; D = y^T (out x rows, ld out). The
// epilogue's bias runs along D's rows, that is y's columns: the out
// features. GELU_AUX(_BIAS) writes GELU(acc + bias) to D and acc + bias to
// the auxiliary matrix, whose leading dimension must be a multiple of 8.
// Accumulation and outputs are fp32 in every precision, as in gemm.cpp;
// GELU is cuBLASLt's tanh form, the function the CPU computes, rounded its
// own way (the GPU test's tolerance).
//
// Determinism: one algorithm per shape, chosen by the heuristic at its
// first use and cached, one stream; every reduction scheme cuBLASLt may
// pick for it orders its partial sums (in-place with counters, or in the
// workspace then reduced), so a shape's results do not vary between calls.
#include "gemm_epilogue.hpp"

#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "check.hpp"
#include "context.hpp"
#include "device_memory.hpp"

namespace pt::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's scratch for split-K and the like
constexpr uint32_t kAlignment = 16;                   // bytes, of every matrix and vector

bool aligned(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % kAlignment == 0;
}

struct LtState {
  cublasLtHandle_t handle = nullptr;
  // kWorkspaceBytes of device memory for the process's life, outside
  // pipetrain's memory counts like cuBLAS's own workspace (docs/cuda.md).
  void* workspace = nullptr;
  // An algorithm per shape, types and epilogue; absent: not asked yet;
  // `found` false: cuBLASLt has none (fall back).
  struct Choice {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, int>, Choice> choices;
};

std::mutex g_lt_mutex;           // guards the state and the counts
LinearEpilogueCounts g_counts;

LtState& lt_state() {
  static LtState* state = [] {
    auto* s = new LtState();  // kept to the end of the process, as the context is
    CUBLAS_CHECK(cublasLtCreate(&s->handle));
    CUDA_CHECK(cudaMalloc(&s->workspace, kWorkspaceBytes));
    return s;
  }();
  return *state;
}

cublasLtEpilogue_t epilogue_of(const LinearEpilogue& e) {
  if (e.gelu) return e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  return CUBLASLT_EPILOGUE_BIAS;
}

template <class T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// The descriptors of one call; destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Descriptors() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void describe(const LinearEpilogue& e, Precision p, Descriptors& ds) {
  const cublasComputeType_t compute =
      p == Precision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(e));
  if (e.bias) {
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  }
  if (e.gelu) {
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(e.y));
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, e.out);
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_32F);
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.a, e.w.type, e.in, e.out, e.in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.b, e.x.type, e.in, e.rows, e.in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.d, CUDA_R_32F, e.out, e.rows, e.out));
}

// The cached algorithm for e's shape, asking the heuristic the first time.
const LtState::Choice& choose(LtState& lt, const LinearEpilogue& e, Precision p,
                              const Descriptors& ds) {
  const auto key = std::make_tuple(e.rows, e.in, e.out, static_cast<int>(e.x.type),
                                   static_cast<int>(p), static_cast<int>(epilogue_of(e)));
  auto it = lt.choices.find(key);
  if (it != lt.choices.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t bytes = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
  // Algorithms valid for any 16-byte aligned matrices (run_linear_epilogue
  // checks the pointers), so one choice serves every call of the shape.
  const uint32_t align = kAlignment;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt.handle, ds.op, ds.a, ds.b, ds.d, ds.d, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  LtState::Choice choice;
  choice.found = status == CUBLAS_STATUS_SUCCESS && count > 0;
  if (choice.found) choice.algo = result.algo;
  return lt.choices.emplace(key, choice).first->second;
}

// e's GEMM as the row-major matmul(x, w^T) it replaces, for the benchmarks'
// GEMM recording (replayed there without its epilogue).
Gemm as_gemm(const LinearEpilogue& e) {
  Gemm g;
  g.tb = true;
  g.m = e.rows;
  g.n = e.out;
  g.k = e.in;
  g.a = e.x;
  g.lda = e.in;
  g.b = e.w;
  g.ldb = e.in;
  g.c = e.y;
  g.ldc = e.out;
  return g;
}

}  // namespace

bool run_linear_epilogue(LinearEpilogue e, Precision p,
                         const std::function<void(LinearEpilogue&)>& make_operands) {
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  LtState& lt = lt_state();
  const bool fusable = (e.bias || e.gelu) && e.rows > 0 && (!e.gelu || e.out % 8 == 0) &&
                       e.x.type == e.w.type && aligned(e.x.ptr) && aligned(e.w.ptr) &&
                       aligned(e.bias) && aligned(e.y) && aligned(e.gelu);
  Descriptors ds;  // of the shape, types and epilogue: the operands' pointers do not enter
  const LtState::Choice* choice = nullptr;
  if (fusable) {
    describe(e, p, ds);
    const LtState::Choice& c = choose(lt, e, p, ds);
    if (c.found) choice = &c;
  }
  if (choice == nullptr) {
    ++g_counts.unfused;
    return false;
  }
  make_operands(e);
  const float alpha = 1.f, beta = 0.f;
  float* d = e.gelu ? e.gelu : e.y;
  CUBLAS_CHECK(cublasLtMatmul(lt.handle, ds.op, &alpha, e.w.ptr, ds.a, e.x.ptr, ds.b, &beta, d,
                              ds.d, d, ds.d, &choice->algo, lt.workspace, kWorkspaceBytes,
                              context().compute));
  ++g_counts.fused;
  record_gemm(as_gemm(e));
  return true;
}

LinearEpilogueCounts linear_epilogue_counts() {
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  return g_counts;
}

}  // namespace pt::cuda
