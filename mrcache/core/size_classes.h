// size_classes.h: intrusive lists of items grouped by size class, oldest
// first in each class, so that a walk from the largest items down starts in
// O(1) and an item joins or leaves in O(1).
//
// A size class is a quarter of a power of two: the class of `bytes` is 4 x
// its leading bit's position plus the two bits below it, so sizes in one
// class differ by less than 25% and every larger class holds only larger
// sizes. The walk (ForEachFromLargest) visits the classes from the largest
// down and, in each, its items from the oldest (the first pushed) on.
//
// T is the item type, with members `T* size_prev`, `T* size_next` and
// `int16_t size_class` (-1 while the item is in no list), owned by the
// lists while the item is in one. Not thread-safe: the owner serialises
// calls (CacheImpl calls it under its lock). Allocates nothing.
#ifndef MRCACHE_CORE_SIZE_CLASSES_H_
#define MRCACHE_CORE_SIZE_CLASSES_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

template <typename T>
class SizeClassLists {
 public:
  static constexpr int kClasses = 256;

  // The class of an item of `bytes` (at least 1): 0 .. kClasses - 1.
  static int ClassOf(size_t bytes) {
    const int lead = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes | 1));
    const int below = lead >= 2 ? static_cast<int>((bytes >> (lead - 2)) & 3) : 0;
    return lead * 4 + below;
  }

  // Appends `item`, in no list, as the newest of the class of `bytes`.
  void PushNewest(T* item, size_t bytes) {
    const int c = ClassOf(bytes);
    item->size_class = static_cast<int16_t>(c);
    item->size_next = nullptr;
    item->size_prev = newest_[c];
    if (newest_[c] != nullptr) {
      newest_[c]->size_next = item;
    } else {
      oldest_[c] = item;
      nonempty_[c / 64] |= uint64_t{1} << (c % 64);
    }
    newest_[c] = item;
    ++size_;
  }

  // Takes `item` out of its list; nothing if it is in none.
  void Remove(T* item) {
    const int c = item->size_class;
    if (c < 0) return;
    if (item->size_prev != nullptr) {
      item->size_prev->size_next = item->size_next;
    } else {
      oldest_[c] = item->size_next;
    }
    if (item->size_next != nullptr) {
      item->size_next->size_prev = item->size_prev;
    } else {
      newest_[c] = item->size_prev;
    }
    if (oldest_[c] == nullptr) nonempty_[c / 64] &= ~(uint64_t{1} << (c % 64));
    item->size_prev = item->size_next = nullptr;
    item->size_class = -1;
    --size_;
  }

  static bool Contains(const T* item) { return item->size_class >= 0; }
  size_t size() const { return size_; }

  // Forgets every item without touching them (their owner frees them all).
  void Clear() { *this = SizeClassLists(); }

  // Calls visit(item) for the items of class `lowest` and above, from the
  // largest class down and from the oldest in each, until it returns true;
  // returns that item, or nullptr. `visit` may Remove the item it is given
  // (and no other).
  template <typename Visit>
  T* ForEachFromLargest(int lowest, Visit visit) const {
    if (lowest < 0) lowest = 0;
    for (int c = HighestNonEmpty(kClasses - 1); c >= lowest; c = HighestNonEmpty(c - 1)) {
      for (T* item = oldest_[c]; item != nullptr;) {
        T* next = item->size_next;
        if (visit(item)) return item;
        item = next;
      }
    }
    return nullptr;
  }

 private:
  // The highest non-empty class at or below `c`, or -1.
  int HighestNonEmpty(int c) const {
    for (; c >= 0; c = (c / 64) * 64 - 1) {
      const int shift = c % 64;
      const uint64_t below = shift == 63 ? ~uint64_t{0} : (uint64_t{1} << (shift + 1)) - 1;
      const uint64_t bits = nonempty_[c / 64] & below;
      if (bits != 0) return (c / 64) * 64 + 63 - __builtin_clzll(bits);
    }
    return -1;
  }

  T* oldest_[kClasses] = {};
  T* newest_[kClasses] = {};
  uint64_t nonempty_[kClasses / 64] = {};
  size_t size_ = 0;
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_SIZE_CLASSES_H_
