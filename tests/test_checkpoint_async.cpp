// test_checkpoint_async.cpp: an asynchronous checkpoint (AsyncCheckpointer,
// output.checkpoint_async) holds exactly the state of its step, although
// training changes the parameters while it is written; at most one save is
// in flight (a second start completes the first, and the trace shows the
// wait); the host copy is counted as checkpoint_staging memory, reused by
// the next save and released with the checkpointer. Runs at 1 and 2 ranks.
// Kills at every phase of the background write are in
// tests/cli/test_checkpoint_async.sh (they need a real process to die).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "mpi_test_util.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/checkpoint_async.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;
namespace fs = std::filesystem;

// A fresh directory, the same on every rank; removed at the end.
class TempDir {
 public:
  TempDir() {
    char buf[256] = {0};
    if (world_rank() == 0) {
      std::snprintf(buf, sizeof buf, "%s", (fs::temp_directory_path() / "pt_async_XXXXXX").c_str());
      if (mkdtemp(buf) == nullptr) buf[0] = 0;
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = buf;
  }
  ~TempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(path_);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

Deck small_deck(const std::string& dir) {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 4;
  d.data.samples = 128;
  d.training.steps = 6;
  d.training.batch_size = 8;
  d.training.optimizer = OptimizerKind::AdamW;
  d.training.lr = 1e-2;
  d.training.blas_threads = 1;
  d.pipeline.stages = world_size();
  d.pipeline.micro_batches = 2;
  d.pipeline.timeout_s = 60;
  d.output.trace = true;
  d.output.checkpoint_async = true;
  d.output.checkpoint_keep = 100;
  d.output.checkpoint_dir = dir;
  return d;
}

// Digests of synchronous saves after steps 2 and 4 of the same training.
std::pair<uint32_t, uint32_t> synchronous_digests(const Deck& deck) {
  Trainer trainer(deck, MPI_COMM_WORLD);
  const std::string text = deck_to_toml(deck);
  for (int64_t s = 0; s < 2; ++s) trainer.train_step(s);
  const uint32_t at2 = save_checkpoint(deck, text, trainer, 2, MPI_COMM_WORLD).digest;
  for (int64_t s = 2; s < 4; ++s) trainer.train_step(s);
  const uint32_t at4 = save_checkpoint(deck, text, trainer, 4, MPI_COMM_WORLD).digest;
  return {at2, at4};
}

int64_t events_of(Trainer& trainer, EventKind kind) {
  int64_t n = 0;
  for (const TraceEvent& e : trainer.tracer().events()) n += e.kind == static_cast<int32_t>(kind);
  return n;
}

size_t staging_live() {
  return memory_stats().live[static_cast<int>(MemCategory::CheckpointStaging)];
}

// Bytes of this rank's parameters and optimizer state.
size_t state_bytes(Trainer& trainer) {
  size_t bytes = 0;
  for (Param* p : trainer.params())
    for (const ParamState& s : param_state(*p)) bytes += s.tensor->bytes();
  return bytes;
}

// The save of step 2 is staged, training runs two more steps (changing every
// parameter) while it is in flight, and what is published is bitwise the
// synchronous save of step 2; the second start completes it first.
TEST(AsyncCheckpoint, HoldsItsStepWhileTrainingGoesOn) {
  TempDir tmp;
  const auto [want2, want4] = synchronous_digests(small_deck(tmp / "sync"));
  const Deck deck = small_deck(tmp / "async");
  Trainer trainer(deck, MPI_COMM_WORLD);
  const size_t before = staging_live();
  auto saver_scope = std::make_unique<AsyncCheckpointer>(deck, deck_to_toml(deck), MPI_COMM_WORLD);
  AsyncCheckpointer& saver = *saver_scope;
  for (int64_t s = 0; s < 2; ++s) trainer.train_step(s);
  EXPECT_FALSE(saver.start(trainer, 2).has_value());
  EXPECT_TRUE(saver.in_flight());
  EXPECT_EQ(staging_live() - before, state_bytes(trainer)) << "the host copy is counted as staging";
  EXPECT_EQ(events_of(trainer, EventKind::CheckpointStage), 1);
  for (int64_t s = 2; s < 4; ++s) trainer.train_step(s);
  // At most one in flight: the save of step 4 first completes step 2's.
  const std::optional<AsyncCheckpointDone> first = saver.start(trainer, 4);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step, 2);
  EXPECT_EQ(first->write.digest, want2) << "the save of step 2 holds the state after step 2";
  EXPECT_EQ(events_of(trainer, EventKind::CheckpointWait), 1) << "the wait is in the trace";
  EXPECT_EQ(staging_live() - before, state_bytes(trainer)) << "the second save reuses the host copy";
  const std::optional<AsyncCheckpointDone> second = saver.complete(trainer, 3);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->step, 4);
  EXPECT_EQ(second->write.digest, want4);
  EXPECT_FALSE(saver.in_flight());
  EXPECT_FALSE(saver.complete(trainer, 3).has_value()) << "nothing left in flight";
  saver_scope.reset();
  EXPECT_EQ(staging_live(), before) << "the host copy is released with the checkpointer";
  if (world_rank() != 0) return;
  wait_for_checkpoint_pruning();
  std::ifstream latest(tmp / "async/latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step_00000004");
}

// poll() publishes only when every rank's write has finished; it is
// collective, so every rank returns the same answer; repeated polls end in
// the publication without any wait.
TEST(AsyncCheckpoint, PollPublishesOnceEveryWriteFinished) {
  TempDir tmp;
  const Deck deck = small_deck(tmp / "poll");
  Trainer trainer(deck, MPI_COMM_WORLD);
  AsyncCheckpointer saver(deck, deck_to_toml(deck), MPI_COMM_WORLD);
  trainer.train_step(0);
  EXPECT_FALSE(saver.poll().has_value()) << "nothing in flight";
  saver.start(trainer, 1);
  std::optional<AsyncCheckpointDone> done;
  for (int i = 0; i < 60000 && !done; ++i) {  // up to a minute: a hung writer fails, never hangs
    done = saver.poll();
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->step, 1);
  EXPECT_EQ(done->wait_s, 0.0);
  EXPECT_EQ(events_of(trainer, EventKind::CheckpointWait), 0);
  // Every rank agrees it was published, and a resume loads it.
  Trainer resumed(deck, MPI_COMM_WORLD);
  EXPECT_EQ(load_checkpoint("latest", LoadMode::Resume, deck, deck_to_toml(deck), resumed,
                            MPI_COMM_WORLD).step, 1);
}

// Stand-in for the CUDA library's page-locked memory: ordinary blocks, counted.
struct FakePinned {
  static inline size_t obtained = 0, live = 0;
  static void* allocate(size_t bytes) {
    obtained += bytes;
    live += bytes;
    return std::aligned_alloc(64, bytes);
  }
  static void release(void* ptr, size_t bytes) {
    live -= bytes;
    std::free(ptr);
  }
};

// With page-locked host memory registered (as the CUDA library does), the
// host copy of an asynchronous save comes from it, still counted as
// checkpoint_staging; a synchronous save and every other host tensor do not
// use it; the published checkpoint is bitwise the synchronous one.
TEST(AsyncCheckpoint, TheHostCopyIsPageLockedWhenTheDeviceOffersIt) {
  TempDir tmp;
  const auto [want2, want4] = synchronous_digests(small_deck(tmp / "sync"));
  (void)want4;
  const Deck deck = small_deck(tmp / "pinned");
  Trainer trainer(deck, MPI_COMM_WORLD);
  const size_t before = staging_live();
  register_pinned_host_memory({FakePinned::allocate, FakePinned::release});
  {
    AsyncCheckpointer saver(deck, deck_to_toml(deck), MPI_COMM_WORLD);
    for (int64_t s = 0; s < 2; ++s) trainer.train_step(s);
    EXPECT_EQ(FakePinned::obtained, 0u) << "training allocates no page-locked memory";
    EXPECT_FALSE(saver.start(trainer, 2).has_value());
    EXPECT_EQ(pinned_host_bytes_live(), state_bytes(trainer)) << "the whole host copy is page-locked";
    EXPECT_EQ(staging_live() - before, state_bytes(trainer)) << "and counted as staging";
    const std::optional<AsyncCheckpointDone> done = saver.complete(trainer, 2);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->write.digest, want2);
  }
  EXPECT_EQ(pinned_host_bytes_live(), 0u);
  EXPECT_EQ(staging_live(), before);
  register_pinned_host_memory({});  // the cached blocks go back to the fake
  EXPECT_EQ(FakePinned::live, 0u) << "every page-locked block given back";
  EXPECT_GE(FakePinned::obtained, state_bytes(trainer));
}

// The planner counts the host copy: with checkpoint_async each stage's
// predicted peak grows by its parameters and optimizer state, nothing else.
TEST(AsyncCheckpoint, ThePlannerCountsTheHostCopy) {
  ModelProfile profile;
  for (int i = 1; i <= 4; ++i) {
    UnitCost u;
    u.name = "u" + std::to_string(i);
    u.forward_s = i;
    u.backward_s = 2.0 * i;
    u.stash_none_bytes = 1000.0 * i;
    u.workspace_bytes = 7.0 * i;
    u.param_bytes = 10000.0 * i;
    u.grad_bytes = 10000.0 * i;
    u.optimizer_bytes = 20000.0 * i;
    profile.units.push_back(u);
  }
  Deck deck = small_deck("unused");
  deck.pipeline.stages = 1;
  deck.output.checkpoint_async = false;
  const double without = choose_partition(deck, profile, 1).max_peak_bytes;
  deck.output.checkpoint_async = true;
  const double with = choose_partition(deck, profile, 1).max_peak_bytes;
  EXPECT_EQ(with - without, 30000.0 * (1 + 2 + 3 + 4));
}

}  // namespace
}  // namespace pt
