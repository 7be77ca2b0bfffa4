// executor_checks.cpp: the executor's part of pipeline.check_messages
// (runtime/message_check.hpp): envelopes posted beside each payload, their
// check on arrival, the inf/NaN check of every stage output, and the length
// check of a message that arrived short.
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/runtime/executor.hpp"
#include "pipetrain/runtime/message_check.hpp"

namespace pt {

namespace {
constexpr int kActivation = 0;  // as in executor.cpp
constexpr int kGradient = 1;
}  // namespace

Executor::Pending Executor::post_envelope_recv(const Action& a, int peer, int tag, Tensor& buf) {
  buf = envelope_buffer(be_.device());
  Pending p = posted(a, transport_.irecv(buf, peer, tag));
  p.traced = false;
  return p;
}

void Executor::post_envelope_send(const Action& a, const Tensor& payload,
                                  const PayloadDigest& digest, int peer, int tag,
                                  const std::string& fault) {
  const bool forward_dir = a.kind == ActionKind::SEND_F;
  Envelope e;
  e.id.step = pass_.step;
  e.id.micro_batch = a.mb;
  e.id.source_stage = a.stage;
  e.id.destination_stage = forward_dir ? a.stage + 1 : a.stage - 1;
  e.id.kind = forward_dir ? kActivation : kGradient;
  e.id.elements = payload.numel();
  e.checksum = digest.checksum;
  damage_envelope(fault, e);  // wrong_mb (fault injection); else unchanged
  Send send;
  send.buffer = envelope_tensor(e, be_.device());
  send.pending = posted(a, transport_.isend(send.buffer, peer, tag));
  send.pending.traced = false;
  sends_.push_back(std::move(send));
  ++message_check_counts().sent;
}

void Executor::verify_receive(StageRunner& runner, int mb, int direction, Pending& envelope,
                              const Tensor& envelope_buf, const Tensor& payload,
                              int64_t received_bytes) {
  PT_CHECK(envelope, "a checked receive without its envelope");
  wait_for(envelope);
  envelope = Pending();
  MessageIdentity want;
  want.step = pass_.step;
  want.micro_batch = mb;
  want.source_stage = direction == kActivation ? runner.stage() - 1 : runner.stage() + 1;
  want.destination_stage = runner.stage();
  want.kind = direction;
  want.elements = payload.numel();
  const std::string link = link_text(want.source_stage, peer_rank(static_cast<int>(want.source_stage)),
                                     want.destination_stage, transport_.rank());
  verify_message(read_envelope(envelope_buf), want, be_.payload_digest(payload), received_bytes,
                 static_cast<int64_t>(payload.bytes()),
                 static_cast<int64_t>(dtype_size(payload.dtype())), link);
}

PayloadDigest Executor::check_output(const StageRunner& runner, int mb, const char* action,
                                     const Tensor& x) {
  const PayloadDigest digest = be_.payload_digest(x);
  if (digest.nonfinite == 0 || config_.loss_scaling) return digest;
  const bool forward_dir = action[0] == 'F';
  // Every input from another stage was checked finite when it was produced;
  // the first stage's forward also reads the data set's batch, unchecked.
  const std::string here = std::string(forward_dir ? "the forward" : "the backward") + " of stage " +
                           std::to_string(runner.stage());
  const std::string origin = forward_dir && runner.model().is_first()
                                 ? "they first appear in " + here + " or in its input batch"
                                 : "its inputs were finite, so they first appear in " + here;
  throw Error(std::string("non-finite values in ") +
              (pass_.pass == Pass::Train ? "step " : "evaluation batch ") +
              std::to_string(pass_.step) + ": the " + (forward_dir ? "activation" : "input gradient") +
              " that " + action + " of micro-batch " + std::to_string(mb) + " on stage " +
              std::to_string(runner.stage()) + " (rank " + std::to_string(transport_.rank()) +
              ") computed holds " + std::to_string(digest.nonfinite) + " inf/NaN of " +
              std::to_string(x.numel()) + " elements; " + origin + " (pipeline.check_messages)");
}

void Executor::check_length(const Action& a, int64_t received_bytes, const Tensor& buf) const {
  if (received_bytes < 0 || received_bytes == static_cast<int64_t>(buf.bytes())) return;
  const bool forward_dir = a.kind == ActionKind::RECV_F;
  const int peer_stage = forward_dir ? a.stage - 1 : a.stage + 1;
  throw Error("truncated message on the link " +
              link_text(peer_stage, peer_rank(peer_stage), a.stage, transport_.rank()) + ": " +
              (forward_dir ? "the activation" : "the gradient") + " of micro-batch " +
              std::to_string(a.mb) + " in step " + std::to_string(pass_.step) + " has " +
              std::to_string(received_bytes) + " of its " + std::to_string(buf.bytes()) + " bytes");
}

}  // namespace pt
