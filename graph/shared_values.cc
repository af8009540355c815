#include "graph/shared_values.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace placer::graph {
namespace {

// Bit for bit: -0.0 and 0.0 are equal floats but not the same values, NaN never equal.
std::string_view BytesOf(const std::vector<float>& values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

// Weak references: the values live as long as a graph holds them, not as long as the process.
class Interned {
 public:
  std::shared_ptr<const std::vector<float>> Share(std::vector<float> values) {
    const size_t hash = std::hash<std::string_view>{}(BytesOf(values));
    std::lock_guard<std::mutex> lock(mutex_);
    auto [begin, end] = table_.equal_range(hash);
    for (auto it = begin; it != end; ++it) {
      std::shared_ptr<const std::vector<float>> held = it->second.lock();
      if (held && BytesOf(*held) == BytesOf(values)) return held;
    }
    auto shared = std::make_shared<const std::vector<float>>(std::move(values));
    table_.emplace(hash, shared);
    if (table_.size() >= 2 * swept_size_) Sweep();
    return shared;
  }

 private:
  void Sweep() {
    std::erase_if(table_, [](const auto& entry) { return entry.second.expired(); });
    swept_size_ = std::max<size_t>(table_.size(), 1024);
  }

  std::mutex mutex_;
  std::unordered_multimap<size_t, std::weak_ptr<const std::vector<float>>> table_;
  size_t swept_size_ = 1024;
};

}  // namespace

std::shared_ptr<const std::vector<float>> SharedValues(std::vector<float> values) {
  static Interned* interned = new Interned;  // never destroyed: graphs may outlive statics
  return interned->Share(std::move(values));
}

}  // namespace placer::graph
