#include "fs/namespace.h"

#include <unistd.h>

#include <chrono>

#include "fs/status_render.h"

namespace aprfs {

Namespace::Namespace(Catalog& catalog)
    : catalog_(catalog),
      mount_time_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count()) {}

Namespace::Attr Namespace::DirAttr(uint64_t inode) const {
  return {inode, true, 0, mount_time_ns_};
}

Namespace::Attr Namespace::FileAttr(const BuiltModel& model, ViewKind view, const VirtualFile& file) {
  return {model.file_id + ViewIndex(view), false, file.size(), model.mtime_ns};
}

std::optional<Namespace::OpenedFile> Namespace::Resolve(
    const std::map<std::string, std::string>& files, const std::string& name) {
  // A model's own name first: "x.q4k.apr" is the .apr of a model named "x.q4k" if there is one.
  auto plain = files.find(name);
  std::optional<std::pair<std::string, ViewKind>> split;
  if (plain == files.end()) {
    split = SplitViewFileName(name);
    if (!split || split->second == ViewKind::kApr) return std::nullopt;
    plain = files.find(ViewFileName(split->first, ViewKind::kApr));
    if (plain == files.end()) return std::nullopt;
  }
  std::shared_ptr<const BuiltModel> model = Valid(plain->second);
  if (!model) return std::nullopt;
  const ViewKind view = split ? split->second : ViewKind::kApr;
  std::shared_ptr<VirtualFile> file = model->views->Get(view);
  if (!file) return std::nullopt;
  return OpenedFile{model, view, file};
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

MountStatus Namespace::Status() {
  MountFacts facts;
  {
    std::lock_guard lock(mu_);
    facts.mountpoint = mountpoint_;
  }
  facts.pid = ::getpid();
  facts.started_at_ns = mount_time_ns_;
  return CollectStatus(catalog_, facts);
}

void Namespace::SetMountpoint(const std::string& mountpoint) {
  std::lock_guard lock(mu_);
  mountpoint_ = mountpoint;
}

namespace {
// A snapshot sized by a lookup is given to an open that follows within this time; later opens
// get a fresh one.
constexpr auto kSizedSnapshotLife = std::chrono::seconds(1);
}  // namespace

std::optional<std::string> Namespace::ControlContent(uint64_t inode) {
  {
    std::lock_guard lock(mu_);
    auto sized = sized_snapshots_.find(inode);
    if (sized != sized_snapshots_.end()) {
      SizedSnapshot snapshot = std::move(sized->second);
      sized_snapshots_.erase(sized);
      if (std::chrono::steady_clock::now() - snapshot.made < kSizedSnapshotLife) {
        return std::move(snapshot.content);
      }
    }
  }
  return RenderControl(inode);
}

std::optional<std::string> Namespace::RenderControl(uint64_t inode) {
  if (inode == kStatusJsonInode) return RenderStatusJson(Status());
  if (inode == kMetricsInode) return RenderMetrics(Status());
  return std::nullopt;
}

std::optional<Namespace::Attr> Namespace::ControlAttr(uint64_t inode) {
  if (inode == kControlDirInode) return DirAttr(inode);
  std::optional<std::string> content = RenderControl(inode);
  if (!content) return std::nullopt;
  {
    std::lock_guard lock(mu_);
    sized_snapshots_[inode] = {*content, std::chrono::steady_clock::now()};
  }
  int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return Attr{inode, false, content->size(), now_ns, true};
}

std::optional<Namespace::Attr> Namespace::Lookup(uint64_t parent, const std::string& name) {
  // The control folder first: no model, and no failure of the sources, can hide it.
  if (parent == kRootInode && name == kControlDirName) return ControlAttr(kControlDirInode);
  if (parent == kControlDirInode) {
    if (name == "status.json") return ControlAttr(kStatusJsonInode);
    if (name == "metrics") return ControlAttr(kMetricsInode);
    return std::nullopt;
  }
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
  std::optional<OpenedFile> opened = Resolve(*files, name);
  if (!opened) return std::nullopt;
  const uint64_t inode = opened->model->file_id + ViewIndex(opened->view);
  std::lock_guard lock(mu_);
  FileNode& node = files_[inode];
  node.model = opened->model;
  node.view = opened->view;
  node.file = opened->file;
  ++node.lookups;
  return FileAttr(*opened->model, opened->view, *opened->file);
}

std::optional<Namespace::Attr> Namespace::GetAttr(uint64_t inode) {
  if (inode >= kControlDirInode && inode <= kMetricsInode) return ControlAttr(inode);
  std::lock_guard lock(mu_);
  if (inode == kRootInode || org_names_.count(inode)) return DirAttr(inode);
  auto it = files_.find(inode);
  if (it == files_.end()) return std::nullopt;
  return FileAttr(*it->second.model, it->second.view, *it->second.file);
}

void Namespace::Forget(uint64_t inode, uint64_t count) {
  std::lock_guard lock(mu_);
  auto it = files_.find(inode);
  if (it == files_.end()) return;
  it->second.lookups -= std::min(count, it->second.lookups);
  if (it->second.lookups == 0) files_.erase(it);  // open handles keep their own reference
}

std::optional<std::vector<Namespace::Entry>> Namespace::List(uint64_t inode) {
  if (inode == kControlDirInode) {
    std::vector<Entry> entries;
    // Sizes are left to getattr: a listing need not render two snapshots.
    entries.push_back({"status.json", {kStatusJsonInode, false, 0, mount_time_ns_, true}});
    entries.push_back({"metrics", {kMetricsInode, false, 0, mount_time_ns_, true}});
    return entries;
  }
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
    std::shared_ptr<const BuiltModel> model = Valid(key);
    if (!model) continue;
    // The .apr's name is the model's; its views are named after the model's name too.
    std::string model_name = name.substr(0, name.size() - 4);
    for (ViewKind view : catalog_.options().listed_views) {
      const std::string file_name = ViewFileName(model_name, view);
      // A model of that very name owns it (Resolve tries the plain reading first): listed once.
      if (view != ViewKind::kApr && files->count(file_name)) continue;
      if (std::shared_ptr<VirtualFile> file = model->views->Get(view)) {
        entries.push_back({file_name, FileAttr(*model, view, *file)});
      }
    }
  }
  return entries;
}

std::optional<Namespace::OpenedFile> Namespace::OpenView(uint64_t inode) {
  std::lock_guard lock(mu_);
  auto it = files_.find(inode);
  if (it == files_.end()) return std::nullopt;
  return OpenedFile{it->second.model, it->second.view, it->second.file};
}

std::shared_ptr<VirtualFile> Namespace::Open(uint64_t inode) {
  std::optional<OpenedFile> opened = OpenView(inode);
  return opened ? opened->file : nullptr;
}

std::optional<std::vector<std::pair<std::string, std::string>>> Namespace::Xattrs(uint64_t inode) {
  if (std::optional<OpenedFile> opened = OpenView(inode)) {
    // The figures of this inode's build (a rebuilt model has another inode), read now.
    ModelStatus status = CollectModelStatus(opened->model->ref, opened->model.get(),
                                            &opened->model->view_counters, /*building=*/false, {});
    return ModelXattrs(status, opened->view);
  }
  if (GetAttr(inode)) return std::vector<std::pair<std::string, std::string>>{};
  return std::nullopt;
}

}  // namespace aprfs
