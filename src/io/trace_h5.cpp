// trace_h5.cpp: trace.h5, every rank's timeline as compound HDF5 datasets;
// writing it at the end of a run, reading it back (for profiles).
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint_h5.hpp"
#include "pipetrain/base/hdf5_lock.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/io/trace_io.hpp"
#include "pipetrain/plan/simulate.hpp"

namespace pt {

namespace {

hid_t event_type() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(TraceEvent));
  H5_CHECK(t);
  H5_CHECK(H5Tinsert(t, "step", HOFFSET(TraceEvent, step), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "stage", HOFFSET(TraceEvent, stage), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "mb", HOFFSET(TraceEvent, mb), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "kind", HOFFSET(TraceEvent, kind), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "start_us", HOFFSET(TraceEvent, start_us), H5T_NATIVE_DOUBLE));
  H5_CHECK(H5Tinsert(t, "end_us", HOFFSET(TraceEvent, end_us), H5T_NATIVE_DOUBLE));
  return t;
}

void string_attr(hid_t obj, const char* name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5_CHECK(H5Tset_size(type, value.empty() ? 1 : value.size()));
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, type, value.empty() ? "" : value.c_str()));
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void numeric_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* data,
                  size_t count) {
  hsize_t dims[1] = {count};
  hid_t space = count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, nullptr);
  hid_t attr = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, mem_type, data));
  H5Aclose(attr);
  H5Sclose(space);
}

// A 1-D chunked dataset of events (chunks of up to 4096 events).
void write_events(hid_t group, const std::string& name, const std::vector<TraceEvent>& events,
                  hid_t type) {
  hsize_t dims[1] = {events.size()}, chunk[1] = {std::max<hsize_t>(1, std::min<hsize_t>(4096, events.size()))};
  hsize_t max_dims[1] = {H5S_UNLIMITED};
  hid_t space = H5Screate_simple(1, dims, max_dims);
  hid_t props = H5Pcreate(H5P_DATASET_CREATE);
  H5_CHECK(H5Pset_chunk(props, 1, chunk));
  hid_t dset = H5Dcreate2(group, name.c_str(), type, space, H5P_DEFAULT, props, H5P_DEFAULT);
  H5_CHECK(dset);
  if (!events.empty()) H5_CHECK(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()));
  H5Dclose(dset);
  H5Pclose(props);
  H5Sclose(space);
}


// The schedule's bubble at this run's own median action costs (cost_bubble)
// and those costs (action_costs_s, (stages, 3): F, B, W seconds); neither
// when some stage has no traced F or B.
void write_cost_bubble(hid_t file, const Schedule& schedule,
                       const std::vector<std::vector<TraceEvent>>& events_per_rank) {
  const std::vector<ActionCost> costs = median_action_costs(events_per_rank, schedule.num_stages);
  if (costs.empty()) return;
  const double bubble = bubble_at_costs(schedule, costs);
  numeric_attr(file, "cost_bubble", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &bubble, 1);
  std::vector<double> flat;
  for (const ActionCost& c : costs) flat.insert(flat.end(), {c.forward_s, c.backward_s, c.weight_s});
  numeric_attr(file, "action_costs_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, flat.data(), flat.size());
}

// replay/step and replay/bubble: each traced step of the stored schedule
// simulated at the times its own actions took (replay_traced_steps); none
// when no step holds every action.
void write_replay(hid_t file, const Schedule& schedule,
                  const std::vector<std::vector<TraceEvent>>& events_per_rank, int64_t first_step) {
  const std::vector<StepReplay> replay = replay_traced_steps(events_per_rank, schedule, first_step);
  if (replay.empty()) return;
  std::vector<int64_t> steps;
  std::vector<double> bubbles;
  for (const StepReplay& r : replay) steps.push_back(r.step), bubbles.push_back(r.bubble);
  const ckpt::H5Id group = ckpt::create_group(file, "replay");
  ckpt::write_list(group.get(), "step", steps);
  ckpt::write_list(group.get(), "bubble", bubbles);
}

}  // namespace

void write_trace_file(const std::string& path, const std::string& resolved_deck,
                      const Schedule& schedule,
                      const std::vector<std::vector<TraceEvent>>& events_per_rank,
                      const ClockAlignment& clocks, int64_t schedule_first_step) {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  const std::string tmp = path + ".tmp";
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw Error("cannot create " + tmp);
  string_attr(file, "deck", resolved_deck);
  string_attr(file, "schedule", format_schedule(schedule));
  string_attr(file, "schedule_name", schedule.name);
  string_attr(file, "kind_names", kEventKindNames);
  const int64_t stages = schedule.num_stages, mbs = schedule.num_micro_batches;
  numeric_attr(file, "num_stages", H5T_STD_I64LE, H5T_NATIVE_INT64, &stages, 1);
  numeric_attr(file, "num_micro_batches", H5T_STD_I64LE, H5T_NATIVE_INT64, &mbs, 1);
  const int64_t ranks = schedule.num_ranks;
  numeric_attr(file, "num_ranks", H5T_STD_I64LE, H5T_NATIVE_INT64, &ranks, 1);
  const double theory = theory_bubble(schedule);
  numeric_attr(file, "theory_bubble", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &theory, 1);
  numeric_attr(file, "schedule_first_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &schedule_first_step, 1);
  write_cost_bubble(file, schedule, events_per_rank);
  write_replay(file, schedule, events_per_rank, schedule_first_step);
  numeric_attr(file, "clock_offset_us", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, clocks.offset_us.data(),
               clocks.offset_us.size());
  numeric_attr(file, "clock_error_us", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, clocks.error_us.data(),
               clocks.error_us.size());
  hid_t group = H5Gcreate2(file, "events", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(group);
  hid_t type = event_type();
  for (size_t r = 0; r < events_per_rank.size(); ++r) {
    std::vector<TraceEvent> sorted = events_per_rank[r];  // recorded at their end
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const TraceEvent& a, const TraceEvent& b) { return a.start_us < b.start_us; });
    write_events(group, "rank_" + std::to_string(r), sorted, type);
  }
  H5Tclose(type);
  H5Gclose(group);
  H5_CHECK(H5Fclose(file));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

namespace {

using ckpt::H5Id;

const char* const kTraceExpected =
    "expected a trace.h5 written by a run with output.trace = true (docs/outputs.md)";

[[noreturn]] void refuse_trace(const std::string& path, const std::string& problem) {
  throw InputError(path + ": " + problem + "; " + kTraceExpected);
}

// A float64 attribute of one value (scalar) or a 1-D list.
std::vector<double> read_doubles_attr(hid_t obj, const char* name) {
  std::vector<double> values;
  if (H5Aexists(obj, name) <= 0) return values;
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5Id space(attr.valid() ? H5Aget_space(attr.get()) : -1, H5Sclose);
  if (!space.valid()) return values;
  values.resize(static_cast<size_t>(std::max<hssize_t>(0, H5Sget_simple_extent_npoints(space.get()))));
  if (!values.empty() && H5Aread(attr.get(), H5T_NATIVE_DOUBLE, values.data()) < 0) values.clear();
  return values;
}

std::vector<TraceEvent> read_events(hid_t group, const std::string& name, const std::string& path) {
  H5Id dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  H5Id space(dset.valid() ? H5Dget_space(dset.get()) : -1, H5Sclose);
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 1)
    refuse_trace(path, "dataset events/" + name + " is missing or not 1-D");
  std::vector<TraceEvent> events(static_cast<size_t>(H5Sget_simple_extent_npoints(space.get())));
  H5Id type(event_type(), H5Tclose);
  if (!events.empty() &&
      H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()) < 0)
    refuse_trace(path, "dataset events/" + name + " does not hold trace events (step, stage, mb, "
                       "kind, start_us, end_us)");
  return events;
}

}  // namespace

RunTrace read_trace_file(const std::string& path) {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  QuietHdf5 quiet;
  require_regular_file(path, std::string(kTraceExpected).substr(9));
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) refuse_trace(path, "not an HDF5 file (damaged or of another kind)");
  RunTrace trace;
  trace.source = path;
  std::string kinds;
  int64_t stages = 0, mbs = 0;
  // A trace written before kinds were added lists a prefix of today's names.
  const std::string names = kEventKindNames;
  if (!ckpt::read_attr(file.get(), "kind_names", kinds) ||
      !(kinds == names || (!kinds.empty() && names.compare(0, kinds.size() + 1, kinds + ",") == 0)))
    refuse_trace(path, "attribute kind_names is not \"" + names + "\" (or its start)");
  if (!ckpt::read_attr(file.get(), "deck", trace.deck) ||
      !ckpt::read_attr(file.get(), "num_stages", stages) ||
      !ckpt::read_attr(file.get(), "num_micro_batches", mbs) || stages < 1)
    refuse_trace(path, "attributes deck, num_stages and num_micro_batches are missing");
  trace.num_stages = static_cast<int>(stages);
  trace.num_micro_batches = static_cast<int>(mbs);
  trace.clock_error_us = read_doubles_attr(file.get(), "clock_error_us");
  int64_t ranks = stages;  // traces before several stages per rank: one rank per stage
  if (H5Aexists(file.get(), "num_ranks") > 0 && !ckpt::read_attr(file.get(), "num_ranks", ranks))
    refuse_trace(path, "attribute num_ranks is unreadable");
  if (!ckpt::has_link(file.get(), "events")) refuse_trace(path, "group events is missing");
  H5Id group(H5Gopen2(file.get(), "events", H5P_DEFAULT), H5Gclose);
  for (int r = 0; r < static_cast<int>(ranks); ++r) {
    const std::string name = "rank_" + std::to_string(r);
    if (!ckpt::has_link(group.get(), name)) refuse_trace(path, "dataset events/" + name + " is missing");
    trace.events.push_back(read_events(group.get(), name, path));
  }
  return trace;
}

}  // namespace pt
