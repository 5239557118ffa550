// interval_tree.h: an augmented interval tree over half-open ranges [start, end).
//
// The cache's index. Each node stores an interval and a value; every node also
// keeps the maximum `end` of its subtree, so that all intervals overlapping a
// query range are found in O(log n + k). The tree is balanced (AVL), so every
// operation is O(log n) in the worst case. Several nodes may share a start.
//
// Not thread-safe: the cache guards it with its lock. Insert allocates a node;
// the cache never calls it from a memory hook.
#ifndef MRCACHE_INTERVAL_TREE_H_
#define MRCACHE_INTERVAL_TREE_H_

#include <cstddef>
#include <cstdint>
#include <utility>

namespace mrcache {

template <typename V>
class IntervalTree {
 public:
  IntervalTree() = default;
  ~IntervalTree() { Clear(); }
  IntervalTree(const IntervalTree&) = delete;
  IntervalTree& operator=(const IntervalTree&) = delete;

  // Inserts [start, end) -> value. Requires start < end. The pair
  // (start, value) must be unique: Erase finds a node by it.
  void Insert(uintptr_t start, uintptr_t end, V value);
  // Removes the node with this start and value. Returns false if absent.
  bool Erase(uintptr_t start, V value);

  // Allocation-free variants, for callers that must not allocate or free
  // while holding a lock: AllocateNode() before locking, InsertNode() under
  // the lock; DetachNode() under the lock, FreeNode() after unlocking.
  // A Node's fields belong to the tree while it is linked.
  struct Node {
    Node(uintptr_t s, uintptr_t e, V v) : start(s), end(e), max_end(e), value(std::move(v)) {}
    uintptr_t start;
    uintptr_t end;
    uintptr_t max_end;
    V value;
    Node* left = nullptr;
    Node* right = nullptr;
    int height = 1;  // 0 only for the tree's sentinel (nil_)
  };
  static Node* AllocateNode();
  static void FreeNode(Node* node);
  // Takes ownership of `node` (from AllocateNode). Requires start < end.
  void InsertNode(Node* node, uintptr_t start, uintptr_t end, V value);
  // Unlinks the node with this start and value and hands it back (nullptr if
  // absent); the caller frees it with FreeNode.
  Node* DetachNode(uintptr_t start, V value);
  // Calls fn(start, end, value) for every interval overlapping [start, end),
  // in increasing order of start. fn must not modify the tree. (A template,
  // not a std::function: a visitor capturing more than two words would be
  // allocated on every call, under the cache lock, on the miss path.)
  template <typename Fn>
  void ForEachOverlap(uintptr_t start, uintptr_t end, Fn&& fn) const;
  // Calls fn(start, end, value) for the intervals that contain all of
  // [start, end) (requires start < end), in increasing order of start,
  // until fn returns true; true if it did. Reads only the nodes that start
  // at or before `start` in subtrees whose max_end reaches `end`. fn must
  // not modify the tree.
  template <typename Fn>
  bool FindCovering(uintptr_t start, uintptr_t end, Fn&& fn) const;
  // The interval with the greatest start <= `at` (the last in visit order
  // among several with that start): true, with *start, *end and *value set;
  // false if every interval starts after `at`. One root-to-leaf descent that
  // reads only the nodes on its path: where intervals do not overlap, the
  // only one that can contain `at`.
  bool FindLastStartingAtOrBefore(uintptr_t at, uintptr_t* start, uintptr_t* end, V* value) const;
  // Calls fn(start, end, value) for every interval, in increasing order of
  // start.
  template <typename Fn>
  void ForEach(Fn&& fn) const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void Clear();
  // Checks every invariant (BST order, AVL balance, max-end augmentation);
  // for tests.
  bool CheckInvariants() const;

 private:
  // The sentinel that stands for every absent child (and an empty tree's
  // root): height 0, max_end 0, never written. Reading its fields instead of
  // testing for null keeps the balancing arithmetic free of branches, and
  // makes every subtree test on max_end reject it (a real node's end is at
  // least 1).
  static Node MakeNil();
  static bool IsNil(const Node* n) { return n->height == 0; }
  // Order of nodes: by start, then by value (std::less<V>).
  static bool KeyLess(uintptr_t a_start, const V& a_value, uintptr_t b_start, const V& b_value);
  // Recomputes n's height and max_end from its own interval and children.
  static void Update(Node* n);
  static Node* RotateLeft(Node* n);
  static Node* RotateRight(Node* n);
  // Restores AVL balance at n, whose children are up to date, and updates
  // n's height and max_end; returns the subtree's new root.
  static Node* Rebalance(Node* n);
  // An AVL tree of n nodes is less than 1.45 * log2(n + 2) high: 96 levels
  // hold more nodes than any address space.
  static constexpr int kMaxHeight = 96;
  // Links `node` (its interval, value and height 1 set) as a leaf and
  // rebalances.
  void Link(Node* node);
  // Unlinks the node keyed (start, value) and rebalances; returns it, or
  // null if absent.
  Node* Unlink(uintptr_t start, const V& value);
  template <typename Fn>
  static void VisitOverlap(const Node* n, uintptr_t start, uintptr_t end, Fn& fn);
  template <typename Fn>
  static bool VisitCovering(const Node* n, uintptr_t start, uintptr_t end, Fn& fn);
  template <typename Fn>
  static void VisitAll(const Node* n, Fn& fn);
  static void Destroy(Node* n);
  // Checks the subtree at n, whose keys must lie within (lo, hi) (null: no
  // bound); on success stores its height and node count.
  bool CheckSubtree(const Node* n, const Node* lo, const Node* hi, int* height,
                    size_t* count) const;

  // Every absent child and an empty root point at nil_: the tree cannot be
  // moved (nor copied).
  Node nil_ = MakeNil();
  Node* root_ = &nil_;
  size_t size_ = 0;
};

}  // namespace mrcache

#include "mrcache/core/interval_tree_impl.h"  // IWYU pragma: export

#endif  // MRCACHE_INTERVAL_TREE_H_
