// The messages between a search and its workers (proto/evaluation_wire.h) and their sealed
// envelope (proto/message_auth.h), as a peer on the store could send them. The first input byte
// picks what the rest is read as:
//   0  a task, 1  a verdict: decoded, or a WireError; what decodes encodes and decodes to the
//      same bytes again (nothing is read one way and re-sent another);
//   2  a sealed message: never accepted (nobody without the key can seal), only rejected;
//   3  a payload sealed under the key: opens to exactly itself, then is decoded as 0 and 1 are.
// Anything else is a finding: a crash, a sanitizer report, an exception of another type.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/evaluation_wire.h"
#include "proto/message_auth.h"

namespace {

using placer::proto::WireError;

const placer::proto::MessageSealer& Sealer() {
  static const auto* sealer = new placer::proto::MessageSealer(
      placer::proto::ClusterKey::FromHex(std::string(64, '7'), "fuzz"), "fuzz-session");
  return *sealer;
}

template <typename Decode, typename Encode>
void RoundTrip(const std::vector<uint8_t>& bytes, Decode decode, Encode encode) {
  try {
    const std::vector<uint8_t> once = encode(decode(bytes));
    if (encode(decode(once)) != once) __builtin_trap();
  } catch (const WireError&) {
  }
}

void DecodeBoth(const std::vector<uint8_t>& bytes) {
  RoundTrip(bytes, placer::proto::DecodeTask, placer::proto::EncodeTask);
  RoundTrip(bytes, placer::proto::DecodeResult, placer::proto::EncodeResult);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Protobuf logs every string field that is not UTF-8 before the parse fails: at millions of
  // inputs that is the run's whole time. (In a search only key holders reach these decoders: a
  // payload is decoded once its MAC verifies, and the envelope's fields are bytes.)
  static const bool silenced = [] {
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)silenced;
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  switch (data[0] % 4) {
    case 0:
      RoundTrip(bytes, placer::proto::DecodeTask, placer::proto::EncodeTask);
      break;
    case 1:
      RoundTrip(bytes, placer::proto::DecodeResult, placer::proto::EncodeResult);
      break;
    case 2:
      if (Sealer().Open("placer/results", bytes).ok()) __builtin_trap();
      break;
    case 3: {
      const int sender = static_cast<int>(data[0] / 4);
      const placer::proto::Opened opened =
          Sealer().Open("placer/inbox/1", Sealer().Seal("placer/inbox/1", sender, bytes));
      if (!opened.ok() || opened.sender != sender || opened.payload != bytes) __builtin_trap();
      DecodeBoth(opened.payload);
      break;
    }
  }
  return 0;
}
