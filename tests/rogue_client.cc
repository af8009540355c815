// A process on the network that is not a worker, for cluster_test: it joins the search's c10d
// store at host:port (c10d lets anyone who reaches the port in) and, while the search runs, tries
// every way to steer it that does not need the key:
//   forged   verdicts of 1 microsecond for task ids 1..400, sealed under a key of its own;
//   garbage  random bytes into the verdicts' queue and every worker's inbox;
//   replayed every verdict and task it catches in a queue, put back twice;
//   moved    every task it catches in rank 1's inbox, copied into rank 2's.
// With --insider KEYFILE it also holds the key, as a compromised rank 2 would, and seals
// verdicts as rank 2 for tasks handed to rank 1 (wrong rank). It reads the config (nothing is
// encrypted), and ends when the store goes away or after --seconds, printing what it pushed.
//
//   rogue_client HOST PORT [--seconds S] [--insider KEYFILE]
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proto/evaluation_wire.h"
#include "proto/message_auth.h"
#include "runtime/cluster/store.h"

namespace {

using placer::cluster::ToBytes;
using placer::cluster::ToString;
namespace keys = placer::cluster::keys;
namespace proto = placer::proto;

struct Pushed {
  int forged = 0, garbage = 0, replayed = 0, moved = 0, wrong_rank = 0;
  int replayed_tasks = 0;  // of `replayed`, caught in rank 1's inbox (its own garbage too)
};

std::vector<uint8_t> Verdict(int64_t id, int rank) {
  proto::TaggedResult verdict{id, rank, {}};
  verdict.result.valid = true;
  verdict.result.step_seconds = 1e-6;
  return proto::EncodeResult(verdict);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: rogue_client HOST PORT [--seconds S] [--insider KEYFILE]\n";
    return 2;
  }
  const std::string host = argv[1];
  const int port = std::atoi(argv[2]);
  double seconds = 120;
  std::string insider_key_file;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    if (flag == "--insider") insider_key_file = argv[i + 1];
  }
  Pushed pushed;
  std::mt19937 random(7);
  auto noise = [&random](size_t size) {
    std::vector<uint8_t> bytes(size);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
    return bytes;
  };
  try {
    auto store = placer::cluster::JoinStore(host, port, std::chrono::seconds(60));
    const std::string session = ToString(store->get(keys::kSession));
    // The config is readable (sealed, not encrypted); what it cannot do is change it.
    const size_t config_bytes = store->get(keys::kConfigText).size();
    std::cout << fmt::format("rogue: read the config ({} bytes)\n", config_bytes) << std::flush;
    const proto::MessageSealer own(proto::ClusterKey::Generate(), session);
    std::optional<proto::MessageSealer> insider;  // the search wrote its key before it listened
    if (!insider_key_file.empty()) {
      insider.emplace(proto::ClusterKey::ReadFile(insider_key_file), session);
    }
    // Blind attacks first, before the search hands out its first task.
    for (int64_t id = 1; id <= 400; ++id) {
      store->queuePush(keys::kResults, own.Seal(keys::kResults, 1, Verdict(id, 1)));
      ++pushed.forged;
      if (insider) {  // as rank 2, about a task of rank 1's (and saying so inside)
        store->queuePush(keys::kResults, insider->Seal(keys::kResults, 2, Verdict(id, 1)));
        ++pushed.wrong_rank;
      }
    }
    for (int k = 0; k < 20; ++k) {
      store->queuePush(keys::kResults, noise(1 + random() % 300));
      store->queuePush(keys::Inbox(1), noise(1 + random() % 300));
      store->queuePush(keys::Inbox(2), noise(1 + random() % 300));
      pushed.garbage += 3;
    }
    // Then whatever goes by, caught by a blocking pop beside the queue's reader (c10d lets two
    // clients wait on one queue; whoever pops first has the message). Each message caught is put
    // back, so nothing is lost, only late, and the first time it is caught once more as a replay
    // (replaying what it replayed would only flood the queue).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    auto intercept = [&](c10::intrusive_ptr<c10d::Store> client, std::string queue, int* replayed,
                         int* moved) {
      std::set<std::vector<uint8_t>> caught;
      client->setTimeout(std::chrono::seconds(1));
      while (std::chrono::steady_clock::now() < deadline) {
        std::vector<uint8_t> message;
        try {
          message = client->queuePop(queue, /*block=*/true);
        } catch (const c10::DistNetworkError&) {
          return;  // the search is gone
        } catch (const c10::DistStoreError&) {
          continue;  // nothing within a second, or its reader popped first
        }
        client->queuePush(queue, message);
        if (message.empty()) continue;  // the search's own wake-up tick
        if (!caught.insert(message).second) continue;
        client->queuePush(queue, message);
        ++*replayed;
        if (moved != nullptr) {
          client->queuePush(keys::Inbox(2), message);
          ++*moved;
        }
      }
    };
    // Until the search's store goes away with the search (a push then fails) or the deadline.
    auto until_gone = [&](std::string queue, int* replayed, int* moved) {
      try {
        intercept(store->clone(), std::move(queue), replayed, moved);
      } catch (const std::exception&) {
      }
    };
    int replayed_tasks = 0;
    std::thread tasks(until_gone, keys::Inbox(1), &replayed_tasks, &pushed.moved);
    until_gone(keys::kResults, &pushed.replayed, nullptr);
    tasks.join();
    pushed.replayed += replayed_tasks;
    pushed.replayed_tasks = replayed_tasks;
    std::cout << "rogue: the search is gone\n";
  } catch (const std::exception& error) {
    // The search ended and its store with it: the normal way out.
    std::cout << fmt::format("rogue: store gone ({})\n", error.what());
  }
  std::cout << fmt::format(
                   "rogue: pushed forged {} garbage {} replayed {} moved {} wrong-rank {} "
                   "(from rank 1's inbox {})\n",
                   pushed.forged, pushed.garbage, pushed.replayed, pushed.moved, pushed.wrong_rank,
                   pushed.replayed_tasks)
            << std::flush;
  return 0;
}
