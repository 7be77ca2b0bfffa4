// test_gpu_skip.hpp: how a GPU test without a GPU ends: a skip with the
// reason, or a failure when PIPETRAIN_REQUIRE_GPU=1 says a GPU must be there.
// Free of CUDA, so that tests built without the CUDA backend use it too.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace pt::test {

// PIPETRAIN_REQUIRE_GPU set and not "0": a GPU test that finds no device
// fails instead of skipping (scripts/gpu-check.sh sets it when nvidia-smi
// lists a GPU, so a driver too old for the runtime cannot pass as skips).
inline bool gpu_required() {
  const char* v = std::getenv("PIPETRAIN_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Skips the current test, or fails it under PIPETRAIN_REQUIRE_GPU; returns.
#define PT_NO_GPU(reason)                                                               \
  do {                                                                                  \
    if (::pt::test::gpu_required())                                                     \
      GTEST_FAIL() << "PIPETRAIN_REQUIRE_GPU is set but " << (reason);                  \
    GTEST_SKIP() << (reason) << "; GPU test skipped";                                   \
  } while (0)

}  // namespace pt::test
