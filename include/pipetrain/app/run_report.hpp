// run_report.hpp: the lines a training run prints on rank 0: its start, one
// per logged step, and its end (src/app/run_report.cpp).
#pragma once

#include <optional>
#include <string>

#include "pipetrain/app/run_state.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/runtime/blas_threads.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

// "schedule 1f1b: 2 stages, 4 micro-batches, peak in-flight ..., theoretical bubble ...".
std::string schedule_summary(const Schedule& s, const ScheduleReport& r);
// The layout, the resolved deck, waits, BLAS threads, the schedule, the
// model's FLOPs, the data's loss floor and each stage's recomputation.
void print_start(const World& w, const Deck& deck, const Trainer& trainer, const BlasThreadsChoice& blas);
// One step line: loss, lr, norm, throughput, time against the prediction
// (predicted_step_s 0 = none), bubble, memory and ETA.
void print_step(const Deck& deck, const StepRecord& rec, double samples_per_s, double elapsed_s,
                int64_t first_step, double predicted_step_s);
// The last line: steps, time, final loss, its gap to the floor, outputs.
void print_summary(const Deck& deck, const StepRecord& last, double elapsed, int64_t first_step,
                   const std::optional<LossFloor>& floor);

}  // namespace pt
