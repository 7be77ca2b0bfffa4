// deck_schema.hpp: the deck's key table and the toml-free checks (private to
// src/io). One KeySpec per deck key drives reading (deck_toml.cpp), range and
// choice checks, applicability (a key of another model or data type is an
// error) and deck_to_toml. Model families are not named here: model.type's
// choices and which [model] keys apply come from their registry
// (model/family.hpp).
#pragma once

#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "pipetrain/base/deck.hpp"

namespace pt::deck_schema {

// pipeline.partition: a strategy name, or a list of counts (strategy "explicit").
struct PartitionRef {
  std::string* strategy;
  std::vector<int64_t>* counts;
};
constexpr const char* kPartitionStrategies = "uniform|time|memory|balanced";

using Field = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                           std::vector<std::string>*, PartitionRef>;
using FieldOf = Field (*)(Deck&);

constexpr double kInf = std::numeric_limits<double>::infinity();

// Allowed interval of a number (or of each entry of an integer list).
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
};

struct KeySpec {
  const char* section;
  const char* name;
  FieldOf field;
  Range range;          // numbers and integer lists
  const char* choices;  // strings: "a|b|c"; nullptr = any string
  const char* help;     // the comment deck_to_toml writes
  bool (*applies)(const Deck&);  // nullptr = always
  const char* applies_when;      // e.g. "pipeline.rebalance = true"
  // Choices supplied from above as "a|b|c" (model.type: the registered
  // model families); used when `choices` is nullptr.
  std::string (*choices_of)() = nullptr;
  // A [model] key that applies when the deck's model family declares it
  // (ModelFamily::keys); `applies` is then nullptr.
  bool of_family = false;
};

const std::vector<KeySpec>& keys();
const std::vector<std::string>& sections();
bool is_section(const std::string& name);
const KeySpec* find_spec(const std::string& section, const std::string& name);

std::string shortest(double x);        // shortest %g text that reads back exactly
std::string toml_float(double x);
std::string toml_string(const std::string& s);
std::string toml_text(const Field& field);

[[noreturn]] void unknown_key(const std::string& origin, const std::string& section,
                              const std::string& name);
[[noreturn]] void unknown_section(const std::string& origin, const std::string& name);
[[noreturn]] void key_outside_section(const std::string& origin, const std::string& name);

// Ranges, choices and applicability of every key, then cross-key consistency.
void check_deck(Deck& deck);

}  // namespace pt::deck_schema
