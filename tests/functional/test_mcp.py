"""probectl mcp: a Model Context Protocol server, driven by the official SDK's client.

tests/mcp/session.mjs runs a scripted session with @modelcontextprotocol/sdk's Client (npm,
the version tests/mcp/package-lock.json pins, installed under the build folder by `npm ci`)
over stdio against a real daemon and real targets: initialize, list the tools and resources,
call each tool, read each resource. Actions (eval, attach, detach) only with --allow-actions;
another user's process stays invisible.
"""
import json
import os
import shutil
import subprocess

import pytest

from conftest import TARGETS, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_SRC = os.path.join(HERE, '..', 'mcp')
READ_TOOLS = {'list_targets', 'backtrace', 'query', 'hot_functions', 'flamegraph', 'memory',
              'torch_summary', 'collectives', 'hang', 'nccl', 'crashes'}
ACTION_TOOLS = {'attach', 'detach', 'eval'}


@pytest.fixture(scope='module')
def client_dir():
    """The SDK client, installed once per build folder (again when the lockfile changes)."""
    build = os.environ.get('PROBED_BUILD', os.path.join(HERE, '..', '..', 'build'))
    where = os.path.join(os.path.abspath(build), 'mcp-client')
    for tool in ('node', 'npm'):
        assert shutil.which(tool), '%s is missing: scripts/setup.sh installs it' % tool
    os.makedirs(where, exist_ok=True)
    lock = os.path.join(CLIENT_SRC, 'package-lock.json')
    stamp = os.path.join(where, 'node_modules', '.probed-lock')
    with open(lock, encoding='utf-8') as f:
        want = f.read()
    for name in ('package.json', 'package-lock.json', 'session.mjs'):
        shutil.copy(os.path.join(CLIENT_SRC, name), where)
    if not os.path.exists(stamp) or open(stamp, encoding='utf-8').read() != want:
        subprocess.run(['npm', 'ci', '--no-audit', '--no-fund', '--loglevel=error'], cwd=where,
                       check=True, timeout=600)
        with open(stamp, 'w', encoding='utf-8') as f:
            f.write(want)
    os.chmod(where, 0o755)
    return where


def session(daemon, client_dir, calls, resources=(), actions=False, user=None, web=None):
    """The SDK client's session: with probectl mcp on stdio, or over @web's /mcp."""
    cmd = ['node', os.path.join(client_dir, 'session.mjs'), daemon.probectl, daemon.socket,
           json.dumps({'calls': [{'tool': t, 'args': a} for t, a in calls],
                       'resources': list(resources)})]
    env = dict(os.environ)
    if web:
        env.update(MCP_URL=web.base + '/mcp', MCP_TOKEN=web.token)
    if actions:
        cmd.append('--allow-actions')
    if user:
        cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=300, cwd=client_dir, env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    # the server's stderr comes through the client: a sanitizer's report at its exit too
    assert 'Sanitizer' not in r.stderr, r.stderr
    return json.loads(r.stdout)


def result_of(out, i):
    call = out['calls'][i]
    assert 'result' in call, call
    return call['result']


def text_of(result):
    return ''.join(c.get('text', '') for c in result['content'])


def test_a_session_with_the_sdk_client(daemon, client_dir, target_factory):
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, '--rate', '200', check=True)
    wait_for(lambda: daemon.rows("SELECT count(*) FROM sample_frames WHERE pid = %d"
                                 " AND func = 'spin_alpha'" % t.pid)[0][0] > 5,
             what='samples of the target')
    wait_for(lambda: daemon.rows("SELECT count(*) FROM memory_usage m JOIN targets g ON"
                                 " g.id = m.target_id WHERE g.pid = %d" % t.pid)[0][0] > 0,
             what='a memory reading of the target (memory_interval: 1 s)')
    calls = [('list_targets', {}),
             ('backtrace', {'pid': t.pid}),
             ('backtrace', {'pid': t.pid, 'tasks': True}),
             ('query', {'sql': "SELECT task, count(*) FROM thread_states GROUP BY task",
                        'pid': t.pid}),
             ('hot_functions', {'pid': t.pid, 'limit': 5}),
             ('flamegraph', {'pid': t.pid, 'top': 3, 'tasks': True, 'idle': True}),
             ('memory', {'pid': t.pid}),
             ('collectives', {'pid': t.pid}),
             ('crashes', {}),
             ('hang', {}),
             ('torch_summary', {'pid': t.pid}),
             ('eval', {'pid': t.pid, 'code': '6 * 7'}),
             ('backtrace', {'pid': 'not a pid'}),
             ('backtrace', {'pid': t.pid, 'depth': 3}),
             ('query', {'sql': 'DELETE FROM samples'}),
             ('no_such_tool', {}),
             ('nccl', {'pid': t.pid})]
    out = session(daemon, client_dir, calls,
                  resources=['probed://schema', 'probed://docs/query.md', 'probed://nothing'])
    daemon.ctl('detach', t.pid, check=True)

    assert out['server']['name'] == 'probed' and 'list_targets' in out['instructions']
    assert set(out['capabilities']) >= {'tools', 'resources'}
    tools = {x['name']: x for x in out['tools']}
    assert set(tools) == READ_TOOLS, set(tools)  # no action without --allow-actions
    for x in tools.values():
        assert x['inputSchema']['type'] == 'object' and x['description'], x
        assert x['annotations']['readOnlyHint'] is True, x

    listed = result_of(out, 0)['structuredContent']['targets']
    assert [x for x in listed if x['pid'] == t.pid and x['state'] == 'sampling'], listed
    bt = result_of(out, 1)['structuredContent']
    funcs = {f['function'] for th in bt['threads'] for f in th['frames']}
    assert 'spin_plain' in funcs and bt['pid'] == t.pid, funcs
    doc = result_of(out, 2)['structuredContent']  # tasks that switch every 20 ms: each read
    assert doc['total'] == 5 and len(doc['tasks']) == 5 and doc['torn'] == 0, doc
    names = {x['name'] for x in doc['tasks']}  # main and anon: named Task-N by asyncio
    assert all(n in ('alpha-task', 'beta-task', 'sleepy') or n.startswith('Task-')
               for n in names), names
    assert [x for x in doc['tasks'] if x['frames'] and x['frames'][0]['func'] == 'main'], doc
    rows = dict(result_of(out, 3)['structuredContent']['rows'])
    assert rows.get('alpha-task', 0) > 0, rows
    hot = result_of(out, 4)['structuredContent']
    assert hot['columns'][:2] == ['func', 'file'] and hot['rows'][0][0] == 'spin', hot
    flame = result_of(out, 5)['structuredContent']
    assert len(flame['stacks']) <= 3 and flame['total_samples'] >= flame['stacks'][0]['samples']
    assert flame['stacks'][0]['samples'] >= flame['stacks'][-1]['samples']  # heaviest first
    assert any(s['stack'].startswith('<task ') for s in flame['stacks']), flame
    memory = text_of(result_of(out, 6))
    assert 'pid %d' % t.pid in memory and 'RSS' in memory, memory
    assert result_of(out, 7)['structuredContent']['rows'] == []
    assert result_of(out, 8)['structuredContent'] == {'crashes': []}
    assert '1 process' in text_of(result_of(out, 9)), text_of(result_of(out, 9))
    torch = result_of(out, 10)
    assert torch['isError'] and 'torch' in text_of(torch), torch  # not traced: said so
    refused = result_of(out, 11)
    assert refused['isError'] and '--allow-actions' in text_of(refused), refused
    assert 'integer' in text_of(result_of(out, 12)) and result_of(out, 12)['isError']
    assert "unknown argument 'depth'" in text_of(result_of(out, 13))
    assert result_of(out, 14)['isError'] and 'may not be modified' in text_of(result_of(out, 14))
    assert 'error' in out['calls'][15] and 'unknown tool' in out['calls'][15]['error']
    nccl = result_of(out, 16)  # a process without NCCL: said why (test_nccl.py asks a RAS)
    assert nccl['isError'] and 'no NCCL RAS in it' in text_of(nccl), nccl

    assert {r['uri'] for r in out['resources']} == {'probed://schema', 'probed://docs/query.md'}
    schema = {x['name']: x for x in json.loads(out['read']['probed://schema'][0]['text'])}
    assert 'task' in schema['sample_frames']['columns'], schema.get('sample_frames')
    assert 'pid' in schema['python.tasks']['columns'] and 'stacks' in schema
    assert out['read']['probed://docs/query.md'][0]['text'].startswith('# Querying probed')
    assert 'not found' in out['read']['probed://nothing']['error']


def test_actions_need_allow_actions(daemon, client_dir, target_factory):
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    out = session(daemon, client_dir,
                  [('attach', {'pid': t.pid, 'rate_hz': 50, 'nccl': True}), ('list_targets', {}),
                   ('eval', {'pid': t.pid, 'code': '6 * 7'}), ('detach', {'pid': t.pid})],
                  actions=True)
    tools = {x['name']: x for x in out['tools']}
    assert set(tools) == READ_TOOLS | ACTION_TOOLS
    assert tools['eval']['annotations']['readOnlyHint'] is False
    assert not result_of(out, 0)['isError'], result_of(out, 0)
    listed = {x['pid']: x for x in result_of(out, 1)['structuredContent']['targets']}
    assert listed[t.pid].get('nccl') is True, listed  # its NCCL calls asked for too
    ev = result_of(out, 2)
    assert not ev['isError'] and '42' in text_of(ev), ev
    assert not result_of(out, 3)['isError'], result_of(out, 3)
    # the eval is recorded as any eval is
    assert daemon.rows("SELECT count(*) FROM evals WHERE code = '6 * 7'")[0][0] >= 1


def test_another_users_process_is_invisible(daemon, client_dir, target_factory):
    """Root's process: a user's session lists nothing, reads nothing and runs nothing in it."""
    from daemon import ensure_test_user
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, check=True)
    out = session(daemon, client_dir,
                  [('list_targets', {}), ('backtrace', {'pid': t.pid}),
                   ('query', {'sql': 'SELECT count(*) FROM samples'}),
                   ('flamegraph', {'pid': t.pid}), ('eval', {'pid': t.pid, 'code': '1'})],
                  actions=True, user=user)
    daemon.ctl('detach', t.pid, check=True)
    assert result_of(out, 0)['structuredContent']['targets'] == []
    bt = result_of(out, 1)
    assert bt['isError'] and 'spin' not in text_of(bt), bt
    assert result_of(out, 2)['structuredContent']['rows'] == [[0]]
    fl = result_of(out, 3)
    assert fl['isError'] or fl['structuredContent']['total_samples'] == 0, fl
    ev = result_of(out, 4)
    # refused, and said why (not a number to look for: the pid itself may hold it)
    assert ev['isError'] and 'permission denied' in text_of(ev), ev


def test_over_http_on_the_web_port(daemon, client_dir, target_factory):
    """probectl web serves MCP at /mcp (streamable HTTP) behind its token: the SDK's client
    reads through it; actions need `web --allow-actions`; without the token, from another
    origin, with an unknown protocol version or by GET it is refused."""
    from test_web import Web
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, '--rate', '200', check=True)
    wait_for(lambda: daemon.rows("SELECT count(*) FROM sample_frames WHERE pid = %d"
                                 " AND func = 'spin_alpha'" % t.pid)[0][0] > 5,
             what='samples of the target')
    w = Web(daemon)
    try:
        out = session(daemon, client_dir,
                      [('list_targets', {}), ('backtrace', {'pid': t.pid}),
                       ('hot_functions', {'pid': t.pid, 'limit': 5}),
                       ('eval', {'pid': t.pid, 'code': '6 * 7'})],
                      resources=['probed://schema'], web=w)
        assert out['server']['name'] == 'probed'
        assert t.pid in [x['pid'] for x in result_of(out, 0)['structuredContent']['targets']]
        assert 'spin_' in text_of(result_of(out, 1))
        assert 'spin' in text_of(result_of(out, 2)), result_of(out, 2)
        ev = result_of(out, 3)
        assert ev['isError'] and 'allow-actions' in text_of(ev), ev
        assert 'sample_frames' in out['read']['probed://schema'][0]['text']
        bearer = 'Authorization: Bearer ' + w.token
        ping = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        post = ('-X', 'POST', '-H', 'Content-Type: application/json', '--data', ping)
        assert w.curl('/mcp', *post)[0] == 403  # no token
        assert w.curl('/mcp', bearer, 'Origin: http://evil.example', *post)[0] == 403
        code, body = w.curl('/mcp', bearer, *post)
        assert code == 200 and json.loads(body) == {'jsonrpc': '2.0', 'id': 1, 'result': {}}
        assert w.curl('/mcp', bearer, 'MCP-Protocol-Version: 1999-01-01', *post)[0] == 400
        assert w.curl('/mcp', bearer)[0] == 405  # GET: no event stream offered
        code, body = w.curl('/mcp', bearer, '-X', 'POST', '--data',
                            '{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        assert code == 202 and body == '', (code, body)
    finally:
        w.close()
        daemon.ctl('detach', t.pid)
    # with --allow-actions, the eval runs (and is recorded as any eval)
    w = Web(daemon, args=('--allow-actions',))
    try:
        out = session(daemon, client_dir, [('attach', {'pid': t.pid, 'rate_hz': 50}),
                                            ('eval', {'pid': t.pid, 'code': '6 * 7'}),
                                            ('detach', {'pid': t.pid})], web=w)
        ev = result_of(out, 1)
        assert not ev['isError'] and '42' in text_of(ev), ev
    finally:
        w.close()


def test_bad_messages_get_errors_and_the_server_goes_on(daemon):
    """Not JSON, a batch, an unknown method, arguments of the wrong shape, a 5 MiB line (over
    the 4 MiB bound, read and dropped): each gets its JSON-RPC error or tool error, and the
    next message its answer."""
    lines = ['{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999"}}',
             'not json', '[1,2]', '{"jsonrpc":"2.0","id":2,"method":"nope"}',
             '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"backtrace",'
             '"arguments":[]}}',
             'x' * (5 << 20),
             '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"query",'
             '"arguments":{"sql":"SELECT 40 + 2"}}}',
             '{"jsonrpc":"2.0","id":5,"method":"ping"}']
    r = subprocess.run([daemon.probectl, 'mcp', '--socket', daemon.socket],
                       input='\n'.join(lines) + '\n', stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert r.returncode == 0 and 'Sanitizer' not in r.stderr, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert out[0]['result']['protocolVersion'] == '2025-11-25'  # ours, for one we do not know
    assert [x.get('error', {}).get('code') for x in out[1:4]] == [-32700, -32600, -32601]
    assert out[4]['result']['isError'] and 'object' in out[4]['result']['content'][0]['text']
    assert out[5]['error']['message'] == 'message too large'
    assert out[6]['result']['structuredContent']['rows'] == [[42]]
    assert out[7] == {'jsonrpc': '2.0', 'id': 5, 'result': {}}
    assert len(out) == 8  # the notification is not answered
