// memory_check.cpp: a model too large for the job's memory is refused before
// anything is built (app/memory_check.hpp). The figures are lower bounds:
// a stage holds at least its parameters' fp32 values, gradients and the
// optimizer's state (model.hpp, persistent_state_bytes, checked against the
// built layers by tests/test_unit_parameters.cpp), so a refusal is never
// wrong; a model that passes may still run short of memory for its
// activations, which the planner predicts (docs/memory.md).
#include "pipetrain/app/memory_check.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/run_builder.hpp"

namespace pt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "62.4 TiB", "12.3 GiB", "512.0 MiB", "52.0 KiB": the largest unit in
// which it is at least 1, one decimal.
std::string bytes_text(double bytes) {
  const char* const units[] = {"TiB", "GiB", "MiB", "KiB"};
  double scale = 1024.0 * kGiB;
  size_t u = 0;
  for (; u + 1 < sizeof units / sizeof units[0] && bytes < scale; ++u) scale /= 1024.0;
  char text[48];
  std::snprintf(text, sizeof text, "%.1f %s", bytes / scale, units[u]);
  return text;
}

std::string count_text(double n) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", n);
  return text;
}

// "fp32 values, gradients and AdamW's two moments"
std::string state_text(OptimizerKind optimizer) {
  return std::string("fp32 values, gradients and ") +
         (optimizer == OptimizerKind::AdamW ? "AdamW's two moments" : "SGD's momentum");
}

// "model.blocks = 96 (inputs/gpt.toml:19)": the key counting the model's units.
std::string size_key(const Deck& deck) {
  const ModelFamily& family = model_family(deck.model);
  return deck.described("model." + family.units_key, std::to_string(family.units(deck.model)));
}

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
double mem_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(std::strlen("MemAvailable:")));
    double kib = 0.0;
    return (fields >> kib) ? kib * 1024.0 : 0.0;
  }
  return 0.0;
}

// The ranks that share this rank's memory: its node's, or itself alone.
// Freed by the caller unless it is MPI_COMM_SELF.
MPI_Comm memory_domain(MPI_Comm world, const MemoryOnHand& on_hand) {
  if (!on_hand.per_node) return MPI_COMM_SELF;
  MPI_Comm node = MPI_COMM_NULL;
  DeadlineScope deadline("the node-local communicator split (memory check)");
  MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  return node;
}

void free_domain(MPI_Comm& domain) {
  if (domain != MPI_COMM_SELF) MPI_CHECK(MPI_Comm_free(&domain));
}

// Whether every rank of `world` knows its memory (the checks run on all or none).
bool all_checked(MPI_Comm world, const MemoryOnHand& on_hand) {
  int mine = on_hand.checked ? 1 : 0, all = 0;
  timed_allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world, "the memory check's all-reduce");
  return all == 1;
}

std::string host_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<size_t>(std::max(0, length)));
}

// Every rank throws InputError with the text of rank `root`.
[[noreturn]] void refuse_from(int root, const std::string& text, MPI_Comm world) {
  char buffer[2048] = {0};
  std::snprintf(buffer, sizeof buffer, "%s", text.c_str());
  timed_bcast(buffer, static_cast<int>(sizeof buffer), MPI_CHAR, root, world,
              "the memory check's message broadcast");
  throw InputError(buffer);
}

int world_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

// Collective over `world`: each rank's `mine` bytes summed over its memory
// domain (its node's ranks, or itself on a GPU) against that domain's memory.
// When one is over, every rank throws InputError with the text `describe`
// (need, available, ranks of the domain) makes on the rank of the domain
// most over its memory.
void refuse_if_a_domain_is_over(MPI_Comm world, const MemoryOnHand& on_hand, double mine,
                                const std::function<std::string(double, double, int)>& describe) {
  MPI_Comm domain = memory_domain(world, on_hand);
  int ranks = 1;
  MPI_CHECK(MPI_Comm_size(domain, &ranks));
  double need = 0.0, available = 0.0;
  timed_allreduce(&mine, &need, 1, MPI_DOUBLE, MPI_SUM, domain, "the memory check's node all-reduce");
  timed_allreduce(&on_hand.bytes, &available, 1, MPI_DOUBLE, MPI_MIN, domain,
                  "the memory check's node all-reduce");
  free_domain(domain);
  struct { double ratio; int rank; } local{need / available, world_rank(world)}, worst{0.0, 0};
  timed_allreduce(&local, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, world, "the memory check's all-reduce");
  if (worst.ratio <= 1.0) return;
  refuse_from(worst.rank, worst.rank == local.rank ? describe(need, available, ranks) : "", world);
}

}  // namespace

MemoryOnHand memory_on_hand(const ComputeResources& compute) {
  MemoryOnHand on_hand;
  if (compute.free_device_memory) {
    if (compute.device_shared) return on_hand;  // ranks sharing a GPU: not modelled
    on_hand.per_node = false;
    on_hand.bytes = compute.free_device_memory();
    on_hand.source = "GPU memory free (cudaMemGetInfo)";
  } else {
    on_hand.bytes = mem_available_bytes();
    on_hand.source = "host memory available (MemAvailable)";
  }
  on_hand.checked = on_hand.bytes > 0.0;
  return on_hand;
}

void check_model_fits_job(const Deck& deck, int64_t copies, MPI_Comm world, const MemoryOnHand& on_hand) {
  if (!all_checked(world, on_hand)) return;
  MPI_Comm domain = memory_domain(world, on_hand);
  int domain_rank = 0;
  MPI_CHECK(MPI_Comm_rank(domain, &domain_rank));
  free_domain(domain);
  const double mine[2] = {domain_rank == 0 ? on_hand.bytes : 0.0, domain_rank == 0 ? 1.0 : 0.0};
  double job[2] = {0.0, 0.0};  // bytes available, domains
  timed_allreduce(mine, job, 2, MPI_DOUBLE, MPI_SUM, world, "the memory check's all-reduce");
  const OptimizerKind optimizer = deck.training.optimizer;
  double model_bytes = 0.0;
  for (const CostUnitInfo& unit : cost_units(deck.model)) model_bytes += persistent_state_bytes(unit, optimizer);
  const double need = model_bytes * static_cast<double>(copies);
  if (need <= job[0]) return;
  const int domains = static_cast<int>(job[1]);
  const std::string where = on_hand.per_node ? std::to_string(domains) + (domains == 1 ? " node has " : " nodes have ")
                                             : std::to_string(domains) + (domains == 1 ? " GPU has " : " GPUs have ");
  throw InputError(
      "the model does not fit in this job's memory: its " + count_text(model_parameters(deck.model)) +
      " parameters (" + size_key(deck) + ") need at least " + bytes_text(model_bytes) + " for their " +
      state_text(optimizer) + (copies > 1 ? ", " + bytes_text(need) + " for its " + std::to_string(copies) +
                                                " data-parallel replicas"
                                          : std::string()) +
      ", but the job's " + where + bytes_text(job[0]) + " of " + on_hand.source +
      "; run it on more " + (on_hand.per_node ? "nodes" : "GPUs") + ", or make the model smaller");
}

void check_stages_fit(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
                      const MemoryOnHand& on_hand) {
  MPI_Comm world = grid.world();
  if (!all_checked(world, on_hand)) return;
  const Schedule schedule = schedule_for_deck(deck, grid.pipeline_ranks());
  const std::vector<int64_t> counts = partition_units(model_units(deck.model), schedule.num_stages, partition);
  const std::vector<double> stage_bytes = stage_persistent_state_bytes(deck.model, deck.training.optimizer, counts);
  std::string stages;
  double mine = 0.0;
  for (int stage : rank_stages(schedule, grid.pipeline_rank())) {
    mine += stage_bytes[static_cast<size_t>(stage)];
    stages += (stages.empty() ? "" : ", ") + std::to_string(stage);
  }
  const std::string which = "stage" + std::string(stages.find(',') == std::string::npos ? " " : "s ") + stages;
  refuse_if_a_domain_is_over(world, on_hand, mine, [&](double need, double available, int ranks) {
    const std::string holder = on_hand.per_node
        ? "the " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on node " + host_name() +
              " (this one with " + which + ")"
        : "rank " + std::to_string(world_rank(world)) + " (" + which + ")";
    return "the model does not fit in memory: " + holder + (on_hand.per_node ? " need" : " needs") +
           " at least " + bytes_text(need) + (on_hand.per_node ? " for their" : " for its") +
           " parameters' " + state_text(deck.training.optimizer) + " (" + size_key(deck) + " over " +
           std::to_string(schedule.num_stages) + " stages), but " +
           (on_hand.per_node ? "the node has " : "its GPU has ") + bytes_text(available) + " of " +
           on_hand.source + "; " + (on_hand.per_node ? "put fewer ranks on each node, " : "use more stages, ") +
           "or make the model smaller";
  });
}

void check_profile_fits(const Deck& deck, MPI_Comm comm, const MemoryOnHand& on_hand) {
  if (!all_checked(comm, on_hand)) return;
  int ranks = 1;
  MPI_CHECK(MPI_Comm_size(comm, &ranks));
  const int stages = static_cast<int>(std::min<int64_t>(ranks, model_units(deck.model)));
  const std::vector<int64_t> counts = partition_units(model_units(deck.model), stages, {});
  const std::vector<double> bytes = stage_persistent_state_bytes(deck.model, deck.training.optimizer, counts);
  const double largest = *std::max_element(bytes.begin(), bytes.end());
  refuse_if_a_domain_is_over(comm, on_hand, largest, [&](double need, double available, int on_node) {
    const std::string holder = on_hand.per_node
        ? "the " + std::to_string(on_node) + (on_node == 1 ? " rank" : " ranks") + " on node " + host_name()
        : "rank " + std::to_string(world_rank(comm));
    return "the model's profile does not fit in memory: " + holder +
           (on_hand.per_node ? " need" : " needs") + " at least " + bytes_text(need) +
           ", each building in turn the largest of the " + std::to_string(stages) +
           " stages of the uniform partition that its stage chains time, for its parameters' " +
           state_text(deck.training.optimizer) + " (" + size_key(deck) + "), but " +
           (on_hand.per_node ? "the node has " : "its GPU has ") + bytes_text(available) + " of " +
           on_hand.source + "; profile on more ranks, or with fewer ranks on each node";
  });
}

namespace {

// The least, over the contiguous partitions of the units into `stages`
// stages (the pinned units on the end stages), of the largest stage's
// persistent bytes: a binary search on that largest stage with a greedy fill.
double least_largest_stage_bytes(const Deck& deck, int stages) {
  const ModelFamily& family = model_family(deck.model);
  std::vector<double> bytes;
  for (const CostUnitInfo& unit : cost_units(deck.model))
    bytes.push_back(persistent_state_bytes(unit, deck.training.optimizer));
  // The pinned units join their end stage's first (last) partition unit.
  for (int i = 0; i < family.pinned_front; ++i) bytes[static_cast<size_t>(family.pinned_front)] += bytes[static_cast<size_t>(i)];
  for (int i = 0; i < family.pinned_back; ++i) bytes[bytes.size() - 2 - static_cast<size_t>(i)] += bytes[bytes.size() - 1 - static_cast<size_t>(i)];
  bytes = std::vector<double>(bytes.begin() + family.pinned_front, bytes.end() - family.pinned_back);
  const auto stages_needed = [&](double limit) {
    int used = 1;
    double fill = 0.0;
    for (double b : bytes) {
      if (b > limit) return stages + 1;
      if (fill + b > limit) {
        ++used;
        fill = 0.0;
      }
      fill += b;
    }
    return used;
  };
  double low = *std::max_element(bytes.begin(), bytes.end()), high = 0.0;
  for (double b : bytes) high += b;
  for (int i = 0; i < 60 && high - low > 1.0; ++i) {
    const double mid = 0.5 * (low + high);
    (stages_needed(mid) <= stages ? high : low) = mid;
  }
  return high;
}

}  // namespace

void check_budget_holds_parameters(const Deck& deck, int stages) {
  const double budget = deck.pipeline.memory_budget_mb * 1024.0 * 1024.0;
  if (deck.pipeline.partition_strategy != PartitionStrategy::Balanced || budget <= 0.0) return;
  const double least = least_largest_stage_bytes(deck, stages);
  if (least <= budget) return;
  char budget_text[32];
  std::snprintf(budget_text, sizeof budget_text, "%g", deck.pipeline.memory_budget_mb);
  throw InputError(deck.where("pipeline.memory_budget_mb") + " = " + budget_text +
                   ": below the " + bytes_text(least) + " that the largest of " + std::to_string(stages) +
                   " stages holds for its parameters' " + state_text(deck.training.optimizer) +
                   " alone, whatever the partition; pipeline.partition = \"balanced\" needs a budget above "
                   "that (and room for the activations), or more stages");
}

std::string persistent_state_summary(const Deck& deck, const std::vector<int64_t>& units_per_stage) {
  const std::vector<double> bytes =
      stage_persistent_state_bytes(deck.model, deck.training.optimizer, units_per_stage);
  std::string per_stage;
  for (size_t s = 0; s < bytes.size(); ++s) per_stage += (s ? ", " : "") + bytes_text(bytes[s]);
  return "memory: " + count_text(model_parameters(deck.model)) + " parameters; the stages hold at least " +
         per_stage + " for their parameters' " + state_text(deck.training.optimizer) +
         ", before activations and workspaces (docs/memory.md)";
}

}  // namespace pt
