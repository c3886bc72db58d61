// The thin layer between the kernel and the Namespace: each callback translates one FUSE
// request into a Namespace or VirtualFile call and replies.
#define FUSE_USE_VERSION 314
#include "fs/fuse_adapter.h"
#include "fs/fuse_init_patch.h"
#include "fs/read_ahead.h"
#include "fs/mount/mountinfo.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_set>
#include <unistd.h>

namespace aprfs {
namespace {

// Files never change under an inode (a changed model gets a new inode), so their attributes
// can be cached long. Names map to inodes for a short time so changes show up quickly.
constexpr double kFileAttrTimeout = 3600;
constexpr double kEntryTimeout = 1;
constexpr double kDirAttrTimeout = 1;
constexpr int kReadaheadKb = 1024;

struct OpenFile;

struct Session {
  Session(Namespace& ns, std::string mountpoint, unsigned max_read, KernelWishes wishes)
      : ns(ns), mountpoint(std::move(mountpoint)), max_read(max_read), init_patch(wishes) {}

  Namespace& ns;
  std::string mountpoint;
  unsigned max_read;  // from -o max_read=N; libfuse wants init() to repeat it
  std::once_flag readahead_tuned;
  // Handles not released yet. The kernel never releases those still open when the daemon stops
  // (SIGTERM while a reader holds the file) nor, after a lazy unmount, those whose release the
  // end of the connection cuts off; they are freed when the loop ends.
  std::mutex open_mu;
  std::unordered_set<OpenFile*> open_files;
  FuseInitPatch init_patch;
  // Files may be served with direct I/O (the kernel lets them be mapped too).
  std::atomic<bool> direct_io{false};
  // Files whose page cache the daemon filled (a mapping faulted, a page-cache open read): later
  // opens keep using that cache rather than direct I/O (see OnOpen).
  std::mutex cached_mu;
  std::unordered_set<fuse_ino_t> page_cached;
};

void TuneReadahead(const std::string& mountpoint);

Session& Context(fuse_req_t req) { return *static_cast<Session*>(fuse_req_userdata(req)); }
Namespace& Ns(fuse_req_t req) { return Context(req).ns; }

// The kernel resets the readahead when it processes our INIT reply, so the tuning waits for the
// first request after INIT.
void AfterInit(fuse_req_t req) {
  Session& session = Context(req);
  std::call_once(session.readahead_tuned, [&] {
    TuneReadahead(session.mountpoint);
    const KernelGrants grants = session.init_patch.grants();
    session.direct_io = grants.direct_io_allow_mmap;
    spdlog::debug("FUSE 7.{}: requests of up to {} pages, {} in the background, direct I/O files {}",
                  grants.kernel_minor, grants.max_pages, grants.max_background,
                  grants.direct_io_allow_mmap ? "mappable" : "not mappable");
    if (!grants.direct_io_allow_mmap) {
      spdlog::info("the kernel cannot map direct I/O files (FUSE_DIRECT_IO_ALLOW_MMAP needs Linux 6.6): "
                   "reads go through the page cache, about 2x slower on a first read");
    }
  });
}

struct stat ToStat(const Namespace::Attr& attr) {
  struct stat st {};
  st.st_ino = attr.inode;
  st.st_mode = attr.is_dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
  st.st_nlink = attr.is_dir ? 2 : 1;
  st.st_size = static_cast<off_t>(attr.size);
  st.st_blksize = 1 << 20;  // invites large reads (1 MiB measured best: bench/README.md)
  st.st_blocks = static_cast<blkcnt_t>((attr.size + 511) / 512);
  st.st_mtim.tv_sec = attr.mtime_ns / 1'000'000'000;
  st.st_mtim.tv_nsec = attr.mtime_ns % 1'000'000'000;
  st.st_ctim = st.st_mtim;
  st.st_atim = st.st_mtim;
  return st;
}

double AttrTimeout(const Namespace::Attr& attr) {
  if (attr.is_control) return 0;  // a new size with every snapshot
  return attr.is_dir ? kDirAttrTimeout : kFileAttrTimeout;
}

// What an open file handle (fi->fh) holds: a file of a model (with the model, which keeps it
// alive), or a snapshot of a control file.
struct OpenFile {
  bool direct_io = false;
  std::shared_ptr<const BuiltModel> model;
  std::shared_ptr<VirtualFile> file;
  std::string snapshot;
  std::shared_ptr<ReadAhead> read_ahead;  // direct I/O opens: a sequential reader's next windows
};

OpenFile& Handle(struct fuse_file_info* fi) { return *reinterpret_cast<OpenFile*>(fi->fh); }

void OnInit(void* userdata, struct fuse_conn_info* conn) {
  conn->max_read = static_cast<Session*>(userdata)->max_read;
  // More requests in flight lets the kernel's readahead overlap with our reads.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  // Files never change under an inode: no GETATTR before cached reads once attributes expire.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  AfterInit(req);
  std::optional<Namespace::Attr> attr = Ns(req).Lookup(parent, name);
  if (!attr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param entry{};
  entry.ino = attr->inode;
  entry.attr = ToStat(*attr);
  entry.attr_timeout = AttrTimeout(*attr);
  entry.entry_timeout = kEntryTimeout;
  if (fuse_reply_entry(req, &entry) != 0 && !attr->is_dir) Ns(req).Forget(attr->inode, 1);
}

void OnForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Ns(req).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OnForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Ns(req).Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* /*fi*/) {
  AfterInit(req);
  std::optional<Namespace::Attr> attr = Ns(req).GetAttr(ino);
  if (!attr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st = ToStat(*attr);
  fuse_reply_attr(req, &st, AttrTimeout(*attr));
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
               struct fuse_file_info* /*fi*/) {
  std::optional<std::vector<Namespace::Entry>> entries = Ns(req).List(ino);
  if (!entries) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  // Offsets are positions in this list: ".", "..", then the entries.
  std::vector<char> buffer(size);
  size_t used = 0;
  auto add = [&](const std::string& name, const struct stat& st, off_t next) {
    size_t need = fuse_add_direntry(req, buffer.data() + used, size - used, name.c_str(), &st, next);
    if (need > size - used) return false;
    used += need;
    return true;
  };
  struct stat dir_st {};
  dir_st.st_mode = S_IFDIR;
  off_t position = 0;
  for (const char* dot : {".", ".."}) {
    if (position++ >= offset && !add(dot, dir_st, position)) break;
  }
  for (const Namespace::Entry& entry : *entries) {
    if (position++ < offset) continue;
    if (!add(entry.name, ToStat(entry.attr), position)) break;
  }
  fuse_reply_buf(req, buffer.data(), used);
}

void OnOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  Session& session = Context(req);
  auto handle = std::make_unique<OpenFile>();
  if (std::optional<std::string> snapshot = Ns(req).ControlContent(ino)) {
    // Taken now, so one open reads one consistent snapshot; never cached, since the next open
    // shows other figures, and read past any size the kernel was told (direct_io).
    handle->snapshot = std::move(*snapshot);
    fi->direct_io = 1;
    fi->keep_cache = 0;
  } else {
    std::optional<Namespace::OpenedFile> opened = Ns(req).OpenView(ino);
    if (!opened) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    // What must hold before the first byte (a computed view may check the model's values).
    if (int err = opened->file->Prepare()) {
      fuse_reply_err(req, err);
      return;
    }
    handle->model = std::move(opened->model);
    handle->file = std::move(opened->file);
    fi->keep_cache = 1;  // the content behind an inode never changes
    // Direct I/O copies each read once, straight into the reader's buffer, and leaves the
    // sources' pages as the only cached copy; the page cache costs a fill in 4 KiB pages
    // (about 2x slower on a first read) but mmap needs it and later loads reuse it. The kernel
    // drops a direct I/O file's cache at every mmap(), so once a file's cache was filled
    // (a mapping faulted), its opens keep that cache.
    if (session.direct_io) {
      std::lock_guard lock(session.cached_mu);
      handle->direct_io = session.page_cached.count(ino) == 0;
    }
    fi->direct_io = handle->direct_io;
    if (handle->direct_io && !handle->file->computes()) {
      // Read ahead like a direct read: the sources' pages stay the one cached copy.
      handle->read_ahead = std::make_shared<ReadAhead>(
          [file = handle->file](uint64_t offset, size_t length, char* dst) {
            ReadOptions options;
            options.source_pages = SourcePages::kKeep;
            return file->Read(offset, length, dst, options);
          });
    }
  }
  fi->fh = reinterpret_cast<uint64_t>(handle.get());
  {
    // Before the reply: its release may come right after it, on another thread.
    std::lock_guard lock(session.open_mu);
    session.open_files.insert(handle.get());
  }
  if (fuse_reply_open(req, fi) == 0) {
    handle.release();
  } else {
    std::lock_guard lock(session.open_mu);
    session.open_files.erase(handle.get());
  }
}

// A control file: bytes of the snapshot taken at open.
void ReadSnapshot(fuse_req_t req, const std::string& snapshot, size_t size, off_t offset) {
  size_t begin = std::min(static_cast<size_t>(offset), snapshot.size());
  // Replied from a copy: once the kernel has the reply, the reader may close the file and its
  // release free the snapshot while this thread is still returning from writev (ASan's writev
  // interceptor reads the buffer after the call, and reported exactly that). A few KB.
  const std::string piece = snapshot.substr(begin, size);
  fuse_reply_buf(req, piece.data(), piece.size());
}

void OnRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
            struct fuse_file_info* fi) {
  OpenFile& handle = Handle(fi);
  if (!handle.file) {
    ReadSnapshot(req, handle.snapshot, size, offset);
    return;
  }
  // Copies, not references: once the reply is sent the reader may close the file and its
  // release free the handle while this thread still works after the reply (the read ahead).
  const std::shared_ptr<VirtualFile> file = handle.file;
  const std::shared_ptr<ReadAhead> read_ahead = handle.read_ahead;
  ReadCounters& counters = file->counters();
  // The kernel names a lock owner on direct reads, never on those that fill the page cache (a
  // fault of a mapping, or any read of a page-cache open): those leave the bytes cached in the
  // file's own cache, so the sources' pages go.
  const bool fills_page_cache = !handle.direct_io || fi->lock_owner == 0;
  if (fills_page_cache) {
    Session& session = Context(req);
    std::lock_guard lock(session.cached_mu);
    session.page_cached.insert(ino);
  }
  if (!fills_page_cache && read_ahead) {
    auto deliver = [req, &counters](const struct iovec* iov, int count) {
      counters.reads++;
      for (int i = 0; i < count; ++i) counters.bytes_read += iov[i].iov_len;
      fuse_reply_iov(req, iov, count);
    };
    if (read_ahead->TryServe(static_cast<uint64_t>(offset), size, deliver)) return;
  }
  // One buffer per worker thread, reused: memory stays bounded by threads x max request.
  thread_local std::unique_ptr<char[]> buffer;
  thread_local size_t capacity = 0;
  if (capacity < size) {
    buffer.reset(new char[size]);
    capacity = size;
  }
  ReadOptions options;
  options.cancelled = [req] { return fuse_req_interrupted(req) != 0; };
  options.source_pages = fills_page_cache ? SourcePages::kDrop : SourcePages::kKeep;
  ssize_t n = file->Read(static_cast<uint64_t>(offset), size, buffer.get(), options);
  if (n < 0) {
    if (n == -EIO) counters.errors++;
    fuse_reply_err(req, static_cast<int>(-n));
    return;
  }
  counters.reads++;
  counters.bytes_read += static_cast<uint64_t>(n);
  fuse_reply_buf(req, buffer.get(), static_cast<size_t>(n));
}

void OnRelease(fuse_req_t req, fuse_ino_t /*ino*/, struct fuse_file_info* fi) {
  {
    Session& session = Context(req);
    std::lock_guard lock(session.open_mu);
    session.open_files.erase(&Handle(fi));
  }
  delete &Handle(fi);
  fuse_reply_err(req, 0);
}

// Extended attributes follow getxattr(2): a size of 0 asks for the length, a smaller buffer
// than the value is ERANGE, an unknown name ENODATA. They are read-only.
void ReplyXattr(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OnGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  auto attrs = Ns(req).Xattrs(ino);
  if (!attrs) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  for (const auto& [key, value] : *attrs) {
    if (key == name) {
      ReplyXattr(req, value, size);
      return;
    }
  }
  fuse_reply_err(req, ENODATA);
}

void OnListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  auto attrs = Ns(req).Xattrs(ino);
  if (!attrs) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  std::string names;  // each name followed by a NUL
  for (const auto& [key, value] : *attrs) names.append(key).push_back('\0');
  ReplyXattr(req, names, size);
}

void OnSetxattr(fuse_req_t req, fuse_ino_t /*ino*/, const char* /*name*/, const char* /*value*/,
                size_t /*size*/, int /*flags*/) {
  fuse_reply_err(req, ENOTSUP);
}

void OnRemovexattr(fuse_req_t req, fuse_ino_t /*ino*/, const char* /*name*/) {
  fuse_reply_err(req, ENOTSUP);
}

void OnOpendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (!Ns(req).GetAttr(ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_open(req, fi);
}

void OnStatfs(fuse_req_t req, fuse_ino_t /*ino*/) {
  struct statvfs st {};
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

// The kernel reads ahead only 128 KiB on FUSE mounts by default; sequential reads through the
// mount run about 3x faster with 1 MiB (bench/README.md). Found through mountinfo, because a
// stat() of the mountpoint from a FUSE callback would wait on this very daemon. Best effort:
// needs root.
void TuneReadahead(const std::string& mountpoint) {
  std::optional<MountEntry> mount = FindMount(mountpoint);
  if (!mount) return;
  std::ofstream knob("/sys/class/bdi/" + mount->device + "/read_ahead_kb");
  knob << kReadaheadKb;
  knob.flush();
  if (knob) {
    spdlog::debug("read_ahead_kb of {} set to {}", mount->device, kReadaheadKb);
  } else {
    spdlog::info("cannot raise readahead of {} (needs root); sequential reads will be slower",
                 mountpoint);
  }
}

// No exception may unwind into libfuse's C code: a request that throws (out of memory, a
// filesystem error while scanning) fails with EIO and the daemon keeps serving.
template <auto Fn>
struct Guarded;
template <typename... Args, void (*Fn)(fuse_req_t, Args...)>
struct Guarded<Fn> {
  static void Call(fuse_req_t req, Args... args) {
    try {
      Fn(req, args...);
    } catch (const std::exception& e) {
      spdlog::error("request failed: {}", e.what());
      fuse_reply_err(req, EIO);
    }
  }
};

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops ops{};
  ops.init = OnInit;
  ops.lookup = Guarded<OnLookup>::Call;
  ops.forget = OnForget;
  ops.forget_multi = OnForgetMulti;
  ops.getattr = Guarded<OnGetattr>::Call;
  ops.open = Guarded<OnOpen>::Call;
  ops.read = Guarded<OnRead>::Call;
  ops.release = OnRelease;
  ops.opendir = Guarded<OnOpendir>::Call;
  ops.readdir = Guarded<OnReaddir>::Call;
  ops.statfs = Guarded<OnStatfs>::Call;
  ops.getxattr = Guarded<OnGetxattr>::Call;
  ops.listxattr = Guarded<OnListxattr>::Call;
  ops.setxattr = Guarded<OnSetxattr>::Call;
  ops.removexattr = Guarded<OnRemovexattr>::Call;
  return ops;
}();

unsigned MaxReadOption(const std::vector<std::string>& options) {
  unsigned max_read = 0;
  for (const std::string& option : options) {
    std::istringstream list(option);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item.rfind("max_read=", 0) == 0) max_read = static_cast<unsigned>(std::strtoul(item.c_str() + 9, nullptr, 10));
    }
  }
  return max_read;
}

}  // namespace

int ServeFuse(Namespace& ns, const FuseMountOptions& options,
              const std::function<void(bool ok, const std::string& message)>& ready) {
  std::vector<std::string> args = {"aprfs", "-o", "ro,default_permissions,fsname=aprfs,subtype=aprfs"};
  for (const std::string& option : options.fuse_options) {
    args.push_back("-o");
    args.push_back(option);
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  ns.SetMountpoint(options.mountpoint);
  KernelWishes wishes;
  wishes.direct_io_allow_mmap = true;
  Session context(ns, options.mountpoint, MaxReadOption(options.fuse_options), wishes);
  fuse_session* session = fuse_session_new(&fargs, &kOps, sizeof(kOps), &context);
  fuse_opt_free_args(&fargs);  // option parsing replaced them with a copy libfuse allocated
  if (session == nullptr) {
    ready(false, "invalid FUSE options");
    return 1;
  }
  if (fuse_set_signal_handlers(session) != 0) {
    fuse_session_destroy(session);
    ready(false, "cannot install signal handlers");
    return 1;
  }
  if (fuse_session_mount(session, options.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    ready(false, "cannot mount at " + options.mountpoint +
                     " (is it an existing, empty folder you may mount on?)");
    return 1;
  }
  static const fuse_custom_io kIo = {
      [](int fd, struct iovec* iov, int count, void* userdata) {
        return static_cast<Session*>(userdata)->init_patch.Writev(fd, iov, count);
      },
      [](int fd, void* buf, size_t len, void* userdata) {
        ssize_t n = ::read(fd, buf, len);
        if (n > 0) static_cast<Session*>(userdata)->init_patch.ObserveRequest(buf, static_cast<size_t>(n));
        // A lazy unmount ends the connection when its last user leaves, and a worker reading
        // just then sees it aborted rather than gone. libfuse ends quietly only on ENODEV: on
        // ECONNABORTED it prints from that worker while the loop cancels the workers, which
        // can leave stderr's lock held and hang the daemon's exit (seen under TSan).
        if (n < 0 && errno == ECONNABORTED) errno = ENODEV;
        return n;
      },
      nullptr, nullptr};
  if (int err = fuse_session_custom_io(session, &kIo, fuse_session_fd(session)); err != 0) {
    spdlog::warn("cannot route FUSE replies through the daemon ({}): kernel defaults", strerror(-err));
  }
  ready(true, "");
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, options.max_threads);
  fuse_loop_cfg_set_clone_fd(config, 1);
  int result = fuse_session_loop_mt(session, config);
  fuse_loop_cfg_destroy(config);
  for (OpenFile* handle : context.open_files) delete handle;  // the workers are joined
  context.open_files.clear();
  fuse_session_unmount(session);
  fuse_remove_signal_handlers(session);
  fuse_session_destroy(session);
  // libfuse's signal handlers make the loop return the signal: SIGTERM (systemctl stop), SIGINT
  // and SIGHUP end a healthy daemon, which must then exit 0 or systemd marks it failed.
  bool normal_end = result == 0 || result == SIGTERM || result == SIGINT || result == SIGHUP;
  return normal_end ? 0 : 1;
}

}  // namespace aprfs
