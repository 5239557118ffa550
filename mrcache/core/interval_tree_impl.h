// interval_tree_impl.h: the template body of IntervalTree<V>; include
// interval_tree.h, not this file.
//
// Invariants of every node n (checked by CheckInvariants):
//  - order: every key in n->left is less than n's key, every key in n->right
//    greater, where a key is (start, value) compared by start, then by
//    std::less<V> on the value;
//  - balance: n->height == 1 + max(child heights) (an absent child is the
//    sentinel nil_, of height 0 and max_end 0)
//    and the two child heights differ by at most one;
//  - augmentation: n->max_end is the largest `end` in n's subtree.
// The in-order walk therefore yields intervals by increasing start, and any
// subtree whose max_end <= a query's start holds nothing overlapping it.
// The height is at most about 1.44 * log2(n + 2), below kMaxHeight for any
// number of nodes that fits in memory: insert and erase keep their path on
// the stack in an array of that size. The visitors recurse as deep.
#ifndef MRCACHE_INTERVAL_TREE_IMPL_H_
#define MRCACHE_INTERVAL_TREE_IMPL_H_

#include <algorithm>
#include <cassert>
#include <functional>  // std::less
#include <utility>

#include "mrcache/core/interval_tree.h"

namespace mrcache {

template <typename V>
typename IntervalTree<V>::Node IntervalTree<V>::MakeNil() {
  Node nil(0, 0, V());
  nil.height = 0;
  return nil;
}

template <typename V>
bool IntervalTree<V>::KeyLess(uintptr_t a_start, const V& a_value, uintptr_t b_start,
                              const V& b_value) {
  if (a_start != b_start) return a_start < b_start;
  return std::less<V>()(a_value, b_value);
}

template <typename V>
inline __attribute__((always_inline)) void IntervalTree<V>::Update(Node* n) {
  n->height = 1 + std::max(n->left->height, n->right->height);
  n->max_end = std::max({n->end, n->left->max_end, n->right->max_end});
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::RotateLeft(Node* n) {
  Node* r = n->right;
  n->right = r->left;
  r->left = n;
  Update(n);
  Update(r);
  return r;
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::RotateRight(Node* n) {
  Node* l = n->left;
  n->left = l->right;
  l->right = n;
  Update(n);
  Update(l);
  return l;
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::Rebalance(Node* n) {
  // The children are up to date; a rotation updates n itself once relinked.
  const int balance = n->left->height - n->right->height;
  if (balance > 1) {
    if (n->left->left->height < n->left->right->height) {
      n->left = RotateLeft(n->left);
    }
    return RotateRight(n);
  }
  if (balance < -1) {
    if (n->right->right->height < n->right->left->height) {
      n->right = RotateRight(n->right);
    }
    return RotateLeft(n);
  }
  Update(n);
  return n;
}

template <typename V>
void IntervalTree<V>::Link(Node* node) {
  Node** path[kMaxHeight];  // the links followed from the root, in order
  int depth = 0;
  node->left = node->right = &nil_;
  Node** link = &root_;
  for (Node* n = *link; !IsNil(n); n = *link) {
    // max_end on the way down: the new interval is the only one added.
    if (node->end > n->max_end) n->max_end = node->end;
    path[depth++] = link;
    link = KeyLess(node->start, node->value, n->start, n->value) ? &n->left : &n->right;
  }
  *link = node;
  // Heights from the new leaf's parent up, until a subtree's height did not
  // change (nothing above it changes either). A rotation restores the height
  // the subtree had before the insert, so it ends the walk too.
  while (depth > 0) {
    Node** at = path[--depth];
    Node* n = *at;
    const int left = n->left->height;
    const int right = n->right->height;
    if (left - right > 1 || right - left > 1) {
      *at = Rebalance(n);
      return;
    }
    const int height = 1 + (left > right ? left : right);
    if (height == n->height) return;
    n->height = height;
  }
}

template <typename V>
void IntervalTree<V>::Insert(uintptr_t start, uintptr_t end, V value) {
  assert(start < end && "IntervalTree::Insert requires start < end");
  Link(new Node(start, end, std::move(value)));
  ++size_;
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::AllocateNode() {
  return new Node(0, 1, V());
}

template <typename V>
void IntervalTree<V>::FreeNode(Node* node) {
  delete node;
}

template <typename V>
void IntervalTree<V>::InsertNode(Node* node, uintptr_t start, uintptr_t end, V value) {
  assert(start < end && "IntervalTree::InsertNode requires start < end");
  node->start = start;
  node->end = end;
  node->max_end = end;
  node->value = std::move(value);
  node->height = 1;
  Link(node);
  ++size_;
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::DetachNode(uintptr_t start, V value) {
  Node* erased = Unlink(start, value);
  if (erased != nullptr) --size_;
  return erased;
}

template <typename V>
typename IntervalTree<V>::Node* IntervalTree<V>::Unlink(uintptr_t start, const V& value) {
  Node** path[kMaxHeight];  // the links followed from the root, in order
  int depth = 0;
  Node** link = &root_;
  Node* target;
  for (;;) {
    target = *link;
    if (IsNil(target)) return nullptr;
    bool left;
    if (start != target->start) {
      left = start < target->start;
    } else if (std::less<V>()(value, target->value)) {
      left = true;
    } else if (std::less<V>()(target->value, value)) {
      left = false;
    } else {
      break;  // the key itself
    }
    path[depth++] = link;
    link = left ? &target->left : &target->right;
  }
  // The walk below may stop early only at or above this level.
  int settled_from = kMaxHeight;
  if (IsNil(target->left) || IsNil(target->right)) {
    *link = IsNil(target->left) ? target->right : target->left;
  } else {
    // Two children: the successor (leftmost of the right subtree) takes the
    // target's place, so no value is copied. It starts with the target's
    // height and max_end: those of the subtree before the erase, which the
    // walk below compares against. Its max_end may still count the target's
    // own end, so the walk goes up to it at least.
    const int at_target = depth;
    settled_from = at_target;
    path[depth++] = link;
    Node** successor_link = &target->right;
    Node* successor = *successor_link;
    while (!IsNil(successor->left)) {
      path[depth++] = successor_link;
      successor_link = &successor->left;
      successor = *successor_link;
    }
    *successor_link = successor->right;
    successor->left = target->left;
    successor->right = target->right;
    successor->height = target->height;
    successor->max_end = target->max_end;
    *link = successor;
    // The walk passed through the target's right link, now the successor's.
    if (depth > at_target + 1) path[at_target + 1] = &successor->right;
  }
  // Heights, max_end and balance from the lowest changed subtree up, until
  // one ends with the height and max_end it had (nothing above it changes).
  while (depth > 0) {
    Node** at = path[--depth];
    Node* n = *at;
    const int height = n->height;
    const uintptr_t max_end = n->max_end;
    Node* top = Rebalance(n);
    *at = top;
    if (depth <= settled_from && top->height == height && top->max_end == max_end) break;
  }
  return target;
}

template <typename V>
bool IntervalTree<V>::Erase(uintptr_t start, V value) {
  Node* erased = DetachNode(start, std::move(value));
  if (erased == nullptr) return false;
  FreeNode(erased);
  return true;
}

template <typename V>
template <typename Fn>
void IntervalTree<V>::VisitOverlap(const Node* n, uintptr_t start, uintptr_t end, Fn& fn) {
  // Nothing in this subtree ends after the query starts (nor in the
  // sentinel's: its max_end is 0).
  if (n->max_end <= start) return;
  VisitOverlap(n->left, start, end, fn);
  // n and its whole right subtree start at or after the query's end.
  if (n->start >= end) return;
  if (n->end > start) fn(n->start, n->end, n->value);
  VisitOverlap(n->right, start, end, fn);
}

template <typename V>
template <typename Fn>
void IntervalTree<V>::ForEachOverlap(uintptr_t start, uintptr_t end, Fn&& fn) const {
  if (start >= end) return;  // An empty query overlaps nothing.
  VisitOverlap(root_, start, end, fn);
}

template <typename V>
template <typename Fn>
bool IntervalTree<V>::VisitCovering(const Node* n, uintptr_t start, uintptr_t end, Fn& fn) {
  // Nothing in this subtree ends late enough to contain the range (nor in
  // the sentinel's: its max_end is 0, and end is at least 1).
  if (n->max_end < end) return false;
  if (VisitCovering(n->left, start, end, fn)) return true;
  // n and its whole right subtree start after the range does.
  if (n->start > start) return false;
  if (n->end >= end && fn(n->start, n->end, n->value)) return true;
  return VisitCovering(n->right, start, end, fn);
}

template <typename V>
template <typename Fn>
bool IntervalTree<V>::FindCovering(uintptr_t start, uintptr_t end, Fn&& fn) const {
  assert(start < end && "IntervalTree::FindCovering requires start < end");
  return VisitCovering(root_, start, end, fn);
}

template <typename V>
bool IntervalTree<V>::FindLastStartingAtOrBefore(uintptr_t at, uintptr_t* start, uintptr_t* end,
                                                 V* value) const {
  const Node* best = nullptr;
  for (const Node* n = root_; !IsNil(n);) {
    if (n->start <= at) {
      best = n;  // a later one, if any, is on the right
      n = n->right;
    } else {
      n = n->left;
    }
  }
  if (best == nullptr) return false;
  *start = best->start;
  *end = best->end;
  *value = best->value;
  return true;
}

template <typename V>
template <typename Fn>
void IntervalTree<V>::VisitAll(const Node* n, Fn& fn) {
  if (IsNil(n)) return;
  VisitAll(n->left, fn);
  fn(n->start, n->end, n->value);
  VisitAll(n->right, fn);
}

template <typename V>
template <typename Fn>
void IntervalTree<V>::ForEach(Fn&& fn) const {
  VisitAll(root_, fn);
}

template <typename V>
void IntervalTree<V>::Destroy(Node* n) {
  if (IsNil(n)) return;
  Destroy(n->left);
  Destroy(n->right);
  delete n;
}

template <typename V>
void IntervalTree<V>::Clear() {
  Destroy(root_);
  root_ = &nil_;
  size_ = 0;
}

template <typename V>
bool IntervalTree<V>::CheckSubtree(const Node* n, const Node* lo, const Node* hi, int* height,
                                   size_t* count) const {
  if (n == &nil_) {
    *height = 0;
    *count = 0;
    return true;
  }
  if (n == nullptr || !(n->start < n->end)) return false;
  if (lo != nullptr && !KeyLess(lo->start, lo->value, n->start, n->value)) {
    return false;
  }
  if (hi != nullptr && !KeyLess(n->start, n->value, hi->start, hi->value)) {
    return false;
  }
  int left_height = 0;
  int right_height = 0;
  size_t left_count = 0;
  size_t right_count = 0;
  if (!CheckSubtree(n->left, lo, n, &left_height, &left_count) ||
      !CheckSubtree(n->right, n, hi, &right_height, &right_count)) {
    return false;
  }
  if (n->height != 1 + std::max(left_height, right_height)) return false;
  if (left_height - right_height > 1 || right_height - left_height > 1) {
    return false;
  }
  if (n->max_end != std::max({n->end, n->left->max_end, n->right->max_end})) {
    return false;
  }
  *height = n->height;
  *count = 1 + left_count + right_count;
  return true;
}

template <typename V>
bool IntervalTree<V>::CheckInvariants() const {
  int height = 0;
  size_t count = 0;
  // The sentinel is never written.
  if (nil_.height != 0 || nil_.max_end != 0) return false;
  return CheckSubtree(root_, nullptr, nullptr, &height, &count) && count == size_;
}

}  // namespace mrcache

#endif  // MRCACHE_INTERVAL_TREE_IMPL_H_
