#include "fs/mount/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace aprfs {

bool NotifyService(const std::string& state) {
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path == nullptr || (socket_path[0] != '/' && socket_path[0] != '@')) return true;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  size_t length = std::strlen(socket_path);
  if (length >= sizeof(address.sun_path)) return false;
  std::memcpy(address.sun_path, socket_path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  socklen_t address_length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                        reinterpret_cast<const sockaddr*>(&address), address_length);
  close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

}  // namespace aprfs
