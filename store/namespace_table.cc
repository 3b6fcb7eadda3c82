#include "store/namespace_table.h"

#include <algorithm>

namespace gpucache {

std::optional<uint32_t> NamespaceTable::Find(std::string_view tenant, std::string_view ns) const {
  auto it = ids_.find(std::pair<std::string_view, std::string_view>(tenant, ns));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

uint32_t NamespaceTable::Add(const std::string& tenant, const std::string& ns, Owner owner) {
  if (std::optional<uint32_t> id = Find(tenant, ns)) return *id;
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<uint32_t>(namespaces_.size());
    namespaces_.emplace_back();
  }
  namespaces_[id] = Namespace{tenant, ns, owner};
  ids_.emplace(std::pair(tenant, ns), id);
  return id;
}

void NamespaceTable::Remove(uint32_t ns) {
  Namespace& n = namespaces_[ns];
  auto it = ids_.find(std::pair<std::string_view, std::string_view>(n.tenant, n.name));
  if (it != ids_.end()) ids_.erase(it);
  n = Namespace{};
  free_.push_back(ns);
}

void NamespaceTable::Touch(uint32_t ns, uint64_t time_ns) {
  namespaces_[ns].changed_ns = std::max(namespaces_[ns].changed_ns, time_ns);
}

std::vector<std::string> NamespaceTable::NamesOf(std::string_view tenant) const {
  std::vector<std::string> out;
  for (auto it = ids_.lower_bound(std::pair<std::string_view, std::string_view>(tenant, ""));
       it != ids_.end() && it->first.first == tenant; ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

void NamespaceTable::BlockAdded(uint32_t ns, uint32_t block_capacity, uint64_t commit_time_ns) {
  Namespace& n = namespaces_[ns];
  if (n.blocks == 0) n.block_capacity = block_capacity;
  n.blocks++;
  Touch(ns, commit_time_ns);
}

}  // namespace gpucache
