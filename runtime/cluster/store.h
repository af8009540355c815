// The rendezvous of a search and its evaluation workers: PyTorch's c10d::TCPStore (the store
// torchrun rendezvouses through), hosted by the search (rank 0) and joined by every worker. Its
// keys and queues are the whole protocol; this header names them once. Everything on them but the
// session nonce, the rank claims and the heartbeats travels sealed (proto/message_auth.h), each
// message under the name of the key or queue it is for as its channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace placer::cluster {

// A cluster that cannot form or went away: a worker that did not join in time, a rank taken twice,
// a store that cannot be reached. main() reports it with exit code 1 (the input was fine).
class ClusterError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A worker whose key is not the search's: nothing the search sent verifies under it. The worker
// has announced itself (sealed under its own key) so that the search names it, and leaves. main()
// reports it with exit code 2: the worker was given the wrong key.
class KeyMismatch : public ClusterError {
 public:
  using ClusterError::ClusterError;
};

namespace keys {
inline constexpr const char* kSession = "placer/session";  // plain: the nonce every MAC covers
inline constexpr const char* kWorldSize = "placer/world_size";
inline constexpr const char* kConfigText = "placer/config/text";
inline constexpr const char* kConfigPath = "placer/config/path";
inline constexpr const char* kResults = "placer/results";  // queue: every worker's verdicts
inline std::string Claim(int rank) { return "placer/claim/" + std::to_string(rank); }
inline std::string Joined(int rank) { return "placer/joined/" + std::to_string(rank); }
inline std::string Heartbeat(int rank) { return "placer/heartbeat/" + std::to_string(rank); }
inline std::string Inbox(int rank) { return "placer/inbox/" + std::to_string(rank); }  // queue
}  // namespace keys

// The search's store, listening at `listen_address` (a host name or address of this machine;
// "0.0.0.0" or "::": every interface) and `port` (0: a free port, see getPort()). c10d binds every
// interface itself; the socket is bound here and handed over (TCPStoreOptions::masterListenFd).
c10::intrusive_ptr<c10d::TCPStore> HostStore(const std::string& listen_address, int port,
                                             std::chrono::milliseconds timeout);
// A worker's connection to the store at host:port, retried until `timeout`; throws ClusterError.
c10::intrusive_ptr<c10d::TCPStore> JoinStore(const std::string& host, int port,
                                             std::chrono::milliseconds timeout);

std::string ToString(const std::vector<uint8_t>& bytes);
std::vector<uint8_t> ToBytes(const std::string& text);

}  // namespace placer::cluster
