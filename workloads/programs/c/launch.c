/*
 * alloclab-launch: runs a program in a child process and reports the child's peak
 * resident set, so that the figure is the program's own.
 *
 * usage: alloclab-launch REPORT PROGRAM [ARG...]
 *
 * The harness starts programs with posix_spawn, whose child shares the harness's memory
 * until it calls exec, and exec keeps the old memory's high-water mark in the rusage that
 * wait4 later returns: a program that peaks below the harness's resident set would read as
 * the harness. This launcher is small; its child (a copy of it) execs PROGRAM, so the mark
 * carried over is this launcher's few pages. It waits for the child, writes the child's
 * ru_maxrss (KiB, the child and the descendants it waited for) to the file REPORT, and ends
 * as the child did: the same exit code, or the same signal.
 *
 * The variable ALLOCLAB_LAUNCH_PRELOAD, if set, becomes the child's LD_PRELOAD (the
 * launcher itself runs on the C library's malloc, whatever heap is measured). SIGTERM,
 * SIGINT, SIGHUP and SIGQUIT sent to the launcher are passed on to the child.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t child;

static void pass_on(int sig)
{
    if (child > 0)
        kill((pid_t)child, sig);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s REPORT PROGRAM [ARG...]\n", argc > 0 ? argv[0] : "alloclab-launch");
        return 125;
    }
    /* The signals passed on are held from before their handlers are set until the child's
     * pid is known: one that arrives in between is delivered then, not lost. (One that
     * arrives before they are held ends the launcher, before any child exists.) */
    static const int passed[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    sigset_t held, before;
    sigemptyset(&held);
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
        sigaddset(&held, passed[i]);
    sigprocmask(SIG_BLOCK, &held, &before);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
        sigaction(passed[i], &sa, NULL);

    const char *preload = getenv("ALLOCLAB_LAUNCH_PRELOAD");
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "alloclab-launch: fork: %s\n", strerror(errno));
        return 125;
    }
    if (pid == 0) {
        /* exec puts the handlers above back to their defaults, but keeps the mask. */
        sigprocmask(SIG_SETMASK, &before, NULL);
        if (preload != NULL && setenv("LD_PRELOAD", preload, 1) != 0)
            _exit(125);
        unsetenv("ALLOCLAB_LAUNCH_PRELOAD");
        execv(argv[2], argv + 2);
        fprintf(stderr, "alloclab-launch: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    child = pid;
    sigprocmask(SIG_SETMASK, &before, NULL);

    int status = 0;
    struct rusage usage;
    while (wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "alloclab-launch: wait4: %s\n", strerror(errno));
            return 125;
        }
    }
    FILE *report = fopen(argv[1], "w");
    if (report == NULL || fprintf(report, "%ld\n", (long)usage.ru_maxrss) < 0 || fclose(report) != 0) {
        fprintf(stderr, "alloclab-launch: %s: %s\n", argv[1], strerror(errno));
        return 125;
    }
    if (WIFSIGNALED(status)) {
        /* End by the same signal, without a core file of the launcher's own. */
        int sig = WTERMSIG(status);
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 125;
}
