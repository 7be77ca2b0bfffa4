// checkpoint_h5.hpp: pieces shared by the checkpoint writer and reader
// (private to src/io): names on disk, CRC-32, small HDF5 wrappers, durable
// file-system steps and the MPI agreement on a problem.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/base/h5_id.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::ckpt {

constexpr const char* kManifest = "manifest.h5";
constexpr const char* kLatest = "latest";
constexpr const char* kFormatName = "pipetrain-checkpoint";
constexpr const char* kStageFormatName = "pipetrain-checkpoint-stage";

std::string step_dir_name(int64_t step);  // "step_00000020"
// True for exactly "step_" + 8 or more digits (no ".tmp" or other suffix).
bool parse_step_dir_name(const std::string& name, int64_t& step);
std::string stage_file_name(int stage);   // "stage_002.h5"
std::string join_path(const std::string& dir, const std::string& name);
// "a, b, c, d, e and 3 more": the first five names, for messages.
std::string list_names(const std::vector<std::string>& names);

// zlib's CRC-32 (the same as Python's zlib.crc32), continued from `crc`.
uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

// H5Id, the owner of one HDF5 identifier: pipetrain/base/h5_id.hpp.
using pt::H5Id;



// Attributes. Strings are written fixed-length UTF-8; the readers accept
// fixed- and variable-length strings (what h5py writes) and any integer type.
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
void write_attr(hid_t obj, const std::string& name, double value);
bool read_attr(hid_t obj, const std::string& name, std::string& value);  // false: absent/not text
bool read_attr(hid_t obj, const std::string& name, int64_t& value);      // false: absent/not integer
bool read_attr(hid_t obj, const std::string& name, double& value);       // false: absent/not a float

// Creation property lists without object modification times, so the same
// contents give the same bytes.
H5Id untimed_group_plist();
H5Id untimed_dataset_plist();
// A group, created with untimed_group_plist.
H5Id create_group(hid_t parent, const std::string& name);

// Links in a group, by name; whether a link exists at `path` under loc.
std::vector<std::string> group_members(hid_t group);
bool has_link(hid_t loc, const std::string& path);

// One-dimensional lists as datasets (attributes are limited to 64 KiB):
// text as variable-length UTF-8, integers as int64, reals as float64. The readers accept
// fixed- and variable-length text and any integer type; false: absent or
// of another kind.
void write_list(hid_t group, const std::string& name, const std::vector<std::string>& values);
void write_list(hid_t group, const std::string& name, const std::vector<int64_t>& values);
void write_list(hid_t group, const std::string& name, const std::vector<double>& values);
bool read_list(hid_t group, const std::string& name, std::vector<std::string>& values);
bool read_list(hid_t group, const std::string& name, std::vector<int64_t>& values);

// A float32 dataset of `shape` holding `data`, with attribute crc32 (returned).
uint32_t write_f32(hid_t group, const std::string& name, const float* data, const Shape& shape);
// Reads a float32 dataset of `shape` into out and computes its CRC-32;
// false when HDF5 cannot read it.
bool read_f32(hid_t dset, float* out, const Shape& shape, uint32_t& crc);

// Durable file-system steps; each throws pt::Error naming the path.
void fsync_path(const std::string& path);  // a file or a directory
void rename_path(const std::string& from, const std::string& to);
void remove_tree(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
int64_t file_bytes(const std::string& path);  // -1 when absent
std::vector<std::string> directory_entries(const std::string& path);  // names, sorted

// A problem found by one or more ranks. kind 0 = none; larger = more severe.
struct Problem {
  int kind = 0;
  std::string message;
  explicit operator bool() const { return kind != 0; }
};
// Collective: every rank gets the most severe problem, from the lowest rank
// that has one of that severity.
Problem agree(MPI_Comm comm, const Problem& mine);
// Collective: rank `root`'s text on every rank.
std::string broadcast_text(MPI_Comm comm, const std::string& text, int root = 0);

}  // namespace pt::ckpt
