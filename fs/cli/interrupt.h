#pragma once

namespace aprfs {

// Ctrl-C (SIGINT) and SIGTERM set a flag instead of killing the process, so a long command
// stops between steps, says where it stopped and exits cleanly; a second one kills at once.
void CatchInterrupts();
bool Interrupted();

}  // namespace aprfs
