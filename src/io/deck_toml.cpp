// deck_toml.cpp: reading, checking and writing input decks as TOML, and the
// command line.
//
// The only translation unit that includes toml11 and CLI11 (both compile
// slowly). One table of key specifications, kDeckKeys, drives reading, type
// and range checks and deck_to_toml: a new deck key is a field in deck.hpp
// plus one line here. Every user mistake becomes one pt::InputError whose
// message starts with "file:line: section.key" (or "--set section.key=value:").
#include <CLI/CLI.hpp>
#include <toml.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <variant>

#include "pipetrain/deck_io.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

// ---- the key schema --------------------------------------------------------

using Field = std::variant<int64_t*, uint64_t*, double*, std::string*, std::vector<int64_t>*>;
using FieldOf = Field (*)(Deck&);

constexpr double kInf = std::numeric_limits<double>::infinity();

// Allowed interval of a number (or of each entry of an integer list).
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
};
constexpr Range at_least(double lo) { return {lo, kInf, false, false}; }
constexpr Range above(double lo) { return {lo, kInf, true, false}; }
constexpr Range between(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Range fraction() { return {0.0, 1.0, false, true}; }  // [0, 1)
constexpr Range any() { return {}; }

struct KeySpec {
  const char* section;
  const char* name;
  FieldOf field;
  Range range;          // numbers and integer lists
  const char* choices;  // strings: "a|b|c"; nullptr = any string
  const char* help;     // the comment deck_to_toml writes
};

#define PT_FIELD(member) [](Deck& d) -> Field { return &d.member; }

const char* const kSections[] = {"model", "data", "training", "pipeline", "output"};

// Upper bounds keep counts inside `int` where the runtime uses it.
const KeySpec kDeckKeys[] = {
    {"model", "type", PT_FIELD(model.type), any(), "mlp", "model family"},
    {"model", "input_dim", PT_FIELD(model.input_dim), between(1, 1 << 24), nullptr, "features per sample"},
    {"model", "hidden_dim", PT_FIELD(model.hidden_dim), between(1, 1 << 24), nullptr, "width of the hidden layers"},
    {"model", "output_dim", PT_FIELD(model.output_dim), between(1, 1 << 24), nullptr, "regression outputs, or classes for cross_entropy"},
    {"model", "depth", PT_FIELD(model.depth), between(1, 1 << 20), nullptr, "number of Linear layers (the unit split between stages)"},
    {"model", "activation", PT_FIELD(model.activation), any(), "relu|gelu", "activation between Linear layers"},
    {"model", "loss", PT_FIELD(model.loss), any(), "mse|cross_entropy", "training loss"},
    {"model", "init_seed", PT_FIELD(model.init_seed), at_least(0), nullptr, "parameter initialisation seed"},
    {"data", "type", PT_FIELD(data.type), any(), "synthetic", "training data: targets from a fixed random teacher network"},
    {"data", "samples", PT_FIELD(data.samples), at_least(1), nullptr, "size of the training set"},
    {"data", "seed", PT_FIELD(data.seed), at_least(0), nullptr, "data seed"},
    {"training", "steps", PT_FIELD(training.steps), at_least(1), nullptr, "optimizer steps"},
    {"training", "batch_size", PT_FIELD(training.batch_size), between(1, 1 << 30), nullptr, "samples per optimizer step (global batch)"},
    {"training", "optimizer", PT_FIELD(training.optimizer), any(), "sgd|adamw", "optimizer"},
    {"training", "lr", PT_FIELD(training.lr), above(0), nullptr, "peak learning rate"},
    {"training", "min_lr", PT_FIELD(training.min_lr), at_least(0), nullptr, "floor of the cosine decay (<= lr)"},
    {"training", "warmup_steps", PT_FIELD(training.warmup_steps), at_least(0), nullptr, "linear warm-up steps (< steps)"},
    {"training", "lr_schedule", PT_FIELD(training.lr_schedule), any(), "constant|cosine", "learning-rate schedule after warm-up"},
    {"training", "momentum", PT_FIELD(training.momentum), fraction(), nullptr, "SGD momentum"},
    {"training", "beta1", PT_FIELD(training.beta1), fraction(), nullptr, "AdamW first-moment decay"},
    {"training", "beta2", PT_FIELD(training.beta2), fraction(), nullptr, "AdamW second-moment decay"},
    {"training", "eps", PT_FIELD(training.eps), above(0), nullptr, "AdamW denominator epsilon"},
    {"training", "weight_decay", PT_FIELD(training.weight_decay), at_least(0), nullptr, "decoupled weight decay (AdamW), L2 (SGD)"},
    {"training", "grad_clip", PT_FIELD(training.grad_clip), at_least(0), nullptr, "global gradient-norm clip; 0 = off"},
    {"training", "blas_threads", PT_FIELD(training.blas_threads), between(0, 4096), nullptr, "BLAS threads per rank; 0 = node cores / ranks on the node"},
    {"pipeline", "stages", PT_FIELD(pipeline.stages), between(0, 1 << 16), nullptr, "pipeline stages, one per MPI rank; 0 = number of ranks"},
    {"pipeline", "micro_batches", PT_FIELD(pipeline.micro_batches), between(1, 1 << 20), nullptr, "micro-batches per step; must divide batch_size"},
    {"pipeline", "schedule", PT_FIELD(pipeline.schedule), any(), "gpipe|1f1b|file", "pipeline schedule"},
    {"pipeline", "schedule_file", PT_FIELD(pipeline.schedule_file), any(), nullptr, "schedule text file, with schedule = \"file\""},
    {"pipeline", "partition", PT_FIELD(pipeline.partition), at_least(1), nullptr, "Linear layers per stage; [] = as even as possible"},
    {"pipeline", "timeout_s", PT_FIELD(pipeline.timeout_s), above(0), nullptr, "seconds a rank waits for a peer before aborting"},
    {"output", "dir", PT_FIELD(output.dir), any(), nullptr, "run directory: metrics.h5, deck.resolved.toml, ..."},
    {"output", "log_every", PT_FIELD(output.log_every), at_least(1), nullptr, "print a step line every k steps"},
};

#undef PT_FIELD

bool is_section(const std::string& name) {
  return std::find(std::begin(kSections), std::end(kSections), name) != std::end(kSections);
}

const KeySpec* find_spec(const std::string& section, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section && name == spec.name) return &spec;
  }
  return nullptr;
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::istringstream in(choices);
  for (std::string item; std::getline(in, item, '|');) out.push_back(item);
  return out;
}

// ---- text helpers ----------------------------------------------------------

// Shortest %g text that reads back as exactly `x`.
std::string shortest(double x) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::string toml_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::string text = shortest(x);
  if (text.find('e') != std::string::npos && std::fabs(x) >= 1 && std::fabs(x) < 1e15) {
    char buf[40];  // an integer written as 1.2e+02: write 120 instead (exact below 2^53)
    std::snprintf(buf, sizeof buf, "%.0f", x);
    text = buf;
  }
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// The value of a deck field as TOML text.
std::string toml_text(const Field& field) {
  if (auto p = std::get_if<int64_t*>(&field)) return std::to_string(**p);
  if (auto p = std::get_if<uint64_t*>(&field)) return std::to_string(**p);
  if (auto p = std::get_if<double*>(&field)) return toml_float(**p);
  if (auto p = std::get_if<std::string*>(&field)) return toml_string(**p);
  const std::vector<int64_t>& list = *std::get<std::vector<int64_t>*>(field);
  std::string text = "[";
  for (size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + std::to_string(list[i]);
  return text + "]";
}

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

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      bool same = std::tolower(a[i - 1]) == std::tolower(b[j - 1]);
      size_t next = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.size()];
}

bool is_close(const std::string& typed, const std::string& known) {
  return edit_distance(typed, known) <= std::max<size_t>(1, typed.size() / 3);
}

std::string section_list() {
  std::string text;
  for (const char* s : kSections) text += std::string(text.empty() ? "" : ", ") + "[" + s + "]";
  return text;
}

// "; did you mean 'micro_batches'?" or the list of keys of the section.
std::string key_hint(const std::string& section, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section && is_close(name, spec.name)) {
      return "; did you mean '" + std::string(spec.name) + "'?";
    }
  }
  for (const KeySpec& spec : kDeckKeys) {
    if (is_close(name, spec.name)) {
      return "; did you mean '" + std::string(spec.section) + "." + spec.name + "'?";
    }
  }
  std::string keys;
  for (const KeySpec& spec : kDeckKeys) {
    if (section == spec.section) keys += (keys.empty() ? "" : ", ") + std::string(spec.name);
  }
  return "; the keys of [" + section + "] are: " + keys;
}

[[noreturn]] void unknown_key(const std::string& origin, const std::string& section,
                              const std::string& name) {
  throw InputError(origin + ": " + section + "." + name + ": unknown key" + key_hint(section, name));
}

[[noreturn]] void unknown_section(const std::string& origin, const std::string& name) {
  for (const char* s : kSections) {
    if (is_close(name, s)) {
      throw InputError(origin + ": [" + name + "]: unknown section; did you mean [" + s + "]?");
    }
  }
  throw InputError(origin + ": [" + name + "]: unknown section; the sections are " + section_list());
}

// A key written outside any section, e.g. "steps = 5" at the top of the file.
[[noreturn]] void key_outside_section(const std::string& origin, const std::string& name) {
  for (const KeySpec& spec : kDeckKeys) {
    if (name == spec.name) {
      throw InputError(origin + ": " + name + ": key outside any section; did you mean to put it under [" +
                       spec.section + "]?");
    }
  }
  throw InputError(origin + ": " + name + ": key outside any section; the sections are " + section_list());
}

[[noreturn]] void type_error(const std::string& at, const std::string& expected, const toml::value& v) {
  throw InputError(at + ": expected " + expected + ", got " + describe(v));
}

// ---- reading values --------------------------------------------------------

void read_list(const toml::value& v, std::vector<int64_t>& out, const std::string& at) {
  if (!v.is_array()) type_error(at, "an array of integers", v);
  std::vector<int64_t> list;
  for (const toml::value& entry : v.as_array()) {
    if (!entry.is_integer()) {
      type_error(at + " entry " + std::to_string(list.size()), "an integer", entry);
    }
    list.push_back(entry.as_integer());
  }
  out = list;
}

// Stores `v` in `field`, checking its TOML type; `at` prefixes messages.
void read_field(const toml::value& v, const Field& field, const std::string& at) {
  if (auto p = std::get_if<int64_t*>(&field)) {
    if (!v.is_integer()) type_error(at, "an integer", v);
    **p = v.as_integer();
  } else if (auto p = std::get_if<uint64_t*>(&field)) {
    if (!v.is_integer()) type_error(at, "an integer", v);
    if (v.as_integer() < 0) throw InputError(at + " = " + toml::format(v) + ": must be >= 0");
    **p = static_cast<uint64_t>(v.as_integer());
  } else if (auto p = std::get_if<double*>(&field)) {
    if (v.is_integer()) {
      **p = static_cast<double>(v.as_integer());
    } else if (v.is_floating()) {
      **p = v.as_floating();
    } else {
      type_error(at, "a float (an integer is accepted)", v);
    }
  } else if (auto p = std::get_if<std::string*>(&field)) {
    if (!v.is_string()) type_error(at, "a string", v);
    **p = v.as_string().str;
  } else {
    read_list(v, *std::get<std::vector<int64_t>*>(field), at);
  }
}

void set_key(Deck& deck, const std::string& section, const std::string& name,
             const toml::value& v, const std::string& origin) {
  const KeySpec* spec = find_spec(section, name);
  if (!spec) unknown_key(origin, section, name);
  std::string dotted = section + "." + name;
  deck.key_origin[dotted] = origin;
  read_field(v, spec->field(deck), deck.where(dotted));
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

toml::value parse_toml(const std::string& text, const std::string& source_name) {
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

void read_sections(const toml::value& root, const std::string& file, Deck& deck) {
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
    size_t dot = dotted.find('.');
    set_key(deck, dotted.substr(0, dot), dotted.substr(dot + 1), *v, origin_at(file, *v));
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

void apply_override(const std::string& arg, Deck& deck) {
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
  const KeySpec* spec = find_spec(section, name);
  if (!spec) unknown_key(origin, section, name);
  toml::value v = override_value(raw);
  // A string key takes the text as written (e.g. output.dir=2024 is "2024").
  if (std::holds_alternative<std::string*>(spec->field(deck)) && !v.is_string()) v = toml::value(raw);
  set_key(deck, section, name, v, origin);
}

// ---- value checks ----------------------------------------------------------

bool in_range(double x, const Range& r) {
  bool lo_ok = r.lo_open ? x > r.lo : x >= r.lo;
  bool hi_ok = r.hi_open ? x < r.hi : x <= r.hi;
  return lo_ok && hi_ok;
}

std::string range_text(const Range& r) {
  if (r.hi == kInf) return std::string(r.lo_open ? "> " : ">= ") + shortest(r.lo);
  return std::string("in ") + (r.lo_open ? "(" : "[") + shortest(r.lo) + ", " + shortest(r.hi) +
         (r.hi_open ? ")" : "]");
}

void check_value(Deck& deck, const KeySpec& spec) {
  Field field = spec.field(deck);
  std::string at = deck.where(std::string(spec.section) + "." + spec.name) + " = " + toml_text(field);
  if (auto p = std::get_if<int64_t*>(&field)) {
    if (!in_range(static_cast<double>(**p), spec.range)) throw InputError(at + ": must be " + range_text(spec.range));
  } else if (auto p = std::get_if<double*>(&field)) {
    if (!std::isfinite(**p)) throw InputError(at + ": must be a finite number " + range_text(spec.range));
    if (!in_range(**p, spec.range)) throw InputError(at + ": must be " + range_text(spec.range));
  } else if (auto p = std::get_if<std::string*>(&field)) {
    if (!spec.choices) return;
    std::vector<std::string> allowed = split_choices(spec.choices);
    if (std::find(allowed.begin(), allowed.end(), **p) != allowed.end()) return;
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + toml_string(a);
    throw InputError(at + ": must be one of " + list);
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&field)) {
    for (size_t i = 0; i < (*p)->size(); ++i) {
      if (!in_range(static_cast<double>((**p)[i]), spec.range)) {
        throw InputError(at + ": entry " + std::to_string(i) + " is " + std::to_string((**p)[i]) +
                         "; every entry must be " + range_text(spec.range));
      }
    }
  }
}

// "pipeline.micro_batches = 8 (inputs/mlp.toml:20)": a second key in a message.
std::string other_key(const Deck& deck, const std::string& dotted, const std::string& value) {
  auto it = deck.key_origin.find(dotted);
  return dotted + " = " + value + " (" + (it == deck.key_origin.end() ? "default" : it->second) + ")";
}

void check_consistency(const Deck& deck) {
  const TrainingConfig& t = deck.training;
  const PipelineConfig& p = deck.pipeline;
  if (t.batch_size % p.micro_batches != 0) {
    throw InputError(deck.where("training.batch_size") + " = " + std::to_string(t.batch_size) +
                     ": must be divisible by " +
                     other_key(deck, "pipeline.micro_batches", std::to_string(p.micro_batches)));
  }
  if (t.warmup_steps >= t.steps) {
    throw InputError(deck.where("training.warmup_steps") + " = " + std::to_string(t.warmup_steps) +
                     ": must be < " + other_key(deck, "training.steps", std::to_string(t.steps)));
  }
  if (t.min_lr > t.lr) {
    throw InputError(deck.where("training.min_lr") + " = " + toml_float(t.min_lr) + ": must be <= " +
                     other_key(deck, "training.lr", toml_float(t.lr)));
  }
  if (deck.model.loss == "cross_entropy" && deck.model.output_dim < 2) {
    throw InputError(deck.where("model.loss") + " = \"cross_entropy\": needs at least 2 classes, but " +
                     other_key(deck, "model.output_dim", std::to_string(deck.model.output_dim)));
  }
  if (p.schedule == "file" && p.schedule_file.empty()) {
    throw InputError(deck.where("pipeline.schedule") +
                     " = \"file\": needs pipeline.schedule_file (the schedule text file to run)");
  }
  if (p.schedule != "file" && !p.schedule_file.empty()) {
    throw InputError(deck.where("pipeline.schedule_file") + " = " + toml_string(p.schedule_file) +
                     ": is only used with pipeline.schedule = \"file\", but " +
                     other_key(deck, "pipeline.schedule", toml_string(p.schedule)));
  }
  if (deck.output.dir.empty()) {
    throw InputError(deck.where("output.dir") + " = \"\": must name a directory");
  }
}

}  // namespace

// ---- the deck API ----------------------------------------------------------

Deck parse_deck_text(const std::string& text, const std::string& source_name,
                     const std::vector<std::string>& overrides) {
  toml::value root = parse_toml(text, source_name);
  Deck deck;
  deck.source_file = source_name;
  read_sections(root, source_name, deck);
  for (const std::string& arg : overrides) apply_override(arg, deck);
  for (const KeySpec& spec : kDeckKeys) check_value(deck, spec);
  check_consistency(deck);
  return deck;
}

Deck parse_deck_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a directory, not a deck file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the deck file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_deck_text(text.str(), path, overrides);
}

std::string deck_to_toml(const Deck& deck) {
  Deck copy = deck;  // the schema hands out non-const field pointers
  std::ostringstream out;
  out << "# pipetrain input deck, resolved: every key, defaults included.\n"
         "# Run it with: mpirun -np <ranks> pipetrain train <this file>\n";
  for (const char* section : kSections) {
    out << "\n[" << section << "]\n";
    for (const KeySpec& spec : kDeckKeys) {
      if (std::strcmp(spec.section, section) != 0) continue;
      std::string line = std::string(spec.name) + " = " + toml_text(spec.field(copy));
      if (line.size() < 32) line.resize(32, ' ');
      out << line << "  # " << spec.help;
      if (spec.choices) out << " (" << std::string(spec.choices) << ")";
      out << "\n";
    }
  }
  return out.str();
}

// ---- the command line ------------------------------------------------------

namespace {

const char* const kUsage =
    "usage: pipetrain train DECK [--set section.key=value]...\n"
    "       pipetrain validate DECK [--set section.key=value]... [--ranks N] [--print-schedule]\n"
    "       pipetrain --help";

CLI::App* add_deck_command(CLI::App& app, const char* name, const char* what, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(name, what);
  sub->add_option("DECK", cl.deck_path, "input deck (TOML)")->required();
  sub->add_option("--set", cl.overrides,
                  "override a deck key; the value is TOML (a bare word is a string); repeatable")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  return sub;
}

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine cl;
  CLI::App app{"pipetrain: pipeline-parallel training (GPipe, 1F1B) with MPI", "pipetrain"};
  app.footer("Example: mpirun -np 4 pipetrain train inputs/mlp.toml --set training.steps=10");
  app.require_subcommand(1, 1);
  CLI::App* train = add_deck_command(app, "train", "train the model described by DECK (one MPI rank per stage)", cl);
  CLI::App* validate = add_deck_command(app, "validate", "check DECK and its schedule without training", cl);
  validate->add_option("--ranks", cl.ranks, "check against N ranks (default: the MPI world size)")
      ->check(CLI::Range(1, 1 << 16));
  validate->add_flag("--print-schedule", cl.print_schedule, "print the schedule as a rank x step grid");
  std::string first = argc > 1 ? argv[1] : "help";
  if (first != "train" && first != "validate" && first != "help" && first[0] != '-') {
    throw InputError("pipetrain: unknown command '" + first + "'; expected train or validate\n" + kUsage);
  }
  if (first == "help") {
    cl.command = "help";
    cl.help_text = app.help();
    return cl;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {  // --help, --help-all
    cl.command = "help";
    cl.help_text = app.help();
    return cl;
  } catch (const CLI::ParseError& e) {
    throw InputError(std::string("pipetrain: ") + e.what() + "\n" + kUsage);
  }
  cl.command = train->parsed() ? "train" : "validate";
  return cl;
}

}  // namespace pt
