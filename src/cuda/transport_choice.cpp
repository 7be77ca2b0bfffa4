// transport_choice.cpp: which GPU transport a communicator gets (nccl, or
// mpi_staged where ranks share a GPU, which NCCL refuses), the log line of
// every pipeline link, and the factory behind pipeline.transport.
#include <mpi.h>

#include <string>

#include "devices.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

// "node7 cuda:1 GPU-8f1c2d3e"
std::string where(const DeviceInfo& d) {
  return d.host + " cuda:" + std::to_string(d.device) + " " + short_uuid(d.uuid);
}

std::string link_line(const std::string& kind, const DeviceInfo& from, const DeviceInfo& to) {
  const std::string head = "link " + std::to_string(from.rank) + "->" + std::to_string(to.rank) +
                           ": " + kind + " (";
  if (gpu_key(from) == gpu_key(to)) return head + "same GPU: " + where(from) + ")";
  return head + where(from) + " -> " + where(to) + ")";
}

// Pipeline links r -> r+1; NCCL also connects the closing link P-1 -> 0 (P > 2).
std::vector<std::string> link_lines(const std::string& kind, const std::vector<DeviceInfo>& d) {
  const int size = static_cast<int>(d.size());
  std::vector<std::string> lines;
  for (int r = 0; r + 1 < size; ++r) lines.push_back(link_line(kind, d[r], d[r + 1]));
  if (kind == "nccl" && size > 2) lines.push_back(link_line(kind, d[size - 1], d[0]));
  return lines;
}

// "ranks 0 and 1 share GPU-8f1c2d3e on node7; ranks 2, 3 and 5 share ..."
std::string describe_sharing(const std::vector<std::vector<int>>& groups,
                             const std::vector<DeviceInfo>& d) {
  std::string out;
  for (const std::vector<int>& g : groups) {
    if (!out.empty()) out += "; ";
    out += "ranks ";
    for (size_t i = 0; i < g.size(); ++i) {
      if (i > 0) out += i + 1 == g.size() ? " and " : ", ";
      out += std::to_string(g[i]);
    }
    out += " share " + short_uuid(d[g[0]].uuid) + " on " + d[g[0]].host;
  }
  return out;
}

}  // namespace

TransportPlan plan_transport(const std::string& requested, const DeviceInfo& info,
                             MPI_Comm comm) {
  if (requested != "auto" && requested != "nccl" && requested != "mpi_staged")
    throw InputError("unknown GPU transport '" + requested +
                     "': expected auto, nccl or mpi_staged");
  const std::vector<DeviceInfo> devices = gather_devices(info, comm);  // collective on every path
  std::vector<std::string> keys;
  for (const DeviceInfo& d : devices) keys.push_back(gpu_key(d));
  const std::vector<std::vector<int>> shared = ranks_sharing(keys);
  if (requested == "nccl" && !shared.empty())
    throw InputError("pipeline.transport = \"nccl\": " + describe_sharing(shared, devices) +
                     "; NCCL refuses two ranks on one GPU. Give each rank its own GPU "
                     "(PIPETRAIN_DEVICE, or one task per GPU) or use mpi_staged (or auto)");
  TransportPlan plan;
  if (requested == "auto") plan.kind = shared.empty() && devices.size() > 1 ? "nccl" : "mpi_staged";
  else plan.kind = requested;
  plan.links = link_lines(plan.kind, devices);
  return plan;
}

std::string resolve_transport(const std::string& requested, const DeviceInfo& info,
                              MPI_Comm comm) {
  return plan_transport(requested, info, comm).kind;
}

std::unique_ptr<Transport> make_transport(const std::string& requested, MPI_Comm comm,
                                          const DeviceInfo& info, double timeout_s,
                                          TransportPlan* plan) {
  TransportPlan chosen = plan_transport(requested, info, comm);
  std::unique_ptr<Transport> transport = chosen.kind == "nccl"
                                             ? make_nccl_transport(comm, timeout_s)
                                             : make_staged_transport(comm);
  if (plan != nullptr) *plan = std::move(chosen);
  return transport;
}

}  // namespace pt::cuda
