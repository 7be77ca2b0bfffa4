// gemm_epilogue.cpp: cuBLASLt matmuls with a bias or bias + GELU epilogue
// for the Linear layers' forward, and with GELU's backward (DGELU) for the
// input gradient of a Linear layer fed by a GELU (gemm_epilogue.hpp).
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
// The input gradient dx (rows, in) = dy (rows, out) w (out, in) is,
// column-major, dx^T (in, rows) = A B with A = w (in x out, ld in) and
// B = dy^T (out x rows, ld out), no transposes. DGELU multiplies each
// accumulator by GELU' of the auxiliary matrix (the GELU's input, in x rows,
// ld in: a multiple of 8) and writes the product to D.
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
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, int, int>, Choice> choices;
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

// One cuBLASLt call, column-major: D (m x n, ld m) = op(A) op(B), with its
// epilogue's bias (along D's rows) and auxiliary matrix (m x n, ld m).
struct LtCall {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  Operand a, b;  // packed: ld = their stored row count
  float* d = nullptr;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  const float* aux = nullptr;
};

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

void describe(const LtCall& c, Precision p, Descriptors& ds) {
  const cublasComputeType_t compute =
      p == Precision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, c.ta);
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, c.tb);
  set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
  if (c.bias) {
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  }
  if (c.aux) {
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, const_cast<void*>(static_cast<const void*>(c.aux)));
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.m);
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_32F);
  }
  const bool a_n = c.ta == CUBLAS_OP_N, b_n = c.tb == CUBLAS_OP_N;
  const int64_t a_rows = a_n ? c.m : c.k, a_cols = a_n ? c.k : c.m;
  const int64_t b_rows = b_n ? c.k : c.n, b_cols = b_n ? c.n : c.k;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.a, c.a.type, a_rows, a_cols, a_rows));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.b, c.b.type, b_rows, b_cols, b_rows));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.d, CUDA_R_32F, c.m, c.n, c.m));
}

// The cached algorithm for c's shape, asking the heuristic the first time.
const LtState::Choice& choose(LtState& lt, const LtCall& c, Precision p, const Descriptors& ds) {
  const auto key = std::make_tuple(c.m, c.n, c.k, static_cast<int>(c.a.type), static_cast<int>(p),
                                   static_cast<int>(c.epilogue), static_cast<int>(c.ta));
  auto it = lt.choices.find(key);
  if (it != lt.choices.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t bytes = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
  // Algorithms valid for any 16-byte aligned matrices (the callers check
  // the pointers), so one choice serves every call of the shape.
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

// Runs `c` when `fusable` and cuBLASLt has an algorithm for it, after
// `make_operands` has set its operands (c's a and b until then: the in-place
// pointers, or null for casts still to be made); false otherwise, with
// nothing run. The caller holds g_lt_mutex.
bool run_lt_call(LtCall c, bool fusable, Precision p, const std::function<void(LtCall&)>& make_operands) {
  LtState& lt = lt_state();
  if (!fusable || c.n <= 0) return false;
  Descriptors ds;  // of the shape, types and epilogue: the operands' pointers do not enter
  describe(c, p, ds);
  const LtState::Choice& choice = choose(lt, c, p, ds);
  if (!choice.found) return false;
  make_operands(c);
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(lt.handle, ds.op, &alpha, c.a.ptr, ds.a, c.b.ptr, ds.b, &beta, c.d,
                              ds.d, c.d, ds.d, &choice.algo, lt.workspace, kWorkspaceBytes,
                              context().compute));
  return true;
}

}  // namespace

bool run_linear_epilogue(LinearEpilogue e, Precision p,
                         const std::function<void(LinearEpilogue&)>& make_operands) {
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  // D = y^T (out x rows) = op(A) B: A = w (in x out, transposed), B = x (in x rows).
  LtCall c;
  c.ta = CUBLAS_OP_T;
  c.m = e.out;
  c.n = e.rows;
  c.k = e.in;
  c.a = e.w;
  c.b = e.x;
  c.bias = e.bias;
  if (e.gelu) {
    c.epilogue = e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    c.aux = e.y;  // GELU's input, written by the epilogue
    c.d = e.gelu;
  } else {
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    c.d = e.y;
  }
  const bool fusable = (e.bias || e.gelu) && (!e.gelu || e.out % 8 == 0) &&
                       e.x.type == e.w.type && aligned(e.x.ptr) && aligned(e.w.ptr) &&
                       aligned(e.bias) && aligned(e.y) && aligned(e.gelu);
  const bool ran = run_lt_call(c, fusable, p, [&](LtCall& call) {
    make_operands(e);
    call.a = e.w;
    call.b = e.x;
  });
  if (!ran) {
    ++g_counts.unfused;
    return false;
  }
  ++g_counts.fused;
  Gemm g;  // the row-major matmul(x, w^T) it replaces, for the benchmarks' recording
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
  record_gemm(g);
  return true;
}

bool run_gelu_input_grad_epilogue(GeluInputGradEpilogue e, Precision p,
                                  const std::function<void(GeluInputGradEpilogue&)>& make_operands) {
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  // D = dx^T (in x rows) = A B: A = w (in x out), B = dy^T (out x rows).
  LtCall c;
  c.m = e.in;
  c.n = e.rows;
  c.k = e.out;
  c.a = e.w;
  c.b = e.dy;
  c.d = e.dx;
  c.epilogue = CUBLASLT_EPILOGUE_DGELU;
  c.aux = e.gelu_input;
  const bool fusable = e.in % 8 == 0 && e.dy.type == e.w.type && aligned(e.dy.ptr) &&
                       aligned(e.w.ptr) && aligned(e.gelu_input) && aligned(e.dx);
  const bool ran = run_lt_call(c, fusable, p, [&](LtCall& call) {
    make_operands(e);
    call.a = e.w;
    call.b = e.dy;
  });
  if (!ran) {
    ++g_counts.dgelu_unfused;
    return false;
  }
  ++g_counts.dgelu_fused;
  Gemm g;  // the row-major matmul(dy, w) it replaces, for the benchmarks' recording
  g.m = e.rows;
  g.n = e.in;
  g.k = e.out;
  g.a = e.dy;
  g.lda = e.out;
  g.b = e.w;
  g.ldb = e.in;
  g.c = e.dx;
  g.ldc = e.in;
  record_gemm(g);
  return true;
}

LinearEpilogueCounts linear_epilogue_counts() {
  std::lock_guard<std::mutex> lock(g_lt_mutex);
  return g_counts;
}

}  // namespace pt::cuda
