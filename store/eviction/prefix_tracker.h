// Parent/child bookkeeping for prefix-tinylfu: which resident blocks are leaves.
#pragma once

#include <optional>
#include <unordered_map>

#include "store/eviction/eviction_policy.h"

namespace gpucache {

class PrefixTracker {
 public:
  // Returns the parent that stopped being a leaf, if any.
  std::optional<PolicyKey> Insert(PolicyKey key, std::optional<PolicyKey> parent) {
    Node& n = nodes_[key];
    n.parent = parent;
    if (parent) {
      auto it = nodes_.find(*parent);
      if (it != nodes_.end() && it->second.children++ == 0) return parent;
    }
    return std::nullopt;
  }
  // Returns the parent that became a leaf, if any.
  std::optional<PolicyKey> Remove(PolicyKey key) {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return std::nullopt;
    std::optional<PolicyKey> parent = it->second.parent;
    if (it->second.children > 0) {
      // An ancestor leaves first: its children forget it, so that a block reusing its key
      // (a policy slot) is nobody's parent. Rare, so a scan.
      for (auto& [k, n] : nodes_) {
        if (n.parent == key) n.parent.reset();
      }
    }
    nodes_.erase(it);
    if (parent) {
      auto p = nodes_.find(*parent);
      if (p != nodes_.end() && p->second.children > 0 && --p->second.children == 0) return parent;
    }
    return std::nullopt;
  }
  bool IsLeaf(PolicyKey key) const {
    auto it = nodes_.find(key);
    return it == nodes_.end() || it->second.children == 0;
  }

 private:
  struct Node {
    std::optional<PolicyKey> parent;
    uint32_t children = 0;
  };
  std::unordered_map<PolicyKey, Node> nodes_;
};

}  // namespace gpucache
