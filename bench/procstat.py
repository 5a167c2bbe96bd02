"""What a process costs, from /proc: CPU seconds and resident memory (for the benchmarks)."""
import os

HZ = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid):
    """User + system CPU time of @pid, all threads."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_mib(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    return 0


def thread_cpu_seconds(pid, name):
    """User + system CPU time of @pid's thread named @name (comm), schedstat's nanoseconds
    (the clock-tick fields of stat are too coarse for a figure per sample); 0 if none."""
    for tid in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open('/proc/%d/task/%s/schedstat' % (pid, tid)) as f:
                return int(f.read().split()[0]) / 1e9
        except FileNotFoundError:
            continue
    return 0.0


def thread_syscr(pid, name):
    """The read syscalls (/proc/PID/task/TID/io syscr) of @pid's thread named @name; 0 if none."""
    for tid in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open('/proc/%d/task/%s/io' % (pid, tid)) as f:
                return int(next(x for x in f if x.startswith('syscr')).split()[1])
        except FileNotFoundError:
            continue
    return 0
