// bench_digest.cpp: the CPU cost of the payload digest behind
// pipeline.check_messages and data_parallel.check_every
// (tensor/payload_digest.hpp), per size, in this thread's CPU time (not the
// wall clock), so that other processes sharing the cores change it little.
//   build/bench_digest BYTES... [--reps K]
// Prints a Markdown table: bytes, median microseconds per digest, GB/s, and
// the same for a memcpy of the same bytes (the cost of copying the message
// once, for scale).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pipetrain/tensor/payload_digest.hpp"

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// Median CPU microseconds of `work` over `reps` runs.
template <class Work>
double median_us(int reps, Work work) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const double start = thread_cpu_us();
    work();
    us.push_back(thread_cpu_us() - start);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      sizes.push_back(static_cast<size_t>(std::strtoull(argv[i], nullptr, 10)));
    }
  }
  if (sizes.empty() || reps < 1) {
    std::fprintf(stderr, "usage: bench_digest BYTES... [--reps K]\n");
    return 2;
  }
  std::printf("| bytes | digest (us) | digest GB/s | memcpy (us) | memcpy GB/s |\n|---:|---:|---:|---:|---:|\n");
  uint64_t sink = 0;
  for (size_t bytes : sizes) {
    std::vector<float> src(bytes / 4 + 1), dst(bytes / 4 + 1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 1000) * 0.001f;
    const double digest = median_us(reps, [&] {
      sink += pt::host_payload_digest(src.data(), bytes, pt::digest::FloatKind::F32).checksum;
    });
    const double copy = median_us(reps, [&] {
      std::memcpy(dst.data(), src.data(), bytes);
      sink += static_cast<uint64_t>(dst[bytes / 8]);
    });
    std::printf("| %zu | %.1f | %.2f | %.1f | %.2f |\n", bytes, digest, bytes / digest * 1e-3, copy,
                bytes / copy * 1e-3);
  }
  std::fprintf(stderr, "(checksum sink %llu)\n", static_cast<unsigned long long>(sink));
  return 0;
}
