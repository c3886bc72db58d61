#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/catalog.h"
#include "fs/status_snapshot.h"

namespace aprfs {

// The mount's tree as inodes: the root, one folder per org, one file per built model, and the
// hidden control folder `.aprfs/` (status.json, metrics). Knows nothing of FUSE, so it can be
// tested directly.
class Namespace {
 public:
  static constexpr uint64_t kRootInode = 1;
  // The control folder: never listed, always found by name.
  static constexpr const char* kControlDirName = ".aprfs";
  static constexpr uint64_t kControlDirInode = (uint64_t{1} << 61);
  static constexpr uint64_t kStatusJsonInode = kControlDirInode + 1;
  static constexpr uint64_t kMetricsInode = kControlDirInode + 2;

  explicit Namespace(Catalog& catalog);

  struct Attr {
    uint64_t inode = 0;
    bool is_dir = false;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    // A file of the control folder: its content is made anew at each open, so it must be
    // neither cached by the kernel nor limited by a size reported earlier.
    bool is_control = false;
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
  // A file the kernel looked up: its model (which keeps everything alive) and which of its
  // views it is.
  struct OpenedFile {
    std::shared_ptr<const BuiltModel> model;
    ViewKind view = ViewKind::kApr;
    std::shared_ptr<VirtualFile> file;
  };
  std::optional<OpenedFile> OpenView(uint64_t inode);
  // Just the file (null when the inode is unknown).
  std::shared_ptr<VirtualFile> Open(uint64_t inode);
  // A snapshot of a control file's content, or nullopt when the inode is not one.
  std::optional<std::string> ControlContent(uint64_t inode);
  // The extended attributes of an inode (a model's user.aprfs.*, none for folders), or
  // nullopt when the inode is unknown.
  std::optional<std::vector<std::pair<std::string, std::string>>> Xattrs(uint64_t inode);
  // Where the mount is, for status.json (the rest of the daemon's identity is known here).
  void SetMountpoint(const std::string& mountpoint);

 private:
  struct FileNode {
    std::shared_ptr<const BuiltModel> model;
    ViewKind view = ViewKind::kApr;
    std::shared_ptr<VirtualFile> file;
    uint64_t lookups = 0;
  };
  // Folders get inodes from a range models never reach.
  static constexpr uint64_t kFirstDirInode = uint64_t{1} << 62;

  Attr DirAttr(uint64_t inode) const;
  // Attributes of a control-folder inode, or nullopt; a file's size is that of a fresh snapshot.
  std::optional<Attr> ControlAttr(uint64_t inode);
  std::optional<std::string> RenderControl(uint64_t inode);  // a fresh snapshot
  MountStatus Status();
  static Attr FileAttr(const BuiltModel& model, ViewKind view, const VirtualFile& file);
  // The file `name` names in a folder of the listing (a model's .apr or one of its views).
  std::optional<OpenedFile> Resolve(const std::map<std::string, std::string>& files,
                                    const std::string& name);
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
  std::string mountpoint_;  // guarded by mu_
  // The snapshot a lookup or getattr sized, handed to the open that follows it (lookup, open,
  // read is how every reader starts), so st_size matches what that reader gets. Guarded by mu_.
  struct SizedSnapshot {
    std::string content;
    std::chrono::steady_clock::time_point made;
  };
  std::unordered_map<uint64_t, SizedSnapshot> sized_snapshots_;
};

}  // namespace aprfs
