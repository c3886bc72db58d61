// ResolveS3Config (fetch/s3/aws_config.h) against the AWS CLI's rules: the order of profiles,
// credentials, regions and endpoints; the shared files as botocore parses them (comments, nested
// `s3 =` sub-sections, [services NAME], malformed lines); what aprfs refuses (half-set keys,
// credential methods other than static keys, endpoints that are not URLs); and that no message
// ever shows a secret. A fake AwsEnvironment serves the variables and files; one test reads real
// files through AwsEnvironment::Process().
#include "fetch/s3/aws_config.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/model_writer.h"

namespace aprfs {
namespace {

constexpr const char* kHome = "/home/u";
constexpr const char* kConfig = "/home/u/.aws/config";
constexpr const char* kCredentials = "/home/u/.aws/credentials";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr const char* kToken = "FwoGZXIvYXdzEXAMPLETOKEN";

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

class AwsConfigTest : public ::testing::Test {
 protected:
  AwsEnvironment Environment() {
    AwsEnvironment env;
    env.getenv = [this](const std::string& name) -> std::optional<std::string> {
      auto it = vars_.find(name);
      if (it == vars_.end()) return std::nullopt;
      return it->second;
    };
    env.read_file = [this](const std::string& path) -> std::optional<std::string> {
      reads_.push_back(path);
      auto it = files_.find(path);
      if (it == files_.end()) return std::nullopt;
      return it->second;
    };
    return env;
  }

  S3Config Resolve(const S3Overrides& overrides = {}) {
    return ResolveS3Config(Environment(), overrides);
  }

  // The message of the AwsConfigError the resolution throws; fails the test when none.
  std::string ErrorOf(const S3Overrides& overrides = {}) {
    try {
      S3Config config = Resolve(overrides);
      ADD_FAILURE() << "no error; credentials from " << config.credentials_source;
      return "";
    } catch (const AwsConfigError& e) {
      std::string what = e.what();
      for (std::string secret : {std::string(kSecret), Lower(kSecret)}) {
        EXPECT_EQ(what.find(secret), std::string::npos) << "the message shows the secret: " << what;
      }
      EXPECT_EQ(what.find(kToken), std::string::npos) << "the message shows the token: " << what;
      return what;
    }
  }

  std::map<std::string, std::string> vars_{{"HOME", kHome}};
  std::map<std::string, std::string> files_;
  std::vector<std::string> reads_;
};

// EXPECT that `text` contains every one of `parts`.
#define EXPECT_HAS(text, ...)                                             \
  for (const std::string& part : std::vector<std::string>{__VA_ARGS__}) { \
    EXPECT_NE(std::string(text).find(part), std::string::npos)            \
        << "no \"" << part << "\" in: " << (text);                        \
  }

std::string Keys(const std::string& id) {
  return "aws_access_key_id = " + id + "\naws_secret_access_key = " + kSecret + "\n";
}

// --- Defaults and file locations --------------------------------------------------------------

TEST_F(AwsConfigTest, NothingConfiguredIsAnonymousUsEast1) {
  S3Config config = Resolve();
  EXPECT_FALSE(config.credentials.has_value());
  EXPECT_EQ(config.credentials_source, "none found: unsigned requests");
  EXPECT_EQ(config.region, "us-east-1");
  EXPECT_EQ(config.endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(config.custom_endpoint);
  EXPECT_EQ(config.addressing, S3Addressing::kAuto);
  EXPECT_EQ(config.profile, "default");
  EXPECT_EQ(reads_, (std::vector<std::string>{kCredentials, kConfig}));
}

TEST_F(AwsConfigTest, FileVariablesOverrideDefaultPathsWithTildeAndVariables) {
  vars_["AWS_SHARED_CREDENTIALS_FILE"] = "~/creds";
  vars_["AWS_CONFIG_FILE"] = "${XDG_CONFIG_HOME}/aws/config";
  vars_["XDG_CONFIG_HOME"] = "/etc/xdg";
  files_["/home/u/creds"] = "[default]\n" + Keys("AKIDCREDS");
  files_["/etc/xdg/aws/config"] = "[default]\nregion = eu-west-3\n";
  S3Config config = Resolve();
  EXPECT_EQ(reads_, (std::vector<std::string>{"/home/u/creds", "/etc/xdg/aws/config"}));
  ASSERT_TRUE(config.credentials.has_value());
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDCREDS");
  EXPECT_EQ(config.credentials_source, "profile default in /home/u/creds");
  EXPECT_EQ(config.region, "eu-west-3");
}

TEST_F(AwsConfigTest, TildeUserIsThatUsersHome) {
  struct passwd* entry = ::getpwnam("root");
  ASSERT_NE(entry, nullptr);
  std::string home = entry->pw_dir;
  while (!home.empty() && home.back() == '/') home.pop_back();
  vars_["AWS_CONFIG_FILE"] = "~root/aws.ini";
  vars_["AWS_SHARED_CREDENTIALS_FILE"] = "~no-such-user-aprfs/creds";  // left as it is
  Resolve();
  EXPECT_EQ(reads_, (std::vector<std::string>{"~no-such-user-aprfs/creds", home + "/aws.ini"}));
}

TEST_F(AwsConfigTest, TildeWithoutHomeIsThePasswordDatabaseHome) {
  vars_.erase("HOME");
  struct passwd* entry = ::getpwuid(::getuid());
  ASSERT_NE(entry, nullptr);
  std::string home = entry->pw_dir;
  while (!home.empty() && home.back() == '/') home.pop_back();
  Resolve();
  EXPECT_EQ(reads_, (std::vector<std::string>{home + "/.aws/credentials", home + "/.aws/config"}));
}

TEST_F(AwsConfigTest, EmptyVariablesCountAsUnset) {
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
                           "AWS_REGION", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE"}) {
    vars_[name] = "";
  }
  vars_["AWS_DEFAULT_PROFILE"] = "dev";
  vars_["AWS_DEFAULT_REGION"] = "ap-south-1";
  vars_["AWS_ENDPOINT_URL"] = "http://minio:9000";
  files_[kCredentials] = "[dev]\n" + Keys("AKIDDEV");
  S3Config config = Resolve();
  EXPECT_EQ(config.profile, "dev");
  EXPECT_EQ(config.credentials_source, "profile dev in /home/u/.aws/credentials");
  EXPECT_EQ(config.region, "ap-south-1");
  EXPECT_EQ(config.endpoint, "http://minio:9000");
  EXPECT_EQ(reads_.back(), kConfig);
}

// --- Profiles ---------------------------------------------------------------------------------

TEST_F(AwsConfigTest, ProfileOrderOverrideThenAwsProfileThenAwsDefaultProfile) {
  files_[kConfig] =
      "[profile a]\nregion = r-a-1\n[profile b]\nregion = r-b-1\n[profile c]\nregion = r-c-1\n"
      "[default]\nregion = r-d-1\n";
  EXPECT_EQ(Resolve().region, "r-d-1");
  vars_["AWS_DEFAULT_PROFILE"] = "c";
  EXPECT_EQ(Resolve().profile, "c");
  EXPECT_EQ(Resolve().region, "r-c-1");
  vars_["AWS_PROFILE"] = "b";
  EXPECT_EQ(Resolve().profile, "b");
  EXPECT_EQ(Resolve().region, "r-b-1");
  S3Overrides overrides;
  overrides.profile = "a";
  EXPECT_EQ(Resolve(overrides).profile, "a");
  EXPECT_EQ(Resolve(overrides).region, "r-a-1");
}

TEST_F(AwsConfigTest, MissingNamedProfileIsAnErrorButMissingDefaultIsNot) {
  vars_["AWS_PROFILE"] = "prod";
  files_[kConfig] = "[profile dev]\nregion = eu-west-1\n";
  std::string error = ErrorOf();
  EXPECT_HAS(error, "The config profile (prod) could not be found", "AWS_PROFILE", kConfig,
             kCredentials);

  vars_.erase("AWS_PROFILE");
  S3Overrides overrides;
  overrides.profile = "prod";
  EXPECT_HAS(ErrorOf(overrides), "(prod)");

  vars_["AWS_PROFILE"] = "default";  // named, but the default may be missing
  S3Config config = Resolve();
  EXPECT_EQ(config.profile, "default");
  EXPECT_FALSE(config.credentials.has_value());
}

TEST_F(AwsConfigTest, ProfileFoundInEitherFile) {
  vars_["AWS_PROFILE"] = "ci";
  files_[kCredentials] = "[ci]\n" + Keys("AKIDCI");
  EXPECT_EQ(Resolve().credentials.value().access_key_id, "AKIDCI");
  files_.erase(kCredentials);
  files_[kConfig] = "[profile ci]\n" + Keys("AKIDCICONFIG");
  EXPECT_EQ(Resolve().credentials.value().access_key_id, "AKIDCICONFIG");
}

TEST_F(AwsConfigTest, SectionNamesDifferBetweenTheFiles) {
  // In the config file a profile is [profile NAME]; in the credentials file it is [NAME].
  vars_["AWS_PROFILE"] = "dev";
  files_[kConfig] = "[dev]\nregion = eu-west-1\n";
  files_[kCredentials] = "[profile dev]\n" + Keys("AKIDX");
  EXPECT_HAS(ErrorOf(), "(dev) could not be found");

  files_[kConfig] = "[profile   \"dev\"]\nregion = eu-west-1\n";  // botocore splits with shlex
  S3Config config = Resolve();
  EXPECT_EQ(config.region, "eu-west-1");
  EXPECT_FALSE(config.credentials.has_value());
}

TEST_F(AwsConfigTest, QuotedProfileNamesAndHeadersThatNameNothing) {
  files_[kConfig] =
      "[profile \"my dev\"]\nregion = eu-west-1\n"
      "[profile a b]\nregion = eu-west-2\n"
      "[profile 'unclosed]\nregion = eu-west-3\n";
  vars_["AWS_PROFILE"] = "my dev";
  EXPECT_EQ(Resolve().region, "eu-west-1");
  for (const char* name : {"a", "b", "a b", "'unclosed", "unclosed"}) {
    vars_["AWS_PROFILE"] = name;
    EXPECT_HAS(ErrorOf(), "(" + std::string(name) + ") could not be found");
  }
}

TEST_F(AwsConfigTest, DefaultAndProfileDefaultTheLaterWins) {
  files_[kConfig] = "[default]\nregion = eu-west-1\n[profile default]\nregion = eu-west-2\n";
  EXPECT_EQ(Resolve().region, "eu-west-2");
  files_[kConfig] = "[profile default]\nregion = eu-west-2\n[default]\nregion = eu-west-1\n";
  EXPECT_EQ(Resolve().region, "eu-west-1");
  files_[kConfig] = "[profile default]\nregion = eu-north-1\n";
  EXPECT_EQ(Resolve().region, "eu-north-1");
}

TEST_F(AwsConfigTest, SectionNamesAreCaseSensitiveTopLevelKeysAreNot) {
  // configparser lowercases option names (botocore does not change that); section names stay.
  files_[kCredentials] =
      "[default]\nAWS_Access_Key_ID = AKIDUP\nAws_Secret_Access_Key = " + std::string(kSecret) +
      "\n";
  files_[kConfig] = "[Default]\nregion = eu-west-1\n";
  S3Config config = Resolve();
  ASSERT_TRUE(config.credentials.has_value());
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDUP");
  EXPECT_EQ(config.credentials.value().secret_access_key, kSecret);
  EXPECT_EQ(config.region, "us-east-1");
}

// --- Credentials ------------------------------------------------------------------------------

TEST_F(AwsConfigTest, EnvironmentKeysWithSessionToken) {
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  vars_["AWS_SESSION_TOKEN"] = kToken;
  S3Config config = Resolve();
  ASSERT_TRUE(config.credentials.has_value());
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDENV");
  EXPECT_EQ(config.credentials.value().secret_access_key, kSecret);
  EXPECT_EQ(config.credentials.value().session_token, kToken);
  EXPECT_EQ(config.credentials_source, "environment (AWS_ACCESS_KEY_ID)");
  EXPECT_EQ(config.credentials_source.find(kSecret), std::string::npos);
}

TEST_F(AwsConfigTest, LegacySecurityTokenNamesComeFirstAsInBotocore) {
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  vars_["AWS_SECURITY_TOKEN"] = "legacy";
  vars_["AWS_SESSION_TOKEN"] = kToken;
  EXPECT_EQ(Resolve().credentials.value().session_token, "legacy");
  vars_.clear();
  vars_["HOME"] = kHome;
  files_[kCredentials] = "[default]\n" + Keys("AKID") + "aws_session_token = " + kToken + "\n";
  EXPECT_EQ(Resolve().credentials.value().session_token, kToken);
}

TEST_F(AwsConfigTest, EnvironmentKeysBeatProfilesEvenWithAwsProfile) {
  vars_["AWS_PROFILE"] = "dev";
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  files_[kCredentials] = "[dev]\n" + Keys("AKIDDEV");
  files_[kConfig] = "[profile dev]\nregion = eu-central-1\ncredential_process = /bin/creds\n";
  S3Config config = Resolve();
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDENV");
  EXPECT_EQ(config.credentials_source, "environment (AWS_ACCESS_KEY_ID)");
  EXPECT_EQ(config.profile, "dev");
  EXPECT_EQ(config.region, "eu-central-1");  // the profile still gives everything else
}

TEST_F(AwsConfigTest, CredentialsFileBeatsConfigFile) {
  files_[kCredentials] = "[default]\n" + Keys("AKIDCREDS");
  files_[kConfig] = "[default]\n" + Keys("AKIDCONFIG");
  S3Config config = Resolve();
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDCREDS");
  EXPECT_EQ(config.credentials_source, "profile default in /home/u/.aws/credentials");
  files_[kCredentials] = "[other]\n" + Keys("AKIDOTHER");
  config = Resolve();
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDCONFIG");
  EXPECT_EQ(config.credentials_source, "profile default in /home/u/.aws/config");
  EXPECT_TRUE(config.credentials.value().session_token.empty());
}

TEST_F(AwsConfigTest, HalfSetEnvironmentKeysNameTheMissingOne) {
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  files_[kCredentials] = "[default]\n" + Keys("AKIDCREDS");  // no fallback past the environment
  EXPECT_HAS(ErrorOf(), "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  vars_.erase("AWS_ACCESS_KEY_ID");
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  EXPECT_HAS(ErrorOf(), "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
}

TEST_F(AwsConfigTest, HalfSetProfileKeysNameTheMissingOneAndTheFile) {
  files_[kCredentials] = "[default]\naws_access_key_id = AKID\n";
  EXPECT_HAS(ErrorOf(), "profile default", kCredentials,
             "sets aws_access_key_id but not aws_secret_access_key");
  files_[kCredentials] = "[default]\naws_secret_access_key = " + std::string(kSecret) + "\n";
  EXPECT_HAS(ErrorOf(), "sets aws_secret_access_key but not aws_access_key_id");
  files_.erase(kCredentials);
  vars_["AWS_PROFILE"] = "dev";
  files_[kConfig] = "[profile dev]\naws_secret_access_key = " + std::string(kSecret) + "\n";
  EXPECT_HAS(ErrorOf(), "profile dev", kConfig, "but not aws_access_key_id");
}

TEST_F(AwsConfigTest, UnsupportedCredentialMethodsNameKeyAndProfile) {
  vars_["AWS_PROFILE"] = "work";
  for (const char* key : {"credential_process", "sso_session", "sso_start_url", "role_arn",
                          "web_identity_token_file"}) {
    SCOPED_TRACE(key);
    files_[kConfig] = "[profile work]\nregion = eu-west-1\n" + std::string(key) + " = x\n";
    std::string error = ErrorOf();
    EXPECT_HAS(error, key, "profile work", kConfig + std::string(" line 3"), "static keys only",
               "aws configure export-credentials --profile work --format env");
  }
  // In the credentials file too (botocore merges the two files).
  files_[kConfig] = "[profile work]\nregion = eu-west-1\n";
  files_[kCredentials] = "[work]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n";
  EXPECT_HAS(ErrorOf(), "role_arn", kCredentials);
}

TEST_F(AwsConfigTest, StaticKeysWinOverOtherMethodsInTheProfile) {
  files_[kConfig] = "[default]\nsso_session = corp\n";
  files_[kCredentials] = "[default]\n" + Keys("AKIDSTATIC");
  EXPECT_EQ(Resolve().credentials.value().access_key_id, "AKIDSTATIC");
}

TEST_F(AwsConfigTest, AnonymousOverrideSignsNothingAndChecksNoKeys) {
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";  // half set: would be an error when signing
  files_[kConfig] = "[default]\nregion = eu-west-1\ncredential_process = /bin/creds\n";
  S3Overrides overrides;
  overrides.anonymous = true;
  S3Config config = Resolve(overrides);
  EXPECT_FALSE(config.credentials.has_value());
  EXPECT_EQ(config.credentials_source, "none: --no-sign-request");
  EXPECT_EQ(config.region, "eu-west-1");
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  EXPECT_FALSE(Resolve(overrides).credentials.has_value());
}

// --- Region -----------------------------------------------------------------------------------

TEST_F(AwsConfigTest, RegionOrder) {
  files_[kConfig] = "[default]\nregion = eu-west-1\n";
  EXPECT_EQ(Resolve().region, "eu-west-1");
  files_[kCredentials] = "[default]\nregion = eu-west-2\n";  // botocore: credentials file wins
  EXPECT_EQ(Resolve().region, "eu-west-2");
  vars_["AWS_DEFAULT_REGION"] = "us-west-1";
  EXPECT_EQ(Resolve().region, "us-west-1");
  vars_["AWS_REGION"] = "us-west-2";
  EXPECT_EQ(Resolve().region, "us-west-2");
  S3Overrides overrides;
  overrides.region = "ap-northeast-1";
  S3Config config = Resolve(overrides);
  EXPECT_EQ(config.region, "ap-northeast-1");
  EXPECT_EQ(config.endpoint, "https://s3.ap-northeast-1.amazonaws.com");
}

TEST_F(AwsConfigTest, RegionThatCannotBeAHostNameIsAnError) {
  vars_["AWS_REGION"] = "eu-west-1/evil";
  EXPECT_HAS(ErrorOf(), "eu-west-1/evil", "AWS_REGION");
  vars_.erase("AWS_REGION");
  files_[kConfig] = "[default]\nregion = -bad\n";
  EXPECT_HAS(ErrorOf(), "-bad", "profile default", kConfig + std::string(" line 2"));
}

TEST_F(AwsConfigTest, DefaultEndpointPerPartition) {
  vars_["AWS_REGION"] = "cn-north-1";
  EXPECT_EQ(Resolve().endpoint, "https://s3.cn-north-1.amazonaws.com.cn");
  vars_["AWS_REGION"] = "cn-northwest-1";
  EXPECT_EQ(Resolve().endpoint, "https://s3.cn-northwest-1.amazonaws.com.cn");
  vars_["AWS_REGION"] = "eu-west-1";
  EXPECT_EQ(Resolve().endpoint, "https://s3.eu-west-1.amazonaws.com");
  vars_["AWS_REGION"] = "us-east-1";  // the regional name, not the legacy global s3.amazonaws.com
  EXPECT_EQ(Resolve().endpoint, "https://s3.us-east-1.amazonaws.com");
}

// --- Endpoint ---------------------------------------------------------------------------------

TEST_F(AwsConfigTest, EndpointOrder) {
  files_[kConfig] =
      "[default]\n"
      "endpoint_url = http://profile\n"
      "services = local\n"
      "[services local]\n"
      "s3 =\n"
      "  endpoint_url = http://services\n";
  S3Config config = Resolve();
  EXPECT_EQ(config.endpoint, "http://services");
  EXPECT_TRUE(config.custom_endpoint);

  files_[kCredentials] = "[default]\ns3 =\n  endpoint_url = http://subsection\n";
  EXPECT_EQ(Resolve().endpoint, "http://services");
  files_[kConfig] = "[default]\nendpoint_url = http://profile\n";
  EXPECT_EQ(Resolve().endpoint, "http://subsection");
  files_.erase(kCredentials);
  EXPECT_EQ(Resolve().endpoint, "http://profile");

  vars_["AWS_ENDPOINT_URL"] = "http://global-env";
  EXPECT_EQ(Resolve().endpoint, "http://global-env");
  vars_["AWS_ENDPOINT_URL_S3"] = "http://s3-env";
  EXPECT_EQ(Resolve().endpoint, "http://s3-env");
  S3Overrides overrides;
  overrides.endpoint = "https://override";
  config = Resolve(overrides);
  EXPECT_EQ(config.endpoint, "https://override");
  EXPECT_TRUE(config.custom_endpoint);
}

TEST_F(AwsConfigTest, IgnoreConfiguredEndpointUrls) {
  files_[kConfig] = "[default]\nendpoint_url = http://profile\nregion = eu-west-1\n";
  vars_["AWS_ENDPOINT_URL"] = "http://env";
  vars_["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "1";  // only "true" counts
  EXPECT_EQ(Resolve().endpoint, "http://env");
  vars_["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "TRUE";
  S3Config config = Resolve();
  EXPECT_EQ(config.endpoint, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_FALSE(config.custom_endpoint);
  S3Overrides overrides;
  overrides.endpoint = "http://override";
  EXPECT_EQ(Resolve(overrides).endpoint, "http://override");

  // The profile may say so too; the variable, when set, decides.
  vars_.erase("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
  files_[kConfig] += "ignore_configured_endpoint_urls = true\n";
  EXPECT_FALSE(Resolve().custom_endpoint);
  vars_["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "false";
  EXPECT_EQ(Resolve().endpoint, "http://env");
}

TEST_F(AwsConfigTest, EndpointMustBeHttpUrlAndLosesTrailingSlashes) {
  vars_["AWS_ENDPOINT_URL_S3"] = "https://minio.local:9000//";
  EXPECT_EQ(Resolve().endpoint, "https://minio.local:9000");
  vars_["AWS_ENDPOINT_URL_S3"] = "HTTP://Minio.Local/prefix/";
  EXPECT_EQ(Resolve().endpoint, "http://Minio.Local/prefix");

  vars_["AWS_ENDPOINT_URL_S3"] = "minio.local:9000";
  EXPECT_HAS(ErrorOf(), "minio.local:9000", "AWS_ENDPOINT_URL_S3", "http://");
  vars_["AWS_ENDPOINT_URL_S3"] = "ftp://minio.local";
  EXPECT_HAS(ErrorOf(), "AWS_ENDPOINT_URL_S3");
  vars_["AWS_ENDPOINT_URL_S3"] = "http:///";
  EXPECT_HAS(ErrorOf(), "no host");
  vars_.erase("AWS_ENDPOINT_URL_S3");

  vars_["AWS_PROFILE"] = "dev";
  files_[kConfig] = "[profile dev]\nendpoint_url = s3.example.com\n";
  EXPECT_HAS(ErrorOf(), "s3.example.com", "endpoint_url", "profile dev", kConfig);
  files_[kConfig] = "[profile dev]\ns3 =\n  endpoint_url = example.com\n";
  EXPECT_HAS(ErrorOf(), "s3 sub-section of profile dev", kConfig + std::string(" line 3"));
  S3Overrides overrides;
  overrides.endpoint = "localhost:9000";
  EXPECT_HAS(ErrorOf(overrides), "localhost:9000", "aprfs");
}

TEST_F(AwsConfigTest, ServicesSection) {
  files_[kConfig] =
      "[profile dev]\nservices = minio\n"
      "[services minio]\n"
      "s3 =\n"
      "  endpoint_url = http://minio:9000/\n"
      "sts =\n"
      "  endpoint_url = http://sts\n";
  vars_["AWS_PROFILE"] = "dev";
  S3Config config = Resolve();
  EXPECT_EQ(config.endpoint, "http://minio:9000");
  EXPECT_TRUE(config.custom_endpoint);
  EXPECT_EQ(config.profile, "dev");  // a services section is not a profile

  files_[kConfig] = "[profile dev]\nservices = gone\n[services minio]\ns3 =\n  endpoint_url = x\n";
  EXPECT_HAS(ErrorOf(), "services = gone", "[services gone]", kConfig);
  files_[kConfig] = "[profile dev]\nservices = minio\n[services minio]\ns3 =\n  endpoint_url = x\n";
  EXPECT_HAS(ErrorOf(), "[services minio]", kConfig + std::string(" line 5"));
  vars_["AWS_PROFILE"] = "minio";
  EXPECT_HAS(ErrorOf(), "(minio) could not be found");
}

// --- Addressing -------------------------------------------------------------------------------

TEST_F(AwsConfigTest, AddressingStyleFromSubSectionOrOverride) {
  EXPECT_EQ(Resolve().addressing, S3Addressing::kAuto);
  files_[kConfig] = "[default]\ns3 =\n  addressing_style = path\n";
  EXPECT_EQ(Resolve().addressing, S3Addressing::kPath);
  files_[kConfig] = "[default]\ns3 =\n  addressing_style = virtual\n";
  EXPECT_EQ(Resolve().addressing, S3Addressing::kVirtualHost);
  files_[kConfig] = "[default]\ns3 =\n  addressing_style = auto\n";
  EXPECT_EQ(Resolve().addressing, S3Addressing::kAuto);
  S3Overrides overrides;
  overrides.addressing = S3Addressing::kPath;
  EXPECT_EQ(Resolve(overrides).addressing, S3Addressing::kPath);

  files_[kConfig] = "[default]\ns3 =\n  addressing_style = dns\n";
  EXPECT_HAS(ErrorOf(), "dns", "auto, path or virtual", kConfig + std::string(" line 3"));
  EXPECT_EQ(Resolve(overrides).addressing, S3Addressing::kPath);  // the override never reads it
  files_[kConfig] = "[default]\ns3 = addressing_style = path\n";
  EXPECT_HAS(ErrorOf(), "must be a sub-section", kConfig + std::string(" line 2"));
}

// --- The file format --------------------------------------------------------------------------

TEST_F(AwsConfigTest, NestedSubSectionWithCommentsBlankLinesAndCrLf) {
  files_[kConfig] =
      "[default]\r\n"
      "s3 =\r\n"
      "    # how MinIO wants it\r\n"
      "    addressing_style = path\r\n"
      "\r\n"
      "    Endpoint_URL = http://ignored-case\r\n"
      "    endpoint_url = http://minio:9000 ; inline\r\n"
      "region = eu-west-1\r\n";
  S3Config config = Resolve();
  EXPECT_EQ(config.addressing, S3Addressing::kPath);
  EXPECT_EQ(config.endpoint, "http://minio:9000");  // sub-section keys keep their case
  EXPECT_EQ(config.region, "eu-west-1");            // the block ended at the unindented key
}

TEST_F(AwsConfigTest, Comments) {
  files_[kConfig] =
      "# whole line\n"
      "; whole line\n"
      "[default] # after the header\n"
      "   # indented comment\n"
      "region = eu-west-1 # inline\n"
      "endpoint_url = http://minio.local/#frag;x ;inline\n";
  S3Config config = Resolve();
  EXPECT_EQ(config.region, "eu-west-1");
  EXPECT_EQ(config.endpoint, "http://minio.local/#frag;x");  // no whitespace: not a comment
}

TEST_F(AwsConfigTest, ColonSeparatorAndDefaultSectionAsInConfigParser) {
  files_[kConfig] = "[DEFAULT]\nregion = eu-west-3\n[profile dev]\n[default]\nregion: eu-west-1\n";
  EXPECT_EQ(Resolve().region, "eu-west-1");
  vars_["AWS_PROFILE"] = "dev";
  EXPECT_EQ(Resolve().region, "eu-west-3");  // [DEFAULT] fills in every section
  vars_["AWS_PROFILE"] = "DEFAULT";
  EXPECT_HAS(ErrorOf(), "(DEFAULT) could not be found");
}

TEST_F(AwsConfigTest, MalformedLinesNameFileAndLine) {
  files_[kCredentials] =
      "[default]\naws_access_key_id = AKID\naws_secret_access_key " + std::string(kSecret) + "\n";
  EXPECT_HAS(ErrorOf(), kCredentials + std::string(" line 3"), "key = value");

  files_[kCredentials] = "aws_access_key_id = AKID\n[default]\n";
  EXPECT_HAS(ErrorOf(), kCredentials + std::string(" line 1"), "before the first [section]");
  files_[kCredentials] = "[default]\n = " + std::string(kSecret) + "\n";
  EXPECT_HAS(ErrorOf(), kCredentials + std::string(" line 2"), "without a name");
  files_[kCredentials] = "[default]\n[a]\n[default]\n";
  EXPECT_HAS(ErrorOf(), kCredentials + std::string(" line 3"), "[default] appears twice");
  files_[kCredentials] = "[default]\nregion = a\nREGION = b\n";
  EXPECT_HAS(ErrorOf(), kCredentials + std::string(" line 3"), "line 2 appears twice");
  files_.erase(kCredentials);

  files_[kConfig] =
      "[default]\ns3 =\n  addressing_style = path\n  " + std::string(kSecret) + "\nregion = x\n";
  EXPECT_HAS(ErrorOf(), kConfig + std::string(" line 4"), "sub-section");
  files_[kConfig] = "[]\n";
  EXPECT_HAS(ErrorOf(), kConfig + std::string(" line 1"));
}

TEST_F(AwsConfigTest, NoMessageShowsTheSecretOrToken) {
  // Every error path with the secret and token present in the environment or the files; ErrorOf
  // checks each message.
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  vars_["AWS_SESSION_TOKEN"] = kToken;
  EXPECT_HAS(ErrorOf(), "AWS_ACCESS_KEY_ID");
  vars_.clear();
  vars_["HOME"] = kHome;
  std::string secret = kSecret, token = kToken;
  for (const std::string& credentials :
       {"[default]\naws_secret_access_key = " + secret + "\naws_session_token = " + token + "\n",
        "[default]\naws_secret_access_key " + secret + "\n",
        "[default]\n" + secret + " = " + token + "\n" + secret + " = x\n",
        "[default]\n" + secret + "\n",
        "[default]\nrole_arn = x\naws_session_token = " + token + "\n",
        "[default]\n" + Keys("AKID") + "aws_session_token = " + token + "\ns3 =\n  " + token +
            "\n"}) {
    files_[kCredentials] = credentials;
    std::string error = ErrorOf();
    EXPECT_FALSE(error.empty()) << credentials;
  }
}

// --- VirtualHostFor ---------------------------------------------------------------------------

TEST_F(AwsConfigTest, VirtualHostFor) {
  S3Config config;
  EXPECT_TRUE(config.VirtualHostFor("my-bucket-01"));
  EXPECT_TRUE(config.VirtualHostFor("abc"));
  EXPECT_TRUE(config.VirtualHostFor(std::string(63, 'a')));
  EXPECT_FALSE(config.VirtualHostFor(std::string(64, 'a')));
  EXPECT_FALSE(config.VirtualHostFor("ab"));
  EXPECT_FALSE(config.VirtualHostFor("my.bucket"));
  EXPECT_FALSE(config.VirtualHostFor("192.168.1.1"));
  EXPECT_FALSE(config.VirtualHostFor("MyBucket"));
  EXPECT_FALSE(config.VirtualHostFor("my_bucket"));
  EXPECT_FALSE(config.VirtualHostFor("-bucket"));
  EXPECT_FALSE(config.VirtualHostFor("bucket-"));

  config.custom_endpoint = true;  // MinIO, Ceph: path style unless told otherwise
  EXPECT_FALSE(config.VirtualHostFor("my-bucket"));
  config.addressing = S3Addressing::kVirtualHost;
  EXPECT_TRUE(config.VirtualHostFor("my-bucket"));
  EXPECT_TRUE(config.VirtualHostFor("my.bucket"));
  config.custom_endpoint = false;
  config.addressing = S3Addressing::kPath;
  EXPECT_FALSE(config.VirtualHostFor("my-bucket"));
}

TEST_F(AwsConfigTest, ResolvedCustomEndpointDefaultsToPathStyle) {
  vars_["AWS_ENDPOINT_URL"] = "http://minio:9000";
  EXPECT_FALSE(Resolve().VirtualHostFor("models"));
  vars_.erase("AWS_ENDPOINT_URL");
  EXPECT_TRUE(Resolve().VirtualHostFor("models"));
}

// --- The real process environment -------------------------------------------------------------

// Sets variables for one test and restores every one it touched.
class ProcessEnv {
 public:
  ~ProcessEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void Set(const std::string& name, const std::optional<std::string>& value) {
    if (saved_.count(name) == 0) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(AwsConfigTest, ProcessEnvironmentReadsRealFiles) {
  testing::TempDir temp;
  testing::WriteFile(temp / "credentials", "[dev]\n" + Keys("AKIDREAL"));
  testing::WriteFile(temp / "config",
                     "[profile dev]\nregion = eu-west-1\ns3 =\n  addressing_style = virtual\n");
  ProcessEnv env;
  for (const char* name :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
        "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"}) {
    env.Set(name, std::nullopt);
  }
  env.Set("AWS_SHARED_CREDENTIALS_FILE", temp / "credentials");
  env.Set("AWS_CONFIG_FILE", temp / "config");
  env.Set("AWS_PROFILE", "dev");

  S3Config config = ResolveS3Config(AwsEnvironment::Process());
  ASSERT_TRUE(config.credentials.has_value());
  EXPECT_EQ(config.credentials.value().access_key_id, "AKIDREAL");
  EXPECT_EQ(config.credentials_source, "profile dev in " + (temp / "credentials"));
  EXPECT_EQ(config.region, "eu-west-1");
  EXPECT_EQ(config.endpoint, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(config.addressing, S3Addressing::kVirtualHost);

  AwsEnvironment process = AwsEnvironment::Process();
  EXPECT_EQ(process.getenv("AWS_PROFILE").value_or("(unset)"), "dev");
  EXPECT_FALSE(process.getenv("AWS_REGION").has_value());
  EXPECT_EQ(process.read_file(temp / "config").value_or(""),
            "[profile dev]\nregion = eu-west-1\ns3 =\n  addressing_style = virtual\n");
  EXPECT_FALSE(process.read_file(temp / "missing").has_value());
  EXPECT_FALSE(process.read_file(temp / "config/below-a-file").has_value());
  EXPECT_FALSE(process.read_file(temp.path()).has_value());  // a directory is no file
  std::string too_long = temp.path() + "/" + std::string(5000, 'x');
  try {
    process.read_file(too_long);
    ADD_FAILURE() << "no error for a name too long";
  } catch (const AwsConfigError& e) {
    EXPECT_HAS(e.what(), "cannot read " + too_long + ": ", std::strerror(ENAMETOOLONG));
  }
}

}  // namespace
}  // namespace aprfs

namespace aprfs {
namespace {

// --- CA bundles and credentials only a platform provides ------------------------------------------

TEST_F(AwsConfigTest, CaBundleFromTheEnvironmentOrTheProfileMustExist) {
  files_["/etc/ssl/private-ca.pem"] = "-----BEGIN CERTIFICATE-----\n";
  files_[kConfig] = "[default]\nca_bundle = /etc/ssl/private-ca.pem\n";
  EXPECT_EQ(Resolve().ca_bundle, "/etc/ssl/private-ca.pem");
  vars_["AWS_CA_BUNDLE"] = "/nowhere/ca.pem";
  EXPECT_HAS(ErrorOf(), "AWS_CA_BUNDLE", "/nowhere/ca.pem");
  vars_.erase("AWS_CA_BUNDLE");
  files_[kConfig] = "[default]\nca_bundle = /gone.pem\n";
  EXPECT_HAS(ErrorOf(), "ca_bundle", "/gone.pem", kConfig);
  files_.erase(kConfig);
  EXPECT_EQ(Resolve().ca_bundle, "");
}

TEST_F(AwsConfigTest, PlatformCredentialVariablesWithoutKeysAreRefusedNotIgnored) {
  vars_["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/var/run/secrets/token";
  vars_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/models";
  EXPECT_HAS(ErrorOf(), "AWS_WEB_IDENTITY_TOKEN_FILE", "export-credentials");
  // Static keys win, as in botocore's chain.
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  EXPECT_EQ(Resolve().credentials_source, "environment (AWS_ACCESS_KEY_ID)");
  vars_.clear();
  vars_["HOME"] = kHome;
  vars_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/x";
  EXPECT_HAS(ErrorOf(), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  S3Overrides unsigned_requests;
  unsigned_requests.anonymous = true;
  EXPECT_EQ(Resolve(unsigned_requests).credentials_source, "none: --no-sign-request");
}

}  // namespace
}  // namespace aprfs
