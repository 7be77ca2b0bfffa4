// checkpoint_bind.cpp: the records that bind a checkpoint's files to its
// manifest (checkpoint_id, step, format version, every dataset's CRC-32) and
// the comparisons a load makes between them.
#include "checkpoint_bind.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "checkpoint_h5.hpp"

namespace pt::ckpt {

namespace {

const char* const kNotTogether = "; the files of this checkpoint were not saved together";

std::string hex32(int64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%08llx", static_cast<unsigned long long>(value));
  return buf;
}

// Every object under /params/<parameter>/, with its crc32 attribute (-1 when
// it has none); a /params member that is not a group is listed by itself.
std::map<std::string, int64_t> datasets_in(hid_t file) {
  std::map<std::string, int64_t> found;
  if (!has_link(file, "params")) return found;
  H5Id params(H5Gopen2(file, "params", H5P_DEFAULT), H5Gclose);
  if (!params.valid()) return found;
  for (const std::string& name : group_members(params.get())) {
    H5Id group(H5Gopen2(params.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.valid()) {
      found["params/" + name] = -1;
      continue;
    }
    for (const std::string& member : group_members(group.get())) {
      int64_t crc = -1;
      H5Id obj(H5Oopen(group.get(), member.c_str(), H5P_DEFAULT), H5Oclose);
      if (!obj.valid() || !read_attr(obj.get(), "crc32", crc)) crc = -1;
      found["params/" + name + "/" + member] = crc;
    }
  }
  return found;
}

// Datasets the file holds but the manifest does not list, and the reverse.
std::string describe_damage(const std::vector<std::string>& extra,
                            const std::vector<std::string>& missing) {
  std::string text;
  if (!extra.empty())
    text = "holds dataset(s) " + list_names(extra) + " that " + kManifest + " does not list for it";
  if (!missing.empty())
    text += (text.empty() ? "lacks dataset(s) " : " and lacks ") + list_names(missing) +
            (extra.empty() ? std::string(" that ") + kManifest + " lists for it" : " that it lists");
  return text + ": the file is damaged (a renamed or deleted dataset?)";
}

}  // namespace

// From the system's entropy source; where there is none (random_device
// throws), from the clock and the process id, which still differ per save.
std::string new_checkpoint_id() {
  uint32_t words[4] = {0, 0, 0, 0};
  try {
    std::random_device device;
    for (uint32_t& w : words) w = device();
  } catch (const std::exception&) {
    const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    std::seed_seq seed{static_cast<uint32_t>(now), static_cast<uint32_t>(now >> 32),
                       static_cast<uint32_t>(getpid())};
    std::mt19937 generator(seed);
    for (uint32_t& w : words) w = generator();
  }
  std::string id;
  for (uint32_t w : words) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(w));
    id += buf;
  }
  return id;
}

std::string list_text(const std::vector<DatasetCrc>& list) {
  std::string text;
  for (const DatasetCrc& d : list) text += d.path + '\t' + std::to_string(d.crc) + '\n';
  return text;
}

std::vector<DatasetCrc> parse_list_text(const std::string& text) {
  std::vector<DatasetCrc> list;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    list.push_back({line.substr(0, tab), static_cast<uint32_t>(std::stoul(line.substr(tab + 1)))});
  }
  return list;
}

void write_file_record(hid_t group, const std::vector<DatasetCrc>& list) {
  std::vector<std::string> paths;
  std::vector<int64_t> crcs;
  for (const DatasetCrc& d : list) {
    paths.push_back(d.path);
    crcs.push_back(static_cast<int64_t>(d.crc));
  }
  write_list(group, "datasets", paths);
  write_list(group, "crc32", crcs);
}

bool read_file_record(hid_t group, std::map<std::string, int64_t>& crc_by_path) {
  std::vector<std::string> paths;
  std::vector<int64_t> crcs;
  if (!read_list(group, "datasets", paths) || !read_list(group, "crc32", crcs) ||
      paths.size() != crcs.size())
    return false;
  crc_by_path.clear();
  for (size_t i = 0; i < paths.size(); ++i) crc_by_path[paths[i]] = crcs[i];
  return true;
}

bool read_format_version(hid_t obj, int64_t& version) {
  if (read_attr(obj, "format_version", version)) return true;
  std::string text;
  if (!read_attr(obj, "format_version", text) || text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  version = std::stoll(text);
  return true;
}

std::string binding_mismatch(hid_t stage_file, const Binding& manifest) {
  std::string format, id;
  int64_t version = 0, step = 0;
  if (!read_attr(stage_file, "format", format) || format != kStageFormatName)
    return std::string("not a pipetrain stage file (attribute format is not \"") +
           kStageFormatName + "\")";
  if (!read_format_version(stage_file, version))
    return "attribute format_version is missing or damaged";
  if (version != manifest.version)
    return "written in format_version " + std::to_string(version) + ", but " + kManifest +
           " says format_version " + std::to_string(manifest.version) + kNotTogether;
  if (!read_attr(stage_file, "step", step)) return "attribute step is missing or damaged";
  if (step != manifest.step)
    return "written for step " + std::to_string(step) + ", but " + kManifest + " says step " +
           std::to_string(manifest.step) + kNotTogether;
  if (!read_attr(stage_file, "checkpoint_id", id) || id.empty())
    return "attribute checkpoint_id is missing or damaged";
  if (id != manifest.id)
    return "written by another save (checkpoint_id " + id + "), not the one " + kManifest +
           " records (checkpoint_id " + manifest.id + ")" + kNotTogether;
  return "";
}

std::string dataset_mismatch(hid_t stage_file, const std::map<std::string, int64_t>& listed) {
  const std::map<std::string, int64_t> found = datasets_in(stage_file);
  std::vector<std::string> extra, missing;
  for (const auto& [path, crc] : found)
    if (!listed.count(path)) extra.push_back(path);
  for (const auto& [path, crc] : listed)
    if (!found.count(path)) missing.push_back(path);
  if (!extra.empty() || !missing.empty()) return describe_damage(extra, missing);
  for (const auto& [path, crc] : listed) {
    const int64_t stored = found.at(path);
    if (stored < 0) return path + " has no crc32 attribute";
    if (stored != crc)
      return path + " has crc32 " + hex32(stored) + ", but " + kManifest + " records " +
             hex32(crc) + " for it: the file was changed after the save, or is not the one saved with " +
             kManifest;
  }
  return "";
}

}  // namespace pt::ckpt
