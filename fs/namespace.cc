#include "fs/namespace.h"

#include <chrono>

namespace aprfs {

Namespace::Namespace(Catalog& catalog)
    : catalog_(catalog),
      mount_time_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count()) {}

Namespace::Attr Namespace::DirAttr(uint64_t inode) const {
  return {inode, true, 0, mount_time_ns_};
}

Namespace::Attr Namespace::FileAttr(const BuiltModel& model) {
  return {model.file_id, false, model.file->size(), model.mtime_ns};
}

uint64_t Namespace::OrgInode(const std::string& org) {
  auto [it, inserted] = org_inodes_.emplace(org, kFirstDirInode + org_inodes_.size());
  if (inserted) org_names_[it->second] = org;
  return it->second;
}

std::shared_ptr<const BuiltModel> Namespace::Valid(const std::string& key) {
  std::shared_ptr<const BuiltModel> model = catalog_.Get(key);
  return model && model->file ? model : nullptr;
}

bool Namespace::AnyValid(const std::map<std::string, std::string>& files) {
  for (const auto& [name, key] : files) {
    if (Valid(key)) return true;
  }
  return false;
}

std::optional<Namespace::Attr> Namespace::Lookup(uint64_t parent, const std::string& name) {
  std::shared_ptr<const Catalog::Listing> listing = catalog_.Scan();
  const std::map<std::string, std::string>* files = nullptr;
  if (parent == kRootInode) {
    auto org = listing->org_files.find(name);
    if (org != listing->org_files.end()) {
      if (!AnyValid(org->second)) return std::nullopt;
      std::lock_guard lock(mu_);
      return DirAttr(OrgInode(name));
    }
    files = &listing->top_files;
  } else {
    std::lock_guard lock(mu_);
    auto org_name = org_names_.find(parent);
    if (org_name == org_names_.end()) return std::nullopt;
    auto org = listing->org_files.find(org_name->second);
    if (org == listing->org_files.end()) return std::nullopt;
    files = &org->second;
  }
  auto file = files->find(name);
  if (file == files->end()) return std::nullopt;
  std::shared_ptr<const BuiltModel> model = Valid(file->second);
  if (!model) return std::nullopt;
  std::lock_guard lock(mu_);
  FileNode& node = files_[model->file_id];
  node.model = model;
  ++node.lookups;
  return FileAttr(*model);
}

std::optional<Namespace::Attr> Namespace::GetAttr(uint64_t inode) {
  std::lock_guard lock(mu_);
  if (inode == kRootInode || org_names_.count(inode)) return DirAttr(inode);
  auto it = files_.find(inode);
  if (it == files_.end()) return std::nullopt;
  return FileAttr(*it->second.model);
}

void Namespace::Forget(uint64_t inode, uint64_t count) {
  std::lock_guard lock(mu_);
  auto it = files_.find(inode);
  if (it == files_.end()) return;
  it->second.lookups -= std::min(count, it->second.lookups);
  if (it->second.lookups == 0) files_.erase(it);  // open handles keep their own reference
}

std::optional<std::vector<Namespace::Entry>> Namespace::List(uint64_t inode) {
  std::shared_ptr<const Catalog::Listing> listing = catalog_.Scan();
  std::vector<Entry> entries;
  const std::map<std::string, std::string>* files = nullptr;
  if (inode == kRootInode) {
    for (const auto& [org, org_files] : listing->org_files) {
      if (!AnyValid(org_files)) continue;
      std::lock_guard lock(mu_);
      entries.push_back({org, DirAttr(OrgInode(org))});
    }
    files = &listing->top_files;
  } else {
    std::lock_guard lock(mu_);
    auto org_name = org_names_.find(inode);
    if (org_name == org_names_.end()) return std::nullopt;
    auto org = listing->org_files.find(org_name->second);
    if (org == listing->org_files.end()) return entries;
    files = &org->second;
  }
  for (const auto& [name, key] : *files) {
    if (auto model = Valid(key)) entries.push_back({name, FileAttr(*model)});
  }
  return entries;
}

std::shared_ptr<VirtualFile> Namespace::Open(uint64_t inode) {
  std::lock_guard lock(mu_);
  auto it = files_.find(inode);
  if (it == files_.end()) return nullptr;
  return it->second.model->file;
}

}  // namespace aprfs
