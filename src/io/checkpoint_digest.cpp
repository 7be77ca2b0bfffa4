// checkpoint_digest.cpp: the manifest's check of itself (issue #44, part 2).
//
// The stage files are bound to the manifest by the CRC-32s it lists; the
// manifest had no check of its own, so a byte damaged in it looked like
// damage to a stage file ("stage_000.h5: missing", "holds dataset(s) ...").
// Now the writer stores manifest_crc32, the CRC-32 of a canonical text of
// everything else in the file (every attribute and member, in name order,
// with its type and full value, groups recursively), and the reader
// compares it before it trusts anything the manifest lists. Generic on
// purpose: an attribute added to the manifest later is covered without
// being named here.
#include <hdf5.h>

#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint_bind.hpp"
#include "checkpoint_h5.hpp"

namespace pt::ckpt {

namespace {

constexpr const char* kDigestAttr = "manifest_crc32";

std::vector<std::string> attribute_names(hid_t obj) {
  std::vector<std::string> names;
  hsize_t at = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &at,
              [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                static_cast<std::vector<std::string>*>(out)->push_back(name);
                return 0;
              },
              &names);
  return names;
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// "class:n:v1,v2,..." of n integers or floats read from an attribute or a
// dataset with `read(memory type, buffer)`; "?" when the read fails.
template <class Read>
std::string numbers_text(H5T_class_t cls, hsize_t n, Read read) {
  std::string text = (cls == H5T_INTEGER ? "i:" : "f:") + std::to_string(n) + ":";
  if (cls == H5T_INTEGER) {
    std::vector<long long> v(n);
    if (n > 0 && read(H5T_NATIVE_LLONG, v.data()) < 0) return text + "?";
    for (long long x : v) text += std::to_string(x) + ",";
  } else {
    std::vector<double> v(n);
    if (n > 0 && read(H5T_NATIVE_DOUBLE, v.data()) < 0) return text + "?";
    for (double x : v) text += number_text(x) + ",";
  }
  return text;
}

std::string attribute_text(hid_t obj, const std::string& name) {
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return "?";
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  H5Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.valid() || !space.valid()) return "?";
  const H5T_class_t cls = H5Tget_class(type.get());
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return "?";
  if (cls == H5T_STRING) {
    std::string value;
    return read_attr(obj, name, value) ? "s:" + std::to_string(value.size()) + ":" + value : "s:?";
  }
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return "class " + std::to_string(cls);
  return numbers_text(cls, static_cast<hsize_t>(n), [&](hid_t mem, void* buf) {
    return H5Aread(attr.get(), mem, buf);
  });
}

std::string dataset_text(hid_t group, const std::string& name) {
  H5Id dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) return "?";
  H5Id type(H5Dget_type(dset.get()), H5Tclose);
  H5Id space(H5Dget_space(dset.get()), H5Sclose);
  if (!type.valid() || !space.valid()) return "?";
  const H5T_class_t cls = H5Tget_class(type.get());
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return "?";
  if (cls == H5T_STRING) {
    std::vector<std::string> values;
    if (!read_list(group, name, values)) return "s:?";
    std::string text = "s:" + std::to_string(values.size()) + ":";
    for (const std::string& v : values) text += std::to_string(v.size()) + ":" + v + ",";
    return text;
  }
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return "class " + std::to_string(cls);
  return numbers_text(cls, static_cast<hsize_t>(n), [&](hid_t mem, void* buf) {
    return H5Dread(dset.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  });
}

// Attributes, then members, each on a line of its own, "@" before an
// attribute's name and the path before a member's.
void append_contents(hid_t group, const std::string& path, std::string& out) {
  for (const std::string& name : attribute_names(group)) {
    if (path.empty() && name == kDigestAttr) continue;
    out += path + "@" + name + "=" + attribute_text(group, name) + "\n";
  }
  for (const std::string& name : group_members(group)) {
    const std::string member = path + "/" + name;
    H5Id obj(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose);
    const H5I_type_t kind = obj.valid() ? H5Iget_type(obj.get()) : H5I_BADID;
    if (kind == H5I_GROUP) {
      out += member + "/\n";
      append_contents(obj.get(), member, out);
    } else if (kind == H5I_DATASET) {
      out += member + "=" + dataset_text(group, name) + "\n";
    } else {
      out += member + "=?\n";
    }
  }
}

uint32_t contents_crc(hid_t manifest) {
  std::string text;
  append_contents(manifest, "", text);
  return crc32_of(text.data(), text.size());
}

}  // namespace

void write_manifest_digest(hid_t manifest) {
  write_attr(manifest, kDigestAttr, static_cast<int64_t>(contents_crc(manifest)));
}

std::string manifest_digest_mismatch(hid_t manifest) {
  int64_t stored = -1;
  if (!read_attr(manifest, kDigestAttr, stored) || stored < 0 || stored > 0xffffffffLL)
    return std::string("attribute ") + kDigestAttr + " is damaged or missing";
  const uint32_t actual = contents_crc(manifest);
  if (static_cast<int64_t>(actual) == stored) return "";
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "its contents have crc32 0x%08x, but it records %s 0x%08llx: the manifest "
                "was damaged or edited after the save",
                actual, kDigestAttr, static_cast<unsigned long long>(stored));
  return msg;
}

}  // namespace pt::ckpt
