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
 * Then the command is run like execvp, searched on the job's own PATH; the environment is
 * never touched. Built by engine/launcher.py with the machine's C compiler; without it the
 * trampoline is used.
 *
 * Built with -DJOBCTL_LIBRARY -shared (engine/launcher.py, issue 17, branch spawnc) the same
 * code is the spawn helper's start path: jobctl_spawn() takes the launcher's whole argv and
 * runs it in a vfork child, so a command that would have gone through the launcher costs
 * no exec of it. The child touches no heap and no lock (it shares the helper's memory until
 * its exec): arguments are parsed in place, the groups go into a static array.
 *
 * Each start also gives the command's start time (/proc/PID/stat field 22, clock ticks since
 * boot) without a read of /proc (issue 17, branch spawnh3): the parent reads the boot clock
 * just before the system call that makes the child, the child reads it first thing (into
 * memory it shares with the parent until its exec); the kernel stamps the child between the
 * two, so when both fall in one tick that tick is its start time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROUPS 65536
/* Most arguments the /bin/sh fallback of a file without "#!" takes (its argv is on the
 * stack: the library's clone3 child has a stack of its own of CHILD_STACK bytes). */
#define MAX_SH_ARGS 65536
#define CHILD_STACK (1024 * 1024)
#define DEFAULT_PATH "/bin:/usr/bin"

extern char **environ;

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

static unsigned long number_to(const char *text, char stop) {
    char *end;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno || end == text || *end != stop) fail("jobctl: bad launcher argument\n", 126);
    return value;
}

static unsigned long number(const char *text) { return number_to(text, '\0'); }

/* Raw system calls: glibc's setgroups/setresuid/setresgid signal every thread of the
 * process to change them too, which a vfork child sharing the helper's memory must not. */
static void drop(const char *uid_s, const char *gid_s, const char *groups_s) {
    static gid_t groups[MAX_GROUPS];
    size_t n = 0;
    for (const char *g = groups_s; *g;) {
        if (n == MAX_GROUPS) fail("jobctl: too many groups\n", 126);
        const char *comma = strchr(g, ',');
        groups[n++] = (gid_t)number_to(g, comma ? ',' : '\0');
        g = comma ? comma + 1 : g + strlen(g);
    }
    uid_t uid = (uid_t)number(uid_s);
    gid_t gid = (gid_t)number(gid_s);
    if (syscall(SYS_setgroups, n, groups) || syscall(SYS_setresgid, gid, gid, gid)
        || syscall(SYS_setresuid, uid, uid, uid))
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

static const char *job_path(char **envp) {
    for (char **e = envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0) return *e + 5;
    return DEFAULT_PATH;
}

/* A file without a "#!" line runs with /bin/sh, as execvp does. */
static void exec_file(const char *path, char **argv, char **envp) {
    execve(path, argv, envp);
    if (errno != ENOEXEC) return;
    size_t n = 0;
    while (argv[n]) n++;
    if (n > MAX_SH_ARGS) {
        errno = E2BIG;
        return;
    }
    char *sh[n + 2];
    sh[0] = "/bin/sh";
    sh[1] = (char *)path;
    for (size_t i = 1; i <= n; i++) sh[i + 1] = argv[i];
    execve("/bin/sh", sh, envp);
    errno = ENOEXEC;
}

/* execvp searching the job's PATH (from its environment, not this process's), with a
 * stack buffer only. */
static void exec_search(char **argv, char **envp) {
    const char *file = argv[0];
    if (strchr(file, '/')) {
        exec_file(file, argv, envp);
        return;
    }
    size_t flen = strlen(file);
    int denied = 0;
    for (const char *p = job_path(envp);; p++) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
        char path[dlen + flen + 3];
        if (dlen == 0) {
            path[0] = '.';
            dlen = 1;
        } else {
            memcpy(path, p, dlen);
        }
        path[dlen] = '/';
        memcpy(path + dlen + 1, file, flen + 1);
        exec_file(path, argv, envp);
        if (errno == EACCES) denied = 1;
        else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV
                 && errno != ETIMEDOUT)
            return;
        if (!colon) break;
        p = colon;
    }
    if (denied) errno = EACCES;
}

/* Everything after the argument check, for main() and for the library's child alike. */
static void launch(char **argv, char **envp) {
    if (strcmp(argv[1], "-") != 0) drop(argv[1], argv[2], argv[3]);
    if (strcmp(argv[7], "gate") == 0) wait_at_gate();
    if (*argv[5]) set_limit(RLIMIT_NOFILE, (rlim_t)number(argv[5]), 0);
    if (chdir(argv[4]) != 0) fail("jobctl: cannot enter the working directory\n", 125);
    if (*argv[6]) {
        set_limit(RLIMIT_FSIZE, (rlim_t)number(argv[6]) * 512, 1);
        signal(SIGXFSZ, SIG_IGN);
    }
    exec_search(argv + 9, envp);
    int code = errno == ENOENT ? 127 : 126;
    say("jobctl: cannot run ");
    say(argv[9]);
    say(": ");
    say(strerror(errno));
    say("\n");
    _exit(code);
}

static int valid(int argc, char **argv) { return argc >= 10 && strcmp(argv[8], "--") == 0; }

#ifndef JOBCTL_LIBRARY
int main(int argc, char **argv) {
    if (!valid(argc, argv)) fail("jobctl: bad launcher arguments\n", 126);
    launch(argv, environ);
    return 126;
}
#else
/* The child between vfork and exec: no handler of the helper may run in it (they would
 * touch the helper's memory), so caught signals go back to their default while all are
 * blocked, as glibc's posix_spawn does; then the helper's posix_spawn attributes (a new
 * session, stdin/stdout/stderr, SIGPIPE and SIGXFSZ at their default, an empty mask). */
static void child(char **argv, char **envp, int in, int out) {
    struct sigaction sa;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigaction(sig, NULL, &sa) != 0) continue;
        int ours = sig == SIGPIPE || sig == SIGXFSZ;
        if (ours || (sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL)) {
            sa.sa_handler = SIG_DFL;
            sa.sa_flags = 0;
            sigemptyset(&sa.sa_mask);
            sigaction(sig, &sa, NULL);
        }
    }
    if (setsid() < 0) _exit(126);
    int fds[3] = {in, out, out};
    for (int i = 0; i < 3; i++) {
        int done = fds[i] == i ? fcntl(i, F_SETFD, 0) : dup2(fds[i], i);
        if (done < 0) _exit(126);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    launch(argv, envp);
}

static void block_all(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, old);
}

static long long boot_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return -1;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The start time in clock ticks when BEFORE (the parent's reading) and CHILD (the child's
 * first) fall in one tick, else -1 (the caller reads /proc). */
static long long born_ticks(long long before, long long child_ns) {
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0 || before < 0 || child_ns < 0) return -1;
    long long tick = 1000000000LL / hz;
    return before / tick == child_ns / tick ? before / tick : -1;
}

/* Start ARGV (the launcher's words, then the command) in a new process: stdin IN,
 * stdout and stderr OUT; *BORN: its start time in ticks, or -1. Returns its pid, or
 * -errno when no process could be made; what fails after that (the drop, the directory,
 * the exec) ends the child with the launcher's own line and status, exactly as an exec
 * of the launcher would. */
static int spawn_lists(int argc, char **argv, char **envp, int in, int out, long long *born) {
    *born = -1;
    if (!valid(argc, argv)) return -EINVAL;
    sigset_t old;
    block_all(&old);
    volatile long long child_ns = -1; /* written by the child: it shares this frame */
    long long before = boot_ns();
    pid_t pid = vfork();
    if (pid == 0) {
        child_ns = boot_ns();
        child(argv, envp, in, out);
    }
    int err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid > 0) *born = born_ticks(before, child_ns);
    return pid < 0 ? -err : pid;
}

#if defined(__x86_64__)
/* clone3 (Linux 5.7) with CLONE_INTO_CGROUP: the command is born in its attempt's cgroup,
 * so the helper need not step into it and back out around the start (two writes of
 * cgroup.procs, each a migration). CLONE_VM | CLONE_VFORK as vfork, but clone3 wants a
 * stack of the child's own: a static one (the helper waits until the child's exec, so
 * one at a time). The child starts on it with no frame to return to: a few instructions
 * call child() there; the parent returns the syscall's result. */
struct clone3_args {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size,
        tls, set_tid, set_tid_size, cgroup;
};
#define CLONE_VM_ 0x00000100ULL
#define CLONE_VFORK_ 0x00004000ULL
#define CLONE_INTO_CGROUP_ 0x200000000ULL
#define SYS_CLONE3 435

/* NICE: the niceness to set before the drop (as root may), or NO_NICE. A niceness that
 * cannot be set ends the child before it runs anything, its errno in nice_errno (the
 * memory it shares with the helper until its exec or exit). */
#define NO_NICE 1000
struct job {
    char **argv, **envp;
    int in, out, nice;
    volatile int nice_errno;
    volatile long long born_ns; /* the child's first reading of the boot clock */
    volatile int ran;           /* the child ran its first instruction */
};

/* *BORN when the child never ran: the kernel killed it at its birth (SIGKILL from
 * cgroup_post_fork: the target cgroup's kill sequence differs from that of the helper's
 * own, engine/cgpool.py). Its pid is returned; the caller reaps it. */
#define NEVER_RAN (-2)

static char child_stack[CHILD_STACK] __attribute__((aligned(64)));

static void run_job(struct job *job) {
    job->ran = 1;
    job->born_ns = boot_ns();
    if (job->nice != NO_NICE && setpriority(PRIO_PROCESS, 0, job->nice) != 0) {
        job->nice_errno = errno ? errno : EPERM;
        _exit(126);
    }
    child(job->argv, job->envp, job->in, job->out);
}

static long clone3_call(struct clone3_args *args, struct job *job) {
    long ret;
    register void (*fn)(struct job *) asm("r12") = run_job;
    register struct job *arg asm("r13") = job;
    asm volatile(
        "syscall\n\t"
        "test %%rax, %%rax\n\t"
        "jnz 1f\n\t"
        "mov %%r13, %%rdi\n\t"
        "call *%%r12\n\t"
        "mov $127, %%edi\n\t"
        "mov $60, %%eax\n\t"
        "syscall\n\t"
        "1:\n\t"
        : "=a"(ret)
        : "0"((long)SYS_CLONE3), "D"(args), "S"(sizeof *args), "r"(fn), "r"(arg)
        : "rcx", "r11", "memory");
    return ret;
}

/* jobctl_spawn, the command born in the cgroup whose directory CGROUP is open on, with
 * niceness NICE (NO_NICE: the helper's). -errno when the kernel refused (the helper then
 * starts it the other way); a niceness refused: the child is reaped, -errno, and
 * *NICE_ERROR set. *BORN as spawn_lists, or NEVER_RAN (the helper reaps the child: its
 * pid is returned all the same). */
static int spawn_into_lists(int argc, char **argv, char **envp, int in, int out, int cgroup,
                            int nice, int *nice_error, long long *born) {
    *born = -1;
    if (!valid(argc, argv)) return -EINVAL;
    struct job job = {argv, envp, in, out, nice, 0, -1, 0};
    struct clone3_args args = {0};
    args.flags = CLONE_VM_ | CLONE_VFORK_ | CLONE_INTO_CGROUP_;
    args.exit_signal = SIGCHLD;
    args.stack = (unsigned long long)(unsigned long)child_stack;
    args.stack_size = sizeof child_stack;
    args.cgroup = (unsigned long long)cgroup;
    sigset_t old;
    block_all(&old);
    long long before = boot_ns();
    long pid = clone3_call(&args, &job);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid > 0) *born = job.ran ? born_ticks(before, job.born_ns) : NEVER_RAN;
    if (pid > 0 && job.nice_errno) {
        *nice_error = 1;
        while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {
        }
        return -job.nice_errno;
    }
    return (int)pid;
}
#endif

/* The helper passes its argv and environment as two blobs of NUL-terminated strings
 * (one bytes object each: no array of Python objects built per start); the lists are
 * made here, in the parent, before any child exists. */
static char **split(char *blob, int n) {
    char **list = malloc(((size_t)n + 1) * sizeof *list);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        list[i] = blob;
        blob += strlen(blob) + 1;
    }
    list[n] = NULL;
    return list;
}

/* Start the ARGC strings of ARGS (the launcher's words, then the command) with the ENVC
 * strings of ENVS as its environment; see spawn_lists. */
int jobctl_spawn(int argc, char *args, int envc, char *envs, int in, int out, long long *born) {
    char **argv = split(args, argc), **envp = split(envs, envc);
    *born = -1;
    int pid = argv && envp ? spawn_lists(argc, argv, envp, in, out, born) : -ENOMEM;
    free(argv);
    free(envp);
    return pid;
}

#if defined(__x86_64__)
/* The same, born in a cgroup with a niceness; see spawn_into_lists. */
int jobctl_spawn_into(int argc, char *args, int envc, char *envs, int in, int out, int cgroup,
                      int nice, int *nice_error, long long *born) {
    char **argv = split(args, argc), **envp = split(envs, envc);
    *born = -1;
    int pid = argv && envp
                  ? spawn_into_lists(argc, argv, envp, in, out, cgroup, nice, nice_error, born)
                  : -ENOMEM;
    free(argv);
    free(envp);
    return pid;
}
#endif
#endif
