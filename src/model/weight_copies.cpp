// weight_copies.cpp: the low-precision copies of the GEMM weights and their
// versions (model/weight_copies.hpp).
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

namespace {

// The copy of `p` holds its current value in precision `precision`.
bool copy_is_current(const Param& p, Precision precision) {
  return p.copy.defined() && p.copy_version == p.version &&
         p.copy.dtype() == stored_dtype(precision) && p.copy.device() == p.value.device();
}

void round_copy(Backend& be, Param& p) {
  be.round_to(p.value, p.copy);
  p.copy_version = p.version;
}

}  // namespace

const Tensor& weight_operand(const Backend& be, const Param& p) {
  return copy_is_current(p, be.precision()) ? p.copy : p.value;
}

void note_value_written(Param& p) { ++p.version; }

int64_t make_weight_copies(Backend& be, const std::vector<Param*>& params) {
  const DType dtype = stored_dtype(be.precision());
  if (dtype == DType::F32) return 0;
  int64_t made = 0;
  for (Param* p : params) {
    if (!p->gemm_weight || p->copy.defined()) continue;
    p->copy = Tensor::empty(p->value.shape(), dtype, MemCategory::Parameters, p->value.device());
    round_copy(be, *p);
    ++made;
  }
  return made;
}

bool refresh_weight_copy(Backend& be, Param& p) {
  const DType dtype = stored_dtype(be.precision());
  if (!p.copy.defined() || dtype == DType::F32 || copy_is_current(p, be.precision())) return false;
  if (p.copy.dtype() != dtype || p.copy.device() != p.value.device())
    p.copy = Tensor::empty(p.value.shape(), dtype, MemCategory::Parameters, p.value.device());
  round_copy(be, p);
  return true;
}

int64_t refresh_weight_copies(Backend& be, const std::vector<Param*>& params) {
  int64_t refreshed = 0;
  for (Param* p : params) refreshed += refresh_weight_copy(be, *p) ? 1 : 0;
  return refreshed;
}

}  // namespace pt
