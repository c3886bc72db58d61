#pragma once

// A real S3 server for the S3 tests: a one-node Ceph cluster (monitor, memstore OSD) with radosgw
// on loopback, run by tests/tools/radosgw.sh, one instance per test process.
//
//  * RadosGw::Shared() starts it on first use (~2 s) on a free port, in /tmp/aprfs-radosgw-XXXXXX
//    (ceph.conf, logs, pid files; APRFS_KEEP_TEST_DIRS keeps it), and stops it when the tests of
//    the process are over (a gtest Environment, and atexit). A test that stopped the gateway and
//    did not start it again gets it restarted once the test ends.
//  * A test binary that dies (crash, SIGKILL) does not leave daemons behind: radosgw.sh runs a
//    detached watcher that stops the cluster a second or two after its owner process is gone, and
//    Shared() first stops and removes every /tmp/aprfs-radosgw-* of an owner that is gone.
//  * Users: tester (AccessKey()/SecretKey(), who owns the buckets the fixture creates) and other
//    (OtherAccessKey()/OtherSecretKey(), for "access denied").
//  * Test data goes in and out with the curl command line (SigV4 signed by curl), never through
//    aprfs code. Every helper throws std::runtime_error (the command, HTTP status, body, curl's
//    stderr) when curl or the server says no; gtest reports it as the test's failure.
//
// Object keys are given raw ("models/a b+c/ü.safetensors") and percent-encoded here once per
// path segment as SigV4 and S3 want them ('/' kept): EncodeKey().

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace aprfs::testing {

// Who signs a request; both empty: anonymous (unsigned).
struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  bool anonymous() const { return access_key.empty(); }
};

// One curl run against the gateway.
struct CurlResult {
  int curl_exit = -1;  // curl's exit code: 0, 7 (could not connect), 28 (timed out)...; -1 when
                       // killed or not started
  int status = 0;      // HTTP status; 0 when there was no response
  std::string body;
  std::string headers;  // the response headers (curl -D)
  std::string stderr_text;
  std::string command;           // the command line, for messages
  std::string Describe() const;  // command, exit, status, stderr and the start of the body
};

class RadosGw {
 public:
  // The instance of this process, started on first use. Throws std::runtime_error (with
  // radosgw.sh's message and log tails) when it cannot be started; later calls then throw the
  // same error at once.
  static RadosGw& Shared();

  std::string Endpoint() const { return endpoint_; }  // "http://127.0.0.1:PORT"
  // The same gateway over TLS ("https://127.0.0.1:PORT+41"), with a certificate signed by a CA
  // of its own: CaFile(), a PEM file no system trusts.
  std::string TlsEndpoint() const { return tls_endpoint_; }
  std::string CaFile() const { return ca_file_; }
  int Port() const { return port_; }
  const std::string& Dir() const { return dir_; }  // ceph.conf, log/, run/
  static std::string AccessKey() { return "TESTACCESSKEY"; }
  static std::string SecretKey() { return "TESTSECRETKEY123"; }
  static std::string OtherAccessKey() { return "OTHERACCESSKEY"; }
  static std::string OtherSecretKey() { return "OTHERSECRETKEY456"; }
  static S3Credentials Tester() { return {AccessKey(), SecretKey()}; }
  static S3Credentials Other() { return {OtherAccessKey(), OtherSecretKey()}; }
  static S3Credentials Anonymous() { return {}; }
  static constexpr const char* kRegion = "us-east-1";

  // Creates a bucket owned by tester (fine when tester already has it). public_read: anyone,
  // unsigned, may list it and GET its objects (bucket ACL public-read, which radosgw honours for
  // listing only, plus a bucket policy allowing s3:GetObject and s3:ListBucket to "*").
  void CreateBucket(const std::string& bucket, bool public_read = false);
  // PUT an object from a local file / from bytes, as tester.
  void PutFile(const std::string& bucket, const std::string& key, const std::string& local_path);
  void PutBytes(const std::string& bucket, const std::string& key, const std::string& bytes);
  // Every regular file under local_dir (symlinks followed) as key `prefix + relative path`
  // (prefix as given: pass "models/x/" for a folder). Returns the keys, sorted.
  std::vector<std::string> UploadFolder(const std::string& bucket, const std::string& prefix,
                                        const std::string& local_dir);
  void DeleteObject(const std::string& bucket, const std::string& key);
  // The object's bytes, as tester.
  std::string GetObject(const std::string& bucket, const std::string& key);
  // ListObjectsV2 of a prefix, every page, as tester: the keys in S3's order.
  std::vector<std::string> ListKeys(const std::string& bucket, const std::string& prefix = "");

  // Stops only radosgw (the cluster and its objects stay): connections are refused until
  // StartGateway(), which returns once the gateway answers again.
  void StopGateway();
  void StartGateway();
  bool GatewayStopped() const;
  // Freezes radosgw (SIGSTOP): connections are still accepted, requests never answered (a hung
  // store), until ResumeGateway().
  void PauseGateway();
  void ResumeGateway();
  bool GatewayPaused() const;

  // curl -sS for `url`, signed as `who` (SigV4, UNSIGNED-PAYLOAD) unless anonymous, with `extra`
  // arguments before the URL (e.g. {"-r", "0-99"}, {"-X", "DELETE"}, {"-T", file}). Does not
  // throw: the result says what happened.
  CurlResult Curl(const std::string& url, const S3Credentials& who,
                  const std::vector<std::string>& extra = {},
                  std::chrono::seconds timeout = std::chrono::seconds(60)) const;
  // Endpoint()/bucket[/EncodeKey(key)][?query]. The query is sent as given: for SigV4 it must be
  // sorted by name and percent-encoded already (e.g. "list-type=2&prefix=a%2F").
  std::string Url(const std::string& bucket, const std::string& key = "",
                  const std::string& query = "") const;

  // S3 URI encoding of a key: every byte but A-Z a-z 0-9 - . _ ~ and '/' as %XX.
  static std::string EncodeKey(const std::string& key);
  // The same for a query parameter value ('/' encoded too).
  static std::string EncodeQueryValue(const std::string& value);

  // Stops the cluster and removes its folder; idempotent. Called at the end of the tests.
  void Stop();

  RadosGw(const RadosGw&) = delete;
  RadosGw& operator=(const RadosGw&) = delete;

 private:
  RadosGw() = default;
  void Start();  // throws
  // Runs radosgw.sh with these arguments; throws with its output when it fails.
  void RunScript(const std::vector<std::string>& args, std::chrono::seconds timeout) const;
  // Curl() as tester that must answer with one of `ok_statuses`; throws otherwise.
  CurlResult Expect(const std::string& what, const std::string& url,
                    const std::vector<std::string>& extra, std::vector<int> ok_statuses) const;

  std::string dir_;
  std::string endpoint_;
  std::string tls_endpoint_, ca_file_;
  int port_ = 0;
  bool running_ = false;
  bool gateway_stopped_ = false;
  bool gateway_paused_ = false;
  mutable std::mutex mu_;  // Start/Stop/StopGateway/StartGateway
};

// Stops and removes the /tmp/aprfs-radosgw-* clusters of test processes that are gone (killed
// before they could stop theirs). Shared() calls it before starting; returns how many it removed.
int CleanStaleRadosGwDirs();

}  // namespace aprfs::testing
