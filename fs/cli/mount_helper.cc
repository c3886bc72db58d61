#include "fs/cli/mount_helper.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace aprfs {
namespace {

// aprfs options: -o name -> the long CLI option, and whether it takes a value.
struct AprfsOption {
  const char* flag;
  bool takes_value;
};
const std::map<std::string, AprfsOption>& AprfsOptions() {
  static const std::map<std::string, AprfsOption> options = {
      {"source", {"--source", true}},         {"repo", {"--repo", true}},
      {"hf_cache", {"--hf-cache", true}},     {"no_hf_cache", {"--no-hf-cache", false}},
      {"config", {"--config", true}},         {"cache_dir", {"--cache-dir", true}},
      {"cache_size", {"--cache-size", true}}, {"max_connections", {"--max-connections", true}},
      {"log_level", {"--log-level", true}},   {"log_file", {"--log-file", true}},
      {"foreground", {"--foreground", false}}, {"views", {"--views", true}},
      {"no_view_cache", {"--no-view-cache", false}}, {"max_memory", {"--max-memory", true}},
  };
  return options;
}

// Options that only mean something to mount(8), fstab or systemd.
bool IsMountOnlyOption(const std::string& name) {
  static const std::set<std::string> names = {"defaults", "auto", "noauto", "user", "users",
                                              "nouser",   "owner", "group", "nofail", "rw"};
  return names.count(name) || name.front() == '_' || name.rfind("x-", 0) == 0 ||
         name == "comment";
}

// FUSE and kernel options that libfuse's fuse_session_mount understands.
bool IsFuseFlag(const std::string& name) {
  static const std::set<std::string> names = {
      "ro",        "allow_other", "allow_root", "default_permissions", "auto_unmount",
      "suid",      "nosuid",      "dev",        "nodev",               "exec",
      "noexec",    "atime",       "noatime",    "relatime",            "norelatime",
      "strictatime", "diratime",  "nodiratime", "sync",                "async",
      "dirsync"};
  return names.count(name) > 0;
}
bool IsFuseValueOption(const std::string& name) {
  return name == "max_read" || name == "fsname" || name == "blksize";
}

std::string Known() {
  std::string list;
  for (const auto& [name, option] : AprfsOptions()) {
    list += (list.empty() ? "" : ", ") + name + (option.takes_value ? "=" : "");
  }
  return list;
}

std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> items;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

TranslatedOptions TranslateOptions(const std::vector<std::string>& option_lists, bool sloppy) {
  TranslatedOptions out;
  for (const std::string& list : option_lists) {
    for (const std::string& item : SplitCommas(list)) {
      size_t eq = item.find('=');
      std::string name = item.substr(0, eq);
      bool has_value = eq != std::string::npos;
      std::string value = has_value ? item.substr(eq + 1) : "";
      if (name.empty()) throw std::invalid_argument("mount option '" + item + "' has no name");
      if (auto it = AprfsOptions().find(name); it != AprfsOptions().end()) {
        if (it->second.takes_value && (!has_value || value.empty())) {
          throw std::invalid_argument("mount option '" + name + "' needs a value: " + name +
                                      "=...");
        }
        if (!it->second.takes_value && has_value) {
          throw std::invalid_argument("mount option '" + name + "' takes no value (got '" +
                                      item + "')");
        }
        out.cli_args.push_back(it->second.flag);
        if (has_value) out.cli_args.push_back(value);
      } else if (name == "subtype") {
        if (value != "aprfs") {
          throw std::invalid_argument("mount option '" + item +
                                      "': the type is always fuse.aprfs (subtype=aprfs)");
        }
      } else if (IsMountOnlyOption(name)) {
        // mount(8), fstab or systemd consumed it already.
      } else if (IsFuseFlag(name) && !has_value) {
        out.fuse_options.push_back(name);
      } else if (IsFuseValueOption(name) && has_value && !value.empty()) {
        out.fuse_options.push_back(item);
      } else if (IsFuseFlag(name) || IsFuseValueOption(name)) {
        throw std::invalid_argument("mount option '" + item + "': " + name +
                                    (IsFuseFlag(name) ? " takes no value" : " needs a value"));
      } else if (sloppy) {
        out.warnings.push_back("unknown mount option '" + item + "' ignored (sloppy mode)");
      } else {
        throw std::invalid_argument("unknown mount option '" + item + "' (aprfs options: " +
                                    Known() + "; FUSE options such as ro, allow_other, "
                                    "max_read=N; see aprfs(1))");
      }
    }
  }
  return out;
}

HelperCall TranslateHelperCall(const std::vector<std::string>& args) {
  HelperCall call;
  std::vector<std::string> positional, option_lists;
  bool sloppy = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto next = [&](const char* what) -> const std::string& {
      if (i + 1 >= args.size()) throw std::invalid_argument(arg + " needs " + what);
      return args[++i];
    };
    if (arg == "-o") {
      option_lists.push_back(next("a list of options"));
    } else if (arg.rfind("-o", 0) == 0 && arg.size() > 2) {
      option_lists.push_back(arg.substr(2));
    } else if (arg == "-t") {
      const std::string& type = next("a type");
      if (type != "fuse.aprfs" && type != "aprfs") {
        throw std::invalid_argument("-t " + type + ": this helper mounts fuse.aprfs only");
      }
    } else if (arg == "-N") {
      throw std::invalid_argument("-N " + next("a namespace") +
                                  ": mounting into another namespace is not supported");
    } else if (arg.size() > 1 && arg[0] == '-' && arg.find_first_not_of("sfnv", 1) == std::string::npos) {
      // -s sloppy, -f fake, -n no mtab (there is none), -v verbose; mount(8) may group them.
      sloppy |= arg.find('s') != std::string::npos;
      call.fake |= arg.find('f') != std::string::npos;
      call.verbose |= arg.find('v') != std::string::npos;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw std::invalid_argument("unknown helper flag '" + arg +
                                  "' (mount(8) passes -s, -f, -n, -v, -N, -o, -t)");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) {
    throw std::invalid_argument("expected SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS], got " +
                                std::to_string(positional.size()) + " positional argument(s)");
  }
  const std::string& source = positional[0];
  const std::string& mountpoint = positional[1];
  TranslatedOptions options = TranslateOptions(option_lists, sloppy);
  for (const std::string& warning : options.warnings) {
    std::cerr << "mount.fuse.aprfs: " << warning << "\n";
  }
  call.mount_argv = {"mount", mountpoint};
  if (source != "aprfs") {
    if (!IsDirectory(source)) {
      throw std::invalid_argument("SOURCE '" + source +
                                  "' is not a folder: give a folder of models, or the word "
                                  "aprfs and say everything with -o");
    }
    call.mount_argv.insert(call.mount_argv.end(), {"--source", source});
  }
  call.mount_argv.insert(call.mount_argv.end(), options.cli_args.begin(), options.cli_args.end());
  bool names_itself = std::any_of(options.fuse_options.begin(), options.fuse_options.end(),
                                  [](const std::string& o) { return o.rfind("fsname=", 0) == 0; });
  // mountinfo then shows the fstab line's SOURCE, so `mount -a` sees the entry is mounted.
  // libfuse would split a name holding a comma; those keep the default name "aprfs".
  if (!names_itself && source.find_first_of(",\\") == std::string::npos) {
    options.fuse_options.push_back("fsname=" + source);
  }
  std::string joined;
  for (const std::string& option : options.fuse_options) joined += (joined.empty() ? "" : ",") + option;
  if (!joined.empty()) call.mount_argv.insert(call.mount_argv.end(), {"-o", joined});
  return call;
}

bool InvokedAsMountHelper(const char* argv0) {
  if (argv0 == nullptr) return false;
  const char* slash = std::strrchr(argv0, '/');
  return std::strcmp(slash ? slash + 1 : argv0, "mount.fuse.aprfs") == 0;
}

CommandLine RewriteCommandLine(int argc, char** argv) {
  CommandLine line;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (InvokedAsMountHelper(argv[0])) {
    if (std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end()) {
      line.argv = {"aprfs", "mount", "--help"};
      return line;
    }
    try {
      HelperCall call = TranslateHelperCall(args);
      if (call.verbose || call.fake) {
        std::cerr << "mount.fuse.aprfs: aprfs";
        for (const std::string& arg : call.mount_argv) std::cerr << " " << arg;
        std::cerr << (call.fake ? "  (fake: not run)\n" : "\n");
      }
      if (call.fake) {
        line.exit_code = 0;
        return line;
      }
      line.argv = {"aprfs"};
      line.argv.insert(line.argv.end(), call.mount_argv.begin(), call.mount_argv.end());
    } catch (const std::invalid_argument& e) {
      std::cerr << "mount.fuse.aprfs: " << e.what() << "\n";
      line.exit_code = 1;  // mount(8): incorrect invocation
    }
    return line;
  }
  line.argv = {argv[0]};
  if (args.empty() || args[0] != "mount") {
    line.argv.insert(line.argv.end(), args.begin(), args.end());
    return line;
  }
  // `aprfs mount ... -o LIST`: pull the aprfs options out of each LIST. "--" ends the options.
  std::vector<std::string> kept, lists;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "-o" && i + 1 < args.size()) {
      lists.push_back(args[++i]);
    } else if (args[i].rfind("-o", 0) == 0 && args[i].size() > 2) {
      lists.push_back(args[i].substr(2));
    } else {
      kept.push_back(args[i]);
    }
  }
  try {
    TranslatedOptions options = TranslateOptions(lists, false);
    kept.insert(kept.end(), options.cli_args.begin(), options.cli_args.end());
    for (const std::string& option : options.fuse_options) kept.insert(kept.end(), {"-o", option});
  } catch (const std::invalid_argument& e) {
    std::cerr << "aprfs mount: -o: " << e.what() << "\n";
    line.exit_code = 1;
    return line;
  }
  kept.insert(kept.end(), args.begin() + static_cast<long>(i), args.end());
  line.argv.insert(line.argv.end(), kept.begin(), kept.end());
  return line;
}

}  // namespace aprfs
