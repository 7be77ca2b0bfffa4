// test_precision.cpp: the CPU emulation of GEMM operand precision.
//
// Rounding of single values (ties to even, fp16 overflow and underflow, inf
// and NaN), and every emulated GEMM against (a) sgemm on operands rounded by
// hand: bitwise equal, and (b) the fp32 GEMM: within the derived bound
//   |C_p - C_fp32| <= (2u + u^2) (|A||B|) + 2 k 2^-24 (|A||B|)
// elementwise, u the unit roundoff of p (tf32 and fp16: 2^-11, bf16: 2^-8),
// the second term the two fp32 accumulations' error. The largest observed
// ratio to the bound is printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/tensor/precision.hpp"

namespace pt {
namespace {

float two_to(int e) { return std::ldexp(1.f, e); }

TEST(Precision, RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is a tie -> 1; 1 + 3 * 2^-8 -> 1 + 2^-6.
  EXPECT_EQ(round_operand(1.f + two_to(-8), Precision::Bf16), 1.f);
  EXPECT_EQ(round_operand(1.f + 3 * two_to(-8), Precision::Bf16), 1.f + two_to(-6));
  EXPECT_EQ(round_operand(1.f + two_to(-7), Precision::Bf16), 1.f + two_to(-7));
  EXPECT_EQ(round_operand(-(1.f + 3 * two_to(-8)), Precision::Bf16), -(1.f + two_to(-6)));
  // tf32 and fp16 keep 10: 1 + 2^-11 is a tie -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9.
  for (Precision p : {Precision::Tf32, Precision::Fp16}) {
    EXPECT_EQ(round_operand(1.f + two_to(-11), p), 1.f) << kind_name(p);
    EXPECT_EQ(round_operand(1.f + 3 * two_to(-11), p), 1.f + two_to(-9)) << kind_name(p);
  }
  EXPECT_EQ(round_operand(1.f + two_to(-20), Precision::Fp32), 1.f + two_to(-20));
}

TEST(Precision, Fp16RangeAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_operand(65504.f, Precision::Fp16), 65504.f);
  EXPECT_EQ(round_operand(65519.f, Precision::Fp16), 65504.f);
  EXPECT_EQ(round_operand(65520.f, Precision::Fp16), inf);  // the loss scaler's overflow
  EXPECT_EQ(round_operand(-1e6f, Precision::Fp16), -inf);
  EXPECT_EQ(round_operand(two_to(-24), Precision::Fp16), two_to(-24));  // smallest subnormal
  EXPECT_EQ(round_operand(two_to(-25), Precision::Fp16), 0.f);  // a tie, to even: 0
  const float big = round_operand(1e30f, Precision::Bf16);  // bf16's range is fp32's
  EXPECT_TRUE(std::isfinite(big));
  EXPECT_LE(std::fabs(big - 1e30f), 1e30f * two_to(-8));
  for (Precision p : {Precision::Tf32, Precision::Bf16, Precision::Fp16}) {
    EXPECT_EQ(round_operand(inf, p), inf);
    EXPECT_TRUE(std::isnan(round_operand(std::nanf(""), p)));
  }
}

TEST(Precision, ParseNamesEveryMode) {
  for (const char* name : {"fp32", "tf32", "bf16", "fp16"})
    EXPECT_STREQ(kind_name(parse_precision(name)), name);
  EXPECT_THROW(parse_precision("fp8"), InputError);
}

struct Matrices {
  int64_t m, n, k, lda, ldb;
  bool ta, tb;
  std::vector<float> a, b;
};

Matrices random_gemm(bool ta, bool tb, uint64_t stream) {
  Matrices g{37, 29, 83, 0, 0, ta, tb, {}, {}};
  const int64_t a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int64_t b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  g.lda = a_cols + 3;  // strided sub-matrices, as the attention heads are
  g.ldb = b_cols + 5;
  g.a.resize(static_cast<size_t>(a_rows * g.lda));
  g.b.resize(static_cast<size_t>(b_rows * g.ldb));
  for (size_t i = 0; i < g.a.size(); ++i) g.a[i] = 3.f * normal01(7, stream, i);
  for (size_t i = 0; i < g.b.size(); ++i) g.b[i] = 3.f * normal01(8, stream, i);
  return g;
}

std::vector<float> run(const Matrices& g, Precision p) {
  std::vector<float> c(static_cast<size_t>(g.m * g.n), 0.f);
  cpu::gemm(p, g.ta, g.tb, g.m, g.n, g.k, 1.f, g.a.data(), g.lda, g.b.data(), g.ldb, 0.f,
            c.data(), g.n);
  return c;
}

// |A| |B| at (i, j), from the stored (possibly transposed) operands.
double abs_product(const Matrices& g, int64_t i, int64_t j) {
  double s = 0.0;
  for (int64_t l = 0; l < g.k; ++l) {
    const float a = g.ta ? g.a[l * g.lda + i] : g.a[i * g.lda + l];
    const float b = g.tb ? g.b[j * g.ldb + l] : g.b[l * g.ldb + j];
    s += std::fabs(static_cast<double>(a) * b);
  }
  return s;
}

TEST(Precision, EmulatedGemmIsSgemmOnRoundedOperands) {
  for (Precision p : {Precision::Tf32, Precision::Bf16, Precision::Fp16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Matrices g = random_gemm(ta, tb, 1);
        const std::vector<float> emulated = run(g, p);
        for (float& x : g.a) x = round_operand(x, p);
        for (float& x : g.b) x = round_operand(x, p);
        EXPECT_EQ(emulated, run(g, Precision::Fp32))
            << kind_name(p) << " ta=" << ta << " tb=" << tb;
      }
}

TEST(Precision, EmulatedGemmWithinTheDerivedBoundOfFp32) {
  const struct { Precision p; double u; } modes[] = {
      {Precision::Tf32, std::ldexp(1.0, -11)},
      {Precision::Bf16, std::ldexp(1.0, -8)},
      {Precision::Fp16, std::ldexp(1.0, -11)}};
  for (const auto& mode : modes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Matrices g = random_gemm(ta, tb, 2);
        const std::vector<float> low = run(g, mode.p), ref = run(g, Precision::Fp32);
        const double factor = 2.0 * mode.u + mode.u * mode.u + 2.0 * g.k * std::ldexp(1.0, -24);
        double worst = 0.0;  // largest |diff| / bound
        for (int64_t i = 0; i < g.m; ++i)
          for (int64_t j = 0; j < g.n; ++j) {
            const double diff = std::fabs(static_cast<double>(low[i * g.n + j]) - ref[i * g.n + j]);
            const double bound = factor * abs_product(g, i, j);
            worst = std::max(worst, diff / bound);
            ASSERT_LE(diff, bound) << kind_name(mode.p) << " at (" << i << ", " << j << ")";
          }
        std::printf("%s ta=%d tb=%d: max |C - C_fp32| / bound = %.3f\n",
                    kind_name(mode.p), ta, tb, worst);
        EXPECT_GT(worst, 0.0) << "the rounding changed nothing: is the emulation on?";
      }
}

}  // namespace
}  // namespace pt
