// checkpoint_verify.cpp: the whole-file checks of a checkpoint, made on the
// raw bytes before HDF5 parses a file. A damaged HDF5 file can crash the
// library inside H5Dread (its own metadata: a name's length, a B-tree node),
// before any checksum of the data is read; so the save records the CRC-32 of
// every file it wrote, and a load compares them first (docs/checkpoint-format.md,
// "Whole-file checksums"):
//   manifest.crc32  beside manifest.h5: "<crc32 as 8 hex digits> <bytes>\n";
//   file_crc32      an attribute of each /files/<stage file> group of the manifest.
// A checkpoint without them (written before they were, or by
// tools/checkpoint_io.py) is read without these checks.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "checkpoint_bind.hpp"
#include "checkpoint_h5.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/io/metrics.hpp"

namespace pt::ckpt {

namespace {

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

}  // namespace

bool whole_file_crc32(const std::string& path, uint32_t& crc) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::vector<char> buffer(1 << 20);
  crc = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) crc = crc32_of(buffer.data(), static_cast<size_t>(got), crc);
  }
  return in.eof();
}

uint32_t checked_file_crc32(const std::string& path) {
  uint32_t crc = 0;
  if (!whole_file_crc32(path, crc)) throw Error("cannot read " + path + " back to checksum it");
  return crc;
}

void write_manifest_crc(const std::string& dir) {
  const std::string manifest = join_path(dir, kManifest);
  const std::string text = hex32(checked_file_crc32(manifest)) + " " + std::to_string(file_bytes(manifest)) + "\n";
  const std::string path = join_path(dir, kManifestCrc);
  write_file_atomic(path, text);
  fsync_path(path);
}

std::string manifest_bytes_mismatch(const std::string& dir) {
  const std::string path = join_path(dir, kManifestCrc);
  if (file_bytes(path) < 0) return "";  // an older checkpoint: not recorded
  std::ifstream in(path);
  std::string crc_text, extra;
  int64_t bytes = -1;
  unsigned long long recorded = 0;
  const bool read = static_cast<bool>(in >> crc_text >> bytes) && !(in >> extra);
  const bool hex = crc_text.size() == 8 && std::all_of(crc_text.begin(), crc_text.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
  if (!read || !hex || std::sscanf(crc_text.c_str(), "%8llx", &recorded) != 1 || bytes < 0)
    return std::string(kManifestCrc) + " is damaged (expected one line: the CRC-32 of " + kManifest +
           " as 8 hex digits and its size in bytes)";
  const std::string manifest = join_path(dir, kManifest);
  const int64_t actual_bytes = file_bytes(manifest);
  if (actual_bytes != bytes)
    return "damaged or edited: its size is " + std::to_string(actual_bytes) + " bytes, but " + kManifestCrc +
           " records " + std::to_string(bytes) + " (the file changed after it was saved)";
  return file_bytes_mismatch(manifest, static_cast<uint32_t>(recorded), kManifestCrc);
}

std::string file_bytes_mismatch(const std::string& path, uint32_t recorded, const std::string& recorder) {
  uint32_t actual = 0;
  if (!whole_file_crc32(path, actual)) return "cannot be read";
  if (actual == recorded) return "";
  return "damaged or edited: its bytes have CRC-32 " + hex32(actual) + ", but " + recorder + " records " +
         hex32(recorded) + " (the file changed after it was saved)";
}

bool file_holds_text(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in || text.empty()) return false;
  std::string window;  // the last text.size() - 1 bytes of the previous piece, then this piece
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    window.append(buffer.data(), static_cast<size_t>(in.gcount()));
    if (window.find(text) != std::string::npos) return true;
    if (window.size() >= text.size()) window.erase(0, window.size() - (text.size() - 1));
  }
  return false;
}

}  // namespace pt::ckpt
