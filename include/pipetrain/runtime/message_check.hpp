// message_check.hpp: the envelope of an inter-stage message
// (pipeline.check_messages; docs/reliability.md, "Checks on the data
// between stages").
//
// With the check on, every activation and gradient a rank sends to another
// rank is followed, on the same link, by a 64-byte envelope: its step,
// micro-batch, source and destination stage, kind, element count and the
// checksum of its payload (tensor/payload_digest.hpp). The envelope is a
// message of its own, not a trailer of the payload: the payload is sent
// from the tensor the stage produced, without a copy, and the envelope has
// one fixed size, so both sides of an NCCL link post the same sizes in the
// same order (payload, then envelope). MPI keeps them apart by tag (the
// executor's tag + 2), NCCL by order. The receiver checks the envelope
// against what it expected and the checksum of what arrived, and any
// difference ends the run with one message naming the link, the message and
// every field that differs.
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/tensor/payload_digest.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

// What a message is: the receiver's expectation, and the sender's account.
struct MessageIdentity {
  int64_t step = 0;
  int64_t micro_batch = 0;
  int64_t source_stage = 0;
  int64_t destination_stage = 0;
  int64_t kind = 0;  // 0: activation (forward), 1: gradient (backward)
  int64_t elements = 0;
};

// The envelope as it travels: 8 int64 words.
struct Envelope {
  static constexpr int64_t kMagic = 0x31474d5354505450ll;  // "PTPTSMG1", version 1
  int64_t magic = kMagic;
  MessageIdentity id;
  uint64_t checksum = 0;
};
static_assert(sizeof(Envelope) == 64, "the envelope is 64 bytes on the wire");

// An envelope's buffer (16 int32: 64 bytes) on `device`, holding `e`.
Tensor envelope_tensor(const Envelope& e, Device device);
// An empty envelope buffer for a receive.
Tensor envelope_buffer(Device device);
// The envelope a buffer holds (copied to the host).
Envelope read_envelope(const Tensor& buf);

// Where a message travels, for messages: "stage 0 (rank 0) -> stage 1 (rank 1)".
std::string link_text(int64_t source_stage, int source_rank, int64_t destination_stage,
                      int destination_rank);
// "the activation of micro-batch 3 in step 7".
std::string message_text(const MessageIdentity& id);

// Checks an arrived message: `got` its envelope, `received` the digest of
// its buffer, `received_bytes` the bytes that arrived (-1: not known) of a
// buffer of `buffer_bytes`, `element_bytes` per element. Throws Error
// naming the link, the message and every field that differs.
void verify_message(const Envelope& got, const MessageIdentity& want,
                    const PayloadDigest& received, int64_t received_bytes, int64_t buffer_bytes,
                    int64_t element_bytes, const std::string& link);

// How many envelopes this process has sent and verified (tests prove the
// check ran by them).
struct MessageCheckCounts {
  int64_t sent = 0;
  int64_t verified = 0;
};
MessageCheckCounts& message_check_counts();

// The fault-injection hook's damage (PIPETRAIN_TEST_MESSAGE_FAULT), applied
// by the sender to one message. Each returns the buffer to send.
// bitflip: a copy of the payload with one bit flipped, sent under the
//   original's envelope (a corruption in flight).
// truncate: the first half of the payload only (the envelope still counts
//   every element).
// nan: the payload itself gets a NaN in its middle element before its
//   digest (as if the stage had computed it).
// wrong_mb: the payload is unchanged; the envelope names micro-batch + 1,
//   which is what the receiver sees when another micro-batch's message
//   lands in this receive (damage_envelope).
Tensor damage_payload(const std::string& kind, const Tensor& payload);
void damage_envelope(const std::string& kind, Envelope& e);

}  // namespace pt
