// sample_command.cpp: the `sample` command and the samples a training run
// prints (sample_command.hpp, docs/sampling.md).
//
// Rank 0 reads the tokenizer (--tokenizer, data.tokenizer, or the one the
// first training token file stores; none for Markov decks, whose text is
// token ids) and encodes the prompt; every rank learns the ids or the error
// from its broadcast. The model runs as a forward-only pipeline
// (runtime/sampler.hpp); rank 0 prints each token as it arrives.
#include "pipetrain/app/sample_command.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/data_files.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/blas_threads.hpp"
#include "pipetrain/runtime/data_set_config.hpp"

namespace pt {

namespace {

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

TextTokenizer tokenizer_from_file(const std::string& path, const std::string& at) {
  if (path == "bytes") return TextTokenizer::bytes();
  require_regular_file(path, "a tokenizer.json, or \"bytes\"", at);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(at + ": cannot open it: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return TextTokenizer::from_json(text.str(), at);
}

// The tokenizer to sample with: `cli_tokenizer` (sample --tokenizer), else
// data.tokenizer, else the first training file's stored one; none (ids) for
// decks without token files.
TextTokenizer sampling_tokenizer(const Deck& deck, const std::string& cli_tokenizer) {
  if (!cli_tokenizer.empty()) return tokenizer_from_file(cli_tokenizer, "--tokenizer " + quoted(cli_tokenizer));
  if (deck.data.type != DataKind::Hdf5) return TextTokenizer::ids(deck.model.gpt.vocab_size);
  if (!deck.data.tokenizer.empty())
    return tokenizer_from_file(deck.data.tokenizer, deck.where("data.tokenizer") + " = " + quoted(deck.data.tokenizer));
  const StoredTokenizer stored = stored_tokenizer(data_set_config_for(deck));
  if (!stored.json.empty()) return TextTokenizer::from_json(stored.json, stored.at + " (its tokenizer_json)");
  if (stored.kind == "bytes") return TextTokenizer::bytes();
  throw InputError(stored.at + ": records no tokenizer (no tokenizer_json dataset and no tokenizer = "
                   "\"bytes\" attribute), so its ids have no text: give `pipetrain sample --tokenizer "
                   "FILE` (a tokenizer.json, or bytes)");
}

// The ids drawn: the model's, or a smaller BPE vocabulary's (the model's
// further ids have no text). A tokenizer larger than the model is refused.
int64_t sampled_vocab(const TextTokenizer& tok, const Deck& deck) {
  const int64_t model_vocab = deck.model.gpt.vocab_size;
  if (tok.kind() != TextTokenizer::Kind::Bpe) return model_vocab;
  if (tok.vocab_size() > model_vocab)
    throw InputError(tok.describe() + " does not fit the model: it has " + std::to_string(tok.vocab_size()) +
                     " tokens, more than model.vocab_size = " + std::to_string(model_vocab) + " (" +
                     deck.source_file + "): sample with the tokenizer the model was trained with");
  return tok.vocab_size();
}

// `text` encoded, checked against the model: 1..T tokens, each in the vocabulary.
std::vector<int32_t> encode_prompt(const TextTokenizer& tok, const Deck& deck, const std::string& text,
                                   const std::string& what) {
  const std::string given = text.empty() ? (tok.kind() == TextTokenizer::Kind::Ids ? "0" : "The") : text;
  const std::vector<int32_t> ids = tok.encode(given, what);
  const int64_t T = deck.model.gpt.seq_len, V = deck.model.gpt.vocab_size;
  if (ids.empty())
    throw InputError(what + " = " + quoted(given) + ": encodes to no token; give at least one");
  if (static_cast<int64_t>(ids.size()) > T)
    throw InputError(what + " is " + std::to_string(ids.size()) + " tokens long (" + tok.describe() +
                     "), longer than the model's context, model.seq_len = " + std::to_string(T) +
                     ": shorten it to at most " + std::to_string(T) + " tokens");
  for (int32_t id : ids)
    if (id >= V)
      throw InputError(what + " = " + quoted(given) + ": token " + std::to_string(id) + " (" +
                       quoted(tok.decode({id})) + ") is outside the model's vocabulary 0.." +
                       std::to_string(V - 1) + " (model.vocab_size = " + std::to_string(V) + ")");
  return ids;
}

// Rank 0 runs `work` (which fills `ids`); every rank gets its ids, or its
// error (printed by rank 0). Returns false after an error.
bool from_rank0(const World& w, std::vector<int32_t>& ids, const std::function<void()>& work) {
  std::string error;
  if (w.rank == 0) {
    try {
      work();
    } catch (const InputError& e) {
      error = e.what();
      std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    }
  }
  long long header[2] = {error.empty() ? 1 : 0, static_cast<long long>(ids.size())};
  timed_bcast(header, 2, MPI_LONG_LONG, 0, w.comm, "the prompt from rank 0");
  if (header[0] == 0) return false;
  ids.resize(static_cast<size_t>(header[1]));
  timed_bcast(ids.data(), static_cast<int>(header[1]), MPI_INT, 0, w.comm, "the prompt from rank 0");
  return true;
}

// Rank 0's text for one new token (ids: a space before each).
std::string token_text(const TextTokenizer& tok, int32_t id) {
  return (tok.kind() == TextTokenizer::Kind::Ids ? " " : "") + tok.decode({id});
}

// `text` on one line of a log: newlines and tabs as \n and \t, other
// control bytes as \xHH (the terminal sees no control sequence).
std::string one_line(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else out += static_cast<char>(c);
  }
  return out;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

std::vector<int64_t> sample_partition(const Deck& deck, int ranks) {
  const int64_t units = model_units(deck.model);
  if (units < ranks)
    throw InputError("pipetrain sample on " + std::to_string(ranks) + " ranks: the model has " +
                     std::to_string(units) + " transformer blocks (model.blocks), one stage per rank " +
                     "needs at least one each: run on at most " + std::to_string(units) + " ranks");
  const auto& given = deck.pipeline.partition;
  return partition_units(units, ranks, static_cast<int>(given.size()) == ranks ? given : std::vector<int64_t>{});
}

}  // namespace

int run_sample(const World& w, const CommandLine& cli, const Deck& deck) {
  if (deck.model.type != "gpt") {
    if (w.rank == 0)
      std::fprintf(stderr, "pipetrain: error: %s = \"%s\": pipetrain sample generates text with a GPT "
                   "(model.type = \"gpt\"); a checkpoint of this model has no text to sample\n",
                   deck.where("model.type").c_str(), deck.model.type.c_str());
    return 2;
  }
  BlasThreadsChoice blas = choose_blas_threads(deck.training.blas_threads, w.comm);
  set_cpu_gemm(deck.training.cpu_gemm);
  set_blas_threads(blas.threads);
  choose_wait_mode();
  std::vector<int64_t> partition;
  try {
    partition = sample_partition(deck, w.size);
  } catch (const InputError& e) {  // the same on every rank
    if (w.rank == 0) std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    return 2;
  }
  TextTokenizer tok;
  std::vector<int32_t> prompt;
  int64_t vocab = 0;
  if (!from_rank0(w, prompt, [&] {
        tok = sampling_tokenizer(deck, cli.tokenizer);
        vocab = sampled_vocab(tok, deck);
        prompt = encode_prompt(tok, deck, cli.prompt, "--prompt");
      }))
    return 2;
  timed_bcast(&vocab, 1, MPI_INT64_T, 0, w.comm, "the sampled vocabulary from rank 0");
  ComputeResources compute = make_compute_resources(deck, w.comm);
  Backend& be = compute.setup.backend ? *compute.setup.backend : cpu_backend();
  StageModel stage = build_stage(deck.model, partition, w.rank);
  move_parameters(stage, be.device());
  CheckpointRead read;
  set_wait_phase("while loading the checkpoint " + cli.resume);
  try {
    read = load_checkpoint(cli.resume, LoadMode::WeightsOnly, deck, deck_to_toml(deck), stage.params(), w.comm);
  } catch (const InputError& e) {  // the same on every rank
    if (w.rank == 0) std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    return 2;
  }
  if (w.rank == 0) {
    char draw[64] = "greedy";
    if (cli.temperature != 0.0) std::snprintf(draw, sizeof draw, "temperature %g", cli.temperature);
    std::fprintf(stderr, "pipetrain sample: %s (step %lld) on %d rank%s; %s; %s, top-k %lld, seed %llu\n",
                 read.path.c_str(), static_cast<long long>(read.step), w.size, w.size == 1 ? "" : "s",
                 tok.describe().c_str(), draw, static_cast<long long>(cli.top_k),
                 static_cast<unsigned long long>(cli.seed));
    std::printf("%s", cli.print_ids ? ids_text(prompt).c_str() : tok.decode(prompt).c_str());
    std::fflush(stdout);
  }
  const std::unique_ptr<Transport> transport =
      compute.setup.make_transport ? compute.setup.make_transport(w.comm) : make_mpi_transport(w.comm);
  SamplePipeline p;
  p.stages = {&stage};
  for (int s = 0; s < w.size; ++s) p.stage_rank.push_back(s);
  p.backend = &be;
  p.transport = transport.get();
  p.comm = w.comm;
  p.seq_len = deck.model.gpt.seq_len;
  p.vocab = vocab;
  SampleSettings settings;
  settings.tokens = cli.tokens;
  settings.temperature = cli.temperature;
  settings.top_k = cli.top_k;
  settings.seed = cli.seed;
  set_wait_phase("while sampling");
  generate(p, prompt, settings, [&](int32_t id) {
    if (w.rank != 0) return;
    std::printf("%s", cli.print_ids ? (" " + std::to_string(id)).c_str() : token_text(tok, id).c_str());
    std::fflush(stdout);
  });
  if (w.rank == 0) std::printf("\n");
  return 0;
}

bool prepare_training_samples(const World& w, const Deck& deck, TrainingSamples& out) {
  out.enabled = deck.output.sample_every > 0;
  if (!out.enabled) return true;
  if (!from_rank0(w, out.prompt, [&] {
        out.tokenizer = sampling_tokenizer(deck, "");
        out.vocab = sampled_vocab(out.tokenizer, deck);
        out.prompt = encode_prompt(out.tokenizer, deck, deck.output.sample_prompt,
                                   deck.where("output.sample_prompt"));
      }))
    return false;
  timed_bcast(&out.vocab, 1, MPI_INT64_T, 0, w.comm, "the sampled vocabulary from rank 0");
  return true;
}

void print_training_sample(const World& w, const Deck& deck, Trainer& trainer,
                           const TrainingSamples& samples, int64_t step) {
  if (!samples.enabled || (step + 1) % deck.output.sample_every != 0) return;
  SampleSettings settings;
  settings.tokens = deck.output.sample_tokens;
  settings.temperature = 1.0;
  settings.seed = deck.model.init_seed;
  set_wait_phase("in the sample after step " + std::to_string(step));
  const std::vector<int32_t> ids = trainer.sample(samples.prompt, settings, samples.vocab);
  if (w.rank != 0) return;
  std::string text = samples.tokenizer.decode(samples.prompt);
  for (int32_t id : ids) text += token_text(samples.tokenizer, id);
  std::printf("sample after step %lld: %s\n", static_cast<long long>(step + 1), one_line(text).c_str());
  std::fflush(stdout);
}

}  // namespace pt
