// Which views a folder lists (--views, -o views=, the config file's "views"; default apr,q4k),
// that every view opens by name whatever is listed, and which names do not resolve.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "tests/integration/view_fixture.h"

namespace aprfs_itest {
namespace {

class ViewListingTest : public ViewTest {
 protected:
  void SetUp() override {
    ViewTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(MakeModel("qt", {"--preset", "quant-tiny"}));
  }

  // The mounted view's bytes, read once, equal the reference.
  void ExpectOpensByName(const std::string& view) {
    std::string got, error;
    ASSERT_TRUE(ReadWholeFile(MP(ViewFileName("qt", view)), &got, &error)) << view << ": " << error;
    EXPECT_EQ(FirstDifference(got, ExpectedBytes("qt", view)), std::nullopt) << view;
  }

  // Mounts with `args`, compares the listing, unmounts.
  void ExpectListing(const std::vector<std::string>& args, const std::vector<std::string>& listed) {
    SCOPED_TRACE(::testing::PrintToString(args));
    ASSERT_NO_FATAL_FAILURE(MountViews(args));
    EXPECT_EQ(ListDir(mountpoint()), listed);
    UnmountCleanly();
  }

  std::string WriteConfig(const nlohmann::json& config) {
    const std::string path = work_dir() + "/config.json";
    tw::WriteFile(path, config.dump());
    return path;
  }
};

TEST_F(ViewListingTest, DefaultListsAprAndQ4kAndEveryOtherViewStillOpensByName) {
  PrepareReferences({{"qt", "f16"}, {"qt", "int8"}, {"qt", "int4"}, {"qt", "safetensors"}});
  ASSERT_NO_FATAL_FAILURE(MountViews());
  const std::vector<std::string> listed = {"qt.apr", "qt.q4k.apr"};
  EXPECT_EQ(ListDir(mountpoint()), listed);
  for (const char* view : {"f16", "int8", "int4", "safetensors"}) ExpectOpensByName(view);
  // Opening them does not list them.
  EXPECT_EQ(ListDir(mountpoint()), listed);
}

TEST_F(ViewListingTest, ViewsAllListsEveryViewWithItsSize) {
  PrepareReferences({{"qt", "q4k"}, {"qt", "f16"}, {"qt", "int8"}, {"qt", "int4"}});
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  EXPECT_EQ(ListDir(mountpoint()),
            (std::vector<std::string>{"qt.apr", "qt.f16.apr", "qt.int4.apr", "qt.int8.apr",
                                      "qt.q4k.apr", "qt.safetensors"}));
  for (const std::string& view : kQuantizedViews) {
    EXPECT_EQ(FileSize(MP(ViewFileName("qt", view))), ExpectedBytes("qt", view).size()) << view;
  }
}

TEST_F(ViewListingTest, MountOptionViewsTakesColonPlusAndCommaSeparators) {
  ExpectListing({"-o", "views=apr:f16"}, {"qt.apr", "qt.f16.apr"});
  ExpectListing({"-o", "views=q4k+int8"}, {"qt.int8.apr", "qt.q4k.apr"});
  ExpectListing({"--views", "int4,apr"}, {"qt.apr", "qt.int4.apr"});
  ExpectListing({"--views", "fp16+q4_k"}, {"qt.f16.apr", "qt.q4k.apr"});  // aprender's spellings
  ExpectListing({"--views", "safetensors,apr"}, {"qt.apr", "qt.safetensors"});
  // Not listed, the .apr still opens by name.
  ASSERT_NO_FATAL_FAILURE(MountViews({"-o", "views=int8"}));
  EXPECT_EQ(ListDir(mountpoint()), std::vector<std::string>{"qt.int8.apr"});
  std::string got, error;
  EXPECT_TRUE(ReadWholeFile(MP("qt.apr"), &got, &error)) << error;
}

TEST_F(ViewListingTest, ConfigFileViewsListsThemAndTheCommandLineWins) {
  const std::string as_list = WriteConfig({{"views", {"int8", "int4"}}});
  ExpectListing({"--config", as_list}, {"qt.int4.apr", "qt.int8.apr"});
  const std::string as_text = WriteConfig({{"views", "apr+f16"}});
  ExpectListing({"--config", as_text}, {"qt.apr", "qt.f16.apr"});
  ExpectListing({"--config", as_text, "--views", "q4k"}, {"qt.q4k.apr"});
}

TEST_F(ViewListingTest, UnknownViewSuffixesAndSpellingsDoNotResolve) {
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  for (const char* name :
       {"qt.q8.apr", "qt.fp16.apr", "qt.q4_k.apr", "qt.Q4K.apr", "qt.q4k", "qt.apr.q4k",
        "qt..apr", ".q4k.apr", "qt.q4k.q4k.apr", "qt.apr.apr", "qt.int4.int8.apr", "qt.all.apr",
        "other.q4k.apr", "qt.safetensors.apr", "qt.SAFETENSORS", "qt.q4k.safetensors",
        "other.safetensors", ".safetensors", "qt.apr.safetensors"}) {
    struct stat st;
    errno = 0;
    EXPECT_NE(stat(MP(name).c_str(), &st), 0) << name << " resolves";
    EXPECT_EQ(errno, ENOENT) << name;
  }
  // The real names still do.
  for (const char* view : {"apr", "q4k", "f16", "int8", "int4", "safetensors"}) {
    EXPECT_GT(FileSize(MP(ViewFileName("qt", view))), 0u) << view;
  }
}

TEST_F(ViewListingTest, UnknownViewInOptionsOrConfigRefusesToMount) {
  const std::string bad_config = WriteConfig({{"views", {"apr", "q5"}}});
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--views", "q5"}, {"-o", "views=apr:bogus"},
        {"--config", bad_config}}) {
    std::vector<std::string> argv = {"mount", mountpoint(), "-f", "--no-hf-cache",
                                     "--source", models_dir(), "--cache-dir", CacheDir()};
    argv.insert(argv.end(), bad.begin(), bad.end());
    ProcResult r = RunAprfs(argv, 20s);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_FALSE(r.timed_out) << "mounted with an unknown view: " << r.Describe();
    EXPECT_NE((r.out + r.err).find("unknown view"), std::string::npos) << r.Describe();
    EXPECT_FALSE(IsAprfsMounted(mountpoint()));
  }
}

TEST_F(ViewListingTest, ModelNamedLikeAViewOwnsThatNameAndItIsListedOnce) {
  // A model folder "qt.q4k" beside "qt": "qt.q4k.apr" is that model's .apr (its own name comes
  // first), so qt's q4k view is neither listed nor reachable under that name.
  ASSERT_NO_FATAL_FAILURE(MakeModel("qt.q4k", {"--preset", "quant-tiny", "--layout", "single"}));
  ASSERT_NO_FATAL_FAILURE(MountViews({"--views", "all"}));
  const std::vector<std::string> names = ListDir(mountpoint());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "qt.apr", "qt.f16.apr", "qt.int4.apr", "qt.int8.apr", "qt.q4k.apr",
                       "qt.q4k.f16.apr", "qt.q4k.int4.apr", "qt.q4k.int8.apr",
                       "qt.q4k.q4k.apr", "qt.q4k.safetensors", "qt.safetensors"}));
  EXPECT_EQ(FileSize(MP("qt.q4k.apr")), FileSize(MP("qt.apr"))) << "the plain .apr of qt.q4k";
  ProcResult check = RunAprcheck(MP("qt.q4k.apr"), Model("qt.q4k"));
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
}

}  // namespace
}  // namespace aprfs_itest
