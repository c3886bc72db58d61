#pragma once

// mount(8) and fstab support. mount(8) runs `/sbin/mount.fuse.aprfs SOURCE MOUNTPOINT [-sfnv]
// [-N NS] [-o OPTIONS] [-t fuse.aprfs]` (mount(8), "EXTERNAL HELPERS"); that symlink to the aprfs
// binary lands here and is turned into the argv of `aprfs mount`, which does the rest.
//
// -o options, comma-separated (a value cannot hold a comma; quotes are taken literally):
//  * aprfs options, the long CLI options with '-' spelled '_': source=DIR, repo=ORG/NAME[@REV]
//    (both repeatable), hf_cache=DIR, no_hf_cache, config=FILE, cache_dir=DIR, cache_size=SIZE,
//    max_connections=N, log_level=LEVEL, log_file=FILE, foreground;
//  * options of mount(8) and systemd, dropped: defaults, auto, noauto, user, users, nouser,
//    owner, group, nofail, _netdev and any _*, comment=*, x-* (x-systemd.*), rw (mount(8) adds
//    it by default; aprfs is read-only whatever it says), subtype=aprfs;
//  * FUSE and kernel options, passed to libfuse: ro, allow_other, allow_root,
//    default_permissions, auto_unmount, [no]suid, [no]dev, [no]exec, [no|rel|strict]atime,
//    [no]diratime, sync, async, dirsync, max_read=N, fsname=NAME, blksize=N;
//  * anything else is an error naming the option (-s, sloppy: a warning, and it is dropped).

#include <string>
#include <vector>

namespace aprfs {

// What -o OPTIONS of `aprfs mount` or mount(8) mean for aprfs.
struct TranslatedOptions {
  std::vector<std::string> cli_args;      // "--source", "/srv/models", "--no-hf-cache"...
  std::vector<std::string> fuse_options;  // "allow_other", "max_read=131072"...
  std::vector<std::string> warnings;      // options dropped because of sloppy mode
};

// Throws std::invalid_argument naming the option and the rule.
TranslatedOptions TranslateOptions(const std::vector<std::string>& option_lists, bool sloppy);

// The translation of mount(8)'s helper call.
struct HelperCall {
  std::vector<std::string> mount_argv;  // {"mount", MOUNTPOINT, ...}: the argv of `aprfs ...`
  bool fake = false;                    // -f: check everything, mount nothing
  bool verbose = false;                 // -v: say what is run
};

// `args` excludes argv[0]. Throws std::invalid_argument for a call mount(8) would not make or
// options aprfs does not know.
HelperCall TranslateHelperCall(const std::vector<std::string>& args);

// argv[0] names the helper: "mount.fuse.aprfs", whatever its folder.
bool InvokedAsMountHelper(const char* argv0);

// What main() should do with its argv: parse `argv` (the helper call translated, and the aprfs
// options inside `aprfs mount -o` turned into their CLI form, so both spellings reach one code
// path), or exit with `exit_code` at once (errors already printed; 0 after a fake mount).
struct CommandLine {
  std::vector<std::string> argv;
  int exit_code = -1;  // >= 0: exit now
};
CommandLine RewriteCommandLine(int argc, char** argv);

}  // namespace aprfs
