// schedule.hpp: pipeline schedules as data.
//
// A schedule is, for every rank, the ordered list of actions that rank runs in
// one training step. An action is (stage, kind, micro-batch) and prints as
// "<stage><KIND><mb>", e.g. "2F5", "0B3", "0W3", "1SEND_F4", "3RECV_B0"; the
// text parses back to the same action. Generators build GPipe, 1F1B,
// interleaved 1F1B, ZB-H1 and ZB-V schedules (docs/schedules.md draws each),
// a schedule can also be read from a text file (one line per rank), and the
// validator checks any schedule before step 0. One executor
// (runtime/executor) runs every valid schedule.
//
// Semantics the validator and the executor share:
//   F      forward of one micro-batch through the stage. Needs the stage input:
//          the data for stage 0, else the completed RECV_F of (stage, mb).
//   B      backward of one micro-batch; accumulates parameter gradients. Needs
//          F of (stage, mb) done and, except on the last stage (which starts
//          from the loss), the output gradient: the completed RECV_B of
//          (stage, mb), or B of (stage+1, mb) when that stage is on the rank.
//          In a schedule with W actions (a split backward) B computes the
//          input gradient only and keeps what the weight gradients need.
//   W      the weight gradients of one micro-batch that B deferred (needs B
//          of (stage, mb)); a schedule has W for every (stage, mb) or none.
//          In a schedule with per-step weight gradients (the header line
//          "weight_grad: step"), each stage's W actions stand together after
//          its last B, in micro-batch order, and run as one pass over the
//          step's micro-batches: each weight-gradient product is one GEMM
//          over all N micro-batches' rows (docs/schedules.md).
//   SEND_F post a non-blocking send of F's output to stage+1 (after F).
//   RECV_F post a non-blocking receive of this stage's input from stage-1.
//   SEND_B post a non-blocking send of B's input gradient to stage-1 (after B).
//   RECV_B post a non-blocking receive of this stage's output gradient from stage+1.
// Sends and receives never block when posted. F/B block until their input has
// arrived, and for the one earlier send of their rank that
// sends_finished_before names, if any; all sends are completed at the end of
// the step. Stage s lives on
// rank s % num_ranks unless the schedule gives a placement (ZB-V's V shape:
// rank r owns stages r and 2P-1-r). Comm actions are required exactly when
// the two stages live on different ranks.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "pipetrain/base/deck_kinds.hpp"

namespace pt {

enum class ActionKind { F, B, SEND_F, RECV_F, SEND_B, RECV_B, W };

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::F;
  int mb = 0;  // micro-batch index
  bool operator==(const Action& o) const {
    return stage == o.stage && kind == o.kind && mb == o.mb;
  }
};

const char* kind_name(ActionKind kind);   // "F", "SEND_F", ...
std::string to_string(const Action& a);   // "2F5"
// Parses "2F5" etc.; throws InputError naming the text and what was expected.
Action parse_action(const std::string& text);
// The action <stage><kind><mb>, e.g. make_action(2, ActionKind::F, 5) is "2F5".
Action make_action(int stage, ActionKind kind, int mb);

struct Schedule {
  std::string name;        // "gpipe", "1f1b", or the file it came from
  int num_stages = 1;      // P
  int num_micro_batches = 1;  // N
  int num_ranks = 1;
  std::vector<std::vector<Action>> ranks;  // (num_ranks, actions of that rank)
  // Evaluation schedules: F and its comm actions only, no B, W, SEND_B, RECV_B.
  bool forward_only = false;
  // (num_stages) rank of each stage; empty: stage % num_ranks.
  std::vector<int> placement;
  // Generated at measured per-stage action times (StageActionTimes), not in
  // unit time: its theory is that of the unit-time schedule of its name.
  bool timed = false;
  // Per-step weight gradients: every stage's W actions form one run after
  // its last B, in ascending micro-batch order, and the executor runs the
  // run as one pass over the concatenated micro-batches (the validator
  // checks the layout). Printed as the line "weight_grad: step".
  bool step_weight_grads = false;
};

inline int stage_rank(const Schedule& s, int stage) {
  return s.placement.empty() ? stage % s.num_ranks : s.placement[static_cast<size_t>(stage)];
}
// The stages rank `rank` owns, ascending.
std::vector<int> rank_stages(const Schedule& s, int rank);
// True when the schedule has W actions (a split backward).
bool splits_backward(const Schedule& s);
// True for F, B and W (not for sends and receives).
bool is_compute(ActionKind kind);
// (ranks, actions) each rank's F, B and W in run order, its sends and
// receives left out: the inverse of with_communication.
std::vector<std::vector<Action>> compute_actions(const Schedule& s);

// (stages) each stage's F, B and W duration, for generators that place
// actions by time; empty: unit time.
using StageActionTimes = std::vector<std::array<double, 3>>;

// Fill-drain: all F, then all B (both in ascending micro-batch order).
Schedule generate_gpipe(int num_stages, int num_micro_batches);
// PipeDream-flush: stage s runs min(P-s, N) warm-up forwards, then alternates
// one F and one B, then drains. B runs in ascending micro-batch order.
Schedule generate_1f1b(int num_stages, int num_micro_batches);
// Interleaved 1F1B (Megatron's virtual pipeline): `virtual_stages` v stages
// per rank, rank r owning stages r, r+P, ..; forwards go in groups of P
// micro-batches chunk by chunk; needs N to be a multiple of the rank count.
Schedule generate_interleaved(int num_ranks, int virtual_stages, int num_micro_batches);
// ZB-H1: one stage per rank, split backward, 1F1B's order of F and B with W
// filling the bubbles; at most min(P, N) micro-batches between F and W on
// each stage (1F1B's peak, that of its stage 0).
//
// Both come from one list scheduler that simulates the ranks: a free rank
// runs its next ready B, else F (within the in-flight limit), else W. By
// default every action takes one time unit (the papers' schedules); given
// `times`, one (F, B, W) duration per stage (seconds of a profile or a
// trace), it simulates those instead, so W lands where the real gaps are;
// `w_slack` > 0 keeps a rank free for an F or B whose input arrives within
// w_slack x the W it would otherwise start. Greedy placement at real times
// is not always better than unit time: plan/simulate's
// generate_at_times tries several and keeps the best.
Schedule generate_zb_h1(int num_ranks, int num_micro_batches, const StageActionTimes& times = {},
                        double w_slack = 0.0);
// ZB-V: two stages per rank in a V (rank r owns stages r and 2P-1-r), split
// backward, at most 2P half-size stage micro-batches between F and W per rank.
Schedule generate_zb_v(int num_ranks, int num_micro_batches, const StageActionTimes& times = {},
                       double w_slack = 0.0);
// `skeleton` (its sizes, placement and flags) with rank lists made of the
// given compute actions (ranks, F/B/W in run order) and the sends and
// receives they need: a send right after the compute that produced its data,
// a receive one compute ahead of its consumer (a RECV_B not before F of its
// micro-batch), moved earlier where needed so that every rank pair's
// receives come in the order of the peer's sends (NCCL matches by order).
Schedule with_communication(const Schedule& skeleton,
                            const std::vector<std::vector<Action>>& compute);
// The same schedule without backward actions, for evaluation passes.
Schedule forward_only_schedule(const Schedule& training);
// A schedule without W actions with its weight gradients moved to the end of
// the step: every B computes the input gradient only, and each rank ends
// with, per stage it owns (highest stage first), W of micro-batches 0..N-1
// (step_weight_grads set). Throws InputError for a schedule that already
// places W actions (zb-h1, zb-v, or a file with W) or is forward-only.
Schedule with_step_weight_grads(const Schedule& schedule);
// Stages per rank of pipeline.schedule `name`: interleaved and "file"
// (a schedule file): virtual_stages, zb-v: 2, others 1.
int stages_per_rank(ScheduleKind kind, int virtual_stages);
int stages_per_rank(const std::string& name, int virtual_stages);  // 1 for an unknown name
// gpipe | 1f1b | interleaved | zb-h1 | zb-v on `num_ranks` ranks; throws
// InputError for "file", other names or micro-batch counts a schedule
// refuses. `times` and `w_slack` (zb-h1 and zb-v only): see generate_zb_h1.
// The name form (plan --schedules, a schedule's own name) reads the name
// with the table of base/deck_kinds.hpp.
Schedule generate_schedule(ScheduleKind kind, int num_ranks, int num_micro_batches,
                           int virtual_stages = 1, const StageActionTimes& times = {},
                           double w_slack = 0.0);
Schedule generate_schedule(const std::string& name, int num_ranks, int num_micro_batches,
                           int virtual_stages = 1, const StageActionTimes& times = {},
                           double w_slack = 0.0);
// True for the schedules whose generator takes action times (zb-h1, zb-v).
bool schedule_takes_times(ScheduleKind kind);
bool schedule_takes_times(const std::string& name);

// One line per rank: actions separated by spaces. parse_schedule(format(s))
// gives back s. Lines starting with '#' and blank lines are ignored. A
// schedule with a placement starts with the line "placement: 0 1 1 0" (the
// rank of each stage); without it stage s lives on rank s % ranks. A
// schedule with per-step weight gradients has the line "weight_grad: step"
// before its rank lines.
std::string format_schedule(const Schedule& s);
Schedule parse_schedule(const std::string& text, const std::string& source_name,
                        int num_stages, int num_micro_batches);
Schedule load_schedule_file(const std::string& path, int num_stages, int num_micro_batches);

struct ScheduleReport {
  // (num_stages) max micro-batches with F done and B (W when split) not yet:
  // the stage's activation stash bound.
  std::vector<int> peak_in_flight;
  // (num_stages) max micro-batches with B done, W not yet (0 without W): of
  // the in-flight ones, those holding only the weight-gradient stash.
  std::vector<int> peak_pending_w;
  int simulated_rounds = 0;         // rounds of the deadlock simulation
};

// (ranks, actions of that rank) for each action, the index in the same list
// of the rank's own earlier send it finishes before it starts, or -1: for a
// compute whose input comes from rank X, the send to X that X's next compute
// after sending that input consumes (docs/schedules.md, "Sends finished
// before a compute"). The executor waits for it and the planner's simulator
// models the same wait, so no race of a few microseconds decides whether the
// send's buffer is still held when the compute allocates.
std::vector<std::vector<int>> sends_finished_before(const Schedule& s);

// How the transport delivers, for the validator's deadlock simulation.
//   MPI (the default): tagged messages; posting a send or receive never blocks.
//   NCCL (match_by_order): per rank pair and direction one channel whose
//     messages meet by order (the k-th send is the k-th receive) and complete
//     in order; with lazy_connect, the first send or receive of a rank on a
//     channel blocks that rank until the peer reaches its own first action on
//     the channel (NCCL's lazy connection; pipetrain's NCCL transports connect
//     every channel at start, so they validate with lazy_connect = false).
struct CommSemantics {
  bool match_by_order = false;
  bool lazy_connect = false;
  static CommSemantics mpi() { return {}; }
  static CommSemantics nccl(bool lazy = false) { return {true, lazy}; }
};
// The semantics of a pipeline.transport value ("nccl", "nccl_model": NCCL).
CommSemantics comm_semantics_of(TransportKind transport, DeviceKind device);

// Checks the schedule; throws InputError whose message explains the problem
// and shows the rank x step grid with the failing action(s) marked.
ScheduleReport validate_schedule(const Schedule& s, const CommSemantics& comm = {});

// The rank x step grid; actions listed in `marks` ((rank, index) pairs) are
// shown as ">2F5<".
std::string format_grid(const Schedule& s,
                        const std::vector<std::pair<int, int>>& marks = {});

}  // namespace pt
