// error.hpp: the one error policy of pipetrain.
//
// Every failure is a C++ exception derived from pt::Error:
//   - pt::InputError  : the user's input is wrong (deck, command line, data
//                       file, checkpoint). The message names the file, the key
//                       or line, and what was expected. No source location.
//   - pt::Error       : an internal or library failure. Raised by a check
//                       macro (PT_CHECK, PT_FAIL, MPI_CHECK, ...), it carries
//                       file:line of the check that fired; thrown directly,
//                       for a condition of the run rather than of the code (a
//                       file that cannot be written, a peer that failed), its
//                       message names what failed and where instead.
// The driver (src/app/driver.cpp) catches both, prints one line per rank and ends
// the job with a non-zero status (MPI_Abort once ranks can no longer agree).
// One check macro per library: PT_CHECK (our invariants), MPI_CHECK, H5_CHECK;
// CUDA_CHECK, CUBLAS_CHECK and NCCL_CHECK live in the CUDA backend.
// What does not stop the run (a checkpoint fallen back from, an old deck key
// name) is a warning: pt::warn prints one line, "pipetrain: warning: ...".
#pragma once

#include <stdexcept>
#include <string>

namespace pt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public Error {
 public:
  using Error::Error;
};

// A rank waited longer than the deck's timeout for a peer.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// "pipetrain: warning: <text>" on stderr, flushed; the caller picks the rank.
void warn(const std::string& text);

[[noreturn]] void fail_at(const char* file, int line, const std::string& msg);
[[noreturn]] void fail_mpi(const char* file, int line, const char* call, int code);
[[noreturn]] void fail_hdf5(const char* file, int line, const char* call);

}  // namespace pt

#define PT_FAIL(msg) ::pt::fail_at(__FILE__, __LINE__, (msg))

#define PT_CHECK(cond, msg)                                                   \
  do {                                                                        \
    if (!(cond)) ::pt::fail_at(__FILE__, __LINE__,                            \
                               std::string("check failed: " #cond ": ") + (msg)); \
  } while (0)

#define MPI_CHECK(call)                                                       \
  do {                                                                        \
    int pt_mpi_rc_ = (call);                                                  \
    if (pt_mpi_rc_ != 0) ::pt::fail_mpi(__FILE__, __LINE__, #call, pt_mpi_rc_); \
  } while (0)

// HDF5 calls return a negative value on failure.
#define H5_CHECK(call)                                                        \
  do {                                                                        \
    if ((call) < 0) ::pt::fail_hdf5(__FILE__, __LINE__, #call);               \
  } while (0)
