// run_report.cpp: what a training run prints (app/run_report.hpp): the
// start (layout, resolved deck, waits, BLAS threads, schedule, model FLOPs,
// loss floor, recomputation), one line per logged step, and the last line.
#include "pipetrain/app/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/blas_threads.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

namespace {

std::string format_duration(double seconds) {
  long s = static_cast<long>(std::lround(std::max(0.0, seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return "[" + os.str() + "]";
}


// The model's training FLOPs (what GFLOP/s and MFU count) and, with a padded
// vocabulary, the work on its padded columns, which they leave out.
void print_model_flops(const ModelConfig& model) {
  const double flops = model_train_flops_per_sample(model);
  const double padding = model_padding_flops_per_sample(model);
  const double tokens = static_cast<double>(tokens_per_sample(model));
  std::printf("model: %.4g training FLOPs per token (%.4g per sample)", flops / tokens, flops);
  if (padding > 0.0)
    std::printf("; the padded vocabulary columns add %.4g per token, computed but not counted",
                padding / tokens);
  std::printf("\n");
}

void print_floor(const std::optional<LossFloor>& floor) {
  if (!floor) return;
  if (!floor->summary.empty()) {
    std::printf("%s: %.6f nats/image\n", floor->summary.c_str(), floor->window);
    return;
  }
  std::printf("data: Markov chain entropy rate %.6f nats/token; loss floor of a window "
              "(early positions see less context) %.6f nats/token\n",
              floor->entropy_rate, floor->window);
}

}  // namespace

std::string schedule_summary(const Schedule& s, const ScheduleReport& r) {
  std::vector<int64_t> peaks(r.peak_in_flight.begin(), r.peak_in_flight.end());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "schedule %s: %d stages, %d micro-batches, peak in-flight micro-batches "
                "per stage %s, theoretical bubble %.1f%% (unit times F = 1, B = 2, or B = W = 1 "
                "when split: %s)",
                s.name.c_str(), s.num_stages, s.num_micro_batches, join(peaks).c_str(),
                100.0 * theory_bubble(s),
                s.step_weight_grads ? "2(P-1)/(3N+2(P-1)) for gpipe and 1f1b with weight_grad: step, "
                                      "whose W run after the fill and drain"
                                    : "(P-1)/(N+P-1) for gpipe and 1f1b");
  std::string text = buf;
  if (s.name == "interleaved" && s.num_stages == s.num_ranks)
    text += "; with one stage per rank (pipeline.virtual_stages = 1) nothing is interleaved: set "
            "pipeline.virtual_stages >= 2 for the interleaved schedule's smaller bubble";
  return text;
}

void print_step(const Deck& deck, const StepRecord& rec, double samples_per_s,
                double elapsed_s, int64_t first_step, double predicted_step_s) {
  const int64_t total = deck.training.steps;
  const double eta = elapsed_s / static_cast<double>(rec.step + 1 - first_step) *
                     static_cast<double>(total - rec.step - 1);
  const double tokens_per_s = samples_per_s * static_cast<double>(tokens_per_sample(deck.model));
  const double gflops = samples_per_s * model_train_flops_per_sample(deck.model) * 1e-9;
  char eval[48] = "";
  if (!std::isnan(rec.eval_loss)) std::snprintf(eval, sizeof eval, " | eval %.4f", rec.eval_loss);
  double act_peak = 0.0, total_peak = 0.0;  // the largest stage's
  for (const auto& stage : rec.rank_peak_bytes) {
    act_peak = std::max(act_peak, stage[static_cast<int>(MemCategory::Activations)]);
    total_peak = std::max(total_peak, stage.back());
  }
  char fp16[64] = "";  // the loss scale, and a skipped step, under fp16
  if (deck.training.precision == Precision::Fp16)
    std::snprintf(fp16, sizeof fp16, " | scale %g%s", rec.loss_scale,
                  rec.skipped ? " SKIPPED (overflow)" : "");
  char plan[40] = "";  // the planner's prediction beside the measurement
  if (predicted_step_s > 0.0)
    std::snprintf(plan, sizeof plan, " (plan %.1f, %+.0f%%)", predicted_step_s * 1e3,
                  100.0 * (predicted_step_s - rec.step_time_s) / rec.step_time_s);
  std::printf("step %6lld/%lld | loss %.4f%s%s | lr %.2e | gnorm %.2e | %8.1f samples/s | "
              "%9.0f tokens/s | %6.2f GFLOP/s | %7.1f ms%s | bubble %4.1f%% | mem act %.1f / total %.1f MiB | ETA %s\n",
              static_cast<long long>(rec.step + 1), static_cast<long long>(total), rec.loss, eval,
              fp16, rec.lr, rec.grad_norm, samples_per_s, tokens_per_s, gflops, rec.step_time_s * 1e3,
              plan, 100.0 * rec.bubble, act_peak / 1048576.0, total_peak / 1048576.0, format_duration(eta).c_str());
  std::fflush(stdout);
}

// The last line. After a resume the time covers only the steps this process
// ran, and the line says how many those were.
void print_summary(const Deck& deck, const StepRecord& last, double elapsed, int64_t first_step,
                   const std::optional<LossFloor>& floor) {
  const double final_loss = std::isnan(last.eval_loss) ? last.loss : last.eval_loss;
  const char* which = std::isnan(last.eval_loss) ? "training" : "held-out";
  const long long steps = static_cast<long long>(deck.training.steps);
  if (first_step > 0)
    std::printf("done: %lld steps, the last %lld of them run by this process (resumed at step "
                "%lld) in %.2f s; final %s loss %.6f",
                steps, steps - static_cast<long long>(first_step),
                static_cast<long long>(first_step), elapsed, which, final_loss);
  else
    std::printf("done: %lld steps in %.2f s; final %s loss %.6f", steps, elapsed, which, final_loss);
  if (floor)
    std::printf("; loss floor %.6f; gap %.6f (%.1f%% above the floor)", floor->window,
                final_loss - floor->window, 100.0 * (final_loss - floor->window) / floor->window);
  std::printf("; outputs in %s\n", deck.output.dir.c_str());
}

void print_start(const World& w, const Deck& deck, const Trainer& trainer,
                 const BlasThreadsChoice& blas) {
  const int stages = trainer.schedule().num_stages;
  const int pipeline_ranks = w.size / trainer.replicas();
  std::string grid;
  if (trainer.replicas() > 1)
    grid = " (a grid of " + std::to_string(pipeline_ranks) + " pipeline ranks x " +
           std::to_string(trainer.replicas()) + " data-parallel replicas; replica d is world ranks " +
           "d x " + std::to_string(pipeline_ranks) + " + pipeline rank; gradient reduction \"" +
           kind_name(deck.data_parallel.reduction) + "\" in " + std::to_string(trainer.reducer().buckets().size()) +
           " bucket(s) on rank 0)";
  std::printf("pipetrain: %d ranks, %s%s\n%s\n", w.size,
              stages == pipeline_ranks ? "one stage per rank"
                               : (std::to_string(stages / pipeline_ranks) + " stages per rank").c_str(),
              grid.c_str(), deck_to_toml(deck).c_str());
  std::printf("waits: %s (%d ranks on %d cores on this node%s)\n", wait_mode_name(wait_mode()),
              blas.ranks_on_node, blas.node_cores,
              std::getenv("PIPETRAIN_WAIT") ? "; PIPETRAIN_WAIT" : "");
  std::printf("BLAS threads per rank: %d (%s; runs are bitwise comparable at equal BLAS threads)\n",
              blas.threads,
              blas.automatic ? ("auto: " + std::to_string(blas.node_cores) + " cores / " +
                                std::to_string(blas.ranks_on_node) + " ranks on this node")
                                   .c_str()
                             : "training.blas_threads");
  std::printf("%s\n", schedule_summary(trainer.schedule(), trainer.schedule_report()).c_str());
  print_model_flops(deck.model);
  print_floor(trainer.loss_floor());
  const auto& choices = trainer.recompute_choices();
  for (size_t s = 0; s < choices.size(); ++s) {
    std::printf("stage %zu: recompute %s", s, choices[s].policy.c_str());
    if (is_auto_recompute(choices[s].requested))
      std::printf(" (auto: estimated peak %.1f MiB of a %.1f MiB budget)",
                  choices[s].needed_bytes / 1048576.0, choices[s].budget_bytes / 1048576.0);
    std::printf("\n");
  }
  std::fflush(stdout);
}


}  // namespace pt
