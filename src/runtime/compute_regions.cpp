// compute_regions.cpp: F, B and W timed on the backend's clock, read once a pass.
#include "pipetrain/runtime/compute_regions.hpp"

#include <string>

#include "pipetrain/base/error.hpp"

namespace pt {

ComputeRegions::ComputeRegions(Backend& backend) : backend_(backend), timer_(backend.make_timer()) {}

void ComputeRegions::restart() {
  if (open_ || unread_ > 0) timer_ = backend_.make_timer();
  unread_ = 0;
  open_ = false;
  regions_.clear();
  action_times_.clear();
}

void ComputeRegions::begin() {
  timer_->begin();
  ++unread_;
  open_ = true;
}

void ComputeRegions::end(TimedRegion what) {
  timer_->end();
  open_ = false;
  regions_.push_back(what);
}

std::vector<double> ComputeRegions::read() {
  const std::vector<double> seconds = timer_->read();
  unread_ = 0;
  PT_CHECK(seconds.size() == regions_.size(),
           "the compute timer returned " + std::to_string(seconds.size()) + " times for " +
               std::to_string(regions_.size()) + " regions");
  for (size_t i = 0; i < seconds.size(); ++i) {
    const TimedRegion& r = regions_[i];
    if (r.kind < 0) continue;
    for (int k = 0; k < r.count; ++k) action_times_.push_back({r.stage, r.kind, seconds[i] / r.count});
  }
  regions_.clear();
  return seconds;
}

}  // namespace pt
