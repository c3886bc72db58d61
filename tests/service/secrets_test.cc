// The Hub token never reaches a log line or an error message, even at --log-level trace and
// when every request fails: against an unreachable endpoint and against one that answers 401
// and 500 (and records the Authorization header it got, so the test knows the token was sent).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "tests/service/service_util.h"

extern char** environ;

namespace aprfs_stest {
namespace {

const std::string kToken = "hf_secretTOKENnotForLogs0123456789";

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// A Hub that fails: 401 for the API, 500 for anything else; appends each Authorization header
// to `seen`.
const char* const kFailingHub = R"(
import http.server, sys
seen, port = sys.argv[1], int(sys.argv[2])
class Hub(http.server.BaseHTTPRequestHandler):
    def answer(self):
        with open(seen, 'a') as f:
            f.write(self.headers.get('Authorization', '') + '\n')
        status = 401 if self.path.startswith('/api/') else 500
        self.send_response(status)
        self.send_header('X-Error-Code', 'RepoNotFound' if status == 401 else 'Oops')
        self.send_header('Content-Length', '2')
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(b'no')
    do_GET = do_HEAD = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', port), Hub).serve_forever()
)";

class SecretsTest : public ServiceTest {
 protected:
  // Runs `aprfs ARGS` with the token and the endpoint in its environment.
  ProcResult RunWithToken(const std::string& endpoint, std::vector<std::string> args) {
    std::vector<std::string> argv = {"env", "HF_TOKEN=" + kToken, "HF_ENDPOINT=" + endpoint,
                                     "HF_HUB_ETAG_TIMEOUT=2", "HF_HUB_DOWNLOAD_TIMEOUT=2",
                                     "HF_HOME=" + work_dir() + "/hf", AprfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 120s);
  }

  // mount (background, trace log), a look inside if it came up, unmount; then `aprfs ls`.
  // Returns everything aprfs wrote.
  std::string ExerciseAndCollect(const std::string& endpoint) {
    AdoptMount(mountpoint());
    const std::string log = root() + "/trace.log";
    ProcResult mount = RunWithToken(
        endpoint, {"mount", mountpoint(), "--repo", "someorg/private-model", "--no-hf-cache",
                   "--cache-dir", work_dir() + "/cache", "--log-level", "trace", "--log-file", log});
    std::string all = mount.out + mount.err;
    if (mount.exit_code == 0) {
      ProcResult look = RunCommand({"ls", "-la", mountpoint()}, 60s);
      all += look.err;
      RunAprfs({"umount", mountpoint()}, 30s);
      WaitNoDaemons(mountpoint(), 10s);
    }
    ProcResult ls = RunWithToken(endpoint, {"ls", "--repo", "someorg/private-model", "--no-hf-cache",
                                            "--cache-dir", work_dir() + "/cache"});
    all += ls.out + ls.err;
    all += SlurpOrEmpty(log);
    return all;
  }
};

TEST_F(SecretsTest, TokenIsNotLoggedWhenTheHubIsUnreachable) {
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(FreePort());
  std::string output = ExerciseAndCollect(endpoint);
  EXPECT_NE(output.find("127.0.0.1"), std::string::npos)
      << "the failures were not reported at all:\n" << output;
  EXPECT_EQ(output.find(kToken), std::string::npos) << "the token leaked:\n" << output;
  EXPECT_EQ(output.find("secretTOKEN"), std::string::npos) << output;
}

TEST_F(SecretsTest, TokenIsNotLoggedWhenTheHubRefuses) {
  const int port = FreePort();
  const std::string seen = root() + "/authorization-headers";
  const std::string script = root() + "/failing_hub.py";
  std::ofstream(script) << kFailingHub;
  std::vector<std::string> argv = {"python3", script, seen, std::to_string(port)};
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t server = -1;
  ASSERT_EQ(posix_spawnp(&server, "python3", nullptr, nullptr, raw.data(), environ), 0);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{server};
  // Up once it accepts a connection.
  for (int i = 0; i < 500; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool up = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (up) break;
    std::this_thread::sleep_for(20ms);
  }
  std::string output = ExerciseAndCollect("http://127.0.0.1:" + std::to_string(port));
  ASSERT_NE(SlurpOrEmpty(seen).find("Bearer " + kToken), std::string::npos)
      << "the fake Hub never received the token, so this test proves nothing; it got:\n"
      << SlurpOrEmpty(seen);
  EXPECT_NE(output.find("401"), std::string::npos) << "the refusals were not reported:\n" << output;
  EXPECT_EQ(output.find(kToken), std::string::npos) << "the token leaked:\n" << output;
  EXPECT_EQ(output.find("secretTOKEN"), std::string::npos) << output;
}

}  // namespace
}  // namespace aprfs_stest
