// text_tokenizer.hpp: text to token ids and back, for sampling
// (docs/sampling.md). Three kinds:
//   bytes: one token per byte (make_token_file.py's byte mode), 256 ids;
//   bpe:   a Hugging Face byte-level BPE tokenizer.json (make_token_file.py's
//          BPE mode, GPT-2's tokenizer): its vocabulary, merges and added
//          tokens, with the GPT-2 pre-tokenizer written out by hand;
//   ids:   no text at all (Markov decks): the text is token ids written as
//          decimal numbers separated by spaces.
// Decoding is exact for every kind. Encoding BPE splits text into pre-tokens
// as the GPT-2 pattern does, with one approximation: it knows Unicode's
// letters, digits, spaces and punctuation only for ASCII, Latin-1 and the
// General Punctuation block, and counts every other non-ASCII character as a
// letter (docs/sampling.md). A tokenizer.json this reader cannot follow
// (another model, a normalizer, another pre-tokenizer) is refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pt {

class TextTokenizer {
 public:
  enum class Kind { Bytes, Bpe, Ids };

  static TextTokenizer bytes();
  // `vocab`: the model's vocabulary (ids outside it are refused).
  static TextTokenizer ids(int64_t vocab);
  // A tokenizer.json's text; `where` names it in messages.
  static TextTokenizer from_json(const std::string& json, const std::string& where);

  Kind kind() const { return kind_; }
  // Ids 0..vocab_size()-1 have a text (bytes: 256; bpe: the largest id + 1).
  int64_t vocab_size() const { return vocab_size_; }
  // "the byte tokenizer", "the byte-level BPE tokenizer of 1024 tokens in <where>", ...
  std::string describe() const;
  // Throws InputError naming `what` (e.g. "--prompt") for text it cannot encode.
  std::vector<int32_t> encode(const std::string& text, const std::string& what) const;
  // Ids without a text (bpe: a hole in the vocabulary) print as <id N>.
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  std::vector<std::string> bpe_word(const std::string& piece) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>& out) const;

  Kind kind_ = Kind::Bytes;
  int64_t vocab_size_ = 256;
  std::string where_;
  bool add_prefix_space_ = false;
  std::unordered_map<std::string, int32_t> vocab_;       // token (byte-mapped text) -> id
  std::vector<std::string> id_text_;                     // (vocab_size) id -> decoded bytes
  std::vector<bool> id_known_;                           // (vocab_size)
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<std::pair<std::string, int32_t>> added_;   // added tokens: content, id
};

}  // namespace pt
