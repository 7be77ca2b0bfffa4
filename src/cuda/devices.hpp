// devices.hpp: the identity of every rank's GPU, shared by device selection
// and the transport choice (internal to pt_cuda; device_select.cpp).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

// "GPU-8f1c2d3e": the UUID's first 8 hex digits, enough to tell GPUs apart in a log.
std::string short_uuid(const std::string& uuid);
// What tells physical GPUs apart: the UUID (host|pci bus id when a driver gives none).
std::string gpu_key(const DeviceInfo& info);
// Collective: every rank's rank, host, device index, UUID and PCI bus id (other
// fields empty), indexed by rank in comm.
std::vector<DeviceInfo> gather_devices(const DeviceInfo& info, MPI_Comm comm);

}  // namespace pt::cuda
