// blas_report.cpp: gathers each rank's BLAS description on rank 0 and groups
// equal ones ("ranks 0-3: OpenBLAS ...; kernels SkylakeX ...").
#include "pipetrain/app/blas_report.hpp"

#include <map>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

constexpr int kWidth = 1024;  // characters per rank's description

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(ranks[i]) +
            (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return text;
}

}  // namespace

BlasReport gather_blas_report(MPI_Comm comm, const std::string& selection_note) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  BlasReport report;
  const BlasInfo mine = blas_info();
  std::string text = mine.describe() + (selection_note.empty() ? "" : "\n  " + selection_note);
  text.resize(kWidth - 1);
  std::vector<char> all(rank == 0 ? static_cast<size_t>(kWidth) * size : 0);
  std::vector<char> send(text.begin(), text.end());
  send.push_back('\0');
  timed_gather(send.data(), kWidth, MPI_CHAR, all.data(), 0, comm, "the BLAS description gather");
  int fallback = mine.fallback ? 1 : 0, any = 0;
  timed_allreduce(&fallback, &any, 1, MPI_INT, MPI_MAX, comm, "the BLAS fallback agreement");
  report.any_fallback = any != 0;
  report.rank0 = mine;
  if (rank != 0) return report;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < size; ++r) ranks_of[std::string(&all[static_cast<size_t>(r) * kWidth])].push_back(r);
  for (const auto& [description, ranks] : ranks_of)
    report.lines += "BLAS (rank" + std::string(ranks.size() > 1 ? "s " : " ") +
                    rank_ranges(ranks) + "): " + description + "\n";
  return report;
}

}  // namespace pt
