// error.cpp: the failure helpers behind PT_CHECK, MPI_CHECK and H5_CHECK,
// and pt::warn.
#include "pipetrain/base/error.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>

namespace pt {

namespace {
std::string location(const char* file, int line) {
  std::string path(file);
  size_t cut = path.rfind("/src/");
  if (cut == std::string::npos) cut = path.rfind("/include/");
  if (cut != std::string::npos) path = path.substr(cut + 1);
  return path + ":" + std::to_string(line);
}
}  // namespace

void warn(const std::string& text) {
  std::fprintf(stderr, "pipetrain: warning: %s\n", text.c_str());
  std::fflush(stderr);
}

void fail_at(const char* file, int line, const std::string& msg) {
  throw Error(location(file, line) + ": " + msg);
}

void fail_mpi(const char* file, int line, const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error(location(file, line) + ": " + call + " failed: " + std::string(text, len));
}

void fail_hdf5(const char* file, int line, const char* call) {
  throw Error(location(file, line) + ": HDF5 call failed: " + call);
}

}  // namespace pt
