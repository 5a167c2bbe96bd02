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


def thread_file(pid, name, file):
    """/proc/PID/task/TID/@file of @pid's thread named @name (comm), whole; None if none."""
    for tid in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open('/proc/%d/task/%s/%s' % (pid, tid, file)) as f:
                return f.read()
        except FileNotFoundError:
            continue
    return None


def thread_cpu_seconds(pid, name):
    """User + system CPU time of @pid's thread named @name (comm), schedstat's nanoseconds
    (the clock-tick fields of stat are too coarse for a figure per sample); 0 if none."""
    text = thread_file(pid, name, 'schedstat')
    return int(text.split()[0]) / 1e9 if text else 0.0


def thread_syscr(pid, name):
    """The read syscalls (/proc/PID/task/TID/io syscr) of @pid's thread named @name; 0 if none."""
    text = thread_file(pid, name, 'io')
    return int(next(x for x in text.splitlines() if x.startswith('syscr')).split()[1]) \
        if text else 0
