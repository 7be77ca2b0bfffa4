// forward_context.cpp: the per-thread forward context (model/forward_context.hpp).
#include "pipetrain/model/forward_context.hpp"

namespace pt {

namespace {
thread_local ForwardContext current;
}  // namespace

const ForwardContext& forward_context() { return current; }

ForwardScope::ForwardScope(ForwardContext context) : previous_(current) { current = context; }

ForwardScope::~ForwardScope() { current = previous_; }

}  // namespace pt
