// checkpoint_trainer.cpp: checkpoints of a Trainer's whole state -- its
// stage's parameters with their optimizer state, and the training counters
// (AdamW's update count, the fp16 loss scaler) -- on top of the
// parameter-level save_checkpoint and load_checkpoint.
#include "checkpoint_save.hpp"
#include "pipetrain/io/checkpoint.hpp"

namespace pt {

namespace ckpt {

TrainingCounters counters_of(Trainer& trainer) {
  TrainingCounters c;
  c.optimizer_updates = trainer.optimizer().updates();
  if (const LossScaler* s = trainer.loss_scaler()) {
    c.loss_scale = s->scale();
    c.loss_scale_run = s->finite_run();
    c.skipped_steps = s->skipped_steps();
  }
  return c;
}

}  // namespace ckpt

namespace {

void apply_counters(const TrainingCounters& c, Trainer& trainer) {
  trainer.optimizer().set_updates(c.optimizer_updates);
  if (LossScaler* s = trainer.loss_scaler(); s && c.loss_scale > 0.0)
    s->restore(c.loss_scale, c.loss_scale_run, c.skipped_steps);
}

}  // namespace

CheckpointWrite save_checkpoint(const Deck& deck, const std::string& resolved_deck,
                                Trainer& trainer, int64_t step, MPI_Comm comm) {
  // The manifest records the partition in use (it changes when rebalancing).
  return save_checkpoint(deck, resolved_deck, trainer.params(), step, comm, ckpt::counters_of(trainer),
                         trainer.partition());
}

CheckpointRead load_checkpoint(const std::string& spec, LoadMode mode, const Deck& deck,
                               const std::string& resolved_deck, Trainer& trainer,
                               MPI_Comm comm) {
  CheckpointRead r = load_checkpoint(spec, mode, deck, resolved_deck, trainer.params(), comm);
  if (mode == LoadMode::Resume) apply_counters(r.counters, trainer);
  return r;
}

}  // namespace pt
