// checkpoint_bind.hpp: what ties the files of one checkpoint together (private
// to src/io), so that a load gets exactly what one save wrote or nothing.
//
// Every save draws a random 128-bit checkpoint_id. The manifest and every
// stage file record it, the step and the format version; the manifest also
// lists each stage file's datasets with their CRC-32s. The writer produces
// these records, the reader compares them (docs/checkpoint-format.md).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pt::ckpt {

// 32 hex digits (128 random bits): a new one for every save.
std::string new_checkpoint_id();

// One dataset of a stage file: its path there ("params/<name>/value") and CRC-32.
struct DatasetCrc {
  std::string path;
  uint32_t crc = 0;
};

// "path\tcrc\n" lines (to gather every stage's list on rank 0) and back.
std::string list_text(const std::vector<DatasetCrc>& list);
std::vector<DatasetCrc> parse_list_text(const std::string& text);

// The manifest's record of one stage file: datasets `datasets` (paths) and
// `crc32` (int64) in its group /files/<file name>.
void write_file_record(hid_t group, const std::vector<DatasetCrc>& list);
// False when either list is absent, not a list, or their lengths differ.
bool read_file_record(hid_t group, std::map<std::string, int64_t>& crc_by_path);

// The root attribute format_version: an integer, or a text holding only a
// decimal integer. False when absent or anything else (a damaged attribute).
bool read_format_version(hid_t obj, int64_t& version);

// What the manifest says about the save that wrote the checkpoint.
struct Binding {
  int64_t version = 0;
  int64_t step = 0;
  std::string id;
};

// "" when the open stage file records the manifest's format, version, step
// and checkpoint_id; otherwise what differs (for a message about the file).
std::string binding_mismatch(hid_t stage_file, const Binding& manifest);

// "" when the open stage file holds exactly the datasets the manifest lists
// for it, each with the listed crc32 attribute; otherwise what differs.
std::string dataset_mismatch(hid_t stage_file, const std::map<std::string, int64_t>& listed);

// The manifest's check of itself (checkpoint_digest.cpp): the CRC-32 of a
// canonical text of all it holds, stored as its attribute manifest_crc32
// (written last, format_version 3 on), and "" when the open manifest still
// matches it, otherwise what differs.
void write_manifest_digest(hid_t manifest);
std::string manifest_digest_mismatch(hid_t manifest);

// ---- whole-file checksums (checkpoint_verify.cpp), checked on the raw bytes
// before HDF5 opens a file, whose damaged metadata can crash the library ----

// manifest.crc32, beside manifest.h5: its CRC-32 and size, one line of text.
constexpr const char* kManifestCrc = "manifest.crc32";
// The CRC-32 of a whole file; false when it cannot be read to the end.
bool whole_file_crc32(const std::string& path, uint32_t& crc);
// The same, throwing pt::Error naming the file.
uint32_t checked_file_crc32(const std::string& path);
// Writes <dir>/manifest.crc32 for <dir>/manifest.h5 (closed and fsynced), fsynced.
void write_manifest_crc(const std::string& dir);
// "" when <dir> has no manifest.crc32 (an older checkpoint, or one written
// by tools/checkpoint_io.py) or manifest.h5's bytes match it; else what differs.
std::string manifest_bytes_mismatch(const std::string& dir);
// "" when the file's bytes have CRC-32 `recorded` (as `recorder` records
// it); else what differs.
std::string file_bytes_mismatch(const std::string& path, uint32_t recorded, const std::string& recorder);
// Whether the file's bytes hold `text` somewhere (a checkpoint_id, which a
// stage file stores verbatim as an attribute).
bool file_holds_text(const std::string& path, const std::string& text);

}  // namespace pt::ckpt
