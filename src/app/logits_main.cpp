// logits_main.cpp: pipetrain_logits, a one-process forward of a GPT
// checkpoint on given tokens that writes the logits. It is how the
// Hugging Face interop checks (tools/hf_gpt2.py, docs/interop.md) compare
// another implementation's logits with pipetrain's own, on the CPU in fp32.
//   build/pipetrain_logits DECK CHECKPOINT TOKENS OUT [--set section.key=value ...]
// TOKENS: text, one sequence of token ids per line (all lines of one length
// T <= model.seq_len). OUT: raw little-endian float32 logits (lines, T, V),
// V = model.vocab_size (the padded rows of model.vocab_multiple left out).
// The checkpoint is read as training.init_from reads it (weights only,
// verified: binding, CRC-32s, shapes against the deck's model).
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace {

constexpr const char* kUsage =
    "usage: pipetrain_logits DECK CHECKPOINT TOKENS OUT [--set section.key=value ...]";

struct Args {
  std::string deck, checkpoint, tokens, out;
  std::vector<std::string> overrides;
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) {
      a.overrides.push_back(argv[++i]);
    } else if (arg.rfind("--", 0) == 0) {
      throw pt::InputError("unknown option " + arg + "; " + kUsage);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 4) throw pt::InputError(kUsage);
  a.deck = positional[0];
  a.checkpoint = positional[1];
  a.tokens = positional[2];
  a.out = positional[3];
  return a;
}

// The token lines of `path` as (lines, T) int32, each id checked against V.
pt::Tensor read_tokens(const std::string& path, const pt::GptDims& dims) {
  std::ifstream in(path);
  if (!in) throw pt::InputError(path + ": cannot be opened");
  std::vector<std::vector<int64_t>> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::vector<int64_t> ids;
    std::string word;
    while (words >> word) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || id < 0 || id >= dims.vocab_size)
        throw pt::InputError(path + ":" + std::to_string(n) + ": token \"" + word +
                             "\" is not an id in 0..model.vocab_size-1 = 0.." +
                             std::to_string(dims.vocab_size - 1));
      ids.push_back(id);
    }
    if (ids.empty()) continue;
    if (!lines.empty() && ids.size() != lines[0].size())
      throw pt::InputError(path + ":" + std::to_string(n) + ": " + std::to_string(ids.size()) +
                           " tokens, but the first line has " + std::to_string(lines[0].size()) +
                           " (every line must have the same length)");
    if (static_cast<int64_t>(ids.size()) > dims.seq_len)
      throw pt::InputError(path + ":" + std::to_string(n) + ": " + std::to_string(ids.size()) +
                           " tokens, more than model.seq_len = " + std::to_string(dims.seq_len));
    lines.push_back(ids);
  }
  if (lines.empty()) throw pt::InputError(path + ": no tokens");
  const int64_t rows = static_cast<int64_t>(lines.size());
  const int64_t T = static_cast<int64_t>(lines[0].size());
  pt::Tensor tokens = pt::Tensor::empty({rows, T}, pt::DType::I32, pt::MemCategory::Workspace,
                                        pt::Device::CPU);  // (rows, T)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t) tokens.i32()[r * T + t] = static_cast<int32_t>(lines[r][t]);
  return tokens;
}

// logits (rows, T, Vp) -> OUT as (rows, T, V) float32.
void write_logits(const std::string& path, const pt::Tensor& logits, int64_t V) {
  const int64_t Vp = logits.dim(-1);
  const int64_t positions = logits.numel() / Vp;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw pt::InputError(path + ": cannot be written");
  bool ok = true;
  for (int64_t i = 0; i < positions && ok; ++i)
    ok = std::fwrite(logits.f32() + i * Vp, sizeof(float), static_cast<size_t>(V), f) ==
         static_cast<size_t>(V);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw pt::InputError(path + ": write failed");
}

void run(const Args& a) {
  pt::Deck deck = pt::parse_deck_file(a.deck, a.overrides);
  if (deck.model.type != "gpt")
    throw pt::InputError(a.deck + ": model.type = \"" + deck.model.type +
                         "\"; pipetrain_logits computes the logits of a GPT (model.type = \"gpt\")");
  deck.training.precision = pt::Precision::Fp32;
  const pt::GptDims& dims = deck.model.gpt;
  pt::StageModel stage = pt::build_stage(deck.model, {pt::model_units(deck.model)}, 0);
  pt::load_checkpoint(a.checkpoint, pt::LoadMode::WeightsOnly, deck, pt::deck_to_toml(deck),
                      stage.params(), MPI_COMM_SELF);
  const pt::Tensor tokens = read_tokens(a.tokens, dims);  // (rows, T)
  std::unique_ptr<pt::Backend> be = pt::make_cpu_backend(pt::Precision::Fp32);
  pt::check_family_backend(deck.model, *be);
  pt::StagePass pass;
  const pt::Tensor logits = pt::stage_forward(stage, *be, tokens, pass);  // (rows, T, Vp)
  write_logits(a.out, logits, dims.vocab_size);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  int ranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    if (ranks != 1)
      throw pt::InputError("runs as one process, not on " + std::to_string(ranks) +
                           " ranks (checkpoints are layout-free: any checkpoint loads on one)");
    run(parse_args(argc, argv));
  } catch (const pt::InputError& e) {
    if (rank == 0) std::fprintf(stderr, "pipetrain_logits: error: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipetrain_logits: internal error: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
