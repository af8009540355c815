#include "proto/message_auth.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "evaluation.pb.h"

namespace placer::proto {
namespace {

// Changes whenever what the MAC covers changes: an old peer's messages then fail to verify
// rather than being read another way.
constexpr std::string_view kProtocolTag = "placer-cluster-v1";

std::string Hex(const uint8_t* bytes, size_t size) {
  std::string hex;
  hex.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) hex += fmt::format("{:02x}", bytes[i]);
  return hex;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void RandomBytes(uint8_t* out, size_t size) {
  if (RAND_bytes(out, static_cast<int>(size)) != 1) {
    throw KeyError("cluster key: OpenSSL's random generator failed");
  }
}

// Adds a length-prefixed field to the MAC, so that no two different (session, channel, sender,
// payload) tuples give the same bytes to MAC.
void Update(EVP_MAC_CTX* ctx, std::string_view field) {
  const uint64_t size = field.size();
  if (EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(&size), sizeof(size)) != 1 ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(field.data()), field.size()) !=
          1) {
    throw KeyError("cluster: OpenSSL's HMAC-SHA256 failed");
  }
}

struct MacContextFree {
  void operator()(EVP_MAC_CTX* ctx) const { EVP_MAC_CTX_free(ctx); }
};
using MacContext = std::unique_ptr<EVP_MAC_CTX, MacContextFree>;

}  // namespace

ClusterKey ClusterKey::Generate() {
  ClusterKey key;
  RandomBytes(key.bytes_.data(), key.bytes_.size());
  return key;
}

ClusterKey ClusterKey::FromHex(std::string_view hex, const std::string& source) {
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front()))) {
    hex.remove_prefix(1);
  }
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.remove_suffix(1);
  ClusterKey key;
  bool digits = hex.size() == 2 * kBytes;
  for (size_t i = 0; digits && i < kBytes; ++i) {
    const int high = HexDigit(hex[2 * i]), low = HexDigit(hex[2 * i + 1]);
    digits = high >= 0 && low >= 0;
    key.bytes_[i] = static_cast<uint8_t>(16 * high + low);
  }
  if (!digits) {
    throw KeyError(fmt::format(
        "{}: a cluster key is {} hex digits ({} random bytes), got {} characters that are not",
        source, 2 * kBytes, kBytes, hex.size()));
  }
  return key;
}

ClusterKey ClusterKey::ReadFile(const std::filesystem::path& file) {
  struct stat status {};
  if (stat(file.c_str(), &status) != 0) {
    throw KeyError(
        fmt::format("{}: cannot read the cluster key: {}", file.string(), std::strerror(errno)));
  }
  if ((status.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw KeyError(fmt::format(
        "{}: the cluster key may be read by others (mode {:04o}); a shared key must be its "
        "owner's only: chmod 600 {}",
        file.string(), status.st_mode & 07777, file.string()));
  }
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw KeyError(fmt::format("{}: cannot read the cluster key", file.string()));
  return FromHex(text.str(), file.string());
}

void ClusterKey::WriteFile(const std::filesystem::path& file) const {
  // Created 0600 before a byte is written, so the key is never readable by others, not even for
  // a moment; an existing file is replaced (and its mode set again: O_CREAT keeps an old mode).
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0 || fchmod(fd, S_IRUSR | S_IWUSR) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw KeyError(fmt::format("{}: cannot write the cluster key: {}", file.string(), why));
  }
  const std::string text = Hex(bytes_.data(), bytes_.size()) + "\n";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = close(fd) == 0;
  if (!written || !closed) {
    throw KeyError(fmt::format("{}: cannot write the cluster key", file.string()));
  }
}

std::string NewSession() {
  std::array<uint8_t, 16> nonce{};
  RandomBytes(nonce.data(), nonce.size());
  return Hex(nonce.data(), nonce.size());
}

const char* ToString(Rejection rejection) {
  switch (rejection) {
    case Rejection::kNone:
      return "accepted";
    case Rejection::kGarbage:
      return "garbage";
    case Rejection::kBadMac:
      return "bad MAC";
    case Rejection::kWrongRank:
      return "wrong rank";
    case Rejection::kNotOutstanding:
      return "replayed or not outstanding";
  }
  return "unknown";
}

int64_t DroppedMessages::total() const {
  int64_t sum = 0;
  for (int64_t n : by_reason) sum += n;
  return sum;
}

std::string DroppedMessages::ToString() const {
  std::string parts;
  for (size_t why = 1; why < by_reason.size(); ++why) {
    if (by_reason[why] == 0) continue;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", by_reason[why],
                         proto::ToString(static_cast<Rejection>(why)));
  }
  return parts.empty() ? "0" : fmt::format("{} ({})", total(), parts);
}

struct MessageSealer::Keyed {
  MacContext keyed;
};

MessageSealer::MessageSealer(const ClusterKey& key, std::string session)
    : keyed_(std::make_unique<Keyed>()), session_(std::move(session)) {
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (hmac != nullptr) keyed_->keyed.reset(EVP_MAC_CTX_new(hmac));
  EVP_MAC_free(hmac);  // the context keeps its own reference
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (!keyed_->keyed ||
      EVP_MAC_init(keyed_->keyed.get(), key.bytes().data(), key.bytes().size(), params) != 1) {
    throw KeyError("cluster: OpenSSL has no HMAC-SHA256");
  }
}

MessageSealer::~MessageSealer() = default;

std::array<uint8_t, 32> MessageSealer::Mac(std::string_view channel, int sender,
                                           const std::vector<uint8_t>& payload) const {
  // A copy of the keyed context: the key's pads are hashed once, in the constructor.
  const MacContext ctx(EVP_MAC_CTX_dup(keyed_->keyed.get()));
  if (!ctx) throw KeyError("cluster: OpenSSL's HMAC-SHA256 failed");
  Update(ctx.get(), kProtocolTag);
  Update(ctx.get(), session_);
  Update(ctx.get(), channel);
  Update(ctx.get(), std::to_string(sender));
  Update(ctx.get(),
         std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
  std::array<uint8_t, 32> mac{};
  size_t size = 0;
  if (EVP_MAC_final(ctx.get(), mac.data(), &size, mac.size()) != 1 || size != mac.size()) {
    throw KeyError("cluster: OpenSSL's HMAC-SHA256 failed");
  }
  return mac;
}

std::vector<uint8_t> MessageSealer::Seal(std::string_view channel, int sender,
                                         const std::vector<uint8_t>& payload) const {
  const std::array<uint8_t, 32> mac = Mac(channel, sender, payload);
  wire::Sealed m;
  m.set_payload(payload.data(), payload.size());
  m.set_sender(sender);
  m.set_mac(mac.data(), mac.size());
  std::vector<uint8_t> bytes(m.ByteSizeLong());
  if (!m.SerializeToArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw std::runtime_error("cluster: cannot encode a sealed message");
  }
  return bytes;
}

std::optional<Opened> Unverified(const std::vector<uint8_t>& bytes) {
  wire::Sealed m;
  if (bytes.empty() || !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return std::nullopt;
  }
  return Opened{Rejection::kNone, m.sender(), {m.payload().begin(), m.payload().end()}};
}

Opened MessageSealer::Open(std::string_view channel, const std::vector<uint8_t>& bytes) const {
  wire::Sealed m;
  if (bytes.empty() || !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return {Rejection::kGarbage, -1, {}};
  }
  std::vector<uint8_t> payload(m.payload().begin(), m.payload().end());
  const std::array<uint8_t, 32> expected = Mac(channel, m.sender(), payload);
  // Constant time: how far a forged MAC matches must not show in how long it takes to refuse.
  if (m.mac().size() != expected.size() ||
      CRYPTO_memcmp(m.mac().data(), expected.data(), expected.size()) != 0) {
    return {Rejection::kBadMac, -1, {}};
  }
  return {Rejection::kNone, m.sender(), std::move(payload)};
}

}  // namespace placer::proto
