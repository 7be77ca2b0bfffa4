// deck_schema.hpp: the deck's key table and the toml-free checks (private to
// src/io). One KeySpec per deck key drives reading (deck_toml.cpp), range and
// choice checks, applicability (a key of another model or data type is an
// error) and deck_to_toml. Model families are not named here: model.type's
// choices and which [model] keys apply come from their registry
// (model/family.hpp).
#pragma once

#include <limits>
#include <map>
#include <type_traits>
#include <string>
#include <variant>
#include <vector>

#include "pipetrain/base/deck.hpp"

namespace pt::deck_schema {

// pipeline.partition: a strategy name, or a list of counts (strategy Explicit).
struct PartitionRef {
  PartitionStrategy* strategy;
  std::vector<int64_t>* counts;
};

// A field holding an enum of base/deck_kinds.hpp, with its name table.
struct KindRef {
  KindNames names;
  void* field;
  size_t (*get)(const void* field);
  void (*set)(void* field, size_t index);

  const char* name() const { return names.names[get(field)]; }
  // Sets the field to the kind named `text`; false when none is.
  bool parse(const std::string& text) const;
  std::string choices() const { return names.joined(); }  // "a|b|c"
};

// data.path and data.eval_path: one string (a file or a glob pattern) or a
// list of them; a string clears the list, a list clears the string.
struct PathsRef {
  std::string* one;
  std::vector<std::string>* list;
};

using Field = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                           std::vector<std::string>*, PartitionRef, KindRef, PathsRef>;
using FieldOf = Field (*)(Deck&);

// The Field of a deck member: a KindRef for an enum, else the pointer.
template <class T>
Field field_of(T* member) {
  if constexpr (std::is_enum_v<T>) {
    return KindRef{kind_names(T{}), member,
                   [](const void* f) { return static_cast<size_t>(*static_cast<const T*>(f)); },
                   [](void* f, size_t i) { *static_cast<T*>(f) = static_cast<T>(i); }};
  } else {
    return member;
  }
}

// The strategy names a deck may write for pipeline.partition (all but
// "explicit", which a list of counts means): "uniform|time|memory|balanced".
std::string partition_choices();

// Kind values that named no kind when read, by dotted key, with their text:
// check_deck reports them in key order, after the keys that do not apply.
using UnreadKinds = std::map<std::string, std::string>;

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
  const char* choices;  // strings: "a|b|c"; nullptr = any string (kinds: their table)
  const char* help;     // the comment deck_to_toml writes
  bool (*applies)(const Deck&);  // nullptr = always
  const char* applies_when;      // e.g. "rebalance.enabled = true"
  // Choices supplied from above as "a|b|c" (model.type: the registered
  // model families); used when `choices` is nullptr.
  std::string (*choices_of)() = nullptr;
  // A [model] key that applies when the deck's model family declares it
  // (ModelFamily::keys); `applies` is then nullptr.
  bool of_family = false;
};

// A key that moved to another section (#41): the deck may still write
// old_key ("pipeline.rebalance_every"); it sets new_key ("rebalance.every").
struct MovedKey {
  const char* old_key;
  const char* new_key;
};

const std::vector<KeySpec>& keys();
const std::vector<std::string>& sections();
bool is_section(const std::string& name);
const KeySpec* find_spec(const std::string& section, const std::string& name);
// The entry of the one table of moved keys (kMovedKeys) for an old dotted
// key; nullptr when `old_key` is no old name.
const MovedKey* moved_key(const std::string& old_key);
// `text` with every moved key's new dotted name replaced by its old one
// ("rebalance.enabled = true" -> "pipeline.rebalance = true"): the rule in
// the message about a key written under its old name uses old names too.
std::string in_old_names(std::string text);

std::string shortest(double x);        // shortest %g text that reads back exactly
std::string toml_float(double x);
std::string toml_string(const std::string& s);
std::string toml_text(const Field& field);

[[noreturn]] void unknown_key(const std::string& origin, const std::string& section,
                              const std::string& name);
[[noreturn]] void unknown_section(const std::string& origin, const std::string& name);
[[noreturn]] void key_outside_section(const std::string& origin, const std::string& name);

// Ranges, choices and applicability of every key, then cross-key
// consistency; `unread` are the kind values that named no kind.
void check_deck(Deck& deck, const UnreadKinds& unread);

}  // namespace pt::deck_schema
