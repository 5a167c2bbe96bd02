/*
 * holdkill - a target killed while its threads are held for a native backtrace: holds every
 * thread of PID (pyf_stop_process), kills the process, lets go (pyf_stopped_free), and checks
 * that nothing of it is left for us to collect (a traced zombie thread would keep its process
 * from being reaped by its parent). test_native.py.
 *
 * usage: holdkill PID      exit 0: all collected; 1: a thread left traced; 2: usage/stop failed
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pyframes_native.h"

int main(int argc, char **argv)
{
    struct pyf_stopped *held = NULL;
    struct pyf_err e;
    pid_t pid, tids[4096];
    size_t n;
    int left = 0;

    if (argc != 2 || (pid = atoi(argv[1])) <= 0) {
        fprintf(stderr, "usage: holdkill PID\n");
        return 2;
    }
    if (pyf_stop_process(pid, &held, &e) < 0) {
        fprintf(stderr, "holdkill: %s\n", e.msg);
        return 2;
    }
    n = pyf_stopped__n(held);
    for (size_t i = 0; i < n && i < 4096; i++)
        tids[i] = pyf_stopped__tid(held, i);
    kill(pid, SIGKILL);
    usleep(50 * 1000);
    pyf_stopped_free(held);
    for (size_t i = 0; i < n && i < 4096; i++) {
        int status;
        if (waitpid(tids[i], &status, __WALL | WNOHANG) != -1 || errno != ECHILD) {
            fprintf(stderr, "holdkill: thread %d is still ours to collect\n", (int)tids[i]);
            left++;
        }
    }
    printf("%zu threads held, %d left\n", n, left);
    return left ? 1 : 0;
}
