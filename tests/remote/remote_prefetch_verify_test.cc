// `aprfs prefetch` and `aprfs verify` against the fake Hub (two real nginx on loopback): a whole
// model fetched once, verified and published; Ctrl-C and a resume that fetches nothing twice; a
// shard whose bytes do not match the Hub's sha256 refused; the verdicts of `verify` on a good
// and a corrupted model, by name, by folder and through a mount.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

extern char** environ;

namespace aprfs_rtest {
namespace {

class RemotePrefetchTest : public RemoteTest {};

TEST_F(RemotePrefetchTest, FetchesEveryChunkOnceThenVerifiesAndPublishes) {
  const SourceModel& big = BigModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir});
  const std::string cache = Dir("cache"), hf = Dir("hf");
  const std::vector<std::string> caches = {"--cache-dir", cache, "--hf-cache", hf};
  std::vector<std::string> args = {"prefetch", "org/big"};
  args.insert(args.end(), caches.begin(), caches.end());
  ProcResult run = RunAprfs(args, Env(hub.endpoint()), 120s);
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  // Not a terminal: plain progress lines, with the total and a final outcome.
  EXPECT_NE(run.err.find("fetch org/big@main"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("100%"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("verified"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find('\r'), std::string::npos) << "a bar drawn into a pipe";
  EXPECT_NE(run.out.find("shards ready"), std::string::npos) << run.out;

  const std::vector<AccessLine> log = hub.CdnLog();
  for (const std::string& shard : big.shards) {
    const std::string sha = hub.Sha("org/big", shard);
    std::map<uint64_t, int> chunks = ChunkDownloads(log, sha, big.ShardSize(shard));
    EXPECT_EQ(chunks.size(), ChunkCount(big.ShardSize(shard))) << shard;
    for (const auto& [chunk, count] : chunks) {
      EXPECT_EQ(count, 1) << shard << " chunk " << chunk << " downloaded " << count << " times";
    }
    std::vector<std::string> problems = CheckPublished(hf, "org/big", hub.Commit("org/big"), "main",
                                                       shard, sha, big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << shard << ":\n" << Join(problems);
  }

  // Again: nothing to do, nothing fetched.
  const size_t requests = DataRequestCount(hub.CdnLog());
  run = RunAprfs(args, Env(hub.endpoint()), 60s);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("in the HF cache"), std::string::npos) << run.out;
  EXPECT_EQ(DataRequestCount(hub.CdnLog()), requests);

  // verify by name: every shard against the Hub's sha256, the .apr's structure and footer.
  std::vector<std::string> verify = {"verify", "org/big"};
  verify.insert(verify.end(), caches.begin(), caches.end());
  run = RunAprfs(verify, Env(hub.endpoint()), 120s);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("verdict: GOOD"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("footer ok"), std::string::npos) << run.out;
}

// Ctrl-C stops a prefetch promptly with exit code 130; the next run fetches only what is missing.
TEST_F(RemotePrefetchTest, InterruptedPrefetchResumesWithoutFetchingAChunkTwice) {
  SetWatchdog(120s);
  const SourceModel& big = BigModel();
  // 2 MB/s per connection: the 57 MiB model takes seconds, time enough to interrupt it.
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir, "--rate-limit", "2097152"});
  const std::string cache = Dir("cache"), hf = Dir("hf");
  std::vector<std::string> argv = {AprfsBinary(), "prefetch", "org/big", "--cache-dir", cache,
                                   "--hf-cache", hf, "--max-connections", "2"};
  std::vector<std::string> env = CleanEnvironment(Env(hub.endpoint()));
  std::vector<char*> raw_argv, raw_env;
  for (std::string& a : argv) raw_argv.push_back(a.data());
  raw_argv.push_back(nullptr);
  for (std::string& e : env) raw_env.push_back(e.data());
  raw_env.push_back(nullptr);
  const std::string err_path = Dir("out") + "/stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, raw_argv[0], &actions, nullptr, raw_argv.data(), raw_env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);

  bool some = WaitFor([&] { return PresentBytesInCache(cache) >= 2 * kChunk; }, 60s);
  ASSERT_TRUE(some) << "prefetch made no progress: " << SlurpOrEmpty(err_path);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  // Promptly = before the download ends (checked below: not everything is cached); the time is
  // only a guard against a hang.
  bool exited = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, 30s);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(exited) << "prefetch ignored Ctrl-C";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[ note ] prefetch stopped %.1f s after Ctrl-C\n", seconds);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << "status " << status;
  const std::string err = SlurpOrEmpty(err_path);
  EXPECT_NE(err.find("run it again to resume"), std::string::npos) << err;

  // What was present when it stopped is never fetched again.
  std::map<std::string, std::vector<bool>> present_before;
  for (const std::string& shard : big.shards) {
    ChunkMap map = ReadChunkMap(StoreDir(cache, hub.Sha("org/big", shard)));
    if (map.error.empty()) present_before[shard] = map.present;
  }
  const uint64_t cached = PresentBytesInCache(cache);
  EXPECT_LT(cached, 57ull << 20) << "it finished before the interruption: test too fast";

  ProcResult run = RunAprfs({"prefetch", "org/big", "--cache-dir", cache, "--hf-cache", hf},
                            Env(hub.endpoint()), 120s);
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("were cached"), std::string::npos) << run.out;
  const std::vector<AccessLine> log = hub.CdnLog();
  for (const auto& [shard, present] : present_before) {
    std::map<uint64_t, int> chunks =
        ChunkDownloads(log, hub.Sha("org/big", shard), big.ShardSize(shard));
    for (size_t chunk = 0; chunk < present.size(); ++chunk) {
      if (present[chunk]) {
        EXPECT_EQ(chunks[chunk], 1) << shard << " chunk " << chunk;
      }
    }
  }
  for (const std::string& shard : big.shards) {
    std::vector<std::string> problems =
        CheckPublished(hf, "org/big", hub.Commit("org/big"), "main", shard,
                       hub.Sha("org/big", shard), big.ShardPath(shard));
    EXPECT_TRUE(problems.empty()) << shard << ":\n" << Join(problems);
  }
}

// The server sends bytes that do not hash to the sha256 it advertises: prefetch says so, exits
// 1 and publishes nothing; verify then finds the chunks dropped (incomplete, exit 2).
TEST_F(RemotePrefetchTest, ShardNotMatchingTheHubsSha256IsRefused) {
  const SourceModel original = SingleModel();
  const SourceModel model = CopyModel(original, Dir("model"));
  const std::string file = model.ShardPath("model.safetensors");
  FaultServer& server = StartFault("fault", file, {"--path", "model.safetensors"});
  ASSERT_TRUE(FlipByte(file, FileSize(file) - 1));
  const std::string cache = Dir("cache"), hf = Dir("hf");
  ProcResult run = RunAprfs(
      {"prefetch", "fault/model", "--cache-dir", cache, "--hf-cache", hf}, Env(server.endpoint()),
      60s);
  EXPECT_EQ(run.exit_code, 1) << run.Describe();
  EXPECT_NE(run.err.find("does not match the Hub's " + server.sha256()), std::string::npos)
      << run.err;
  EXPECT_TRUE(ListDir(hf + "/" + RepoFolder("fault/model") + "/blobs").empty());
  EXPECT_EQ(PresentBytesInCache(cache), 0u) << "the bad chunks were kept";

  run = RunAprfs({"verify", "fault/model", "--cache-dir", cache, "--hf-cache", hf},
                 Env(server.endpoint()), 60s);
  EXPECT_EQ(run.exit_code, 2) << run.Describe();
  EXPECT_NE(run.out.find("not cached"), std::string::npos) << run.out;
}

// verify's verdicts on local models: by folder and through a mount, good then corrupted.
TEST_F(RemotePrefetchTest, VerifyVerdictsOnAGoodAndACorruptedModel) {
  const SourceModel& tiny = TinyModel();
  const std::string hf = Dir("hf");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  SeedHfCache(hf, "org/tiny", commit, tiny, tiny.shards);
  const std::string snapshot = hf + "/" + RepoFolder("org/tiny") + "/snapshots/" + commit;

  ProcResult run = RunAprfs({"verify", snapshot}, {}, 60s);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("verdict: GOOD"), std::string::npos) << run.out;
  // On a terminal (script(1) gives it one) the progress is a bar redrawn in place.
  run = RunCommand({"script", "-qec", AprfsBinary() + " verify '" + snapshot + "'", "/dev/null"},
                   60s);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("\r"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("] 100%"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[########"), std::string::npos) << run.out;

  AprfsMount* mount = Mount("mnt", {"--hf-cache", hf}, {});
  ASSERT_NE(mount, nullptr);
  run = RunAprfs({"verify", mount->Path("tiny.apr")}, {}, 60s);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_NE(run.out.find("footer ok"), std::string::npos) << run.out;

  // One flipped byte in the second shard's blob, in its tensor data (the header stays valid).
  const std::string blob =
      hf + "/" + RepoFolder("org/tiny") + "/blobs/" + Sha256OfFile(tiny.ShardPath(tiny.shards[1]));
  ASSERT_TRUE(FlipByte(blob, FileSize(blob) - 100, 1));
  for (const std::string& target : {snapshot, mount->Path("tiny.apr")}) {
    run = RunAprfs({"verify", target}, {}, 60s);
    EXPECT_EQ(run.exit_code, 1) << target << "\n" << run.Describe();
    EXPECT_NE(run.out.find(tiny.shards[1] + ": MISMATCH"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("verdict: BAD"), std::string::npos) << run.out;
  }
  Unmount(mount);
}

}  // namespace
}  // namespace aprfs_rtest
