// test_cuda_transport.cpp: the GPU transports under mpirun (1 and 2 ranks):
// device selection on every rank, the transport choice, the host-staged MPI
// transport (to itself on 1 rank; both directions at once, several messages
// in order, on 2 ranks, which also works with both ranks on one GPU), and the
// NCCL transport when every rank has its own GPU (skipped otherwise: NCCL
// refuses two ranks on one device). Skips on every rank without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>

#include "pipetrain/base/error.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

// Device selection once per process; false on every rank when any rank lacks a GPU.
bool select_once(cuda::DeviceInfo& info, std::string& why) {
  static int state = -1;
  static cuda::DeviceInfo saved;
  static std::string saved_why;
  if (state < 0) {
    state = test::gpu_on_every_rank(MPI_COMM_WORLD, &saved_why) ? 1 : 0;
    if (state == 1) saved = cuda::select_device(MPI_COMM_WORLD);
  }
  info = saved;
  why = saved_why;
  return state == 1;
}

#define PT_REQUIRE_GPUS(info)                                                       \
  std::string pt_why_;                                                              \
  if (!select_once(info, pt_why_)) PT_NO_GPU("no CUDA device on some rank (" + pt_why_ + ")")

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A host tensor whose values encode (who, message).
Tensor pattern(int64_t n, int who, int message) {
  Tensor t = Tensor::empty({n}, DType::F32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = static_cast<float>(who * 1000 + message) + i % 97;
  return t;
}

void wait(PendingTransfer& t) {
  const auto start = std::chrono::steady_clock::now();
  while (!t.test())
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60))
        << "transfer hung";
}

// Every rank exchanges `messages` device tensors of n floats with its
// neighbours (rank +- 1). Both sides post their sends before their receives:
// the order that deadlocks a single NCCL stream once messages outgrow NCCL's
// buffers (the transports must not).
void exchange(Transport& tr, int64_t n, int messages) {
  const int rank = tr.rank(), size = tr.size();
  const int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
  const bool two_peers = size > 2;
  std::vector<Tensor> out, in_next, in_prev;
  std::vector<std::unique_ptr<PendingTransfer>> pending;
  for (int k = 0; k < messages; ++k) {
    out.push_back(test::gpu(pattern(n, rank, k)));
    in_next.push_back(Tensor::empty({n}, DType::F32, MemCategory::Workspace, Device::CUDA));
    in_prev.push_back(Tensor::empty({n}, DType::F32, MemCategory::Workspace, Device::CUDA));
  }
  for (int k = 0; k < messages; ++k) {
    pending.push_back(tr.isend(out[k], next, 10 + k));
    if (two_peers) pending.push_back(tr.isend(out[k], prev, 50 + k));
    pending.push_back(tr.irecv(in_prev[k], prev, 10 + k));
    if (two_peers) pending.push_back(tr.irecv(in_next[k], next, 50 + k));
  }
  for (auto& p : pending) wait(*p);
  for (int k = 0; k < messages; ++k) {
    EXPECT_EQ(test::rel_error(in_prev[k], pattern(n, prev, k)), 0.0) << "from prev, message " << k;
    if (two_peers) {
      EXPECT_EQ(test::rel_error(in_next[k], pattern(n, next, k)), 0.0)
          << "from next, message " << k;
    }
  }
}

TEST(CudaTransport, EveryRankDescribesItsDevice) {
  cuda::DeviceInfo info;
  PT_REQUIRE_GPUS(info);
  std::printf("  %s\n", info.describe().c_str());
  EXPECT_EQ(info.rank, rank_of());
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_EQ(info.uuid.rfind("GPU-", 0), 0u) << info.uuid;
  EXPECT_FALSE(info.name.empty());
}

TEST(CudaTransport, AutoChoosesStagedWhenADeviceIsShared) {
  cuda::DeviceInfo info;
  PT_REQUIRE_GPUS(info);
  const bool shared = cuda::any_device_shared(info, MPI_COMM_WORLD);
  const std::string kind = cuda::resolve_transport("auto", info, MPI_COMM_WORLD);
  EXPECT_EQ(kind, shared || size_of() == 1 ? "mpi_staged" : "nccl");
  if (shared) {
    try {
      cuda::resolve_transport("nccl", info, MPI_COMM_WORLD);
      ADD_FAILURE() << "nccl on a shared GPU was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("ranks 0 and 1 share GPU-"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(cuda::resolve_transport("gloo", info, MPI_COMM_WORLD), InputError);
}

TEST(CudaTransport, PlanNamesTheTransportOfEveryLink) {
  cuda::DeviceInfo info;
  PT_REQUIRE_GPUS(info);
  const cuda::TransportPlan plan = cuda::plan_transport("auto", info, MPI_COMM_WORLD);
  const size_t ring = plan.kind == "nccl" && size_of() > 2 ? 1 : 0;
  ASSERT_EQ(plan.links.size(), static_cast<size_t>(size_of() - 1) + ring);
  for (const std::string& line : plan.links) std::printf("  %s\n", line.c_str());
  if (!plan.links.empty()) {
    EXPECT_EQ(plan.links[0].rfind("link 0->1: " + plan.kind + " (", 0), 0u) << plan.links[0];
  }
}

TEST(CudaTransport, StagedExchangesBothWays) {
  cuda::DeviceInfo info;
  PT_REQUIRE_GPUS(info);
  auto tr = cuda::make_staged_transport(MPI_COMM_WORLD);
  EXPECT_STREQ(tr->name(), "mpi_staged");
  exchange(*tr, 3 * 1000 * 1000 + 7, 3);  // 12 MB messages
  exchange(*tr, 5, 2);
}

TEST(CudaTransport, NcclExchangesBothWays) {
  cuda::DeviceInfo info;
  PT_REQUIRE_GPUS(info);
  if (size_of() < 2) GTEST_SKIP() << "NCCL transport test needs 2 ranks";
  if (cuda::any_device_shared(info, MPI_COMM_WORLD))
    GTEST_SKIP() << "ranks share a GPU, which NCCL refuses (mpi_staged is the fallback)";
  auto tr = cuda::make_nccl_transport(MPI_COMM_WORLD, 60.0);
  EXPECT_STREQ(tr->name(), "nccl");
  exchange(*tr, 3 * 1000 * 1000 + 7, 3);
  exchange(*tr, 5, 2);
}

}  // namespace
}  // namespace pt
