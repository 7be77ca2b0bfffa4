// deck_toml.cpp: reading, checking and writing input decks as TOML.
//
// The only translation unit that includes toml11 (it compiles slowly; CLI11
// is likewise confined to src/app/command_line.cpp). The key table in deck_schema.cpp drives reading, type
// and range checks and deck_to_toml: a new deck key is a field in deck.hpp
// plus one line there. Every user mistake becomes one pt::InputError whose
// message starts with "file:line: section.key" (or "--set section.key=value:").
// A key that moved out of [pipeline] is read under its old name too, with
// one notice per old name; writing both names is an error.
#include <toml.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <variant>

#include "deck_schema.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"

namespace pt {
namespace {

using namespace deck_schema;

std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

std::string origin_at(const std::string& file, const toml::value& v) {
  return file + ":" + std::to_string(v.location().line());
}

// ---- messages --------------------------------------------------------------

std::string describe(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean: return "a boolean (" + toml::format(v) + ")";
    case toml::value_t::integer: return "an integer (" + toml::format(v) + ")";
    case toml::value_t::floating: return "a float (" + toml::format(v) + ")";
    case toml::value_t::string: return "a string (" + toml::format(v) + ")";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    default: return "a date/time (" + toml::format(v) + ")";
  }
}

[[noreturn]] void type_error(const std::string& at, const std::string& expected, const toml::value& v) {
  throw InputError(at + ": expected " + expected + ", got " + describe(v));
}

// ---- reading values --------------------------------------------------------

// The text of a value as written in its source, e.g. "99_999" or "0xff";
// "" when toml11 kept no location for it.
std::string source_text(const toml::value& v) {
  const toml::source_location loc = v.location();
  const std::string& line = loc.line_str();
  const size_t begin = loc.column() - 1;
  return begin < line.size() ? line.substr(begin, loc.region()) : "";
}

// Whether a TOML integer literal (sign, 0x/0o/0b prefix, '_' separators)
// lies within int64. toml11 v3 reads a longer one as INT64_MAX or INT64_MIN
// without a word, so the literal itself is checked.
bool fits_int64(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.erase(0, 1);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && std::string("xob").find(text[1]) != std::string::npos) {
    base = text[1] == 'x' ? 16 : text[1] == 'o' ? 8 : 2;
    text.erase(0, 2);
  }
  if (text.empty() || !std::isxdigit(static_cast<unsigned char>(text[0]))) return true;  // not a literal we know
  errno = 0;
  const unsigned long long magnitude = std::strtoull(text.c_str(), nullptr, base);
  if (errno == ERANGE) return false;
  const unsigned long long largest = negative ? 1ull << 63 : (1ull << 63) - 1;
  return magnitude <= largest;
}

// The value of an integer `v`; an InputError when its literal does not fit.
int64_t integer_of(const toml::value& v, const std::string& at) {
  const int64_t x = v.as_integer();
  if (x != std::numeric_limits<int64_t>::max() && x != std::numeric_limits<int64_t>::min()) return x;
  const std::string text = source_text(v);
  if (fits_int64(text)) return x;
  throw InputError(at + " = " + text +
                   ": does not fit in a 64-bit integer (-9223372036854775808..9223372036854775807)");
}

void read_list(const toml::value& v, std::vector<int64_t>& out, const std::string& at) {
  if (!v.is_array()) type_error(at, "an array of integers", v);
  std::vector<int64_t> list;
  for (const toml::value& entry : v.as_array()) {
    if (!entry.is_integer()) {
      type_error(at + " entry " + std::to_string(list.size()), "an integer", entry);
    }
    list.push_back(integer_of(entry, at + " entry " + std::to_string(list.size())));
  }
  out = list;
}

void read_string_list(const toml::value& v, std::vector<std::string>& out, const std::string& at) {
  if (!v.is_array()) type_error(at, "an array of strings", v);
  std::vector<std::string> list;
  for (const toml::value& entry : v.as_array()) {
    if (!entry.is_string()) type_error(at + " entry " + std::to_string(list.size()), "a string", entry);
    list.push_back(entry.as_string().str);
  }
  out = list;
}

// A deck being read, the kind values that named no kind (check_deck
// reports those in key order, with the other value checks), and where the
// notices about old key names go (each old name once).
struct Reading {
  Deck deck;
  UnreadKinds unread;
  const DeckNotice* notice = nullptr;
  std::set<std::string> noticed;
};

// A kind: a string that names one (else kept in `unread` under `dotted`).
void read_kind(const toml::value& v, const KindRef& field, const std::string& at,
               const std::string& dotted, UnreadKinds& unread) {
  if (!v.is_string()) type_error(at, "a string", v);
  if (!field.parse(v.as_string().str)) unread[dotted] = v.as_string().str;
}

// pipeline.partition: a strategy name (checked with the other choices) or a
// list of per-stage counts, which makes the strategy Explicit.
void read_partition(const toml::value& v, const PartitionRef& field, const std::string& at,
                    const std::string& dotted, UnreadKinds& unread) {
  if (v.is_string()) {
    if (!parse_kind(v.as_string().str, *field.strategy)) unread[dotted] = v.as_string().str;
    field.counts->clear();
    return;
  }
  if (!v.is_array())
    type_error(at, "a strategy (\"uniform\", \"time\", \"memory\", \"balanced\") or an array of integers", v);
  read_list(v, *field.counts, at);
  *field.strategy = field.counts->empty() ? PartitionStrategy::Uniform : PartitionStrategy::Explicit;
}

// Stores `v` in `field`, checking its TOML type; `at` prefixes messages.
void read_field(const toml::value& v, const Field& field, const std::string& at, const std::string& dotted,
                UnreadKinds& unread) {
  if (auto p = std::get_if<int64_t*>(&field)) {
    if (!v.is_integer()) type_error(at, "an integer", v);
    **p = integer_of(v, at);
  } else if (auto p = std::get_if<uint64_t*>(&field)) {
    if (!v.is_integer()) type_error(at, "an integer", v);
    const int64_t x = integer_of(v, at);
    if (x < 0) throw InputError(at + " = " + toml::format(v) + ": must be >= 0");
    **p = static_cast<uint64_t>(x);
  } else if (auto p = std::get_if<double*>(&field)) {
    if (v.is_integer()) {
      **p = static_cast<double>(integer_of(v, at));
    } else if (v.is_floating()) {
      **p = v.as_floating();
    } else {
      type_error(at, "a float (an integer is accepted)", v);
    }
  } else if (auto p = std::get_if<bool*>(&field)) {
    if (!v.is_boolean()) type_error(at, "a boolean (true or false)", v);
    **p = v.as_boolean();
  } else if (auto p = std::get_if<std::string*>(&field)) {
    if (!v.is_string()) type_error(at, "a string", v);
    **p = v.as_string().str;
  } else if (auto p = std::get_if<std::vector<std::string>*>(&field)) {
    read_string_list(v, **p, at);
  } else if (auto p = std::get_if<KindRef>(&field)) {
    read_kind(v, *p, at, dotted, unread);
  } else if (auto p = std::get_if<PartitionRef>(&field)) {
    read_partition(v, *p, at, dotted, unread);
  } else if (auto p = std::get_if<PathsRef>(&field)) {
    if (v.is_string()) {
      *p->one = v.as_string().str;
      p->list->clear();
    } else {
      if (!v.is_array()) type_error(at, "a string (a file or a glob pattern) or an array of strings", v);
      read_string_list(v, *p->list, at);
      p->one->clear();
    }
  } else {
    read_list(v, *std::get<std::vector<int64_t>*>(field), at);
  }
}

// A key as the deck wrote it: its spec, its dotted name and, when written
// under an old name (deck_schema.cpp, kMovedKeys), that name.
struct KeyName {
  const KeySpec* spec;
  std::string dotted;
  std::string old_name;  // "" = written under its own name
};

KeyName key_named(const std::string& section, const std::string& name, const std::string& origin) {
  const MovedKey* moved = moved_key(section + "." + name);
  KeyName key{nullptr, moved ? moved->new_key : section + "." + name, moved ? section + "." + name : ""};
  const size_t dot = key.dotted.find('.');
  key.spec = find_spec(key.dotted.substr(0, dot), key.dotted.substr(dot + 1));
  if (!key.spec) unknown_key(origin, section, name);
  return key;
}

bool is_override(const std::string& origin) { return origin.rfind("--set ", 0) == 0; }

// One key written under both its names, in the deck file or in the --set
// arguments (an override of the file's value under either name is fine).
void check_one_name(const Deck& deck, const KeyName& key, const std::string& origin) {
  auto before = deck.key_origin.find(key.dotted);
  if (before == deck.key_origin.end() || is_override(before->second) != is_override(origin)) return;
  const std::string written = key.old_name.empty() ? key.dotted : key.old_name;
  const std::string earlier = deck.named(key.dotted);
  if (earlier == written) return;
  const std::string old_name = key.old_name.empty() ? earlier : key.old_name;
  throw InputError(origin + ": " + written + " and " + earlier + " (" + before->second +
                   ") name the same key; write it once, as " + key.dotted + " (" + old_name +
                   " is its old name)");
}

// The notice for a key written under its old name, once per old name.
void notice_old_name(Reading& r, const KeyName& key, const std::string& origin) {
  if (key.old_name.empty() || !r.noticed.insert(key.old_name).second) return;
  if (r.notice && *r.notice)
    (*r.notice)(origin + ": " + key.old_name + " is now " + key.dotted + "; the old name still works");
}

void set_key(Reading& r, const KeyName& key, const toml::value& v, const std::string& origin) {
  check_one_name(r.deck, key, origin);
  notice_old_name(r, key, origin);
  r.deck.key_origin[key.dotted] = origin;
  if (key.old_name.empty()) r.deck.written_as.erase(key.dotted);
  else r.deck.written_as[key.dotted] = key.old_name;
  r.unread.erase(key.dotted);  // a later value of the key replaces an unread one
  read_field(v, key.spec->field(r.deck), r.deck.where(key.dotted), key.dotted, r.unread);
}

// The entries of a table in file order (toml11 tables are unordered).
std::vector<std::pair<std::string, const toml::value*>> in_file_order(const toml::value& table) {
  std::vector<std::pair<std::string, const toml::value*>> entries;
  for (const auto& [name, v] : table.as_table()) entries.emplace_back(name, &v);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    auto la = a.second->location().line(), lb = b.second->location().line();
    return la != lb ? la < lb : a.first < b.first;
  });
  return entries;
}

// TOML nests arrays and inline tables without a limit, and the parser
// recurses once per level: a deck (or --set value) nested thousands deep
// would overflow the stack. Nothing a deck needs nests deeper than a few
// levels, so past kMaxNesting the text is refused, naming the line. Strings
// and comments are skipped, so brackets inside them do not count.
constexpr int kMaxNesting = 64;

// The line where `text` first nests past kMaxNesting; 0 when it never does.
int line_nested_too_deep(const std::string& text) {
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      for (i += close.size(); i < text.size() && text.compare(i, close.size(), close) != 0; ++i) {
        if (text[i] == '\n') ++line;
        if (c == '"' && text[i] == '\\') ++i;  // an escaped character, in basic strings only
      }
      i += close.size() - 1;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) return line;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
  return 0;
}

std::string nested_too_deep() {
  return "arrays or inline tables nested over " + std::to_string(kMaxNesting) +
         " deep; a deck needs a few levels at most";
}

toml::value parse_toml(const std::string& text, const std::string& source_name) {
  if (const int line = line_nested_too_deep(text))
    throw InputError(source_name + ":" + std::to_string(line) + ": " + nested_too_deep());
  std::istringstream in(text);
  try {
    return toml::parse(in, source_name);
  } catch (const toml::exception& e) {
    std::string what = e.what();
    if (what.rfind("[error] ", 0) == 0) what = what.substr(8);
    if (what.rfind("toml::", 0) == 0 && what.find(": ") != std::string::npos) {
      what = what.substr(what.find(": ") + 2);
    }
    throw InputError(source_name + ":" + std::to_string(e.location().line()) +
                     ": TOML syntax error: " + what);
  } catch (const std::exception& e) {
    throw InputError(source_name + ": TOML syntax error: " + e.what());
  }
}

void read_sections(const toml::value& root, const std::string& file, Reading& r) {
  for (const auto& [name, section] : in_file_order(root)) {
    std::string origin = origin_at(file, *section);
    if (!section->is_table() && is_section(name)) {
      type_error(origin + ": " + name, "a section [" + name + "]", *section);
    }
    if (!section->is_table()) key_outside_section(origin, name);
    if (!is_section(name)) unknown_section(origin, name);
  }
  std::vector<std::pair<std::string, const toml::value*>> keys;
  for (const auto& [name, section] : in_file_order(root)) {
    for (const auto& entry : in_file_order(*section)) keys.emplace_back(name + "." + entry.first, entry.second);
  }
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
    return a.second->location().line() < b.second->location().line();
  });
  for (const auto& [dotted, v] : keys) {
    const size_t dot = dotted.find('.');
    const std::string origin = origin_at(file, *v);
    set_key(r, key_named(dotted.substr(0, dot), dotted.substr(dot + 1), origin), *v, origin);
  }
}

// ---- overrides -------------------------------------------------------------

// The value of an override in TOML syntax; text that is not TOML is a string.
toml::value override_value(const std::string& raw) {
  std::istringstream in("value = " + raw + "\n");
  try {
    toml::value table = toml::parse(in, "--set");
    if (table.as_table().size() == 1 && table.contains("value")) return table.as_table().at("value");
  } catch (const std::exception&) {
  }
  return toml::value(raw);
}

void apply_override(const std::string& arg, Reading& r) {
  const std::string origin = "--set " + arg;
  size_t eq = arg.find('=');
  if (eq == std::string::npos) {
    throw InputError(origin + ": expected section.key=value, e.g. --set training.lr=0.01");
  }
  std::string dotted = trim(arg.substr(0, eq)), raw = trim(arg.substr(eq + 1));
  size_t dot = dotted.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size()) {
    throw InputError(origin + ": the key must name its section, as in section.key=value"
                     " (e.g. --set training.lr=0.01)");
  }
  std::string section = dotted.substr(0, dot), name = dotted.substr(dot + 1);
  if (!is_section(section)) unknown_section(origin, section);
  const KeyName key = key_named(section, name, origin);
  if (line_nested_too_deep(raw)) throw InputError("--set " + dotted + "=...: the value has " + nested_too_deep());
  toml::value v = override_value(raw);
  // A string key takes the text as written (e.g. output.dir=2024 is "2024").
  const Field field = key.spec->field(r.deck);
  const bool text = std::holds_alternative<std::string*>(field) || std::holds_alternative<KindRef>(field) ||
                    (std::holds_alternative<PathsRef>(field) && !v.is_array());
  if (text && !v.is_string()) v = toml::value(raw);
  set_key(r, key, v, origin);
}

}  // namespace

// ---- the deck API ----------------------------------------------------------

Deck parse_deck_text(const std::string& text, const std::string& source_name,
                     const std::vector<std::string>& overrides, const DeckNotice& notice) {
  toml::value root = parse_toml(text, source_name);
  Reading r;
  r.notice = &notice;
  r.deck.source_file = source_name;
  read_sections(root, source_name, r);
  for (const std::string& arg : overrides) apply_override(arg, r);
  check_deck(r.deck, r.unread);
  return r.deck;
}

Deck parse_deck_file(const std::string& path, const std::vector<std::string>& overrides,
                     const DeckNotice& notice) {
  // A FIFO would block the open for ever, a device never end: only regular
  // files (or links to them) are read.
  require_regular_file(path, "a TOML deck file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the deck file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_deck_text(text.str(), path, overrides, notice);
}

}  // namespace pt
