// replica_check.cpp: the comparison of parameter digests across
// data-parallel replicas (runtime/replica_check.hpp).
#include "pipetrain/runtime/replica_check.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// "replica 1 (world rank 3)", "replicas 0 (world rank 1) and 2 (world rank 5)".
std::string replica_list(const std::vector<int>& replicas, const std::vector<uint64_t>& world) {
  std::string text = replicas.size() == 1 ? "replica " : "replicas ";
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (i > 0) text += i + 1 == replicas.size() ? " and " : ", ";
    text += std::to_string(replicas[i]) + " (world rank " + std::to_string(world[replicas[i]]) + ")";
  }
  return text;
}

// The replicas holding each digest of one parameter, the most common first.
std::vector<std::pair<uint64_t, std::vector<int>>> holders(const std::vector<uint64_t>& digests) {
  std::map<uint64_t, std::vector<int>> by_digest;
  for (size_t r = 0; r < digests.size(); ++r) by_digest[digests[r]].push_back(static_cast<int>(r));
  std::vector<std::pair<uint64_t, std::vector<int>>> out(by_digest.begin(), by_digest.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size()
                                              : a.second.front() < b.second.front();
  });
  return out;
}

}  // namespace

bool replica_check_due(int64_t step, int64_t every, int64_t checkpoint_every, int64_t steps,
                       int replicas) {
  if (replicas < 2 || every <= 0) return false;
  const int64_t done = step + 1;
  return done % every == 0 || (checkpoint_every > 0 && (done % checkpoint_every == 0 || done == steps));
}

int64_t check_replicas_agree(std::vector<StageModel>& stages, Backend& be, MPI_Comm replicas,
                             int64_t step) {
  int count = 1;
  MPI_CHECK(MPI_Comm_size(replicas, &count));
  // This rank's row: its world rank, then one digest per parameter.
  std::vector<uint64_t> mine = {static_cast<uint64_t>(world_rank())};
  std::vector<std::pair<const StageModel*, const Param*>> params;
  for (StageModel& st : stages)
    for (Param* p : st.params()) {
      mine.push_back(be.payload_digest(p->value).checksum);
      params.emplace_back(&st, p);
    }
  const size_t row = mine.size();
  std::vector<uint64_t> all(row * static_cast<size_t>(count));
  timed_allgather(mine.data(), static_cast<int>(row), MPI_UINT64_T, all.data(), replicas,
                  "the replica check's parameter-digest all-gather");
  ++replica_checks_run();
  std::vector<uint64_t> world(static_cast<size_t>(count));
  for (int r = 0; r < count; ++r) world[r] = all[r * row];
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<uint64_t> digests(static_cast<size_t>(count));
    for (int r = 0; r < count; ++r) digests[r] = all[r * row + 1 + i];
    const auto groups = holders(digests);
    if (groups.size() == 1) continue;
    std::string split;
    for (size_t g = 0; g < groups.size(); ++g)
      split += std::string(g == 0 ? "" : ", ") + replica_list(groups[g].second, world) +
               (groups[g].second.size() == 1 ? " holds " : " hold ") + "digest " + hex(groups[g].first);
    const bool majority = groups[0].second.size() > groups[1].second.size();
    throw Error("data-parallel replicas disagree after step " + std::to_string(step) + ": stage " +
                std::to_string(params[i].first->stage) + ", parameter " + params[i].second->name +
                " (the first that differs): " + split +
                (majority ? "; the odd one out is " + replica_list(groups[1].second, world) : "") +
                ". Every replica applies the same update, so one of them was corrupted (silent data "
                "corruption, a nondeterministic kernel); the run stops before a checkpoint saves it "
                "(data_parallel.check_every, docs/reliability.md)");
  }
  return static_cast<int64_t>(params.size());
}

int64_t& replica_checks_run() {
  static int64_t runs = 0;
  return runs;
}

void corrupt_one_parameter(std::vector<StageModel>& stages, Backend& be) {
  Param* last = nullptr;
  for (StageModel& st : stages)
    for (Param* p : st.params()) last = p;
  PT_CHECK(last != nullptr, "corrupt_one_parameter: this rank holds no parameter");
  Tensor host = last->value.to(Device::CPU, MemCategory::Workspace);
  static_cast<unsigned char*>(host.raw())[2] ^= 0x40;  // element 0's top mantissa bit (f32)
  be.copy(host, last->value);
}

}  // namespace pt
