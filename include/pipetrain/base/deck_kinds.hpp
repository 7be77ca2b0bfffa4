// deck_kinds.hpp: the closed sets of names a deck key may take, as enums,
// each with its one table of names. The table is the only place a kind's
// text appears: the deck schema reads a value with parse_kind (and lists
// kind_choices in its message and in deck_to_toml's comments), the writer
// prints kind_name, and the rest of the program compares enum values. The
// model family (model.type) is not here: it is a name in the registry of
// model/family.hpp, which can grow at run time. Recompute settings are not
// here either: "every:K" carries a number (schedule/recompute.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "pipetrain/base/error.hpp"

namespace pt {

enum class ActivationKind { Relu, Gelu };                       // model.activation
enum class LossKind { Mse, CrossEntropy };                       // model.loss
enum class AttentionKind { Reference, Fused };                   // model.attention
// model.norm: the normalisation of the convolutional layers (docs/cnn.md):
// group (or layer) normalisation per image, or batch normalisation per
// channel over a micro-batch, with running statistics for evaluation.
enum class NormKind { Group, Batch };
enum class DataKind { Synthetic, Markov, Hdf5, Images, ImageFiles };  // data.type
enum class OptimizerKind { Sgd, AdamW };                         // training.optimizer
enum class LrScheduleKind { Constant, Cosine };                  // training.lr_schedule
enum class CpuGemmKind { Auto, OneDNN, OneDNNSgemm, OpenBLAS };  // training.cpu_gemm
enum class DeviceKind { Cpu, Cuda };                             // training.device
// training.precision: the precision of GEMM operands, the one enum of it that
// both backends take (tensor/precision.hpp says what each value rounds).
enum class Precision { Fp32, Tf32, Bf16, Fp16 };
enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZbH1, ZbV, File };  // pipeline.schedule
enum class ScheduleTimesKind { Auto, Unit, Measured };           // pipeline.schedule_times
enum class WeightGradKind { MicroBatch, Step };                  // pipeline.weight_grad
// pipeline.partition: a strategy name, or Explicit when the deck gives a
// list of per-stage counts ("explicit" is never written as a value).
enum class PartitionStrategy { Uniform, Time, Memory, Balanced, Explicit };
enum class TransportKind { Auto, Mpi, NcclModel, Nccl, MpiStaged };  // pipeline.transport
enum class DpReductionKind { Replica, Ordered };                 // data_parallel.reduction

// The names of a kind, indexed by its enum value.
struct KindNames {
  const char* const* names;
  size_t count;

  // Sets `index` to the entry equal to `text`; false when there is none.
  bool find(const std::string& text, size_t& index) const {
    for (size_t i = 0; i < count; ++i) {
      if (text == names[i]) {
        index = i;
        return true;
      }
    }
    return false;
  }
  // "a|b|c": the names in order, leaving out entry `skip` (none by default).
  std::string joined(size_t skip = static_cast<size_t>(-1)) const {
    std::string text;
    for (size_t i = 0; i < count; ++i)
      if (i != skip) text += (text.empty() ? "" : "|") + std::string(names[i]);
    return text;
  }
};

namespace kind_detail {
template <size_t N>
constexpr KindNames table(const char* const (&names)[N]) {
  return {names, N};
}
}  // namespace kind_detail

// The one table of each kind (the argument only selects the overload).
inline KindNames kind_names(ActivationKind) {
  static constexpr const char* names[] = {"relu", "gelu"};
  return kind_detail::table(names);
}
inline KindNames kind_names(LossKind) {
  static constexpr const char* names[] = {"mse", "cross_entropy"};
  return kind_detail::table(names);
}
inline KindNames kind_names(AttentionKind) {
  static constexpr const char* names[] = {"reference", "fused"};
  return kind_detail::table(names);
}
inline KindNames kind_names(NormKind) {
  static constexpr const char* names[] = {"group", "batch"};
  return kind_detail::table(names);
}
inline KindNames kind_names(DataKind) {
  static constexpr const char* names[] = {"synthetic", "markov", "hdf5", "images", "image_files"};
  return kind_detail::table(names);
}
inline KindNames kind_names(OptimizerKind) {
  static constexpr const char* names[] = {"sgd", "adamw"};
  return kind_detail::table(names);
}
inline KindNames kind_names(LrScheduleKind) {
  static constexpr const char* names[] = {"constant", "cosine"};
  return kind_detail::table(names);
}
inline KindNames kind_names(CpuGemmKind) {
  static constexpr const char* names[] = {"auto", "onednn", "onednn-sgemm", "openblas"};
  return kind_detail::table(names);
}
inline KindNames kind_names(DeviceKind) {
  static constexpr const char* names[] = {"cpu", "cuda"};
  return kind_detail::table(names);
}
inline KindNames kind_names(Precision) {
  static constexpr const char* names[] = {"fp32", "tf32", "bf16", "fp16"};
  return kind_detail::table(names);
}
inline KindNames kind_names(ScheduleKind) {
  static constexpr const char* names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "file"};
  return kind_detail::table(names);
}
inline KindNames kind_names(ScheduleTimesKind) {
  static constexpr const char* names[] = {"auto", "unit", "measured"};
  return kind_detail::table(names);
}
inline KindNames kind_names(WeightGradKind) {
  static constexpr const char* names[] = {"micro_batch", "step"};
  return kind_detail::table(names);
}
inline KindNames kind_names(PartitionStrategy) {
  static constexpr const char* names[] = {"uniform", "time", "memory", "balanced", "explicit"};
  return kind_detail::table(names);
}
inline KindNames kind_names(TransportKind) {
  static constexpr const char* names[] = {"auto", "mpi", "nccl_model", "nccl", "mpi_staged"};
  return kind_detail::table(names);
}
inline KindNames kind_names(DpReductionKind) {
  static constexpr const char* names[] = {"replica", "ordered"};
  return kind_detail::table(names);
}

// The text of `kind`, as a deck writes it.
template <class Kind>
const char* kind_name(Kind kind) {
  return kind_names(Kind{}).names[static_cast<size_t>(kind)];
}

// Sets `out` to the kind named `text`; false (and `out` untouched) when no
// name of the table matches.
template <class Kind>
bool parse_kind(const std::string& text, Kind& out) {
  size_t index = 0;
  if (!kind_names(Kind{}).find(text, index)) return false;
  out = static_cast<Kind>(index);
  return true;
}

// The kind named `text`; an InputError naming it and the choices otherwise
// (code and tests that hold a name outside a deck).
template <class Kind>
Kind kind_named(const std::string& text);

// "a|b|c": the names of the table, in order.
template <class Kind>
std::string kind_choices() {
  return kind_names(Kind{}).joined();
}

template <class Kind>
Kind kind_named(const std::string& text) {
  Kind kind{};
  if (!parse_kind(text, kind))
    throw InputError("unknown name '" + text + "'; expected one of " + kind_choices<Kind>());
  return kind;
}

}  // namespace pt
