// cpu_kernels_conv.cpp: the convolution kernel group of the CPU backend
// (conv_kernels.hpp), called with checked shapes.
//
// Convolution and pooling run on oneDNN's primitives (direct convolution,
// never Winograd, so every output is a plain sum of products), on the
// tensors in place: plain NCHW / OIHW memory descriptors, no reorders.
// Primitives are created once per shape and kept per thread, as the GEMM's
// matmul primitives are (cpu_gemm.cpp). oneDNN's CPU primitives split their
// work by the OpenMP thread count only, so a fixed training.blas_threads
// gives bitwise the same results call after call (tests/test_conv_layers.cpp
// checks it for each kernel).
//
// The normalisations are loops: oneDNN 2.6 has no group normalisation, and
// loops let group and batch normalisation share one code path whose
// statistics are accumulated in double in a fixed order, independent of
// the thread count. Every output is evaluated in double and rounded once.
#include "cpu_kernels_conv.hpp"

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "pipetrain/base/error.hpp"

namespace pt::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

memory::desc plain(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}
memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }

// oneDNN's exceptions become pt::Error naming the kernel and the shapes.
[[noreturn]] void onednn_failed(const char* kernel, const dnnl::error& e, const Shape& x,
                                const Shape& other) {
  PT_FAIL(std::string("oneDNN ") + kernel + " failed (" + e.what() + ") for " +
          shape_string(x) + " and " + shape_string(other));
}

// The primitives of one convolution shape: forward, backward data and
// backward weights, the last two made when first used.
struct ConvPrimitives {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  std::unique_ptr<dnnl::convolution_backward_data> bwd_data;
  std::unique_ptr<dnnl::convolution_backward_weights> bwd_weights;
  memory::desc x, w, b, y;  // (N, Cin, H, W), (Cout, Cin, K, K), (Cout), (N, Cout, OH, OW)
  memory::dims strides, pad;
};

// The primitives of one pooling shape and kind.
struct PoolPrimitives {
  dnnl::pooling_forward::primitive_desc fwd_pd;
  dnnl::pooling_forward fwd;
  std::unique_ptr<dnnl::pooling_backward> bwd;
  memory::desc x, y;
  memory::dims strides, kernel, pad;
  dnnl::algorithm algo;
};

// A pooling window on each axis: kernel, stride, padding.
struct Window {
  int64_t kh, kw, sh, sw, pad;
};

class CpuConvKernels final : public ConvKernels {
 protected:
  void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Conv2dGeometry g,
                         Tensor& y) override {
    ensure_blas_threads();
    try {
      ConvPrimitives& p = conv(x.shape(), w.shape(), g);
      unordered_args args{{DNNL_ARG_SRC, mem(p.x, x)}, {DNNL_ARG_WEIGHTS, mem(p.w, w)},
                               {DNNL_ARG_DST, mem(p.y, y)}};
      // Without a bias the primitive still has one: zeros (adding 0 is exact).
      Tensor zeros;
      if (!bias) {
        zeros = Tensor::zeros({w.dim(0)}, DType::F32, MemCategory::Workspace, Device::CPU);
        bias = &zeros;
      }
      args.insert({DNNL_ARG_BIAS, mem(p.b, *bias)});
      p.fwd.execute(cache().stream, args);
      cache().stream.wait();
    } catch (const dnnl::error& e) {
      onednn_failed("convolution forward", e, x.shape(), w.shape());
    }
  }

  void do_conv2d_backward_data(const Tensor& dy, const Tensor& w, Conv2dGeometry g,
                               Tensor& dx) override {
    ensure_blas_threads();
    try {
      ConvPrimitives& p = conv(dx.shape(), w.shape(), g);
      if (!p.bwd_data) {
        const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, p.x,
                                                      p.w, p.y, p.strides, p.pad, p.pad);
        p.bwd_data = std::make_unique<dnnl::convolution_backward_data>(
            dnnl::convolution_backward_data::primitive_desc(d, cache().engine, p.fwd_pd));
      }
      p.bwd_data->execute(cache().stream, {{DNNL_ARG_DIFF_DST, mem(p.y, dy)},
                                    {DNNL_ARG_WEIGHTS, mem(p.w, w)},
                                    {DNNL_ARG_DIFF_SRC, mem(p.x, dx)}});
      cache().stream.wait();
    } catch (const dnnl::error& e) {
      onednn_failed("convolution backward data", e, dx.shape(), w.shape());
    }
  }

  // The primitive overwrites its outputs, so it writes scratch tensors that
  // are then added in index order.
  void do_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Conv2dGeometry g, Tensor& dw,
                                  Tensor* dbias) override {
    ensure_blas_threads();
    Tensor w_grad = Tensor::empty(dw.shape(), DType::F32, MemCategory::Workspace, Device::CPU);  // (Cout, Cin, K, K)
    Tensor b_grad = Tensor::empty({dw.dim(0)}, DType::F32, MemCategory::Workspace, Device::CPU);  // (Cout)
    try {
      ConvPrimitives& p = conv(x.shape(), dw.shape(), g);
      if (!p.bwd_weights) {
        const dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct,
                                                         p.x, p.w, p.b, p.y, p.strides, p.pad,
                                                         p.pad);
        p.bwd_weights = std::make_unique<dnnl::convolution_backward_weights>(
            dnnl::convolution_backward_weights::primitive_desc(d, cache().engine, p.fwd_pd));
      }
      p.bwd_weights->execute(cache().stream, {{DNNL_ARG_SRC, mem(p.x, x)},
                                       {DNNL_ARG_DIFF_DST, mem(p.y, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, mem(p.w, w_grad)},
                                       {DNNL_ARG_DIFF_BIAS, mem(p.b, b_grad)}});
      cache().stream.wait();
    } catch (const dnnl::error& e) {
      onednn_failed("convolution backward weights", e, x.shape(), dw.shape());
    }
    add_into(w_grad, dw);
    if (dbias) add_into(b_grad, *dbias);
  }

  int64_t do_pool2d_workspace_numel(const Shape& x, Pool2dGeometry g) override {
    if (g.kind != PoolKind::Max) return 0;
    try {
      const size_t bytes = pool(x, window(g), algorithm(g.kind)).fwd_pd.workspace_desc().get_size();
      return static_cast<int64_t>((bytes + sizeof(int32_t) - 1) / sizeof(int32_t));
    } catch (const dnnl::error& e) {
      onednn_failed("pooling workspace", e, x, {g.kernel, g.stride, g.pad});
    }
  }

  void do_pool2d_forward(const Tensor& x, Pool2dGeometry g, Tensor& y,
                         Tensor* workspace) override {
    pool_forward(x, window(g), algorithm(g.kind), y, g.kind == PoolKind::Max ? workspace : nullptr);
  }

  void do_pool2d_backward(const Tensor& dy, Pool2dGeometry g, const Tensor* workspace,
                          Tensor& dx) override {
    pool_backward(dy, window(g), algorithm(g.kind),
                  g.kind == PoolKind::Max ? workspace : nullptr, dx);
  }

  // Average pooling whose one window is the whole image.
  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    Tensor y4 = y.reshaped({x.dim(0), x.dim(1), 1, 1});
    pool_forward(x, whole_image(x.shape()), dnnl::algorithm::pooling_avg_exclude_padding, y4,
                 nullptr);
  }

  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    const Tensor dy4 = dy.reshaped({dx.dim(0), dx.dim(1), 1, 1});
    pool_backward(dy4, whole_image(dx.shape()), dnnl::algorithm::pooling_avg_exclude_padding,
                  nullptr, dx);
  }

  void do_image_to_tokens(const Tensor& x, Tensor& y) override {
    transpose_images(x.f32(), y.f32(), x.dim(0), x.dim(1), x.dim(2) * x.dim(3));
  }

  void do_tokens_to_image(const Tensor& x, Tensor& y) override {
    transpose_images(x.f32(), y.f32(), y.dim(0), y.dim(2) * y.dim(3), y.dim(1));
  }

  void do_group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             int64_t groups, float eps, Tensor& y, Tensor& mean,
                             Tensor& rstd) override {
    norm_forward(group_norm_groups(x.shape(), groups), x, gamma, beta, eps, y, mean, rstd,
                 nullptr);
  }

  void do_group_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, int64_t groups, const Tensor& dy, Tensor& dx,
                              Tensor& dgamma, Tensor& dbeta) override {
    norm_backward(group_norm_groups(x.shape(), groups), x, gamma, mean, rstd, dy, dx, dgamma,
                  dbeta);
  }

  void do_batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                             Tensor& y, Tensor& mean, Tensor& rstd, Tensor* var) override {
    norm_forward(batch_norm_groups(x.shape()), x, gamma, beta, eps, y, mean, rstd, var);
  }

  void do_batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps,
                               Tensor& y) override {
    const int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
    const float* px = x.f32();
    float* py = y.f32();
    for (int64_t c = 0; c < C; ++c) {
      const double mu = mean.f32()[c], g = gamma.f32()[c], b = beta.f32()[c];
      const double r = 1.0 / std::sqrt(static_cast<double>(var.f32()[c]) + eps);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t first = (n * C + c) * HW;
        for (int64_t i = first; i < first + HW; ++i)
          py[i] = static_cast<float>((px[i] - mu) * r * g + b);
      }
    }
  }

  void do_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override {
    norm_backward(batch_norm_groups(x.shape()), x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }

 private:
  // oneDNN's argument map (the C++ API's name is std::unordered_map<int, memory>).
  using unordered_args = std::unordered_map<int, memory>;

  memory mem(const memory::desc& d, const Tensor& t) {
    return memory(d, cache().engine, const_cast<void*>(t.raw()));
  }

  // Each of n images: out (cols, rows) = in (rows, cols) transposed.
  static void transpose_images(const float* in, float* out, int64_t n, int64_t rows,
                               int64_t cols) {
    const int64_t size = rows * cols;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[i * size + c * rows + r] = in[i * size + r * cols + c];
  }

  static void add_into(const Tensor& src, Tensor& dst) {
    const float* s = src.f32();
    float* d = dst.f32();
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
  }

  ConvPrimitives& conv(const Shape& x, const Shape& w, Conv2dGeometry g) {
    const std::array<int64_t, 10> key{x[0], x[1], x[2], x[3], w[0], w[2], w[3], g.stride, g.pad, 0};
    auto found = cache().conv.find(key);
    if (found != cache().conv.end()) return *found->second;
    auto p = std::make_unique<ConvPrimitives>();
    p->x = plain(dims_of(x), Tag::nchw);
    p->w = plain(dims_of(w), Tag::oihw);
    p->b = plain({w[0]}, Tag::a);
    p->y = plain(dims_of(conv2d_output_shape(x, w, g)), Tag::nchw);
    p->strides = {g.stride, g.stride};
    p->pad = {g.pad, g.pad};
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, p->x, p->w, p->b,
                                            p->y, p->strides, p->pad, p->pad);
    p->fwd_pd = dnnl::convolution_forward::primitive_desc(d, cache().engine);
    p->fwd = dnnl::convolution_forward(p->fwd_pd);
    return *cache().conv.emplace(key, std::move(p)).first->second;
  }

  static Window window(Pool2dGeometry g) { return {g.kernel, g.kernel, g.stride, g.stride, g.pad}; }
  static Window whole_image(const Shape& x) { return {x[2], x[3], x[2], x[3], 0}; }
  static dnnl::algorithm algorithm(PoolKind kind) {
    return kind == PoolKind::Max ? dnnl::algorithm::pooling_max
                                 : dnnl::algorithm::pooling_avg_exclude_padding;
  }

  PoolPrimitives& pool(const Shape& x, Window win, dnnl::algorithm algo) {
    const std::array<int64_t, 10> key{x[0], x[1], x[2], x[3], win.kh, win.kw, win.sh, win.sw,
                                      win.pad, static_cast<int64_t>(algo)};
    auto found = cache().pool.find(key);
    if (found != cache().pool.end()) return *found->second;
    auto p = std::make_unique<PoolPrimitives>();
    const int64_t oh = (x[2] + 2 * win.pad - win.kh) / win.sh + 1;
    const int64_t ow = (x[3] + 2 * win.pad - win.kw) / win.sw + 1;
    p->x = plain(dims_of(x), Tag::nchw);
    p->y = plain({x[0], x[1], oh, ow}, Tag::nchw);
    p->strides = {win.sh, win.sw};
    p->kernel = {win.kh, win.kw};
    p->pad = {win.pad, win.pad};
    p->algo = algo;
    const dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training, algo, p->x, p->y,
                                        p->strides, p->kernel, p->pad, p->pad);
    p->fwd_pd = dnnl::pooling_forward::primitive_desc(d, cache().engine);
    p->fwd = dnnl::pooling_forward(p->fwd_pd);
    return *cache().pool.emplace(key, std::move(p)).first->second;
  }

  void pool_forward(const Tensor& x, Window win, dnnl::algorithm algo, Tensor& y,
                    Tensor* workspace) {
    ensure_blas_threads();
    try {
      PoolPrimitives& p = pool(x.shape(), win, algo);
      unordered_args args{{DNNL_ARG_SRC, mem(p.x, x)}, {DNNL_ARG_DST, mem(p.y, y)}};
      if (workspace) args.insert({DNNL_ARG_WORKSPACE, mem(p.fwd_pd.workspace_desc(), *workspace)});
      p.fwd.execute(cache().stream, args);
      cache().stream.wait();
    } catch (const dnnl::error& e) {
      onednn_failed("pooling forward", e, x.shape(), {win.kh, win.kw, win.sh, win.sw, win.pad});
    }
  }

  void pool_backward(const Tensor& dy, Window win, dnnl::algorithm algo,
                     const Tensor* workspace, Tensor& dx) {
    ensure_blas_threads();
    try {
      PoolPrimitives& p = pool(dx.shape(), win, algo);
      if (!p.bwd) {
        const dnnl::pooling_backward::desc d(algo, p.x, p.y, p.strides, p.kernel, p.pad, p.pad);
        p.bwd = std::make_unique<dnnl::pooling_backward>(
            dnnl::pooling_backward::primitive_desc(d, cache().engine, p.fwd_pd));
      }
      unordered_args args{{DNNL_ARG_DIFF_DST, mem(p.y, dy)}, {DNNL_ARG_DIFF_SRC, mem(p.x, dx)}};
      if (workspace) args.insert({DNNL_ARG_WORKSPACE, mem(p.fwd_pd.workspace_desc(), *workspace)});
      p.bwd->execute(cache().stream, args);
      cache().stream.wait();
    } catch (const dnnl::error& e) {
      onednn_failed("pooling backward", e, dx.shape(), {win.kh, win.kw, win.sh, win.sw, win.pad});
    }
  }

  // ---- normalisation: one code path for group and batch normalisation ----

  // The sets of elements normalised together, in x (N, C, H, W) with
  // HW = H W: set s holds `runs` runs of `run` consecutive elements, `gap`
  // apart, the first at first(s); element j of a run is in channel
  // (s % sets_per_image) * channels_per_set + j / HW.
  struct NormSets {
    int64_t count, sets_per_image, channels_per_set, HW, C, runs, run, gap;
    int64_t first(int64_t s) const {
      return (s / sets_per_image) * C * HW + (s % sets_per_image) * channels_per_set * HW;
    }
    int64_t channel(int64_t s, int64_t j) const {
      return (s % sets_per_image) * channels_per_set + j / HW;
    }
    double size() const { return static_cast<double>(runs * run); }
    // f(index into x, channel) for every element of set s, in memory order.
    template <class F>
    void visit(int64_t s, F&& f) const {
      const int64_t base = first(s);
      for (int64_t r = 0; r < runs; ++r)
        for (int64_t j = 0; j < run; ++j) f(base + r * gap + j, channel(s, j));
    }
  };

  // Group normalisation: set n * groups + g is group g of image n.
  static NormSets group_norm_groups(const Shape& x, int64_t groups) {
    const int64_t C = x[1], HW = x[2] * x[3], cg = C / groups;
    return {x[0] * groups, groups, cg, HW, C, 1, cg * HW, 0};
  }
  // Batch normalisation: set c is channel c of every image.
  static NormSets batch_norm_groups(const Shape& x) {
    const int64_t C = x[1], HW = x[2] * x[3];
    return {C, C, 1, HW, C, x[0], HW, C * HW};
  }

  static void norm_forward(const NormSets& sets, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, float eps, Tensor& y, Tensor& mean, Tensor& rstd,
                           Tensor* var) {
    const float* px = x.f32();
    const float* pg = gamma.f32();
    const float* pb = beta.f32();
    float* py = y.f32();
    for (int64_t s = 0; s < sets.count; ++s) {
      double sum = 0.0;
      sets.visit(s, [&](int64_t i, int64_t) { sum += px[i]; });
      const double mu = sum / sets.size();
      double sq = 0.0;
      sets.visit(s, [&](int64_t i, int64_t) { sq += (px[i] - mu) * (px[i] - mu); });
      const double variance = sq / sets.size();
      const double r = 1.0 / std::sqrt(variance + static_cast<double>(eps));
      sets.visit(s, [&](int64_t i, int64_t c) {
        py[i] = static_cast<float>((px[i] - mu) * r * pg[c] + pb[c]);
      });
      mean.f32()[s] = static_cast<float>(mu);
      rstd.f32()[s] = static_cast<float>(r);
      if (var) var->f32()[s] = static_cast<float>(variance);
    }
  }

  // With xhat = (x - mean) rstd and g = dy gamma over a set of n elements:
  // dx = rstd (g - mean(g) - xhat mean(g xhat)); dgamma[c] += sum dy xhat and
  // dbeta[c] += sum dy over channel c's elements, summed over every set
  // in double and added once.
  static void norm_backward(const NormSets& sets, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                            Tensor& dgamma, Tensor& dbeta) {
    const float* px = x.f32();
    const float* pg = gamma.f32();
    const float* pdy = dy.f32();
    float* pdx = dx.f32();
    std::vector<double> dg(static_cast<size_t>(sets.C), 0.0), db(dg);  // (C)
    for (int64_t s = 0; s < sets.count; ++s) {
      const double mu = mean.f32()[s], r = rstd.f32()[s];
      double g_sum = 0.0, gx_sum = 0.0;
      sets.visit(s, [&](int64_t i, int64_t c) {
        const double xhat = (px[i] - mu) * r, g = static_cast<double>(pdy[i]) * pg[c];
        g_sum += g;
        gx_sum += g * xhat;
        dg[static_cast<size_t>(c)] += static_cast<double>(pdy[i]) * xhat;
        db[static_cast<size_t>(c)] += pdy[i];
      });
      const double g_mean = g_sum / sets.size(), gx_mean = gx_sum / sets.size();
      sets.visit(s, [&](int64_t i, int64_t c) {
        const double xhat = (px[i] - mu) * r, g = static_cast<double>(pdy[i]) * pg[c];
        pdx[i] = static_cast<float>(r * (g - g_mean - xhat * gx_mean));
      });
    }
    for (int64_t c = 0; c < sets.C; ++c) {
      dgamma.f32()[c] = static_cast<float>(dgamma.f32()[c] + dg[static_cast<size_t>(c)]);
      dbeta.f32()[c] = static_cast<float>(dbeta.f32()[c] + db[static_cast<size_t>(c)]);
    }
  }

  // Each thread that computes keeps its own engine, stream and primitives.
  using Key = std::array<int64_t, 10>;
  struct Cache {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::map<Key, std::unique_ptr<ConvPrimitives>> conv;
    std::map<Key, std::unique_ptr<PoolPrimitives>> pool;
  };
  static Cache& cache() {
    thread_local Cache c;
    return c;
  }
};

}  // namespace

std::unique_ptr<ConvKernels> make_cpu_conv_kernels() { return std::make_unique<CpuConvKernels>(); }

}  // namespace pt::cpu
