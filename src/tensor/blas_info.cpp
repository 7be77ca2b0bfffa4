// blas_info.cpp: BLAS and CPU identification, and the re-execution that
// replaces a fallback OpenBLAS kernel by the CPU's best (see blas_info.hpp).
#include "pipetrain/tensor/blas_info.hpp"
#include "pipetrain/tensor/backend.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "pipetrain/base/fault_injection.hpp"

namespace pt {

namespace {

constexpr const char* kReexecMark = "PIPETRAIN_BLAS_REEXEC";  // "from->to" after a restart

// The instruction-set level of an OpenBLAS x86-64 kernel family.
int core_level(const std::string& core) {
  static const char* const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const char* const avx2[] = {"Haswell", "Zen", "Excavator"};
  static const char* const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
  for (const char* c : avx512) if (core == c) return 3;
  for (const char* c : avx2) if (core == c) return 2;
  for (const char* c : avx) if (core == c) return 1;
  return 0;  // Prescott, Core2, Penryn, Nehalem, Atom, Barcelona, ... (SSE)
}

// The CPU's level and the kernel family that serves it best.
int cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
}

const char* best_core_for(int level) {
  static const char* const names[] = {"Prescott", "Sandybridge", "Haswell", "SkylakeX"};
  return names[level];
}

const char* isa_name(int level) {
  static const char* const names[] = {"sse", "avx", "avx2", "avx512"};
  return names[level];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown CPU";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

bool autoselect_enabled() {
  const char* flag = std::getenv("PIPETRAIN_BLAS_AUTOSELECT");
  return flag == nullptr || std::strcmp(flag, "0") != 0;
}

std::string note_after_restart(const char* mark) {
  const std::string m = mark;
  const size_t arrow = m.find("->");
  return "BLAS: OpenBLAS chose its " + m.substr(0, arrow) + " kernels on a CPU that supports " +
         m.substr(arrow + 2) + "'s; pipetrain set OPENBLAS_CORETYPE=" + m.substr(arrow + 2) +
         " and restarted itself (set OPENBLAS_CORETYPE to override, or "
         "PIPETRAIN_BLAS_AUTOSELECT=0 to keep OpenBLAS's choice)";
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo b;
  b.library = trim(openblas_get_config());
  b.core = trim(openblas_get_corename());
  const int level = cpu_level();
  b.best_core = best_core_for(level);
  b.isa = isa_name(level);
  b.cpu = cpu_model();
  b.threads = openblas_get_num_threads();
  b.fallback = core_level(b.core) < level;
  b.gemm = cpu_gemm_description();
  if (const char* mark = std::getenv(kReexecMark)) b.selection = note_after_restart(mark);
  return b;
}

std::string BlasInfo::describe() const {
  return library + "; kernels " + core + " (best for this CPU: " + best_core + ")" +
         (fallback ? " FALLBACK" : "") + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads") + "; CPU " + cpu + " (" + isa + "); GEMMs: " +
         gemm;
}

std::string select_blas_kernel(int argc, char** argv) {
  (void)argc;
  if (const char* mark = std::getenv(kReexecMark)) return note_after_restart(mark);
  const BlasInfo b = blas_info();
  if (!b.fallback) return "";
  const char* user_choice = std::getenv("OPENBLAS_CORETYPE");
  // Tests force a fallback through OPENBLAS_CORETYPE and mark it as not the user's.
  const char* forced_mark = fault_hook_info(FaultHook::BlasForced).variable;
  const bool forced_by_test = std::getenv(forced_mark) != nullptr;
  if ((user_choice != nullptr && !forced_by_test) || !autoselect_enabled())
    return "BLAS: warning: OpenBLAS runs its " + b.core + " kernels although this CPU supports " +
           b.best_core + "'s (" + b.isa + "), because " +
           (user_choice ? "OPENBLAS_CORETYPE=" + std::string(user_choice) + " is set"
                        : std::string("PIPETRAIN_BLAS_AUTOSELECT=0")) +
           "; expect GEMMs several times slower";
  const std::string mark = b.core + "->" + b.best_core;
  setenv("OPENBLAS_CORETYPE", b.best_core.c_str(), 1);
  setenv(kReexecMark, mark.c_str(), 1);
  unsetenv(forced_mark);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  // The restart failed: carry on with the slow kernels, and say so.
  unsetenv(kReexecMark);
  return "BLAS: warning: OpenBLAS runs its " + b.core + " kernels although this CPU supports " +
         b.best_core + "'s, and restarting with OPENBLAS_CORETYPE=" + b.best_core + " failed: " +
         std::strerror(errno);
}

}  // namespace pt
