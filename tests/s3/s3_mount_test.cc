// Models in an S3 bucket (issue 13), mounted from a real Ceph radosgw on loopback: exact bytes of
// every view through read and mmap, the AWS credential conventions (environment, profiles,
// endpoint settings, anonymous access, a private CA over TLS), the store's refusals as clear errors, an object
// replaced mid-read (EIO, never a mix of versions), the gateway stopped mid-read (EIO, then
// reads again once it is back), models added to and removed from the bucket, and the cache
// reused by a remount while the store is down.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/remote/remote_fixture.h"
#include "tests/remote/remote_test_util.h"
#include "tests/s3/radosgw.h"

namespace aprfs_rtest {
namespace {

using aprfs::testing::RadosGw;

class S3MountTest : public RemoteTest {
 protected:
  void SetUp() override {
    RemoteTest::SetUp();
    SetWatchdog(std::chrono::seconds(300));
    gw_ = &RadosGw::Shared();
    home_ = Dir("home");
    // Bucket names are per test: one radosgw serves the whole test process.
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    bucket_ = "t" + std::to_string(++counter_) + "-" + Lower(test.substr(0, 40));
    gw_->CreateBucket(bucket_);
  }

  static std::string Lower(std::string text) {
    for (char& c : text) c = std::isalnum(static_cast<unsigned char>(c)) ? std::tolower(c) : '-';
    return text;
  }

  // The tester's keys in the environment, HOME without ~/.aws.
  std::vector<std::string> TesterEnv(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> env = {"HOME=" + home_,
                                    "AWS_ACCESS_KEY_ID=" + RadosGw::AccessKey(),
                                    "AWS_SECRET_ACCESS_KEY=" + RadosGw::SecretKey()};
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  // mount arguments for s3://bucket/models with this test's cache.
  std::vector<std::string> MountArgs(const std::string& cache, const std::string& source = "") const {
    return {"--source", source.empty() ? "s3://" + bucket_ + "/models" : source,
            "--s3-endpoint", gw_->Endpoint(), "--no-hf-cache", "--cache-dir", cache,
            "--views", "all"};
  }

  // Uploads a model folder as models/NAME/.
  void Upload(const std::string& dir, const std::string& name) {
    gw_->UploadFolder(bucket_, "models/" + name + "/", dir);
  }

  std::string ReadAll(const std::string& path) {
    std::string bytes, error;
    EXPECT_TRUE(ReadWholeFile(path, &bytes, &error)) << path << ": " << error;
    return bytes;
  }

  std::string MapAll(const std::string& path) {
    Fd fd(path, O_RDONLY);
    const uint64_t size = FileSize(path);
    if (!fd.ok() || size == 0) return "";
    void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (map == MAP_FAILED) return "mmap failed: " + std::string(std::strerror(errno));
    std::string bytes(static_cast<const char*>(map), size);
    munmap(map, size);
    return bytes;
  }

  // `aprfs mount` that must fail: its stderr.
  std::string MountFails(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    const std::string mountpoint = Dir("refused-" + std::to_string(++refusals_));
    std::vector<std::string> argv = {"mount", mountpoint};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcResult result = RunAprfs(argv, env);
    EXPECT_EQ(result.exit_code, 1) << result.Describe();
    if (IsAprfsMounted(mountpoint)) RunCommand({"umount", "-l", mountpoint}, 10s);
    return result.err;
  }

  RadosGw* gw_ = nullptr;
  std::string home_, bucket_;
  int refusals_ = 0;
  static inline int counter_ = 0;
};

// ----- bytes ----------------------------------------------------------------------------------

TEST_F(S3MountTest, EveryViewHasTheBytesOfTheSameModelMountedFromAFolder) {
  const std::string dir = Dir("src") + "/qwen-tiny";
  ProcResult made = RunCommand({"python3", ToolsDir() + "/make_model.py", "--preset", "qwen2-tiny",
                                "--shards", "3", dir},
                               120s);
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  Upload(dir, "qwen-tiny");
  AprfsMount* s3 = Mount("s3", MountArgs(Dir("cache")), TesterEnv());
  ASSERT_NE(s3, nullptr);
  AprfsMount* local = Mount("local", {"--source", dir, "--no-hf-cache", "--cache-dir",
                                      Dir("local-cache"), "--views", "all"},
                            TesterEnv());
  ASSERT_NE(local, nullptr);
  std::vector<std::string> files = ListDir(local->mountpoint());
  ASSERT_GE(files.size(), 12u) << Join(files, " ");
  EXPECT_EQ(ListDir(s3->mountpoint()), files);
  const SourceModel model = ParseSourceModel(dir);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string bytes = ReadAll(s3->Path(file));
    EXPECT_EQ(MapAll(s3->Path(file)), bytes) << "mmap and read disagree";
    if (file == "qwen-tiny.apr") {
      // Its metadata names the source (s3://...): checked against the shards themselves.
      EXPECT_EQ(Join(CheckAprBytes(bytes, model)), "");
    } else {
      EXPECT_TRUE(bytes == ReadAll(local->Path(file))) << "differs from the folder's";
    }
  }
  const std::string log = s3->LogText();
  EXPECT_EQ(log.find(RadosGw::SecretKey()), std::string::npos) << "the secret is in the log";
}

TEST_F(S3MountTest, ShardsOfSeveralChunksReadInAnyOrderAreExact) {
  const SourceModel& model = BigModel();
  Upload(model.dir, "big");
  AprfsMount* mount = Mount("mnt", MountArgs(Dir("cache")), TesterEnv());
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  const AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  // Backwards through the middle of the last shard first, then the whole file.
  for (uint64_t within : {uint64_t{20000000}, uint64_t{9000000}, uint64_t{1}}) {
    std::string got;
    const uint64_t at = AprOffsetOf(layout, "blk.2.weight", within);
    ASSERT_EQ(ReadRange(path, at, 1000, &got), 0);
    EXPECT_TRUE(got == model.TensorBytes("blk.2.weight").substr(within, 1000)) << within;
  }
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(path), model)), "");
}

// ----- the bucket changing --------------------------------------------------------------------

// Models put into or removed from the bucket appear and go within --s3-rescan (a lookup that
// finds the listing older lists again in the background); while the store is down the models
// listed before stay, and what the cache holds reads on.
TEST_F(S3MountTest, ModelsAddedToOrRemovedFromTheBucketAppearAndGoWithinTheRescanInterval) {
  const SourceModel& model = TinyModel();
  Upload(model.dir, "first");
  std::vector<std::string> args = MountArgs(Dir("cache"));
  args.insert(args.end(), {"--s3-rescan", "1"});
  AprfsMount* mount = Mount("mnt", args, TesterEnv());
  ASSERT_NE(mount, nullptr);
  auto shown = [&](const std::string& name) {
    const std::vector<std::string> files = ListDir(mount->mountpoint());
    return std::find(files.begin(), files.end(), name) != files.end();
  };
  ASSERT_TRUE(shown("first.apr")) << Join(ListDir(mount->mountpoint()), " ");
  EXPECT_FALSE(shown("second.apr"));

  Upload(model.dir, "second");
  EXPECT_TRUE(WaitFor([&] { return shown("second.apr"); }, 60s))
      << Join(ListDir(mount->mountpoint()), " ") << mount->Log();
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("second.apr")), model)), "");

  for (const std::string& key : gw_->ListKeys(bucket_, "models/first/")) {
    gw_->DeleteObject(bucket_, key);
  }
  EXPECT_TRUE(WaitFor([&] { return !shown("first.apr"); }, 60s))
      << Join(ListDir(mount->mountpoint()), " ") << mount->Log();

  // The store down: the listing a lookup asks for fails in the background, and the mount shows
  // and reads what it had.
  gw_->StopGateway();
  EXPECT_TRUE(WaitFor(
      [&] {
        return shown("second.apr") && mount->LogText().find("no answer from") != std::string::npos;
      },
      60s))
      << mount->Log();
  // status.json says why the last listing failed.
  EXPECT_TRUE(WaitFor(
      [&] {
        const json source = ReadStatus(*mount)["s3_sources"][0];
        return source["error"].is_string() &&
               source["error"].get<std::string>().find("no answer from") != std::string::npos;
      },
      60s))
      << ReadStatus(*mount).dump(2);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("second.apr")), model)), "");
  gw_->StartGateway();
}

// A hung store (connections accepted, requests never answered) holds up nothing: the listing
// refresh a lookup starts waits on a thread of its own, while lookups, listings and reads are
// answered from what the mount has.
TEST_F(S3MountTest, AHungStoreHoldsUpNoLookupListingOrRead) {
  const SourceModel& model = TinyModel();
  Upload(model.dir, "tiny");
  std::vector<std::string> args = MountArgs(Dir("cache"));
  args.insert(args.end(), {"--s3-rescan", "1"});
  AprfsMount* mount = Mount("mnt", args, TesterEnv());
  ASSERT_NE(mount, nullptr);
  ASSERT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
  gw_->PauseGateway();
  // Every round is past the rescan interval: the first lookup starts a refresh, which hangs; the
  // later ones find it still running.
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(1200ms);
    const std::vector<std::string> files = ListDir(mount->mountpoint());
    EXPECT_NE(std::find(files.begin(), files.end(), "tiny.apr"), files.end()) << Join(files, " ");
    EXPECT_GT(FileSize(mount->Path("tiny.apr")), 0u);
    EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
  }
  // All answered while the refresh still hung: it gives up only once the store has not answered
  // for the stall timeout (10 s), at every attempt. status.json says it runs.
  EXPECT_EQ(mount->LogText().find("no answer from"), std::string::npos) << mount->Log();
  json status = ReadStatus(*mount);
  ASSERT_EQ(status["s3_sources"].size(), 1u) << status.dump(2);
  const json& source = status["s3_sources"][0];
  EXPECT_EQ(source["uri"], "s3://" + bucket_ + "/models");
  EXPECT_EQ(source["refreshing"], true) << source.dump();
  EXPECT_EQ(source["models"], 1) << source.dump();
  EXPECT_TRUE(source["error"].is_null()) << source.dump();
  const std::string listed_at = source.value("listed_at", "");
  gw_->ResumeGateway();  // the refresh is answered late, and finds what was there
  EXPECT_TRUE(WaitFor(
      [&] {
        const json now = ReadStatus(*mount)["s3_sources"][0];
        return now["refreshing"] == false && now.value("listed_at", "") > listed_at;
      },
      60s))
      << ReadStatus(*mount).dump(2);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
}

// ----- credentials and configuration ------------------------------------------------------------

TEST_F(S3MountTest, ProfilesAndEndpointSettingsOfTheAwsFilesAreFollowed) {
  const SourceModel& model = TinyModel();
  Upload(model.dir, "tiny");
  const std::string aws = home_ + "/.aws";
  std::filesystem::create_directories(aws);
  WriteText(aws + "/credentials", "[default]\naws_access_key_id = WRONG\naws_secret_access_key = "
                                  "WRONG\n\n[models]\naws_access_key_id = " + RadosGw::AccessKey() +
                                      "\naws_secret_access_key = " + RadosGw::SecretKey() + "\n");
  WriteText(aws + "/config", "[profile models]\nregion = us-east-1\nendpoint_url = " +
                                 gw_->Endpoint() + "\ns3 =\n  addressing_style = path\n");
  // No --s3-endpoint: the profile's endpoint_url.
  const std::vector<std::string> args = {"--source", "s3://" + bucket_ + "/models",
                                         "--no-hf-cache", "--cache-dir", Dir("cache")};
  AprfsMount* mount = Mount("mnt", args, {"HOME=" + home_, "AWS_PROFILE=models"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
  // The default profile's keys are wrong: the store says so, naming where they came from.
  std::string err = MountFails(args, {"HOME=" + home_, "AWS_ENDPOINT_URL=" + gw_->Endpoint()});
  EXPECT_NE(err.find("InvalidAccessKeyId"), std::string::npos) << err;
  EXPECT_NE(err.find(aws + "/credentials"), std::string::npos) << err;
  // A profile nobody wrote.
  err = MountFails(args, {"HOME=" + home_, "AWS_PROFILE=nobody"});
  EXPECT_NE(err.find("nobody"), std::string::npos) << err;
}

// A store behind TLS whose certificate a private CA signed: refused with the TLS error while
// nothing names the CA; read with exact bytes once AWS_CA_BUNDLE or the profile's ca_bundle does.
TEST_F(S3MountTest, AStoreBehindTlsWithAPrivateCaIsReadOnlyWithItsCaBundle) {
  const SourceModel& model = TinyModel();
  Upload(model.dir, "tiny");
  ASSERT_EQ(gw_->TlsEndpoint().rfind("https://127.0.0.1:", 0), 0u) << gw_->TlsEndpoint();
  const std::vector<std::string> args = {"--source", "s3://" + bucket_ + "/models",
                                         "--s3-endpoint", gw_->TlsEndpoint(), "--no-hf-cache",
                                         "--cache-dir", Dir("cache")};
  // The system's CAs do not know it.
  std::string err = MountFails(args, TesterEnv());
  EXPECT_NE(err.find("certificate"), std::string::npos) << err;
  EXPECT_NE(err.find("s3://" + bucket_ + "/models"), std::string::npos) << err;

  AprfsMount* mount = Mount("env", args, TesterEnv({"AWS_CA_BUNDLE=" + gw_->CaFile()}));
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
  Unmount(mount);

  // The same CA named by the profile (a fresh cache: every byte comes over TLS again).
  const std::string aws = home_ + "/.aws";
  std::filesystem::create_directories(aws);
  WriteText(aws + "/config", "[default]\nca_bundle = " + gw_->CaFile() + "\n");
  std::vector<std::string> fresh = args;
  fresh.back() = Dir("cache-2");
  mount = Mount("profile", fresh, TesterEnv());
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), model)), "");
  // A bundle that is not there: named, not silently ignored.
  err = MountFails(args, TesterEnv({"AWS_CA_BUNDLE=" + home_ + "/no-such-ca.pem"}));
  EXPECT_NE(err.find(home_ + "/no-such-ca.pem"), std::string::npos) << err;
}

TEST_F(S3MountTest, WrongCredentialsMissingBucketsAndForbiddenBucketsFailTheMountClearly) {
  Upload(TinyModel().dir, "tiny");
  const std::string cache = Dir("cache");
  std::string err = MountFails(MountArgs(cache), TesterEnv({"AWS_SECRET_ACCESS_KEY=not-the-secret"}));
  EXPECT_NE(err.find("SignatureDoesNotMatch"), std::string::npos) << err;
  EXPECT_NE(err.find("s3://" + bucket_ + "/models"), std::string::npos) << err;
  EXPECT_EQ(err.find("not-the-secret"), std::string::npos) << "the secret is in the message";

  err = MountFails(MountArgs(cache, "s3://no-such-bucket-here/models"), TesterEnv());
  EXPECT_NE(err.find("NoSuchBucket"), std::string::npos) << err;
  EXPECT_NE(err.find("s3://no-such-bucket-here/models"), std::string::npos) << err;

  // Another user's private bucket; then no credentials at all.
  err = MountFails(MountArgs(cache), {"HOME=" + home_,
                                      "AWS_ACCESS_KEY_ID=" + RadosGw::OtherAccessKey(),
                                      "AWS_SECRET_ACCESS_KEY=" + RadosGw::OtherSecretKey()});
  EXPECT_NE(err.find("AccessDenied"), std::string::npos) << err;
  err = MountFails(MountArgs(cache), {"HOME=" + home_});
  EXPECT_NE(err.find("AccessDenied"), std::string::npos) << err;
  EXPECT_NE(err.find("AWS_ACCESS_KEY_ID"), std::string::npos) << "no hint at credentials: " << err;

  err = MountFails(MountArgs(cache), TesterEnv({"AWS_ACCESS_KEY_ID="}));
  EXPECT_NE(err.find("AWS_ACCESS_KEY_ID"), std::string::npos) << err;
}

TEST_F(S3MountTest, PublicBucketsMountWithoutCredentials) {
  const std::string bucket = bucket_ + "-public";
  gw_->CreateBucket(bucket, /*public_read=*/true);
  gw_->UploadFolder(bucket, "models/tiny/", TinyModel().dir);
  std::vector<std::string> args = MountArgs(Dir("cache"), "s3://" + bucket + "/models");
  args.push_back("--no-sign-request");
  // Keys in the environment are not used with --no-sign-request (the other user's would be
  // refused: the bucket is not theirs to sign for... but anyone may read it unsigned).
  AprfsMount* mount = Mount("mnt", args, {"HOME=" + home_,
                                         "AWS_ACCESS_KEY_ID=" + RadosGw::OtherAccessKey(),
                                         "AWS_SECRET_ACCESS_KEY=wrong"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(mount->Path("tiny.apr")), TinyModel())), "");
}

TEST_F(S3MountTest, AShardTheIndexNamesButTheBucketLacksIsNamedInTheLog) {
  const SourceModel copy = CopyModel(BigModel(), Dir("src") + "/broken");
  Upload(copy.dir, "broken");
  gw_->DeleteObject(bucket_, "models/broken/" + copy.shards[1]);
  AprfsMount* mount = Mount("mnt", MountArgs(Dir("cache")), TesterEnv());
  ASSERT_NE(mount, nullptr);
  EXPECT_FALSE(PathExists(mount->Path("broken.apr")));
  EXPECT_TRUE(WaitFor([&] { return mount->LogText().find(copy.shards[1]) != std::string::npos; },
                      20s))
      << mount->Log();
  EXPECT_NE(mount->LogText().find("is not an object of s3://" + bucket_ + "/models/broken"),
            std::string::npos)
      << mount->Log();
}

// ----- versions and faults -----------------------------------------------------------------------

TEST_F(S3MountTest, AnObjectReplacedMidReadGivesEioAndARemountReadsTheNewVersion) {
  const SourceModel copy = CopyModel(BigModel(), Dir("src") + "/big");
  Upload(copy.dir, "big");
  const std::string cache = Dir("cache");
  AprfsMount* mount = Mount("mnt", MountArgs(cache), TesterEnv());
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  const AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  std::string got;
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.2.weight", 0), 4096, &got), 0);

  // The last shard changes in the bucket: one byte, same size.
  const std::string shard = copy.ShardPath(copy.shards[2]);
  std::string bytes = SlurpOrEmpty(shard);
  const uint64_t changed_at = copy.tensors.at("blk.2.weight").shard_offset + 19000000;
  bytes[changed_at] = static_cast<char>(bytes[changed_at] ^ 0x5a);
  WriteText(shard, bytes);
  gw_->PutFile(bucket_, "models/big/" + copy.shards[2], shard);

  // Its chunks not read yet are refused (412), and then every read of it fails.
  EXPECT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.2.weight", 19000000), 4096, &got), EIO);
  EXPECT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.2.weight", 0), 4096, &got), EIO);
  EXPECT_NE(mount->LogText().find("changed"), std::string::npos) << mount->Log();
  // The other shards still read.
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.0.weight", 5), 1000, &got), 0);
  EXPECT_TRUE(got == copy.TensorBytes("blk.0.weight").substr(5, 1000));
  Unmount(mount);

  // A new mount lists the new version, and reads it whole: nothing of the old one is mixed in.
  AprfsMount* again = Mount("again", MountArgs(cache), TesterEnv());
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Join(CheckAprBytes(ReadAll(again->Path("big.apr")), ParseSourceModel(copy.dir))), "");
}

TEST_F(S3MountTest, TheGatewayStoppedMidReadGivesEioAndReadsResumeWhenItIsBack) {
  const SourceModel& model = BigModel();
  Upload(model.dir, "big");
  AprfsMount* mount = Mount("mnt", MountArgs(Dir("cache")), TesterEnv());
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("big.apr");
  const AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "");
  std::string got;
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "blk.0.weight", 0), 4096, &got), 0);

  gw_->StopGateway();
  double seconds = 0;
  const uint64_t far = AprOffsetOf(layout, "blk.1.weight", 17000000);
  EXPECT_EQ(ReadRange(path, far, 4096, &got, &seconds), EIO);
  // Bounded by the retries (about 10 s) and the read deadline (60 s); wide for a busy machine.
  EXPECT_LT(seconds, 90) << "the read waited too long";
  gw_->StartGateway();
  ASSERT_EQ(ReadRange(path, far, 4096, &got), 0);
  EXPECT_TRUE(got == model.TensorBytes("blk.1.weight").substr(17000000, 4096));
  EXPECT_TRUE(mount->Alive());
}

TEST_F(S3MountTest, ARemountWhileTheStoreIsDownServesWhatTheCacheHolds) {
  const SourceModel& model = TinyModel();
  Upload(model.dir, "tiny");
  const std::string cache = Dir("cache");
  AprfsMount* mount = Mount("mnt", MountArgs(cache), TesterEnv());
  ASSERT_NE(mount, nullptr);
  const std::string first = ReadAll(mount->Path("tiny.apr"));
  EXPECT_EQ(Join(CheckAprBytes(first, model)), "");
  Unmount(mount);

  gw_->StopGateway();
  AprfsMount* offline = Mount("offline", MountArgs(cache), TesterEnv());
  ASSERT_NE(offline, nullptr);
  EXPECT_TRUE(ReadAll(offline->Path("tiny.apr")) == first);
  EXPECT_NE(offline->LogText().find("listing kept by an earlier mount"), std::string::npos)
      << offline->Log();
  // status.json says so too: never listed by this mount, and why.
  const json source = ReadStatus(*offline)["s3_sources"][0];
  EXPECT_TRUE(source["listed_at"].is_null()) << source.dump();
  const std::string error = source["error"].is_string() ? source["error"].get<std::string>() : "";
  EXPECT_NE(error.find("no answer from"), std::string::npos) << source.dump();
  EXPECT_NE(error.find("listing kept by an earlier mount"), std::string::npos) << source.dump();
  gw_->StartGateway();
}

// ----- many nodes ---------------------------------------------------------------------------------

// Bytes of objects radosgw has sent since it started: its own counter, not ours.
uint64_t GatewayBytesSent(const RadosGw& gw) {
  ProcResult dump = RunCommand({"ceph", "--admin-daemon", gw.Dir() + "/run/client.rgw.gw.asok",
                                "perf", "dump"},
                               30s);
  EXPECT_EQ(dump.exit_code, 0) << dump.Describe();
  try {
    return json::parse(dump.out).at("rgw").at("get_b").get<uint64_t>();
  } catch (const json::exception& e) {
    ADD_FAILURE() << "perf dump: " << e.what() << "\n" << dump.out.substr(0, 2000);
    return 0;
  }
}

TEST_F(S3MountTest, EachNodePullsOneCopyAndMountsSharingACachePullOneTogether) {
  const SourceModel& model = BigModel();
  Upload(model.dir, "big");
  uint64_t model_bytes = 0;
  for (const std::string& shard : model.shards) model_bytes += model.ShardSize(shard);
  // Three "nodes": two with a cache each, one running two mounts over one cache.
  const std::string shared = Dir("shared-cache");
  std::vector<AprfsMount*> mounts = {
      Mount("node1", MountArgs(Dir("cache1")), TesterEnv()),
      Mount("node2", MountArgs(Dir("cache2")), TesterEnv()),
      Mount("node3a", MountArgs(shared), TesterEnv()),
      Mount("node3b", MountArgs(shared), TesterEnv()),
  };
  for (AprfsMount* mount : mounts) ASSERT_NE(mount, nullptr);
  const uint64_t before = GatewayBytesSent(*gw_);
  std::vector<std::string> bytes(mounts.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < mounts.size(); ++i) {
    readers.emplace_back([&, i] {
      std::string error;
      if (!ReadWholeFile(mounts[i]->Path("big.apr"), &bytes[i], &error)) bytes[i] = error;
    });
  }
  for (std::thread& reader : readers) reader.join();
  const uint64_t sent = GatewayBytesSent(*gw_) - before;
  for (size_t i = 0; i < mounts.size(); ++i) {
    EXPECT_EQ(Join(CheckAprBytes(bytes[i], model)), "") << mounts[i]->mountpoint();
  }
  // One copy per node, the two mounts of node 3 together included; besides, each mount read
  // each shard's header (one range of 64 KiB) and the index when it planned the model.
  const uint64_t index_bytes = FileSize(model.dir + "/model.safetensors.index.json");
  std::fprintf(stderr, "3 nodes, 4 mounts: the store sent %.3f copies of the model\n",
               static_cast<double>(sent) / static_cast<double>(model_bytes));
  EXPECT_LE(sent, 3 * model_bytes +
                     mounts.size() * (model.shards.size() * kHeaderRead + index_bytes));
  EXPECT_GE(sent, 3 * model_bytes);
}

}  // namespace
}  // namespace aprfs_rtest
