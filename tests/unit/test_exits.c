/* test_exits.c - the kernel's lines sample/exits.c reads a process's end from, as kernels
 * print them (5.x and 6.x wording, the memory cgroup's, traps). */
#include <stdbool.h>

#include "sample/exits.h"
#include "unit.h"

int test_exits_kernel_lines(void)
{
    static const struct {
        const char *text;
        pid_t pid;
        bool oom;
    } cases[] = {
        {"Out of memory: Killed process 4242 (python3) total-vm:71234560kB, anon-rss:70000000kB,"
         " file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:140000kB oom_score_adj:0",
         4242, true},
        {"Memory cgroup out of memory: Killed process 13095 (python3) total-vm:115200kB,"
         " anon-rss:97920kB, file-rss:6824kB, shmem-rss:0kB, UID:0 pgtables:252kB",
         13095, true},
        {"python3[9978]: segfault at 0 ip 00007f791ef74219 sp 00007ffd980ac788 error 4 in"
         " libc.so.6[156219,7f791ee44000+156000] likely on CPU 0 (core 0, socket 0)",
         9978, false},
        {"pt_main_thread[77]: general protection fault ip:7f0 sp:7ffd error:0 in x.so", 77, false},
        {"traps: python3[31337] trap divide error ip:7f0b sp:7ffe error:0 in _x.so", 31337, false},
        {"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task=python3,pid=13095", 0, false},
        {"usb 1-1: new high-speed USB device number 2 using xhci_hcd", 0, false},
        {"a [weird] name]: segfault at 0", 0, false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool oom = !cases[i].oom;
        pid_t pid = exits_kmsg_pid(cases[i].text, &oom);
        if (pid != cases[i].pid || (pid && oom != cases[i].oom)) {
            fprintf(stderr, "case %zu: pid %d oom %d: %s\n", i, (int)pid, oom, cases[i].text);
            return 1;
        }
    }
    CHECK(strcmp(exit_kind_name(EXIT_OOM), "oom-kill") == 0);
    return 0;
}
