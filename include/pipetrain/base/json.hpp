// json.hpp: a small JSON reader (RFC 8259) for the files pipetrain reads but
// does not write: a Hugging Face tokenizer.json (model/text_tokenizer.hpp).
// Values are a tree of JsonValue; strings are UTF-8 (\u escapes, surrogate
// pairs included, are decoded). Numbers keep their text and a double.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pt {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  std::string text;                      // String: the decoded string; Number: as written
  std::vector<JsonValue> items;          // Array
  std::map<std::string, JsonValue> members;  // Object (a repeated key keeps the last value)

  bool is(Kind k) const { return kind == k; }
  // The member `key` of an object, or null when this is no object or lacks it.
  const JsonValue* find(const std::string& key) const;
};

// Parses `text` whole; throws InputError "<where>: JSON error at byte N: ..."
// on malformed input.
JsonValue parse_json(const std::string& text, const std::string& where);

// Appends the UTF-8 encoding of `code_point` (<= 0x10FFFF) to `out`; JSON's
// \u escapes and the byte-level tokenizer's byte table both need it.
void append_utf8(std::string& out, uint32_t code_point);

}  // namespace pt
