// grid.hpp: the P x D process grid of data parallel x pipeline training.
//
// ranks = R x D, where R is the ranks of one pipeline (its stages / stages
// per rank) and D the replicas (data_parallel.replicas). World rank
//   w = replica * R + pipeline_rank
// so the R ranks of one pipeline are consecutive: with mpirun's default
// by-slot placement (or --map-by core / slot) a pipeline's neighbours share a
// node whenever R ranks fit on one, and the replicas of a stage, which talk
// once per step, are the ones spread over nodes (docs/data-parallel.md).
// Two communicator splits of `world`: `pipeline` (this replica's ranks, in
// pipeline rank order) and `replicas` (this pipeline rank in every replica,
// in replica order).
#pragma once

#include <mpi.h>

#include <string>

namespace pt {

class ProcessGrid {
 public:
  // Collective over world (MPI_Comm_split, under the wait limit's watchdog).
  ProcessGrid(MPI_Comm world, int data_parallel);
  // No data parallelism: `pipeline` itself, replicas = MPI_COMM_SELF. Not collective.
  static ProcessGrid single(MPI_Comm pipeline);
  ~ProcessGrid();
  ProcessGrid(ProcessGrid&& other) noexcept;
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;
  ProcessGrid& operator=(ProcessGrid&&) = delete;

  MPI_Comm world() const { return world_; }
  MPI_Comm pipeline() const { return pipeline_; }
  MPI_Comm replicas() const { return replicas_; }
  int pipeline_ranks() const { return pipeline_ranks_; }  // R
  int data_parallel() const { return data_parallel_; }    // D
  int pipeline_rank() const { return pipeline_rank_; }
  int replica() const { return replica_; }
  // "world ranks 1, 3": the ranks of this rank's replica group, for messages.
  std::string replica_group_text() const;

 private:
  ProcessGrid() = default;
  MPI_Comm world_ = MPI_COMM_NULL, pipeline_ = MPI_COMM_NULL, replicas_ = MPI_COMM_NULL;
  bool owned_ = false;  // the two split communicators are freed by the destructor
  int pipeline_ranks_ = 1, data_parallel_ = 1, pipeline_rank_ = 0, replica_ = 0;
};

}  // namespace pt
