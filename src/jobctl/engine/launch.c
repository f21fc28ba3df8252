/* jobctl's start-up launcher (issue 17): what the /bin/sh trampoline of engine/process.py
 * and util-linux setpriv do for a command, in one small exec instead of two or three.
 *
 *   launch UID GID GROUPS CWD NOFILE FSIZE GATE -- COMMAND [ARG...]
 *
 * UID "-": keep this process's ids (a command of the daemon's own user); else set exactly
 * the supplementary GROUPS (comma-separated ids), then GID, then UID (real, effective and
 * saved alike), and check they hold. GATE "gate": wait reading stdin (a pipe the spawn
 * helper holds) for the line that lets the command go, then take /dev/null as stdin; a
 * gate closed without it ends here with the trampoline's GATE_SHUT line and status.
 * NOFILE: the open-file soft limit to give back (empty: leave it). CWD: entered *after*
 * the drop, as the owner (the trampoline's CWD_FAILED line and status when it cannot be).
 * FSIZE: the output cap in 512-byte blocks (RLIMIT_FSIZE, SIGXFSZ ignored), or empty.
 * Then the command is run with execvp on the job's own PATH; the environment is never
 * touched. Built by engine/launcher.py with the machine's C compiler; without it the
 * trampoline is used. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_GROUPS 65536

static void say(const char *text) {
    ssize_t left = (ssize_t)strlen(text);
    while (left > 0) {
        ssize_t n = write(2, text, (size_t)left);
        if (n <= 0) return;
        text += n;
        left -= n;
    }
}

static int fail(const char *text, int code) {
    say(text);
    _exit(code);
}

static unsigned long number(const char *text) {
    char *end;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno || end == text || *end) fail("jobctl: bad launcher argument\n", 126);
    return value;
}

static void drop(const char *uid_s, const char *gid_s, const char *groups_s) {
    static gid_t groups[MAX_GROUPS];
    size_t n = 0;
    char *list = strdup(groups_s), *save = NULL;
    if (!list) fail("jobctl: out of memory\n", 126);
    for (char *g = strtok_r(list, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
        if (n == MAX_GROUPS) fail("jobctl: too many groups\n", 126);
        groups[n++] = (gid_t)number(g);
    }
    uid_t uid = (uid_t)number(uid_s);
    gid_t gid = (gid_t)number(gid_s);
    if (setgroups(n, groups) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
        fail("jobctl: cannot drop privileges\n", 126);
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) || r != uid || e != uid || s != uid || getresgid(&rg, &eg, &sg)
        || rg != gid || eg != gid || sg != gid)
        fail("jobctl: cannot drop privileges\n", 126);
}

static void wait_at_gate(void) {
    char c;
    for (;;) {
        ssize_t n = read(0, &c, 1);
        if (n == 1 && c == '\n') break;
        if (n == 1 || (n < 0 && errno == EINTR)) continue;
        fail("jobctl: the gate was never opened\n", 125);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0) fail("jobctl: cannot open /dev/null\n", 126);
    if (null != 0) close(null);
}

static void set_limit(int which, rlim_t value, int both) {
    struct rlimit lim;
    if (getrlimit(which, &lim)) return;
    lim.rlim_cur = value;
    if (both) lim.rlim_max = value;
    setrlimit(which, &lim); /* as the trampoline's ulimit: best effort */
}

int main(int argc, char **argv) {
    if (argc < 10 || strcmp(argv[8], "--") != 0) fail("jobctl: bad launcher arguments\n", 126);
    if (strcmp(argv[1], "-") != 0) drop(argv[1], argv[2], argv[3]);
    if (strcmp(argv[7], "gate") == 0) wait_at_gate();
    if (*argv[5]) set_limit(RLIMIT_NOFILE, (rlim_t)number(argv[5]), 0);
    if (chdir(argv[4]) != 0) fail("jobctl: cannot enter the working directory\n", 125);
    if (*argv[6]) {
        set_limit(RLIMIT_FSIZE, (rlim_t)number(argv[6]) * 512, 1);
        signal(SIGXFSZ, SIG_IGN);
    }
    execvp(argv[9], argv + 9);
    int code = errno == ENOENT ? 127 : 126;
    say("jobctl: cannot run ");
    say(argv[9]);
    say(": ");
    say(strerror(errno));
    say("\n");
    _exit(code);
}
