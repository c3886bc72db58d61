#include "tests/s3/radosgw.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/remote/remote_fixture.h"

namespace aprfs::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Short on purpose: admin sockets (unix sockets, 107 bytes at most) live under it.
constexpr const char* kTempRoot = "/tmp";
constexpr const char* kDirPrefix = "aprfs-radosgw-";

std::string ToolsDir() {
#ifdef APRFS_TOOLS_DIR
  return APRFS_TOOLS_DIR;
#else
  const char* dir = std::getenv("APRFS_TOOLS_DIR");
  return dir ? dir : "tests/tools";
#endif
}

std::string Script() { return ToolsDir() + "/radosgw.sh"; }

bool KeepDirs() { return std::getenv("APRFS_KEEP_TEST_DIRS") != nullptr; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFileOrThrow(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string Trim(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max) + "\n[... " + std::to_string(text.size() - max) + " more bytes]";
}

// A temporary file name (the file exists, empty) under /tmp; removed by its destructor.
class TempFile {
 public:
  TempFile() {
    std::string pattern = std::string(kTempRoot) + "/aprfs-s3-io-XXXXXX";
    int fd = mkostemp(pattern.data(), O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("mkostemp: " + std::string(std::strerror(errno)));
    close(fd);
    path_ = pattern;
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ----- processes ------------------------------------------------------------------------------

// radosgw.sh and curl run as every test command does: stdin /dev/null, output captured, in a
// process group of their own, killed whole on timeout, no descriptor of ours inherited.
using aprfs_rtest::ProcResult;
using aprfs_rtest::RunCommand;

std::string Quote(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    bool plain = !arg.empty() && arg.find_first_of(" \t'\"\\$&;|<>()*?[]{}") == std::string::npos;
    line += plain ? arg : "'" + arg + "'";
  }
  return line;
}

// ----- the instance's folder and owner --------------------------------------------------------

// Field 22 of /proc/PID/stat (start time in clock ticks), "" when the process is gone or a
// zombie: with the pid, it names one process even when pids are reused.
std::string ProcessStartTime(pid_t pid) {
  std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return "";
    if (i == 22) return field;
  }
  return "";
}

// DIR/owner: "PID STARTTIME" of the test process the cluster belongs to.
std::string OwnerLine() {
  return std::to_string(getpid()) + " " + ProcessStartTime(getpid()) + "\n";
}

bool OwnerAlive(const std::string& owner_line) {
  std::istringstream in(owner_line);
  pid_t pid = 0;
  std::string started;
  if (!(in >> pid >> started) || pid <= 0) return false;
  return ProcessStartTime(pid) == started;
}

bool PortFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// A base port P with P, P+1, P+2 free (radosgw, monitor v2 and v1; the OSD takes what it finds
// in P+3..P+40), outside the kernel's ephemeral range so that no outgoing connection takes one
// of them meanwhile, at a random place so that parallel test processes rarely collide.
int PickPort() {
  int lo = 32768, hi = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> lo >> hi;
  std::vector<std::pair<int, int>> windows;  // [first, last] of possible bases
  if (lo - 64 > 10000) windows.emplace_back(10000, lo - 64);
  if (hi + 1 < 65535 - 64) windows.emplace_back(hi + 1, 65535 - 64);
  if (windows.empty()) windows.emplace_back(1024, 65535 - 64);
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto& [first, last] = windows[random() % windows.size()];
    int base = first + static_cast<int>(random() % static_cast<unsigned>(last - first + 1));
    if (PortFree(base) && PortFree(base + 1) && PortFree(base + 2)) return base;
  }
  throw std::runtime_error("radosgw fixture: no free port found for radosgw");
}

std::string NewInstanceDir() {
  std::string pattern = std::string(kTempRoot) + "/" + kDirPrefix + "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  WriteFileOrThrow(pattern + "/owner", OwnerLine());
  return pattern;
}

void RemoveDir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A folder kept for APRFS_KEEP_TEST_DIRS, its cluster stopped: the stale scan leaves it alone.
void KeepDir(const std::string& dir) {
  std::ofstream(dir + "/stopped") << "kept by APRFS_KEEP_TEST_DIRS\n";
  std::fprintf(stderr, "radosgw fixture: kept %s\n", dir.c_str());
}

// ----- XML (ListObjectsV2) --------------------------------------------------------------------

std::string XmlUnescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    size_t semi = text.find(';', i);
    if (semi == std::string::npos) {
      out += text.substr(i);
      break;
    }
    std::string entity = text.substr(i + 1, semi - i - 1);
    if (entity == "amp") {
      out += '&';
    } else if (entity == "lt") {
      out += '<';
    } else if (entity == "gt") {
      out += '>';
    } else if (entity == "quot") {
      out += '"';
    } else if (entity == "apos") {
      out += '\'';
    } else if (!entity.empty() && entity[0] == '#') {
      unsigned long code = entity.size() > 1 && (entity[1] == 'x' || entity[1] == 'X')
                               ? std::strtoul(entity.c_str() + 2, nullptr, 16)
                               : std::strtoul(entity.c_str() + 1, nullptr, 10);
      if (code < 0x80) {
        out += static_cast<char>(code);
      } else if (code < 0x800) {
        out += static_cast<char>(0xC0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else if (code < 0x10000) {
        out += static_cast<char>(0xE0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      }
    } else {
      out += text.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The text of every <tag>...</tag>, in order.
std::vector<std::string> XmlValues(const std::string& xml, const std::string& tag) {
  std::vector<std::string> values;
  std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t at = xml.find(open); at != std::string::npos; at = xml.find(open, at)) {
    size_t start = at + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string::npos) break;
    values.push_back(XmlUnescape(xml.substr(start, end - start)));
    at = end + close.size();
  }
  return values;
}

// ----- the process's instance -----------------------------------------------------------------

std::mutex g_shared_mu;
RadosGw* g_instance = nullptr;  // never deleted: used up to atexit
std::optional<std::string> g_start_error;

void StopSharedInstance() {
  RadosGw* instance = nullptr;
  {
    std::lock_guard lock(g_shared_mu);
    instance = g_instance;
  }
  if (instance) instance->Stop();
}

class RadosGwEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { StopSharedInstance(); }
};

// A test that stopped the gateway and did not start it again (it failed halfway, say) must not
// leave the next tests of the process without one.
class GatewayRestarter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    RadosGw* instance = nullptr;
    {
      std::lock_guard lock(g_shared_mu);
      instance = g_instance;
    }
    if (!instance || !(instance->GatewayStopped() || instance->GatewayPaused())) return;
    std::fprintf(stderr, "radosgw fixture: %s.%s left the gateway stopped: starting it again\n",
                 info.test_suite_name(), info.name());
    try {
      if (instance->GatewayPaused()) instance->ResumeGateway();
      if (instance->GatewayStopped()) instance->StartGateway();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "radosgw fixture: %s\n", e.what());
    }
  }
};

[[maybe_unused]] const bool g_registered = [] {
  ::testing::AddGlobalTestEnvironment(new RadosGwEnvironment);
  ::testing::UnitTest::GetInstance()->listeners().Append(new GatewayRestarter);
  return true;
}();

}  // namespace

// ----- CurlResult -----------------------------------------------------------------------------

std::string CurlResult::Describe() const {
  std::ostringstream text;
  text << command << "\n  curl exit " << curl_exit << ", HTTP " << status;
  if (!stderr_text.empty()) text << "\n  stderr: " << Trim(stderr_text, 2000);
  if (!body.empty()) text << "\n  body: " << Trim(body, 2000);
  return text.str();
}

// ----- RadosGw --------------------------------------------------------------------------------

RadosGw& RadosGw::Shared() {
  std::lock_guard lock(g_shared_mu);
  if (g_start_error) throw std::runtime_error(*g_start_error);
  if (!g_instance) g_instance = new RadosGw;
  if (!g_instance->running_) {
    try {
      g_instance->Start();
    } catch (const std::exception& e) {
      g_start_error = e.what();
      throw;
    }
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit(StopSharedInstance); });
  }
  return *g_instance;
}

void RadosGw::Start() {
  std::lock_guard lock(mu_);
  int stale = CleanStaleRadosGwDirs();
  if (stale > 0) {
    std::fprintf(stderr, "radosgw fixture: stopped %d cluster(s) left by dead test processes\n",
                 stale);
  }
  std::string errors;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    std::string dir = NewInstanceDir();
    int port = PickPort();
    auto started = Clock::now();
    ProcResult r = RunCommand({"bash", Script(), "start", dir, std::to_string(port)}, 180s,
                           {"RGW_OWNER_PID=" + std::to_string(getpid())});
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    std::string endpoint, tls_endpoint, ca_file;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("endpoint ", 0) == 0) endpoint = line.substr(9);
      if (line.rfind("tls_endpoint ", 0) == 0) {
        std::istringstream words(line.substr(13));
        words >> tls_endpoint >> ca_file;
      }
    }
    if (r.exit_code == 0 && !endpoint.empty() && !ca_file.empty()) {
      dir_ = dir;
      port_ = port;
      endpoint_ = endpoint;
      tls_endpoint_ = tls_endpoint;
      ca_file_ = ca_file;
      running_ = true;
      gateway_stopped_ = false;
      gateway_paused_ = false;
      std::fprintf(stderr, "radosgw fixture: %s up in %.1f s (%s)\n", endpoint_.c_str(), seconds,
                   dir_.c_str());
      return;
    }
    errors += "attempt " + std::to_string(attempt) + " (port " + std::to_string(port) + ", " +
              std::to_string(seconds) + " s): radosgw.sh start " + r.Describe() + "\n";
    RunCommand({"bash", Script(), "stop", dir}, 60s);
    if (KeepDirs()) {
      KeepDir(dir);
    } else {
      RemoveDir(dir);
    }
    // Only a port someone else took meanwhile is worth another try.
    bool port_taken = r.err.find("in use") != std::string::npos ||
                      r.err.find("unable to bind") != std::string::npos ||
                      r.err.find("failed to bind") != std::string::npos;
    if (!port_taken) break;
  }
  throw std::runtime_error("radosgw fixture: the cluster did not start\n" + errors);
}

void RadosGw::Stop() {
  std::lock_guard lock(mu_);
  if (!running_) return;
  running_ = false;
  ProcResult r = RunCommand({"bash", Script(), "stop", dir_}, 90s);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "radosgw fixture: radosgw.sh stop %s: %s\n", dir_.c_str(),
                 r.Describe().c_str());
  }
  if (KeepDirs()) {
    KeepDir(dir_);
  } else {
    RemoveDir(dir_);
  }
}

void RadosGw::RunScript(const std::vector<std::string>& args, std::chrono::seconds timeout) const {
  std::vector<std::string> argv = {"bash", Script()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r = RunCommand(argv, timeout);
  if (r.exit_code != 0) {
    throw std::runtime_error("radosgw fixture: " + Quote(argv) + ": " + r.Describe());
  }
}

void RadosGw::StopGateway() {
  std::lock_guard lock(mu_);
  RunScript({"stop-gateway", dir_}, 60s);
  gateway_stopped_ = true;
  gateway_paused_ = false;
}

void RadosGw::StartGateway() {
  std::lock_guard lock(mu_);
  RunScript({"start-gateway", dir_}, 180s);
  gateway_stopped_ = false;
}

bool RadosGw::GatewayStopped() const {
  std::lock_guard lock(mu_);
  return running_ && gateway_stopped_;
}

void RadosGw::PauseGateway() {
  std::lock_guard lock(mu_);
  RunScript({"pause-gateway", dir_}, 60s);
  gateway_paused_ = true;
}

void RadosGw::ResumeGateway() {
  std::lock_guard lock(mu_);
  RunScript({"resume-gateway", dir_}, 60s);
  gateway_paused_ = false;
}

bool RadosGw::GatewayPaused() const {
  std::lock_guard lock(mu_);
  return running_ && gateway_paused_;
}

std::string RadosGw::EncodeKey(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      out += static_cast<char>(c);
    } else if (c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string RadosGw::EncodeQueryValue(const std::string& value) {
  std::string out;
  for (char c : EncodeKey(value)) {
    if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RadosGw::Url(const std::string& bucket, const std::string& key,
                         const std::string& query) const {
  std::string url = endpoint_ + "/" + bucket;
  if (!key.empty()) url += "/" + EncodeKey(key);
  if (!query.empty()) url += "?" + query;
  return url;
}

CurlResult RadosGw::Curl(const std::string& url, const S3Credentials& who,
                         const std::vector<std::string>& extra,
                         std::chrono::seconds timeout) const {
  TempFile body, headers;
  std::vector<std::string> argv = {"curl",
                                   "-sS",
                                   "--globoff",
                                   "--path-as-is",
                                   "--connect-timeout",
                                   "10",
                                   "--max-time",
                                   std::to_string(std::max<int64_t>(1, timeout.count())),
                                   "-o",
                                   body.path(),
                                   "-D",
                                   headers.path(),
                                   "-w",
                                   "%{http_code}"};
  if (!who.anonymous()) {
    argv.insert(argv.end(), {"--aws-sigv4", std::string("aws:amz:") + kRegion + ":s3", "--user",
                             who.access_key + ":" + who.secret_key, "-H",
                             "x-amz-content-sha256: UNSIGNED-PAYLOAD"});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  ProcResult r = RunCommand(argv, timeout + 10s);
  CurlResult result;
  result.command = Quote(argv);
  result.curl_exit = r.timed_out || r.signal ? -1 : r.exit_code;
  result.status = std::atoi(r.out.c_str());
  result.body = Slurp(body.path());
  result.headers = Slurp(headers.path());
  result.stderr_text = r.err;
  return result;
}

CurlResult RadosGw::Expect(const std::string& what, const std::string& url,
                           const std::vector<std::string>& extra,
                           std::vector<int> ok_statuses) const {
  CurlResult r = Curl(url, Tester(), extra);
  if (r.curl_exit != 0 ||
      std::find(ok_statuses.begin(), ok_statuses.end(), r.status) == ok_statuses.end()) {
    throw std::runtime_error("radosgw fixture: " + what + " failed:\n" + r.Describe());
  }
  return r;
}

void RadosGw::CreateBucket(const std::string& bucket, bool public_read) {
  std::vector<std::string> extra = {"-X", "PUT"};
  if (public_read) extra.insert(extra.end(), {"-H", "x-amz-acl: public-read"});
  Expect("create bucket " + bucket, Url(bucket), extra, {200});
  if (!public_read) return;
  // The bucket ACL lets anyone list it; reading its objects needs each object's ACL, or this.
  TempFile policy;
  WriteFileOrThrow(policy.path(),
                   R"({"Version":"2012-10-17","Statement":[{"Sid":"public-read",)"
                   R"("Effect":"Allow","Principal":"*","Action":["s3:GetObject","s3:ListBucket"],)"
                   R"("Resource":["arn:aws:s3:::)" +
                       bucket + R"(","arn:aws:s3:::)" + bucket + R"(/*"]}]})");
  Expect("set the public-read policy of bucket " + bucket, Url(bucket, "", "policy="),
         {"-T", policy.path()}, {200, 204});
}

void RadosGw::PutFile(const std::string& bucket, const std::string& key,
                      const std::string& local_path) {
  if (key.empty() || key.back() == '/') {
    // curl -T appends the local file name to a URL that ends with '/'.
    throw std::runtime_error("radosgw fixture: PutFile: bad key '" + key + "'");
  }
  std::error_code ec;
  if (!fs::is_regular_file(local_path, ec)) {
    throw std::runtime_error("radosgw fixture: PutFile: no file " + local_path);
  }
  Expect("PUT s3://" + bucket + "/" + key, Url(bucket, key), {"-T", local_path}, {200});
}

void RadosGw::PutBytes(const std::string& bucket, const std::string& key,
                       const std::string& bytes) {
  TempFile file;
  WriteFileOrThrow(file.path(), bytes);
  PutFile(bucket, key, file.path());
}

std::vector<std::string> RadosGw::UploadFolder(const std::string& bucket, const std::string& prefix,
                                               const std::string& local_dir) {
  std::vector<std::pair<std::string, std::string>> files;  // key, path
  const std::string root = fs::path(local_dir).string();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (!fs::is_regular_file(it->path(), type_ec)) continue;  // follows symlinks
    // The entries are root/relative: lexically, as fs::relative() would resolve a symlink
    // (an HF snapshot's model.json -> ../../blobs/<sha>) to its target's path.
    std::string relative = it->path().string().substr(root.size());
    relative.erase(0, relative.find_first_not_of('/'));
    files.emplace_back(prefix + relative, it->path().string());
  }
  if (ec) {
    throw std::runtime_error("radosgw fixture: UploadFolder: cannot walk " + local_dir + ": " +
                             ec.message());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> keys;
  for (const auto& [key, path] : files) {
    PutFile(bucket, key, path);
    keys.push_back(key);
  }
  return keys;
}

void RadosGw::DeleteObject(const std::string& bucket, const std::string& key) {
  Expect("DELETE s3://" + bucket + "/" + key, Url(bucket, key), {"-X", "DELETE"}, {200, 204});
}

std::string RadosGw::GetObject(const std::string& bucket, const std::string& key) {
  return Expect("GET s3://" + bucket + "/" + key, Url(bucket, key), {}, {200}).body;
}

std::vector<std::string> RadosGw::ListKeys(const std::string& bucket, const std::string& prefix) {
  std::vector<std::string> keys;
  std::string token;
  for (int page = 0; page < 10000; ++page) {
    // SigV4 wants the query sorted by name: continuation-token < list-type < prefix.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + EncodeQueryValue(token) + "&";
    query += "list-type=2";
    if (!prefix.empty()) query += "&prefix=" + EncodeQueryValue(prefix);
    CurlResult r =
        Expect("ListObjectsV2 s3://" + bucket + "/" + prefix, Url(bucket, "", query), {}, {200});
    for (const std::string& contents : XmlValues(r.body, "Contents")) {
      for (const std::string& key : XmlValues(contents, "Key")) keys.push_back(key);
    }
    std::vector<std::string> truncated = XmlValues(r.body, "IsTruncated");
    std::vector<std::string> next = XmlValues(r.body, "NextContinuationToken");
    if (truncated.empty() || truncated[0] != "true" || next.empty()) break;
    token = next[0];
  }
  return keys;
}

// ----- stale instances ------------------------------------------------------------------------

int CleanStaleRadosGwDirs() {
  int removed = 0;
  DIR* root = opendir(kTempRoot);
  if (!root) return 0;
  std::vector<std::string> candidates;
  while (dirent* entry = readdir(root)) {
    if (std::strncmp(entry->d_name, kDirPrefix, std::strlen(kDirPrefix)) == 0) {
      candidates.push_back(std::string(kTempRoot) + "/" + entry->d_name);
    }
  }
  closedir(root);
  for (const std::string& dir : candidates) {
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    if (access((dir + "/stopped").c_str(), F_OK) == 0) continue;
    std::string owner = Slurp(dir + "/owner");
    if (owner.empty()) {
      // Between mkdtemp and writing the owner file, or a very old leftover.
      if (time(nullptr) - st.st_mtime < 600) continue;
    } else if (OwnerAlive(owner)) {
      continue;
    }
    ProcResult r = RunCommand({"bash", Script(), "stop", dir}, 90s);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "radosgw fixture: stopping stale %s: %s\n", dir.c_str(),
                   r.Describe().c_str());
      continue;
    }
    RemoveDir(dir);
    ++removed;
  }
  return removed;
}

}  // namespace aprfs::testing
