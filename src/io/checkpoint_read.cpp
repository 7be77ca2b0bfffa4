// checkpoint_read.cpp: loading a checkpoint, collectively, at any stage count.
//
// 1. rank 0 resolves the request to candidate directories ("latest": the one
//    `latest` names, then older ones as fallbacks);
// 2. rank 0 inspects a candidate: manifest (format, version, state), stage
//    files present with the recorded sizes and saved together with the
//    manifest (checkpoint_bind.hpp: same save id and step, exactly the listed
//    datasets with the listed CRC-32s), and an index of every parameter
//    (name -> file, shape) checked against all ranks' parameters (missing or
//    extra layers, shapes, optimizer state);
// 3. every rank reads its own parameters from whichever files hold them and
//    checks each dataset's CRC-32.
// After steps 1-3 the ranks agree on the outcome (ckpt::agree). A broken
// candidate (missing, truncated, corrupt or damaged file, files not saved
// together) is skipped for the next older one when resolving "latest";
// anything else is an InputError with the same message on every rank.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "checkpoint_bind.hpp"
#include "checkpoint_deck.hpp"
#include "pipetrain/base/hdf5_lock.hpp"
#include "checkpoint_h5.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

namespace {

using namespace ckpt;

// Problem kinds, by severity: a broken checkpoint may be skipped for an older
// one; an unusable one (or a bad request) ends the job.
constexpr int kBroken = 1;
constexpr int kUnusable = 2;

class CheckpointProblem : public InputError {
 public:
  CheckpointProblem(int kind, const std::string& path, const std::string& what)
      : InputError("checkpoint " + path + ": " + what), kind_(kind) {}
  int kind() const { return kind_; }

 private:
  int kind_;
};

[[noreturn]] void broken(const std::string& path, const std::string& what) {
  throw CheckpointProblem(kBroken, path, what);
}
[[noreturn]] void unusable(const std::string& path, const std::string& what) {
  throw CheckpointProblem(kUnusable, path, what);
}

Problem attempt(const std::function<void()>& work) {
  try {
    work();
  } catch (const CheckpointProblem& e) {
    return Problem{e.kind(), e.what()};
  } catch (const std::exception& e) {
    return Problem{kUnusable, e.what()};
  }
  return {};
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// ---- 1. which directories to try -------------------------------------------

struct Candidates {
  std::vector<std::string> dirs;
  bool fallback = false;  // resolving latest: broken ones may be skipped
};

std::vector<int64_t> step_directories(const std::string& root) {
  std::vector<int64_t> steps;
  for (const std::string& name : directory_entries(root)) {
    int64_t s = 0;
    if (parse_step_dir_name(name, s) && is_directory(join_path(root, name))) steps.push_back(s);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// The checkpoint `latest` names, then every older one, newest first.
Candidates resolve_root(const std::string& root) {
  if (!is_directory(root)) unusable(root, "no such directory: nothing to resume from");
  const std::vector<int64_t> steps = step_directories(root);
  const std::string pointer = join_path(root, kLatest);
  std::string name;
  if (FILE* f = std::fopen(pointer.c_str(), "r")) {
    char buf[256] = {0};
    if (std::fgets(buf, sizeof buf, f)) name = buf;
    std::fclose(f);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  }
  int64_t newest = 0;
  Candidates c;
  c.fallback = true;
  if (parse_step_dir_name(name, newest) && is_directory(join_path(root, name))) {
    c.dirs.push_back(join_path(root, name));
  } else {
    if (steps.empty()) unusable(root, "no checkpoint here (no `latest` and no step_* directory)");
    newest = steps.front() + 1;
    warn(pointer + " is missing or names no checkpoint directory; trying the newest step_* "
         "directory");
  }
  for (int64_t s : steps)
    if (s < newest) c.dirs.push_back(join_path(root, step_dir_name(s)));
  return c;
}

Candidates resolve(const std::string& spec, const Deck& deck) {
  if (spec == "latest") return resolve_root(checkpoint_root(deck));
  const std::string base = spec.substr(spec.find_last_of('/') + 1);
  if (is_regular_file(spec) && base == kManifest) return {{parent_of(spec)}, false};
  if (is_directory(spec) && is_regular_file(join_path(spec, kManifest))) return {{spec}, false};
  if (is_regular_file(join_path(spec, kLatest)) || (is_directory(spec) && !step_directories(spec).empty()))
    return resolve_root(spec);
  if (is_directory(spec)) broken(spec, "no " + std::string(kManifest) + " (not a checkpoint, or its write never finished)");
  if (std::filesystem::exists(spec))
    unusable(spec, "not a checkpoint: give a checkpoint directory (step_NNNNNNNN, holding " +
                       std::string(kManifest) + "), its " + kManifest + ", or a checkpoint root");
  unusable(spec, "no such file or directory");
}

// ---- 2. manifest and index (rank 0) ----------------------------------------

struct ParamShape {
  std::string name;
  Shape shape;
  // The optimizer keeps state for it: not for a running statistic
  // (Param::running_statistic, batch normalisation), which is a value only.
  bool has_state = true;
};

struct Entry {
  std::string file;  // stage file name within the directory
  Shape shape;       // of value
  bool state1 = false, state2 = false;
};

struct Inspection {
  Binding binding;  // the manifest's format_version, step and checkpoint_id
  TrainingCounters counters;  // optimizer_updates resolved to the step when absent
  std::string deck_text;
  std::map<std::string, Entry> index;
};

Shape dataset_shape(hid_t dset) {
  H5Id space(H5Dget_space(dset), H5Sclose);
  const int ndims = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(ndims, 0)));
  if (ndims > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return Shape(dims.begin(), dims.end());
}

H5Id open_file(const std::string& path) {
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) broken(path, "cannot be opened as an HDF5 file (truncated or corrupt)");
  return file;
}

// format_version of manifest.h5: damaged (broken), or one this pipetrain
// does not read (unusable: older checkpoints would not do either).
int64_t read_manifest_version(hid_t m, const std::string& path) {
  int64_t version = 0;
  if (!read_format_version(m, version) || version < 1)
    broken(path, "attribute format_version is damaged or missing (not a positive integer)");
  const std::string here = std::to_string(kCheckpointFormatVersion);
  if (version > kCheckpointFormatVersion)
    unusable(path, "format_version " + std::to_string(version) +
                       " is newer than this pipetrain reads (up to " + here +
                       "); use a newer pipetrain");
  if (version < kOldestReadableCheckpointFormat)
    unusable(path, "format_version " + std::to_string(version) +
                       " was written by an older pipetrain, whose checkpoints do not bind their "
                       "files to the manifest; this pipetrain reads format_version " +
                       std::to_string(kOldestReadableCheckpointFormat) + " to " + here +
                       " (resume it with the pipetrain that wrote it, or rewrite it as "
                       "docs/checkpoint-format.md describes)");
  return version;
}

// The training counters; absent (a hand-written checkpoint) means "updates =
// step, no loss scaler state"; present but damaged is corruption.
void read_counters(hid_t m, const std::string& path, Inspection& ins) {
  TrainingCounters& c = ins.counters;
  c.optimizer_updates = ins.binding.step;
  if (H5Aexists(m, "optimizer_updates") <= 0) return;
  const bool ok = read_attr(m, "optimizer_updates", c.optimizer_updates) &&
                  read_attr(m, "loss_scale", c.loss_scale) &&
                  read_attr(m, "loss_scale_run", c.loss_scale_run) &&
                  read_attr(m, "skipped_steps", c.skipped_steps);
  if (!ok || c.optimizer_updates < 0 || c.optimizer_updates > ins.binding.step ||
      c.loss_scale < 0.0 || c.skipped_steps < 0)
    broken(path, "the training counters (optimizer_updates, loss_scale, loss_scale_run, "
                 "skipped_steps) are damaged");
}

// Root attributes of manifest.h5: format, version, step, checkpoint_id, deck.
// A damaged attribute is corruption, like a damaged file.
void read_manifest_state(hid_t m, const std::string& path, Inspection& ins) {
  std::string format;
  const bool named = read_attr(m, "format", format);
  if (!named || format != kFormatName)
    broken(path, "attribute format is " + (named ? "\"" + format + "\"" : std::string("missing")) +
                     ", not \"" + kFormatName + "\" (a damaged manifest, or not a pipetrain checkpoint)");
  Binding& b = ins.binding;
  b.version = read_manifest_version(m, path);
  // Before anything the manifest lists is trusted: damage to it is named
  // as damage to it, not to the stage file it now misdescribes.
  if (b.version >= 3) {
    const std::string why = manifest_digest_mismatch(m);
    if (!why.empty()) broken(path, why);
  }
  if (!read_attr(m, "step", b.step) || b.step < 0)
    broken(path, "attribute step is damaged or missing");
  if (!read_attr(m, "checkpoint_id", b.id) || b.id.empty())
    broken(path, "attribute checkpoint_id is damaged or missing");
  read_attr(m, "deck", ins.deck_text);
  read_counters(m, path, ins);
}

// What manifest.h5 records about one stage file.
struct FileRecord {
  int64_t bytes = -1;
  int64_t file_crc = -1;  // the whole file's CRC-32; -1: not recorded (an older save)
  std::map<std::string, int64_t> crc_by_path;  // every dataset the file holds
};

// The parameters of one (open) stage file, into the index.
void index_params(hid_t file, const std::string& path, const std::string& name, Inspection& ins) {
  H5Id params(H5Gopen2(file, "params", H5P_DEFAULT), H5Gclose);
  if (!params.valid()) broken(path, "no /params group");
  for (const std::string& pname : group_members(params.get())) {
    const std::string value = pname + "/value";
    H5Id dset(H5Dopen2(params.get(), value.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dset.valid()) broken(path, "params/" + value + " cannot be opened");
    if (ins.index.count(pname))
      unusable(path, "parameter " + pname + " is also in " + ins.index[pname].file);
    Entry& e = ins.index[pname];
    e.file = name;
    e.shape = dataset_shape(dset.get());
    e.state1 = has_link(params.get(), pname + "/state1");
    e.state2 = has_link(params.get(), pname + "/state2");
  }
}

// Before HDF5 opens a stage file whose whole-file CRC-32 the (verified)
// manifest records: its bytes are the ones saved. A file from another save
// does not hold this checkpoint's id anywhere in its bytes.
void check_stage_file_bytes(const std::string& path, uint32_t recorded, const std::string& id) {
  const std::string why = file_bytes_mismatch(path, recorded, kManifest);
  if (why.empty()) return;
  if (!file_holds_text(path, id))
    broken(path, "written by another save, or damaged where it records its checkpoint_id: its bytes do not "
                 "hold the checkpoint_id " + id + " that " + kManifest +
                     " records; the files of this checkpoint were not saved together");
  broken(path, why);
}

// One stage file: present, saved together with the manifest, of the
// recorded size, and its parameters. A file from another save is named as
// such even when its size differs.
void index_file(const std::string& dir, const std::string& name, const FileRecord& record,
                Inspection& ins) {
  const std::string path = join_path(dir, name);
  const int64_t actual = file_bytes(path);
  if (actual < 0) broken(path, "missing (listed in " + std::string(kManifest) + ")");
  if (actual < record.bytes)
    broken(path, "truncated: " + std::to_string(actual) + " bytes on disk, " + kManifest +
                     " records " + std::to_string(record.bytes));
  if (record.file_crc >= 0) check_stage_file_bytes(path, static_cast<uint32_t>(record.file_crc), ins.binding.id);
  H5Id file = open_file(path);
  std::string why = binding_mismatch(file.get(), ins.binding);
  if (why.empty()) why = dataset_mismatch(file.get(), record.crc_by_path);
  if (!why.empty()) broken(path, why);
  if (actual != record.bytes)
    broken(path, "size " + std::to_string(actual) + " bytes differs from the " +
                     std::to_string(record.bytes) + " recorded in " + kManifest);
  index_params(file.get(), path, name, ins);
}

// The checkpoint's parameters against the model the deck builds here.
void match_model(const std::string& dir, const Inspection& ins, const std::vector<ParamShape>& want,
                 LoadMode mode, const Deck& deck) {
  // A checkpoint of another model family (an MLP's for a GPT deck) says so
  // first, not as a list of missing layers.
  const auto saved = deck_values(ins.deck_text);
  const auto type = saved.find("model.type");
  const std::string now = "\"" + deck.model.type + "\"";
  if (type != saved.end() && type->second != now)
    unusable(dir, "a checkpoint of a model.type = " + type->second + " model, but the deck's model.type is " +
                      now + ": load it with the deck it was trained with");
  std::vector<std::string> missing, extra;
  std::map<std::string, bool> wanted;
  for (const ParamShape& p : want) {
    wanted[p.name] = true;
    if (!ins.index.count(p.name)) missing.push_back(p.name);
  }
  for (const auto& [name, entry] : ins.index)
    if (!wanted.count(name)) extra.push_back(name);
  if (!missing.empty())
    unusable(dir, "missing layer(s) " + list_names(missing) + " that the deck's model has (" +
                      std::to_string(want.size()) + " parameters; the checkpoint holds " +
                      std::to_string(ins.index.size()) + ")");
  if (!extra.empty())
    unusable(dir, "holds layer(s) " + list_names(extra) + " that the deck's model lacks");
  const bool adamw = deck.training.optimizer == OptimizerKind::AdamW;
  for (const ParamShape& p : want) {
    const Entry& e = ins.index.at(p.name);
    const std::string file = join_path(dir, e.file);
    if (e.shape != p.shape)
      unusable(file, "params/" + p.name + "/value has shape " + shape_string(e.shape) +
                         " but the deck's model needs " + shape_string(p.shape) +
                         " (the deck's [model] differs from the checkpoint's" +
                         padding_note(ins.deck_text, deck) + ")");
    if (mode == LoadMode::Resume && p.has_state && (!e.state1 || (adamw && !e.state2)))
      unusable(file, "params/" + p.name + " has no " + (e.state1 ? "state2" : "state1") +
                         ": the checkpoint lacks the optimizer state of training.optimizer = \"" +
                         kind_name(deck.training.optimizer) +
                         "\" (training.init_from loads weights only)");
  }
}

Inspection inspect(const std::string& dir, LoadMode mode, const Deck& deck,
                   const std::vector<ParamShape>& want) {
  QuietHdf5 quiet;
  const std::string path = join_path(dir, kManifest);
  if (!is_regular_file(path)) broken(path, "missing (the checkpoint was never completed)");
  const std::string damage = manifest_bytes_mismatch(dir);  // before HDF5 parses it
  if (!damage.empty()) broken(path, damage);
  const bool whole_file_checks = file_bytes(join_path(dir, kManifestCrc)) >= 0;
  Inspection ins;
  H5Id m = open_file(path);
  read_manifest_state(m.get(), path, ins);
  std::string optimizer;
  OptimizerKind stored = deck.training.optimizer;
  if (mode == LoadMode::Resume && read_attr(m.get(), "optimizer", optimizer) &&
      !(parse_kind(optimizer, stored) && stored == deck.training.optimizer))
    unusable(path, "written with training.optimizer = \"" + optimizer + "\" but the deck has \"" +
                       kind_name(deck.training.optimizer) +
                       "\"; a resume needs the same optimizer (training.init_from loads weights only)");
  H5Id files(H5Gopen2(m.get(), "files", H5P_DEFAULT), H5Gclose);
  if (!files.valid()) broken(path, "no /files group");
  for (const std::string& name : group_members(files.get())) {
    H5Id g(H5Gopen2(files.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
    FileRecord record;
    if (!g.valid() || !read_attr(g.get(), "bytes", record.bytes))
      broken(path, "files/" + name + " has no bytes attribute");
    if (!read_file_record(g.get(), record.crc_by_path))
      broken(path, "files/" + name + ": its datasets and crc32 lists are missing or damaged");
    // A stage file's bytes are checked before HDF5 opens it whenever the
    // manifest records their CRC-32 (also when manifest.crc32 was lost);
    // with manifest.crc32 the record is required.
    if (!read_attr(g.get(), "file_crc32", record.file_crc)) {
      record.file_crc = -1;
      if (whole_file_checks) broken(path, "files/" + name + " has no file_crc32 attribute");
    }
    index_file(dir, name, record, ins);
  }
  match_model(dir, ins, want, mode, deck);
  const std::string model_keys = mode == LoadMode::Resume ? model_key_differences(ins.deck_text, deck) : "";
  if (!model_keys.empty())
    unusable(dir, "saved with another model: " + model_keys +
                      "; a resume continues the model it saved (use the checkpoint's values, or start a new "
                      "run from its weights with training.init_from)");
  return ins;
}

// ---- 3. every rank reads its parameters ------------------------------------

// Reads one float32 dataset into t and checks its CRC-32; returns its bytes.
double read_checked(hid_t file, const std::string& path, const std::string& name, Tensor& t) {
  H5Id dset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) broken(path, name + " cannot be opened");
  H5Id type(H5Dget_type(dset.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
    unusable(path, name + " must be float32");
  if (dataset_shape(dset.get()) != t.shape())
    unusable(path, name + " has shape " + shape_string(dataset_shape(dset.get())) +
                       " but the deck's model needs " + shape_string(t.shape()));
  Tensor host = t.device() == Device::CPU ? t : Tensor::empty(t.shape(), DType::F32,
                                                             MemCategory::Workspace, Device::CPU);
  uint32_t actual = 0;
  if (!read_f32(dset.get(), host.f32(), t.shape(), actual))
    broken(path, name + " cannot be read (truncated or corrupt file)");
  int64_t stored = -1;
  if (!read_attr(dset.get(), "crc32", stored)) broken(path, name + " has no crc32 attribute");
  if (static_cast<int64_t>(actual) != stored) {
    char msg[160];
    std::snprintf(msg, sizeof msg, " checksum mismatch: crc32 attribute 0x%08llx, data 0x%08x",
                  static_cast<unsigned long long>(stored), actual);
    broken(path, name + msg);
  }
  if (t.device() != Device::CPU) copy_tensor(host, t);
  return static_cast<double>(host.bytes());
}

double read_params(const std::string& dir, const std::map<std::string, std::string>& where,
                   LoadMode mode, const std::vector<Param*>& params) {
  QuietHdf5 quiet;
  std::map<std::string, H5Id> files;
  double bytes = 0.0;
  for (Param* p : params) {
    const std::string& name = where.at(p->name);
    const std::string path = join_path(dir, name);
    if (!files.count(name)) files.emplace(name, open_file(path));
    const hid_t f = files.at(name).get();
    const std::string base = "params/" + p->name + "/";
    for (const ParamState& s : param_state(*p)) {
      bytes += read_checked(f, path, base + s.name, *s.tensor);
      if (mode != LoadMode::Resume) break;  // weights only: the value, listed first
    }
    note_value_written(*p);  // a weight copy is stale until the next pass rounds it
  }
  return bytes;
}

// ---- glue --------------------------------------------------------------------

// Rank 0: every rank's parameter names, whether each has optimizer state, and
// shapes, in global order.
std::vector<ParamShape> gather_params(const std::vector<Param*>& params, MPI_Comm comm) {
  std::ostringstream mine;
  for (const Param* p : params) {
    mine << p->name << ' ' << (p->running_statistic ? 0 : 1);
    for (int64_t d : p->value.shape()) mine << ' ' << d;
    mine << '\n';
  }
  const std::string text = mine.str();
  int rank = 0, size = 1, count = static_cast<int>(text.size());
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size), 0);
  timed_gather(&count, 1, MPI_INT, counts.data(), 0, comm, "the parameter shapes gather");
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::string all(rank == 0 ? static_cast<size_t>(offsets.back() + counts.back()) : 0, '\0');
  timed_gatherv(text.data(), count, MPI_CHAR, all.data(), counts.data(), offsets.data(), 0, comm,
                "the parameter shapes gather");
  std::vector<ParamShape> out;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    ParamShape p;
    int has_state = 1;
    fields >> p.name >> has_state;
    p.has_state = has_state != 0;
    for (int64_t d; fields >> d;) p.shape.push_back(d);
    out.push_back(p);
  }
  return out;
}

// "name\tfile\n" lines <-> map.
std::string index_text(const Inspection& ins) {
  std::string text;
  for (const auto& [name, e] : ins.index) text += name + '\t' + e.file + '\n';
  return text;
}

std::map<std::string, std::string> parse_index(const std::string& text) {
  std::map<std::string, std::string> where;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) where[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return where;
}

}  // namespace

CheckpointRead load_checkpoint(const std::string& spec, LoadMode mode, const Deck& deck,
                               const std::string& resolved_deck,
                               const std::vector<Param*>& params, MPI_Comm comm) {
  Hdf5Lock lock;  // see hdf5_lock.hpp (a load runs before any save is in flight)
  const auto start = std::chrono::steady_clock::now();
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const std::vector<ParamShape> want = gather_params(params, comm);
  Candidates cands;
  Problem p = agree(comm, rank == 0 ? attempt([&] { cands = resolve(spec, deck); }) : Problem{});
  if (p) throw InputError(p.message);
  int shared[2] = {static_cast<int>(cands.dirs.size()), cands.fallback ? 1 : 0};
  timed_bcast(shared, 2, MPI_INT, 0, comm, "the checkpoint candidates broadcast");
  const int n = shared[0];
  cands.fallback = shared[1] == 1;
  for (int i = 0; i < n; ++i) {
    Inspection ins;
    const std::string dir = broadcast_text(comm, rank == 0 ? cands.dirs[i] : "");
    p = agree(comm, rank == 0 ? attempt([&] { ins = inspect(dir, mode, deck, want); }) : Problem{});
    double bytes = 0.0;
    if (!p) {
      const auto where = parse_index(broadcast_text(comm, index_text(ins)));
      p = agree(comm, attempt([&] { bytes = read_params(dir, where, mode, params); }));
    }
    if (!p) {
      CheckpointRead out;
      out.path = dir;
      out.step = ins.binding.step;
      timed_bcast(&out.step, 1, MPI_INT64_T, 0, comm, "the checkpoint step broadcast");
      out.counters = ins.counters;
      out.deck_text = ins.deck_text;  // read on rank 0
      long long ints[3] = {out.counters.optimizer_updates, out.counters.loss_scale_run,
                           out.counters.skipped_steps};
      timed_bcast(ints, 3, MPI_LONG_LONG, 0, comm, "the training counters broadcast");
      timed_bcast(&out.counters.loss_scale, 1, MPI_DOUBLE, 0, comm,
                  "the training counters broadcast");
      out.counters.optimizer_updates = ints[0];
      out.counters.loss_scale_run = ints[1];
      out.counters.skipped_steps = ints[2];
      timed_allreduce(&bytes, &out.bytes, 1, MPI_DOUBLE, MPI_SUM, comm, "the bytes-read sum");
      out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      timed_bcast(&out.seconds, 1, MPI_DOUBLE, 0, comm, "the load time broadcast");
      const std::string diff = rank == 0 && mode == LoadMode::Resume
                                   ? deck_differences(ins.deck_text, resolved_deck) : "";
      if (!diff.empty()) warn("resuming with deck values that differ from the checkpoint's: " + diff);
      return out;
    }
    if (p.kind == kBroken && cands.fallback && i + 1 < n) {
      if (rank == 0) warn(p.message + "; falling back to the previous checkpoint " + cands.dirs[i + 1]);
      continue;
    }
    throw InputError(p.message + (cands.fallback && p.kind == kBroken ? " (and no older good checkpoint)" : ""));
  }
  PT_FAIL("unreachable: no checkpoint candidate");
}

std::string checkpoint_dir(const Deck& deck, int64_t steps_done) {
  return join_path(checkpoint_root(deck), step_dir_name(steps_done));
}

bool any_checkpoint_in(const std::string& root) {
  return is_directory(root) &&
         (is_regular_file(join_path(root, kLatest)) || !step_directories(root).empty());
}

}  // namespace pt
