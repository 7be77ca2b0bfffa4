// compute_setup.hpp: the backend, transport and memory statistics a rank
// trains with, chosen from training.device (cpu, or cuda when built with
// -DPIPETRAIN_CUDA=ON), and the opener of its data sets (io's make_dataset).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "pipetrain/runtime/trainer.hpp"

namespace pt {

struct ComputeResources {
  std::unique_ptr<Backend> backend;  // owned here; null for the CPU
  ComputeSetup setup;                // what the Trainer is given
  std::string kernels;               // GPU: CUDA and cuBLAS versions ("" on the CPU)
  std::string device_name;           // GPU: this rank's device ("NVIDIA H100 80GB HBM3")
  bool device_shared = false;        // GPU: some ranks of comm share a device
  // GPU: the bytes free on this rank's device (null on the CPU; memory_check.hpp).
  std::function<double()> free_device_memory;
};

bool cuda_available_in_build();
// Yielding waits (measured faster than sleeping ones on oversubscribed nodes
// too; docs/performance.md); PIPETRAIN_WAIT=yield|sleep overrides.
void choose_wait_mode();
// Collective over comm for CUDA (device selection, logging every rank's GPU).
ComputeResources make_compute_resources(const Deck& deck, MPI_Comm comm);

}  // namespace pt
