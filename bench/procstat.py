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
