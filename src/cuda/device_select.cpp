// device_select.cpp: which GPU each rank drives (local rank mod visible
// devices, or the PIPETRAIN_DEVICE override), its description for the run
// log, and which ranks of a communicator share a physical GPU (by the GPU's
// UUID: host names repeat across containers and PCI bus ids across hosts).
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"
#include "context.hpp"
#include "devices.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

std::vector<int> parse_index_list(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || v < 0 || v > 1023)
      throw InputError("PIPETRAIN_DEVICE='" + text +
                       "': expected a device index or a comma list of indices, e.g. 0 or 0,0,1,1");
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  return std::string(name, static_cast<size_t>(len));
}

// "GPU-8f1c2d3e-...", as nvidia-smi -L prints it; "" when the driver gives no UUID.
std::string uuid_text(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  bool any = false;
  for (int i = 0; i < 16; ++i) any = any || b[i] != 0;
  if (!any) return "";
  std::string out = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(hex, sizeof hex, "%02x", b[i]);
    out += hex;
  }
  return out;
}

// Fills the device fields of `info` for `device` and creates the context.
void open_device(DeviceInfo& info, int device) {
  create_context(device);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char bus[32] = {0};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  info.device = device;
  info.name = prop.name;
  info.pci_bus_id = bus;
  info.uuid = uuid_text(prop.uuid);
  info.total_memory = prop.totalGlobalMem;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
}

int visible_devices_or_throw(const std::string& host) {
  std::string why;
  const int count = device_count(&why);
  if (count == 0) throw Error("no CUDA device visible on " + host + ": " + why);
  return count;
}

}  // namespace

int device_count(std::string* why) {
  prepare_cuda_environment();  // before the first CUDA call of the process
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    (void)cudaGetLastError();
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount returned 0";
  return count;
}

int choose_device_index(int local_rank, int device_count, const char* override_env) {
  PT_CHECK(device_count > 0 && local_rank >= 0, "choose_device_index arguments");
  if (override_env == nullptr || *override_env == '\0') return local_rank % device_count;
  const std::vector<int> list = parse_index_list(override_env);
  const int device = list[static_cast<size_t>(local_rank) % list.size()];
  if (device >= device_count)
    throw InputError("PIPETRAIN_DEVICE='" + std::string(override_env) + "' names device " +
                     std::to_string(device) + " but only " + std::to_string(device_count) +
                     " are visible");
  return device;
}

DeviceInfo select_device(MPI_Comm comm) {
  DeviceInfo info;
  MPI_CHECK(MPI_Comm_rank(comm, &info.rank));
  MPI_Comm node;
  {
    DeadlineScope deadline("the node-local communicator split (device selection)");
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node));
  }
  MPI_CHECK(MPI_Comm_rank(node, &info.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &info.local_size));
  MPI_CHECK(MPI_Comm_free(&node));
  info.host = processor_name();
  info.device_count = visible_devices_or_throw(info.host);
  const char* env = std::getenv("PIPETRAIN_DEVICE");
  info.override_used = env != nullptr && *env != '\0';
  open_device(info, choose_device_index(info.local_rank, info.device_count, env));
  return info;
}

DeviceInfo init_device(int device) {
  DeviceInfo info;
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  info.host = mpi_up ? processor_name() : "localhost";
  info.device_count = visible_devices_or_throw(info.host);
  PT_CHECK(device >= 0 && device < info.device_count,
           "device " + std::to_string(device) + " of " + std::to_string(info.device_count));
  open_device(info, device);
  return info;
}

std::string DeviceInfo::describe() const {
  char text[512];
  std::snprintf(text, sizeof text,
                "rank %d on %s: cuda:%d %s (sm_%d%d, %.1f GiB) pci %s %s, local rank %d/%d%s",
                rank, host.c_str(), device, name.c_str(), cc_major, cc_minor,
                static_cast<double>(total_memory) / (1024.0 * 1024.0 * 1024.0),
                pci_bus_id.c_str(), short_uuid(uuid).c_str(), local_rank, local_size,
                override_used ? " (PIPETRAIN_DEVICE)" : "");
  return text;
}

std::string short_uuid(const std::string& uuid) {
  return uuid.size() > 12 ? uuid.substr(0, 12) : (uuid.empty() ? "(no uuid)" : uuid);
}

std::string gpu_key(const DeviceInfo& info) {
  // Without a UUID (an unusual driver) fall back to where the GPU sits.
  return info.uuid.empty() ? info.host + "|" + info.pci_bus_id : info.uuid;
}

std::vector<std::vector<int>> ranks_sharing(const std::vector<std::string>& keys) {
  std::map<std::string, std::vector<int>> by_key;
  for (size_t r = 0; r < keys.size(); ++r) by_key[keys[r]].push_back(static_cast<int>(r));
  std::vector<std::vector<int>> groups;
  for (auto& entry : by_key)
    if (entry.second.size() > 1) groups.push_back(std::move(entry.second));
  std::sort(groups.begin(), groups.end());  // by first rank (ranks are unique)
  return groups;
}

std::vector<DeviceInfo> gather_devices(const DeviceInfo& info, MPI_Comm comm) {
  constexpr int kField = 128;  // host, uuid, pci bus id; NUL-padded
  char mine[3 * kField] = {0};
  std::snprintf(mine, kField, "%s", info.host.c_str());
  std::snprintf(mine + kField, kField, "%s", info.uuid.c_str());
  std::snprintf(mine + 2 * kField, kField, "%s", info.pci_bus_id.c_str());
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> devices(static_cast<size_t>(size));
  std::vector<char> all(static_cast<size_t>(size) * sizeof mine);
  timed_allgather(mine, sizeof mine, MPI_CHAR, all.data(), comm, "the GPU identity all-gather");
  timed_allgather(&info.device, 1, MPI_INT, devices.data(), comm, "the GPU index all-gather");
  std::vector<DeviceInfo> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const char* rec = all.data() + static_cast<size_t>(r) * sizeof mine;
    out[r].rank = r;
    out[r].host = rec;
    out[r].uuid = rec + kField;
    out[r].pci_bus_id = rec + 2 * kField;
    out[r].device = devices[r];
  }
  return out;
}

bool any_device_shared(const DeviceInfo& info, MPI_Comm comm) {
  std::vector<std::string> keys;
  for (const DeviceInfo& d : gather_devices(info, comm)) keys.push_back(gpu_key(d));
  return !ranks_sharing(keys).empty();
}

}  // namespace pt::cuda
