// Parent/child bookkeeping for prefix-tinylfu: which resident blocks are leaves.
#pragma once

#include <optional>
#include <unordered_map>
#include <utility>

#include "store/eviction/eviction_policy.h"

namespace gpucache {

class PrefixTracker {
 public:
  struct Node {
    std::optional<PolicyKey> parent;
    uint64_t serial = 0;         // which insert made it
    uint64_t parent_serial = 0;  // the parent's, when this one came
    uint32_t children = 0;
  };

  // Returns the parent that stopped being a leaf, if any.
  std::optional<PolicyKey> Insert(PolicyKey key, std::optional<PolicyKey> parent) {
    Node& n = nodes_[key];
    n = Node{};
    n.serial = ++serial_;
    if (parent) {
      auto it = nodes_.find(*parent);
      if (it == nodes_.end()) return std::nullopt;
      n.parent = parent;
      n.parent_serial = it->second.serial;
      if (it->second.children++ == 0) return parent;
    }
    return std::nullopt;
  }
  // `key`, without a parent, becomes `parent`'s child (both present); returns the parent if it
  // stopped being a leaf.
  std::optional<PolicyKey> Adopt(PolicyKey key, PolicyKey parent) {
    auto it = nodes_.find(key), p = nodes_.find(parent);
    if (it == nodes_.end() || p == nodes_.end() || HasParent(it->second)) return std::nullopt;
    // Not its own parent's parent: blocks with equal hashes (one-hash chains) are no loop.
    if (HasParent(p->second) && *p->second.parent == key) return std::nullopt;
    it->second.parent = parent;
    it->second.parent_serial = p->second.serial;
    return p->second.children++ == 0 ? std::optional(parent) : std::nullopt;
  }
  // Returns the parent that became a leaf, if any.
  std::optional<PolicyKey> Remove(PolicyKey key) {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return std::nullopt;
    std::optional<PolicyKey> parent = it->second.parent;
    uint64_t parent_serial = it->second.parent_serial;
    nodes_.erase(it);
    if (parent) {
      // Only the block that was the parent when this one came: an ancestor may have left
      // first and a block reusing its key (a policy slot) is not this one's parent.
      auto p = nodes_.find(*parent);
      if (p != nodes_.end() && p->second.serial == parent_serial && p->second.children > 0 &&
          --p->second.children == 0) {
        return parent;
      }
    }
    return std::nullopt;
  }
  // Remove, undoable: the block's node, for Restore, and the parent that became a leaf.
  std::pair<Node, std::optional<PolicyKey>> Take(PolicyKey key) {
    auto it = nodes_.find(key);
    Node n = it->second;
    return {n, Remove(key)};
  }
  // Undoes a Take (undone last-first); returns the parent that stopped being a leaf, if any.
  std::optional<PolicyKey> Restore(PolicyKey key, const Node& n) {
    nodes_[key] = n;
    if (!n.parent) return std::nullopt;
    auto p = nodes_.find(*n.parent);
    if (p == nodes_.end() || p->second.serial != n.parent_serial) return std::nullopt;
    return p->second.children++ == 0 ? n.parent : std::nullopt;
  }
  // A parent gone (and its key perhaps reused since) is no parent.
  bool HasParent(const Node& n) const {
    if (!n.parent) return false;
    auto p = nodes_.find(*n.parent);
    return p != nodes_.end() && p->second.serial == n.parent_serial;
  }
  bool IsLeaf(PolicyKey key) const {
    auto it = nodes_.find(key);
    return it == nodes_.end() || it->second.children == 0;
  }

 private:
  std::unordered_map<PolicyKey, Node> nodes_;
  uint64_t serial_ = 0;
};

}  // namespace gpucache
