// The Hub protocol as aprfs speaks it (issue 3, "Hub protocol"): gated repos and HF_TOKEN (and
// the token never reaching the CDN host), clear errors for unknown repos and revisions, signed
// CDN URLs that expire and are resolved again; and the ways to name remote models: --config
// files like --repo, bad values refused with exit status 1 and a clear message.

#include <sys/mount.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

class RemoteHubTest : public RemoteTest {
 protected:
  // `aprfs ls --json --repo REPO --no-hf-cache --cache-dir <fresh>`: the one model's JSON item.
  json LsRepo(const std::string& repo, const std::vector<std::string>& env) {
    ProcResult r = RunAprfs({"ls", "--json", "--repo", repo, "--no-hf-cache", "--cache-dir",
                             Dir("ls-cache-" + std::to_string(ls_count_++))},
                            env, 60s);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    json out = json::parse(r.out, nullptr, false);
    if (out.is_discarded() || !out.is_array() || out.size() != 1) {
      ADD_FAILURE() << "aprfs ls --json printed no one-model list: " << r.Describe();
      return json::object();
    }
    return out[0];
  }
  int ls_count_ = 0;
};

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

TEST_F(RemoteHubTest, GatedRepoNeedsTheRightTokenWhichNeverGoesToTheCdn) {
  const SourceModel& tiny = TinyModel();
  const std::string token = "hf_goodtoken123";
  HubFixture& hub = StartHub(
      "hub", {"--repo", "org/gated=" + tiny.dir, "--gated", "org/gated", "--token", token});
  std::string error;
  ASSERT_TRUE(hub.EnableAuthLogging(&error)) << error;

  json none = LsRepo("org/gated", Env(hub.endpoint()));
  EXPECT_EQ(none.value("ok", true), false) << none.dump();
  EXPECT_NE(Lower(none.value("error", "")).find("gated"), std::string::npos) << none.dump();
  EXPECT_NE(none.value("error", "").find("HF_TOKEN"), std::string::npos)
      << "the message should say how to fix it: " << none.dump();

  json wrong = LsRepo("org/gated", Env(hub.endpoint(), {"HF_TOKEN=hf_wrongtoken999"}));
  EXPECT_EQ(wrong.value("ok", true), false) << wrong.dump();
  EXPECT_NE(Lower(wrong.value("error", "")).find("gated"), std::string::npos) << wrong.dump();

  json right = LsRepo("org/gated", Env(hub.endpoint(), {"HF_TOKEN=" + token}));
  EXPECT_EQ(right.value("ok", false), true) << right.dump();
  EXPECT_GT(right.value("size", 0), 0);

  // The token file (HF_TOKEN_PATH, with a trailing newline as `hf auth login` writes it).
  const std::string token_file = root() + "/token";
  WriteText(token_file, token + "\n");
  json from_file = LsRepo("org/gated", Env(hub.endpoint(), {"HF_TOKEN_PATH=" + token_file}));
  EXPECT_EQ(from_file.value("ok", false), true) << from_file.dump();

  // Through a mount: the bytes come, the token goes to the hub only.
  const size_t before = hub.CdnLog().size();
  AprfsMount* mount =
      Mount("mnt", {"--repo", "org/gated", "--cache-dir", Dir("cache"), "--no-hf-cache"},
            Env(hub.endpoint(), {"HF_TOKEN=" + token}));
  ASSERT_NE(mount, nullptr);
  SequentialRead read = ReadSequentially(mount->Path("gated.apr"));
  EXPECT_EQ(read.error, 0) << std::strerror(std::max(0, read.error)) << mount->Log();
  std::vector<std::string> problems = CheckAprBytes(read.bytes, tiny);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  std::vector<AccessLine> log = hub.CdnLog();
  size_t data = 0;
  for (size_t i = before; i < log.size(); ++i) {
    if (log[i].sha.empty()) continue;
    ++data;
    EXPECT_TRUE(log[i].auth_logged) << log[i].raw;
    EXPECT_EQ(log[i].auth, "-") << "a request to the CDN carried Authorization: " << log[i].raw;
  }
  EXPECT_GE(data, 2u * tiny.shards.size()) << "headers and data of each shard:\n" << Describe(log);
  // (The hub refused every request without the token, so the hub did get it.)
}

TEST_F(RemoteHubTest, UnknownRepoAndRevisionGiveClearErrors) {
  const SourceModel& tiny = TinyModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/tiny=" + tiny.dir});
  json repo = LsRepo("org/nope", Env(hub.endpoint()));
  EXPECT_EQ(repo.value("ok", true), false);
  EXPECT_NE(Lower(repo.value("error", "")).find("repository not found"), std::string::npos)
      << repo.dump();

  json revision = LsRepo("org/tiny@v9", Env(hub.endpoint()));
  EXPECT_EQ(revision.value("ok", true), false);
  EXPECT_NE(Lower(revision.value("error", "")).find("revision not found"), std::string::npos)
      << revision.dump();

  json commit = LsRepo("org/tiny@0123456789abcdef0123456789abcdef01234567", Env(hub.endpoint()));
  EXPECT_EQ(commit.value("ok", true), false);
  EXPECT_NE(Lower(commit.value("error", "")).find("revision not found"), std::string::npos)
      << commit.dump();

  // The branch and its commit both work.
  json main = LsRepo("org/tiny@main", Env(hub.endpoint()));
  EXPECT_EQ(main.value("ok", false), true) << main.dump();
  json pinned = LsRepo("org/tiny@" + hub.Commit("org/tiny"), Env(hub.endpoint()));
  EXPECT_EQ(pinned.value("ok", false), true) << pinned.dump();
  EXPECT_EQ(pinned.value("size", 0), main.value("size", 1));
}

TEST_F(RemoteHubTest, ExpiredSignedUrlIsResolvedAgain) {
  const SourceModel& big = BigModel();
  // URLs are signed for 3 s from `start` or `refresh` (one more than the 2 s of the brief, so
  // that a slow machine does not expire the first URL before its first use).
  HubFixture& hub = StartHub("hub", {"--repo", "org/big=" + big.dir, "--url-ttl", "3"});
  AprfsMount* mount =
      Mount("mnt", {"--repo", "org/big", "--cache-dir", Dir("cache"), "--no-hf-cache"},
            Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  std::string error;
  ASSERT_TRUE(hub.Refresh(&error)) << error;
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "") << mount->Log();
  const std::string weight = big.TensorBytes("blk.0.weight");
  // Part of chunk 0 of the first shard (O_DIRECT, small: no read-ahead).
  std::string got;
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.0.weight"), 65536, &got), 0) << mount->Log();
  EXPECT_TRUE(got == weight.substr(0, 65536));

  std::this_thread::sleep_for(4s);  // the URL the client holds has expired
  ASSERT_TRUE(hub.Refresh(&error)) << error;
  const uint64_t within = 9 << 20;  // chunk 1 of the same shard
  double seconds = 0;
  int err = ReadRange(path, AprOffsetOf(layout, "blk.0.weight", within), 65536, &got, &seconds);
  EXPECT_EQ(err, 0) << (err > 0 ? std::strerror(err) : "short") << "\n" << mount->Log();
  EXPECT_TRUE(got == weight.substr(within, 65536));
  EXPECT_LT(seconds, 20.0);

  const std::string sha = hub.Sha("org/big", big.shards[0]);
  std::vector<AccessLine> lines = LinesFor(hub.CdnLog(), sha);
  auto refused =
      std::find_if(lines.begin(), lines.end(), [](const AccessLine& l) { return l.status == 403; });
  EXPECT_NE(refused, lines.end()) << "the expired URL was never used:\n" << Describe(lines);
  bool later_ok =
      refused != lines.end() &&
      std::any_of(refused, lines.end(), [](const AccessLine& l) { return l.status == 206; });
  EXPECT_TRUE(later_ok) << "no successful request after the 403:\n" << Describe(lines);
  int resolves = 0;
  for (const AccessLine& line : hub.HubLog()) {
    resolves += line.method == "HEAD" && line.path.find("/resolve/") != std::string::npos &&
                line.path.find(big.shards[0]) != std::string::npos;
  }
  EXPECT_GE(resolves, 2) << "the client did not ask the hub for a new URL";
}

TEST_F(RemoteHubTest, ConfigFileNamesReposLikeTheCommandLine) {
  const SourceModel& tiny = TinyModel();
  HubFixture& hub = StartHub("hub", {"--repo", "org/tiny=" + tiny.dir});
  const std::string config = root() + "/aprfs.json";
  WriteText(config, json{{"repos", {"org/tiny"}},
                         {"cache_dir", Dir("cache")},
                         {"no_hf_cache", true},
                         {"max_connections", 2}}
                        .dump());
  AprfsMount* mount = Mount("mnt", {"--config", config}, Env(hub.endpoint()));
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ListDir(mount->mountpoint()), (std::vector<std::string>{"org", "tiny.apr", "tiny.q4k.apr"}));
  ProcResult check = RunAprcheck(mount->Path("org/tiny.apr"), tiny.dir);
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  Unmount(mount);
  EXPECT_FALSE(ListDir(root() + "/cache/meta").empty()) << "the config's cache_dir was not used";

  // The default location ($XDG_CONFIG_HOME/aprfs/config.json) is read without --config.
  const std::string xdg = Dir("xdg");
  WriteText(
      xdg + "/aprfs/config.json",
      json{{"repos", {"org/tiny"}}, {"cache_dir", Dir("cache2")}, {"no_hf_cache", true}}.dump());
  AprfsMount* implicit = Mount("mnt2", {}, Env(hub.endpoint(), {"XDG_CONFIG_HOME=" + xdg}));
  ASSERT_NE(implicit, nullptr);
  SequentialRead read = ReadSequentially(implicit->Path("tiny.apr"));
  EXPECT_EQ(read.error, 0);
  std::vector<std::string> problems = CheckAprBytes(read.bytes, tiny);
  EXPECT_TRUE(problems.empty()) << Join(problems);
}

// `aprfs mount` (background mode) must refuse before mounting anything.
void ExpectMountRefused(const std::string& mountpoint, const std::vector<std::string>& args,
                        const std::vector<std::string>& env,
                        const std::vector<std::string>& message_parts, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<std::string> argv = {"mount", mountpoint};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r = RunAprfs(argv, env, 20s);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("aprfs mount: "), std::string::npos) << r.Describe();
  for (const std::string& part : message_parts) {
    EXPECT_NE(r.err.find(part), std::string::npos) << "message lacks \"" << part << "\": " << r.err;
  }
  if (IsAprfsMounted(mountpoint)) {
    ADD_FAILURE() << "mounted despite the error";
    umount2(mountpoint.c_str(), MNT_DETACH);
  }
}

TEST_F(RemoteHubTest, BadRepoValuesAndBadConfigFilesAreRefused) {
  const std::string mnt = Dir("mnt");
  const std::vector<std::string> env = Env("http://127.0.0.1:9");  // nothing is contacted
  for (const std::string bad : {"org/na me", "org/", "/name", "org/name@", "org/name@../x",
                                "a--b/c", "org/name/extra", "org/name@/abs", "org/.name", ""}) {
    ExpectMountRefused(mnt, {"--repo", bad, "--no-hf-cache", "--cache-dir", Dir("cache")}, env,
                       {"--repo", "ORG/NAME"}, "--repo \"" + bad + "\"");
  }
  struct BadConfig {
    std::string what, text, expected;
  };
  const std::vector<BadConfig> configs = {
      {"not JSON", "{\"repos\": [\"org/tiny\"", "not valid JSON"},
      {"not an object", "[\"org/tiny\"]", "must be a JSON object"},
      {"unknown key", "{\"repo\": [\"org/tiny\"]}", "unknown key \"repo\""},
      {"repos not a list", "{\"repos\": \"org/tiny\"}", "\"repos\" must be a list of strings"},
      {"a repo not a string", "{\"repos\": [42]}", "\"repos\" must be a list of strings"},
      {"bad repo id", "{\"repos\": [\"org/na me\"]}", "org/na me"},
      {"bad max_connections", "{\"repos\": [\"org/tiny\"], \"max_connections\": 0}",
       "max_connections"},
      {"bad cache_size", "{\"repos\": [\"org/tiny\"], \"cache_size\": \"lots\"}", "lots"},
      {"cache_dir not a string", "{\"repos\": [\"org/tiny\"], \"cache_dir\": 3}",
       "\"cache_dir\" must be a string"},
  };
  int n = 0;
  for (const BadConfig& c : configs) {
    const std::string file = root() + "/bad-" + std::to_string(n++) + ".json";
    WriteText(file, c.text);
    ExpectMountRefused(mnt, {"--config", file}, env, {c.expected}, "config: " + c.what);
  }
  ExpectMountRefused(mnt, {"--config", root() + "/no-such-config.json"}, env,
                     {"no-such-config.json", "cannot be read"}, "config: missing file");
  ExpectMountRefused(mnt, {"--repo", "org/tiny", "--cache-size", "lots"}, env,
                     {"--cache-size lots"}, "--cache-size lots");
}

}  // namespace
}  // namespace aprfs_rtest
