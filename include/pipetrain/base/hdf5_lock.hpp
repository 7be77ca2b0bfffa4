// hdf5_lock.hpp: the one lock every HDF5 call of pipetrain is made under
// while more than one thread may call HDF5.
//
// The HDF5 library pipetrain links (Debian's, built with MPI) is not built
// thread-safe: two threads inside it at once corrupt its global state. An
// asynchronous checkpoint (output.checkpoint_async) writes its stage file on
// a background thread while the training thread goes on reading token files
// and flushing metrics.h5, so each of those code paths holds Hdf5Lock around
// its calls, the closing of its identifiers included. The background writer
// takes it per parameter, so a token read waits at most for one parameter's
// datasets (docs/reliability.md). The lock is recursive: a locked function
// may call another. Uncontended (no save in flight) it costs one atomic.
// A contended wait is bounded like every other: it runs under a
// DeadlineScope, so a writer stuck inside HDF5 (a hung file system) ends the
// job with the lock named instead of holding the other thread forever.
#pragma once

#include <mutex>

#include "pipetrain/base/timed_wait.hpp"

namespace pt {

inline std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

class Hdf5Lock {
 public:
  Hdf5Lock() : guard_(hdf5_mutex(), std::defer_lock) {
    if (guard_.try_lock()) return;
    DeadlineScope deadline("the HDF5 lock, held by another thread (an asynchronous checkpoint's writer)");
    guard_.lock();
  }
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> guard_;
};

}  // namespace pt
