// json.cpp: the small recursive-descent JSON reader of json.hpp.
#include "pipetrain/base/json.hpp"

#include <cstdlib>

#include "pipetrain/base/error.hpp"

namespace pt {

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  const auto it = members.find(key);
  return it == members.end() ? nullptr : &it->second;
}

namespace {

constexpr int kMaxDepth = 256;  // nesting beyond this is refused, not a stack overflow

class Reader {
 public:
  Reader(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(where_ + ": JSON error at byte " + std::to_string(pos_) + ": " + what);
  }

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void literal(const char* word) {
    for (const char* p = word; *p; ++p) {
      if (peek() != *p) fail(std::string("expected ") + word);
      ++pos_;
    }
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    skip_space();
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      v.kind = JsonValue::Kind::Object;
      object(v, depth);
    } else if (c == '[') {
      v.kind = JsonValue::Kind::Array;
      array(v, depth);
    } else if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.text = string();
    } else if (c == 't' || c == 'f') {
      v.kind = JsonValue::Kind::Bool;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::Number;
      number(v);
    } else {
      fail(pos_ >= s_.size() ? "unexpected end of text" : "unexpected character");
    }
    return v;
  }

  void object(JsonValue& v, int depth) {
    expect('{');
    skip_space();
    if (peek() == '}') { ++pos_; return; }
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a member name in quotes");
      std::string key = string();
      skip_space();
      expect(':');
      v.members[key] = value(depth + 1);
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return;
    }
  }

  void array(JsonValue& v, int depth) {
    expect('[');
    skip_space();
    if (peek() == ']') { ++pos_; return; }
    for (;;) {
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      expect(']');
      return;
    }
  }

  void number(JsonValue& v) {
    const size_t start = pos_;
    auto digits = [&] { while (peek() >= '0' && peek() <= '9') ++pos_; };
    if (peek() == '-') ++pos_;
    if (!(peek() >= '0' && peek() <= '9')) fail("a number needs a digit");
    digits();
    if (peek() == '.') { ++pos_; digits(); }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    v.text = s_.substr(start, pos_ - start);
    v.number = std::strtod(v.text.c_str(), nullptr);
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("a \\u escape needs 4 hex digits");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
      else fail("a \\u escape needs 4 hex digits");
    }
    return code;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') { out += c; continue; }
      if (pos_ >= s_.size()) fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 1 < s_.size() && s_[pos_] == '\\' && s_[pos_ + 1] == 'u') {
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("a high surrogate without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }

  const std::string& s_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue parse_json(const std::string& text, const std::string& where) {
  return Reader(text, where).document();
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace pt
