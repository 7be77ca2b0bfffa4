// payload_digest.cpp: the host's payload digest (tensor/payload_digest.hpp)
// and the Backend's default, for tensors in host memory.
#include "pipetrain/tensor/payload_digest.hpp"

#include <cstring>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

PayloadDigest host_payload_digest(const void* data, size_t bytes, digest::FloatKind kind) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const size_t whole = bytes / 8;
  uint64_t sum = 0;
  int64_t nonfinite = 0;
  for (size_t i = 0; i < whole; ++i) {
    uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    sum += digest::term(word, i);
    nonfinite += digest::nonfinite_in_word(word, 8, kind);
  }
  if (const size_t tail = bytes - 8 * whole) {
    uint64_t word = 0;  // zero-padded
    std::memcpy(&word, p + 8 * whole, tail);
    sum += digest::term(word, whole);
    nonfinite += digest::nonfinite_in_word(word, static_cast<unsigned>(tail), kind);
  }
  return {digest::finish(sum, bytes), nonfinite};
}

digest::FloatKind float_kind_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return digest::FloatKind::F32;
    case DType::F16: return digest::FloatKind::Half16;
    case DType::BF16: return digest::FloatKind::BF16;
    default: return digest::FloatKind::None;
  }
}

PayloadDigest Backend::payload_digest(const Tensor& x) { return do_payload_digest(x); }

PayloadDigest Backend::do_payload_digest(const Tensor& x) {
  PT_CHECK(x.device() == Device::CPU, "payload_digest: this backend reads host tensors only");
  return host_payload_digest(x.raw(), x.bytes(), float_kind_of(x.dtype()));
}

}  // namespace pt
