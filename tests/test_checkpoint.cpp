// test_checkpoint.cpp: checkpoints resume bit for bit, reshard, initialise
// weights only, and reject every class of bad checkpoint on every rank.
//
// Runs at 1, 2 and 4 ranks; each case trains on the first P ranks of the
// world (a sub-communicator), so at 4 ranks a checkpoint written by 4 stages
// is loaded by 2, and the other way round. "Bitwise" compares every parameter
// bit, every step's loss, and the checkpoint digest (a CRC of every dataset's
// CRC-32, weights and optimizer moments, in global parameter order).
// Killing a rank in the middle of a write is tested end to end in
// tests/cli/test_checkpoint.sh (it needs a real process to die).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "../src/io/checkpoint_bind.hpp"  // the checksums, recomputed by reseal
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/data_files.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

namespace fs = std::filesystem;


// A fresh directory, the same on every rank; removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char buf[256] = {0};
    if (world_rank() == 0) {
      std::snprintf(buf, sizeof buf, "%s", (fs::temp_directory_path() / "pt_ckpt_XXXXXX").c_str());
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

Deck mlp_deck() {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 8;
  d.data.samples = 256;
  d.training.steps = 6;
  d.training.batch_size = 16;
  d.training.optimizer = OptimizerKind::AdamW;
  d.training.lr = 1e-2;
  d.training.warmup_steps = 1;
  d.training.weight_decay = 0.01;
  d.training.grad_clip = 1.0;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.timeout_s = 60;
  d.output.checkpoint_keep = 100;
  return d;
}

Deck gpt_deck() {
  Deck d = pt_test::tiny_gpt(mlp_deck(), 4);
  d.training.lr = 3e-3;
  d.training.lr_schedule = LrScheduleKind::Cosine;
  return d;
}

// What a segment of training left behind (on world rank 0 for params).
struct Segment {
  std::vector<double> losses;
  std::vector<float> params;
  uint32_t digest = 0;        // of the checkpoint saved at the end, if any
  int64_t loaded_step = -1;   // step of the checkpoint loaded, if any
};

// What the application gives a Trainer to read its data with (token files too).
ComputeSetup data_files_setup() {
  ComputeSetup setup;
  setup.open_dataset = make_dataset;
  return setup;
}

// Steps [from, to) on the first `stages` ranks: optionally loading `load`
// first (Resume or WeightsOnly) and saving into `save_dir` at the end.
Segment train(Deck deck, int stages, int64_t from, int64_t to, const std::string& load = "",
          LoadMode mode = LoadMode::Resume, const std::string& save_dir = "") {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < stages ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  Segment run;
  if (comm == MPI_COMM_NULL) return run;
  deck.pipeline.stages = stages;
  {
    Trainer trainer(deck, comm, data_files_setup());
    const std::string text = deck_to_toml(deck);
    if (!load.empty())
      run.loaded_step = load_checkpoint(load, mode, deck, text, trainer, comm).step;
    for (int64_t s = from; s < to; ++s) run.losses.push_back(trainer.train_step(s).loss);
    if (!save_dir.empty()) {
      deck.output.checkpoint_dir = save_dir;
      run.digest = save_checkpoint(deck, text, trainer, to, comm).digest;
    }
    run.params = trainer.gather_parameters();
  }
  MPI_Comm_free(&comm);
  return run;
}

void expect_bitwise(const Segment& got, const Segment& want, const std::string& label) {
  if (world_rank() != 0) return;
  ASSERT_EQ(got.params.size(), want.params.size()) << label;
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), got.params.size() * sizeof(float)), 0)
      << label << ": parameters differ";
  EXPECT_EQ(got.digest, want.digest) << label << ": checkpoint digests differ";
}

// 2K steps straight vs K steps, save, resume (at `to` stages), K steps.
void check_resume(const Deck& deck, int from_stages, int to_stages, const std::string& label) {
  TempDir tmp;
  const int64_t k = deck.training.steps / 2;
  const Segment straight = train(deck, to_stages, 0, 2 * k, "", LoadMode::Resume, tmp / "straight");
  const Segment first = train(deck, from_stages, 0, k, "", LoadMode::Resume, tmp / "ckpt");
  const Segment second = train(deck, to_stages, k, 2 * k, tmp / "ckpt", LoadMode::Resume, tmp / "ckpt");
  expect_bitwise(second, straight, label);
  if (world_rank() != 0) return;
  EXPECT_EQ(second.loaded_step, k) << label;
  for (int64_t s = 0; s < k; ++s) {
    EXPECT_EQ(first.losses[s], straight.losses[s]) << label << " step " << s;
    EXPECT_EQ(second.losses[s], straight.losses[k + s]) << label << " step " << k + s;
  }
}

int stages_here() { return std::min(world_size(), 4); }

TEST(Checkpoint, ResumeIsBitwiseMlp) {
  const int p = stages_here();
  check_resume(mlp_deck(), p, p, "mlp P=" + std::to_string(p));
}

TEST(Checkpoint, ResumeIsBitwiseGpt) {
  const int p = stages_here();
  check_resume(gpt_deck(), p, p, "gpt P=" + std::to_string(p));
}

// Token files (data.type = "hdf5"): `sizes` shards of one pseudo-random
// token sequence over the tiny GPT's 16 ids, and the same tokens in one
// file, written by rank 0 under `tmp`.
std::vector<std::string> write_token_shards(const TempDir& tmp, const std::vector<size_t>& sizes) {
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<uint8_t> tokens(total);
  uint64_t x = 12345;
  for (auto& t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint8_t>((x >> 33) % 16);
  }
  auto write = [](const std::string& path, const uint8_t* data, size_t n) {
    hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {n};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t dset = H5Dcreate2(file, "tokens", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (n > 0) H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
  };
  std::vector<std::string> paths;
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "train_%05zu.h5", i);
    paths.push_back(tmp / name);
    if (world_rank() == 0) write(paths.back(), tokens.data() + at, sizes[i]);
    at += sizes[i];
  }
  if (world_rank() == 0) write(tmp / "whole.h5", tokens.data(), total);
  MPI_Barrier(MPI_COMM_WORLD);
  return paths;
}

Deck token_deck(const std::string& path) {
  Deck d = gpt_deck();
  d.data.type = DataKind::Hdf5;
  d.data.path = path;
  d.data.shuffle = true;  // 700 tokens make 87 windows: the 96 samples of 6 steps cross an epoch
  return d;
}

// Shards read as one sequence: training on them equals training on one file
// holding the same tokens, and a resume over shards (listed, or by a glob
// pattern) equals the uninterrupted run bitwise.
TEST(Checkpoint, ResumeOverTokenShardsIsBitwise) {
  TempDir tmp;
  const std::vector<std::string> shards = write_token_shards(tmp, {100, 250, 1, 0, 349});
  const int p = stages_here();
  Deck listed = token_deck("");
  listed.data.path_list = shards;
  const Segment whole = train(token_deck(tmp / "whole.h5"), p, 0, 6);
  const Segment sharded = train(listed, p, 0, 6);
  expect_bitwise(sharded, whole, "shards vs one file");
  if (world_rank() == 0) {
    EXPECT_EQ(sharded.losses, whole.losses);
  }
  check_resume(listed, p, p, "gpt on listed shards P=" + std::to_string(p));
  check_resume(token_deck(tmp / "train_*.h5"), p, p, "gpt on a shard pattern P=" + std::to_string(p));
}

// Loading and saving again at once gives the same digest: weights and both
// optimizer moments are restored exactly.
TEST(Checkpoint, LoadThenSaveKeepsEveryBit) {
  TempDir tmp;
  const int p = stages_here();
  const Segment saved = train(gpt_deck(), p, 0, 2, "", LoadMode::Resume, tmp / "a");
  const Segment again = train(gpt_deck(), p, 2, 2, tmp / "a", LoadMode::Resume, tmp / "b");
  expect_bitwise(again, saved, "load then save");
}

// Every stage-count change the world allows, with another partition too.
TEST(Checkpoint, ReshardsBitwise) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "resharding needs at least 2 ranks";
  const std::vector<std::pair<int, int>> pairs =
      n >= 4 ? std::vector<std::pair<int, int>>{{4, 2}, {2, 4}, {4, 1}, {1, 3}}
             : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}};
  for (const auto& [from, to] : pairs) {
    const std::string label = std::to_string(from) + "->" + std::to_string(to);
    check_resume(mlp_deck(), from, to, "mlp " + label);
    check_resume(gpt_deck(), from, to, "gpt " + label);
  }
  Deck uneven = mlp_deck();
  uneven.pipeline.partition = {6, 2};  // 8 Linear layers, 6 + 2 instead of 4 + 4
  TempDir tmp;
  const Segment straight = train(mlp_deck(), 2, 0, 6, "", LoadMode::Resume, tmp / "straight");
  train(mlp_deck(), 2, 0, 3, "", LoadMode::Resume, tmp / "ckpt");
  const Segment second = train(uneven, 2, 3, 6, tmp / "ckpt", LoadMode::Resume, tmp / "ckpt");
  expect_bitwise(second, straight, "partition [4, 4] -> [6, 2]");
}

// training.init_from: the checkpoint's weights, fresh optimizer state, step 0.
TEST(Checkpoint, WeightsOnlyInitLoadsWeightsNotState) {
  TempDir tmp;
  const int p = stages_here();
  const Segment saved = train(mlp_deck(), p, 0, 3, "", LoadMode::Resume, tmp / "ckpt");
  const Segment init = train(mlp_deck(), 1, 0, 0, tmp / "ckpt", LoadMode::WeightsOnly, tmp / "init");
  const Segment resumed = train(mlp_deck(), 1, 3, 3, tmp / "ckpt", LoadMode::Resume, tmp / "resumed");
  if (world_rank() != 0) return;
  EXPECT_EQ(std::memcmp(init.params.data(), saved.params.data(), saved.params.size() * 4), 0);
  EXPECT_NE(init.digest, saved.digest) << "optimizer moments must start at zero";
  EXPECT_EQ(resumed.digest, saved.digest);
}

// ---- bad checkpoints ---------------------------------------------------------

// Loads `spec` on every rank; returns the InputError text ("" on success) and
// checks that every rank got the very same text.
std::string load_error(const Deck& deck, const std::string& spec, int64_t* step = nullptr) {
  const int p = stages_here();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < p ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  std::string message;
  if (comm != MPI_COMM_NULL) {
    Deck d = deck;
    d.pipeline.stages = p;
    Trainer trainer(d, comm, data_files_setup());
    try {
      const auto r = load_checkpoint(spec, LoadMode::Resume, d, deck_to_toml(d), trainer, comm);
      if (step) *step = r.step;
    } catch (const InputError& e) {
      message = e.what();
    }
    const uint64_t mine = std::hash<std::string>{}(message);
    uint64_t lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
    MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
    EXPECT_EQ(lo, hi) << "ranks disagree on the error";
    MPI_Comm_free(&comm);
  }
  return message;
}

// Rank 0 changes the files (once old checkpoints are pruned); the others wait.
void on_root(const std::function<void()>& change) {
  if (world_rank() == 0) {
    wait_for_checkpoint_pruning();
    change();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void flip_data_byte(const std::string& file, const std::string& dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(offset) + 5);
  char c = 0;
  io.read(&c, 1);
  c ^= 0x10;
  io.seekp(static_cast<std::streamoff>(offset) + 5);
  io.write(&c, 1);
}

// Replaces the root attribute `name` of `file` with an int64 or a text.
void set_root_attr(const std::string& file, const std::string& name, int64_t value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (H5Aexists(f, name.c_str()) > 0) H5Adelete(f, name.c_str());
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name.c_str(), H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  H5Sclose(s);
  H5Fclose(f);
}

void set_root_attr(const std::string& file, const std::string& name, const std::string& text) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (H5Aexists(f, name.c_str()) > 0) H5Adelete(f, name.c_str());
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name.c_str(), t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = text.c_str();
  H5Awrite(a, t, &p);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  H5Fclose(f);
}

void delete_root_attr(const std::string& file, const std::string& name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  H5Adelete(f, name.c_str());
  H5Fclose(f);
}

void set_format_version(const std::string& manifest, int64_t version) {
  set_root_attr(manifest, "format_version", version);
}

// Overwrites every occurrence of `from` in the file's bytes with `to` (as
// long): a damaged name, with the file's size unchanged.
void patch_bytes(const std::string& file, const std::string& from, const std::string& to) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + 1))
    bytes.replace(at, to.size(), to);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

void truncate_half(const std::string& file) { fs::resize_file(file, fs::file_size(file) / 2); }

// The checkpoint in `dir` without manifest.crc32 (as one copied without
// it): the manifest is read without its whole-file check, so that the checks
// inside it are what an edit of the manifest meets first.
void without_whole_file_checks(const std::string& dir) { fs::remove(fs::path(dir) / "manifest.crc32"); }

// Replaces the int64 attribute `name` of group `group` of `file` (absent: removed).
void set_group_attr(hid_t file, const std::string& group, const char* name, const int64_t* value) {
  hid_t g = H5Gopen2(file, group.c_str(), H5P_DEFAULT);
  if (H5Aexists(g, name) > 0) H5Adelete(g, name);
  if (value) {
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(g, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, value);
    H5Aclose(a);
    H5Sclose(s);
  }
  H5Gclose(g);
}

std::vector<std::string> stage_files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("stage_", 0) == 0) names.push_back(e.path().filename());
  return names;
}

// After an edit of a stage file: every checksum recomputed over the edited
// bytes as a save would have written them (each stage file's file_crc32, the
// manifest's manifest_crc32, manifest.crc32), so that the checks inside the
// stage file are what the edit meets.
void reseal(const std::string& dir) {
  const std::string manifest = dir + "/manifest.h5";
  hid_t f = H5Fopen(manifest.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  for (const std::string& name : stage_files_in(dir)) {
    const int64_t crc = ckpt::checked_file_crc32(dir + "/" + name);
    set_group_attr(f, "files/" + name, "file_crc32", &crc);
  }
  H5Adelete(f, "manifest_crc32");
  ckpt::write_manifest_digest(f);
  H5Fclose(f);
  ckpt::write_manifest_crc(dir);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    train(mlp_deck(), stages_here(), 0, 2, "", LoadMode::Resume, tmp / "good");
    on_root([&] { fs::copy(tmp / "good/step_00000002", tmp / "bad", fs::copy_options::recursive); });
  }
  std::string last_stage_file() const {
    char name[32];
    std::snprintf(name, sizeof name, "bad/stage_%03d.h5", stages_here() - 1);
    return tmp / name;
  }
  TempDir tmp;
};

TEST_F(BadCheckpoint, GoodOneLoads) { EXPECT_EQ(load_error(mlp_deck(), tmp / "bad"), ""); }

TEST_F(BadCheckpoint, TruncatedFile) {
  on_root([&] { truncate_half(last_stage_file()); });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  EXPECT_TRUE(has(e, last_stage_file() + ": truncated:")) << e;
}

// A flipped byte is found in the whole file's bytes before HDF5 reads it
// (HDF5 can crash on damaged metadata before a dataset's own CRC is read).
TEST_F(BadCheckpoint, WholeFileChecksumMismatch) {
  on_root([&] { flip_data_byte(last_stage_file(), "params/unit7.linear.weight/state2"); });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  EXPECT_TRUE(has(e, last_stage_file() + ": damaged or edited: its bytes have CRC-32 ")) << e;
  EXPECT_TRUE(has(e, ", but manifest.h5 records ")) << e;
}

// With the whole-file checksums recomputed after the edit, each dataset's own CRC.
TEST_F(BadCheckpoint, ChecksumMismatch) {
  on_root([&] {
    flip_data_byte(last_stage_file(), "params/unit7.linear.weight/state2");
    reseal(tmp / "bad");
  });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  EXPECT_TRUE(has(e, last_stage_file() + ": params/unit7.linear.weight/state2 checksum mismatch")) << e;
}

// Any byte of the manifest, wherever it falls (a name's length field made
// the HDF5 library crash inside H5Dread), is refused before HDF5 opens it.
TEST_F(BadCheckpoint, DamagedManifestBytesAreRefusedBeforeHdf5ReadsThem) {
  const std::string manifest = tmp / "bad/manifest.h5";
  for (const double where : {0.1, 0.3, 0.5, 0.7, 0.9}) {
    on_root([&] {
      fs::copy_file(tmp / "good/step_00000002/manifest.h5", manifest, fs::copy_options::overwrite_existing);
      std::fstream io(manifest, std::ios::in | std::ios::out | std::ios::binary);
      const auto at = static_cast<std::streamoff>(where * static_cast<double>(fs::file_size(manifest)));
      char c = 0;
      io.seekg(at);
      io.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      io.seekp(at);
      io.write(&c, 1);
    });
    const std::string e = load_error(mlp_deck(), tmp / "bad");
    EXPECT_TRUE(has(e, manifest + ": damaged or edited: its bytes have CRC-32 ")) << where << ": " << e;
    EXPECT_TRUE(has(e, ", but manifest.crc32 records ")) << e;
  }
}

TEST_F(BadCheckpoint, DamagedManifestCrcFile) {
  on_root([&] { std::ofstream(tmp / "bad/manifest.crc32") << "not a checksum\n"; });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  EXPECT_TRUE(has(e, tmp / "bad/manifest.h5: manifest.crc32 is damaged (expected one line: the CRC-32 of "
                           "manifest.h5 as 8 hex digits and its size in bytes)")) << e;
}

TEST_F(BadCheckpoint, ShapeDiffersFromDeck) {
  Deck wider = mlp_deck();
  wider.model.mlp.hidden_dim = 32;
  const std::string e = load_error(wider, tmp / "bad");
  EXPECT_TRUE(has(e, "params/unit0.linear.weight/value has shape (24, 12) but the deck's model "
                     "needs (32, 12)")) << e;
}

// Shapes that agree do not make the same model: a resume with another
// activation is refused with the key, its origin and both values; the
// attention kernels and the initialisation seed may differ.
TEST_F(BadCheckpoint, ResumeRefusesAnotherModelOfTheSameShapes) {
  Deck relu = mlp_deck();
  relu.model.activation = ActivationKind::Relu;
  relu.source_file = "deck.toml";
  relu.key_origin["model.activation"] = "deck.toml:6";
  const std::string e = load_error(relu, tmp / "bad");
  EXPECT_TRUE(has(e, "saved with another model: model.activation = \"relu\" (deck.toml:6), the checkpoint's "
                     "\"gelu\"; a resume continues the model it saved")) << e;
  Deck reseeded = mlp_deck();
  reseeded.model.init_seed += 1;
  EXPECT_EQ(load_error(reseeded, tmp / "bad"), "");
}

TEST_F(BadCheckpoint, MissingLayer) {
  Deck deeper = mlp_deck();
  deeper.model.mlp.depth = 9;
  const std::string e = load_error(deeper, tmp / "bad");
  EXPECT_TRUE(has(e, "checkpoint " + tmp / "bad" + ": missing layer(s) unit8.linear.weight")) << e;
}

TEST_F(BadCheckpoint, NewerFormatVersion) {
  on_root([&] {
    without_whole_file_checks(tmp / "bad");  // as a newer writer's checksums would pass
    set_format_version(tmp / "bad/manifest.h5", kCheckpointFormatVersion + 1);
  });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  const std::string newer = std::to_string(kCheckpointFormatVersion + 1);
  EXPECT_TRUE(has(e, tmp / "bad/manifest.h5: format_version " + newer +
                         " is newer than this pipetrain reads")) << e;
}

// Version 1 had nothing that binds the files to the manifest: refused.
TEST_F(BadCheckpoint, VersionOneIsRefused) {
  on_root([&] {
    without_whole_file_checks(tmp / "bad");  // version 1 had none
    set_format_version(tmp / "bad/manifest.h5", 1);
  });
  const std::string e = load_error(mlp_deck(), tmp / "bad");
  EXPECT_TRUE(has(e, tmp / "bad/manifest.h5: format_version 1 was written by an older pipetrain")) << e;
}

TEST_F(BadCheckpoint, OtherOptimizerCannotResume) {
  Deck sgd = mlp_deck();
  sgd.training.optimizer = OptimizerKind::Sgd;
  const std::string e = load_error(sgd, tmp / "bad");
  EXPECT_TRUE(has(e, "written with training.optimizer = \"adamw\" but the deck has \"sgd\"")) << e;
}

TEST_F(BadCheckpoint, NotACheckpoint) {
  EXPECT_TRUE(has(load_error(mlp_deck(), tmp / "nowhere"), "no such file or directory"));
  on_root([&] { fs::remove(tmp / "bad/manifest.h5"); });
  EXPECT_TRUE(has(load_error(mlp_deck(), tmp / "bad"), "no manifest.h5"));
}

// A padded vocabulary (model.vocab_multiple) is part of the shapes saved:
// it resumes bit for bit (the padded rows and their moments stay zero), and
// a deck padding otherwise is refused naming the key and both values; no
// re-padding on load.
TEST(Checkpoint, PaddedVocabularyResumesAndOtherPaddingIsRefused) {
  Deck padded = gpt_deck();
  padded.model.gpt.vocab_multiple = 24;  // 16 tokens in 24 rows
  const int p = stages_here();
  check_resume(padded, p, p, "gpt, padded vocabulary, P=" + std::to_string(p));
  TempDir tmp;
  train(padded, p, 0, 1, "", LoadMode::Resume, tmp / "ckpt");
  const std::string e = load_error(gpt_deck(), tmp / "ckpt");
  EXPECT_TRUE(has(e, "params/embed.wte/value has shape (24, 16) but the deck's model needs (16, 16) "
                     "(the deck's [model] differs from the checkpoint's: it was saved with "
                     "model.vocab_multiple = 24, the deck has 1; a checkpoint loads only with the "
                     "vocabulary padding it was saved with)")) << e;
}

// latest: a broken newest checkpoint (or a half-written .tmp one, as a
// crash leaves) is skipped for the previous good one; all broken is an error.
TEST(Checkpoint, LatestFallsBackToPreviousGood) {
  TempDir tmp;
  const int p = stages_here();
  Deck deck = mlp_deck();
  deck.output.checkpoint_dir = tmp / "root";
  train(deck, p, 0, 2, "", LoadMode::Resume, tmp / "root");
  train(deck, p, 2, 4, tmp / "root", LoadMode::Resume, tmp / "root");
  on_root([&] {
    fs::create_directory(tmp / "root/step_00000006.tmp");  // a crashed write
    std::ofstream(tmp / "root/step_00000006.tmp/stage_000.h5") << "partial";
  });
  int64_t step = -1;
  EXPECT_EQ(load_error(deck, "latest", &step), "");
  EXPECT_EQ(step, 4);
  on_root([&] { truncate_half(tmp / "root/step_00000004/stage_000.h5"); });
  EXPECT_EQ(load_error(deck, "latest", &step), "");
  EXPECT_EQ(step, 2) << "fell back to step 2";
  EXPECT_EQ(load_error(deck, tmp / "root", &step), "") << "a root directory means its latest";
  on_root([&] { flip_data_byte(tmp / "root/step_00000002/stage_000.h5", "params/unit0.linear.weight/value"); });
  const std::string e = load_error(deck, "latest");
  EXPECT_TRUE(has(e, "stage_000.h5: damaged or edited: its bytes have CRC-32 ") && has(e, "no older good checkpoint"))
      << e;
}

// ---- files that were not saved together -------------------------------------

// A run's checkpoints of steps 2 and 4 (latest), and another run's (other
// seeds) of step 4. Each case damages step 4: named explicitly it is refused
// with the message, and `latest` falls back to step 2.
class MismatchedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    deck.output.checkpoint_dir = tmp / "root";
    train(deck, stages_here(), 0, 2, "", LoadMode::Resume, tmp / "root");
    train(deck, stages_here(), 2, 4, tmp / "root", LoadMode::Resume, tmp / "root");
  }
  static std::string stage_name(int stage) {
    char name[32];
    std::snprintf(name, sizeof name, "stage_%03d.h5", stage);
    return name;
  }
  std::string newest(const std::string& name) const { return tmp / ("root/step_00000004/" + name); }
  std::string last_stage() const { return stage_name(stages_here() - 1); }
  // Refused when named, skipped (for step 2) by latest.
  void expect_refused_and_skipped(const std::string& text, const std::string& not_text = "") {
    const std::string e = load_error(deck, tmp / "root/step_00000004");
    EXPECT_TRUE(has(e, text)) << e;
    if (!not_text.empty()) {
      EXPECT_FALSE(has(e, not_text)) << e;
    }
    int64_t step = -1;
    EXPECT_EQ(load_error(deck, "latest", &step), "");
    EXPECT_EQ(step, 2) << "latest falls back to the previous good checkpoint";
  }
  TempDir tmp;
  Deck deck = mlp_deck();
};

TEST_F(MismatchedCheckpoint, StageFileOfAnOlderCheckpoint) {
  on_root([&] {
    fs::copy_file(tmp / ("root/step_00000002/" + last_stage()), newest(last_stage()),
                  fs::copy_options::overwrite_existing);
  });
  expect_refused_and_skipped(newest(last_stage()) +
                             ": written by another save, or damaged where it records its checkpoint_id: its bytes do not hold the checkpoint_id ");
  const std::string e = load_error(deck, tmp / "root/step_00000004");
  EXPECT_TRUE(has(e, "the files of this checkpoint were not saved together")) << e;
}

// With the whole-file checksums recomputed after the copy, the stage file's
// own records say which save it is of.
TEST_F(MismatchedCheckpoint, StageFileOfAnOlderCheckpointResealed) {
  on_root([&] {
    fs::copy_file(tmp / ("root/step_00000002/" + last_stage()), newest(last_stage()),
                  fs::copy_options::overwrite_existing);
    reseal(newest(""));
  });
  expect_refused_and_skipped(newest(last_stage()) +
                             ": written for step 2, but manifest.h5 says step 4; the files of "
                             "this checkpoint were not saved together");
}

TEST_F(MismatchedCheckpoint, StageFileOfAnotherRun) {
  Deck other = mlp_deck();
  other.model.init_seed += 11;
  other.data.seed += 13;
  train(other, stages_here(), 0, 4, "", LoadMode::Resume, tmp / "other");
  on_root([&] {
    fs::copy_file(tmp / ("other/step_00000004/" + last_stage()), newest(last_stage()),
                  fs::copy_options::overwrite_existing);
  });
  expect_refused_and_skipped(newest(last_stage()) + ": written by another save, or damaged where it records its checkpoint_id: its bytes do not hold the checkpoint_id ");
}

// The checks inside the files, met first in a checkpoint without the
// whole-file checksums (older, or written by tools/checkpoint_io.py): an
// edited manifest is named as the damaged file (its manifest_crc32, #44)
// before the stage files it now misdescribes are blamed; a stage file of
// another step is still named (StageFileOfAnOlderCheckpointResealed).
TEST_F(MismatchedCheckpoint, EditedManifestStep) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    set_root_attr(newest("manifest.h5"), "step", int64_t{6});
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": its contents have crc32 0x",
                             "written for step");
}

// The byte damage of the review (#44): a dataset name in the manifest's list
// used to be reported as the stage file holding an unlisted dataset.
TEST_F(MismatchedCheckpoint, DamagedNameInTheManifestBlamesTheManifest) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    patch_bytes(newest("manifest.h5"), "unit7.linear.weight", "unit7.linear.weigXt");
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": its contents have crc32 0x",
                             "holds dataset");
}

// The resolved deck stored in the manifest is covered too.
TEST_F(MismatchedCheckpoint, DamagedDeckTextInTheManifest) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    patch_bytes(newest("manifest.h5"), "batch_size", "batch_sizf");
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": its contents have crc32 0x");
}

TEST_F(MismatchedCheckpoint, ManifestWithoutItsChecksum) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    delete_root_attr(newest("manifest.h5"), "manifest_crc32");
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": attribute manifest_crc32 is damaged or missing");
}

// format_version 2 (before the manifest checked itself) still loads.
TEST_F(MismatchedCheckpoint, VersionTwoWithoutTheChecksumLoads) {
  on_root([&] {
    without_whole_file_checks(newest(""));  // version 2 had none
    delete_root_attr(newest("manifest.h5"), "manifest_crc32");
    hid_t m = H5Fopen(newest("manifest.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (const std::string& name : stage_files_in(newest(""))) set_group_attr(m, "files/" + name, "file_crc32", nullptr);
    H5Fclose(m);
    set_format_version(newest("manifest.h5"), 2);
    for (int s = 0; s < stages_here(); ++s) set_format_version(newest(stage_name(s)), 2);
  });
  int64_t step = -1;
  EXPECT_EQ(load_error(deck, tmp / "root/step_00000004", &step), "");
  EXPECT_EQ(step, 4);
}

// A damaged name is damage to that file, not a model that differs
// (tests/cli/test_checkpoint.sh renames one with h5py).
TEST_F(MismatchedCheckpoint, RenamedDataset) {
  on_root([&] {
    patch_bytes(newest(last_stage()), "unit7.linear.weight", "unit7.linear.weigXt");
    reseal(newest(""));
  });
  expect_refused_and_skipped(newest(last_stage()) + ": holds dataset(s) params/unit7.linear.weigXt/",
                             "missing layer");
  const std::string e = load_error(deck, tmp / "root/step_00000004");
  EXPECT_TRUE(has(e, "lacks params/unit7.linear.weight/")) << e;
}

TEST_F(MismatchedCheckpoint, DamagedManifestFormat) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    set_root_attr(newest("manifest.h5"), "format", std::string("pipetrain-checkpoinX"));
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": attribute format is \"pipetrain-checkpoinX\"");
}

TEST_F(MismatchedCheckpoint, DamagedManifestFormatVersion) {
  on_root([&] {
    without_whole_file_checks(newest(""));
    set_root_attr(newest("manifest.h5"), "format_version", std::string("2\x7f?"));
  });
  expect_refused_and_skipped(newest("manifest.h5") + ": attribute format_version is damaged", "newer");
}

// Saving keeps output.checkpoint_keep checkpoints and points latest at the newest.
TEST(Checkpoint, KeepsTheNewestN) {
  TempDir tmp;
  Deck deck = mlp_deck();
  deck.output.checkpoint_keep = 2;
  for (int64_t s = 1; s <= 4; ++s) train(deck, stages_here(), s - 1, s, s > 1 ? tmp / "root" : "",
                                         LoadMode::Resume, tmp / "root");
  if (world_rank() != 0) return;
  wait_for_checkpoint_pruning();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp / "root")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000003", "step_00000004"}));
  std::ifstream latest(tmp / "root/latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step_00000004");
}

}  // namespace
}  // namespace pt
