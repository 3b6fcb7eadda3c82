// NamespaceClaims: the namespaces whose directories a create or a removal is making or removing
// now, outside the store's lock. Each decides under the lock (is it indexed? empty?), lets go
// of it for the medium's mkdir or rmdir, and takes it again to record the outcome; a create or
// removal of the same namespace in that gap waits for the claim. Without it a mkdir landing
// while an rmdir ran added the namespace back to the index and the rmdir then took its
// directory: indexed, listed, and every commit into it failing.
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/store_core.h), and Claim releases it while it waits.
#pragma once

#include <condition_variable>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace gpucache {

class NamespaceClaims {
 public:
  // Returns once no other create or removal holds (tenant, ns), and holds it; `lock` (held) is
  // let go meanwhile.
  template <class Lock>
  void Claim(std::string_view tenant, std::string_view ns, Lock& lock) {
    while (held_.contains(Key{tenant, ns})) released_.wait(lock);
    held_.emplace(std::string(tenant), std::string(ns));
  }
  // Ends a Claim, and wakes who waits for the namespace.
  void Release(std::string_view tenant, std::string_view ns) {
    if (auto it = held_.find(Key{tenant, ns}); it != held_.end()) held_.erase(it);
    released_.notify_all();
  }

 private:
  using Key = std::pair<std::string_view, std::string_view>;
  // Finds (tenant, ns) by string_views, without building a key.
  struct Less {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return Key{a.first, a.second} < Key{b.first, b.second};
    }
  };
  std::set<std::pair<std::string, std::string>, Less> held_;
  std::condition_variable_any released_;
};

}  // namespace gpucache
