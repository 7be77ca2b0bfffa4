// fused_attention.cpp: fused causal attention of the CUDA backend through
// cuDNN's scaled-dot-product attention (SDPA), built with the cuDNN
// frontend's graph API (model.attention = "fused", #42; docs/cuda.md).
//
// Activations stay fp32 in memory, as everywhere in the backend; each call
// casts its inputs to bf16 (qkv, and for backward y and dy), runs one cuDNN
// graph and casts the bf16 outputs back to fp32 (exactly). Q, K and V are
// read with strides straight out of the packed bf16 qkv (mb, T, 3C): head h
// of a third at column offset h * D, rows 3C apart; O is written as
// (mb, T, C) and dQ, dK, dV into a packed (mb, T, 3C) like qkv. Statistics
// (each row's log-sum-exp, fp32) are written straight into the caller's
// tensor. Backward reads O's bf16 from the block's bf16 copy of y
// (activation copies), or rebuilds it from fp32 y, which holds it exactly.
// Graphs are built once per shape (mb, T, H, D) and direction and cached;
// backward uses cuDNN's deterministic algorithm, so a run repeats bit for
// bit. Everything runs on the compute stream (the cuDNN handle is bound to
// it); workspaces come from the backend's caching allocator. Every cuDNN
// call goes through CUDNN_CHECK.
#include "fused_attention.hpp"

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "../tensor/attention_dims.hpp"
#include "check.hpp"
#include "context.hpp"
#include "cudnn_frontend_check.hpp"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace pt::cuda {

namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Graph = fe::graph::Graph;
using VariantPack = std::unordered_map<int64_t, void*>;

constexpr int kMinComputeMajor = 8;  // cuDNN's fused attention: Ampere (sm_80) or newer
constexpr size_t kBf16Bytes = 2;

// The uids of the graphs' tensors, by which a variant pack names them.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// cuDNN's (mb, H, T, D) views of the tensors, strides in elements.
struct Layout {
  std::vector<int64_t> heads;          // (mb, H, T, D)
  std::vector<int64_t> packed;         // one third of qkv (mb, T, 3C): rows 3C apart
  std::vector<int64_t> out;            // y (mb, T, C): rows C apart
  std::vector<int64_t> stats_dims;     // (mb, H, T, 1)
  std::vector<int64_t> stats_strides;  // contiguous (mb, H, T)
};

Layout layout_of(const AttnDims& d) {
  return {{d.mb, d.H, d.T, d.D},
          {d.T * 3 * d.C, d.D, 3 * d.C, 1},
          {d.T * d.C, d.D, d.C, 1},
          {d.mb, d.H, d.T, 1},
          {d.H * d.T, d.T, 1, 1}};
}

// A graph whose inputs and outputs are bf16, with fp32 intermediates and math.
std::shared_ptr<Graph> new_graph() {
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// A bf16 input of the graph.
TensorAttr input(Graph& g, const char* name, Uid uid, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& strides) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

TensorAttr stats_input(Graph& g, const Layout& l) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("Stats")
                      .set_uid(kStats)
                      .set_dim(l.stats_dims)
                      .set_stride(l.stats_strides)
                      .set_data_type(fe::DataType_t::FLOAT));
}

void set_output(const TensorAttr& t, Uid uid, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides) {
  t->set_output(true).set_uid(uid).set_dim(dims).set_stride(strides);
}

// Validates `g`, lowers it to cuDNN's backend and builds the plan cuDNN's
// heuristics rank first.
void build(Graph& g, cudnnHandle_t handle) {
  CUDNN_CHECK(g.validate());
  CUDNN_CHECK(g.build_operation_graph(handle));
  CUDNN_CHECK(g.create_execution_plans({fe::HeurMode_t::A}));
  CUDNN_CHECK(g.check_support());
  CUDNN_CHECK(g.build_plans());
}

// O (mb, T, C) and Stats (mb, H, T) from Q, K, V in the packed qkv.
std::shared_ptr<Graph> forward_graph(const AttnDims& d, cudnnHandle_t handle) {
  const Layout l = layout_of(d);
  std::shared_ptr<Graph> g = new_graph();
  TensorAttr q = input(*g, "Q", kQ, l.heads, l.packed);
  TensorAttr k = input(*g, "K", kK, l.heads, l.packed);
  TensorAttr v = input(*g, "V", kV, l.heads, l.packed);
  fe::graph::SDPA_attributes options;
  options.set_name("pipetrain_attention")
      .set_generate_stats(true)
      .set_attn_scale(d.scale)
      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)  // causal:
      .set_diagonal_band_right_bound(0);                          // key j <= query i
  std::array<TensorAttr, 2> outputs = g->sdpa(q, k, v, options);  // O, Stats
  set_output(outputs[0], kO, l.heads, l.out);
  set_output(outputs[1], kStats, l.stats_dims, l.stats_strides);
  outputs[1]->set_data_type(fe::DataType_t::FLOAT);
  build(*g, handle);
  return g;
}

// dQ, dK, dV into a packed (mb, T, 3C) from Q, K, V, O, dO and Stats.
std::shared_ptr<Graph> backward_graph(const AttnDims& d, cudnnHandle_t handle) {
  const Layout l = layout_of(d);
  std::shared_ptr<Graph> g = new_graph();
  TensorAttr q = input(*g, "Q", kQ, l.heads, l.packed);
  TensorAttr k = input(*g, "K", kK, l.heads, l.packed);
  TensorAttr v = input(*g, "V", kV, l.heads, l.packed);
  TensorAttr o = input(*g, "O", kO, l.heads, l.out);
  TensorAttr d_o = input(*g, "dO", kDO, l.heads, l.out);
  TensorAttr stats = stats_input(*g, l);
  fe::graph::SDPA_backward_attributes options;
  options.set_name("pipetrain_attention_backward")
      .set_attn_scale(d.scale)
      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
      .set_diagonal_band_right_bound(0)
      .set_deterministic_algorithm(true);  // no atomics: the same bits every run
  std::array<TensorAttr, 3> grads = g->sdpa_backward(q, k, v, o, d_o, stats, options);
  set_output(grads[0], kDQ, l.heads, l.packed);
  set_output(grads[1], kDK, l.heads, l.packed);
  set_output(grads[2], kDV, l.heads, l.packed);
  build(*g, handle);
  return g;
}

// x (n fp32 elements) cast to bf16, in a new buffer, on `stream`.
DeviceBuffer to_bf16(const Tensor& x, cudaStream_t stream) {
  DeviceBuffer out(static_cast<size_t>(x.numel()) * kBf16Bytes);
  kern::cast_to_half(x.f32(), out.get(), x.numel(), true, stream);
  return out;
}

// The start of third `which` (0 Q, 1 K, 2 V) of a packed bf16 (mb, T, 3C).
void* third(const DeviceBuffer& packed, const AttnDims& d, int which) {
  return static_cast<char*>(packed.get()) + static_cast<size_t>(which * d.C) * kBf16Bytes;
}

class CudnnFusedAttention final : public FusedAttentionKernels {
 public:
  CudnnFusedAttention() : ctx_(context()), handle_(ctx_.compute) {}

 protected:
  void do_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) override {
    check_on_gpu({&qkv, &y, &stats}, "fused attention");
    const AttnDims d = attn_dims(qkv, heads);
    DeviceBuffer qkv16 = to_bf16(qkv, stream());
    DeviceBuffer y16(static_cast<size_t>(y.numel()) * kBf16Bytes);  // (mb, T, C)
    VariantPack pack = {{kQ, third(qkv16, d, 0)}, {kK, third(qkv16, d, 1)},
                        {kV, third(qkv16, d, 2)}, {kO, y16.get()},
                        {kStats, stats.f32()}};
    execute(plan(d, false), pack);
    kern::bf16_to_float(y16.get(), y.f32(), y.numel(), stream());
  }

  void do_backward(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                   int64_t heads, Tensor& dqkv) override {
    check_on_gpu({&qkv, &y, &stats, &dy, &dqkv}, "fused attention backward");
    const AttnDims d = attn_dims(qkv, heads);
    DeviceBuffer qkv16 = to_bf16(qkv, stream());
    // Forward's bf16 O: the kept copy as it is (activation copies), or cast
    // back from fp32 y, which holds it exactly.
    PT_CHECK(y.dtype() == DType::F32 || y.dtype() == DType::BF16,
             std::string("fused attention backward: y is ") + dtype_name(y.dtype()) +
                 ", not f32 or bf16");
    DeviceBuffer y16;
    if (y.dtype() == DType::F32) y16 = to_bf16(y, stream());
    void* o = y.dtype() == DType::BF16 ? const_cast<void*>(y.raw()) : y16.get();
    DeviceBuffer dy16 = to_bf16(dy, stream());
    DeviceBuffer dqkv16(static_cast<size_t>(dqkv.numel()) * kBf16Bytes);  // (mb, T, 3C)
    VariantPack pack = {{kQ, third(qkv16, d, 0)},  {kK, third(qkv16, d, 1)},
                        {kV, third(qkv16, d, 2)},  {kO, o},
                        {kDO, dy16.get()},         {kStats, const_cast<float*>(stats.f32())},
                        {kDQ, third(dqkv16, d, 0)}, {kDK, third(dqkv16, d, 1)},
                        {kDV, third(dqkv16, d, 2)}};
    execute(plan(d, true), pack);
    kern::bf16_to_float(dqkv16.get(), dqkv.f32(), dqkv.numel(), stream());
  }

 private:
  // A built graph and the workspace its plan needs.
  struct Plan {
    std::shared_ptr<Graph> graph;
    int64_t workspace_bytes = 0;
  };
  // Plans are cached by shape and direction.
  struct Key {
    int64_t mb, T, H, D;
    bool backward;
    bool operator<(const Key& o) const {
      return std::tie(mb, T, H, D, backward) < std::tie(o.mb, o.T, o.H, o.D, o.backward);
    }
  };

  cudaStream_t stream() const { return ctx_.compute; }

  // The cuDNN handle, made on first use and bound to the compute stream.
  cudnnHandle_t handle() { return handle_.get(); }

  const Plan& plan(const AttnDims& d, bool backward) {
    const Key key{d.mb, d.T, d.H, d.D, backward};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    p.graph = backward ? backward_graph(d, handle()) : forward_graph(d, handle());
    CUDNN_CHECK(p.graph->get_workspace_size(p.workspace_bytes));
    return plans_.emplace(key, std::move(p)).first->second;
  }

  void execute(const Plan& p, VariantPack& pack) {
    DeviceBuffer workspace;
    if (p.workspace_bytes > 0) workspace = DeviceBuffer(static_cast<size_t>(p.workspace_bytes));
    CUDNN_CHECK(p.graph->execute(handle(), pack, workspace.get()));
  }

  Context& ctx_;
  CudnnHandle handle_;
  std::map<Key, Plan> plans_;
};

}  // namespace

std::unique_ptr<FusedAttentionKernels> make_fused_attention(Precision precision) {
  if (precision != Precision::Bf16) return nullptr;
  Context& ctx = context();
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device));
  if (major < kMinComputeMajor) return nullptr;
  return std::make_unique<CudnnFusedAttention>();
}

}  // namespace pt::cuda
