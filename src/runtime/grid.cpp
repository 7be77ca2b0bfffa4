// grid.cpp: the P x D process grid (communicator splits; see grid.hpp).
#include "pipetrain/runtime/grid.hpp"

#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

ProcessGrid::ProcessGrid(MPI_Comm world, int data_parallel) : world_(world), owned_(true) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  PT_CHECK(data_parallel >= 1 && size % data_parallel == 0,
           "data_parallel = " + std::to_string(data_parallel) + " does not divide " +
               std::to_string(size) + " ranks");
  data_parallel_ = data_parallel;
  pipeline_ranks_ = size / data_parallel;
  replica_ = rank / pipeline_ranks_;
  pipeline_rank_ = rank % pipeline_ranks_;
  DeadlineScope deadline("the process grid's communicator splits (pipelines and replica groups)");
  MPI_CHECK(MPI_Comm_split(world, replica_, pipeline_rank_, &pipeline_));
  MPI_CHECK(MPI_Comm_split(world, pipeline_rank_, replica_, &replicas_));
}

ProcessGrid ProcessGrid::single(MPI_Comm pipeline) {
  ProcessGrid g;
  g.world_ = g.pipeline_ = pipeline;
  g.replicas_ = MPI_COMM_SELF;
  MPI_CHECK(MPI_Comm_size(pipeline, &g.pipeline_ranks_));
  MPI_CHECK(MPI_Comm_rank(pipeline, &g.pipeline_rank_));
  return g;
}

std::string ProcessGrid::replica_group_text() const {
  std::string text = data_parallel_ > 1 ? "world ranks " : "world rank ";
  for (int d = 0; d < data_parallel_; ++d)
    text += (d ? ", " : "") + std::to_string(d * pipeline_ranks_ + pipeline_rank_);
  return text;
}

ProcessGrid::ProcessGrid(ProcessGrid&& o) noexcept
    : world_(o.world_), pipeline_(o.pipeline_), replicas_(o.replicas_), owned_(o.owned_),
      pipeline_ranks_(o.pipeline_ranks_), data_parallel_(o.data_parallel_),
      pipeline_rank_(o.pipeline_rank_), replica_(o.replica_) {
  o.owned_ = false;
}

ProcessGrid::~ProcessGrid() {
  if (!owned_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (pipeline_ != MPI_COMM_NULL) MPI_Comm_free(&pipeline_);
  if (replicas_ != MPI_COMM_NULL) MPI_Comm_free(&replicas_);
}

}  // namespace pt
