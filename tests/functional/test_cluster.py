"""A job over several nodes: `probectl cluster`, `probectl hang` and `probectl -H`.

Each node is a PID namespace of its own with its own daemon (nodes.py). The first tests reach
the nodes through a local transport (`probectl proxy` on each node's socket), for speed; the
last one builds a network of namespaces with an sshd on each node and runs a real 2-node x
4-rank gloo job across them, reached through ssh as a user would.
"""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import PROBECTL, SANITIZED, TARGETS, reap, wait_for
from daemon import Daemon, ensure_test_user
from nodes import Keys, Node, ctl, local_transport, workdir

PY = '/usr/bin/python3'
RANKS_PER_NODE = 4
STALL_RANK = 6


@pytest.fixture(scope='module')
def job():
    """Nodes a and b, 4 ranks each of rank_job.py (ranks 0-3 on a, 4-7 on b), rank 6 stalled."""
    wd = workdir()
    nodes = []
    try:
        for i, name in enumerate(('a', 'b')):
            nodes.append(Node(name, i, wd))
        procs = []
        for i, n in enumerate(nodes):
            for local in range(RANKS_PER_NODE):
                env = dict(os.environ, RANK=str(i * RANKS_PER_NODE + local), LOCAL_RANK=str(local),
                           WORLD_SIZE=str(2 * RANKS_PER_NODE), STALL_RANK=str(STALL_RANK))
                procs.append(n.spawn([PY, os.path.join(TARGETS, 'rank_job.py')], env=env,
                                     ready=True))
        Node.wait_ready(procs)
        yield wd, nodes, local_transport(wd, nodes)
    finally:
        for n in nodes:
            n.close()
        shutil.rmtree(wd, ignore_errors=True)


def cluster(t, *args, hosts='a,b', **kw):
    return ctl('cluster', *args, '--hosts', hosts, '--transport', t, **kw)


def test_attach_list_query_merge(job):
    wd, nodes, t = job
    r = cluster(t, 'attach', '--match', r'rank_job\.py')
    assert r.returncode == 0, r.stderr
    assert 'a: 4 attached' in r.stdout and 'b: 4 attached' in r.stdout, r.stdout
    # again: nothing new, every one already attached
    r = cluster(t, 'attach', '--match', r'rank_job\.py', '--json')
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and [len(n['already']) for n in doc['nodes']] == [4, 4], r.stdout

    r = cluster(t, 'list', '--json')
    doc = json.loads(r.stdout)
    ranks = {(n['host'], x['rank']) for n in doc['nodes'] for x in n['targets']}
    assert ranks == {('a', 0), ('a', 1), ('a', 2), ('a', 3), ('b', 4), ('b', 5), ('b', 6),
                     ('b', 7)}, r.stdout

    # every rank's rows, each with its host; then one average over all ranks (not of nodes)
    sql = ('SELECT t.rank, count(*) AS n FROM samples s JOIN targets t ON t.id = s.target_id'
           ' GROUP BY t.rank')
    subprocess.run(['sleep', '1'])
    r = cluster(t, 'query', sql, '--format', 'json')
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc['columns'] == ['host', 'rank', 'n'], r.stdout
    rows = doc['rows']
    assert sorted((h, k) for h, k, _ in rows) == sorted(ranks), rows
    assert all(n > 0 for _, _, n in rows), rows
    total = sum(n for _, _, n in rows)
    r = cluster(t, 'query', sql, '--merge',
                'SELECT count(*) AS ranks, sum(n) AS total, avg(n) AS mean FROM cluster',
                '--format', 'json')
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc['columns'] == ['ranks', 'total', 'mean'], r.stdout
    ranks_n, merged_total, mean = doc['rows'][0]
    assert ranks_n == 8 and merged_total >= total and abs(mean - merged_total / 8) < 1e-9
    r = cluster(t, 'query', sql, '--merge', 'SELECT nope FROM cluster')
    assert r.returncode == 1 and 'no such column: nope' in r.stderr, r.stderr

    # one flame graph of all ranks, the stalled rank's function in it, by rank on demand
    r = cluster(t, 'flamegraph', '--by', 'rank', '--idle', '--format', 'folded')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.startswith('rank 6;') and 'load_batch' in l for l in lines), r.stdout[:2000]
    assert not any(l.startswith('rank 5;') and 'load_batch' in l for l in lines)
    assert {l.split(';')[0] for l in lines} == {'rank %d' % k for k in range(8)}
    svg = os.path.join(wd, 'job.svg')
    r = cluster(t, 'flamegraph', '--idle', '-o', svg)
    assert r.returncode == 0, r.stderr
    text = open(svg).read()
    assert text.startswith('<?xml') and '</svg>' in text and 'load_batch' in text, text[:300]
    assert '8 processes on 2 nodes' in text

    # -H: any command on one node's daemon
    r = ctl('-H', 'b', '--transport', t, 'list')
    assert r.returncode == 0 and r.stdout.count('rank_job.py') == 4, r.stdout + r.stderr


def test_hang_singles_out_the_stalled_rank(job):
    wd, nodes, t = job
    r = cluster(t, 'attach', '--match', r'rank_job\.py')
    assert r.returncode == 0, r.stderr
    r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--json', '--repeat', '2',
            '--interval', '200ms')
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc['processes'] == 8 and doc['rounds'] == 2, doc
    first, rest = doc['groups']
    assert first['ranks'] == '6' and first['hosts'] == 'b', first
    assert first['stack'][0]['function'] == 'load_batch', first
    assert rest['ranks'] == '0-5,7' and rest['hosts'] == 'a,b', rest
    assert rest['stack'][0]['function'] == 'all_reduce_wait'
    assert first['all_stuck'] and rest['all_stuck'], doc
    assert doc['spread_ms'] < 2000, doc
    # with the C frames: grouped by the Python frames all the same, native ones in the stacks
    r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--json', '--native')
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    first, rest = doc['groups']
    assert (first['ranks'], rest['ranks']) == ('6', '0-5,7'), doc['groups']
    kinds = {f.get('kind') for f in first['stack']}
    assert kinds == {'python', 'native'}, first['stack']
    assert any(f.get('function') == 'load_batch' for f in first['stack'])
    # in words: the odd one first, ranks as ranges
    r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--depth', '1')
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index('rank 6 (host b)') < out.index('ranks 0-5,7 (hosts a,b)'), out
    assert 'load_batch (%s' % os.path.join(TARGETS, 'rank_job.py') in out, out
    folded = os.path.join(wd, 'hang.folded')
    r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--folded', folded)
    assert r.returncode == 0, r.stderr
    counts = {l.rsplit(' ', 1)[0].split(';')[-1].split(' (')[0]: int(l.rsplit(' ', 1)[1])
              for l in open(folded).read().splitlines()}
    assert counts == {'load_batch': 1, 'all_reduce_wait': 7}, counts
    svg = os.path.join(wd, 'hang.svg')
    r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--flamegraph', svg)
    assert r.returncode == 0, r.stderr
    text = open(svg).read()
    assert '</svg>' in text and 'load_batch' in text and 'all_reduce_wait' in text


def test_a_node_that_fails_is_named(job):
    wd, nodes, t = job
    # c has no daemon: named, with the others' rows still there, and exit status 1
    r = cluster(t, 'query', 'SELECT 1 AS one', hosts='a,b,c', timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'no daemon on c' in r.stderr and '1 of 3 nodes failed' in r.stderr, r.stderr
    assert r.stdout.count('\n') >= 4 and '(2 rows)' in r.stdout, r.stdout
    r = ctl('hang', '--hosts', 'a,c', '--transport', t, '--json')
    assert r.returncode == 1 and json.loads(r.stdout)['failed'][0]['host'] == 'c', r.stdout
    # a transport that does not connect; probectl missing on the node; a daemon of another
    # version; a template that does not name the host
    r = cluster('ssh -T -o BatchMode=yes -o ConnectTimeout=5 {host}.invalid probectl proxy',
                'list', hosts='a')
    assert r.returncode == 1 and 'cannot reach a over ssh: ssh: Could not resolve' in r.stderr, \
        r.stderr
    r = cluster('/nonexistent/probectl proxy # {host}', 'list', hosts='a')
    assert 'probectl is not installed on a' in r.stderr, r.stderr
    fake = ("printf 'HTTP/1.1 200 OK\\r\\nX-Probed-Version: 9.9.0\\r\\nContent-Length: 2\\r\\n"
            "\\r\\n{}' # {host}")
    r = cluster(fake, 'list', hosts='a')
    assert r.returncode == 1 and ('version mismatch: probectl %s here, probed 9.9.0 on a'
                                  % version()) in r.stderr, r.stderr
    r = ctl('-H', 'a', '--transport', fake, 'list')
    assert r.returncode == 1 and 'version mismatch' in r.stderr, r.stderr
    r = cluster('cat', 'list', hosts='a')
    assert r.returncode == 2 and 'does not name the host' in r.stderr, r.stderr
    r = ctl('cluster', 'list')
    assert r.returncode == 2 and 'no nodes: give --hosts' in r.stderr, r.stderr
    r = ctl('-H', 'a', 'run', 'true')
    assert r.returncode == 2 and 'runs on this node only' in r.stderr, r.stderr


def test_slurm_nodelist_and_a_stopped_daemon(job):
    wd, nodes, t = job
    env = dict(os.environ, SLURM_JOB_NODELIST='[a-b]')  # not a Slurm range: refused clearly
    r = ctl('cluster', 'list', '--transport', t, env=env)
    assert r.returncode == 2 and 'not a range of numbers' in r.stderr, r.stderr
    for name in ('node1', 'node2', 'node3'):
        link = os.path.join(wd, name + '.sock')
        if not os.path.lexists(link):
            os.symlink(nodes[int(name[-1]) % 2].daemon.socket, link)
    env = dict(os.environ, SLURM_JOB_NODELIST='node[1-3]')
    r = ctl('cluster', 'query', 'SELECT 1 AS one', '--transport', t, '--format', 'csv', env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()[1:]) == ['node1,1', 'node2,1', 'node3,1'], r.stdout
    hostfile = os.path.join(wd, 'hosts')
    with open(hostfile, 'w') as f:
        f.write('# the job\na slots=4\nb slots=4\n')
    r = ctl('cluster', 'list', '--hostfile', hostfile, '--transport', t)
    assert r.returncode == 0 and r.stdout.count('rank_job.py') == 8, r.stdout + r.stderr


def test_a_launcher_is_followed_and_detach_by_pattern(job):
    """A launcher that is not Python (a shell script) matched by the pattern is followed, and
    the Python process it starts is attached; `cluster detach --match` ends both."""
    wd, nodes, t = job
    launcher = nodes[1].spawn(['sh', '-c', ': launch_job_7; sleep 1.5; exec %s %s'
                               % (PY, os.path.join(TARGETS, 'rank_job.py'))],
                              env=dict(os.environ, RANK='9', STALL_RANK='-1'))
    r = cluster(t, 'attach', '--match', 'launch_job_7', '--json')
    assert r.returncode == 1, r.stdout + r.stderr  # nothing of the job on a: said, and status 1
    doc = json.loads(r.stdout)
    b = [n for n in doc['nodes'] if n['host'] == 'b'][0]
    assert len(b['following']) == 1 and 'launch_job_7' in b['following'][0]['cmdline'], b
    assert 'a: no Python process of yours matches launch_job_7' in r.stderr, r.stderr
    # the shell execs Python: the same process is attached, ranked 9
    wait_for(lambda: any(x.get('rank') == 9 for n in json.loads(
        cluster(t, 'list', '--json').stdout)['nodes'] for x in n['targets']
        if x['state'] == 'sampling'), 30, 'the launched rank to be attached')
    r = cluster(t, 'detach', '--match', 'launch_job_7|rank_job')
    assert r.returncode == 0, r.stderr
    assert 'a: 4 detached' in r.stdout and 'b: 5 detached' in r.stdout, r.stdout
    doc = json.loads(cluster(t, 'list', '--json').stdout)
    assert not [x for n in doc['nodes'] for x in n['targets'] if x['state'] == 'sampling'], doc
    r = cluster(t, 'detach')
    assert r.returncode == 2 and '--match PATTERN or --all' in r.stderr
    launcher.kill()


def test_a_user_matches_attaches_detaches_and_reads_only_their_own():
    """Through a transport as another user: the pattern finds only their processes, detach
    --all ends only their targets, hang reads only theirs; a pattern with back-references
    (exponential in glibc's matcher, run on the lane every attach shares) is refused."""
    d = Daemon()
    user = ensure_test_user()
    roots = subprocess.Popen([PY, os.path.join(TARGETS, 'rank_job.py')],
                             env=dict(os.environ, RANK='0', STALL_RANK='0'),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    mine = subprocess.Popen(['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups',
                             PY, os.path.join(TARGETS, 'rank_job.py')],
                            env=dict(os.environ, RANK='1', STALL_RANK='-1'),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        Node.wait_ready([roots, mine])
        d.ctl('attach', roots.pid, check=True)
        os.chmod(d.socket, 0o666)
        t = 'PROBED_SOCKET=%s %s proxy # {host}' % (d.socket, PROBECTL)
        r = ctl('cluster', 'attach', '--match', r'rank_job\.py', '--hosts', 'me', '--transport',
                t, '--json', user=user)
        assert r.returncode == 0, r.stdout + r.stderr
        (node,) = json.loads(r.stdout)['nodes']
        assert [x['pid'] for x in node['attached']] == [mine.pid] and not node['already'], node
        r = ctl('hang', '--hosts', 'me', '--transport', t, '--json', user=user)
        doc = json.loads(r.stdout)
        assert doc['processes'] == 1 and doc['groups'][0]['members'][0]['pid'] == mine.pid, doc
        r = ctl('cluster', 'attach', '--match', r'(rank)_job\1', '--hosts', 'me', '--transport', t,
                user=user)
        assert r.returncode == 1 and 'back-references' in r.stderr, r.stderr
        r = ctl('cluster', 'detach', '--all', '--hosts', 'me', '--transport', t, user=user)
        assert r.returncode == 0 and 'me: 1 detached (pids %d)' % mine.pid in r.stdout, r.stdout
        states = {x['pid']: x['state'] for x in d.api('GET', '/v1/targets')[1]['targets']}
        assert states == {roots.pid: 'sampling'}, states  # root's stays; theirs went
    finally:
        for p in (roots, mine):
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
        d.close()


def test_hang_lists_the_launcher_apart():
    """A launcher (no RANK, waiting for its ranks in Popen.wait) attached with its ranks is no
    rank: listed apart, never grouped as the odd one out ahead of the stalled rank."""
    d = Daemon()
    env = {k: v for k, v in os.environ.items() if k != 'RANK'}
    ranks = []
    launcher = subprocess.Popen([PY, os.path.join(TARGETS, 'rank_launcher.py'), '4'],
                                env=dict(env, STALL_RANK='2'), stdout=subprocess.PIPE,
                                universal_newlines=True)
    try:
        ranks = json.loads(launcher.stdout.readline().split(' ', 1)[1])['ranks']
        for pid in [launcher.pid] + ranks:
            d.ctl('attach', pid, check=True)

        def read():
            doc = json.loads(d.ctl('hang', '--json', check=True).stdout)
            tops = [g['stack'][0]['function'] for g in doc['groups'] if g['stack']]
            return doc if sorted(tops) == ['all_reduce_wait', 'load_batch'] else None
        doc = wait_for(read, what='every rank in its function')
        assert doc['processes'] == 5 and len(doc['groups']) == 2, doc
        first, rest = doc['groups']
        assert first['ranks'] == '2' and first['stack'][0]['function'] == 'load_batch', first
        assert sorted(m['rank'] for m in rest['members']) == [0, 1, 3], rest
        (apart,) = doc['apart']
        assert apart['pid'] == launcher.pid, doc['apart']
        assert any(f['function'] in ('Popen.wait', 'wait') for f in apart['stack']), apart['stack']
        out = d.ctl('hang', check=True).stdout
        assert out.index('rank 2 ') < out.index('apart:'), out
        assert 'pid %d: in ' % launcher.pid in out.split('apart:')[1], out
    finally:
        for pid in ranks:
            os.kill(pid, 9)
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()
        d.close()


def test_hang_names_the_nodes_of_nccls_ras_hosts():
    """NCCL's RAS names a rank's host by address; `hang --hosts` gives each one that is a node's
    address the node's name: two nodes on a network of their own, the job's RAS asked through
    its process on a, names a rank behind on b ("b (10.77.0.y)") and one in error on a; a rank
    missing at an address of no node asked stays its address; one at an address both nodes
    have (as two containers on two nodes' default bridges have one) is named by neither."""
    from test_nccl import RAS_DOC, RAS_JOB
    wd = workdir()
    nodes = []
    try:
        nodes = [Node(name, i, wd, network=True) for i, name in enumerate(('a', 'b'))]
        for n in nodes:  # an address each node has
            subprocess.run(['ip', 'netns', 'exec', n.netns, 'ip', 'addr', 'add', '172.17.0.2/32',
                            'dev', 'pn' + n.name], check=True)
        doc = json.loads(json.dumps(RAS_DOC))
        ranks = doc['communicators'][0]['ranks']
        ranks[0]['host'], ranks[1]['host'], ranks[2]['host'] = '172.17.0.2', nodes[0].ip, nodes[1].ip
        path = os.path.join(wd, 'ras.json')
        with open(path, 'w') as f:
            f.write(json.dumps(doc).replace('"{pid}"', '{pid}'))
        env = dict(os.environ, RAS_MODE='json', RAS_DOC=path, NCCL_RAS_ADDR='127.0.0.1:28558')
        Node.wait_ready([nodes[0].spawn([PY, RAS_JOB], env=env, ready=True)])
        t = local_transport(wd, nodes)
        r = cluster(t, 'attach', '--match', r'ras_job\.py', hosts='a')
        assert r.returncode == 0, r.stdout + r.stderr
        r = ctl('hang', '--hosts', 'a,b', '--transport', t, '--json')
        assert r.returncode == 0, r.stderr
        ras = json.loads(r.stdout)['nccl_ras']
        assert ras['host'] == 'a', ras
        behind, missing, error = ras['findings']
        assert (behind['kind'], behind['nodes'], behind['hosts']) == \
            ('behind', ['b'], [nodes[1].ip]), behind
        assert (error['kind'], error['nodes']) == ('error', ['a']), error
        assert missing['kind'] == 'missing' and 'nodes' not in missing, missing
        first = ras['communicators'][0]['ranks']
        assert all('172.17.0.2' in n.daemon.api('GET', '/v1/status')[1]['addresses']
                   for n in nodes)
        assert [r.get('node') for r in first] == [None, 'a', 'b'], first  # 172.17.0.2: both's
        out = ctl('hang', '--hosts', 'a,b', '--transport', t).stdout
        assert '  rank 2 (b (%s) pid 5151) behind on AllReduce' % nodes[1].ip in out, out
        assert '  rank 3 (10.0.0.2 pid 5252) did not answer' in out, out
    finally:
        for n in nodes:
            n.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_a_hundred_nodes_are_asked_64_at_a_time(tmp_path):
    """The fan-out's window: 100 nodes whose transport answers a canned reply after 0.3 s
    (no daemon needed), each logging when it ran: every node's row comes back with its host,
    at most 64 transports ran at once, and many did (not one after the other)."""
    log = tmp_path / 'log'
    body = '{"columns": ["one"], "rows": [[1]], "truncated": false}'
    reply = ('HTTP/1.1 200 OK\\r\\nX-Probed-Version: %s\\r\\nContent-Type: application/json'
             '\\r\\nContent-Length: %d\\r\\n\\r\\n%s' % (version(), len(body), body))
    t = ("echo S $(date +%%s%%N) >> %s; sleep 0.3; printf '%s'; echo E $(date +%%s%%N) >> %s"
         " # {host}" % (log, reply, log))
    r = ctl('cluster', 'query', 'SELECT 1 AS one', '--hosts', 'n[000-099]', '--transport', t,
            '--format', 'json')
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)['rows']
    assert sorted(h for h, _ in rows) == ['n%03d' % i for i in range(100)], rows
    events = sorted((int(ts), kind) for kind, ts in
                    (l.split() for l in log.read_text().splitlines()))
    running = peak = 0
    for _, kind in events:
        running += 1 if kind == 'S' else -1
        peak = max(peak, running)
    assert 8 < peak <= 64, peak  # 64 here: the window, full


def version():
    return subprocess.run([PROBECTL, '--version'], stdout=subprocess.PIPE,
                          text=True).stdout.split()[1]


def test_over_ssh_a_gloo_job_across_two_nodes():
    """Two nodes on a network of their own, each with a daemon and an sshd; a real gloo job
    of 2 x 4 ranks across them, rank 5 stalled before an all_reduce."""
    if not os.path.exists('/usr/sbin/sshd'):
        pytest.fail('openssh-server is not installed (scripts/setup.sh installs it)')
    wd = workdir()
    nodes = []
    try:
        nodes = [Node(name, i, wd, network=True) for i, name in enumerate(('a', 'b'))]
        keys = Keys(wd, nodes)
        for n in nodes:
            n.start_sshd(keys)
        procs = []
        for i, n in enumerate(nodes):
            for local in range(RANKS_PER_NODE):
                env = dict(os.environ, RANK=str(i * RANKS_PER_NODE + local),
                           LOCAL_RANK=str(local), WORLD_SIZE=str(2 * RANKS_PER_NODE),
                           MASTER_ADDR=nodes[0].ip, MASTER_PORT='29511', STALL_RANK='5',
                           GLOO_SOCKET_IFNAME='pn' + n.name, OMP_NUM_THREADS='1')
                procs.append(n.spawn([PY, os.path.join(TARGETS, 'gloo_job.py')], env=env,
                                     ready=True))
        Node.wait_ready(procs, timeout=300)
        # the default transport, ssh, as a user runs it (the ssh on PATH reads the test's keys)
        env = dict(os.environ, PATH=keys.bin + ':' + os.environ['PATH'])
        r = ctl('cluster', 'attach', '--match', r'gloo_job\.py', '--hosts', 'a,b', env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert 'a: 4 attached' in r.stdout and 'b: 4 attached' in r.stdout, r.stdout
        r = ctl('hang', '--hosts', 'a,b', '--json', env=env)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        first, rest = doc['groups']
        assert first['ranks'] == '5' and first['hosts'] == 'b', doc
        assert first['stack'][0]['function'] == 'load_batch', first
        assert rest['ranks'] == '0-4,6-7' and rest['hosts'] == 'a,b', rest
        assert any(f['function'] == 'train_step' for f in rest['stack']), rest
        r = ctl('cluster', 'query', 'SELECT DISTINCT t.rank FROM samples s JOIN targets t'
                ' ON t.id = s.target_id', '--hosts', 'a,b', '--format', 'json', env=env)
        assert r.returncode == 0, r.stderr
        assert sorted(map(tuple, json.loads(r.stdout)['rows'])) == \
            [('a', 0), ('a', 1), ('a', 2), ('a', 3), ('b', 4), ('b', 5), ('b', 6), ('b', 7)]

        # another user, over ssh to the same node: sees none of root's processes, may not
        # attach one, and is told so
        user = ensure_ssh_user()
        for n in nodes:
            os.chmod(n.daemon.socket, 0o666)
        uenv = dict(env, HOME=wd)
        ucfg = ['ssh -F %s -i %s -l %s -T {host} probectl proxy'
                % (keys.config, keys.key_for(user), user)]
        r = ctl('cluster', 'list', '--hosts', 'a', '--transport', ucfg[0], env=uenv, user=user)
        assert r.returncode == 0 and 'gloo_job' not in r.stdout, r.stdout + r.stderr
        pid = json.loads(ctl('-H', 'a', 'list', '--json', env=env).stdout)['targets'][0]['pid']
        r = ctl('-H', 'a', '--transport', ucfg[0], 'attach', pid, env=uenv, user=user)
        assert r.returncode == 1 and 'permission denied (uids 0/0/0' in r.stderr, r.stderr

        # a node whose daemon stopped is named; the other still answers
        nodes[1].stop_daemon()
        r = ctl('cluster', 'list', '--hosts', 'a,b', env=env)
        assert r.returncode == 1 and 'no daemon on b' in r.stderr, r.stderr
        assert r.stdout.count('gloo_job.py') == 4, r.stdout
        r = ctl('cluster', 'list', '--hosts', 'a,b,c', env=env)
        assert 'cannot reach c over ssh' in r.stderr, r.stderr
    finally:
        for n in nodes:
            n.close()
        shutil.rmtree(wd, ignore_errors=True)


def ensure_ssh_user():
    """A user with a shell (sshd runs its commands through it), not root."""
    name = 'probedssh'
    if subprocess.run(['id', name], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(['useradd', '--no-create-home', '--shell', '/bin/sh', name], check=True)
    # no password, and not locked ("!"): sshd without PAM refuses a locked account's keys
    subprocess.run(['usermod', '-p', '*', name], check=True)
    ensure_test_user()
    return name


def traced_gloo_job(d, procs, **env):
    """The 4 ranks of gloo_job.py (@env added to theirs) started (appended to @procs, which the
    caller kills), past READY, attached to @d with `torch on --comm-only`."""
    env_base = dict(os.environ, WORLD_SIZE='4', MASTER_ADDR='127.0.0.1', OMP_NUM_THREADS='1',
                    **env)
    for rank in range(4):
        procs.append(subprocess.Popen([PY, os.path.join(TARGETS, 'gloo_job.py')],
                                      env=dict(env_base, RANK=str(rank)),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    Node.wait_ready(procs)
    for p in procs:
        d.ctl('attach', p.pid, check=True)
        r = d.ctl('torch', p.pid, 'on', '--comm-only')
        assert r.returncode == 0 and 'collective tracing on' in r.stdout, r.stdout + r.stderr


def test_collectives_traced_and_hang_names_who_never_arrived():
    """A 4-rank gloo job with collective tracing on (probectl torch PID on --comm-only); then
    rank 2 stalls before an all_reduce: comm_metrics has every call of every rank (one
    sequence number per collective on all ranks, sends and receives with both ends), and
    `hang` says ranks 0,1,3 wait in that all_reduce and rank 2's last call was the one before;
    and so does Prometheus (each rank's latest number, how long it has waited, its calls)."""
    from conftest import free_port
    from prom import http_get
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    wd = workdir()
    flag = os.path.join(wd, 'stall')
    procs = []
    try:
        traced_gloo_job(d, procs, MASTER_PORT='29561', STALL_RANK='2', STALL_FILE=flag)
        wait_for(lambda: d.rows('SELECT count(DISTINCT rank) FROM comm_metrics'
                                " WHERE op = 'irecv' AND latency_ms > 0")[0][0] == 4, 60,
                 'a traced ring of isend/irecv on every rank')
        open(flag, 'w').close()

        def stalled():
            """Ranks 0,1,3 in flight in one collective S, rank 2's last collective S-1, and every
            rank's S-1 stored. Rows in flight are each rank's state at its last drain (once a
            second): a moment before the stall, running ranks are in flight too, in various
            collectives; so the state must also hold two drains apart."""
            q = ("SELECT (SELECT group_concat(rank || ':' || seq) FROM (SELECT rank, seq FROM"
                 " comm_metrics WHERE in_flight AND seq_source = 'c10d' ORDER BY rank)),"
                 " (SELECT max(seq) FROM comm_metrics WHERE rank = 2 AND seq_source = 'c10d'),"
                 " (SELECT count(DISTINCT rank) FROM comm_metrics WHERE seq_source = 'c10d' AND"
                 " seq = (SELECT max(seq) FROM comm_metrics WHERE rank = 2"
                 " AND seq_source = 'c10d'))")
            flying, last2, ranks_at = d.rows(q)[0]
            top = (last2 or 0) + 1
            return flying == '0:%d,1:%d,3:%d' % (top, top, top) and ranks_at == 4
        wait_for(stalled, 60, 'ranks 0,1,3 in flight in the collective rank 2 never reached')
        time.sleep(2.5)
        assert stalled(), 'two drains later, the same'
        # Prometheus: the waiting ranks' latest number is one past the stalled rank's, they
        # have waited since the stall, and each rank's calls and bytes are its stored rows'
        text = http_get('http://127.0.0.1:%d/metrics' % port)[1]

        def value(name, pid):
            line = [x for x in text.splitlines() if x.startswith('%s{pid="%d"' % (name, pid))]
            return float(line[0].rsplit(' ', 1)[1]) if line else None
        top = d.rows("SELECT max(seq) FROM comm_metrics WHERE seq_source = 'c10d'")[0][0]
        for rank, p in enumerate(procs):
            seq, waited = value('probed_comm_seq', p.pid), value('probed_comm_in_flight_seconds',
                                                                 p.pid)
            calls, nbytes = (value('probed_comm_calls_total', p.pid),
                             value('probed_comm_bytes_total', p.pid))
            stored = d.rows("SELECT count(*), sum(bytes) FROM comm_metrics WHERE rank = %d AND"
                            " latency_ms IS NOT NULL AND seq_source <> 'ddp'" % rank)[0]
            assert seq == (top - 1 if rank == 2 else top), (rank, seq, top)
            assert (waited == 0) if rank == 2 else waited >= 2.5, (rank, waited)
            assert [calls, nbytes] == stored and calls >= 10, (rank, calls, nbytes, stored)
            assert value('probed_comm_seconds_total', p.pid) > 0
        # one sequence number per collective, the same on every rank: from the first one every
        # rank traced (they were turned on one after the other) to the last all of them did
        rows = d.rows("SELECT seq, count(*), count(DISTINCT rank), min(seq_source) FROM"
                      " comm_metrics WHERE op IN ('all_reduce', 'broadcast') AND NOT in_flight"
                      " AND seq >= (SELECT max(first) FROM (SELECT min(seq) AS first FROM"
                      " comm_metrics WHERE seq_source = 'c10d' GROUP BY rank))"
                      " GROUP BY seq ORDER BY seq")
        firsts = d.rows("SELECT rank, min(seq), count(*) FROM comm_metrics WHERE seq_source = 'c10d'"
                        " GROUP BY rank")
        assert len(rows) >= 10 and all(src == 'c10d' for *_, src in rows), (rows, firsts)
        assert all(n == 4 and ranks == 4 for _, n, ranks, _ in rows), ([r for r in rows if r[1] != 4], firsts, d.rows("select seq, group_concat(rank || ':' || op || ':' || call_id, ' ') from (select * from comm_metrics where seq_source='c10d' order by rank) group by seq order by seq desc limit 30"))
        assert [b - a for (a, *_), (b, *_) in zip(rows, rows[1:])] == [1] * (len(rows) - 1)
        # a ring: each rank's irecv comes from the rank before it; bytes and dtype known
        ring = d.rows("SELECT DISTINCT src_rank, dst_rank, bytes, dtype FROM comm_metrics"
                      " WHERE op = 'irecv' ORDER BY dst_rank")
        assert ring == [[3, 0, 4096, 'float32'], [0, 1, 4096, 'float32'],
                        [1, 2, 4096, 'float32'], [2, 3, 4096, 'float32']], ring
        sends = d.rows("SELECT DISTINCT src_rank, dst_rank FROM comm_metrics WHERE op = 'isend'"
                       " ORDER BY src_rank")
        assert sends == [[0, 1], [1, 2], [2, 3], [3, 0]], sends
        # the seeds' query, and the late arriver of each collective (docs/cluster.md)
        assert len(d.rows('SELECT src_rank, dst_rank, avg(latency_ms) FROM comm_metrics'
                          ' GROUP BY src_rank, dst_rank')) >= 8
        late = d.rows(LATE_ARRIVER_SQL)
        assert late and all(0 <= rank <= 3 for _, _, rank, _ in late), late

        r = ctl('hang', '--json', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        (coll,) = doc['collectives']
        assert coll['op'] == 'all_reduce' and coll['waiting'] == '0-1,3', coll
        assert doc['desyncs'] == [] and coll['differ'] == [], doc  # a stall, not a desync
        (behind,) = coll['behind']
        assert behind['rank'] == 2 and behind['seq'] == coll['seq'] - 1, coll
        assert not behind['in_flight']
        stalled = [g for g in doc['groups'] if g['ranks'] == '2'][0]
        assert stalled['stack'][0]['function'] == 'load_batch', stalled
        # the waiting ranks' stacks are the job's: the tracer's wrapper frame around
        # all_reduce (CommTracer.wrapper.<locals>.traced, <probed torch>) is not in them
        waiting = [g for g in doc['groups'] if g['ranks'] == '0-1,3'][0]
        assert any(f['function'].endswith('all_reduce') for f in waiting['stack']), waiting
        assert not [f for g in doc['groups'] for f in g['stack']
                    if (f.get('file') or '').startswith('<probed')], doc['groups']
        # (probed's markers, '[n frames elided]' in a deep stack, are its words and stay)
        assert not d.rows("SELECT count(*) FROM sample_frames WHERE file LIKE '<probed%'"
                          " AND func NOT LIKE '[%'")[0][0]
        r = ctl('hang', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert ('ranks 0-1,3 wait in all_reduce #%d of group 0; rank 2\'s last was %s #%d of'
                ' group 0' % (coll['seq'], behind['op'], behind['seq'])) in r.stdout, r.stdout

        # off: the job's functions are torch's own again
        r = d.ctl('torch', procs[0].pid, 'off')
        assert r.returncode == 0, r.stderr
        r = d.ctl('eval', procs[0].pid, 'import torch.distributed as d;'
                  " print(hasattr(d.all_reduce, '_probed_original'), d.all_reduce.__module__)")
        assert r.stdout.split() == ['False', 'torch.distributed.distributed_c10d'], r.stdout
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_hang_names_the_first_collective_the_ranks_disagree_on():
    """A 4-rank gloo job with collective tracing on; then rank 2 adds a broadcast the others
    do not call (gloo hangs every rank): `hang` says the ranks disagree at that number, ranks
    0,1,3 in all_reduce and rank 2 in broadcast, rather than all four "waiting in all_reduce"
    (what it said before: the four were in flight at one number)."""
    d = Daemon()
    wd = workdir()
    flag = os.path.join(wd, 'desync')
    procs = []
    try:
        traced_gloo_job(d, procs, MASTER_PORT=str(29400 + os.getpid() % 90), DESYNC_RANK='2',
                        DESYNC_FILE=flag)
        # every rank traced through a broadcast that all of them called (rank 0's root)
        wait_for(lambda: d.rows("SELECT count(DISTINCT rank) FROM comm_metrics WHERE"
                                " op = 'broadcast' AND NOT in_flight")[0][0] == 4, 60,
                 'a traced broadcast on every rank')
        r = ctl('hang', '--json', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert r.returncode == 0 and json.loads(r.stdout)['desyncs'] == [], r.stdout
        open(flag, 'w').close()

        def stuck():
            """Every rank in flight at one number S, rank 2 in broadcast, the others in
            all_reduce; held two drains apart (rows in flight are the state at a drain)."""
            rows = d.rows("SELECT rank, seq, op FROM comm_metrics WHERE in_flight AND"
                          " seq_source = 'c10d' ORDER BY rank")
            seqs = {seq for _, seq, _ in rows}
            return (len(rows) == 4 and len(seqs) == 1 and
                    [op for *_, op in rows] == ['all_reduce', 'all_reduce', 'broadcast',
                                                'all_reduce']) and seqs.pop()
        top = wait_for(stuck, 60, 'rank 2 in broadcast, the others in all_reduce, at one number')
        time.sleep(2.5)
        assert stuck() == top, 'two drains later, the same'

        r = ctl('hang', '--json', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        (desync,) = doc['desyncs']
        assert desync['group'] == '0' and desync['seq'] == top, desync
        assert desync['calls'] == [
            {'ranks': '0-1,3', 'count': 3, 'op': 'all_reduce', 'bytes': 4096, 'dtype': 'float32',
             'root': None},
            {'ranks': '2', 'count': 1, 'op': 'broadcast', 'bytes': 4096, 'dtype': 'float32',
             'root': 0}], desync
        assert desync['not_reached'] == '', desync
        (coll,) = doc['collectives']
        assert coll['op'] == 'all_reduce' and coll['seq'] == top and coll['waiting'] == '0-1,3'
        assert coll['behind'] == [] and [(b['rank'], b['op'], b['seq']) for b in coll['differ']] \
            == [(2, 'broadcast', top)], coll
        odd = [g for g in doc['groups'] if g['ranks'] == '2'][0]
        assert any(f['function'] == 'extra_broadcast' for f in odd['stack']), odd
        r = ctl('hang', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert ('desync in group 0 at #%d: ranks 0-1,3 called all_reduce (4096 B float32),'
                ' rank 2 broadcast (4096 B float32, root 0): the ranks disagree from this'
                ' collective on' % top) in r.stdout, r.stdout
        assert ('ranks 0-1,3 wait in all_reduce #%d of group 0; rank 2 waits in broadcast #%d'
                ' of group 0 instead' % (top, top)) in r.stdout, r.stdout
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


# docs/cluster.md: each collective's last rank to arrive, and by how much
LATE_ARRIVER_SQL = '''
SELECT group_name, seq, rank AS late_rank, (ts_ns - first_ns) / 1e6 AS late_by_ms
FROM (SELECT group_name, seq, rank, ts_ns,
             min(ts_ns) OVER (PARTITION BY group_name, seq) AS first_ns,
             max(ts_ns) OVER (PARTITION BY group_name, seq) AS last_ns,
             count(*) OVER (PARTITION BY group_name, seq) AS ranks
      FROM comm_metrics WHERE seq_source = 'c10d')
WHERE ts_ns = last_ns AND ranks > 1
ORDER BY seq DESC LIMIT 20
'''


def traced_ranks(d, script, env, procs):
    """Two ranks of @script started (appended to @procs, which the caller kills), each past its
    READY {...} line, attached to @d with `torch on --comm`; their READY documents."""
    for rank in range(2):
        procs.append(subprocess.Popen([PY, os.path.join(TARGETS, script)],
                                      env=dict(env, RANK=str(rank)),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    infos = []
    for p in procs:
        line = p.stdout.readline().decode()
        assert line.startswith('READY'), p.stderr.read().decode()
        infos.append(json.loads(line.split(' ', 1)[1]))
    for p in procs:
        d.ctl('attach', p.pid, check=True)
        r = d.ctl('torch', p.pid, 'on', '--comm')
        assert r.returncode == 0 and 'collective tracing on' in r.stdout, r.stdout + r.stderr
    return infos


def test_ddp_gradient_all_reduce_from_cpp_is_recorded_and_hang_names_the_stalled_rank():
    """A 2-rank gloo DistributedDataParallel job (ddp_job.py) with collective tracing on: DDP's
    gradient all_reduce, issued by its C++ Reducer (no Python function sees it), is one row per
    step and rank carrying the bytes of every parameter, numbered by c10d as on the other rank;
    ddp_step_times says the slower rank (it sleeps 100 ms before its backward) waits least. Then
    rank 1 stalls before a forward: `hang` says rank 0 waits in the bucket all_reduce rank 1
    never reached."""
    from conftest import free_port
    from prom import http_get
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    flag = os.path.join(workdir(), 'stall')
    env_base = dict(os.environ, WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
                    MASTER_PORT=str(29600 + os.getpid() % 300), STALL_RANK='1', STALL_FILE=flag,
                    SLOW_RANK='1', SLOW_S='0.1', OMP_NUM_THREADS='1')
    procs = []
    try:
        infos = traced_ranks(d, 'ddp_job.py', env_base, procs)
        param_bytes = infos[0]['param_bytes']
        assert param_bytes == 1597480

        def per_rank():
            return d.rows("SELECT rank, count(*), min(bytes), max(bytes), min(dtype) FROM"
                          " comm_metrics WHERE seq_source = 'ddp' AND NOT in_flight"
                          " GROUP BY rank ORDER BY rank")
        rows = wait_for(lambda: (lambda r: r if len(r) == 2 and min(n for _, n, *_ in r) >= 8
                                 else None)(per_rank()), 90, 'DDP all_reduce rows on both ranks')
        # every step's gradients: all of the model's parameters, every time
        assert [(b0, b1, t) for _, _, b0, b1, t in rows] == [(param_bytes, param_bytes,
                                                              'float')] * 2, rows
        # one c10d number per step's collectives, the same on both ranks
        both = wait_for(lambda: (lambda r: r if len(r) >= 8 else None)(d.rows(
            "SELECT seq, count(DISTINCT rank) FROM comm_metrics WHERE seq_source = 'ddp' AND NOT"
            " in_flight AND seq IS NOT NULL GROUP BY seq HAVING count(DISTINCT rank) = 2")), 60,
            'steps numbered alike on both ranks')
        # unnumbered: the steps before the trace saw a step end (the one DDP had timed before,
        # and the first traced one): c10d's counter was not read before them
        unnumbered = d.rows("SELECT rank, count(*) FROM comm_metrics WHERE seq_source = 'ddp'"
                            " AND seq IS NULL GROUP BY rank")
        assert all(n <= 2 for _, n in unnumbered), unnumbered
        seqs = [s for s, _ in both]
        assert all(b - a == 2 for a, b in zip(seqs, seqs[1:])), seqs  # two buckets a step
        # where the time went: rank 1 computes 100 ms longer, so rank 0 waits for it
        waits = d.rows("SELECT rank, avg(comm_exposed_ms), avg(forward_ms + backward_ms), count(*),"
                       " min(buckets), min(bytes) FROM ddp_step_times GROUP BY rank ORDER BY rank")
        assert [w[4:] for w in waits] == [[2, param_bytes]] * 2, waits
        assert waits[0][1] > waits[1][1] + 15, waits  # the slow rank waited least
        # and Prometheus can tell it too: wait per step, per rank
        text = http_get('http://127.0.0.1:%d/metrics' % port)[1]
        per = {}
        for p in procs:
            def value(name):
                line = [x for x in text.splitlines()
                        if x.startswith('%s{pid="%d"' % (name, p.pid))]
                return float(line[0].rsplit(' ', 1)[1]) if line else None
            per[p.pid] = (value('probed_ddp_comm_wait_seconds_total'),
                          value('probed_ddp_steps_total'))
        (w0, n0), (w1, n1) = per[procs[0].pid], per[procs[1].pid]
        assert n0 >= 5 and n1 >= 5 and w0 / n0 > w1 / n1 + 0.015, per
        # and probectl says it, over every node of the job (here one, reached as a node)
        t = 'PROBED_SOCKET=%s %s proxy # {host}' % (d.socket, PROBECTL)
        r = ctl('cluster', 'stragglers', '--hosts', 'me', '--transport', t, '--since', '10m')
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith('rank 1 (me, pid %d) is the straggler: the others wait'
                                   % procs[1].pid), r.stdout
        r = ctl('cluster', 'stragglers', '--hosts', 'me', '--transport', t, '--json')
        doc = json.loads(r.stdout)
        assert [row[1] for row in doc['rows']] == [1, 0], doc  # the one waiting least first
        open(flag, 'w').close()

        def stalled():
            """Rank 0 in flight in DDP's all_reduce S, the first of a step; rank 1's last step
            the one before (its two buckets S-2 and S-1)."""
            q = ("SELECT (SELECT group_concat(rank || ':' || seq) FROM comm_metrics WHERE"
                 " in_flight AND seq_source = 'ddp'),"
                 " (SELECT max(seq) FROM comm_metrics WHERE rank = 1 AND seq IS NOT NULL)")
            flying, last1 = d.rows(q)[0]
            return flying and last1 and flying == '0:%d' % (last1 + 2) and (flying, last1)
        wait_for(stalled, 60, 'rank 0 in flight in the all_reduce rank 1 never reached',
                 lambda: d.rows("SELECT rank, seq, state, call_id FROM comm_metrics"
                                " ORDER BY rank, call_id"))
        time.sleep(2.5)
        flying, last1 = stalled() or (None, None)
        assert flying, 'two drains later, the same'
        r = ctl('hang', '--json', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        (coll,) = doc['collectives']
        assert coll['op'] == 'all_reduce' and coll['waiting'] == '0', coll
        assert coll['seq'] == last1 + 2, (coll, last1)
        (behind,) = coll['behind']
        assert behind['rank'] == 1 and behind['seq'] < coll['seq'] and not behind['in_flight']
        assert coll['source'] == behind['source'] == 'ddp', coll
        r = ctl('hang', env=dict(os.environ, PROBED_SOCKET=d.socket))
        assert ("rank 0 waits in DDP's gradient all_reduce #%d of group 0; rank 1's last was DDP's"
                " gradient all_reduce #%d of group 0" % (coll['seq'], behind['seq'])) in r.stdout, \
            r.stdout
        group = [g for g in doc['groups'] if g['ranks'] == '1'][0]
        assert group['stack'][0]['function'] == 'load_batch', group
        # off, on the rank blocked in DDP's all_reduce (the Reducer's lock held): answered,
        # and the row in flight is no longer 'issued' (hang would take it for a rank still
        # waiting there): its end was not seen
        r = d.ctl('torch', procs[0].pid, 'off', timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = d.rows("SELECT state, in_flight FROM comm_metrics WHERE rank = 0 AND seq = %d"
                      % coll['seq'])
        assert rows == [['untraced', 0]], rows
        assert d.rows("SELECT count(*) FROM comm_metrics WHERE rank = 0 AND in_flight") == [[0]]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        d.kill()


@pytest.mark.skipif(SANITIZED, reason='not run under the sanitizers: its C paths (the comm rows'
                    ' of a drain) are the DDP test\'s')
def test_a_sharded_jobs_all_gather_and_all_reduce_bytes_are_its_parameters():
    """A 2-rank ZeRO-3-style job (sharded_job.py, as FSDP shards parameters): per step and rank,
    the all_gathers send the rank's shard of every parameter (half of the model) and the
    gradient all_reduce all of it; each step's rows (between two optimizer steps) say so."""
    d = Daemon()
    env_base = dict(os.environ, WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
                    MASTER_PORT=str(29900 + os.getpid() % 90), OMP_NUM_THREADS='1',
                    SLOW_RANK='0', SLOW_S='0.1')
    procs = []
    try:
        info = traced_ranks(d, 'sharded_job.py', env_base, procs)[0]
        assert info['shard_bytes'] * 2 == info['param_bytes'] == 4 * (64 * 128 + 128 + 128 * 32 + 32)
        # each whole step of each rank: the calls between its start and the next step's
        q = ("SELECT c.rank, s.step, c.op, sum(c.bytes), count(*) FROM torch_step_times s"
             " JOIN comm_metrics c ON c.target_id = s.target_id AND c.ts_ns >= s.ts_ns AND"
             " c.ts_ns < s.ts_ns + s.duration_ns WHERE NOT c.in_flight"
             " GROUP BY c.rank, s.step, c.op ORDER BY c.rank, s.step, c.op")
        def enough(r):
            steps = {(rank, step) for rank, step, *_ in r}
            return r if all(len([k for k in steps if k[0] == rank]) >= 5 for rank in (0, 1)) \
                else None
        rows = wait_for(lambda: enough(d.rows(q)), 60, 'five whole steps of each rank traced')
        by_step = {}
        for rank, step, op, nbytes, n in rows:
            by_step.setdefault((rank, step), {})[op] = (nbytes, n)
        assert len({rank for rank, _ in by_step}) == 2
        for key, ops in by_step.items():
            assert ops == {'all_gather': (info['shard_bytes'], info['params']),
                           'all_reduce': (info['param_bytes'], 1)}, (key, ops)
        # without DDP, the straggler is the rank that spends least in the collectives: rank 0
        # sleeps 100 ms before each all_reduce, rank 1 waits for it there
        t = 'PROBED_SOCKET=%s %s proxy # {host}' % (d.socket, PROBECTL)
        r = ctl('cluster', 'stragglers', '--hosts', 'me', '--transport', t)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith('rank 0 (me, pid %d) is the straggler: the others spend'
                                   % procs[0].pid), r.stdout
    finally:
        for p in procs:
            p.kill()
            p.wait()
        d.kill()
