#pragma once

// Shared machinery of the computed-view tests (view_*_test.cc): models written by make_model.py,
// the expected bytes of each view written by the independent reference apr_views.py (kept for
// the whole test run, since the same model always gives the same bytes), mounts with a computed
// cache of the test's own, status.json per view, and byte-for-byte checks of a mounted view
// through read(), O_DIRECT pread at odd offsets and mmap.

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/mount_fixture.h"

namespace aprfs_itest {

// The views of a model, by their names in file names and in status.json.
inline const std::vector<std::string> kQuantizedViews = {"q4k", "f16", "int8", "int4"};

// What apr_views.py (merged_safetensors.py for the view "safetensors") says a view is: exit 0
// and the file's bytes, or exit 3 (aprender would refuse the view) and the line naming the
// tensor and the rule.
struct ViewReference {
  int exit_code = -1;
  std::string bytes;
  std::string message;  // stderr
  bool refused() const { return exit_code == 3; }
};

// apr_views.py MODEL_DIR --view VIEW --name NAME.VIEW (merged_safetensors.py MODEL_DIR for
// "safetensors"), written to `out_path` (then removed).
ViewReference RunReferenceWriter(const std::string& model_dir, const std::string& name,
                                 const std::string& view, const std::string& out_path);

// "qt.q4k.apr"; "qt.apr" for the view "apr"; "qt.safetensors" for "safetensors".
std::string ViewFileName(const std::string& model, const std::string& view);

// Every check of one mounted view against its expected bytes: the size, read() of the whole
// file, read() in odd-sized pieces, O_DIRECT pread sweeps at unaligned offsets (straight to the
// daemon, whatever the page cache holds), random O_DIRECT ranges, reads at and across the end,
// and a shared mapping (in a child process, so a SIGBUS fails the test instead of killing it).
void ExpectViewBytes(const std::string& path, const std::string& want);

// The body of a child process that maps the file and compares it with `want` page by page, in a
// random order (`seed`), `rounds` times, dropping the mapping's pages and the page cache between
// rounds. Exit codes: 0 equal, 1 a page differs (named on stderr), 2 open failed, 3 mmap failed.
int CompareMappedPages(const std::string& path, const std::string& want, uint64_t seed,
                       int rounds = 1);

// (model, view) for every quantized view of each model.
std::vector<std::pair<std::string, std::string>> EveryQuantizedView(
    const std::vector<std::string>& models);

// The whole file through O_DIRECT pread in `piece`-byte requests: every byte from the daemon.
bool ReadDirect(const std::string& path, std::string* out, std::string* error,
                size_t piece = 1 << 20);

// The sizes of every regular file below `dir`, in bytes actually allocated on disk.
uint64_t DiskUsage(const std::string& dir);

// A sharded FP8 model large enough that its .apr (E4M3 weights dequantized to BF16)
// spans several 4 MiB computed chunks: an F8_E4M3 weight of rows x cols (no NaN codes) whose
// F32 block scales live in the second shard.
tw::TestModel LargeFp8Model(uint64_t rows, uint64_t cols);

class ViewTest : public MountTest {
 protected:
  // make_model.py Model(name) args...; the args are the model's identity for the references.
  void MakeModel(const std::string& name, const std::vector<std::string>& args);
  // The expected bytes of `view` of model `name` (made by MakeModel): apr_views.py output,
  // computed once per test run.
  const ViewReference& Reference(const std::string& name, const std::string& view);
  // Computes several references two at a time (each is a Python process of about a second).
  void PrepareReferences(const std::vector<std::pair<std::string, std::string>>& wanted);
  // Reference() that must exist (exit 0); a fatal failure otherwise.
  std::string ExpectedBytes(const std::string& name, const std::string& view);

  // Writes LargeFp8Model as Model("big") and returns the bytes of its .apr as a mount serves
  // them once aprcheck.py --source has proven them (every dequantized weight, the structure, the
  // footer): read on a mount of its own (call it before mounting).
  std::string LargeFp8Reference();

  // This test's cache folder (chunks/ and views/ of the computed cache).
  std::string CacheDir() const { return root() + "/cache"; }
  // --no-hf-cache --source models_dir() --cache-dir CacheDir() plus `extra`.
  void MountViews(const std::vector<std::string>& extra = {});
  // Unmount, expecting a clean stop.
  void UnmountCleanly();

  // .aprfs/status.json of `mount` (default: mountpoint()), parsed (a gtest failure and an empty
  // object when it is not JSON), once the background writer stored every computed chunk
  // (cache_pending_bytes 0 everywhere).
  nlohmann::json Status(const std::string& mount = "");
  // The `views` entry of `view` of the model `model` ("qt"); a failure and null if absent.
  nlohmann::json ViewStatus(const std::string& model, const std::string& view);
  // A figure of that entry (0 when absent or null).
  uint64_t ViewFigure(const std::string& model, const std::string& view, const std::string& field);
  // The daemon's log so far.
  std::string Log() const;
  // errno of open(2) of a mounted file, 0 if it opened.
  int OpenErrno(const std::string& relative);
  // Polls until stat of the mounted file fails with ENOENT (the kernel keeps a positive entry
  // for up to the entry timeout of a second); true if it did within `timeout`.
  bool BecomesAbsent(const std::string& relative, Millis timeout = 10s);

 private:
  std::map<std::string, std::vector<std::string>> made_;  // model name -> make_model args
};

}  // namespace aprfs_itest
