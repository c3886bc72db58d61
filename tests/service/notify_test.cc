// systemd's Type=notify readiness without systemd: the test plays the service manager, with a
// datagram socket named by $NOTIFY_SOCKET, as PID 1 would for aprfs@.service.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <regex>

#include "tests/service/service_util.h"

extern char** environ;

namespace aprfs_stest {
namespace {

struct Notification {
  std::string text;
  pid_t sender = 0;  // from SCM_CREDENTIALS, as systemd checks it (NotifyAccess=main)
};

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    int on = 1;
    ok_ = ok_ && setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  bool ok() const { return ok_; }

  // The next datagram, or nullopt after `timeout`.
  std::optional<Notification> Receive(Millis timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buffer[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec io{buffer, sizeof(buffer)};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &message, 0);
    if (n < 0) return std::nullopt;
    Notification got{std::string(buffer, static_cast<size_t>(n)), 0};
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        got.sender = cred.pid;
      }
    }
    return got;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

// `aprfs mount -f ...` with NOTIFY_SOCKET set, as systemd starts aprfs@.service.
pid_t StartNotifyingDaemon(const std::vector<std::string>& args, const std::string& socket,
                           const std::string& log, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> argv = {AprfsBinary(), "mount", "-f"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env = {"NOTIFY_SOCKET=" + socket, "PATH=/usr/bin:/bin:/usr/sbin:/sbin",
                                  "HOME=/nonexistent"};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> raw_argv, raw_env;
  for (std::string& a : argv) raw_argv.push_back(a.data());
  raw_argv.push_back(nullptr);
  for (std::string& e : env) raw_env.push_back(e.data());
  raw_env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, raw_argv[0], &actions, nullptr, raw_argv.data(), raw_env.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Whether a stat() of `path` from a child process returns within `timeout`.
bool StatAnswers(const std::string& path, Millis timeout) {
  Child child = StartChild([&]() -> int {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? 0 : 1;
  });
  ProcResult r = WaitChild(child, timeout);
  return r.exit_code == 0;
}

TEST_F(ServiceTest, ReadyIsSentOnceTheMountAnswersAndStoppingOnSigterm) {
  ExpectedTensors expected = WriteSmallModel(models_dir(), "n", 21);
  const std::string socket_path = root() + "/notify.sock";
  NotifySocket manager(socket_path);
  ASSERT_TRUE(manager.ok()) << std::strerror(errno);
  AdoptMount(mountpoint());
  const std::string log = root() + "/notify-daemon.log";
  pid_t daemon = StartNotifyingDaemon(
      {mountpoint(), "--no-hf-cache", "--source", models_dir(), "--log-level", "debug"},
      socket_path, log);
  ASSERT_GT(daemon, 0);

  std::optional<Notification> ready = manager.Receive(30s);
  ASSERT_TRUE(ready.has_value()) << "no notification within 30 s\n" << SlurpOrEmpty(log);
  // Freeze the daemon the moment READY=1 arrives: had it been sent before the daemon answered
  // its first request, the FUSE handshake would still be pending and the stat below would hang.
  // Sent after the daemon's own stat() was answered, the kernel has the root's attributes
  // (valid for 1 s) and answers without it.
  kill(daemon, SIGSTOP);
  bool answered_while_frozen = StatAnswers(mountpoint(), 3s);
  kill(daemon, SIGCONT);
  EXPECT_EQ(ready->text.rfind("READY=1\n", 0), 0u) << "first notification: " << ready->text;
  EXPECT_NE(ready->text.find("STATUS=serving " + mountpoint()), std::string::npos) << ready->text;
  EXPECT_EQ(ready->sender, daemon) << "sent by another process than the main one";
  EXPECT_TRUE(answered_while_frozen)
      << "READY=1 arrived before the mount had answered a request";
  EXPECT_TRUE(IsAprfsMounted(mountpoint()));
  ExpectModelReads(MP("n.apr"), expected);

  // systemctl stop: SIGTERM. The daemon says it is stopping, unmounts and exits 0.
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  std::optional<Notification> stopping = manager.Receive(10s);
  ASSERT_TRUE(stopping.has_value()) << "no notification after SIGTERM";
  EXPECT_EQ(stopping->text.rfind("STOPPING=1", 0), 0u) << stopping->text;
  int status = 0;
  for (int i = 0; i < 1000 && waitpid(daemon, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_FALSE(FindMount(mountpoint()).has_value()) << "SIGTERM left the mount behind";
}

TEST_F(ServiceTest, AFailedMountNeverSaysReady) {
  const std::string socket_path = root() + "/notify.sock";
  NotifySocket manager(socket_path);
  ASSERT_TRUE(manager.ok());
  AdoptMount(mountpoint());
  const std::string log = root() + "/notify-daemon.log";
  // libfuse rejects the value after the checks aprfs makes itself: the daemon starts, fails.
  pid_t daemon = StartNotifyingDaemon(
      {mountpoint(), "--no-hf-cache", "-o", "max_read=notanumber"}, socket_path, log);
  ASSERT_GT(daemon, 0);
  int status = 0;
  for (int i = 0; i < 3000 && waitpid(daemon, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "wait status " << status;
  std::string said;
  while (std::optional<Notification> n = manager.Receive(200ms)) said += n->text + "\n";
  EXPECT_EQ(said.find("READY=1"), std::string::npos) << said;
  EXPECT_NE(said.find("STATUS=mount failed: invalid FUSE options"), std::string::npos) << said;
  EXPECT_FALSE(FindMount(mountpoint()).has_value());
}

// Under systemd, stderr is the journal (JOURNAL_STREAM names it), which stamps lines itself.
TEST_F(ServiceTest, UnderJournaldTheLogLeavesTimestampsToTheJournal) {
  WriteSmallModel(models_dir(), "j", 22);
  const std::string socket_path = root() + "/notify.sock";
  AdoptMount(mountpoint());
  for (bool journal : {true, false}) {
    SCOPED_TRACE(journal ? "stderr is the journal" : "stderr is a plain file");
    NotifySocket manager(socket_path);
    ASSERT_TRUE(manager.ok());
    const std::string log = root() + (journal ? "/journal.log" : "/plain.log");
    std::ofstream(log).flush();
    struct stat st;
    ASSERT_EQ(stat(log.c_str(), &st), 0);
    std::vector<std::string> env;
    if (journal) env.push_back("JOURNAL_STREAM=" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino));
    pid_t daemon = StartNotifyingDaemon({mountpoint(), "--no-hf-cache", "--source", models_dir()},
                                        socket_path, log, env);
    ASSERT_GT(daemon, 0);
    ASSERT_TRUE(manager.Receive(30s).has_value()) << SlurpOrEmpty(log);
    kill(daemon, SIGTERM);
    int status = 0;
    waitpid(daemon, &status, 0);
    std::string text = SlurpOrEmpty(log);
    ASSERT_NE(text.find("info serving " + mountpoint()), std::string::npos) << text;
    bool stamped = std::regex_search(text, std::regex(R"((^|\n)20\d\d-\d\d-\d\d \d\d:\d\d)"));
    EXPECT_EQ(stamped, !journal) << text;
    if (journal) {
      EXPECT_EQ(text.rfind("info serving", 0), 0u) << text;
    }
  }
}

}  // namespace
}  // namespace aprfs_stest
