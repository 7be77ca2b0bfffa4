// input_file.cpp: whether a path names a regular file, and the one message when it does not.
#include "pipetrain/base/input_file.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "pipetrain/base/error.hpp"

namespace pt {

FileKind file_kind(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return errno == ENOENT || errno == ENOTDIR ? FileKind::Missing : FileKind::Unknown;
  if (S_ISREG(st.st_mode)) return FileKind::Regular;
  if (S_ISDIR(st.st_mode)) return FileKind::Directory;
  if (S_ISFIFO(st.st_mode)) return FileKind::Fifo;
  if (S_ISCHR(st.st_mode)) return FileKind::CharDevice;
  if (S_ISBLK(st.st_mode)) return FileKind::BlockDevice;
  if (S_ISSOCK(st.st_mode)) return FileKind::Socket;
  return FileKind::Other;
}

std::string not_a_regular_file_message(const std::string& path, FileKind kind, const std::string& expected,
                                       const std::string& at) {
  std::string what;
  switch (kind) {
    case FileKind::Missing: what = "no such file"; break;
    case FileKind::Directory: what = "a directory, not a regular file"; break;
    case FileKind::Fifo: what = "a FIFO, not a regular file"; break;
    case FileKind::CharDevice: what = "a character device, not a regular file"; break;
    case FileKind::BlockDevice: what = "a block device, not a regular file"; break;
    case FileKind::Socket: what = "a socket, not a regular file"; break;
    case FileKind::Regular:
    case FileKind::Unknown:
    case FileKind::Other: what = "not a regular file"; break;
  }
  return (at.empty() ? "" : at + ": ") + "'" + path + "': " + what + "; expected " + expected;
}

void require_regular_file(const std::string& path, const std::string& expected, const std::string& at) {
  const FileKind kind = file_kind(path);
  if (kind == FileKind::Regular || kind == FileKind::Unknown) return;
  throw InputError(not_a_regular_file_message(path, kind, expected, at));
}

}  // namespace pt
