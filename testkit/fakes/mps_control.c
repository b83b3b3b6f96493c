/*
 * Fake `nvidia-cuda-mps-control` (the CUDA MPS control daemon and its command client) for
 * edgegpu tests. Never shipped.
 *
 * Built as a STATIC executable (testkit/build.rs): the device plugin runs the host's binary
 * inside a chroot of the host root, and a fake host root has no libc.
 *
 * Interface, as NVIDIA's binary (docs.nvidia.com/deploy/mps, "Tools and Interface Reference"):
 *
 *   nvidia-cuda-mps-control -f   control daemon in the foreground
 *   nvidia-cuda-mps-control -d   the same, daemonized (the parent exits 0 once the socket listens)
 *   nvidia-cuda-mps-control      UI mode: commands on stdin, one per line, answers on stdout;
 *                                `Cannot find MPS control daemon process` on stderr and exit 1
 *                                when no daemon listens
 *
 * The daemon needs CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (the fake has no defaults
 * for the daemon, like Tegra); UI mode falls back to /tmp/nvidia-mps like the x86 binary. The
 * daemon listens on `<pipe>/control`, writes `<pipe>/nvidia-cuda-mps-control.pid` and appends
 * to `<log>/control.log`. Commands:
 *
 *   set_default_active_thread_percentage <pct>   answers the value as `25.0`
 *   get_default_active_thread_percentage         `100.0` until set (or the daemon's
 *                                                CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
 *   set_default_device_pinned_mem_limit <dev> <value>   no answer; not validated (the value
 *                                                is stored verbatim, last set wins per <dev>)
 *   get_default_device_pinned_mem_limit <dev>    the value set for exactly that identifier (no
 *                                                UUID <-> ordinal translation), in the largest
 *                                                unit that keeps it whole, as the real daemon
 *                                                answers (measured, driver 580.159.04: `4096M`
 *                                                -> `4G`, `80896M` -> `79G`, `1000M` stays), or
 *                                                `No default pinned memory limit set for the
 *                                                device!`
 *   get_server_list                              empty (the fake starts no MPS server)
 *   quit                                         no answer; removes socket and pid file, exit 0
 *   anything else                                an error line (UI client exits 1)
 *
 * For tests:
 *   <pipe>/fake-mps-commands   every command received, verbatim, one per line
 *   <pipe>/fake-mps-state      the defaults now in force (rewritten with tmp + rename):
 *                              `default_active_thread_percentage <pct>` and
 *                              `default_device_pinned_mem_limit <dev> <value>` lines, the limit
 *                              set last at the end (the fake libcuda lets the last matching
 *                              line win, as "last set wins" across UUID and ordinal)
 *   EDGEGPU_FAKE_MPS_EXIT_AFTER=<n>   the daemon exits with status 3 right after answering its
 *                              n-th command, leaving socket and pid file behind (a crash)
 *   <pipe>/fake-mps-refuse     while it exists, every command is answered with an error
 *
 * Wire format between UI client and daemon (the fake's own): one connection per command; the
 * client sends the line and shuts down its sending side; the daemon answers one status byte
 * ('0' ok, '1' error) followed by the answer text and closes. A connection that sends nothing
 * is a liveness probe (the fake libcuda and the "already running" check make those).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROGRAM "nvidia-cuda-mps-control"
#define MAX_LINE 4096
#define MAX_LIMITS 64
#define UI_DEFAULT_PIPE_DIRECTORY "/tmp/nvidia-mps"

static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char pid_path[PATH_MAX];
static char commands_path[PATH_MAX];
static char state_path[PATH_MAX];
static char refuse_path[PATH_MAX];
static FILE *log_file;
static volatile sig_atomic_t stop_signal;

static struct {
    double active_thread_percentage;
    struct {
        char device[128];
        char value[64];
    } limits[MAX_LIMITS];
    int nlimits;
    long handled;
    long exit_after; /* 0: never */
} daemon_state;

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, PROGRAM ": ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(1);
}

/* `[2025-01-31 12:00:00.123 Control 4242] <message>`, the form of NVIDIA's control.log. */
static void log_line(const char *format, ...) {
    if (log_file == NULL) return;
    struct timeval now;
    gettimeofday(&now, NULL);
    struct tm tm;
    localtime_r(&now.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(log_file, "[%s.%03d Control %d] ", stamp, (int)(now.tv_usec / 1000), (int)getpid());
    va_list args;
    va_start(args, format);
    vfprintf(log_file, format, args);
    va_end(args);
    fputc('\n', log_file);
    fflush(log_file);
}

static void join(char *out, size_t size, const char *dir, const char *name) {
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) die("path %s/%s is too long", dir, name);
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = '\0';
    return s;
}

static int set_socket_path(const char *pipe_dir) {
    return (size_t)snprintf(socket_path, sizeof socket_path, "%s/control", pipe_dir) < sizeof socket_path;
}

/* A connected socket to the daemon at socket_path, or -1. */
static int connect_daemon(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, socket_path, sizeof socket_path);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t n = write(fd, data, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        data += n;
        length -= (size_t)n;
    }
    return 0;
}

/* ---- Daemon ---------------------------------------------------------------------------------- */

static void write_state(void) {
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", state_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        log_line("cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "default_active_thread_percentage %.1f\n", daemon_state.active_thread_percentage);
    for (int i = 0; i < daemon_state.nlimits; i++)
        fprintf(f, "default_device_pinned_mem_limit %s %s\n", daemon_state.limits[i].device,
                daemon_state.limits[i].value);
    if (fclose(f) != 0 || rename(tmp, state_path) != 0) log_line("cannot publish %s: %s", state_path, strerror(errno));
}

static void record_command(const char *command) {
    int fd = open(commands_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_line("cannot append to %s: %s", commands_path, strerror(errno));
        return;
    }
    char line[MAX_LINE + 2];
    int n = snprintf(line, sizeof line, "%s\n", command);
    if (write_all(fd, line, (size_t)n) != 0) log_line("cannot append to %s: %s", commands_path, strerror(errno));
    close(fd);
}

/* A percentage as set_default_active_thread_percentage takes it: a number in (0, 100]. */
static int parse_percentage(const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !(value > 0.0 && value <= 100.0)) return 0;
    *out = value;
    return 1;
}

static void set_limit(const char *device, const char *value) {
    /* Last set wins: drop the identifier's old entry, append the new one (the state file keeps
     * the order in which limits were set). */
    int n = daemon_state.nlimits;
    for (int i = 0; i < n; i++) {
        if (strcmp(daemon_state.limits[i].device, device) == 0) {
            memmove(&daemon_state.limits[i], &daemon_state.limits[i + 1], (size_t)(n - i - 1) * sizeof daemon_state.limits[0]);
            n--;
            break;
        }
    }
    if (n == MAX_LIMITS) {
        memmove(&daemon_state.limits[0], &daemon_state.limits[1], (size_t)(n - 1) * sizeof daemon_state.limits[0]);
        n--;
    }
    snprintf(daemon_state.limits[n].device, sizeof daemon_state.limits[n].device, "%s", device);
    snprintf(daemon_state.limits[n].value, sizeof daemon_state.limits[n].value, "%s", value);
    daemon_state.nlimits = n + 1;
}

/* Handles one command; writes the answer into `answer`; returns 0 (ok), 1 (error) or 2 (quit). */

/* The real daemon's answer for a limit: the value in the largest of M, G, T that keeps it a
 * whole number (`4096M` -> `4G`); anything it cannot read is echoed as set. */
static void normalized_limit(const char *value, char *answer, size_t size) {
    char *end = NULL;
    unsigned long long n = strtoull(value, &end, 10);
    unsigned long long mib;
    if (end == value) {
        snprintf(answer, size, "%s\n", value);
        return;
    }
    if (strcmp(end, "M") == 0 || strcmp(end, "MB") == 0)
        mib = n;
    else if (strcmp(end, "G") == 0 || strcmp(end, "GB") == 0)
        mib = n * 1024;
    else {
        snprintf(answer, size, "%s\n", value);
        return;
    }
    if (mib != 0 && mib % (1024ULL * 1024) == 0)
        snprintf(answer, size, "%lluT\n", mib / (1024ULL * 1024));
    else if (mib != 0 && mib % 1024 == 0)
        snprintf(answer, size, "%lluG\n", mib / 1024);
    else
        snprintf(answer, size, "%lluM\n", mib);
}

static int handle(char *command, char *answer, size_t size) {
    answer[0] = '\0';
    if (access(refuse_path, F_OK) == 0) {
        snprintf(answer, size, "Error: command refused (%s exists)\n", refuse_path);
        return 1;
    }
    char copy[MAX_LINE];
    snprintf(copy, sizeof copy, "%s", command);
    char *words[4];
    int nwords = 0;
    for (char *save = NULL, *w = strtok_r(copy, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        if (nwords == 4) {
            nwords++;
            break;
        }
        words[nwords++] = w;
    }
    const char *name = words[0];
    int args = nwords - 1;
#define EXPECT(n, usage)                                                           \
    do {                                                                           \
        if (args != (n)) {                                                         \
            snprintf(answer, size, "Invalid arguments. Usage: %s %s\n", name, usage); \
            return 1;                                                              \
        }                                                                          \
    } while (0)
    if (strcmp(name, "set_default_active_thread_percentage") == 0) {
        EXPECT(1, "<percentage>");
        double value;
        if (!parse_percentage(words[1], &value)) {
            snprintf(answer, size, "Invalid percentage: %s\n", words[1]);
            return 1;
        }
        daemon_state.active_thread_percentage = value;
        write_state();
        snprintf(answer, size, "%.1f\n", value);
        return 0;
    }
    if (strcmp(name, "get_default_active_thread_percentage") == 0) {
        EXPECT(0, "");
        snprintf(answer, size, "%.1f\n", daemon_state.active_thread_percentage);
        return 0;
    }
    if (strcmp(name, "set_default_device_pinned_mem_limit") == 0) {
        EXPECT(2, "<device> <value>");
        set_limit(words[1], words[2]);
        write_state();
        return 0;
    }
    if (strcmp(name, "get_default_device_pinned_mem_limit") == 0) {
        EXPECT(1, "<device>");
        for (int i = daemon_state.nlimits - 1; i >= 0; i--) {
            if (strcmp(daemon_state.limits[i].device, words[1]) == 0) {
                normalized_limit(daemon_state.limits[i].value, answer, size);
                return 0;
            }
        }
        snprintf(answer, size, "No default pinned memory limit set for the device!\n");
        return 0;
    }
    if (strcmp(name, "get_server_list") == 0) {
        EXPECT(0, "");
        return 0;
    }
    if (strcmp(name, "quit") == 0) {
        EXPECT(0, "");
        return 2;
    }
#undef EXPECT
    snprintf(answer, size, "Unrecognized command: %s\n", command);
    return 1;
}

static void remove_files(void) {
    unlink(socket_path);
    unlink(pid_path);
}

/* Reads one command line from a connection: NUL-terminated into buf; returns its length, 0 for
 * a connection that sent nothing, -1 on error or timeout. */
static ssize_t read_command(int fd, char *buf, size_t size) {
    size_t used = 0;
    while (used + 1 < size) {
        ssize_t n = read(fd, buf + used, size - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        used += (size_t)n;
        if (memchr(buf, '\n', used) != NULL) break;
    }
    buf[used] = '\0';
    char *newline = strchr(buf, '\n');
    if (newline != NULL) *newline = '\0';
    return (ssize_t)used;
}

static void on_stop_signal(int signal) { stop_signal = signal; }

/* The signal mask ppoll waits with: everything but SIGTERM/SIGINT as before. */
static sigset_t wait_mask;

/* SIGTERM/SIGINT are blocked except inside ppoll, so a stop request is never lost between
 * checking the flag and waiting; set up before the socket listens, so a stop sent as soon as a
 * client sees the daemon is handled, not fatal. */
static void catch_stop_signals(void) {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_signals, &wait_mask);
    sigdelset(&wait_mask, SIGTERM);
    sigdelset(&wait_mask, SIGINT);
    struct sigaction action = {.sa_handler = on_stop_signal};
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
}

static void serve(int listener) {
    for (;;) {
        struct pollfd waiting = {.fd = listener, .events = POLLIN};
        int ready = ppoll(&waiting, 1, NULL, &wait_mask);
        if (stop_signal) {
            log_line("Received signal %d, exiting", (int)stop_signal);
            remove_files();
            log_line("Exit");
            exit(0);
        }
        if (ready <= 0) continue;
        int connection = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (connection < 0) continue;
        /* A client that connects and never writes must not wedge the daemon. */
        struct timeval timeout = {.tv_sec = 5};
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        char line[MAX_LINE];
        ssize_t length = read_command(connection, line, sizeof line);
        char *command = trim(line);
        if (length <= 0 || *command == '\0') {
            close(connection);
            continue;
        }
        log_line("Accepting connection...");
        log_line("NEW UI");
        log_line("Cmd:%s", command);
        record_command(command);
        daemon_state.handled++;
        char answer[MAX_LINE + 256];
        int status = handle(command, answer, sizeof answer);
        if (answer[0] != '\0') log_line("%.*s", (int)strcspn(answer, "\n"), answer);
        char status_byte = status == 1 ? '1' : '0';
        if (write_all(connection, &status_byte, 1) == 0) write_all(connection, answer, strlen(answer));
        if (status == 2) {
            remove_files();
            log_line("Exit");
            close(listener);
            close(connection);
            exit(0);
        }
        if (daemon_state.exit_after > 0 && daemon_state.handled == daemon_state.exit_after) {
            /* A crash: no cleanup. The listener is closed first, explicitly: at exit the kernel
             * may release the connection before it, and a client that saw the answer end could
             * then still connect to a dying daemon. */
            close(listener);
            _exit(3);
        }
        log_line("UI closed");
        close(connection);
    }
}

/* Stdio of the daemonized child: nothing to read, output into the log (the caller's pipes must
 * close, or a test waiting for the launcher's output would wait forever). */
static void detach_stdio(void) {
    int input = open("/dev/null", O_RDONLY);
    if (input < 0) {
        /* No /dev/null in a bare chroot: the read end of a pipe without writer reads EOF. */
        int p[2];
        if (pipe(p) == 0) {
            close(p[1]);
            input = p[0];
        }
    }
    if (input >= 0) {
        dup2(input, 0);
        if (input > 2) close(input);
    }
    dup2(fileno(log_file), 1);
    dup2(fileno(log_file), 2);
}

static int run_daemon(int daemonize) {
    const char *pipe_dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *log_dir = getenv("CUDA_MPS_LOG_DIRECTORY");
    if (pipe_dir == NULL || *pipe_dir == '\0') die("CUDA_MPS_PIPE_DIRECTORY is not set (the fake daemon has no default)");
    if (log_dir == NULL || *log_dir == '\0') die("CUDA_MPS_LOG_DIRECTORY is not set (the fake daemon has no default)");
    if (!set_socket_path(pipe_dir)) die("socket path %s/control is longer than %zu bytes", pipe_dir, sizeof socket_path - 1);
    join(pid_path, sizeof pid_path, pipe_dir, "nvidia-cuda-mps-control.pid");
    join(commands_path, sizeof commands_path, pipe_dir, "fake-mps-commands");
    join(state_path, sizeof state_path, pipe_dir, "fake-mps-state");
    join(refuse_path, sizeof refuse_path, pipe_dir, "fake-mps-refuse");
    if (mkdir(pipe_dir, 0755) != 0 && errno != EEXIST) die("cannot create %s: %s", pipe_dir, strerror(errno));
    if (mkdir(log_dir, 0755) != 0 && errno != EEXIST) die("cannot create %s: %s", log_dir, strerror(errno));
    char log_path[PATH_MAX];
    join(log_path, sizeof log_path, log_dir, "control.log");
    log_file = fopen(log_path, "ae");
    if (log_file == NULL) die("cannot open %s: %s", log_path, strerror(errno));

    daemon_state.active_thread_percentage = 100.0;
    const char *percentage = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (percentage != NULL && *percentage != '\0' && !parse_percentage(percentage, &daemon_state.active_thread_percentage))
        die("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s is not a percentage in (0, 100]", percentage);
    const char *exit_after = getenv("EDGEGPU_FAKE_MPS_EXIT_AFTER");
    if (exit_after != NULL && *exit_after != '\0') {
        char *end = NULL;
        daemon_state.exit_after = strtol(exit_after, &end, 10);
        if (end == exit_after || *end != '\0' || daemon_state.exit_after <= 0)
            die("EDGEGPU_FAKE_MPS_EXIT_AFTER=%s is not a positive integer", exit_after);
    }
    signal(SIGPIPE, SIG_IGN);

    /* A live daemon accepts connections; a socket file nobody accepts on is a crashed one's. */
    int probe = connect_daemon();
    if (probe >= 0) {
        close(probe);
        log_line("An instance of this daemon is already running");
        die("An instance of this daemon is already running");
    }
    unlink(socket_path);

    int ready[2] = {-1, -1};
    if (daemonize) {
        if (pipe(ready) != 0) die("pipe: %s", strerror(errno));
        pid_t child = fork();
        if (child < 0) die("fork: %s", strerror(errno));
        if (child > 0) {
            /* The parent reports the child's start: one byte once it listens, EOF if it died. */
            close(ready[1]);
            char byte;
            ssize_t n;
            do n = read(ready[0], &byte, 1);
            while (n < 0 && errno == EINTR);
            return n == 1 ? 0 : 1;
        }
        close(ready[0]);
        setsid();
    }

    catch_stop_signals();
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) die("socket: %s", strerror(errno));
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, socket_path, sizeof socket_path);
    /* The pid file is complete before the socket accepts: whoever waits for the socket may read
     * it at once (written aside and renamed, so it is never seen empty). */
    char pid_tmp[PATH_MAX];
    join(pid_tmp, sizeof pid_tmp, pipe_dir, ".nvidia-cuda-mps-control.pid.tmp");
    FILE *pid_file = fopen(pid_tmp, "we");
    if (pid_file == NULL || fprintf(pid_file, "%d\n", (int)getpid()) < 0 || fclose(pid_file) != 0
        || rename(pid_tmp, pid_path) != 0) {
        unlink(pid_tmp);
        die("cannot write %s: %s", pid_path, strerror(errno));
    }
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) {
        unlink(pid_path);
        die("cannot bind %s: %s", socket_path, strerror(errno));
    }
    if (listen(listener, 16) != 0) {
        unlink(pid_path);
        unlink(socket_path);
        die("cannot listen on %s: %s", socket_path, strerror(errno));
    }
    /* Clients of any uid connect, as to the real daemon, which serves one user at a time: pods
     * of the devicequery image (uid 65532) joined the root-run daemon of the companion on a
     * real node (scripts/e2e-node.sh --limits). Connecting needs write permission. */
    if (chmod(socket_path, 0777) != 0) {
        unlink(pid_path);
        unlink(socket_path);
        die("cannot open %s to every user: %s", socket_path, strerror(errno));
    }
    write_state();
    log_line("Start");
    if (daemonize) {
        detach_stdio();
        char byte = '0';
        write_all(ready[1], &byte, 1);
        close(ready[1]);
    }
    serve(listener);
    return 0;
}

/* ---- UI mode --------------------------------------------------------------------------------- */

static int run_ui(void) {
    const char *pipe_dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (pipe_dir == NULL || *pipe_dir == '\0') pipe_dir = UI_DEFAULT_PIPE_DIRECTORY;
    if (!set_socket_path(pipe_dir)) die("socket path %s/control is longer than %zu bytes", pipe_dir, sizeof socket_path - 1);
    signal(SIGPIPE, SIG_IGN);
    int failed = 0;
    char line[MAX_LINE];
    while (fgets(line, sizeof line, stdin) != NULL) {
        char *command = trim(line);
        if (*command == '\0') continue;
        int fd = connect_daemon();
        if (fd < 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        size_t length = strlen(command);
        command[length] = '\n';
        if (write_all(fd, command, length + 1) != 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            close(fd);
            return 1;
        }
        shutdown(fd, SHUT_WR);
        char reply[MAX_LINE + 256];
        size_t used = 0;
        for (;;) {
            ssize_t n = read(fd, reply + used, sizeof reply - 1 - used);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0 || used + (size_t)n >= sizeof reply - 1) {
                if (n > 0) used += (size_t)n;
                break;
            }
            used += (size_t)n;
        }
        close(fd);
        reply[used] = '\0';
        if (used == 0) {
            fprintf(stderr, "The MPS control daemon closed the connection without an answer\n");
            return 1;
        }
        if (reply[0] == '1') failed = 1;
        fputs(reply + 1, stdout);
        fflush(stdout);
    }
    return failed;
}

int main(int argc, char **argv) {
    if (argc == 1) return run_ui();
    if (argc == 2 && strcmp(argv[1], "-f") == 0) return run_daemon(0);
    if (argc == 2 && strcmp(argv[1], "-d") == 0) return run_daemon(1);
    fprintf(stderr, PROGRAM ": the fake knows only -f, -d and no argument (UI mode), not:");
    for (int i = 1; i < argc; i++) fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n");
    return 1;
}
