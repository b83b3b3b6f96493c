/* The e2e test's sandbox ("pause") program: sleeps until SIGTERM/SIGINT, then exits 0.
 * Linked statically so the image needs nothing else. */
#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGTERM, done);
    signal(SIGINT, done);
    for (;;) pause();
}
