#include "runtime/cluster/store.h"

#include <fmt/format.h>

namespace placer::cluster {

c10::intrusive_ptr<c10d::TCPStore> HostStore(int port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;  // the pool waits for its workers itself, naming who is missing
  options.timeout = timeout;
  try {
    // The host is where the store's own client connects: this machine.
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  } catch (const std::exception& error) {
    throw ClusterError(fmt::format("cluster: cannot listen on port {}: {}", port, error.what()));
  }
}

c10::intrusive_ptr<c10d::TCPStore> JoinStore(const std::string& host, int port,
                                             std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& error) {
    throw ClusterError(
        fmt::format("cluster: cannot reach the search's store at {}:{} within {:.0f} s: {}", host,
                    port, std::chrono::duration<double>(timeout).count(), error.what()));
  }
}

std::string ToString(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<uint8_t> ToBytes(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace placer::cluster
