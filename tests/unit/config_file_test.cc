// The JSON config file (fs/config_file.h): every key, every wrong type, unknown keys, files
// that are not JSON objects, and the default location.
#include "fs/cli/config_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

using testing::TempDir;
using testing::WriteFile;

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& json) {
    std::string path = temp_ / ("config" + std::to_string(count_++) + ".json");
    WriteFile(path, json);
    return path;
  }
  // The error message for `json`, or "" when it loads.
  std::string ErrorOf(const std::string& json) {
    std::string path = Write(json);
    try {
      LoadConfigFile(path);
      return "";
    } catch (const std::runtime_error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << "the message does not name the file: " << what;
      return what;
    }
  }

  TempDir temp_;
  int count_ = 0;
};

TEST_F(ConfigFileTest, LoadsEveryKey) {
  ConfigFile config = LoadConfigFile(Write(R"({
    "repos": ["microsoft/phi-4", "Qwen/Qwen2.5-7B-Instruct@main"],
    "sources": ["/srv/models", "/data/more"],
    "hf_cache": "/var/cache/hf",
    "no_hf_cache": true,
    "cache_dir": "/var/cache/aprfs",
    "cache_size": "200G",
    "max_connections": 8
  })"));
  EXPECT_EQ(config.repos, (std::vector<std::string>{"microsoft/phi-4", "Qwen/Qwen2.5-7B-Instruct@main"}));
  EXPECT_EQ(config.sources, (std::vector<std::string>{"/srv/models", "/data/more"}));
  EXPECT_EQ(config.hf_cache, "/var/cache/hf");
  EXPECT_EQ(config.no_hf_cache, true);
  EXPECT_EQ(config.cache_dir, "/var/cache/aprfs");
  EXPECT_EQ(config.cache_size, "200G");
  EXPECT_EQ(config.max_connections, 8u);
}

TEST_F(ConfigFileTest, EmptyObjectLeavesEverythingUnset) {
  ConfigFile config = LoadConfigFile(Write("{}"));
  EXPECT_TRUE(config.repos.empty());
  EXPECT_TRUE(config.sources.empty());
  EXPECT_FALSE(config.hf_cache);
  EXPECT_FALSE(config.no_hf_cache);
  EXPECT_FALSE(config.cache_dir);
  EXPECT_FALSE(config.cache_size);
  EXPECT_FALSE(config.max_connections);
}

TEST_F(ConfigFileTest, CacheSizeMayBeANumberOfBytes) {
  EXPECT_EQ(LoadConfigFile(Write(R"({"cache_size": 1073741824})")).cache_size, "1073741824");
  EXPECT_EQ(LoadConfigFile(Write(R"({"no_hf_cache": false})")).no_hf_cache, false);
  EXPECT_EQ(LoadConfigFile(Write(R"({"max_connections": 1})")).max_connections, 1u);
  EXPECT_EQ(LoadConfigFile(Write(R"({"max_connections": 256})")).max_connections, 256u);
  EXPECT_TRUE(LoadConfigFile(Write(R"({"repos": []})")).repos.empty());
}

TEST_F(ConfigFileTest, WrongTypesNameTheKey) {
  struct Case {
    const char* json;
    const char* key;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"repos": "microsoft/phi-4"})", "repos"},
           {R"({"repos": ["a/b", 3]})", "repos"},
           {R"({"repos": {"a": "b"}})", "repos"},
           {R"({"repos": null})", "repos"},
           {R"({"sources": "/srv"})", "sources"},
           {R"({"sources": [["/srv"]]})", "sources"},
           {R"({"hf_cache": 1})", "hf_cache"},
           {R"({"hf_cache": ["/x"]})", "hf_cache"},
           {R"({"no_hf_cache": "yes"})", "no_hf_cache"},
           {R"({"no_hf_cache": 1})", "no_hf_cache"},
           {R"({"cache_dir": false})", "cache_dir"},
           {R"({"cache_dir": null})", "cache_dir"},
           {R"({"cache_size": true})", "cache_size"},
           {R"({"cache_size": -1})", "cache_size"},
           {R"({"cache_size": 1.5})", "cache_size"},
           {R"({"cache_size": ["200G"]})", "cache_size"},
           {R"({"max_connections": "8"})", "max_connections"},
           {R"({"max_connections": 0})", "max_connections"},
           {R"({"max_connections": 257})", "max_connections"},
           {R"({"max_connections": -1})", "max_connections"},
           {R"({"max_connections": 8.5})", "max_connections"},
           {R"({"max_connections": 4294967304})", "max_connections"},
       }) {
    std::string error = ErrorOf(c.json);
    ASSERT_FALSE(error.empty()) << c.json << " was accepted";
    EXPECT_NE(error.find(std::string("\"") + c.key + "\""), std::string::npos)
        << c.json << ": " << error;
  }
}

TEST_F(ConfigFileTest, UnknownKeyIsRefusedAndNamed) {
  std::string error = ErrorOf(R"({"repos": [], "cache-size": "10G"})");
  ASSERT_FALSE(error.empty());
  EXPECT_NE(error.find("unknown key \"cache-size\""), std::string::npos) << error;
  EXPECT_NE(error.find("cache_size"), std::string::npos) << "the known keys are listed: " << error;
}

TEST_F(ConfigFileTest, NotAJsonObject) {
  for (const char* text : {"", "not json", "{\"repos\": [", "{'repos': []}", "[]", "\"x\"", "42",
                           "null", "{} {}"}) {
    EXPECT_FALSE(ErrorOf(text).empty()) << '"' << text << "\" was accepted";
  }
  EXPECT_NE(ErrorOf("[1, 2]").find("object"), std::string::npos);
  EXPECT_NE(ErrorOf("{nope").find("JSON"), std::string::npos);
}

TEST_F(ConfigFileTest, MissingFile) {
  std::string path = temp_ / "absent.json";
  try {
    LoadConfigFile(path);
    FAIL() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(DefaultConfigPathTest, XdgThenHome) {
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  std::optional<std::string> xdg = saved("XDG_CONFIG_HOME"), home = saved("HOME");
  ::setenv("XDG_CONFIG_HOME", "/xdg/config", 1);
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(DefaultConfigPath(), "/xdg/config/aprfs/config.json");
  ::setenv("XDG_CONFIG_HOME", "", 1);
  EXPECT_EQ(DefaultConfigPath(), "/home/someone/.config/aprfs/config.json");
  ::unsetenv("XDG_CONFIG_HOME");
  EXPECT_EQ(DefaultConfigPath(), "/home/someone/.config/aprfs/config.json");
  for (auto [name, value] : {std::pair{"XDG_CONFIG_HOME", xdg}, std::pair{"HOME", home}}) {
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
}

}  // namespace
}  // namespace aprfs
