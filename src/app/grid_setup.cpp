// grid_setup.cpp: the driver's data-parallel steps (see grid_setup.hpp).
#include "pipetrain/app/grid_setup.hpp"

#include <mpi.h>

#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

std::vector<int64_t> share_partition(const ProcessGrid& grid, std::vector<int64_t> counts) {
  if (grid.data_parallel() == 1) return counts;
  long long n = static_cast<long long>(counts.size());
  timed_bcast(&n, 1, MPI_LONG_LONG, 0, grid.replicas(), "the partition broadcast from replica 0");
  std::vector<long long> sent(counts.begin(), counts.end());
  sent.resize(static_cast<size_t>(n));
  timed_bcast(sent.data(), static_cast<int>(n), MPI_LONG_LONG, 0, grid.replicas(),
              "the partition broadcast from replica 0");
  return std::vector<int64_t>(sent.begin(), sent.end());
}

void agree_across_replicas(const ProcessGrid& grid, bool ok) {
  if (grid.data_parallel() == 1) return;
  int mine = ok ? 1 : 0, all = 0;
  timed_allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, grid.world(),
                  "the checkpoint load agreement across the replicas");
  if (ok && all == 0)
    throw InputError("another data-parallel replica could not load the checkpoint (see its message)");
}

}  // namespace pt
