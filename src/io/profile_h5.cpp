// profile_h5.cpp: profile.h5 (attributes for the profile's description and
// link, group `units` with one column per UnitCost field; docs/profile.md),
// and choosing between a profile and a trace when loading one for a plan.
#include "pipetrain/io/profile_io.hpp"
#include "pipetrain/base/hdf5_lock.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>

#include "checkpoint_h5.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/io/trace_io.hpp"
#include "pipetrain/plan/alternatives.hpp"

namespace pt {

namespace {

using ckpt::H5Id;

// The number columns of group `units`, one float64 dataset each. An
// optional one came after profiles that lack it: absent, the field keeps
// UnitCost's default.
struct Column {
  const char* name;
  double UnitCost::*field;
  bool optional = false;
};
constexpr Column kColumns[] = {
    {"forward_s", &UnitCost::forward_s},
    {"backward_s", &UnitCost::backward_s},
    {"recompute_s", &UnitCost::recompute_s},
    {"recompute_end_s", &UnitCost::recompute_end_s},
    {"recompute_selective_s", &UnitCost::recompute_selective_s},
    {"optimizer_s", &UnitCost::optimizer_s},
    {"forward_flops", &UnitCost::forward_flops},
    {"input_bytes", &UnitCost::input_bytes},
    {"output_bytes", &UnitCost::output_bytes},
    {"stash_none_bytes", &UnitCost::stash_none_bytes},
    {"stash_selective_bytes", &UnitCost::stash_selective_bytes},
    {"stash_always_bytes", &UnitCost::stash_always_bytes},
    {"workspace_bytes", &UnitCost::workspace_bytes},
    {"backward_workspace_bytes", &UnitCost::backward_workspace_bytes},
    // F's own transient peak; a profile from before has none: read as 0
    // (workspace_bytes used).
    {"forward_workspace_bytes", &UnitCost::forward_workspace_bytes, true},
    {"param_bytes", &UnitCost::param_bytes},
    {"grad_bytes", &UnitCost::grad_bytes},
    {"optimizer_bytes", &UnitCost::optimizer_bytes},
    {"data_bytes", &UnitCost::data_bytes},
};

// units/kept_input_bytes, the input as each unit keeps it (activation
// copies), written since they exist; a profile from before has none, and
// its units kept their inputs whole: read as UnitCost's default (input_bytes).
constexpr const char* kKeptInputColumn = "kept_input_bytes";

// units/step_input_s and units/step_weight_s, a step's split backward per
// micro-batch (UnitCost): written together when the stage chains measured
// them; a profile without them leaves UnitCost's -1 (not measured).
constexpr const char* kStepInputColumn = "step_input_s";
constexpr const char* kStepWeightColumn = "step_weight_s";

const std::string kExpected = std::string("expected a profile.h5 written by `pipetrain profile` (attribute format = \"") +
                              kProfileFormat + "\", format_version " +
                              std::to_string(kProfileFormatVersion) + ")";

[[noreturn]] void refuse(const std::string& path, const std::string& problem) {
  throw InputError(path + ": " + problem + "; " + kExpected);
}

void write_column(hid_t group, const char* name, const std::vector<double>& values) {
  hsize_t dims[1] = {values.size()};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id plist = ckpt::untimed_dataset_plist();
  H5Id dset(H5Dcreate2(group, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT),
            H5Dclose);
  H5_CHECK(dset.get());
  if (!values.empty())
    H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

void write_units(hid_t file, const std::vector<UnitCost>& units) {
  H5Id group = ckpt::create_group(file, "units");
  std::vector<std::string> names;
  std::vector<int64_t> partitionable, layers;
  for (const UnitCost& u : units) {
    names.push_back(u.name);
    partitionable.push_back(u.partitionable ? 1 : 0);
    layers.push_back(u.layers);
  }
  ckpt::write_list(group.get(), "name", names);
  ckpt::write_list(group.get(), "partitionable", partitionable);
  ckpt::write_list(group.get(), "layers", layers);
  for (const Column& c : kColumns) {
    std::vector<double> values;
    for (const UnitCost& u : units) values.push_back(u.*c.field);
    write_column(group.get(), c.name, values);
  }
  std::vector<double> kept;
  for (const UnitCost& u : units) kept.push_back(u.kept_input());
  write_column(group.get(), kKeptInputColumn, kept);
  bool step_split = true;
  std::vector<double> step_input, step_weight;
  for (const UnitCost& u : units) {
    step_split = step_split && u.step_input_s >= 0.0 && u.step_weight_s >= 0.0;
    step_input.push_back(u.step_input_s);
    step_weight.push_back(u.step_weight_s);
  }
  if (!step_split) return;
  write_column(group.get(), kStepInputColumn, step_input);
  write_column(group.get(), kStepWeightColumn, step_weight);
}

// The float64 column `name` of `group` (named group_name), of exactly n
// finite values >= 0.
std::vector<double> read_column(hid_t group, const std::string& name, size_t n, const std::string& path,
                                const std::string& group_name = "units") {
  const std::string where = "dataset " + group_name + "/" + name;
  if (!ckpt::has_link(group, name)) refuse(path, where + " is missing");
  H5Id dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  H5Id type(dset.valid() ? H5Dget_type(dset.get()) : -1, H5Tclose);
  H5Id space(dset.valid() ? H5Dget_space(dset.get()) : -1, H5Sclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_FLOAT || !space.valid() ||
      H5Sget_simple_extent_ndims(space.get()) != 1)
    refuse(path, where + " is not a 1-D float dataset");
  const auto rows = static_cast<size_t>(H5Sget_simple_extent_npoints(space.get()));
  if (rows != n)
    refuse(path, where + " has " + std::to_string(rows) + " rows, not " + std::to_string(n) +
                     (group_name == "units" ? " (one per unit, as units/name)"
                                            : " (one per row of " + group_name + "/replicas)"));
  std::vector<double> values(n);
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    refuse(path, where + " cannot be read (damaged file)");
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i]) || values[i] < 0.0)
      refuse(path, where + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
                       " is not a finite value >= 0");
  return values;
}

// units/layers: the executor layers of each unit (recompute every:K counts
// layers). A profile written before it was recorded is refused: read as one
// layer per unit, an MLP's every:K would count units.
void read_layers(hid_t group, std::vector<UnitCost>& units, const std::string& path) {
  std::vector<int64_t> layers;
  if (!ckpt::has_link(group, "layers") || !ckpt::read_list(group, "layers", layers) ||
      layers.size() != units.size())
    throw InputError(path + ": dataset units/layers (1-D integer, one per unit: the executor layers "
                     "recompute every:K counts) is missing or of another length; profile the deck "
                     "again with `pipetrain profile`");
  for (size_t i = 0; i < units.size(); ++i) {
    if (layers[i] < 1)
      refuse(path, "units/layers[" + std::to_string(i) + "] = " + std::to_string(layers[i]) + " is not >= 1");
    units[i].layers = layers[i];
  }
}

void read_step_split(hid_t group, std::vector<UnitCost>& units, const std::string& path) {
  const bool input = ckpt::has_link(group, kStepInputColumn), weight = ckpt::has_link(group, kStepWeightColumn);
  if (!input && !weight) return;
  if (!input || !weight)
    refuse(path, std::string("dataset units/") + (input ? kStepWeightColumn : kStepInputColumn) +
                     " is missing (units/" + kStepInputColumn + " and units/" + kStepWeightColumn +
                     " come together)");
  const std::vector<double> in = read_column(group, kStepInputColumn, units.size(), path);
  const std::vector<double> w = read_column(group, kStepWeightColumn, units.size(), path);
  for (size_t i = 0; i < units.size(); ++i) {
    units[i].step_input_s = in[i];
    units[i].step_weight_s = w[i];
  }
}

std::vector<UnitCost> read_units(hid_t file, const std::string& path) {
  if (!ckpt::has_link(file, "units")) refuse(path, "group units is missing");
  H5Id group(H5Gopen2(file, "units", H5P_DEFAULT), H5Gclose);
  std::vector<std::string> names;
  std::vector<int64_t> partitionable;
  if (!group.valid() || !ckpt::read_list(group.get(), "name", names))
    refuse(path, "dataset units/name (1-D text) is missing or unreadable");
  if (names.empty()) refuse(path, "the profile has no units");
  if (!ckpt::read_list(group.get(), "partitionable", partitionable) || partitionable.size() != names.size())
    refuse(path, "dataset units/partitionable (1-D integer, one per unit) is missing or of another length");
  std::vector<UnitCost> units(names.size());
  for (size_t i = 0; i < units.size(); ++i) {
    units[i].name = names[i];
    units[i].partitionable = partitionable[i] != 0;
  }
  read_layers(group.get(), units, path);
  for (const Column& c : kColumns) {
    if (c.optional && !ckpt::has_link(group.get(), c.name)) continue;
    const std::vector<double> values = read_column(group.get(), c.name, units.size(), path);
    for (size_t i = 0; i < units.size(); ++i) units[i].*c.field = values[i];
  }
  if (ckpt::has_link(group.get(), kKeptInputColumn)) {
    const std::vector<double> kept = read_column(group.get(), kKeptInputColumn, units.size(), path);
    for (size_t i = 0; i < units.size(); ++i) units[i].kept_input_bytes = kept[i];
  }
  read_step_split(group.get(), units, path);
  return units;
}

// reductions/replicas, reductions/grad_bytes and reductions/seconds: the
// data-parallel reductions the profile timed (ModelProfile::reductions), a
// row per timed reduction; no group when none was timed (D = 1, and files
// from before). Each D's link is fitted again from its rows on reading.
constexpr const char* kReductions = "reductions";

void write_reductions(hid_t file, const std::vector<MeasuredReduction>& reductions) {
  if (reductions.empty()) return;
  H5Id group = ckpt::create_group(file, kReductions);
  std::vector<int64_t> replicas;
  std::vector<double> bytes, seconds;
  for (const MeasuredReduction& r : reductions)
    for (size_t i = 0; i < r.grad_bytes.size(); ++i) {
      replicas.push_back(r.replicas);
      bytes.push_back(r.grad_bytes[i]);
      seconds.push_back(r.seconds[i]);
    }
  ckpt::write_list(group.get(), "replicas", replicas);
  write_column(group.get(), "grad_bytes", bytes);
  write_column(group.get(), "seconds", seconds);
}

std::vector<MeasuredReduction> read_reductions(hid_t file, const std::string& path) {
  if (!ckpt::has_link(file, kReductions)) return {};
  H5Id group(H5Gopen2(file, kReductions, H5P_DEFAULT), H5Gclose);
  std::vector<int64_t> replicas;
  if (!group.valid() || !ckpt::read_list(group.get(), "replicas", replicas) || replicas.empty())
    refuse(path, "dataset reductions/replicas (1-D integer, the D of each timed reduction) is missing or empty");
  const std::vector<double> bytes = read_column(group.get(), "grad_bytes", replicas.size(), path, kReductions);
  const std::vector<double> seconds = read_column(group.get(), "seconds", replicas.size(), path, kReductions);
  std::vector<MeasuredReduction> reductions;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const std::string row = "[" + std::to_string(i) + "]";
    if (replicas[i] < 2) refuse(path, "reductions/replicas" + row + " = " + std::to_string(replicas[i]) + " is not >= 2");
    if (bytes[i] <= 0.0 || seconds[i] <= 0.0)
      refuse(path, "reductions/grad_bytes" + row + " and reductions/seconds" + row + " must be > 0");
    auto it = std::find_if(reductions.begin(), reductions.end(),
                           [&](const MeasuredReduction& r) { return r.replicas == replicas[i]; });
    if (it == reductions.end()) {
      reductions.push_back({static_cast<int>(replicas[i]), {}, {}, {}});
      it = reductions.end() - 1;
    }
    it->grad_bytes.push_back(bytes[i]);
    it->seconds.push_back(seconds[i]);
  }
  for (MeasuredReduction& r : reductions) r.link = fit_reduction_link(r.replicas, r.grad_bytes, r.seconds);
  return reductions;
}

std::string text_attr(hid_t file, const char* name, const std::string& path) {
  std::string value;
  if (!ckpt::read_attr(file, name, value)) refuse(path, std::string("text attribute '") + name + "' is missing");
  return value;
}

double number_attr(hid_t file, const char* name, const std::string& path) {
  double value = 0.0;
  if (!ckpt::read_attr(file, name, value) || !std::isfinite(value) || value < 0.0)
    refuse(path, std::string("float attribute '") + name + "' is missing or not a finite value >= 0");
  return value;
}

void check_format(hid_t file, const std::string& path) {
  const std::string format = text_attr(file, "format", path);
  if (format != kProfileFormat) refuse(path, "attribute format = \"" + format + "\"");
  int64_t version = 0;
  if (!ckpt::read_attr(file, "format_version", version))
    refuse(path, "integer attribute 'format_version' is missing");
  if (version != kProfileFormatVersion)
    throw InputError(path + ": profile format_version " + std::to_string(version) +
                     "; this pipetrain reads version " + std::to_string(kProfileFormatVersion) +
                     " (profile the deck again with `pipetrain profile`)");
}

H5Id open_hdf5(const std::string& path, const std::string& expected) {
  require_regular_file(path, expected.rfind("expected ", 0) == 0 ? expected.substr(9) : expected);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw InputError(path + ": not an HDF5 file (damaged or of another kind); " + expected);
  return file;
}

}  // namespace

void write_profile_file(const std::string& path, const ModelProfile& profile,
                        const ProfileProvenance& provenance) {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  const std::string tmp = path + ".tmp";
  {
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) throw Error("cannot create " + tmp);
    const hid_t f = file.get();
    ckpt::write_attr(f, "format", std::string(kProfileFormat));
    ckpt::write_attr(f, "format_version", kProfileFormatVersion);
    ckpt::write_attr(f, "model", profile.model);
    ckpt::write_attr(f, "backend", profile.backend);
    ckpt::write_attr(f, "kernels", profile.kernels);
    ckpt::write_attr(f, "micro_batch_rows", profile.micro_batch_rows);
    ckpt::write_attr(f, "link_latency_s", profile.link.latency_s);
    ckpt::write_attr(f, "link_bandwidth_bytes_per_s", profile.link.bandwidth_bytes_per_s);
    ckpt::write_attr(f, "step_overhead_s", profile.step_overhead_s);
    ckpt::write_attr(f, "stage_data_bytes", profile.stage_data_bytes);
    ckpt::write_attr(f, "cache", profile.cache);
    ckpt::write_attr(f, "calibration", profile.calibration);
    ckpt::write_attr(f, "source", provenance.source);
    ckpt::write_attr(f, "deck", provenance.deck);
    write_units(f, profile.units);
    write_reductions(f, profile.reductions);
    H5_CHECK(file.reset());
  }
  ckpt::fsync_path(tmp);
  ckpt::rename_path(tmp, path);
}

ModelProfile read_profile_file(const std::string& path) {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  QuietHdf5 quiet;
  H5Id file = open_hdf5(path, kExpected);
  check_format(file.get(), path);
  ModelProfile p;
  p.model = text_attr(file.get(), "model", path);
  p.backend = text_attr(file.get(), "backend", path);
  p.kernels = text_attr(file.get(), "kernels", path);
  if (!ckpt::read_attr(file.get(), "micro_batch_rows", p.micro_batch_rows) || p.micro_batch_rows < 1)
    refuse(path, "integer attribute 'micro_batch_rows' (>= 1) is missing");
  p.link.latency_s = number_attr(file.get(), "link_latency_s", path);
  p.link.bandwidth_bytes_per_s = number_attr(file.get(), "link_bandwidth_bytes_per_s", path);
  p.step_overhead_s = number_attr(file.get(), "step_overhead_s", path);
  p.stage_data_bytes = number_attr(file.get(), "stage_data_bytes", path);
  p.cache = text_attr(file.get(), "cache", path);
  p.calibration = text_attr(file.get(), "calibration", path);
  p.units = read_units(file.get(), path);
  p.reductions = read_reductions(file.get(), path);
  return p;
}

void check_profile_matches(const ModelProfile& profile, const Deck& deck, const std::string& path) {
  const std::string model = profile_model_description(deck);
  const int64_t rows = micro_batch_rows(deck);
  if (profile.model == model && profile.micro_batch_rows == rows) return;
  const std::string name = deck.source_file.empty() ? "DECK" : deck.source_file;
  throw InputError(path + ": made for \"" + profile.model + "\" with micro-batches of " +
                   std::to_string(profile.micro_batch_rows) + " samples, but the deck " + name +
                   " has \"" + model + "\" with micro-batches of " + std::to_string(rows) +
                   " samples; profile this deck (`pipetrain profile " + name + "`)");
}

ProfileSource profile_source_of(const std::string& path) {
  const std::string expected = std::string("expected a profile.h5 (attribute format = \"") +
                               kProfileFormat + "\", from `pipetrain profile`) or a trace.h5 "
                               "(group events, from a run with output.trace = true)";
  QuietHdf5 quiet;
  H5Id file = open_hdf5(path, expected);
  std::string format;
  if (ckpt::read_attr(file.get(), "format", format) && format == kProfileFormat)
    return ProfileSource::Profile;
  if (format.empty() && ckpt::has_link(file.get(), "events") &&
      H5Aexists(file.get(), "kind_names") > 0)
    return ProfileSource::Trace;
  throw InputError(path + ": neither a profile nor a trace" +
                   (format.empty() ? std::string() : " (attribute format = \"" + format + "\")") +
                   "; " + expected);
}

ModelProfile load_profile_for_deck(const std::string& path, const Deck& deck, Backend& be,
                                   const ProfileOptions& options) {
  ModelProfile profile;
  if (profile_source_of(path) == ProfileSource::Profile) {
    profile = read_profile_file(path);
  } else {
    const RunTrace trace = read_trace_file(path);
    const Deck traced = parse_deck_text(trace.deck, path + " (attribute deck)", {});
    ModelProfile header;
    header.model = profile_model_description(traced);
    header.micro_batch_rows = micro_batch_rows(traced);
    check_profile_matches(header, deck, path);  // before measuring anything
    profile = profile_from_trace(traced, trace, be, options);
  }
  check_profile_matches(profile, deck, path);
  return profile;
}

}  // namespace pt
