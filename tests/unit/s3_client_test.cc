// The S3 client's pure parts, no network: s3:// URIs, request addressing and signing settings,
// ListObjectsV2 and error documents, what each store error tells the user, and which folders
// of a listing are models.
#include <gtest/gtest.h>

#include "fetch/s3/s3_client.h"
#include "fetch/s3/s3_model.h"
#include "fetch/s3/s3_xml.h"

namespace aprfs {
namespace {

S3Config Config(const std::string& endpoint, bool custom, bool with_keys = true) {
  S3Config config;
  config.region = "eu-west-1";
  config.endpoint = endpoint;
  config.custom_endpoint = custom;
  config.credentials_source = "environment (AWS_ACCESS_KEY_ID)";
  if (with_keys) config.credentials = AwsCredentials{"AKIDEXAMPLE", "SECRETEXAMPLE", ""};
  return config;
}

TEST(S3UriTest, BucketAndPrefixWithoutSlashesAtTheEnds) {
  std::string error;
  std::optional<S3Uri> uri = ParseS3Uri("s3://models/org/phi-4/", &error);
  ASSERT_TRUE(uri) << error;
  EXPECT_EQ(uri->bucket, "models");
  EXPECT_EQ(uri->prefix, "org/phi-4");
  EXPECT_EQ(uri->ToString(), "s3://models/org/phi-4");
  EXPECT_EQ(uri->Key("config.json"), "org/phi-4/config.json");
  uri = ParseS3Uri("s3://models", &error);
  ASSERT_TRUE(uri) << error;
  EXPECT_EQ(uri->prefix, "");
  EXPECT_EQ(uri->Key("a"), "a");
}

TEST(S3UriTest, MalformedUrisSayWhy) {
  std::string error;
  EXPECT_FALSE(ParseS3Uri("http://models/x", &error));
  EXPECT_NE(error.find("s3://"), std::string::npos);
  EXPECT_FALSE(ParseS3Uri("s3://", &error));
  EXPECT_FALSE(ParseS3Uri("s3://bad bucket/x", &error));
  EXPECT_NE(error.find("bad bucket"), std::string::npos);
  EXPECT_FALSE(ParseS3Uri("s3://b/a//c", &error));
  EXPECT_FALSE(ParseS3Uri("s3://b/a/../c", &error));
  EXPECT_NE(error.find(".."), std::string::npos);
}

TEST(S3ClientTest, PathStyleRequestsSortAndEncodeTheQueryAndSignWithTheRegion) {
  S3Client client(Config("http://127.0.0.1:7480", true));
  HttpRequest request = client.Request("models", "", {{"prefix", "a b/c+d"}, {"list-type", "2"}});
  EXPECT_EQ(request.url, "http://127.0.0.1:7480/models?list-type=2&prefix=a%20b%2Fc%2Bd");
  ASSERT_TRUE(request.aws_sigv4);
  EXPECT_EQ(request.aws_sigv4->provider, "aws:amz:eu-west-1:s3");
  EXPECT_EQ(request.aws_sigv4->access_key_id, "AKIDEXAMPLE");
  EXPECT_NE(std::find(request.headers.begin(), request.headers.end(),
                      "x-amz-content-sha256: UNSIGNED-PAYLOAD"),
            request.headers.end());
  request = client.Request("models", "org/phi 4/model+1.safetensors");
  EXPECT_EQ(request.url, "http://127.0.0.1:7480/models/org/phi%204/model%2B1.safetensors");
}

TEST(S3ClientTest, VirtualHostedRequestsPutTheBucketInTheHostName) {
  S3Client client(Config("https://s3.eu-west-1.amazonaws.com", false));
  EXPECT_EQ(client.Request("models", "a/b.json").url,
            "https://models.s3.eu-west-1.amazonaws.com/a/b.json");
  EXPECT_EQ(client.Request("models", "").url, "https://models.s3.eu-west-1.amazonaws.com/");
  // A bucket with dots would break the certificate's wildcard: path style.
  EXPECT_EQ(client.Request("my.models", "x").url,
            "https://s3.eu-west-1.amazonaws.com/my.models/x");
}

TEST(S3ClientTest, SessionTokensGoInTheirHeaderAndAnonymousRequestsAreUnsigned) {
  S3Config config = Config("http://127.0.0.1:7480", true);
  config.credentials->session_token = "TOKEN123";
  HttpRequest request = S3Client(config).Request("b", "k");
  EXPECT_NE(std::find(request.headers.begin(), request.headers.end(),
                      "x-amz-security-token: TOKEN123"),
            request.headers.end());
  HttpRequest anonymous = S3Client(Config("http://127.0.0.1:7480", true, false)).Request("b", "k");
  EXPECT_FALSE(anonymous.aws_sigv4);
  for (const std::string& header : anonymous.headers) {
    EXPECT_EQ(header.rfind("x-amz-", 0), std::string::npos) << header;
  }
}

HttpResponse Answer(long status, const std::string& body,
                    std::map<std::string, std::string> headers = {}) {
  HttpResponse response;
  response.status = status;
  response.body = body;
  response.headers = std::move(headers);
  return response;
}

std::string ErrorDoc(const std::string& code, const std::string& extra = "") {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
         "</Code><Message>says the store</Message>" + extra + "<RequestId>tx1</RequestId></Error>";
}

TEST(S3ClientTest, StoreErrorsBecomeKindsAndMessagesThatSayWhatToDo) {
  S3Client client(Config("http://127.0.0.1:7480", true));
  using Kind = S3Error::Kind;
  struct Case {
    HttpResponse answer;
    Kind kind;
    std::string says;
  };
  const std::vector<Case> cases = {
      {Answer(404, ErrorDoc("NoSuchBucket")), Kind::kNoSuchBucket, "no such bucket"},
      {Answer(404, ErrorDoc("NoSuchKey")), Kind::kNoSuchKey, "no such object"},
      {Answer(404, ""), Kind::kNoSuchKey, "no such object"},
      {Answer(403, ErrorDoc("AccessDenied")), Kind::kAccessDenied, "environment (AWS_ACCESS_KEY_ID)"},
      {Answer(403, ErrorDoc("SignatureDoesNotMatch")), Kind::kBadCredentials, "secret access key"},
      {Answer(403, ErrorDoc("InvalidAccessKeyId")), Kind::kBadCredentials, "AKIDEXAMPLE"},
      {Answer(400, ErrorDoc("ExpiredToken")), Kind::kBadCredentials, "session token"},
      {Answer(400, ErrorDoc("AuthorizationHeaderMalformed", "<Region>ap-south-1</Region>")),
       Kind::kWrongRegion, "AWS_REGION=ap-south-1"},
      {Answer(301, "", {{"x-amz-bucket-region", "us-west-2"}}), Kind::kWrongRegion, "us-west-2"},
      {Answer(412, ""), Kind::kChanged, "changed"},
      {Answer(503, ErrorDoc("SlowDown")), Kind::kThrottled, "slow down"},
      {Answer(500, ErrorDoc("InternalError")), Kind::kServer, "failed"},
  };
  for (const Case& c : cases) {
    S3Error error = client.ErrorFor(c.answer, "s3://b/k");
    EXPECT_EQ(error.kind(), c.kind) << error.what();
    EXPECT_NE(std::string(error.what()).find(c.says), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).rfind("s3://b/k: ", 0), 0u) << error.what();
    EXPECT_EQ(std::string(error.what()).find("SECRETEXAMPLE"), std::string::npos);
  }
  HttpResponse refused;
  refused.transport_error = "Couldn't connect to server";
  S3Error network = client.ErrorFor(refused, "s3://b/k");
  EXPECT_EQ(network.kind(), Kind::kNetwork);
  EXPECT_TRUE(network.transient());
  EXPECT_FALSE(client.ErrorFor(Answer(403, ErrorDoc("AccessDenied")), "x").transient());
  // A certificate nobody vouches for: no retry helps; the way out is named.
  HttpResponse untrusted;
  untrusted.transport_error = "SSL certificate problem: unable to get local issuer certificate";
  untrusted.untrusted = true;
  EXPECT_FALSE(IsTransient(untrusted));
  S3Error tls = client.ErrorFor(untrusted, "s3://b/k");
  EXPECT_EQ(tls.kind(), Kind::kUntrusted);
  EXPECT_FALSE(tls.transient());
  for (const char* says : {"s3://b/k: ", "not trusted", "unable to get local issuer certificate",
                           "AWS_CA_BUNDLE", "ca_bundle"}) {
    EXPECT_NE(std::string(tls.what()).find(says), std::string::npos) << tls.what();
  }
}

TEST(S3ClientTest, AccessDeniedToUnsignedRequestsSuggestsCredentials) {
  S3Config config = Config("http://127.0.0.1:7480", true, false);
  config.credentials_source = "none found: unsigned requests";
  S3Error error = S3Client(config).ErrorFor(Answer(403, ErrorDoc("AccessDenied")), "s3://b");
  EXPECT_NE(std::string(error.what()).find("AWS_ACCESS_KEY_ID"), std::string::npos) << error.what();
}

TEST(S3XmlTest, ListObjectsV2PagesWithEntitiesAndTokens) {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>m/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>1/abc=</NextContinuationToken>"
      "<Contents><Key>m/a&amp;b.json</Key><Size>12</Size><ETag>&quot;e1&quot;</ETag></Contents>"
      "<Contents><Key>m/x.safetensors</Key><LastModified>2026-01-01T00:00:00Z</LastModified>"
      "<ETag>\"e2-3\"</ETag><Size>18446744073709551615</Size></Contents>"
      "</ListBucketResult>";
  std::string error;
  std::optional<S3ListPage> page = ParseListObjectsV2(xml, &error);
  ASSERT_TRUE(page) << error;
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1/abc=");
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "m/a&b.json");
  EXPECT_EQ(page->objects[0].etag, "\"e1\"");
  EXPECT_EQ(page->objects[0].size, 12u);
  EXPECT_EQ(page->objects[1].size, 18446744073709551615ull);
}

TEST(S3XmlTest, BrokenListingsAreRefused) {
  std::string error;
  EXPECT_FALSE(ParseListObjectsV2("<html>proxy error</html>", &error));
  EXPECT_FALSE(ParseListObjectsV2("not xml <<", &error));
  EXPECT_FALSE(ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size><ETag>\"e\"</ETag></Contents>"
      "</ListBucketResult>",
      &error));
  EXPECT_NE(error.find("a"), std::string::npos);
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                  "</ListBucketResult>",
                                  &error));
  EXPECT_FALSE(ParseS3ErrorDocument("<html/>"));
  EXPECT_FALSE(ParseS3ErrorDocument(""));
  std::optional<S3ErrorDocument> doc = ParseS3ErrorDocument(ErrorDoc("NoSuchKey"));
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->code, "NoSuchKey");
  EXPECT_EQ(doc->message, "says the store");
}

TEST(S3ModelsTest, FoldersWithSafetensorsOrAnIndexAreModels) {
  auto object = [](const std::string& key) { return S3Object{key, 1, "\"e\""}; };
  const std::vector<S3Object> listing = {
      object("models/a/config.json"),
      object("models/a/model.safetensors"),
      object("models/b/model.safetensors.index.json"),
      object("models/b/shards/model-00001-of-00001.safetensors"),
      object("models/notes.txt"),
      object("models-old/c/model.safetensors"),
  };
  S3Uri source{"bucket", "models"};
  std::vector<S3ModelRef> models = FindS3Models(source, listing);
  std::vector<std::string> folders;
  for (const S3ModelRef& model : models) folders.push_back(model.folder.ToString());
  // b/shards holds a *.safetensors too, but inside model b: part of it.
  EXPECT_EQ(folders, (std::vector<std::string>{"s3://bucket/models/a", "s3://bucket/models/b"}));
  EXPECT_EQ(models[0].Name(), "a");
  EXPECT_EQ(models[0].Group(), "models");
  EXPECT_EQ(models[0].objects.size(), 2u);
  EXPECT_EQ(models[1].objects.size(), 2u);  // the index and the shard below it
  EXPECT_NE(models[0].Fingerprint(), models[1].Fingerprint());

  // A source that is itself a model folder; a bucket whose root is one.
  models = FindS3Models(S3Uri{"bucket", "models/a"}, listing);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].Name(), "a");
  models = FindS3Models(S3Uri{"phi-4", ""}, {object("model.safetensors")});
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].Name(), "phi-4");
  EXPECT_EQ(models[0].Group(), "");
  models = FindS3Models(S3Uri{"bucket", ""}, {object("phi-4/model.safetensors")});
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].Name(), "phi-4");
  EXPECT_EQ(models[0].Group(), "bucket");
}

}  // namespace
}  // namespace aprfs
