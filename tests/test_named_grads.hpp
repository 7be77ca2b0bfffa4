// test_named_grads.hpp: a trainer's gradients (or parameter values), every
// rank's gathered on one rank and keyed by parameter name, and their
// comparison with another run's at a tolerance the caller derives
// (docs/cuda.md, "Tolerances of the GPU tests"). Keyed by name, two runs
// compare whatever their schedules, stages per rank, partitions or replicas.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/runtime/trainer.hpp"

namespace pt::test {

using NamedValues = std::map<std::string, std::vector<float>>;

enum class Field { Grad, Value };

// This rank's parameters' gradients (settled: a pending zero reads as zeros)
// or values, copied to the host.
inline NamedValues local_values(Trainer& trainer, Backend& be, Field field) {
  NamedValues out;
  for (Param* p : trainer.params()) {
    if (field == Field::Grad) settle_grad(be, *p);
    const Tensor host = (field == Field::Grad ? p->grad : p->value).to(Device::CPU);
    out[p->name].assign(host.f32(), host.f32() + host.numel());
  }
  return out;
}

// Every rank's values on rank 0 of comm (empty elsewhere; collective). A name
// held by several ranks (data-parallel replicas of one stage) is kept once;
// `replicas_differ` counts those whose copies differ in any bit.
inline NamedValues gather_named(const NamedValues& mine, MPI_Comm comm, int* replicas_differ) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string names;
  std::vector<int> counts;
  std::vector<float> data;
  for (const auto& [name, values] : mine) {
    names += name + '\n';
    counts.push_back(static_cast<int>(values.size()));
    data.insert(data.end(), values.begin(), values.end());
  }
  if (rank != 0) {
    MPI_Send(names.data(), static_cast<int>(names.size()), MPI_CHAR, 0, 901, comm);
    MPI_Send(counts.data(), static_cast<int>(counts.size()), MPI_INT, 0, 902, comm);
    MPI_Send(data.data(), static_cast<int>(data.size()), MPI_FLOAT, 0, 903, comm);
    return {};
  }
  NamedValues all = mine;
  for (int r = 1; r < size; ++r) {
    MPI_Status st;
    int n = 0;
    MPI_Probe(r, 901, comm, &st);
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string their(static_cast<size_t>(n), '\0');
    MPI_Recv(their.data(), n, MPI_CHAR, r, 901, comm, MPI_STATUS_IGNORE);
    MPI_Probe(r, 902, comm, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    std::vector<int> their_counts(static_cast<size_t>(n));
    MPI_Recv(their_counts.data(), n, MPI_INT, r, 902, comm, MPI_STATUS_IGNORE);
    MPI_Probe(r, 903, comm, &st);
    MPI_Get_count(&st, MPI_FLOAT, &n);
    std::vector<float> their_data(static_cast<size_t>(n));
    MPI_Recv(their_data.data(), n, MPI_FLOAT, r, 903, comm, MPI_STATUS_IGNORE);
    size_t at = 0, offset = 0;
    for (int c : their_counts) {
      const size_t end = their.find('\n', at);
      const std::string name = their.substr(at, end - at);
      at = end + 1;
      std::vector<float> values(their_data.begin() + offset, their_data.begin() + offset + c);
      offset += static_cast<size_t>(c);
      const auto found = all.find(name);
      if (found == all.end()) {
        all[name] = std::move(values);
      } else if (replicas_differ != nullptr &&
                 (found->second.size() != values.size() ||
                  std::memcmp(found->second.data(), values.data(), values.size() * sizeof(float)) != 0)) {
        ++*replicas_differ;
      }
    }
  }
  return all;
}

// max |got - want| / max |want| over one tensor (the absolute difference
// when `want` is all zeros); infinite when either holds a NaN or an inf.
inline double max_rel_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return HUGE_VAL;
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

struct NamedComparison {
  double worst = 0.0;        // the largest max_rel_difference of any tensor
  std::string worst_name;    // the tensor it came from
  size_t tensors = 0;
  size_t differing_bits = 0;  // elements whose bits differ (0: bitwise equal)
  bool same_names = true;
};

inline NamedComparison compare_named(const NamedValues& got, const NamedValues& want) {
  NamedComparison c;
  c.same_names = got.size() == want.size();
  for (const auto& [name, w] : want) {
    const auto g = got.find(name);
    if (g == got.end() || g->second.size() != w.size()) {
      c.same_names = false;
      continue;
    }
    ++c.tensors;
    for (size_t i = 0; i < w.size(); ++i)
      c.differing_bits += std::memcmp(&g->second[i], &w[i], sizeof(float)) != 0;
    const double d = max_rel_difference(g->second, w);
    if (d > c.worst || c.worst_name.empty()) {
      c.worst = d;
      c.worst_name = name;
    }
  }
  return c;
}

// got = want per tensor within `tol` (0: bitwise); prints the largest difference.
inline NamedComparison expect_named_close(const NamedValues& got, const NamedValues& want,
                                          double tol, const std::string& what) {
  const NamedComparison c = compare_named(got, want);
  std::printf("  %-44s max rel diff %.3e (%s) over %zu tensors, %zu elements differ; tol %.2e\n",
              what.c_str(), c.worst, c.worst_name.c_str(), c.tensors, c.differing_bits, tol);
  EXPECT_TRUE(c.same_names) << what << ": the two runs hold different parameters";
  EXPECT_GT(c.tensors, 0u) << what << ": nothing compared";
  if (tol == 0.0)
    EXPECT_EQ(c.differing_bits, 0u) << what << ": not bitwise (max rel diff " << c.worst << " in "
                                    << c.worst_name << ")";
  else
    EXPECT_LE(c.worst, tol) << what << ": in " << c.worst_name;
  return c;
}

}  // namespace pt::test
