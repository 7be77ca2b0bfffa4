// profile_io.hpp: profile.h5, a model's cost profile on disk (layout in
// docs/profile.md), and loading the profile a plan runs on: a profile.h5,
// or one derived from the trace.h5 of an earlier run, chosen by the file's
// contents.
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/plan/cost.hpp"
#include "pipetrain/runtime/profiler.hpp"

namespace pt {

constexpr const char* kProfileFormat = "pipetrain-profile";  // attribute `format`
constexpr int64_t kProfileFormatVersion = 3;                 // attribute `format_version`

// What profile.h5 stores besides the profile.
struct ProfileProvenance {
  std::string deck;    // the resolved deck that was profiled
  std::string source;  // how: "measured: ..." or "derived from the trace ..."
};

// Written to a temporary name, fsync'ed and renamed.
void write_profile_file(const std::string& path, const ModelProfile& profile,
                        const ProfileProvenance& provenance);
// One InputError naming the file and what was expected when it is not a
// readable profile.h5 of this format version.
ModelProfile read_profile_file(const std::string& path);
// InputError naming the file and the deck unless `profile` is for the deck's
// model, optimizer and precision (profile_model_description) and micro-batch size.
void check_profile_matches(const ModelProfile& profile, const Deck& deck, const std::string& path);

enum class ProfileSource { Profile, Trace };
// Which kind of file `path` is; InputError when neither.
ProfileSource profile_source_of(const std::string& path);

// The profile of `deck` in `path`: a profile.h5 is read; a trace.h5 of a run
// of the same model (its deck attribute) is turned into one by
// profile_from_trace, bytes measured on `be`. Checked against the deck.
ModelProfile load_profile_for_deck(const std::string& path, const Deck& deck, Backend& be,
                                   const ProfileOptions& options = {});

}  // namespace pt
