#include "runtime/cluster/store.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace placer::cluster {
namespace {

bool IsWildcard(const std::string& address) {
  return address == "0.0.0.0" || address == "::" || address == "*";
}

// A socket listening at address:port, or ClusterError naming why not.
int Listen(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int status =
      getaddrinfo(IsWildcard(address) ? nullptr : address.c_str(), service.c_str(), &hints, &found);
  if (status != 0) {
    throw ClusterError(
        fmt::format("cluster: cannot listen at {}:{}: {}", address, port, gai_strerror(status)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    throw ClusterError(fmt::format("cluster: cannot listen at {}:{}: {}", address, port, why));
  }
  return fd;
}

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> HostStore(const std::string& listen_address, int port,
                                             std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;  // the pool waits for its workers itself, naming who is missing
  options.timeout = timeout;
  options.masterListenFd = Listen(listen_address, port);  // the store closes it
  try {
    // The host is where the store's own client connects: the listening address, or this machine
    // when the store listens everywhere.
    return c10::make_intrusive<c10d::TCPStore>(
        IsWildcard(listen_address) ? "127.0.0.1" : listen_address, options);
  } catch (const std::exception& error) {
    throw ClusterError(fmt::format("cluster: cannot host the store at {}:{}: {}", listen_address,
                                   port, error.what()));
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
