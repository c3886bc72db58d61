// The pure parts of the Hub protocol: --repo specs (hf-hub.md §1.2 repo id rules), URL
// quoting and origins (§1.2, §2.3), error mapping of failed responses (§2.4), which failures are
// retried and how long to wait (§2.5), commit ids.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "fetch/http.h"
#include "fetch/hub_client.h"
#include "fetch/remote_file.h"
#include "fetch/remote_model.h"

namespace aprfs {
namespace {

using namespace std::chrono_literals;
using Kind = HubError::Kind;

// ---- ParseRepoSpec ----

void ExpectSpec(const std::string& text, const std::string& repo, const std::string& revision) {
  std::optional<RemoteRepoSpec> spec = ParseRepoSpec(text);
  ASSERT_TRUE(spec.has_value()) << text;
  EXPECT_EQ(spec->repo_id, repo) << text;
  EXPECT_EQ(spec->revision, revision) << text;
}

TEST(ParseRepoSpecTest, ValidSpecs) {
  ExpectSpec("microsoft/phi-4", "microsoft/phi-4", "main");
  ExpectSpec("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "main");
  ExpectSpec("gpt2", "gpt2", "main");  // no namespace
  ExpectSpec("org/model_v1.0", "org/model_v1.0", "main");
  ExpectSpec("Qwen/Qwen2.5-7B-Instruct@main", "Qwen/Qwen2.5-7B-Instruct", "main");
  ExpectSpec("org/model@v1.0", "org/model", "v1.0");
  ExpectSpec("org/model@refs/pr/1", "org/model", "refs/pr/1");
  ExpectSpec("org/model@refs/convert/parquet", "org/model", "refs/convert/parquet");
  const std::string commit = "a09a35458c702b33eeacc393d103063234e8bc28";
  ExpectSpec("org/model@" + commit, "org/model", commit);
  ExpectSpec("a/b", "a/b", "main");
  ExpectSpec("org/" + std::string(96, 'x'), "org/" + std::string(96, 'x'), "main");
  ExpectSpec("0rg/9model", "0rg/9model", "main");
}

TEST(ParseRepoSpecTest, RejectsMalformedSpecs) {
  for (const std::string& bad : std::vector<std::string>{
           "",
           "/",
           "org/",
           "/model",
           "org//model",
           "org/model/extra",
           "org/mo..del",
           "org/..",
           "../model",
           "org/mo--del",
           "or--g/model",
           "-org/model",
           "org/-model",
           "org/model-",
           "org/.model",
           "org/model.",
           "org/mo del",
           "org/mo:del",
           "org/mod\xC3\xA8le",
           "org/" + std::string(97, 'x'),
           std::string(97, 'x'),
           "org/model@",
           "@main",
           "org/model@../x",
           "org/model@refs/../../etc",
           "org/model@/abs",
           "org/model@refs//pr",
           "org/model@.",
           std::string("org/model@ma\0in", 15),
       }) {
    EXPECT_FALSE(ParseRepoSpec(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(ParseRepoSpecTest, RejectsDotGitSuffix) {
  EXPECT_FALSE(ParseRepoSpec("org/model.git").has_value());
  EXPECT_FALSE(ParseRepoSpec("model.git").has_value());
}

TEST(ParseRepoSpecTest, RejectsRevisionWithTrailingSlash) {
  EXPECT_FALSE(ParseRepoSpec("org/model@refs/pr/").has_value());
  EXPECT_FALSE(ParseRepoSpec("org/model@main/").has_value());
}

// ---- QuoteSegment / QuotePath / OriginOf (hf-hub.md §1.2, §2.3) ----

TEST(QuoteTest, SegmentEncodesEverythingButUnreserved) {
  EXPECT_EQ(QuoteSegment("main"), "main");
  EXPECT_EQ(QuoteSegment("refs/pr/1"), "refs%2Fpr%2F1");
  EXPECT_EQ(QuoteSegment("v1.0/x"), "v1.0%2Fx");
  EXPECT_EQ(QuoteSegment("refs/convert/parquet"), "refs%2Fconvert%2Fparquet");
  EXPECT_EQ(QuoteSegment("a09a35458c702b33eeacc393d103063234e8bc28"),
            "a09a35458c702b33eeacc393d103063234e8bc28");
  EXPECT_EQ(QuoteSegment("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(QuoteSegment("a b#c?d%e+f&g=h:i@j"), "a%20b%23c%3Fd%25e%2Bf%26g%3Dh%3Ai%40j");
  EXPECT_EQ(QuoteSegment("\xC3\xA9"), "%C3%A9");  // é, UTF-8 bytes
  EXPECT_EQ(QuoteSegment(std::string_view("\0\x7f", 2)), "%00%7F");
  EXPECT_EQ(QuoteSegment(""), "");
}

TEST(QuoteTest, PathKeepsSlashes) {
  EXPECT_EQ(QuotePath("model-00001-of-00004.safetensors"), "model-00001-of-00004.safetensors");
  EXPECT_EQ(QuotePath("default/train/0000.parquet"), "default/train/0000.parquet");
  EXPECT_EQ(QuotePath("sub dir/a#b?c%d+e.json"), "sub%20dir/a%23b%3Fc%25d%2Be.json");
  EXPECT_EQ(QuotePath("dir/\xC3\xA9t\xC3\xA9.bin"), "dir/%C3%A9t%C3%A9.bin");
  EXPECT_EQ(QuotePath("a//b/"), "a//b/");
  EXPECT_EQ(QuotePath("/lead"), "/lead");
  EXPECT_EQ(QuotePath(""), "");
}

TEST(OriginTest, SchemeHostAndPort) {
  EXPECT_EQ(OriginOf("https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/resolve/main/config.json"),
            "https://huggingface.co");
  EXPECT_EQ(OriginOf("https://cdn-lfs-us-1.hf.co/repos/aa/bb?X-Amz-Signature=x"),
            "https://cdn-lfs-us-1.hf.co");
  EXPECT_EQ(OriginOf("http://127.0.0.1:8080/api/models/x"), "http://127.0.0.1:8080");
  EXPECT_EQ(OriginOf("http://127.0.0.1:8081/x"), "http://127.0.0.1:8081");
  EXPECT_EQ(OriginOf("HTTPS://HuggingFace.CO/x"), "https://huggingface.co");
  EXPECT_EQ(OriginOf("https://huggingface.co"), "https://huggingface.co");
  EXPECT_NE(OriginOf("http://huggingface.co/x"), OriginOf("https://huggingface.co/x"));
  // Relative references have no origin.
  EXPECT_EQ(OriginOf("/api/resolve-cache/models/x"), "");
  EXPECT_EQ(OriginOf("relative/path"), "");
}

// ---- HubClient::ErrorFor (hf-hub.md §2.4) ----

HttpResponse Response(long status, std::string error_code = "", std::string error_message = "") {
  HttpResponse response;
  response.status = status;
  response.effective_url = "https://huggingface.co/org/model/resolve/main/config.json";
  if (!error_code.empty()) response.headers["x-error-code"] = error_code;
  if (!error_message.empty()) response.headers["x-error-message"] = error_message;
  return response;
}

Kind KindOf(const HttpResponse& response) { return HubClient::ErrorFor(response).kind(); }

TEST(ErrorForTest, ErrorCodes) {
  EXPECT_EQ(KindOf(Response(404, "RevisionNotFound")), Kind::RevisionNotFound);
  EXPECT_EQ(KindOf(Response(404, "EntryNotFound")), Kind::EntryNotFound);
  EXPECT_EQ(KindOf(Response(403, "GatedRepo")), Kind::Gated);
  EXPECT_EQ(KindOf(Response(401, "GatedRepo")), Kind::Gated);
  EXPECT_EQ(KindOf(Response(404, "RepoNotFound")), Kind::RepoNotFound);
  EXPECT_EQ(KindOf(Response(401, "RepoNotFound")), Kind::RepoNotFound);
  EXPECT_EQ(KindOf(Response(403, "", "Access to this resource is disabled.")), Kind::Disabled);
  EXPECT_EQ(KindOf(Response(451, "", "Access to this resource is disabled.")), Kind::Disabled);
}

TEST(ErrorForTest, FirstMatchWins) {
  // The order of §2.4: RevisionNotFound, EntryNotFound, GatedRepo, disabled, RepoNotFound/401.
  EXPECT_EQ(KindOf(Response(401, "RevisionNotFound")), Kind::RevisionNotFound);
  EXPECT_EQ(KindOf(Response(401, "EntryNotFound")), Kind::EntryNotFound);
  EXPECT_EQ(KindOf(Response(403, "GatedRepo", "Access to this resource is disabled.")), Kind::Gated);
  EXPECT_EQ(KindOf(Response(401, "RepoNotFound", "Access to this resource is disabled.")),
            Kind::Disabled);
  EXPECT_EQ(KindOf(Response(500, "EntryNotFound")), Kind::EntryNotFound);
  // A different message is not "disabled".
  EXPECT_EQ(KindOf(Response(403, "", "Access to this resource is disabled")), Kind::Unauthorized);
}

TEST(ErrorForTest, StatusWithoutErrorCode) {
  EXPECT_EQ(KindOf(Response(401)), Kind::RepoNotFound);  // 401 is deliberately ambiguous
  EXPECT_EQ(KindOf(Response(403)), Kind::Unauthorized);
  EXPECT_EQ(KindOf(Response(429)), Kind::RateLimited);
  for (long status : {500, 502, 503, 504, 507}) EXPECT_EQ(KindOf(Response(status)), Kind::Server) << status;
  for (long status : {400, 404, 410, 416, 418}) {
    EXPECT_EQ(KindOf(Response(status)), Kind::Protocol) << status;
  }
  // An unknown X-Error-Code falls through to the status.
  EXPECT_EQ(KindOf(Response(503, "SomethingNew")), Kind::Server);
  EXPECT_EQ(KindOf(Response(404, "SomethingNew")), Kind::Protocol);
}

TEST(ErrorForTest, InvalidCredentialsIsNotRepoNotFound) {
  EXPECT_NE(KindOf(Response(401, "", "Invalid credentials in Authorization header")),
            Kind::RepoNotFound);
}

TEST(ErrorForTest, TransportFailuresAreNetworkErrors) {
  HttpResponse timeout;
  timeout.effective_url = "https://huggingface.co/api/models/org/model/revision/main";
  timeout.transport_error = "Timeout was reached";
  HubError error = HubClient::ErrorFor(timeout);
  EXPECT_EQ(error.kind(), Kind::Network);
  EXPECT_TRUE(error.CacheMayAnswer());
  EXPECT_NE(std::string(error.what()).find("Timeout was reached"), std::string::npos) << error.what();

  // Cut mid-body after a 200: still a network failure.
  HttpResponse cut = Response(200);
  cut.transport_error = "Transferred a partial file";
  EXPECT_EQ(KindOf(cut), Kind::Network);
  // No response at all.
  EXPECT_EQ(KindOf(Response(0)), Kind::Network);
}

TEST(ErrorForTest, MessagesNameTheRequest) {
  HubError error = HubClient::ErrorFor(Response(404, "EntryNotFound", "Entry not found"));
  std::string what = error.what();
  EXPECT_NE(what.find("https://huggingface.co/org/model/resolve/main/config.json"), std::string::npos)
      << what;
  EXPECT_NE(what.find("404"), std::string::npos) << what;
  std::string gated = HubClient::ErrorFor(Response(403, "GatedRepo")).what();
  EXPECT_NE(gated.find("HF_TOKEN"), std::string::npos) << gated;
}

TEST(ErrorForTest, WhichErrorsLetTheCacheAnswer) {
  EXPECT_TRUE(HubClient::ErrorFor(Response(503)).CacheMayAnswer());
  EXPECT_TRUE(HubClient::ErrorFor(Response(429)).CacheMayAnswer());
  EXPECT_FALSE(HubClient::ErrorFor(Response(404, "RepoNotFound")).CacheMayAnswer());
  EXPECT_FALSE(HubClient::ErrorFor(Response(404, "RevisionNotFound")).CacheMayAnswer());
  EXPECT_FALSE(HubClient::ErrorFor(Response(404, "EntryNotFound")).CacheMayAnswer());
  EXPECT_FALSE(HubClient::ErrorFor(Response(403, "GatedRepo")).CacheMayAnswer());
  EXPECT_TRUE(HubError(Kind::Offline, "offline").CacheMayAnswer());
}

// ---- IsTransient / RetryDelay (hf-hub.md §2.5) ----

TEST(RetryTest, TransientFailures) {
  for (long status : {408, 429, 500, 502, 503, 504}) {
    EXPECT_TRUE(IsTransient(Response(status))) << status;
  }
  for (long status : {200, 206, 301, 302, 304, 400, 401, 403, 404, 410, 416, 501, 505}) {
    EXPECT_FALSE(IsTransient(Response(status))) << status;
  }
  HttpResponse reset;
  reset.transport_error = "Connection reset by peer";
  EXPECT_TRUE(IsTransient(reset));
  HttpResponse cut = Response(206);
  cut.transport_error = "Transferred a partial file";
  EXPECT_TRUE(IsTransient(cut));
  EXPECT_TRUE(IsTransient(Response(0)));
}

TEST(RetryTest, RetryAfterIsHonouredAndCapped) {
  HttpResponse response = Response(429);
  response.headers["retry-after"] = "3";
  EXPECT_EQ(RetryDelay(0, response), 3000ms);
  EXPECT_EQ(RetryDelay(4, response), 3000ms);
  response.headers["retry-after"] = "30";
  EXPECT_EQ(RetryDelay(0, response), 30000ms);
  response.headers["retry-after"] = "3600";
  EXPECT_EQ(RetryDelay(0, response), 30000ms);
}

void ExpectBackoff(const HttpResponse& response, const std::string& why) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const double base = std::min(8000.0, 500.0 * (1 << std::min(attempt, 4)));
    std::set<int64_t> seen;
    for (int i = 0; i < 200; ++i) {
      int64_t wait = RetryDelay(attempt, response).count();
      EXPECT_GE(wait, static_cast<int64_t>(base * 0.5) - 1) << why << " attempt " << attempt;
      EXPECT_LE(wait, static_cast<int64_t>(base * 1.5) + 1) << why << " attempt " << attempt;
      seen.insert(wait);
    }
    EXPECT_GT(seen.size(), 10u) << why << ": no jitter at attempt " << attempt;
  }
}

TEST(RetryTest, BackoffDoublesFromHalfASecondToEightJittered) {
  ExpectBackoff(Response(503), "no Retry-After");
  // Retry-After that is not a positive number of seconds: ignored.
  for (const char* value : {"0", "-5", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"}) {
    HttpResponse response = Response(503);
    response.headers["retry-after"] = value;
    ExpectBackoff(response, std::string("Retry-After: ") + value);
  }
  HttpResponse reset;
  reset.transport_error = "Connection refused";
  ExpectBackoff(reset, "transport error");
}

TEST(RetryTest, BackoffNeverExceedsTwelveSeconds) {
  for (int attempt : {5, 10, 20, 31, 100, 1000}) {
    auto wait = RetryDelay(attempt, Response(503));
    EXPECT_GE(wait, 4000ms) << attempt;
    EXPECT_LE(wait, 12000ms) << attempt;
  }
}

// ---- IsCommitHash ----

TEST(CommitHashTest, FortyLowercaseHex) {
  EXPECT_TRUE(IsCommitHash("a09a35458c702b33eeacc393d103063234e8bc28"));
  EXPECT_TRUE(IsCommitHash(std::string(40, '0')));
  EXPECT_FALSE(IsCommitHash("A09A35458C702B33EEACC393D103063234E8BC28"));
  EXPECT_FALSE(IsCommitHash("a09a35458c702b33eeacc393d103063234e8bc2"));
  EXPECT_FALSE(IsCommitHash("a09a35458c702b33eeacc393d103063234e8bc28a"));
  EXPECT_FALSE(IsCommitHash("g09a35458c702b33eeacc393d103063234e8bc28"));
  EXPECT_FALSE(IsCommitHash("main"));
  EXPECT_FALSE(IsCommitHash(""));
}

TEST(RepoRevisionTest, FindAndEtag) {
  RepoRevision revision;
  RepoFile lfs;
  lfs.path = "model.safetensors";
  lfs.blob_id = "1111111111111111111111111111111111111111";
  lfs.sha256 = std::string(64, 'a');
  RepoFile small;
  small.path = "config.json";
  small.blob_id = "2222222222222222222222222222222222222222";
  revision.files = {lfs, small};
  ASSERT_NE(revision.Find("model.safetensors"), nullptr);
  EXPECT_EQ(revision.Find("model.safetensors")->etag(), std::string(64, 'a'));
  ASSERT_NE(revision.Find("config.json"), nullptr);
  EXPECT_EQ(revision.Find("config.json")->etag(), small.blob_id);
  EXPECT_EQ(revision.Find("missing.json"), nullptr);
}

}  // namespace
}  // namespace aprfs

namespace aprfs {
namespace {

// A server that echoes the token in its error message or in a URL never gets it into a log.
TEST(HttpRedactionTest, TheTokenNeverAppearsInDescriptions) {
  RedactInMessages("hf_secretTOKEN123");
  HttpResponse response;
  response.effective_url = "https://hub.example/api?t=hf_secretTOKEN123";
  response.status = 401;
  response.headers["x-error-code"] = "Unauthorized";
  response.headers["x-error-message"] = "bad token hf_secretTOKEN123 (hf_secretTOKEN123)";
  const std::string text = response.Describe();
  EXPECT_EQ(text.find("hf_secretTOKEN123"), std::string::npos) << text;
  EXPECT_EQ(text, "https://hub.example/api?t=***: HTTP 401 Unauthorized (bad token *** (***))");
  response.transport_error = "cut at hf_secretTOKEN123";
  EXPECT_EQ(response.Describe(), "https://hub.example/api?t=***: cut at ***");
}

// ---- ServerValidator: what names the version of a file a server (the Hub's CDN, a mirror)
// answers from ----

HttpResponse WithHeaders(std::map<std::string, std::string> headers) {
  HttpResponse response;
  response.status = 206;
  response.headers = std::move(headers);
  return response;
}

TEST(ServerValidatorTest, EtagFirstThenLastModified) {
  using K = ServerValidator::Kind;
  const std::string date = "Wed, 25 Nov 2026 10:00:00 GMT";
  ServerValidator strong = ServerValidator::Of(WithHeaders({{"etag", "\"6566a1b2-1a2b\""},
                                                            {"last-modified", date}}));
  EXPECT_EQ(strong.kind, K::StrongEtag);
  EXPECT_EQ(strong.value, "\"6566a1b2-1a2b\"");
  EXPECT_EQ(strong.NormalizedEtag(), "6566a1b2-1a2b");
  EXPECT_TRUE(strong.UsableInIfRange());

  ServerValidator weak = ServerValidator::Of(WithHeaders({{"etag", "W/\"abc\""}}));
  EXPECT_EQ(weak.kind, K::WeakEtag);
  EXPECT_EQ(weak.NormalizedEtag(), "abc");
  EXPECT_FALSE(weak.UsableInIfRange()) << "RFC 9110: no weak ETag in If-Range";

  ServerValidator dated = ServerValidator::Of(WithHeaders({{"last-modified", date}}));
  EXPECT_EQ(dated.kind, K::LastModified);
  EXPECT_EQ(dated.value, date);
  EXPECT_EQ(dated.NormalizedEtag(), "");
  EXPECT_TRUE(dated.UsableInIfRange());

  ServerValidator none = ServerValidator::Of(WithHeaders({{"content-range", "bytes 0-1/2"}}));
  EXPECT_EQ(none.kind, K::None);
  EXPECT_FALSE(none.UsableInIfRange());
}

TEST(ServerValidatorTest, FingerprintsTellVersionsApartAndAreStable) {
  auto of = [](std::map<std::string, std::string> headers) {
    return ServerValidator::Of(WithHeaders(std::move(headers))).Fingerprint();
  };
  std::set<uint64_t> seen = {of({{"etag", "\"a\""}}), of({{"etag", "W/\"a\""}}),
                             of({{"etag", "\"b\""}}), of({{"last-modified", "\"a\""}}),
                             of({})};
  EXPECT_EQ(seen.size(), 5u) << "two versions (or kinds) share a fingerprint";
  EXPECT_EQ(seen.count(0), 0u) << "0 means 'none recorded' in the chunk store";
  EXPECT_EQ(of({{"etag", "\"a\""}}), of({{"etag", "\"a\""}, {"last-modified", "x"}}));
  // Shared with other processes and other builds through the chunk store: a fixed function.
  EXPECT_EQ(of({}), ServerValidator{}.Fingerprint());
  ServerValidator fixed{ServerValidator::Kind::StrongEtag, "\"a\""};
  EXPECT_EQ(fixed.Fingerprint(), of({{"etag", "\"a\""}}));
  EXPECT_EQ(fixed.Fingerprint(), 0xa8e52876b40f3729ull) << "FNV-1a of the kind and the value";
}

}  // namespace
}  // namespace aprfs
