// Authenticated messages between a search and its evaluation workers. c10d's TCPStore, which
// carries them, trusts anyone who reaches its port (PyTorch leaves it unauthenticated by design),
// so every message a search acts on (a task, a verdict, a join, the config) travels sealed: an
// HMAC-SHA256 (OpenSSL's libcrypto) under a key that only the search and its workers hold.
//
// The MAC covers, each with its length: a protocol tag, the run's session (a random nonce the
// search draws per pool, so that messages recorded from another run do not verify), the channel
// (the store key or queue the message is meant for, so that a message moved to another queue
// does not verify), the sender's rank and the payload. Replays within a run and verdicts from the
// wrong rank are the receiver's to refuse (cluster/worker_pool.cc, cluster/worker_loop.cc): the
// MAC proves who sealed a message and for where, not that it is new. Nothing is encrypted.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace placer::proto {

// A key that cannot be had: a file missing, unreadable, readable by others, or not 64 hex digits.
class KeyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ClusterKey {
 public:
  static constexpr size_t kBytes = 32;  // 256 bits, SHA-256's output size (RFC 2104 advice)

  // Drawn from OpenSSL's CSPRNG.
  static ClusterKey Generate();
  // 64 hex digits (surrounding white space ignored); `source` names where they came from.
  static ClusterKey FromHex(std::string_view hex, const std::string& source);
  // A key file as WriteFile writes it. Refused when group or others may read it, as ssh refuses
  // a private key: a key others can read authenticates nobody.
  static ClusterKey ReadFile(const std::filesystem::path& file);
  // Writes the key as hex into a file created with mode 0600 (replacing one that exists).
  void WriteFile(const std::filesystem::path& file) const;

  const std::array<uint8_t, kBytes>& bytes() const { return bytes_; }

 private:
  std::array<uint8_t, kBytes> bytes_{};
};

// A random session nonce as hex (16 bytes from OpenSSL's CSPRNG).
std::string NewSession();

// Why a message was not taken.
enum class Rejection {
  kNone,
  kGarbage,         // not a sealed message, or its payload does not parse
  kBadMac,          // sealed under another key, session or channel, or altered
  kWrongRank,       // sealed by a rank other than the one that may send it
  kNotOutstanding,  // a verdict for no task held by its sender, or a task seen before: a replay
};
inline constexpr int kRejectionKinds = 5;
const char* ToString(Rejection rejection);

// Messages not acted on, counted by why.
struct DroppedMessages {
  std::array<int64_t, kRejectionKinds> by_reason{};
  void Count(Rejection why) { ++by_reason[static_cast<size_t>(why)]; }
  int64_t total() const;
  // "3 (2 bad MAC, 1 replayed or not outstanding)", or "0".
  std::string ToString() const;
};

struct Opened {
  Rejection rejection = Rejection::kNone;
  int sender = -1;
  std::vector<uint8_t> payload;
  bool ok() const { return rejection == Rejection::kNone; }
};

// Seals and opens messages under one key and session. Keyed once (OpenSSL's EVP_MAC with the key
// set up front, duplicated per message), so a message costs one pass over its bytes; a sealer
// may be used from several threads.
class MessageSealer {
 public:
  MessageSealer(const ClusterKey& key, std::string session);
  ~MessageSealer();
  MessageSealer(const MessageSealer&) = delete;
  MessageSealer& operator=(const MessageSealer&) = delete;

  std::vector<uint8_t> Seal(std::string_view channel, int sender,
                            const std::vector<uint8_t>& payload) const;
  // The sender and payload of a message sealed by this key and session for `channel`; otherwise
  // a rejection (kGarbage or kBadMac) and nothing else.
  Opened Open(std::string_view channel, const std::vector<uint8_t>& bytes) const;

 private:
  std::array<uint8_t, 32> Mac(std::string_view channel, int sender,
                              const std::vector<uint8_t>& payload) const;

  struct Keyed;  // the EVP_MAC context holding the key, duplicated for every message
  std::unique_ptr<Keyed> keyed_;
  std::string session_;
};

// What a sealed message claims, unverified: only to name a peer that was refused (its rank and
// host in a message), never to act on.
std::optional<Opened> Unverified(const std::vector<uint8_t>& bytes);

}  // namespace placer::proto
