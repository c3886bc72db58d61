// A Hub mirror or caching proxy (HF_ENDPOINT pointing at it) answers with validators of its own,
// not the sha256 ETag of the Hub's CDN: hub_fixture.py --cdn-etag plays one (nginx's own strong
// ETag, a weak ETag, Last-Modified only, or no validator at all). aprfs pins the validator of the
// first answer for the file, sends it back in If-Range (strong ETags and dates), and a file
// replaced on the mirror while it is read fails with EIO: never a mix of the two versions, in
// one mount or across mounts sharing the chunk cache. The sha256 of the complete file is still
// what proves the bytes before it is published.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>

#include "tests/remote/remote_test_util.h"

namespace aprfs_rtest {
namespace {

constexpr char kRepo[] = "mirror/large";
constexpr char kShard[] = "model.safetensors";

struct MirrorCase {
  std::string mode;      // hub_fixture.py --cdn-etag
  std::string if_range;  // what later requests must carry: "etag", "date", or "" (nothing)
};

// For gtest's GetParam() lines, which otherwise dump the struct's bytes.
void PrintTo(const MirrorCase& c, std::ostream* out) { *out << c.mode; }

// The validators the CDN gives for a file (headers of a range answer, redirects followed).
struct Validators {
  std::string etag, last_modified;
};

Validators CdnValidators(const HubFixture& hub, const std::string& repo, const std::string& path) {
  ProcResult r = Curl({"-s", "-L", "-r", "0-0", "-D", "-", "-o", "/dev/null",
                       hub.endpoint() + "/" + repo + "/resolve/main/" + path});
  Validators v;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("HTTP/", 0) == 0) v = {};  // the last answer's headers only
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    std::string value = line.substr(std::min(line.size(), colon + 2));
    if (name == "etag") v.etag = value;
    if (name == "last-modified") v.last_modified = value;
  }
  return v;
}

// The mirror gets a new version of the file: same size and safetensors header, every tensor byte
// inverted, and another mtime (so its ETag and Last-Modified change). A new inode, renamed into
// place as a mirror sync does. The new bytes are also written to `also` when given.
void ReplaceOnTheMirror(const SourceModel& model, const std::string& also = "") {
  const std::string path = model.ShardPath(kShard);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 8u);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  for (size_t i = 8 + header; i < bytes.size(); ++i) bytes[i] = static_cast<char>(~bytes[i]);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const std::string temp = path + ".sync";
  WriteText(temp, bytes);
  struct timespec times[2] = {{st.st_mtim.tv_sec + 1000, 0}, {st.st_mtim.tv_sec + 1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, temp.c_str(), times, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::rename(temp.c_str(), path.c_str()), 0) << std::strerror(errno);
  if (!also.empty()) WriteText(also, bytes);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The daemon fails a read, then logs why: waits (10 s at most) for that line.
void AwaitChangeLogged(AprfsMount& mount) {
  WaitFor([&] { return Count(mount.LogText(), "changed on the server") > 0; }, 10s);
}

class RemoteMirrorTest : public RemoteTest, public ::testing::WithParamInterface<MirrorCase> {
 protected:
  AprfsMount* MountMirror(const std::string& name, const HubFixture& hub,
                          const std::string& cache, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--repo", kRepo, "--cache-dir", cache};
    args.insert(args.end(), extra.begin(), extra.end());
    return Mount(name, args, Env(hub.endpoint()));
  }
  // A few KiB of the big tensor 1 MiB in (chunk 0), with O_DIRECT: exactly one download.
  static int ReadInChunk0(const std::string& path, const AprLayout& layout, std::string* got) {
    return ReadRange(path, AprOffsetOf(layout, "l.weight", 1 << 20), 4096, got);
  }
};

class RemoteMirrorBytesTest : public RemoteMirrorTest {};
class RemoteMirrorChangeTest : public RemoteMirrorTest {};

TEST_P(RemoteMirrorBytesTest, ExactBytesOfTheAprAndTheValidatorSentBack) {
  SetWatchdog(180s);
  const MirrorCase& c = GetParam();
  const SourceModel& model = LargeSingleModel();
  HubFixture& hub = StartHub("hub", {"--repo", std::string(kRepo) + "=" + model.dir,
                                     "--cdn-etag", c.mode});
  const std::string sha = hub.Sha(kRepo, kShard);
  const uint64_t size = model.ShardSize(kShard);
  // The mirror really gives its own validators.
  const Validators given = CdnValidators(hub, kRepo, kShard);
  if (c.mode == "sha256") {
    EXPECT_EQ(given.etag, "\"" + sha + "\"");
  }
  if (c.mode == "nginx") {
    EXPECT_NE(given.etag, "") << "nginx gave no ETag";
    EXPECT_NE(given.etag, "\"" + sha + "\"");
    EXPECT_NE(given.etag.rfind("W/", 0), 0u) << given.etag;
  }
  if (c.mode == "weak") {
    EXPECT_EQ(given.etag.rfind("W/\"", 0), 0u) << given.etag;
  }
  if (c.mode == "last-modified" || c.mode == "none") {
    EXPECT_EQ(given.etag, "");
  }
  EXPECT_EQ(given.last_modified.empty(), c.mode == "none") << given.last_modified;

  const std::string cache = Dir("cache"), hf = Dir("hf");
  AprfsMount* mount = MountMirror("mnt", hub, cache, {"--hf-cache", hf});
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("large.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "") << mount->Log();
  // One chunk alone first: its answer is the first contact, which pins the validator.
  std::string got;
  ASSERT_EQ(ReadInChunk0(path, layout, &got), 0) << mount->Log();
  EXPECT_TRUE(got == model.TensorBytes("l.weight").substr(1 << 20, 4096));
  SequentialRead read = ReadSequentially(path);
  ASSERT_EQ(read.error, 0) << (read.error > 0 ? std::strerror(read.error) : "short read") << "\n"
                           << mount->Log();
  std::vector<std::string> problems = CheckAprBytes(read.bytes, model);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  // The sha256 of the complete file proves the bytes: verified, then published.
  EXPECT_TRUE(WaitUntilEveryShardPublished(hf, hub, kRepo, model, 60s)) << mount->Log();
  // Chunks are kept by the file's sha256 (shared with mounts of the Hub itself and other
  // mirrors), never by the mirror's ETag.
  for (const std::string& name : ListDir(cache + "/chunks")) {
    if (name[0] != '.') {
      EXPECT_EQ(name, sha) << "a chunk store not named by the sha256";
    }
  }

  // Every chunk request after the first carries the pinned validator in If-Range (strong ETags
  // and dates); weak ETags and "none" are checked answer by answer instead.
  std::vector<AccessLine> chunks;
  uint64_t covered = 0;  // chunks the requests fetched (a request may span several)
  for (const AccessLine& line : LinesFor(hub.CdnLog(), sha)) {
    if (!IsChunkRange(line, size)) continue;
    chunks.push_back(line);
    covered += ChunksOf(line).size();
  }
  ASSERT_GE(covered, ChunkCount(size)) << Describe(chunks);
  EXPECT_EQ(chunks.front().if_range, "") << "the first request cannot know the validator yet";
  const std::string expected = c.if_range == "etag"   ? given.etag
                               : c.if_range == "date" ? given.last_modified
                                                      : "";
  for (size_t i = 1; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].if_range, expected) << chunks[i].raw;
    EXPECT_EQ(chunks[i].status, 206) << chunks[i].raw;
  }
  const std::string log = mount->LogText();
  EXPECT_EQ(log.find("changed on the server"), std::string::npos) << mount->Log();
  EXPECT_EQ(Count(log, "gives no ETag or Last-Modified"), c.mode == "none" ? 1u : 0u)
      << mount->Log();
}

// "last-modified" -> "last_modified": test names take no dashes.
std::string MirrorCaseName(const ::testing::TestParamInfo<MirrorCase>& info) {
  std::string name = info.param.mode;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Modes, RemoteMirrorBytesTest,
                         ::testing::Values(MirrorCase{"sha256", "etag"}, MirrorCase{"nginx", "etag"},
                                           MirrorCase{"weak", ""},
                                           MirrorCase{"last-modified", "date"},
                                           MirrorCase{"none", ""}),
                         MirrorCaseName);

// The file is replaced on the mirror after a read of its first chunk: the reader still gets the
// first version's bytes from the cache, then EIO where a chunk must come from the mirror (and,
// once the change is found, for every read of the file, cached chunks included); nothing of the
// second version is served, stored or published, and one log line says what happened.
TEST_P(RemoteMirrorChangeTest, FileReplacedMidReadGivesEioNeverMixedBytes) {
  SetWatchdog(180s);
  const MirrorCase& c = GetParam();
  const SourceModel& original = LargeSingleModel();
  const SourceModel model = CopyModel(original, Dir("model"));  // what the mirror serves
  HubFixture& hub = StartHub("hub", {"--repo", std::string(kRepo) + "=" + model.dir,
                                     "--cdn-etag", c.mode});
  const std::string sha = hub.Sha(kRepo, kShard);
  const std::string cache = Dir("cache"), hf = Dir("hf");
  AprfsMount* mount = MountMirror("mnt", hub, cache, {"--hf-cache", hf});
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->Path("large.apr");
  AprLayout layout = ParseAprFile(path);
  ASSERT_EQ(layout.error, "") << mount->Log();
  std::string got;
  ASSERT_EQ(ReadInChunk0(path, layout, &got), 0) << mount->Log();
  const Validators before = CdnValidators(hub, kRepo, kShard);

  ASSERT_NO_FATAL_FAILURE(ReplaceOnTheMirror(model));
  const Validators after = CdnValidators(hub, kRepo, kShard);
  ASSERT_TRUE(after.etag != before.etag || after.last_modified != before.last_modified)
      << "the mirror's validators did not change";

  // The reader goes on: chunk 0 is in the cache (the first version, nothing asked of the mirror
  // yet); chunk 1 is not, and the mirror now has the second version: EIO.
  const std::string weight = original.TensorBytes("l.weight");
  ASSERT_EQ(ReadRange(path, AprOffsetOf(layout, "l.weight", 2 << 20), 4096, &got), 0)
      << mount->Log();
  EXPECT_TRUE(got == weight.substr(2 << 20, 4096)) << "not the first version's bytes";
  const uint64_t in_chunk1 = kChunk + (1 << 20);
  EXPECT_EQ(ReadRange(path, AprOffsetOf(layout, "l.weight", in_chunk1), 4096, &got), EIO)
      << (got == weight.substr(in_chunk1, 4096) ? "the first version's bytes"
                                                : "the second version's bytes");
  // From then on every read fails, even of the chunk in the cache, and a sequential reader
  // gets nothing but the first version before its EIO.
  EXPECT_EQ(ReadInChunk0(path, layout, &got), EIO);
  SequentialRead read = ReadSequentially(path);
  EXPECT_EQ(read.error, EIO) << (read.error == 0 ? "the whole file was read" : "not EIO");
  std::vector<std::string> problems = CheckAprPrefix(read.bytes, layout, original);
  EXPECT_TRUE(problems.empty()) << "bytes of the new version were served:\n" << Join(problems);

  AwaitChangeLogged(*mount);
  const std::string log = mount->LogText();
  EXPECT_EQ(Count(log, "changed on the server"), 1u) << mount->Log();
  const size_t at = log.find("changed on the server");
  const std::string line = at == std::string::npos ? "" : log.substr(log.rfind('\n', at) + 1,
                                                                     log.find('\n', at) - log.rfind('\n', at));
  EXPECT_NE(line.find(kShard), std::string::npos) << "the line does not name the file: " << line;
  EXPECT_NE(line.find("mix of two versions"), std::string::npos) << line;
  EXPECT_NE(line.find(c.if_range == "date" ? "Last-Modified" : "ETag"), std::string::npos) << line;
  if (!c.if_range.empty()) {
    // Found by If-Range: the mirror answered with the whole new file, refused at its headers.
    // nginx logs a request when it ends: the aborted 200 may come a moment after our EIO.
    bool whole = WaitFor(
        [&] {
          for (const AccessLine& l : LinesFor(hub.CdnLog(), sha)) {
            if (l.status == 200 && !l.if_range.empty()) return true;
          }
          return false;
        },
        10s);
    EXPECT_TRUE(whole) << "no 200 answer to an If-Range request:\n" << Describe(hub.CdnLog());
  }

  Unmount(mount);
  const std::string store = StoreDir(cache, sha);
  if (PathExists(store + "/map")) {
    std::vector<std::string> wrong = CheckStoreAgainst(store, original.ShardPath(kShard));
    EXPECT_TRUE(wrong.empty()) << "the chunk cache holds bytes of the new version: " << Join(wrong);
  }
  EXPECT_TRUE(ListDir(hf + "/" + RepoFolder(kRepo) + "/blobs").empty()) << "published";
}

INSTANTIATE_TEST_SUITE_P(Modes, RemoteMirrorChangeTest,
                         ::testing::Values(MirrorCase{"nginx", "etag"}, MirrorCase{"weak", ""},
                                           MirrorCase{"last-modified", "date"}),
                         MirrorCaseName);

// Two mounts share the chunk cache. A has read the first version's chunk 0 when the file is
// replaced on the mirror. B mounts and is served chunk 0 (the first version) from the cache,
// then reads on: it finds the change at chunk 1 and fails, dropping the first version's chunks.
// A never gets a byte of the second version either. A third mount, C, then reads the second
// version whole and exactly. (A mount that contacts the server before it serves anything from
// the cache starts over with the new version at once: C's case.)
TEST_F(RemoteMirrorTest, MountsSharingTheCacheNeverMixVersionsAndANewMountReadsTheNewOne) {
  SetWatchdog(240s);
  const SourceModel& original = LargeSingleModel();
  const SourceModel model = CopyModel(original, Dir("model"));
  HubFixture& hub = StartHub("hub", {"--repo", std::string(kRepo) + "=" + model.dir,
                                     "--cdn-etag", "nginx"});
  const std::string cache = Dir("cache");
  AprfsMount* a = MountMirror("a", hub, cache, {"--no-hf-cache"});
  ASSERT_NE(a, nullptr);
  AprLayout layout = ParseAprFile(a->Path("large.apr"));
  ASSERT_EQ(layout.error, "") << a->Log();
  std::string got;
  ASSERT_EQ(ReadInChunk0(a->Path("large.apr"), layout, &got), 0) << a->Log();

  const std::string v2_dir = Dir("v2");
  ASSERT_NO_FATAL_FAILURE(ReplaceOnTheMirror(model, v2_dir + "/" + kShard));
  const SourceModel v2 = ParseSourceModel(v2_dir);

  AprfsMount* b = MountMirror("b", hub, cache, {"--no-hf-cache"});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(ReadInChunk0(b->Path("large.apr"), layout, &got), 0) << b->Log();
  EXPECT_TRUE(got == original.TensorBytes("l.weight").substr(1 << 20, 4096));
  SequentialRead read_b = ReadSequentially(b->Path("large.apr"));
  EXPECT_EQ(read_b.error, EIO);
  std::vector<std::string> problems = CheckAprPrefix(read_b.bytes, layout, original);
  EXPECT_TRUE(problems.empty()) << "B mixed in the new version:\n" << Join(problems);
  AwaitChangeLogged(*b);
  EXPECT_EQ(Count(b->LogText(), "changed on the server"), 1u) << b->Log();

  // A: the first version's chunks are gone, the mirror has only the second: EIO, never its bytes.
  const uint64_t in_chunk1 = AprOffsetOf(layout, "l.weight", kChunk + (1 << 20));
  EXPECT_EQ(ReadRange(a->Path("large.apr"), in_chunk1, 4096, &got), EIO)
      << (got == v2.TensorBytes("l.weight").substr(kChunk + (1 << 20), 4096) ? "v2 bytes" : "");
  EXPECT_EQ(ReadInChunk0(a->Path("large.apr"), layout, &got), EIO);
  AwaitChangeLogged(*a);
  EXPECT_EQ(Count(a->LogText(), "changed on the server"), 1u) << a->Log();
  Unmount(b);

  AprfsMount* c = MountMirror("c", hub, cache, {"--no-hf-cache"});
  ASSERT_NE(c, nullptr);
  SequentialRead read_c = ReadSequentially(c->Path("large.apr"));
  ASSERT_EQ(read_c.error, 0) << c->Log();
  problems = CheckAprBytes(read_c.bytes, v2);
  EXPECT_TRUE(problems.empty()) << Join(problems);
  EXPECT_EQ(c->LogText().find("changed on the server"), std::string::npos) << c->Log();
}

}  // namespace
}  // namespace aprfs_rtest
