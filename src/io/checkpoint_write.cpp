// checkpoint_write.cpp: writing a checkpoint, collectively.
//
// 1. rank 0 makes <root>/step_N.tmp/ (removing a stale one) and draws the
//    save's random checkpoint_id;
// 2. every rank writes its stage file there (parameters keyed by global name,
//    each dataset with its CRC-32; the step and checkpoint_id), fsyncs it
//    and reads it back for the CRC-32 of the whole file;
// 3. rank 0 writes manifest.h5 (global state, resolved deck, checkpoint_id,
//    each file's size, whole-file CRC-32 and list of datasets with their
//    CRC-32s), fsyncs it, writes manifest.crc32 (the manifest's own size and
//    CRC-32, checkpoint_verify.cpp), fsyncs the directory, renames step_N.tmp to step_N, fsyncs the
//    root, then replaces `latest` (temp + fsync + rename);
// 4. a thread of rank 0 deletes old checkpoints while training goes on (the
//    next save, or the end of the process, waits for it).
// The phases are shared with the asynchronous save (checkpoint_save.hpp,
// checkpoint_async.cpp); every HDF5 call here holds Hdf5Lock.
// A job killed anywhere before the last rename leaves `latest` on the previous
// checkpoint; the stale .tmp directory is removed by the next save.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <thread>

#include "checkpoint_bind.hpp"
#include "checkpoint_h5.hpp"
#include "checkpoint_save.hpp"
#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/hdf5_lock.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"

namespace pt {

std::string checkpoint_root(const Deck& deck) {
  return deck.output.checkpoint_dir.empty() ? ckpt::join_path(deck.output.dir, "checkpoints")
                                            : deck.output.checkpoint_dir;
}

namespace ckpt {

namespace {

using Where = SaveTarget;

// Runs `work`; a failure becomes a Problem for agree().
Problem attempt(const std::function<void()>& work) {
  try {
    work();
  } catch (const std::exception& e) {
    return Problem{1, e.what()};
  }
  return {};
}

// Every rank throws the same pt::Error when any rank failed.
void agree_or_throw(MPI_Comm comm, const Problem& mine) {
  const Problem p = agree(comm, mine);
  if (p) throw Error("checkpoint write failed: " + p.message);
}

void prepare_directory(const Where& w) {
  std::error_code ec;
  std::filesystem::create_directories(w.root, ec);
  if (ec) throw Error("cannot create checkpoint directory " + w.root + ": " + ec.message());
  remove_tree(w.tmp_dir);
  std::filesystem::create_directory(w.tmp_dir, ec);
  if (ec) throw Error("cannot create " + w.tmp_dir + ": " + ec.message());
}

// A tensor's bytes on the host (a copy only when it lives on a device).
uint32_t write_tensor(hid_t group, const std::string& name, const Tensor& t) {
  const Tensor host = t.to(Device::CPU);
  return write_f32(group, name, host.f32(), host.shape());
}

// One parameter's datasets, recorded in `out`; HDF5 held for this parameter only.
void write_param(hid_t params_group, const StagedParam& p, StageFile& out) {
  Hdf5Lock lock;
  H5Id g = create_group(params_group, p.name);
  for (const StagedTensor& t : p.tensors)
    out.datasets.push_back({"params/" + p.name + "/" + t.name, write_tensor(g.get(), t.name, t.tensor)});
}

// The stage file's root attributes and /params group.
H5Id create_stage_file(const Where& w, const std::string& path, int64_t step, H5Id& group) {
  Hdf5Lock lock;
  H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw Error("cannot create " + path);
  write_attr(file.get(), "format", std::string(kStageFormatName));
  write_attr(file.get(), "format_version", kCheckpointFormatVersion);
  write_attr(file.get(), "step", step);
  write_attr(file.get(), "stage", static_cast<int64_t>(w.rank));
  write_attr(file.get(), "checkpoint_id", w.id);
  group = create_group(file.get(), "params");
  return file;
}

}  // namespace

std::vector<StagedParam> stage_params(const std::vector<Param*>& params, bool copy) {
  std::vector<StagedParam> staged;
  staged.reserve(params.size());
  for (Param* p : params) {
    StagedParam s{p->name, {}};
    for (const ParamState& state : param_state(*p))
      s.tensors.push_back({state.name, copy ? state.tensor->to(Device::CPU, MemCategory::CheckpointStaging)
                                            : *state.tensor});
    staged.push_back(std::move(s));
  }
  return staged;
}

namespace {

bool same_layout(const std::vector<StagedParam>& staged, const std::vector<Param*>& params) {
  if (staged.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<ParamState> states = param_state(*params[i]);
    if (staged[i].name != params[i]->name || staged[i].tensors.size() != states.size()) return false;
    for (size_t k = 0; k < states.size(); ++k)
      if (staged[i].tensors[k].name != states[k].name ||
          staged[i].tensors[k].tensor.shape() != states[k].tensor->shape())
        return false;
  }
  return true;
}

}  // namespace

bool stage_into(std::vector<StagedParam>& staged, const std::vector<Param*>& params) {
  if (!same_layout(staged, params)) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<ParamState> states = param_state(*params[i]);
    for (size_t k = 0; k < states.size(); ++k) copy_tensor(*states[k].tensor, staged[i].tensors[k].tensor);
  }
  return true;
}

int64_t staged_bytes(const std::vector<StagedParam>& staged) {
  int64_t bytes = 0;
  for (const StagedParam& p : staged)
    for (const StagedTensor& t : p.tensors) bytes += static_cast<int64_t>(t.tensor.bytes());
  return bytes;
}

StageFile write_stage_file(const Where& w, const std::vector<StagedParam>& params, int64_t step,
                           const PhaseHook& at_phase) {
  const std::string path = join_path(w.tmp_dir, stage_file_name(w.rank));
  const bool crash = fault_due(FaultHook::CrashInCheckpoint, w.rank, step);
  StageFile out;
  {
    H5Id group;
    H5Id file = create_stage_file(w, path, step, group);
    for (size_t i = 0; i < params.size(); ++i) {
      if (i == params.size() / 2) fault_point("checkpoint", step);  // tests: a stall mid-write
      if (crash && i == params.size() / 2) {
        {
          Hdf5Lock lock;
          H5Fflush(file.get(), H5F_SCOPE_LOCAL);
        }
        kill_if_due(FaultHook::CrashInCheckpoint, w.rank, step,
                    "while writing " + path + " (checkpoint of step " + std::to_string(step) + ")");
      }
      write_param(group.get(), params[i], out);
    }
    Hdf5Lock lock;
    group.reset();
    H5_CHECK(file.reset());
  }
  if (at_phase) at_phase("written");
  fsync_path(path);
  out.bytes = file_bytes(path);
  out.file_crc = checked_file_crc32(path);  // read back from the page cache
  if (at_phase) at_phase("fsynced");
  return out;
}

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// The global state and the stage files: sizes, datasets and CRC-32s.
void write_manifest(const Where& w, const Deck& deck, const std::string& resolved_deck,
                    const std::vector<int64_t>& partition, int64_t step, const TrainingCounters& counters,
                    const std::vector<int64_t>& bytes, const std::vector<int64_t>& file_crcs,
                    const std::vector<std::vector<DatasetCrc>>& lists) {
  Hdf5Lock lock;
  const std::string path = join_path(w.tmp_dir, kManifest);
  H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw Error("cannot create " + path);
  const hid_t f = file.get();
  write_attr(f, "format", std::string(kFormatName));
  write_attr(f, "format_version", kCheckpointFormatVersion);
  write_attr(f, "step", step);
  write_attr(f, "checkpoint_id", w.id);
  write_attr(f, "next_sample", step * deck.training.batch_size);
  write_attr(f, "lr_next", learning_rate(deck.training, step));
  write_attr(f, "optimizer_updates",
             counters.optimizer_updates < 0 ? step : counters.optimizer_updates);
  write_attr(f, "loss_scale", counters.loss_scale);
  write_attr(f, "loss_scale_run", counters.loss_scale_run);
  write_attr(f, "skipped_steps", counters.skipped_steps);
  write_attr(f, "total_steps", deck.training.steps);
  write_attr(f, "optimizer", std::string(kind_name(deck.training.optimizer)));
  write_attr(f, "data_seed", static_cast<int64_t>(deck.data.seed));
  write_attr(f, "init_seed", static_cast<int64_t>(deck.model.init_seed));
  write_attr(f, "rng", std::string("counter-based: every random value is a function of "
                                   "(seed, stream, index); the data seed, the init seed and "
                                   "the step are the whole state"));
  write_attr(f, "stages", static_cast<int64_t>(w.size));
  // Units per pipeline stage in use (a rank holds several stages under
  // interleaved and zb-v schedules; informational: loading is by layer).
  const int pipeline_stages = partition.empty() ? w.size : static_cast<int>(partition.size());
  write_attr(f, "partition", partition_units(model_units(deck.model), pipeline_stages, partition));
  write_attr(f, "created_utc", utc_now());
  write_attr(f, "deck", resolved_deck);
  H5Id files = create_group(f, "files");
  for (int r = 0; r < w.size; ++r) {
    H5Id g = create_group(files.get(), stage_file_name(r));
    write_attr(g.get(), "bytes", bytes[static_cast<size_t>(r)]);
    write_attr(g.get(), "file_crc32", file_crcs[static_cast<size_t>(r)]);
    write_attr(g.get(), "stage", static_cast<int64_t>(r));
    write_file_record(g.get(), lists[static_cast<size_t>(r)]);
  }
  files.reset();
  write_manifest_digest(f);  // last: over everything above
  H5_CHECK(file.reset());
  fsync_path(path);
}

// Replaces an existing step_N (a resumed run passing the same step again),
// then publishes the new checkpoint through `latest`.
void commit(const Where& w) {
  fsync_path(w.tmp_dir);
  if (is_directory(w.final_dir)) {
    const std::string old = w.final_dir + ".old.tmp";
    remove_tree(old);
    rename_path(w.final_dir, old);
    rename_path(w.tmp_dir, w.final_dir);
    fsync_path(w.root);
    remove_tree(old);
  } else {
    rename_path(w.tmp_dir, w.final_dir);
  }
  fsync_path(w.root);
  write_file_atomic(join_path(w.root, kLatest), w.name + "\n");
  fsync_path(w.root);
}

// Keeps `keep` checkpoints with step <= the new one's (the new one included)
// and removes stale .tmp entries. Checkpoints with a larger step (left by a
// run resumed from an older checkpoint) stay until this run overwrites them.
void prune(const Where& w, int64_t step, int64_t keep) {
  std::vector<int64_t> older;
  for (const std::string& name : directory_entries(w.root)) {
    int64_t s = 0;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)
      remove_tree(join_path(w.root, name));
    else if (parse_step_dir_name(name, s) && s < step && is_directory(join_path(w.root, name)))
      older.push_back(s);
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep - 1, 0)); i < older.size(); ++i)
    remove_tree(join_path(w.root, step_dir_name(older[i])));
}

// Runs one pruning at a time on its own thread; waits for it when destroyed.
class Pruner {
 public:
  ~Pruner() { wait(); }
  void start(std::function<void()> work) {
    wait();
    thread_ = std::thread([work = std::move(work)] {
      try {
        work();
      } catch (const std::exception& e) {
        warn(std::string("removing old checkpoints: ") + e.what());
      }
    });
  }
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

Pruner& pruner() {
  static Pruner p;
  return p;
}

// Rank 0: every rank's file size, whole-file CRC-32 and datasets with their
// CRCs, in stage order.
void gather_results(const Where& w, const StageFile& mine, std::vector<int64_t>& bytes,
                    std::vector<int64_t>& file_crcs, std::vector<std::vector<DatasetCrc>>& lists) {
  const int64_t figures[2] = {mine.bytes, static_cast<int64_t>(mine.file_crc)};
  std::vector<int64_t> all_figures(2 * static_cast<size_t>(w.size), 0);
  timed_gather(figures, 2, MPI_INT64_T, all_figures.data(), 0, w.comm,
               "the checkpoint file sizes gather");
  bytes.assign(static_cast<size_t>(w.size), 0);
  file_crcs.assign(static_cast<size_t>(w.size), 0);
  for (size_t r = 0; r < bytes.size(); ++r) {
    bytes[r] = all_figures[2 * r];
    file_crcs[r] = all_figures[2 * r + 1];
  }
  const std::string text = list_text(mine.datasets);
  int count = static_cast<int>(text.size());
  std::vector<int> counts(static_cast<size_t>(w.size)), offsets(static_cast<size_t>(w.size), 0);
  timed_gather(&count, 1, MPI_INT, counts.data(), 0, w.comm, "the checkpoint dataset lists gather");
  for (int r = 1; r < w.size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::string all(w.rank == 0 ? static_cast<size_t>(offsets.back() + counts.back()) : 0, '\0');
  timed_gatherv(text.data(), count, MPI_CHAR, all.data(), counts.data(), offsets.data(), 0,
                w.comm, "the checkpoint dataset lists gather");
  lists.clear();
  for (int r = 0; w.rank == 0 && r < w.size; ++r)
    lists.push_back(parse_list_text(all.substr(static_cast<size_t>(offsets[r]),
                                               static_cast<size_t>(counts[r]))));
}

// CRC-32 of every dataset's CRC-32 (little-endian uint32) in the order of
// their paths (/params/<global parameter name>/<value|state1|state2>): the
// same for the same state whatever the layout, also when a rank holds
// several stages (interleaved, zb-v), whose file lists its stages' datasets
// together.
uint32_t digest_of(const std::vector<std::vector<DatasetCrc>>& lists) {
  std::vector<const DatasetCrc*> all;
  for (const auto& list : lists)
    for (const DatasetCrc& d : list) all.push_back(&d);
  std::sort(all.begin(), all.end(), [](const DatasetCrc* a, const DatasetCrc* b) { return a->path < b->path; });
  std::vector<uint32_t> crcs;
  for (const DatasetCrc* d : all) crcs.push_back(d->crc);
  return crc32_of(crcs.data(), crcs.size() * sizeof(uint32_t));
}

}  // namespace

Where begin_save(const Deck& deck, int64_t step, MPI_Comm comm) {
  Where w;
  w.start = std::chrono::steady_clock::now();
  w.comm = comm;
  MPI_CHECK(MPI_Comm_rank(comm, &w.rank));
  MPI_CHECK(MPI_Comm_size(comm, &w.size));
  w.root = checkpoint_root(deck);
  w.name = step_dir_name(step);
  w.final_dir = join_path(w.root, w.name);
  w.tmp_dir = w.final_dir + ".tmp";
  w.id = broadcast_text(comm, w.rank == 0 ? new_checkpoint_id() : "");
  if (w.rank == 0) pruner().wait();
  agree_or_throw(comm, w.rank == 0 ? attempt([&] { prepare_directory(w); }) : Problem{});
  return w;
}

CheckpointWrite finish_save(const Where& w, const Deck& deck, const std::string& resolved_deck,
                            int64_t step, const TrainingCounters& counters,
                            const std::vector<int64_t>& partition, const Problem& mine_problem,
                            const StageFile& mine, const PhaseHook& at_phase) {
  agree_or_throw(w.comm, mine_problem);
  std::vector<int64_t> bytes, file_crcs;
  std::vector<std::vector<DatasetCrc>> lists;
  gather_results(w, mine, bytes, file_crcs, lists);
  if (at_phase && w.rank != 0) at_phase("bound");
  double summary[3] = {0.0, 0.0, 0.0};  // bytes, seconds, digest
  agree_or_throw(w.comm, w.rank != 0 ? Problem{} : attempt([&] {
    write_manifest(w, deck, resolved_deck, partition.empty() ? deck.pipeline.partition : partition, step,
                   counters, bytes, file_crcs, lists);
    write_manifest_crc(w.tmp_dir);  // after the manifest is closed and fsynced
    summary[0] = static_cast<double>(file_bytes(join_path(w.tmp_dir, kManifest)));
    for (int64_t b : bytes) summary[0] += static_cast<double>(b);
    if (at_phase) at_phase("bound");
    commit(w);
    pruner().start([w, step, keep = deck.output.checkpoint_keep] { prune(w, step, keep); });
    summary[2] = digest_of(lists);
    summary[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - w.start).count();
  }));
  timed_bcast(summary, 3, MPI_DOUBLE, 0, w.comm, "the checkpoint summary broadcast");
  CheckpointWrite out;
  out.path = w.final_dir;
  out.bytes = summary[0];
  out.seconds = summary[1];
  out.digest = static_cast<uint32_t>(summary[2]);
  return out;
}

}  // namespace ckpt

void wait_for_checkpoint_pruning() { ckpt::pruner().wait(); }

CheckpointWrite save_checkpoint(const Deck& deck, const std::string& resolved_deck,
                                const std::vector<Param*>& params, int64_t step, MPI_Comm comm,
                                const TrainingCounters& counters, const std::vector<int64_t>& partition) {
  using namespace ckpt;
  const SaveTarget w = begin_save(deck, step, comm);
  StageFile mine;
  const Problem written = attempt([&] { mine = write_stage_file(w, stage_params(params, false), step); });
  return finish_save(w, deck, resolved_deck, step, counters, partition, written, mine);
}

}  // namespace pt
