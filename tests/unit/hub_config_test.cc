// HubConfig::FromEnvironment (fetch/hub_client.h) against the rules of hf-hub.md §1.1, §4.1,
// §4.2, §4.3 and §5: endpoint, token discovery order and stripping, implicit-token opt-out,
// offline flags, timeouts in (fractional) seconds, user agent; and the headers and resolve URLs
// a HubClient builds from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fetch/hub_client.h"
#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;
using testing::WriteFile;

// Every variable FromEnvironment reads (or could fall back on).
const char* const kVariables[] = {
    "HF_ENDPOINT",        "HUGGINGFACE_CO_STAGING", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH",      "HF_HOME",
    "XDG_CACHE_HOME",     "HOME",                   "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    "HF_HUB_OFFLINE",     "TRANSFORMERS_OFFLINE",   "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_USER_AGENT_ORIGIN", "HF_OIDC_RESOURCE"};

// Saves the variables, clears them (HOME points at an empty folder, so no real token file is
// found), and restores them on destruction.
class EnvGuard {
 public:
  explicit EnvGuard(const std::string& home) {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
    Set("HOME", home);
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void Set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void Unset(const std::string& name) { ::unsetenv(name.c_str()); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class HubConfigTest : public ::testing::Test {
 protected:
  HubConfigTest() : env_(temp_ / "home") { fs::create_directories(temp_ / "home"); }

  TempDir temp_;
  EnvGuard env_;
};

TEST_F(HubConfigTest, Defaults) {
  HubConfig config = HubConfig::FromEnvironment();
  EXPECT_EQ(config.endpoint, "https://huggingface.co");
  EXPECT_FALSE(config.token.has_value());
  EXPECT_FALSE(config.offline);
  EXPECT_EQ(config.etag_timeout, 10000ms);
  EXPECT_EQ(config.download_timeout, 10000ms);
  EXPECT_EQ(config.max_attempts, 5);
  EXPECT_EQ(config.user_agent.rfind("aprfs/", 0), 0u) << config.user_agent;
  EXPECT_EQ(config.user_agent.find("origin/"), std::string::npos) << config.user_agent;
}

TEST_F(HubConfigTest, EndpointLosesTrailingSlashes) {
  env_.Set("HF_ENDPOINT", "http://127.0.0.1:8080/");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "http://127.0.0.1:8080");
  env_.Set("HF_ENDPOINT", "https://hf-mirror.com//");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "https://hf-mirror.com");
  env_.Set("HF_ENDPOINT", "https://hf-mirror.com/prefix");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "https://hf-mirror.com/prefix");
  // Empty counts as unset.
  env_.Set("HF_ENDPOINT", "");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "https://huggingface.co");
}

TEST_F(HubConfigTest, StagingEndpointUnlessHfEndpointIsSet) {
  env_.Set("HUGGINGFACE_CO_STAGING", "1");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "https://hub-ci.huggingface.co");
  env_.Set("HUGGINGFACE_CO_STAGING", "0");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "https://huggingface.co");
  env_.Set("HUGGINGFACE_CO_STAGING", "yes");
  env_.Set("HF_ENDPOINT", "http://localhost:1/");
  EXPECT_EQ(HubConfig::FromEnvironment().endpoint, "http://localhost:1");
}

TEST_F(HubConfigTest, TokenDiscoveryOrder) {
  fs::create_directories(temp_ / "hf");
  WriteFile(temp_ / "hf/token", "hf_from_file\n");
  env_.Set("HF_HOME", temp_ / "hf");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_from_file");
  env_.Set("HUGGING_FACE_HUB_TOKEN", "hf_legacy");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_legacy");
  env_.Set("HF_TOKEN", "hf_primary");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_primary");
  // Empty variables count as unset.
  env_.Set("HF_TOKEN", "");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_legacy");
  env_.Set("HUGGING_FACE_HUB_TOKEN", "");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_from_file");
}

TEST_F(HubConfigTest, TokensAreStripped) {
  env_.Set("HF_TOKEN", "  hf_spaces \r\n");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_spaces");
  env_.Unset("HF_TOKEN");
  fs::create_directories(temp_ / "hf");
  WriteFile(temp_ / "hf/token", "\n  hf_file_token \r\n\n");
  env_.Set("HF_HOME", temp_ / "hf");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_file_token");
}

TEST_F(HubConfigTest, EmptyTokenFileMeansNoToken) {
  fs::create_directories(temp_ / "hf");
  env_.Set("HF_HOME", temp_ / "hf");
  WriteFile(temp_ / "hf/token", "");
  EXPECT_FALSE(HubConfig::FromEnvironment().token.has_value());
  WriteFile(temp_ / "hf/token", " \r\n\t\n");
  EXPECT_FALSE(HubConfig::FromEnvironment().token.has_value());
}

TEST_F(HubConfigTest, WhitespaceOnlyTokenVariableIsNoToken) {
  fs::create_directories(temp_ / "hf");
  WriteFile(temp_ / "hf/token", "hf_from_file");
  env_.Set("HF_HOME", temp_ / "hf");
  env_.Set("HF_TOKEN", "  \n");
  HubConfig config = HubConfig::FromEnvironment();
  ASSERT_TRUE(config.token.has_value());
  EXPECT_EQ(*config.token, "hf_from_file");
  for (const std::string& header : HubClient(config).Headers(true)) {
    EXPECT_NE(header, "Authorization: Bearer ");
  }
}

TEST_F(HubConfigTest, TokenFileLocations) {
  // HF_TOKEN_PATH wins over $HF_HOME/token.
  fs::create_directories(temp_ / "hf");
  WriteFile(temp_ / "hf/token", "hf_home_token");
  WriteFile(temp_ / "elsewhere", "hf_path_token");
  env_.Set("HF_HOME", temp_ / "hf");
  env_.Set("HF_TOKEN_PATH", temp_ / "elsewhere");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_path_token");
  // A missing HF_TOKEN_PATH file: no token (not a fallback to HF_HOME).
  env_.Set("HF_TOKEN_PATH", temp_ / "missing");
  EXPECT_FALSE(HubConfig::FromEnvironment().token.has_value());
  env_.Unset("HF_TOKEN_PATH");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_home_token");

  // Without HF_HOME: $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token.
  env_.Unset("HF_HOME");
  EXPECT_FALSE(HubConfig::FromEnvironment().token.has_value());
  fs::create_directories(temp_ / "home/.cache/huggingface");
  WriteFile(temp_ / "home/.cache/huggingface/token", "hf_home_default");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_home_default");
  fs::create_directories(temp_ / "xdg/huggingface");
  WriteFile(temp_ / "xdg/huggingface/token", "hf_xdg");
  env_.Set("XDG_CACHE_HOME", temp_ / "xdg");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_xdg");
  // HF_HOME beats XDG_CACHE_HOME.
  env_.Set("HF_HOME", temp_ / "hf");
  EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_home_token");
}

TEST_F(HubConfigTest, DisableImplicitToken) {
  fs::create_directories(temp_ / "hf");
  WriteFile(temp_ / "hf/token", "hf_file");
  env_.Set("HF_HOME", temp_ / "hf");
  env_.Set("HF_TOKEN", "hf_env");
  for (const char* on : {"1", "ON", "yes", "True", "tRuE"}) {
    env_.Set("HF_HUB_DISABLE_IMPLICIT_TOKEN", on);
    EXPECT_FALSE(HubConfig::FromEnvironment().token.has_value()) << on;
  }
  for (const char* off : {"0", "false", "no", "2", ""}) {
    env_.Set("HF_HUB_DISABLE_IMPLICIT_TOKEN", off);
    EXPECT_EQ(HubConfig::FromEnvironment().token, "hf_env") << off;
  }
}

TEST_F(HubConfigTest, OfflineFlags) {
  for (const char* on : {"1", "ON", "on", "YES", "true", "TRUE"}) {
    env_.Set("HF_HUB_OFFLINE", on);
    EXPECT_TRUE(HubConfig::FromEnvironment().offline) << on;
  }
  for (const char* off : {"0", "off", "false", "2", "y"}) {
    env_.Set("HF_HUB_OFFLINE", off);
    EXPECT_FALSE(HubConfig::FromEnvironment().offline) << off;
  }
  env_.Unset("HF_HUB_OFFLINE");
  env_.Set("TRANSFORMERS_OFFLINE", "1");
  EXPECT_TRUE(HubConfig::FromEnvironment().offline) << "TRANSFORMERS_OFFLINE alone";
  // HF_HUB_OFFLINE, when set, decides, even against TRANSFORMERS_OFFLINE.
  env_.Set("HF_HUB_OFFLINE", "0");
  EXPECT_FALSE(HubConfig::FromEnvironment().offline);
  // Set but empty counts as unset: TRANSFORMERS_OFFLINE decides.
  env_.Set("HF_HUB_OFFLINE", "");
  EXPECT_TRUE(HubConfig::FromEnvironment().offline);
  env_.Set("TRANSFORMERS_OFFLINE", "0");
  env_.Set("HF_HUB_OFFLINE", "1");
  EXPECT_TRUE(HubConfig::FromEnvironment().offline);
}

TEST_F(HubConfigTest, TimeoutsAreSecondsWithFractions) {
  env_.Set("HF_HUB_ETAG_TIMEOUT", "2.5");
  env_.Set("HF_HUB_DOWNLOAD_TIMEOUT", "30");
  HubConfig config = HubConfig::FromEnvironment();
  EXPECT_EQ(config.etag_timeout, 2500ms);
  EXPECT_EQ(config.download_timeout, 30000ms);
  env_.Set("HF_HUB_ETAG_TIMEOUT", "0.25");
  env_.Set("HF_HUB_DOWNLOAD_TIMEOUT", "120.0");
  config = HubConfig::FromEnvironment();
  EXPECT_EQ(config.etag_timeout, 250ms);
  EXPECT_EQ(config.download_timeout, 120000ms);
  // Nonsense keeps the 10 s default.
  for (const char* bad : {"abc", "0", "-5", ""}) {
    env_.Set("HF_HUB_ETAG_TIMEOUT", bad);
    env_.Set("HF_HUB_DOWNLOAD_TIMEOUT", bad);
    config = HubConfig::FromEnvironment();
    EXPECT_EQ(config.etag_timeout, 10000ms) << bad;
    EXPECT_EQ(config.download_timeout, 10000ms) << bad;
  }
}

TEST_F(HubConfigTest, UserAgentOrigin) {
  env_.Set("HF_HUB_USER_AGENT_ORIGIN", "ci-job");
  std::string agent = HubConfig::FromEnvironment().user_agent;
  EXPECT_EQ(agent.rfind("aprfs/", 0), 0u) << agent;
  const std::string suffix = "; origin/ci-job";
  ASSERT_GE(agent.size(), suffix.size());
  EXPECT_EQ(agent.substr(agent.size() - suffix.size()), suffix) << agent;
}

TEST_F(HubConfigTest, HeadersCarryTheTokenOnlyWhenAsked) {
  env_.Set("HF_TOKEN", "hf_secret");
  HubClient client(HubConfig::FromEnvironment());
  std::vector<std::string> with = client.Headers(true);
  std::vector<std::string> without = client.Headers(false);
  EXPECT_NE(std::find(with.begin(), with.end(), "Authorization: Bearer hf_secret"), with.end());
  for (const std::string& header : without) EXPECT_EQ(header.find("Authorization"), std::string::npos);
  EXPECT_EQ(with.front().rfind("User-Agent: aprfs/", 0), 0u);
  EXPECT_EQ(without.front().rfind("User-Agent: aprfs/", 0), 0u);

  env_.Unset("HF_TOKEN");
  HubClient anonymous(HubConfig::FromEnvironment());
  for (const std::string& header : anonymous.Headers(true)) {
    EXPECT_EQ(header.find("Authorization"), std::string::npos) << header;
  }
}

TEST_F(HubConfigTest, ResolveUrlEncodesRevisionAndPath) {
  env_.Set("HF_ENDPOINT", "http://127.0.0.1:9/");
  HubClient client(HubConfig::FromEnvironment());
  EXPECT_EQ(client.ResolveUrl("org/model", "main", "model-00001-of-00002.safetensors"),
            "http://127.0.0.1:9/org/model/resolve/main/model-00001-of-00002.safetensors");
  EXPECT_EQ(client.ResolveUrl("org/model", "refs/pr/1", "sub dir/a#b?.json"),
            "http://127.0.0.1:9/org/model/resolve/refs%2Fpr%2F1/sub%20dir/a%23b%3F.json");
}

TEST_F(HubConfigTest, OfflineClientRefusesRequests) {
  env_.Set("HF_HUB_OFFLINE", "1");
  env_.Set("HF_ENDPOINT", "http://127.0.0.1:9");  // nothing listens; nothing may be asked
  HubClient client(HubConfig::FromEnvironment());
  try {
    client.Resolve("org/model", "main");
    FAIL() << "Resolve went online";
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), HubError::Kind::Offline);
    EXPECT_TRUE(e.CacheMayAnswer());
  }
  EXPECT_THROW(client.Download("org/model", std::string(40, 'a'), "config.json", 1000), HubError);
  EXPECT_THROW(client.ResolveData("org/model", std::string(40, 'a'), "a.safetensors"), HubError);
}

}  // namespace
}  // namespace aprfs
