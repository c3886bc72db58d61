#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/catalog.h"

namespace aprfs {

// The mount's tree as inodes: the root, one folder per org, one file per built model. Knows
// nothing of FUSE, so it can be tested directly.
class Namespace {
 public:
  static constexpr uint64_t kRootInode = 1;

  explicit Namespace(Catalog& catalog);

  struct Attr {
    uint64_t inode = 0;
    bool is_dir = false;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  struct Entry {
    std::string name;
    Attr attr;
  };

  // A name in a folder; a found file's lookup count goes up (the kernel will Forget it).
  std::optional<Attr> Lookup(uint64_t parent, const std::string& name);
  std::optional<Attr> GetAttr(uint64_t inode);
  void Forget(uint64_t inode, uint64_t count);
  // The entries of a folder (valid models only), or nullopt when it is not a folder.
  std::optional<std::vector<Entry>> List(uint64_t inode);
  // The file behind an inode the kernel looked up.
  std::shared_ptr<VirtualFile> Open(uint64_t inode);

 private:
  struct FileNode {
    std::shared_ptr<const BuiltModel> model;
    uint64_t lookups = 0;
  };
  // Folders get inodes from a range models never reach.
  static constexpr uint64_t kFirstDirInode = uint64_t{1} << 62;

  Attr DirAttr(uint64_t inode) const;
  static Attr FileAttr(const BuiltModel& model);
  uint64_t OrgInode(const std::string& org);  // requires mu_
  // The valid model behind `key`, or null.
  std::shared_ptr<const BuiltModel> Valid(const std::string& key);
  // Whether a folder of the listing holds a model that would be shown.
  bool AnyValid(const std::map<std::string, std::string>& files);

  Catalog& catalog_;
  const int64_t mount_time_ns_;
  std::mutex mu_;
  std::unordered_map<uint64_t, FileNode> files_;
  std::unordered_map<std::string, uint64_t> org_inodes_;
  std::unordered_map<uint64_t, std::string> org_names_;
};

}  // namespace aprfs
