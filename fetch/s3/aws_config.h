#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace aprfs {

// Keys of a request signed with AWS Signature V4. The secret never appears in logs or messages.
struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // AWS_SESSION_TOKEN / aws_session_token: temporary credentials
};

// How the bucket goes into the URL: https://BUCKET.host/KEY or https://host/BUCKET/KEY.
enum class S3Addressing { kAuto, kPath, kVirtualHost };

// Where and how to talk to an S3-compatible store, resolved the way the AWS CLI and SDKs do from
// the environment and the shared config files.
struct S3Config {
  std::optional<AwsCredentials> credentials;  // nullopt: anonymous (unsigned requests)
  std::string region;                         // never empty: us-east-1 by default
  std::string endpoint;        // "https://s3.REGION.amazonaws.com" or the configured one; no
                               // trailing slash, always with a scheme
  bool custom_endpoint = false;  // the endpoint came from the environment or the profile
  S3Addressing addressing = S3Addressing::kAuto;
  // The certificates an https endpoint is checked against (AWS_CA_BUNDLE, the profile's
  // ca_bundle), for a store behind a private CA; "" for the system's.
  std::string ca_bundle;
  std::string profile;           // the profile that was read ("default" unless AWS_PROFILE...)
  // Where the credentials came from, for messages ("AWS_ACCESS_KEY_ID", "profile dev in
  // /root/.aws/credentials", "none: anonymous"); never the keys themselves.
  std::string credentials_source;

  // Whether this bucket goes in the host name: kVirtualHost, or kAuto on an AWS endpoint with a
  // DNS-compatible bucket name without dots (custom endpoints, MinIO and Ceph RGW, default to
  // path style as rclone's "Other" provider does).
  bool VirtualHostFor(const std::string& bucket) const;
};

// What the resolution may read: the environment and files, replaceable in tests.
struct AwsEnvironment {
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  // A whole file, or nullopt when it does not exist. Throws AwsConfigError when it exists but
  // cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> read_file;

  static AwsEnvironment Process();  // the real environment and file system
};

// Wrong or unusable configuration; the message names the variable or file (and line) and the rule.
class AwsConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Settings given to aprfs itself (command line, -o, config file) override the environment.
struct S3Overrides {
  std::optional<std::string> profile;
  std::optional<std::string> region;
  std::optional<std::string> endpoint;
  std::optional<S3Addressing> addressing;
  bool anonymous = false;  // --no-sign-request: never sign, even when credentials exist
};

// Resolves, in the AWS CLI's order:
// - profile: overrides.profile, AWS_PROFILE, AWS_DEFAULT_PROFILE, "default";
// - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) from the
//   environment, else the profile in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), else in
//   AWS_CONFIG_FILE (~/.aws/config, section [profile NAME] or [default]); none: anonymous.
//   A profile that names a way aprfs does not implement (credential_process, sso_*, role_arn,
//   web_identity_token_file) without static keys is an AwsConfigError saying which key;
// - region: overrides, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, "us-east-1";
// - endpoint: overrides, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `s3 =` sub-section
//   endpoint_url, the profile's endpoint_url (none of those when
//   AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true), else https://s3.REGION.amazonaws.com;
// - addressing: overrides, the profile's `s3 =` sub-section addressing_style (auto, path,
//   virtual), else kAuto;
// - CA bundle: AWS_CA_BUNDLE, the profile's ca_bundle (the file must exist).
// Credentials only the environment offers in ways aprfs does not implement
// (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_*_URI), with no static keys found, are
// an AwsConfigError rather than a silent fall back to unsigned requests.
// A variable set but empty counts as unset, as in the AWS CLI. Throws AwsConfigError on a
// malformed file, an endpoint that is not an http(s) URL, only one of the two keys set, or an
// unknown addressing style.
S3Config ResolveS3Config(const AwsEnvironment& env, const S3Overrides& overrides = {});

}  // namespace aprfs
