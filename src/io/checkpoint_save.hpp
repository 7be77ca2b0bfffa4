// checkpoint_save.hpp: the phases of one checkpoint save (private to src/io),
// shared by the synchronous save_checkpoint (checkpoint_write.cpp) and the
// asynchronous AsyncCheckpointer (checkpoint_async.cpp):
//   begin_save       collective: the save's checkpoint_id, step_N.tmp/ made;
//   write_stage_file local: this rank's stage file from tensors on the host,
//                    closed and fsynced (HDF5 under Hdf5Lock, per parameter);
//   finish_save      collective: the ranks agree every file is durable, rank 0
//                    writes manifest.h5 and publishes (rename, `latest`).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_bind.hpp"
#include "checkpoint_h5.hpp"
#include "pipetrain/io/checkpoint.hpp"

namespace pt::ckpt {

// Where one save goes; the same on every rank but `rank`.
struct SaveTarget {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::string root, name, final_dir, tmp_dir;
  std::string id;  // checkpoint_id: the same on every rank, new for every save
  std::chrono::steady_clock::time_point start;
};

// One parameter's tensors as the stage file stores them: "value", then
// "state1", "state2" when present; each on the host.
struct StagedTensor {
  std::string name;
  Tensor tensor;  // the parameter's shape, e.g. (out, in) or (out); on the host
};
struct StagedParam {
  std::string name;
  std::vector<StagedTensor> tensors;
};

// The parameters' tensors. copy = false: the parameters' own storage (a
// synchronous save; device tensors are copied per dataset while writing);
// copy = true: a snapshot in host memory counted as
// MemCategory::CheckpointStaging (an asynchronous save).
std::vector<StagedParam> stage_params(const std::vector<Param*>& params, bool copy);
// Copies `params` into an earlier snapshot of the same parameters (names,
// state tensors and shapes); false, copying nothing, when they differ (a
// rebalancing move changed the stage's parameters).
bool stage_into(std::vector<StagedParam>& staged, const std::vector<Param*>& params);
// Bytes a snapshot of `params` takes (values and optimizer state).
int64_t staged_bytes(const std::vector<StagedParam>& staged);

// This rank's stage file: its size and the CRC-32 of every dataset.
struct StageFile {
  int64_t bytes = 0;
  uint32_t file_crc = 0;  // CRC-32 of the whole file as written (checkpoint_verify.cpp)
  std::vector<DatasetCrc> datasets;  // per parameter: value, then state1, state2 when present
};

// Called at the named phases of an asynchronous save ("written", "fsynced",
// "bound"); empty for a synchronous one.
using PhaseHook = std::function<void(const char* phase)>;

// AdamW's update count and the fp16 loss scaler, saved beside the weights
// (checkpoint_trainer.cpp).
TrainingCounters counters_of(Trainer& trainer);

// Collective over comm.
SaveTarget begin_save(const Deck& deck, int64_t step, MPI_Comm comm);
// Local; throws pt::Error naming the file.
StageFile write_stage_file(const SaveTarget& w, const std::vector<StagedParam>& params,
                           int64_t step, const PhaseHook& at_phase = {});
// Collective: `mine` is this rank's outcome (a failure's message names its
// file); any rank's failure throws the same pt::Error on every rank.
CheckpointWrite finish_save(const SaveTarget& w, const Deck& deck, const std::string& resolved_deck,
                            int64_t step, const TrainingCounters& counters,
                            const std::vector<int64_t>& partition, const Problem& mine_problem,
                            const StageFile& mine, const PhaseHook& at_phase = {});

}  // namespace pt::ckpt
