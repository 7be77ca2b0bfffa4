// comm_ledger.hpp: the bookkeeping of the NCCL communicators behind a
// transport or a replica group (src/cuda), in plain C++ so that its decisions
// are tested on the CPU (tests/test_nccl_model.cpp).
//
// CommLedger counts the operations posted on a set of communicators and not
// yet seen complete, and decides how to tear the communicators down:
// ncclCommDestroy waits for every queued operation, so with one outstanding
// (a timeout, an error, a peer gone) it would hang instead of letting the
// error reach the user; ncclCommAbort does not wait. judge_wait is the
// verdict of one poll of a pending operation: an asynchronous error or the
// timeout ends the wait (the caller aborts the communicators and throws,
// naming what it waited for).
// in_flight_anywhere() adds up every ledger of the process: the device cache
// frees memory (which synchronises the device) only when it is 0.
#pragma once

#include <atomic>

#include "pipetrain/base/error.hpp"

namespace pt {

class CommLedger {
 public:
  enum class Teardown { Destroy, Abort, Nothing };

  CommLedger() = default;
  CommLedger(const CommLedger&) = delete;
  CommLedger& operator=(const CommLedger&) = delete;
  ~CommLedger() { in_flight_total() -= outstanding_; }

  void posted() {
    ++outstanding_;
    ++in_flight_total();
  }
  // A posted operation was seen complete.
  void completed() {
    PT_CHECK(outstanding_ > 0, "a communicator operation completed twice");
    --outstanding_;
    --in_flight_total();
  }
  // Operations posted and not seen complete, over every ledger of the process.
  static long in_flight_anywhere() { return in_flight_total().load(); }
  // A posted operation's handle was destroyed before it was seen complete:
  // NCCL may still be running it.
  void dropped() { dropped_ = true; }
  // The communicators were aborted (after an error or a timeout).
  void aborted() { aborted_ = true; }

  long outstanding() const { return outstanding_; }
  bool is_aborted() const { return aborted_; }
  // Destroy only when every posted operation was seen complete; Abort when
  // anything may still run; Nothing once aborted (the handles are gone).
  Teardown teardown() const {
    if (aborted_) return Teardown::Nothing;
    return outstanding_ == 0 && !dropped_ ? Teardown::Destroy : Teardown::Abort;
  }

 private:
  static std::atomic<long>& in_flight_total() {
    static std::atomic<long> total{0};
    return total;
  }
  long outstanding_ = 0;  // posted, not yet seen complete
  bool dropped_ = false;
  bool aborted_ = false;
};

enum class WaitVerdict { Pending, Failed, TimedOut };

// One poll of an operation not yet complete, `waited_s` after it was posted.
inline WaitVerdict judge_wait(bool async_error, double waited_s, double timeout_s) {
  if (async_error) return WaitVerdict::Failed;
  return waited_s > timeout_s ? WaitVerdict::TimedOut : WaitVerdict::Pending;
}

}  // namespace pt
