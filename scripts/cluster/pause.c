/*
 * The pod sandbox's process ("pause" container). Every pod gets one: it holds the pod's
 * namespaces open for the lifetime of the pod while the app containers come and go. It
 * sleeps; as PID 1 of a pod that shares its PID namespace it also reaps orphaned zombies;
 * SIGTERM/SIGINT (the runtime stopping the sandbox) end it at once with status 0.
 * Built static (scripts/cluster/up.sh) so the image needs no libc: one file.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGTERM, &stop, 0);
  sigaction(SIGINT, &stop, 0);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &child, 0);
  for (;;)
    pause();
}
