// message_check.cpp: envelopes of inter-stage messages, their check, and
// the fault injection's damage to one message (runtime/message_check.hpp).
#include "pipetrain/runtime/message_check.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

const char* kind_name(int64_t kind) { return kind == 0 ? "activation" : "gradient"; }

// "micro-batch: the envelope says 2, this receive is for 1"
std::string differs(const char* field, int64_t sent, int64_t want) {
  return std::string(field) + ": the envelope says " + std::to_string(sent) +
         ", this receive is for " + std::to_string(want);
}

}  // namespace

Tensor envelope_tensor(const Envelope& e, Device device) {
  Tensor host = Tensor::empty({16}, DType::I32, MemCategory::Workspace, Device::CPU);
  std::memcpy(host.raw(), &e, sizeof e);
  return device == Device::CPU ? host : host.to(device, MemCategory::Workspace);
}

Tensor envelope_buffer(Device device) {
  return Tensor::empty({16}, DType::I32, MemCategory::Workspace, device);  // the receive fills it
}

Envelope read_envelope(const Tensor& buf) {
  PT_CHECK(buf.bytes() == sizeof(Envelope), "an envelope buffer is 64 bytes");
  const Tensor host = buf.device() == Device::CPU ? buf : buf.to(Device::CPU, MemCategory::Workspace);
  Envelope e;
  std::memcpy(&e, host.raw(), sizeof e);
  return e;
}

std::string link_text(int64_t source_stage, int source_rank, int64_t destination_stage,
                      int destination_rank) {
  return "stage " + std::to_string(source_stage) + " (rank " + std::to_string(source_rank) +
         ") -> stage " + std::to_string(destination_stage) + " (rank " +
         std::to_string(destination_rank) + ")";
}

std::string message_text(const MessageIdentity& id) {
  return std::string("the ") + kind_name(id.kind) + " of micro-batch " +
         std::to_string(id.micro_batch) + " in step " + std::to_string(id.step);
}

void verify_message(const Envelope& got, const MessageIdentity& want,
                    const PayloadDigest& received, int64_t received_bytes, int64_t buffer_bytes,
                    int64_t element_bytes, const std::string& link) {
  std::vector<std::string> diffs;
  if (got.magic != Envelope::kMagic) {
    diffs.push_back("no envelope arrived (its first word is " +
                    hex(static_cast<uint64_t>(got.magic)) + ", not the envelope's mark)");
  } else {
    const MessageIdentity& s = got.id;
    if (s.step != want.step) diffs.push_back(differs("step", s.step, want.step));
    if (s.micro_batch != want.micro_batch)
      diffs.push_back(differs("micro-batch", s.micro_batch, want.micro_batch));
    if (s.source_stage != want.source_stage)
      diffs.push_back(differs("source stage", s.source_stage, want.source_stage));
    if (s.destination_stage != want.destination_stage)
      diffs.push_back(differs("destination stage", s.destination_stage, want.destination_stage));
    if (s.kind != want.kind)
      diffs.push_back(std::string("kind: the envelope says ") + kind_name(s.kind) +
                      ", this receive is for " + kind_name(want.kind));
    if (s.elements != want.elements)
      diffs.push_back(differs("element count", s.elements, want.elements));
  }
  const int64_t sent_bytes = got.id.elements * element_bytes;
  if (received_bytes >= 0 && received_bytes != buffer_bytes)
    diffs.push_back("length: " + std::to_string(received_bytes) + " bytes arrived, the envelope counts " +
                    std::to_string(got.id.elements) + " elements (" + std::to_string(sent_bytes) +
                    " bytes): the message was truncated");
  if (got.magic == Envelope::kMagic && received.checksum != got.checksum)
    diffs.push_back("checksum: the sender's " + hex(got.checksum) + ", the payload that arrived " +
                    hex(received.checksum));
  if (diffs.empty()) {
    ++message_check_counts().verified;
    return;
  }
  std::string text;
  for (const std::string& d : diffs) text += (text.empty() ? "" : "; ") + d;
  throw Error("inter-stage message check failed on the link " + link + ", " + message_text(want) +
              ": " + text + " (pipeline.check_messages; docs/reliability.md)");
}

MessageCheckCounts& message_check_counts() {
  static MessageCheckCounts counts;
  return counts;
}

Tensor damage_payload(const std::string& kind, const Tensor& payload) {
  Tensor host = payload.to(Device::CPU, MemCategory::Workspace);  // always a copy
  unsigned char* bytes = static_cast<unsigned char*>(host.raw());
  const size_t middle = static_cast<size_t>(host.numel() / 2);
  const size_t element = dtype_size(host.dtype());
  if (kind == "bitflip") {
    bytes[middle * element] ^= 0x10;  // one bit of the middle element
  } else if (kind == "nan") {
    if (host.dtype() == DType::F32) {
      const uint32_t nan = 0x7fc00000u;
      std::memcpy(bytes + middle * element, &nan, 4);
    } else if (element == 2) {
      const uint16_t nan = host.dtype() == DType::F16 ? 0x7e00u : 0x7fc0u;
      std::memcpy(bytes + middle * element, &nan, 2);
    }
  } else if (kind == "truncate") {
    Tensor half = Tensor::empty({std::max<int64_t>(1, host.numel() / 2)}, host.dtype(),
                                MemCategory::Workspace, Device::CPU);
    std::memcpy(half.raw(), host.raw(), half.bytes());
    host = half;
  } else {
    return payload;  // wrong_mb: the envelope's
  }
  return payload.device() == Device::CPU ? host : host.to(payload.device(), MemCategory::Workspace);
}

void damage_envelope(const std::string& kind, Envelope& e) {
  if (kind == "wrong_mb") e.id.micro_batch += 1;
}

}  // namespace pt
