// Finds an op or tensor of a graph by name without a second copy of its name.
//
// A std::unordered_map<std::string, int32_t> keeps every name twice (once in the item, once as
// the key) in a node of its own: about 100 bytes per item beside the item. The training steps of a
// 52k-op model at 1-8 replicas hold two million named items, and those maps were 18% of the
// set-up's peak memory (bench/RESULTS.md, "Memory of the steps"). This table keeps, per slot, an
// item's id and its name's hash; the names stay in the owner's vector, which every call is handed,
// so copying or moving the owner needs no fix-up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace placer::graph {

class NameIndex {
 public:
  // The item named `name` among `items` (anything whose elements have a `name`), if any.
  template <class Items>
  std::optional<int32_t> Find(std::string_view name, const Items& items) const {
    if (slots_.empty()) return std::nullopt;
    const uint32_t hash = Hash(name);
    for (size_t i = hash & mask(); slots_[i].id != kEmpty; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.hash == hash && items[static_cast<size_t>(slot.id)].name == name) return slot.id;
    }
    return std::nullopt;
  }

  // Indexes items[id] by its name, which no indexed item has (Find first).
  template <class Items>
  void Insert(int32_t id, const Items& items) {
    if (2 * (size_ + 1) > slots_.size()) Grow();
    Place({id, Hash(items[static_cast<size_t>(id)].name)});
    ++size_;
  }

 private:
  static constexpr int32_t kEmpty = -1;
  struct Slot {
    int32_t id = kEmpty;
    uint32_t hash = 0;
  };
  static uint32_t Hash(std::string_view name) {
    return static_cast<uint32_t>(std::hash<std::string_view>{}(name));
  }
  size_t mask() const { return slots_.size() - 1; }
  void Place(Slot slot) {
    size_t i = slot.hash & mask();
    while (slots_[i].id != kEmpty) i = (i + 1) & mask();
    slots_[i] = slot;
  }
  // Doubles the slots (at most half are used, so probes stay short), re-placing each by its hash.
  void Grow() {
    std::vector<Slot> old(std::max<size_t>(16, 2 * slots_.size()));
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.id != kEmpty) Place(slot);
    }
  }

  std::vector<Slot> slots_;  // a power of two of them, or none
  size_t size_ = 0;
};

}  // namespace placer::graph
