// sha256.hpp: SHA-256 (FIPS 180-4) of bytes, as 64 lower-case hex digits.
// Token files record the SHA-256 of their tokenizer.json (docs/data.md);
// the data sets compare it with the deck's data.tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes the hash; call once

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

std::string sha256_hex(const std::string& bytes);

}  // namespace pt
