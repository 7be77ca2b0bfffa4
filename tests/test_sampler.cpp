// test_sampler.cpp: text generation (runtime/sampler.hpp) and the tokenizers
// it reads (model/text_tokenizer.hpp).
//  - greedy generation equals the argmax of the model's logits over the whole
//    generated sequence computed in one independent forward pass;
//  - the same seed gives the same tokens; 1 stage and a pipeline of one
//    stage per rank give the same tokens (np2);
//  - top-k = 1 is greedy; the draw follows the seed;
//  - byte-level BPE: encoding merges by rank, decoding inverts it exactly,
//    pre-tokens split as the GPT-2 pattern does; bad tokenizers are refused.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/text_tokenizer.hpp"
#include "pipetrain/runtime/sampler.hpp"

namespace pt {
namespace {

ModelConfig tiny_gpt() {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 14;
  m.gpt.vocab_multiple = 4;  // Vp = 16: the padded logits are never drawn
  m.gpt.seq_len = 8;
  m.gpt.d_model = 16;
  m.gpt.heads = 2;
  m.gpt.blocks = 2;
  m.init_seed = 99;
  return m;
}

// The whole model as one stage on this rank, over MPI_COMM_SELF.
struct OneStage {
  StageModel stage;
  std::unique_ptr<Transport> transport = make_mpi_transport(MPI_COMM_SELF);
  SamplePipeline pipe;
  explicit OneStage(const ModelConfig& m) : stage(build_stage(m, {m.gpt.blocks}, 0)) {
    move_parameters(stage, Device::CPU);
    pipe.stages = {&stage};
    pipe.stage_rank = {0};
    pipe.backend = &cpu_backend();
    pipe.transport = transport.get();
    pipe.comm = MPI_COMM_SELF;
    pipe.seq_len = m.gpt.seq_len;
    pipe.vocab = m.gpt.vocab_size;
  }
};

TEST(Sampler, GreedyIsTheArgmaxOfOneForwardOverTheWholeSequence) {
  const ModelConfig m = tiny_gpt();
  OneStage one(m);
  const std::vector<int32_t> prompt = {3, 1, 4};
  SampleSettings greedy;
  greedy.temperature = 0.0;
  greedy.tokens = 5;  // 3 + 5 = T: every token generated inside one window
  const std::vector<int32_t> out = generate(one.pipe, prompt, greedy);
  ASSERT_EQ(out.size(), 5u);
  // One forward of prompt + out: the logits at position p predict token p + 1.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), out.begin(), out.end());
  Tensor tokens = Tensor::empty({1, m.gpt.seq_len}, DType::I32);
  std::copy(seq.begin(), seq.end(), tokens.i32());
  StagePass pass;
  const Tensor logits = stage_forward(one.stage, cpu_backend(), tokens, pass);  // (1, T, Vp)
  const int64_t V = m.gpt.vocab_size, Vp = logits.cols();
  for (size_t i = 0; i < out.size(); ++i) {
    const float* row = logits.f32() + static_cast<int64_t>(prompt.size() - 1 + i) * Vp;
    EXPECT_EQ(out[i], std::max_element(row, row + V) - row) << "token " << i;
  }
}

TEST(Sampler, TheSameSeedGivesTheSameTokensAndTopOneIsGreedy) {
  const ModelConfig m = tiny_gpt();
  OneStage one(m);
  SampleSettings s;
  s.tokens = 20;  // past T: the context slides
  s.seed = 7;
  const std::vector<int32_t> a = generate(one.pipe, {5}, s);
  EXPECT_EQ(a, generate(one.pipe, {5}, s));
  s.seed = 8;
  EXPECT_NE(a, generate(one.pipe, {5}, s));  // 20 draws over 14 tokens
  s.top_k = 1;
  s.temperature = 3.0;
  SampleSettings greedy = s;
  greedy.temperature = 0.0;
  EXPECT_EQ(generate(one.pipe, {5}, s), generate(one.pipe, {5}, greedy));
}

TEST(Sampler, OneStagePerRankGivesTheTokensOfOneStage) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const ModelConfig m = tiny_gpt();
  if (m.gpt.blocks < size) GTEST_SKIP() << "more ranks than blocks";
  SampleSettings s;
  s.tokens = 12;
  s.top_k = 5;
  s.seed = 3;
  OneStage one(m);
  const std::vector<int32_t> alone = generate(one.pipe, {2, 7}, s);
  StageModel stage = build_stage(m, partition_units(m.gpt.blocks, size, {}), rank);
  move_parameters(stage, Device::CPU);
  const auto transport = make_mpi_transport(MPI_COMM_WORLD);
  SamplePipeline p;
  p.stages = {&stage};
  for (int r = 0; r < size; ++r) p.stage_rank.push_back(r);
  p.backend = &cpu_backend();
  p.transport = transport.get();
  p.comm = MPI_COMM_WORLD;
  p.seq_len = m.gpt.seq_len;
  p.vocab = m.gpt.vocab_size;
  EXPECT_EQ(generate(p, {2, 7}, s), alone);
}

TEST(ChooseToken, GreedyTakesTheFirstLargestAndDrawsFollowTheSeed) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  SampleSettings greedy;
  greedy.temperature = 0.0;
  EXPECT_EQ(choose_token(logits.data(), 4, greedy, 0), 1);
  SampleSettings top2;
  top2.top_k = 2;  // ids 1 and 3, equally likely
  int ones = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const int32_t t = choose_token(logits.data(), 4, top2, i);
    ASSERT_TRUE(t == 1 || t == 3);
    ones += t == 1;
    EXPECT_EQ(t, choose_token(logits.data(), 4, top2, i));
  }
  EXPECT_GT(ones, 0);
  EXPECT_LT(ones, 200);
}

// A byte-level BPE tokenizer.json: the 256 byte characters, then merges
// "h e" -> "he", "he l" -> "hel", "Ġ w" -> "Ġw", and the added token <|end|>.
std::string tiny_bpe_json() {
  std::string vocab;
  std::vector<std::string> chars;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool itself = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = itself ? b : next++;
    std::string c;
    if (cp < 0x80) c += static_cast<char>(cp);
    else {
      c += static_cast<char>(0xC0 | (cp >> 6));
      c += static_cast<char>(0x80 | (cp & 0x3F));
    }
    if (c == "\"" || c == "\\") c = "\\" + c;
    vocab += (b ? ", " : "") + std::string("\"") + c + "\": " + std::to_string(b);
  }
  vocab += ", \"he\": 256, \"hel\": 257, \"\xc4\xa0w\": 258";
  return "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 259, \"content\": \"<|end|>\", \"special\": true}],"
         " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
         " \"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
         " \"vocab\": {" + vocab + "}, \"merges\": [\"h e\", [\"he\", \"l\"], \"\xc4\xa0 w\"]}}";
}

TEST(TextTokenizer, ByteLevelBpeMergesByRankAndDecodesExactly) {
  const TextTokenizer t = TextTokenizer::from_json(tiny_bpe_json(), "tiny.json");
  EXPECT_EQ(t.vocab_size(), 260);
  // "hello world": pre-tokens "hello", " world"; "hel"+"l"+"o", "Ġw"+"o"+"r"+"l"+"d".
  EXPECT_EQ(t.encode("hello world", "--prompt"),
            (std::vector<int32_t>{257, 'l', 'o', 258, 'o', 'r', 'l', 'd'}));
  // The added token is never split; "  w" leaves its last space to lead "w".
  EXPECT_EQ(t.encode("he<|end|>  w", "--prompt"), (std::vector<int32_t>{256, 259, ' ', 258}));
  for (const std::string& s : std::vector<std::string>{"hello world", "  two  spaces\n\nand lines\t", "it's 2024, caf\xc3\xa9!",
                              "<|end|>x", "\xe2\x80\x94 dash \xe6\x97\xa5\xe6\x9c\xac", std::string("\0\x01\xff", 3)})
    EXPECT_EQ(t.decode(t.encode(s, "--prompt")), s) << s;
  EXPECT_EQ(t.decode({9999}), "<id 9999>");
}

TEST(TextTokenizer, BytesAndIdsAndRefusals) {
  const TextTokenizer b = TextTokenizer::bytes();
  EXPECT_EQ(b.encode("Hi", "--prompt"), (std::vector<int32_t>{'H', 'i'}));
  EXPECT_EQ(b.decode({'H', 'i'}), "Hi");
  const TextTokenizer ids = TextTokenizer::ids(16);
  EXPECT_EQ(ids.encode(" 3 15  0", "--prompt"), (std::vector<int32_t>{3, 15, 0}));
  EXPECT_EQ(ids.decode({3, 15}), "3 15");
  try {
    ids.encode("3 16", "--prompt");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"16\" is not a token id in 0..15"), std::string::npos) << e.what();
  }
  std::string wordpiece = tiny_bpe_json();
  wordpiece.replace(wordpiece.find("\"BPE\""), 5, "\"WordPiece\"");
  try {
    TextTokenizer::from_json(wordpiece, "wp.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("wp.json: model.type is \"WordPiece\", not \"BPE\""), std::string::npos)
        << e.what();
  }
  try {
    TextTokenizer::from_json("{\"model\": [1, 2", "broken.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: JSON error at byte"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pt
