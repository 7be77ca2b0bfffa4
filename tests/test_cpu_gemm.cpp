// test_cpu_gemm.cpp: cpu::sgemm on every CPU GEMM choice (auto, which sends
// wide weight gradients to OpenBLAS; onednn with its matmul primitive for
// A B^T; onednn-sgemm; openblas) against a double
// reference: every transpose pair, strided operands, alpha and beta, inner
// dimensions below and above the primitive's threshold. Prints the max
// relative difference; a repeated call must be bitwise equal.
#include <dnnl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "pipetrain/base/rng.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {
namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

// A row-major (rows, cols) matrix stored with a leading dimension of cols + 3.
struct Strided {
  int64_t rows, cols, ld;
  std::vector<float> data;  // (rows, ld)
  Strided(int64_t r, int64_t c, uint64_t seed) : rows(r), cols(c), ld(c + 3), data(r * (c + 3)) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = normal01(seed, 0, i);
  }
  double at(int64_t i, int64_t j) const { return data[i * ld + j]; }
};

// Max over C's elements of |C - ref| / (1 + the sum of the magnitudes of the
// terms ref adds up), the scale of float rounding; and whether the padding
// between rows was left alone and a repeated call gave the same bits.
double max_rel_error(const Case& c, CpuGemm gemm, bool* padding_kept, bool* repeatable) {
  set_cpu_gemm(gemm);
  const Strided a(c.ta ? c.k : c.m, c.ta ? c.m : c.k, 11);
  const Strided b(c.tb ? c.n : c.k, c.tb ? c.k : c.n, 12);
  const Strided c0(c.m, c.n, 13);
  Strided out = c0;
  cpu::sgemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data.data(), a.ld, b.data.data(), b.ld, c.beta,
             out.data.data(), out.ld);
  Strided again = c0;
  cpu::sgemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data.data(), a.ld, b.data.data(), b.ld, c.beta,
             again.data.data(), again.ld);
  *repeatable = out.data == again.data;
  *padding_kept = true;
  double worst = 0.0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = c.beta * c0.at(i, j);
      double scale = std::fabs(ref);
      for (int64_t p = 0; p < c.k; ++p) {
        const double term =
            c.alpha * (c.ta ? a.at(p, i) : a.at(i, p)) * (c.tb ? b.at(j, p) : b.at(p, j));
        ref += term;
        scale += std::fabs(term);
      }
      worst = std::max(worst, std::fabs(out.at(i, j) - ref) / (1.0 + scale));
    }
    for (int64_t j = c.n; j < out.ld; ++j)
      if (out.data[i * out.ld + j] != c0.data[i * c0.ld + j]) *padding_kept = false;
  }
  return worst;
}

TEST(CpuGemm, EveryChoiceMatchesADoubleReference) {
  const std::vector<Case> cases = {
      {false, true, 64, 96, 300, 1.f, 0.f},   // x W^T above the threshold: the matmul primitive
      {false, true, 17, 40, 256, 0.5f, 1.f},  // the primitive with alpha and an accumulating beta
      {false, true, 9, 33, 520, 1.f, 0.25f},
      {false, true, 64, 64, 24, 1.f, 0.f},    // Q K^T at a small head size: dnnl_sgemm
      {false, false, 31, 70, 300, 1.f, 1.f},
      {false, false, 64, 520, 512, 1.f, 0.f},  // a wide dY W: OpenBLAS under auto without AVX-512
      {true, false, 70, 50, 64, 1.f, 1.f},    // a weight gradient, accumulated
      {true, false, 512, 520, 64, 1.f, 1.f},  // a wide one: OpenBLAS under auto
      {true, false, 512, 512, 40, 1.f, 0.f},  // its first accumulation (beta = 0)
      {true, true, 20, 30, 270, 2.f, 0.f},
  };
  const std::vector<std::pair<CpuGemm, const char*>> choices = {
      {CpuGemm::Auto, "auto"}, {CpuGemm::OneDNN, "onednn"}, {CpuGemm::OneDNNSgemm, "onednn-sgemm"}, {CpuGemm::OpenBLAS, "openblas"}};
  for (const auto& [gemm, name] : choices) {
    for (const Case& c : cases) {
      bool padding_kept = false, repeatable = false;
      const double err = max_rel_error(c, gemm, &padding_kept, &repeatable);
      std::printf("  %-13s %c%c m=%3lld n=%3lld k=%3lld alpha %.2f beta %.2f: max rel diff %.2e\n",
                  name, c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', static_cast<long long>(c.m),
                  static_cast<long long>(c.n), static_cast<long long>(c.k), c.alpha, c.beta, err);
      EXPECT_LT(err, 1e-6) << name;
      EXPECT_TRUE(padding_kept) << name << ": wrote outside the (m, n) sub-matrix";
      EXPECT_TRUE(repeatable) << name << ": a repeated call differed";
    }
  }
  set_cpu_gemm(CpuGemm::Auto);
}

// Under auto the library is chosen per call by a rule of the code's own
// (auto_gemm_uses_openblas), per ISA where the measurements differ: this
// test runs under both CPU personalities of CI (make test and make
// test-avx2), so each branch is checked against the ISA oneDNN reports.
TEST(CpuGemm, AutoRoutesByShapeAndByOneDnnIsa) {
  const bool avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  std::printf("  oneDNN ISA %s AVX-512: %s\n", avx512 ? "with" : "without", cpu_gemm_description().c_str());
  // Wide weight gradients over few rows: OpenBLAS on every CPU.
  EXPECT_TRUE(auto_gemm_uses_openblas(true, false, 1024, 1024, 64));
  EXPECT_FALSE(auto_gemm_uses_openblas(true, false, 1024, 1024, 65));   // more rows
  EXPECT_FALSE(auto_gemm_uses_openblas(true, false, 256, 512, 64));     // narrower
  // Wide input gradients dY W: OpenBLAS exactly where oneDNN lacks AVX-512.
  EXPECT_EQ(auto_gemm_uses_openblas(false, false, 64, 1024, 1024), !avx512);
  EXPECT_EQ(auto_gemm_uses_openblas(false, false, 32, 512, 512), !avx512);
  EXPECT_FALSE(auto_gemm_uses_openblas(false, false, 64, 256, 512));    // narrower
  // x W^T stays on oneDNN (its matmul primitive) everywhere.
  EXPECT_FALSE(auto_gemm_uses_openblas(false, true, 64, 1024, 1024));
  set_cpu_gemm(CpuGemm::Auto);
  const std::string described = cpu_gemm_description();
  EXPECT_EQ(described.find("wide A B, as oneDNN runs without AVX-512") != std::string::npos, !avx512)
      << described;
}

}  // namespace
}  // namespace pt
