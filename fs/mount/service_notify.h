#pragma once

#include <string>

namespace aprfs {

// Tells the service manager about the daemon's state ("READY=1", "STOPPING=1",
// "STATUS=serving 3 models") when it runs as a systemd Type=notify service, i.e. when
// $NOTIFY_SOCKET is set; does nothing otherwise. Returns false if the message could not be sent.
//
// This is the whole sd_notify(3) protocol: one datagram to the AF_UNIX socket named by
// $NOTIFY_SOCKET ('@' for the abstract namespace). Speaking it directly keeps libsystemd out of
// the daemon, which must also build and run where systemd is absent; the protocol is a stable,
// documented interface (systemd's "Interface Portability and Stability" promise).
bool NotifyService(const std::string& state);

}  // namespace aprfs
