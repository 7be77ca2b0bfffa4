// text_tokenizer.cpp: the byte, byte-level BPE and id tokenizers of
// text_tokenizer.hpp. A byte-level BPE token is text over a 256-character
// alphabet that stands for the 256 byte values (printable Latin-1 bytes for
// themselves, the others for the code points from U+0100 on); decoding maps
// each character back to its byte. Encoding splits the text into pre-tokens
// (words with their leading space, numbers, runs of punctuation, spaces),
// then merges each pre-token's characters by the merge list's ranks.
#include "pipetrain/model/text_tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/json.hpp"

namespace pt {

namespace {

// The code point at s[i] and its length in bytes; a byte that starts no
// valid UTF-8 sequence stands for itself (U+FFFD-free: BPE sees its byte).
uint32_t next_code_point(const std::string& s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  auto cont = [&](size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) { len = 1; return c; }
  if ((c & 0xE0) == 0xC0 && cont(i + 1)) { len = 2; return ((c & 0x1Fu) << 6) | (b(i + 1) & 0x3Fu); }
  if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
    len = 3;
    return ((c & 0x0Fu) << 12) | ((b(i + 1) & 0x3Fu) << 6) | (b(i + 2) & 0x3Fu);
  }
  if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
    len = 4;
    return ((c & 0x07u) << 18) | ((b(i + 1) & 0x3Fu) << 12) | ((b(i + 2) & 0x3Fu) << 6) | (b(i + 3) & 0x3Fu);
  }
  len = 1;
  return c;  // a stray byte: classed as a letter below (non-ASCII)
}

// The byte-level alphabet: byte -> its character (UTF-8), and back.
struct ByteAlphabet {
  std::string of_byte[256];
  std::unordered_map<uint32_t, unsigned char> byte_of;
  ByteAlphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool itself = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = itself ? b : next++;
      append_utf8(of_byte[b], cp);
      byte_of[cp] = static_cast<unsigned char>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Character classes of the GPT-2 pre-tokenizer pattern: exact for ASCII,
// Latin-1 and General Punctuation; every other non-ASCII character is a letter.
enum class CharClass { Letter, Number, Space, Other };

CharClass class_of(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::Space;
    return CharClass::Other;
  }
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
      cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
    return CharClass::Space;
  if (cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE)) return CharClass::Number;
  if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return CharClass::Letter;
  if (cp < 0xC0 || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2010 && cp <= 0x205E)) return CharClass::Other;
  return CharClass::Letter;
}

struct Char {
  size_t at, len;
  CharClass cls;
};

std::vector<Char> characters(const std::string& s) {
  std::vector<Char> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = next_code_point(s, i, len);
    out.push_back({i, len, class_of(cp)});
    i += len;
  }
  return out;
}

// The GPT-2 pattern's pre-tokens of `s`, in order, covering it:
// 's 't 're 've 'm 'll 'd | ' '?letters | ' '?digits | ' '?others | spaces
// not followed by a non-space | spaces.
std::vector<std::string> pre_tokens(const std::string& s) {
  const std::vector<Char> c = characters(s);
  const size_t n = c.size();
  std::vector<std::string> out;
  auto emit = [&](size_t from, size_t to) {  // characters [from, to)
    const size_t end = to < n ? c[to].at : s.size();
    out.push_back(s.substr(c[from].at, end - c[from].at));
  };
  auto ascii = [&](size_t k) { return k < n && c[k].len == 1 ? s[c[k].at] : '\0'; };
  size_t i = 0;
  while (i < n) {
    if (ascii(i) == '\'') {  // contractions, as the pattern writes them (lower case)
      const char a = ascii(i + 1), b = ascii(i + 2);
      size_t len = 0;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) len = 3;
      else if (a == 's' || a == 't' || a == 'm' || a == 'd') len = 2;
      if (len) { emit(i, i + len); i += len; continue; }
    }
    size_t j = i;
    if (ascii(i) == ' ' && i + 1 < n && c[i + 1].cls != CharClass::Space) j = i + 1;
    if (c[j].cls != CharClass::Space) {  // a run of one class, with its leading space
      const CharClass cls = c[j].cls;
      size_t k = j + 1;
      while (k < n && c[k].cls == cls) ++k;
      emit(i, k);
      i = k;
      continue;
    }
    size_t k = i;
    while (k < n && c[k].cls == CharClass::Space) ++k;
    // Spaces before a non-space leave their last one to lead the next pre-token.
    const size_t end = (k < n && k - i > 1) ? k - 1 : k;
    emit(i, end);
    i = end;
  }
  return out;
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what + "; sampling reads byte-level BPE tokenizers (as "
                   "tools/make_token_file.py writes them, and GPT-2's) and the byte tokenizer "
                   "(docs/sampling.md)");
}

std::string json_kind(const JsonValue* v) {
  if (!v || v->is(JsonValue::Kind::Null)) return "null";
  const JsonValue* type = v->find("type");
  return type && type->is(JsonValue::Kind::String) ? "\"" + type->text + "\"" : "without a type";
}

// The pre_tokenizer must be ByteLevel (alone, or the only step of a Sequence).
const JsonValue& byte_level_pre_tokenizer(const JsonValue& root, const std::string& where) {
  const JsonValue* pre = root.find("pre_tokenizer");
  const JsonValue* seq = pre ? pre->find("pretokenizers") : nullptr;
  if (seq && seq->is(JsonValue::Kind::Array) && seq->items.size() == 1) pre = &seq->items[0];
  const JsonValue* type = pre ? pre->find("type") : nullptr;
  if (!type || type->text != "ByteLevel")
    refuse(where, "pre_tokenizer is " + json_kind(root.find("pre_tokenizer")) + ", not \"ByteLevel\"");
  const JsonValue* regex = pre->find("use_regex");
  if (regex && regex->is(JsonValue::Kind::Bool) && !regex->boolean)
    refuse(where, "pre_tokenizer.use_regex is false (only the GPT-2 pattern is implemented)");
  return *pre;
}

}  // namespace

TextTokenizer TextTokenizer::bytes() {
  TextTokenizer t;
  t.kind_ = Kind::Bytes;
  t.vocab_size_ = 256;
  return t;
}

TextTokenizer TextTokenizer::ids(int64_t vocab) {
  TextTokenizer t;
  t.kind_ = Kind::Ids;
  t.vocab_size_ = vocab;
  return t;
}

TextTokenizer TextTokenizer::from_json(const std::string& json, const std::string& where) {
  const JsonValue root = parse_json(json, where);
  const JsonValue* model = root.find("model");
  const JsonValue* type = model ? model->find("type") : nullptr;
  if (!type || type->text != "BPE") refuse(where, "model.type is " + json_kind(model) + ", not \"BPE\"");
  const JsonValue* normalizer = root.find("normalizer");
  if (normalizer && !normalizer->is(JsonValue::Kind::Null))
    refuse(where, "it has a normalizer (" + json_kind(normalizer) + ")");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue* v = model->find(key);
    if (v && v->is(JsonValue::Kind::String) && !v->text.empty())
      refuse(where, std::string("model.") + key + " is set");
  }
  const JsonValue& pre = byte_level_pre_tokenizer(root, where);
  TextTokenizer t;
  t.kind_ = Kind::Bpe;
  t.where_ = where;
  const JsonValue* prefix = pre.find("add_prefix_space");
  t.add_prefix_space_ = prefix && prefix->is(JsonValue::Kind::Bool) && prefix->boolean;
  const JsonValue* vocab = model->find("vocab");
  if (!vocab || !vocab->is(JsonValue::Kind::Object) || vocab->members.empty())
    throw InputError(where + ": model.vocab is missing or empty (expected an object of token: id)");
  int64_t size = 0;
  auto add = [&](const std::string& token, const JsonValue& id, const char* key) {
    if (!id.is(JsonValue::Kind::Number) || id.number < 0 || id.number > INT32_MAX || id.number != static_cast<int64_t>(id.number))
      throw InputError(where + ": " + key + " gives token \"" + token + "\" the id " + id.text + " (expected 0..2^31-1)");
    size = std::max<int64_t>(size, static_cast<int64_t>(id.number) + 1);
  };
  for (const auto& [token, id] : vocab->members) add(token, id, "model.vocab");
  const JsonValue* added = root.find("added_tokens");
  if (added && added->is(JsonValue::Kind::Array))
    for (const JsonValue& a : added->items) {
      const JsonValue* content = a.find("content");
      const JsonValue* id = a.find("id");
      if (!content || !id || content->text.empty())
        throw InputError(where + ": an entry of added_tokens lacks its content or id");
      add(content->text, *id, "added_tokens");
      t.added_.push_back({content->text, static_cast<int32_t>(id->number)});
    }
  t.vocab_size_ = size;
  t.id_text_.assign(static_cast<size_t>(size), std::string());
  t.id_known_.assign(static_cast<size_t>(size), false);
  const ByteAlphabet& abc = alphabet();
  for (const auto& [token, id] : vocab->members) {
    const int32_t k = static_cast<int32_t>(id.number);
    t.vocab_[token] = k;
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      size_t len = 1;
      const uint32_t cp = next_code_point(token, i, len);
      const auto it = abc.byte_of.find(cp);
      if (it == abc.byte_of.end())
        throw InputError(where + ": model.vocab token \"" + token + "\" has a character outside the "
                         "byte-level alphabet (not a byte-level BPE)");
      bytes += static_cast<char>(it->second);
      i += len;
    }
    t.id_text_[static_cast<size_t>(k)] = bytes;
    t.id_known_[static_cast<size_t>(k)] = true;
  }
  for (const auto& [content, id] : t.added_) {
    t.id_text_[static_cast<size_t>(id)] = content;
    t.id_known_[static_cast<size_t>(id)] = true;
  }
  // Longest added token first, so that one containing another wins.
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  const JsonValue* merges = model->find("merges");
  if (merges && merges->is(JsonValue::Kind::Array))
    for (size_t r = 0; r < merges->items.size(); ++r) {
      const JsonValue& m = merges->items[r];
      std::string pair;
      if (m.is(JsonValue::Kind::String)) pair = m.text;  // "left right"
      else if (m.is(JsonValue::Kind::Array) && m.items.size() == 2)
        pair = m.items[0].text + " " + m.items[1].text;  // ["left", "right"]
      else
        throw InputError(where + ": model.merges entry " + std::to_string(r) +
                         " is neither \"left right\" nor [\"left\", \"right\"]");
      t.merge_rank_.emplace(pair, static_cast<int32_t>(r));
    }
  return t;
}

std::string TextTokenizer::describe() const {
  switch (kind_) {
    case Kind::Bytes: return "the byte tokenizer (256 tokens)";
    case Kind::Ids: return "no tokenizer (text is token ids)";
    case Kind::Bpe: break;
  }
  return "the byte-level BPE tokenizer of " + std::to_string(vocab_size_) + " tokens in " + where_;
}

// One pre-token's symbols after every merge, lowest rank first.
std::vector<std::string> TextTokenizer::bpe_word(const std::string& piece) const {
  const ByteAlphabet& abc = alphabet();
  std::vector<std::string> sym;
  for (unsigned char b : piece) sym.push_back(abc.of_byte[b]);
  for (;;) {
    int32_t best = INT32_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
      if (it != merge_rank_.end()) best = std::min(best, it->second);
    }
    if (best == INT32_MAX) return sym;
    std::vector<std::string> next;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size()) {
        const auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
        if (it != merge_rank_.end() && it->second == best) {
          next.push_back(sym[i] + sym[i + 1]);
          ++i;
          continue;
        }
      }
      next.push_back(sym[i]);
    }
    sym.swap(next);
  }
}

void TextTokenizer::encode_bpe(const std::string& text, std::vector<int32_t>& out) const {
  for (const std::string& piece : pre_tokens(text))
    for (const std::string& s : bpe_word(piece)) {
      const auto it = vocab_.find(s);
      if (it == vocab_.end())
        throw InputError(where_ + ": the tokenizer has no token for \"" + s + "\" (its vocabulary "
                         "lacks part of the byte alphabet)");
      out.push_back(it->second);
    }
}

std::vector<int32_t> TextTokenizer::encode(const std::string& text, const std::string& what) const {
  std::vector<int32_t> out;
  if (kind_ == Kind::Bytes) {
    for (unsigned char b : text) out.push_back(b);
    return out;
  }
  if (kind_ == Kind::Ids) {
    std::istringstream in(text);
    for (std::string word; in >> word;) {
      char* end = nullptr;
      const long long v = std::strtoll(word.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= vocab_size_)
        throw InputError(what + " = \"" + text + "\": \"" + word + "\" is not a token id in 0.." +
                         std::to_string(vocab_size_ - 1) + " (this deck has no tokenizer: its "
                         "text is token ids separated by spaces)");
      out.push_back(static_cast<int32_t>(v));
    }
    return out;
  }
  // Added tokens are matched first and never split; the text between them is BPE-encoded.
  std::string rest = add_prefix_space_ && !text.empty() && text[0] != ' ' ? " " + text : text;
  size_t from = 0;
  for (size_t i = 0; i < rest.size();) {
    bool matched = false;
    for (const auto& [content, id] : added_)
      if (rest.compare(i, content.size(), content) == 0) {
        encode_bpe(rest.substr(from, i - from), out);
        out.push_back(id);
        i += content.size();
        from = i;
        matched = true;
        break;
      }
    if (!matched) ++i;
  }
  encode_bpe(rest.substr(from), out);
  return out;
}

std::string TextTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (kind_ == Kind::Ids) {
      out += (i ? " " : "") + std::to_string(id);
    } else if (kind_ == Kind::Bytes) {
      if (id >= 0 && id < 256) out += static_cast<char>(id);
      else out += "<id " + std::to_string(id) + ">";
    } else if (id >= 0 && id < vocab_size_ && id_known_[static_cast<size_t>(id)]) {
      out += id_text_[static_cast<size_t>(id)];
    } else {
      out += "<id " + std::to_string(id) + ">";
    }
  }
  return out;
}

}  // namespace pt
